"""Flow control: a rate-limited drain against its configured rate, and the cost of
priorities to a drain that mixes them, beside one that does not."""

from __future__ import annotations

import bisect
import random
import uuid

from bench.drain import DrainPlan, check_drained, run_drain, stats_field, worker_argv
from bench.harness import (
    BenchError,
    Child,
    Options,
    Section,
    Server,
    Stat,
    drain_timeout,
    rate,
    time_drain,
)
from bench.tasks import LIMITED_BURST, LIMITED_RATE
from taskq import Broker, NewTask
from taskq.tools.tracecheck import read_log

PAIRS_RUN = 5


def measure(server: Server, options: Options, known: dict[str, float]) -> Section:
    section = Section("limits", "Flow control: rate limits and priorities",
                      ["measure", "value", "detail"])
    _rate_limited(server, options, section)
    _priorities(server, options, known, section)
    section.notes.append(
        f"Rate limit: `bench.noop_limited` (`async def`, `rate_limit=\"{LIMITED_RATE}/s\"`) "
        "drained by one `taskq worker --processes 2 --concurrency 64` command; the rate is "
        "that of the starts past the burst, by the Redis times of their `leased` events "
        "from the first to the last, set against the configured one (never above it: the "
        "run fails if any window holds more starts than the limit allows). "
        "Priorities: the `async def` no-op drained with every task at the default priority "
        "and with priorities drawn from 0-9, in interleaved pairs; the figure is how much "
        "slower the mixed runs are (median of the pairs).")
    return section


def _rate_limited(server: Server, options: Options, section: Section) -> None:
    n = max(200, options.scaled(1 / 4))
    stat = Stat()

    def starts(broker: Broker) -> None:
        stat.add(start_rate(broker))

    try:
        for _ in range(1 if options.quick else options.repeats):
            run_drain(server, DrainPlan("bench.noop_limited", n, 64, 2), extra_checks=starts)
    except BenchError as e:
        section.fail("rate-limited drain", e)
        return
    share = stat.median / LIMITED_RATE
    section.rows.append(["rate-limited drain vs its limit", f"{share:.1%}",
                         f"{rate(stat.median)} at {LIMITED_RATE:,}/s configured; 2 x 64, "
                         f"{n:,} tasks, {len(stat.values)} runs"])
    section.figures["rate-limit-share"] = share


def start_rate(broker: Broker) -> float:
    """The starts past the burst a second, from the first start to the last, by the
    Redis times of the `leased` events: what the limit bounds, free of when the bench
    saw the completions. A BenchError if any window held more starts than the limit
    allows (L1): the burst and a start per spacing."""
    starts = sorted(int(fields["ts"]) for _, fields in read_log(broker.client, broker.keys.events)
                    if fields.get("type") == "leased")
    spacing_ms = 1000 / LIMITED_RATE
    for window_ms in (1, 10, 100, 1000):
        for i, first in enumerate(starts):
            inside = bisect.bisect_left(starts, first + window_ms, lo=i) - i
            if inside > LIMITED_BURST + window_ms / spacing_ms:
                raise BenchError(f"{inside} starts in the {window_ms} ms from {first}: over "
                                 f"{LIMITED_RATE:,}/s with a burst of {LIMITED_BURST}")
    if len(starts) <= LIMITED_BURST or starts[-1] == starts[0]:
        raise BenchError(f"{len(starts)} starts, too few past the burst to time")
    # Whole milliseconds: the last start's may hold up to one spacing of starts more.
    return (len(starts) - LIMITED_BURST) / ((starts[-1] - starts[0] + 1) / 1000)


def _mixed_drain(server: Server, n: int, concurrency: int) -> float:
    """`run_drain` of the async no-op with priorities drawn from 0-9."""
    server.flush()
    queue = f"prio-{uuid.uuid4().hex[:8]}"
    broker = Broker(server.client, queue)
    broker.enqueue_many([NewTask(uuid.uuid4().hex, name="bench.noop_async",
                                 priority=random.randint(0, 9)) for _ in range(n)])
    worker = Child(worker_argv(queue, concurrency), server.env(), server.logs / f"{queue}.log")
    try:
        drained = time_drain(stats_field(server, queue, "completed:completed"), n, [worker],
                             drain_timeout(n))
        check_drained(server, broker, n)
        return drained.rate
    finally:
        worker.stop()


def _priorities(server: Server, options: Options, known: dict[str, float],
                section: Section) -> None:
    concurrency = int(known.get("drain-best-concurrency", 64))
    n = options.scaled(1 / 2)
    slower, plain, mixed = Stat(), Stat(), Stat()
    try:
        for _ in range(PAIRS_RUN if not options.quick else 1):
            pair = {}
            for kind in random.sample(("plain", "mixed"), 2):
                pair[kind] = (run_drain(server, DrainPlan("bench.noop_async", n, concurrency))
                              .rate if kind == "plain" else _mixed_drain(server, n, concurrency))
            plain.add(pair["plain"])
            mixed.add(pair["mixed"])
            slower.add(1 - pair["mixed"] / pair["plain"])
    except BenchError as e:
        section.fail("priorities", e)
        return
    section.rows.append(["drain with priorities 0-9 vs all default", f"{slower.median:+.1%}",
                         f"{rate(mixed.median)} mixed, {rate(plain.median)} default; "
                         f"1 x {concurrency}, {n:,} tasks, {len(slower.values)} pairs"])
    section.figures["priority-cost"] = slower.median
