"""Rate limits on the real broker under random interleavings, drawn by Hypothesis: bursts
of enqueues of a limited and an unlimited task, leases of any size, time passing, due
tasks promoted, tasks cancelled. Whatever the order, by the Redis times of the `leased`
events a limited task never starts more often than its rate allows in any window, a
throttled task is looked at again no sooner than its slot, every task is run or
cancelled in the end, the log passes tracecheck, lease order included, and after every
step each limit's next slot is at most one spacing after the last slot a task waits
for (RateLimit.tla's NoGhostSlot), and only waiting tasks hold slots. A redeploy may
change "slow"'s rate between steps, releasing its line, or remove its limit, lifted as
a starting worker lifts it (QueueRateLimit.tla's Raise and Remove). Two deploys declaring
different limits lease side by side, their workers stopping and starting
(RateDeclaration.tla)."""

from __future__ import annotations

import math
import time
import uuid
from typing import ClassVar

import pytest
import redis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from helpers import Event, events, no_ghost_slots
from taskq import registry
from taskq.broker import Broker, NewTask
from taskq.rates import QUEUE_LIMIT, RateLimit
from taskq.registry import Presence
from taskq.tools.tracecheck import read_log, validate

# (starts a second, burst): spacings of 20, 10 and 5 ms.
RATES = [(50.0, 1), (100.0, 3), (200.0, 2)]
STEP = st.one_of(
    st.tuples(st.just("enqueue"), st.integers(1, 8), st.booleans()),
    st.tuples(st.just("lease"), st.integers(1, 6), st.just(False)),
    st.tuples(st.just("wait"), st.integers(0, 25), st.just(False)),
    st.tuples(st.just("cancel"), st.integers(0, 50), st.booleans()),
    st.tuples(st.just("redeploy"), st.integers(0, 2), st.just(False)),
)
FIRST, FASTER, REMOVED = 0, 1, 2


def run(broker: Broker, steps: list[tuple[str, int, bool]],
        deploys: tuple[tuple[RateLimit, ...], ...]) -> list[tuple[int, int]]:
    """`deploys`: the limits as first declared (FIRST), with "slow" twice as fast
    (FASTER), and without "slow"'s (REMOVED); a redeploy step puts deploy `n` in
    force. Returns each redeploy as (the last event's sequence number then, n)."""
    sent = 0
    redeploys: list[tuple[int, int]] = []
    for op, n, flag in steps:
        if op == "redeploy":
            redeploys.append((int(broker.client.get(broker.keys.seq) or 0), n))
            redeploy(broker, deploys[n])
            if n == REMOVED:
                nothing_waits_for_a_removed_limit(broker, deploys[n])
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
    return redeploys


@settings(max_examples=25, deadline=None, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(rate=st.sampled_from(RATES), queue=st.booleans(), steps=st.lists(STEP, max_size=15))
def test_no_window_holds_more_starts_than_the_rate_allows(
    client: redis.Redis, rate: tuple[float, int], queue: bool,
    steps: list[tuple[str, int, bool]],
) -> None:
    check(client, rate, queue, steps)


@pytest.mark.parametrize("queue", [False, True])
def test_a_raise_and_a_removal_with_tasks_waiting_are_checked_in_every_run(
    client: redis.Redis, queue: bool
) -> None:
    """A fixed run through the same checks, whatever Hypothesis happens to draw: a raise
    and then a removal of "slow"'s limit, each with throttled tasks in its line."""
    steps = [("enqueue", 6, True), ("enqueue", 3, False), ("lease", 3, False),
             ("redeploy", FASTER, False), ("lease", 2, False),
             ("redeploy", REMOVED, False), ("lease", 6, False)]
    broker = check(client, (50.0, 1), queue, steps)
    released = [e for e in events(client, broker.keys) if e.type == "rescheduled"]
    assert len(released) >= 2 and {e.fields["limit"] for e in released} == {"slow"}


def check(client: redis.Redis, rate: tuple[float, int], queue: bool,
          steps: list[tuple[str, int, bool]]) -> Broker:
    """`queue`: the limit is the queue's own, over every task, beside a looser one on
    "slow" (so both limits take part in each start); else it is "slow"'s alone."""
    broker = Broker(client, f"r-{uuid.uuid4().hex[:10]}")
    per_second, burst = rate
    own = (RateLimit(QUEUE_LIMIT, per_second, burst),) if queue else ()
    deploys = (*((RateLimit("slow", per_second * (2 if queue else 1) * faster, burst), *own)
                 for faster in (1, 2)), own)
    broker.rate_limits = deploys[FIRST]
    redeploys = run(broker, steps, deploys)
    # The queue's limit holds over every start; "slow"'s alone over those before its
    # removal, if any, at its faster rate if a redeploy raised it before that.
    removed = min((seq for seq, n in redeploys if n == REMOVED), default=None)
    bounded_until = None if queue else removed
    if not queue and any(n == FASTER and (removed is None or seq < removed)
                         for seq, n in redeploys):
        per_second *= 2
    log = events(client, broker.keys)
    names = {e.task: e.fields["name"] for e in log if e.type == "enqueued"}
    starts = sorted(int(e.fields["ts"]) for e in log
                    if e.type == "leased" and (queue or names[e.task] == "slow")
                    and (bounded_until is None or seq_of(e) <= bounded_until))
    spacing = 1000 / per_second
    for window in (spacing, 3 * spacing, 10 * spacing):
        for first in starts:
            inside = sum(1 for s in starts if first <= s < first + window)
            assert inside <= int(window // spacing) + burst, (window, starts)
    # A throttled task is looked at again only once its slot has come: leased then, or
    # throttled once more when a late start ahead of it took that slot (no busy loop);
    # a redeploy releases the line, and its tasks are looked at again at once.
    waiting: dict[str, int] = {}
    marks = sorted(seq for seq, _ in redeploys)
    for e in log:
        while marks and seq_of(e) > marks[0]:
            marks.pop(0)
            waiting.clear()
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
    return broker


def redeploy(broker: Broker, limits: tuple[RateLimit, ...]) -> None:
    """`limits` put in force, and the others lifted as a worker of that deploy lifts
    them as it starts: each name without a limit, the queue's if it has none."""
    broker.rate_limits = limits
    declared = {r.name for r in limits}
    while broker.lift_rate_limits(
            [x for x in ("fast", "slow", QUEUE_LIMIT) if x not in declared]).left:
        pass


def nothing_waits_for_a_removed_limit(broker: Broker, limits: tuple[RateLimit, ...]) -> None:
    """QueueRateLimit.tla's NothingWaitsForARemovedLimit: with "slow"'s limit lifted,
    each delayed task is due by the queue's slot it holds (with the queue's limit in
    `limits`), or now: by the last release's mark, a millisecond a task released
    before it, if that is later (_rates.lua's make_due keeps the line's order so)."""
    mark = int(broker.client.get(broker.keys.prefix + "released_at") or 0)
    now = max(broker.server_time_ms(), mark)
    line = dict(broker.client.zrange(broker.keys.reserved(QUEUE_LIMIT), 0, -1,
                                     withscores=True))
    for task_id, run_at in broker.client.zrange(broker.keys.delayed, 0, -1, withscores=True):
        slot = line.get(task_id)
        due = now if slot is None or not limits else max(now, math.ceil(
            (slot - (limits[0].burst - 1) * limits[0].interval_us) / 1000))
        assert run_at <= due, (task_id, run_at, due)


def seq_of(event: Event) -> int:
    return int(event.id.split("-")[0])


# Steps of two deploys leasing side by side: a lease by a worker of the newer (0) or of
# the older (1, 2), time passing, enqueues, and a worker stopping or starting again.
SIDE_BY_SIDE = st.one_of(
    st.tuples(st.just("enqueue"), st.integers(1, 6)),
    st.tuples(st.just("lease"), st.integers(0, 2)),
    st.tuples(st.just("wait"), st.integers(0, 25)),
    st.tuples(st.just("stop"), st.integers(0, 2)),
    st.tuples(st.just("start"), st.integers(0, 2)),
)


@settings(max_examples=25, deadline=None, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(steps=st.lists(SIDE_BY_SIDE, max_size=20))
def test_two_deploys_side_by_side_apply_one_limit_and_release_only_after_a_stop(
    client: redis.Redis, steps: list[tuple[str, int]]
) -> None:
    side_by_side(client, steps)


def test_a_deferral_and_a_release_after_a_stop_are_checked_in_every_run(
    client: redis.Redis,
) -> None:
    """A fixed run through the same checks, whatever Hypothesis happens to draw."""
    steps = [("enqueue", 4), ("lease", 1), ("enqueue", 1), ("lease", 2), ("lease", 0),
             ("stop", 2), ("lease", 0), ("stop", 1), ("lease", 0), ("start", 1),
             ("lease", 1), ("wait", 25), ("lease", 1)]
    assert side_by_side(client, steps) == (4, 1)


def side_by_side(client: redis.Redis, steps: list[tuple[str, int]]) -> tuple[int, int]:
    """RateDeclaration.tla on the real broker: three registered workers, two of a deploy
    declaring "slow" at 50/s, one of another at 100/s with a burst of 2, leasing in any
    order, any of them stopping and starting again. Each lease applies the limit stored
    (its own, or that of a live holder, which the reply then names); the stored limit
    changes only once every worker that applied it is gone (NoThrash,
    KeepsARunningDeploysLimit), and nothing is lost. Returns how many leases deferred
    and how many released a line."""
    fleet = Fleet(Broker(client, f"r-{uuid.uuid4().hex[:10]}"))
    sent = 0
    for op, n in steps:
        w = sorted(fleet.up)[n % len(fleet.up)]
        if op == "enqueue":
            fleet.broker.enqueue_many([NewTask(f"t{sent + i}", name="slow") for i in range(n)])
            sent += n
        elif op == "lease":
            fleet.lease(w)
        elif op in ("stop", "start") and fleet.up[w] == (op == "stop"):
            fleet.stop(w) if op == "stop" else fleet.start(w)
        else:
            time.sleep(n / 1000)
        fleet.broker.promote()
        no_ghost_slots(fleet.broker)
        assert fleet.releases <= fleet.stops  # NoThrash
    broker = fleet.broker
    deadline = time.monotonic() + 10
    while broker.counts() != type(broker.counts())(0, 0, 0, 0):
        assert time.monotonic() < deadline, broker.counts()
        broker.ack_many([(t.task_id, t.token) for t in broker.lease_many("new-1", 30, 10).tasks])
        time.sleep(0.002)
        broker.promote()
    log = events(client, broker.keys)
    assert {e.task for e in log if e.type == "completed"} == {f"t{i}" for i in range(sent)}
    report = validate(read_log(client, broker.keys.events))
    assert report.ok, report.violations[:5]
    return fleet.deferrals, fleet.releases


class Fleet:
    """The workers of two deploys on one queue, and the model's view of them: which are
    up, and which applied the stored limit as their own (its holders)."""

    DECLARED: ClassVar[dict[str, RateLimit]] = {
        "new-1": RateLimit("slow", 100.0, 2), "old-1": RateLimit("slow", 50.0, 1),
        "old-2": RateLimit("slow", 50.0, 1)}

    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self.up = dict.fromkeys(self.DECLARED, False)
        self.holders: set[str] = set()
        self.releases = self.stops = self.deferrals = 0
        for w in self.DECLARED:
            self.start(w)

    def start(self, w: str) -> None:
        registry.register(self.broker, Presence(w, "host", 1, [self.broker.queue], 1,
                                                ["slow"], "t"), in_hand=0, ttl=30)
        self.up[w] = True

    def stop(self, w: str) -> None:
        registry.unregister(self.broker, w)
        self.up[w] = False
        self.stops += 1

    def lease(self, w: str) -> None:
        broker, declared = self.broker, self.DECLARED[w]
        before, own = stored_limit(broker), (declared.interval_us, declared.burst)
        held_by = {h for h in self.holders if h != w and self.up[h]}
        broker.rate_limits = (declared,)
        batch = broker.lease_many(w, 30, 4)
        broker.ack_many([(t.task_id, t.token) for t in batch.tasks])
        after = stored_limit(broker)
        if before == (0, 0):  # none stored yet: its own stored, a task met or not
            assert (after, batch.held) == (own, ())
            self.holders |= {w}
        elif before != own and held_by:  # deferred: the stored limit applied, and said
            assert after == before
            assert [(h.interval_us, h.burst) for h in batch.held] == [before]
            assert batch.held[0].holder in held_by
            self.deferrals += 1
        elif before != own:  # every holder gone: its own stored, the line released
            assert (after, batch.held) == (own, ())
            self.holders = {w}
            self.releases += 1
        else:  # its own stored: it holds it, a task met or not
            assert (after, batch.held) == (own, ())
            self.holders |= {w}
        # Redis forgets only holders whose record is gone.
        kept = set(broker.client.zrange(broker.keys.holders("slow"), 0, -1))
        assert kept <= self.holders and {h for h in self.holders if self.up[h]} <= kept


def stored_limit(broker: Broker) -> tuple[int, int]:
    """"slow"'s spacing and burst as Redis holds them: (0, 0) before any."""
    interval, burst = broker.client.hmget(broker.keys.rates, "slow|interval", "slow|burst")
    return int(interval or 0), int(burst or 0)
