"""The chaos run's periodic schedules: declared on its workers' app, stopped before the
drain, and counted tick by tick at the end."""

from __future__ import annotations

import signal
import subprocess
from collections.abc import Sequence
from datetime import timedelta

from taskq.app import App
from taskq.keys import schedule_task_id
from taskq.results import SIMULATE_TASK
from taskq.settings import Settings, Simulation
from taskq.tools.chaos.flows import flow_tasks
from taskq.tools.chaos.options import ChaosOptions
from taskq.tools.simulation import builtin_app

# Two periods, neither a multiple of the other, so the two schedules' ticks fall mostly
# apart (together every 7 s), and faults land at every phase of each.
PERIODS: dict[str, timedelta] = {
    "chaos-1s": timedelta(seconds=1),
    "chaos-700ms": timedelta(milliseconds=700),
}
# See scheduling_app for why each tick missed while no worker could fire still runs.
POLICY = "all"
# The workers' --app while the schedules fire, and after (modules that build the apps
# on import).
SCHEDULING_APP = "taskq.tools.chaos.worker_app:app"
DRAIN_APP = "taskq.tools.chaos.worker_app:drain_app"
# A share of the run's tasks go by this name, limited to LIMITED_MOST runs at once
# across every worker (see taskq.concurrency): check L1 counts them from the log.
LIMITED_TASK = "chaos.limited"
LIMITED_MOST = 4
# Another share goes by this name, rate-limited across every worker (see taskq.rates):
# the rate check counts its starts from the log. The producer sends them in runs longer
# than the burst, so some of each run are throttled; fast enough that the throttled
# ones (a thousand in a run of 100,000 tasks) do not lengthen a run.
THROTTLED_TASK = "chaos.throttled"
THROTTLED_PER_SECOND = 10
THROTTLED_BURST = 2


def period_ms(name: str) -> int:
    return PERIODS[name] // timedelta(milliseconds=1)


def tick_of(schedule: str, task_id: str) -> int | None:
    """The tick (ms) of `schedule` whose task `task_id` is, or None if it is none of its."""
    prefix = schedule_task_id(schedule, 0)[:-1]
    if not task_id.startswith(prefix):
        return None
    tick = task_id[len(prefix):]
    return int(tick) if tick.isdigit() else None


def limited_app(settings: Settings | None = None,
                simulation: Simulation | None = None) -> App:
    """The simulated task, and the same function as LIMITED_TASK with max_concurrency and
    as THROTTLED_TASK with a rate limit: every worker of the run, before and after the
    schedules stop, applies the limits. On
    a sharded queue, which refuses limits (and workflows), the simulated task alone. The
    workflows' tasks too (see taskq.tools.chaos.flows)."""
    simulation = simulation or Simulation.from_env()
    app = builtin_app(settings, simulation)
    if app.layout is not None:
        return app
    flow_tasks(app, simulation)
    app.task(LIMITED_TASK, max_concurrency=LIMITED_MOST, concurrency_key="account")(
        app.tasks[SIMULATE_TASK].fn)
    app.task(THROTTLED_TASK, rate_limit=f"{THROTTLED_PER_SECOND}/s",
             rate_burst=THROTTLED_BURST)(app.tasks[SIMULATE_TASK].fn)
    return app


def scheduling_app(settings: Settings | None = None,
                   simulation: Simulation | None = None) -> App:
    """The simulated task, also fired by each schedule of PERIODS with a charge, so a
    tick's effect lands in the same ledger (keyed by its task id) as every other task's.

    Policy "all": a tick that came while no worker could fire (every worker killed or
    stopped, Redis paused or restarting) still runs, late. Under "latest" or "skip" such
    a tick is dropped by design, and the check could not tell a tick dropped on purpose
    from one lost; under "all" every tick from the first to the last must have its task,
    so "one task per tick, none missing" is a claim the run can count."""
    app = limited_app(settings, simulation)
    simulate = app.tasks[SIMULATE_TASK]
    for name, every in PERIODS.items():
        # The run's max_retries, as its other tasks have: TLC's trace validation holds
        # every task of the log to one MaxRetries.
        app.periodic(every=every, policy=POLICY, kwargs={"charge": 1}, name=name,
                     max_retries=ChaosOptions.max_retries)(simulate)
    return app


class Firing:
    """Which app the run's workers load: SCHEDULING_APP until `stop`, then DRAIN_APP,
    the same without schedules. Stopping retires every worker that may fire (SIGTERM: each drains
    and exits, and its slot is refilled by a worker without schedules, as a deploy that
    drops a schedule would); once all have exited, no tick can fire again, so the drain
    ends with nothing left to run and no new task appears under the T1 check."""

    def __init__(self) -> None:
        self.on = True
        self.retired: list[subprocess.Popen[bytes]] = []

    def worker_args(self) -> list[str]:
        return ["--app", SCHEDULING_APP if self.on else DRAIN_APP]

    def stop(self, workers: Sequence[subprocess.Popen[bytes]], terminated: set[int]) -> None:
        """Retire `workers`; those whose pid is in `terminated` already drain."""
        self.on = False
        self.retired = [p for p in workers if p.poll() is None]
        for process in self.retired:
            if process.pid not in terminated:
                process.send_signal(signal.SIGTERM)

    @property
    def stopped(self) -> bool:
        """Every worker that could fire has exited."""
        return not self.on and all(p.poll() is not None for p in self.retired)
