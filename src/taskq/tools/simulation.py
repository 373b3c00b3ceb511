"""The seed's simulated handler as a built-in task: work, maybe fail, charge the ledger."""

from __future__ import annotations

import random
import threading
import time

from taskq.app import App
from taskq.context import current_task
from taskq.results import SIMULATE_TASK
from taskq.settings import Settings, Simulation
from taskq.tools.ledger import Ledger


class SimulatedFailure(Exception):
    """Raised by the simulated handler with probability FAIL_RATE."""


def builtin_app(settings: Settings | None = None, simulation: Simulation | None = None) -> App:
    """An App whose one task, `taskq.simulate`, behaves as the seed's worker handler, as
    `simulation` (by default: read from the environment) says."""
    app = App(settings=settings)
    sim = simulation or Simulation.from_env()
    lock = threading.Lock()
    ledgers: list[Ledger] = []

    def ledger() -> Ledger:
        with lock:
            if not ledgers:
                ledgers.append(Ledger(sim.ledger_path, sim.ledger_guard))
            return ledgers[0]

    @app.task(SIMULATE_TASK)
    def simulate(charge: int | None = None, account: str = "alice") -> dict[str, object]:
        """Work WORK_SECONDS, fail at FAIL_RATE, charge, then work AFTER_EFFECT_SECONDS.
        Returns what the ledger said and the run's token and attempt, so a result shows
        which run's ack was accepted. A run told its task was cancelled stops before its
        charge (effect() would refuse it anyway) and the task ends cancelled."""
        task = current_task()
        time.sleep(sim.work_seconds)
        if random.random() < sim.fail_rate:
            raise SimulatedFailure(f"simulated failure (FAIL_RATE={sim.fail_rate})")
        outcome = "no charge"
        if task.cancelled:
            return {"outcome": "cancelled", "token": task.token, "attempt": task.attempt}
        if charge is not None:
            with task.effect():
                outcome = ledger().charge(task.task_id, task.token, account, int(charge))
        time.sleep(sim.after_effect_seconds)
        return {"outcome": outcome, "token": task.token, "attempt": task.attempt}

    return app
