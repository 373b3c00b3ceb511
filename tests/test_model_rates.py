"""Rate limits on the real broker under random interleavings, drawn by Hypothesis: bursts
of enqueues of a limited and an unlimited task, leases of any size, time passing, due
tasks promoted, tasks cancelled. Whatever the order, by the Redis times of the `leased`
events a limited task never starts more often than its rate allows in any window, a
throttled task is looked at again no sooner than its slot, every task is run or
cancelled in the end, the log passes tracecheck, lease order included, and after every
step each limit's next slot is at most one spacing after the last slot a task waits
for (RateLimit.tla's NoGhostSlot), and only waiting tasks hold slots. A redeploy may
change "slow"'s rate between steps, releasing its line (QueueRateLimit.tla)."""

from __future__ import annotations

import time
import uuid

import redis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from helpers import events, no_ghost_slots
from taskq.broker import Broker, NewTask
from taskq.rates import QUEUE_LIMIT, RateLimit
from taskq.tools.tracecheck import read_log, validate

# (starts a second, burst): spacings of 20, 10 and 5 ms.
RATES = [(50.0, 1), (100.0, 3), (200.0, 2)]
STEP = st.one_of(
    st.tuples(st.just("enqueue"), st.integers(1, 8), st.booleans()),
    st.tuples(st.just("lease"), st.integers(1, 6), st.just(False)),
    st.tuples(st.just("wait"), st.integers(0, 25), st.just(False)),
    st.tuples(st.just("cancel"), st.integers(0, 50), st.booleans()),
    st.tuples(st.just("redeploy"), st.just(0), st.booleans()),
)


def run(broker: Broker, steps: list[tuple[str, int, bool]],
        deploys: tuple[tuple[RateLimit, ...], tuple[RateLimit, ...]]) -> None:
    """`deploys`: the limits as first declared, and with "slow" twice as fast; a
    redeploy step puts the faster (`flag`) or the first in force."""
    sent = 0
    for op, n, flag in steps:
        if op == "redeploy":
            broker.rate_limits = deploys[flag]
        elif op == "enqueue":
            broker.enqueue_many([NewTask(f"t{sent + i}", name="slow" if flag else "fast")
                                 for i in range(n)])
            sent += n
        elif op == "lease":
            broker.ack_many([(t.task_id, t.token) for t in broker.lease_many("w", 30, n).tasks])
        elif op == "cancel":
            # `flag`: a task waiting for its slot, if any; else any task sent.
            waiting = sorted(broker.client.zrange(broker.keys.delayed, 0, -1))
            pool = waiting if flag and waiting else [f"t{i}" for i in range(sent)]
            if pool:
                broker.cancel(pool[n % len(pool)])
        else:
            time.sleep(n / 1000)
        broker.promote()
        no_ghost_slots(broker)
    deadline = time.monotonic() + 10
    while broker.counts() != type(broker.counts())(0, 0, 0, 0):
        assert time.monotonic() < deadline, broker.counts()
        batch = broker.lease_many("w", 30, 10)
        broker.ack_many([(t.task_id, t.token) for t in batch.tasks])
        if not batch.tasks:
            time.sleep(0.002)
        broker.promote()
        no_ghost_slots(broker)


@settings(max_examples=25, deadline=None, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(rate=st.sampled_from(RATES), queue=st.booleans(), steps=st.lists(STEP, max_size=15))
def test_no_window_holds_more_starts_than_the_rate_allows(
    client: redis.Redis, rate: tuple[float, int], queue: bool,
    steps: list[tuple[str, int, bool]],
) -> None:
    """`queue`: the limit is the queue's own, over every task, beside a looser one on
    "slow" (so both limits take part in each start); else it is "slow"'s alone."""
    broker = Broker(client, f"r-{uuid.uuid4().hex[:10]}")
    per_second, burst = rate
    deploys = tuple(((RateLimit("slow", per_second * 2 * faster, burst),
                      RateLimit(QUEUE_LIMIT, per_second, burst)) if queue
                     else (RateLimit("slow", per_second * faster, burst),))
                    for faster in (1, 2))
    broker.rate_limits = deploys[0]
    run(broker, steps, (deploys[0], deploys[1]))
    if not queue and any(op == "redeploy" and flag for op, _, flag in steps):
        per_second *= 2  # "slow"'s bound at its faster rate, over every window
    log = events(client, broker.keys)
    names = {e.task: e.fields["name"] for e in log if e.type == "enqueued"}
    starts = sorted(int(e.fields["ts"]) for e in log
                    if e.type == "leased" and (queue or names[e.task] == "slow"))
    spacing = 1000 / per_second
    for window in (spacing, 3 * spacing, 10 * spacing):
        for first in starts:
            inside = sum(1 for s in starts if first <= s < first + window)
            assert inside <= int(window // spacing) + burst, (window, starts)
    # A throttled task is looked at again only once its slot has come: leased then, or
    # throttled once more when a late start ahead of it took that slot (no busy loop).
    waiting: dict[str, int] = {}
    for e in log:
        if e.type in ("leased", "throttled") and e.task in waiting:
            assert int(e.fields["ts"]) >= waiting.pop(e.task), e
        if e.type == "throttled":
            waiting[e.task] = int(e.fields["at"])
    throttled = {e.task for e in log if e.type == "throttled"}
    ended = {e.task for e in log if e.type in ("completed", "cancelled")}
    assert ended == set(names)  # nothing lost
    # Without a queue limit the others are never held up.
    assert queue or all(names[t] == "slow" for t in throttled)
    # Each task's path, and each lease the front of ready (P1), a throttled task having
    # left ready before the lease that passed it.
    report = validate(read_log(client, broker.keys.events))
    assert report.ok, report.violations[:5]
