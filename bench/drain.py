"""Drain rate: N no-op tasks through `taskq worker` processes, at several concurrencies."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from bench.harness import (
    BenchError,
    Child,
    Drained,
    Options,
    Section,
    Server,
    Stat,
    drain_timeout,
    python_module,
    rate,
    time_drain,
)
from taskq import Broker, NewTask
from taskq.keys import QueueKeys
from taskq.limits import EVENTS_RETENTION

KINDS = {"bench.noop_async": "`async def` no-op", "bench.noop_sync": "`def` no-op"}
CONCURRENCIES = (1, 8, 32, 64)
QUICK_CONCURRENCIES = (8,)
# A sweep's drain is an eighth of --n; fewer tasks than this can all finish between two
# polls of the completion count on a fast machine, leaving nothing to time.
SHORTEST_SWEEP = 400


def worker_argv(queue: str, concurrency: int, processes: int = 1,
                prefetch: int = 0) -> list[str]:
    """One `taskq worker` command: `processes` worker processes (a pool when more than
    one), each running `concurrency` handlers at once and holding `prefetch` leased
    tasks more for them."""
    return python_module("taskq", "--log-level", "WARNING", "worker",
                         "--app", "bench.tasks:app", "--queue", queue,
                         "--concurrency", str(concurrency), "--processes", str(processes),
                         "--prefetch", str(prefetch))


def stats_field(server: Server, queue: str, name: str) -> Callable[[], int]:
    """A reader of one lifetime total of the queue's events (e.g. `completed:completed`)."""
    key = QueueKeys(queue).events + ":stats"

    def read() -> int:
        return int(server.client.hget(key, name) or 0)

    return read


def fill(server: Server, queue: str, name: str, n: int,
         retention: int = EVENTS_RETENTION.default) -> Broker:
    broker = Broker(server.client, queue, events_retention=retention)
    broker.enqueue_many([NewTask(uuid.uuid4().hex, name=name) for _ in range(n)])
    return broker


def check_drained(server: Server, broker: Broker, n: int) -> None:
    """Every task leased once and completed once, and nothing left anywhere."""
    leased = stats_field(server, broker.queue, "leased:running")()
    if leased != n:
        raise BenchError(f"{leased} leases for {n} tasks: some ran twice")
    counts = broker.counts()
    if (counts.ready, counts.leased, counts.delayed, counts.dead) != (0, 0, 0, 0):
        raise BenchError(f"tasks left after the drain: {counts}")


@dataclass(frozen=True)
class DrainPlan:
    """One drain: which handler, how many tasks, one worker command's processes
    (`--processes`) and concurrency, and any environment its handlers need."""

    name: str
    n: int
    concurrency: int
    processes: int = 1
    env: tuple[tuple[str, str], ...] = ()
    prefetch: int = 0


def run_drain(
    server: Server,
    plan: DrainPlan,
    on_started: Callable[[Sequence[Child]], None] | None = None,
    extra_checks: Callable[[Broker], None] | None = None,
) -> Drained:
    """Fill a fresh queue with `plan.n` tasks, start the workers, time them to the end;
    `extra_checks` is given the drained queue's broker."""
    server.flush()
    queue = f"drain-{uuid.uuid4().hex[:8]}"
    broker = fill(server, queue, plan.name, plan.n)
    workers = [Child(worker_argv(queue, plan.concurrency, plan.processes, plan.prefetch),
                     server.env(**dict(plan.env)),
                     server.logs / f"{queue}.log")]
    try:
        if on_started is not None:
            on_started(workers)
        drained = time_drain(stats_field(server, queue, "completed:completed"), plan.n,
                             workers, drain_timeout(plan.n))
        check_drained(server, broker, plan.n)
        if extra_checks is not None:
            extra_checks(broker)
        return drained
    finally:
        for worker in workers:
            worker.stop()


def median_rate(server: Server, plan: DrainPlan, repeats: int) -> Stat:
    stat = Stat()
    for _ in range(repeats):
        stat.add(run_drain(server, plan).rate)
    return stat


def measure(server: Server, options: Options, known: dict[str, float]) -> Section:
    section = Section("drain", "Drain rate (`taskq worker`, no-op tasks)",
                      ["handler", "worker processes x concurrency", "tasks",
                       "tasks/s (median)", "spread"])
    sweep_n = options.scaled(1 / 8, floor=SHORTEST_SWEEP)
    levels = QUICK_CONCURRENCIES if options.quick else CONCURRENCIES
    best: dict[str, tuple[float, int]] = {}
    for name, label in KINDS.items():
        for concurrency in levels:
            try:
                stat = median_rate(server, DrainPlan(name, sweep_n, concurrency),
                                   options.repeats)
            except BenchError as e:
                section.fail(f"{label}, 1 x {concurrency}", e)
                continue
            section.rows.append([label, f"1 x {concurrency}", f"{sweep_n:,}",
                                 rate(stat.median), stat.spread()])
            if stat.median > best.get(name, (0.0, 0))[0]:
                best[name] = (stat.median, concurrency)
    _at_best(server, options, section, best)
    section.notes.append(
        "Rate = tasks completed from the 5% mark to the last one, divided by the time "
        "between (worker start-up is not counted). Completions are the queue's "
        "`completed:completed` total; each run also checks one lease per task and "
        "nothing left in ready, leased, delayed or the DLQ.")
    return section


def _at_best(server: Server, options: Options, section: Section,
             best: dict[str, tuple[float, int]]) -> None:
    """Full-size runs at each handler's best concurrency, with one process and with a
    pool of two (`taskq worker --processes 2`, still one command)."""
    top: tuple[float, str, int] | None = None
    for name, (_, concurrency) in best.items():
        label = f"{KINDS[name]}, best"
        try:
            stat = median_rate(server, DrainPlan(name, options.n, concurrency), options.repeats)
        except BenchError as e:
            section.fail(label, e)
            continue
        section.rows.append([f"**{label}**", f"1 x {concurrency}", f"{options.n:,}",
                             f"**{rate(stat.median)}**", stat.spread()])
        section.figures[f"drain-{name}"] = stat.median
        section.figures[f"drain-{name}-concurrency"] = concurrency
        if top is None or stat.median > top[0]:
            top = (stat.median, name, concurrency)
    if top is None:
        return
    section.figures["drain-best"] = top[0]
    section.figures["drain-best-concurrency"] = top[2]
    section.figures["drain-best-async"] = float(top[1] == "bench.noop_async")
    label = f"{KINDS[top[1]]}, `--processes 2`"
    try:
        stat = median_rate(server, DrainPlan(top[1], options.n, top[2], processes=2),
                           options.repeats)
    except BenchError as e:
        section.fail(label, e)
        return
    section.rows.append([label, f"2 x {top[2]}", f"{options.n:,}",
                         rate(stat.median), stat.spread()])
    section.figures["drain-two-processes"] = stat.median
    section.figures["drain-one-command"] = max(top[0], stat.median)
