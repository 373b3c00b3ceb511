"""Results: what keeping every return value costs a drain, and how soon `result()` has it."""

from __future__ import annotations

import random
import time
import uuid

from bench.drain import DrainPlan, run_drain, stats_field, worker_argv
from bench.harness import BenchError, Child, Options, Section, Server, Stat, rate
from bench.latency import IDLE_SECONDS, percentile
from bench.tasks import make_app
from taskq import Settings

# (results kept, results off) for each handler kind.
PAIRS = {"async": ("bench.noop_async", "bench.noop_async_unkept"),
         "sync": ("bench.noop_sync", "bench.noop_sync_unkept")}
CLOCKS = {"async": ("bench.clock_async", "`async def` handler"),
          "sync": ("bench.clock_sync", "`def` handler")}
CONCURRENCY = 8
# A drain's rate varies by up to a fifth from run to run on this machine: a 10% limit
# needs the median of many pairs.
PAIRS_RUN = 9
RUN_BUDGET_SECONDS = 20.0


def measure(server: Server, options: Options, known: dict[str, float]) -> Section:
    section = Section("results", "Results: their cost to a drain, and `result()` latency",
                      ["measure", "handler", "value", "detail"])
    _cost(server, options, known, section)
    _latency(server, options, section)
    section.notes.append(
        "Cost: the same no-op drained by one `taskq worker` process with its return value "
        "kept as the task's result (the default) and with `store_result=False`, in "
        "interleaved pairs so both see the same machine; the figure is how much slower the "
        "runs that keep results are (median of the pairs). Latency: an idle worker, one "
        "task at a time; the handler returns `time.time()` and the producer, blocked in "
        "`handle.result()` since the enqueue, takes the difference when the call returns: "
        "the worker's ack (settling the outcome and one round trip) and the producer's "
        "wake-up through Redis.")
    return section


def _cost(server: Server, options: Options, known: dict[str, float], section: Section) -> None:
    concurrency = int(known.get("drain-best-concurrency", 64))
    n = options.scaled(1 / 2)
    for kind, (kept, unkept) in PAIRS.items():
        slower = Stat()
        on, off = Stat(), Stat()
        try:
            for _ in range(PAIRS_RUN if not options.quick else 1):
                pair = {}
                for name in random.sample((kept, unkept), 2):
                    pair[name] = run_drain(server, DrainPlan(name, n, concurrency)).rate
                on.add(pair[kept])
                off.add(pair[unkept])
                slower.add(1 - pair[kept] / pair[unkept])
        except BenchError as e:
            section.fail(f"results cost, {kind}", e)
            continue
        section.rows.append([
            "drain with results kept vs off", CLOCKS[kind][1],
            f"{slower.median:+.1%}",
            f"{rate(on.median)} kept, {rate(off.median)} off; 1 x {concurrency}, "
            f"{n:,} tasks, {len(slower.values)} pairs"])
        section.figures[f"results-cost-{kind}"] = slower.median


def _latency(server: Server, options: Options, section: Section) -> None:
    tasks = 50 if options.quick else 300
    for kind, (name, label) in CLOCKS.items():
        p50, p99 = Stat(), Stat()
        try:
            for _ in range(options.repeats):
                values = _waits(server, name, tasks)
                p50.add(percentile(values, 50))
                p99.add(percentile(values, 99))
        except BenchError as e:
            section.fail(f"result() latency, {kind}", e)
            continue
        section.rows.append(["`result()` after the handler returned", label,
                             f"p50 {p50.median:.2f} ms", f"p99 {p99.median:.2f} ms; "
                             f"{tasks} tasks per run, spread of p50 {p50.spread()}"])
        section.figures[f"result-p50-{kind}"] = p50.median


def _waits(server: Server, name: str, tasks: int) -> list[float]:
    """Milliseconds from each handler's return to its producer's `result()` returning."""
    server.flush()
    queue = f"results-{uuid.uuid4().hex[:8]}"
    app = make_app(queue, Settings.from_env({}, redis_url=server.url))
    task = app.tasks[name]
    worker = Child(worker_argv(queue, CONCURRENCY), server.env(), server.logs / f"{queue}.log")
    try:
        task.enqueue().result(timeout=30)  # the worker is up
        waits: list[float] = []
        budget = time.monotonic() + RUN_BUDGET_SECONDS
        for _ in range(tasks):
            if time.monotonic() > budget:
                break
            time.sleep(random.uniform(*IDLE_SECONDS))
            returned_at = task.enqueue().result(timeout=10)
            waits.append((time.time() - returned_at) * 1000)
        completed = stats_field(server, queue, "completed:completed")()
        if completed != len(waits) + 1:
            raise BenchError(f"{completed} completions for {len(waits) + 1} tasks")
        return waits
    finally:
        worker.stop()
        app.broker.client.close()
