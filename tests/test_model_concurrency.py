"""Concurrency limits on the real broker under random interleavings, drawn by Hypothesis
against the ConcurrencyLimit model: enqueues of a limited and an unlimited task at any
priority, leases of any size by three workers (some leases brief enough to run out),
settles by current and stale holders (ack, fail, release, a cancel heard and settled),
reaps, promotions, cancels of any task, a redeploy that raises the limit (which
frees slots and marks no group: the ConcurrencyGroups model's sweep finds them) and one
that keeps the limit per key or stops doing so while tasks sent with keys wait and run
(the ConcurrencyKeyMode model). After every step: T1 (parked tasks are pending and
nowhere else), SlotsAreLeases (the slots Redis counts are exactly the current leases of
the limited name), PerKeyNeverOverLimit and UnkeyedNeverOverLimit (L1 per key, and for
the name's every run since the limit stopped being kept per key); after a lease that
emptied ready, no task waits parked while a slot is free. In the end every task has
ended and the log passes tracecheck, parked and unparked events and lease order (P1)
included."""

from __future__ import annotations

import time
import uuid

import redis
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from helpers import view
from taskq.broker import Broker, NewTask
from taskq.concurrency import ConcurrencyLimit
from taskq.tools.tracecheck import read_log, validate

LIMITED = "mod.limited"
BRIEF = 0.05  # a lease that runs out during the run
FAST = {"backoff_base": 0.001, "backoff_max": 0.002}
SETTLES = ("ack", "fail", "release", "cancel")


class ConcurrencyMachine(RuleBasedStateMachine):
    client: redis.Redis

    def __init__(self) -> None:
        super().__init__()
        self.broker = Broker(self.client, f"c-{uuid.uuid4().hex[:10]}")
        self.sent = 0
        # Every lease handed out, kept for the whole run: a holder may act long after
        # its lease was reaped and its task leased again.
        self.holders: list[tuple[str, int]] = []

    @initialize(most=st.integers(1, 3), keyed=st.booleans())
    def limit(self, most: int, keyed: bool = True) -> None:
        self.most, self.keyed = most, keyed
        # The runs leased since the limit was last declared keyed or not.
        self.era: set[str] = set()
        self.declare()

    def declare(self) -> None:
        self.broker.concurrency_limits = (
            ConcurrencyLimit(LIMITED, self.most, "account" if self.keyed else ""),)

    @rule(n=st.integers(1, 4), limited=st.booleans(), priority=st.sampled_from([2, 5, 8]),
          key=st.sampled_from([None, "acct-a", "acct-b"]))
    def enqueue(self, n: int, limited: bool, priority: int, key: str | None = None) -> None:
        self.broker.enqueue_many([
            NewTask(f"t{self.sent + i}", name=LIMITED if limited else "mod.free",
                    priority=priority, max_retries=2, limit_key=key if limited else None)
            for i in range(n)])
        self.sent += n

    @rule(worker=st.sampled_from(["w1", "w2", "w3"]), n=st.integers(1, 6),
          brief=st.booleans())
    def lease(self, worker: str, n: int, brief: bool) -> None:
        batch = self.broker.lease_many(worker, BRIEF if brief else 30, n)
        self.holders += [(t.task_id, t.token) for t in batch.tasks]
        self.era |= {t.task_id for t in batch.tasks}
        if self.broker.counts().ready == 0:
            for group in self.groups():
                parked = self.client.llen(self.broker.keys.parked(group))
                assert parked == 0 or self.counted(group) >= self.most, \
                    f"a task of {group} waits by a free slot"

    @precondition(lambda self: self.holders)
    @rule(pick=st.integers(0, 1000), how=st.sampled_from(SETTLES))
    def settle(self, pick: int, how: str) -> None:
        self.settle_as(*self.holders[pick % len(self.holders)], how)

    def settle_as(self, task_id: str, token: int, how: str) -> None:
        if how == "ack":
            self.broker.ack(task_id, token)
        elif how == "fail":
            self.broker.fail(task_id, token, "boom", **FAST)
        elif how == "release":
            self.broker.release(task_id, token)
        elif self.broker.cancel(task_id, only="running").outcome == "requested":
            self.broker.ack_cancelled(task_id, token)

    @precondition(lambda self: self.holders)
    @rule(pick=st.integers(0, 1000), how=st.sampled_from(SETTLES))
    def a_lost_holder_answers(self, pick: int, how: str) -> None:
        """A holder whose lease was reaped and whose task is leased again settles late."""
        current = {t: token for t, token in self.holders}
        lost = [(t, token) for t, token in self.holders
                if token < current[t] and self.client.zscore(self.broker.keys.leased, t)]
        if lost:
            task_id, token = lost[pick % len(lost)]
            self.settle_as(task_id, token, how)

    @rule()
    def time_passes(self) -> None:
        time.sleep(BRIEF + 0.02)
        self.broker.reap(**FAST)
        time.sleep(0.005)  # past the retry's backoff, so a reaped task is ready again
        self.broker.promote()

    @precondition(lambda self: self.most < 4)
    @rule()
    def a_redeploy_raises_the_limit(self) -> None:
        self.most += 1
        self.declare()

    @rule()
    def a_redeploy_changes_whether_the_limit_is_kept_per_key(self) -> None:
        self.keyed = not self.keyed
        self.era = set()
        self.declare()

    @precondition(lambda self: self.sent)
    @rule(pick=st.integers(0, 1000))
    def cancel(self, pick: int) -> None:
        self.broker.cancel(f"t{pick % self.sent}")

    def groups(self) -> list[str]:
        """The limited name's groups: its own slots, and each key's."""
        return [LIMITED, f"{LIMITED}|acct-a", f"{LIMITED}|acct-b"]

    def holding(self, group: str) -> int:
        return int(self.client.scard(self.broker.keys.holding(group)))

    def counted(self, group: str) -> int:
        """The runs a task waiting in `group` is counted against as the limit is
        declared; a keyed group's list, under a limit not kept per key, against none:
        every task of it goes back to be parked in the name's own list."""
        if self.keyed:
            return self.holding(group)
        if group != LIMITED:
            return 0
        return self.holding(LIMITED) + int(self.client.scard(self.broker.keys.keyed(LIMITED)))

    @invariant()
    def slots_are_the_limited_names_leases(self) -> None:
        now = view(self.client, self.broker.keys)
        assert now.violations() == []  # T1, parked included; SlotsAreLeases
        for group in self.groups():
            leased = [t for t in now.places["leased"] if now.group_of(t) == group
                      and now.records[t]["name"] == LIMITED]
            assert set(leased) == now.holding.get(group, set()), group
            assert len(leased) <= self.most, group  # L1, per key
        if not self.keyed:  # L1 for the name, since it stopped being kept per key
            running = [t for t in now.places["leased"] if t in self.era
                       and now.records[t]["name"] == LIMITED]
            assert len(running) <= self.most, running

    def teardown(self) -> None:
        # Every current holder settles (a stale one is refused), then the rest drains.
        self.broker.ack_many(self.holders)
        deadline = time.monotonic() + 20
        while (c := self.broker.counts()).ready or c.leased or c.delayed \
                or self.client.exists(self.broker.keys.parked_names):
            assert time.monotonic() < deadline, c
            batch = self.broker.lease_many("drain", 30, 10)
            self.broker.ack_many([(t.task_id, t.token) for t in batch.tasks])
            self.broker.reap(**FAST)
            self.broker.promote()
            if not batch.tasks:
                time.sleep(0.01)
        report = validate(read_log(self.client, self.broker.keys.events))
        assert report.ok, (report.violations[:5], report.unfinished[:5])
        p = report.priority
        assert (p.checked, p.violations) == (p.leases, []), p


def test_the_real_broker_keeps_every_slot_with_its_lease(client: redis.Redis) -> None:
    run_state_machine_as_test(
        type("Machine", (ConcurrencyMachine,), {"client": client}),
        settings=settings(max_examples=30, stateful_step_count=30, deadline=None,
                          database=None, suppress_health_check=[HealthCheck.too_slow]),
    )


def test_a_lost_holder_answering_after_its_task_is_leased_again_is_checked(
    client: redis.Redis,
) -> None:
    """A fixed run through the rarest path, so that it is checked in every run of the
    suite, whatever Hypothesis happens to draw."""
    m = type("Machine", (ConcurrencyMachine,), {"client": client})()
    m.limit(1)
    m.enqueue(1, True, 5)
    m.lease("w1", 1, True)
    m.time_passes()
    m.lease("w2", 1, False)
    m.enqueue(1, True, 5)  # parked behind the slot the lost holder would free
    assert len(m.holders) == 2 and m.holders[0][0] == m.holders[1][0]  # leased again
    for how in SETTLES:
        m.a_lost_holder_answers(0, how)
        m.slots_are_the_limited_names_leases()
    m.teardown()


def test_each_key_of_a_keyed_limit_is_checked_on_its_own(client: redis.Redis) -> None:
    """A fixed run: two tasks of one account and one of another, one slot per account;
    one of each account runs, the second of the first waits."""
    m = type("Machine", (ConcurrencyMachine,), {"client": client})()
    m.limit(1)
    m.enqueue(2, True, 5, "acct-a")
    m.enqueue(1, True, 5, "acct-b")
    m.lease("w1", 6, False)
    m.slots_are_the_limited_names_leases()
    assert (m.holding(f"{LIMITED}|acct-a"), m.holding(f"{LIMITED}|acct-b")) == (1, 1)
    m.teardown()


def test_a_limit_not_kept_per_key_is_checked_for_the_whole_name(client: redis.Redis) -> None:
    """A fixed run: tasks sent with two accounts' keys under a limit of one slot not
    kept per key: one of them runs, whatever their records say."""
    m = type("Machine", (ConcurrencyMachine,), {"client": client})()
    m.limit(1, keyed=False)
    m.enqueue(1, True, 5, "acct-a")
    m.enqueue(1, True, 5, "acct-b")
    m.lease("w1", 6, False)
    m.slots_are_the_limited_names_leases()
    assert len(m.holders) == 1
    m.teardown()


def test_tasks_waiting_per_key_when_the_key_is_dropped_are_checked(client: redis.Redis) -> None:
    """A fixed run through a redeploy that stops keeping the limit per key while a task
    of each account runs and another of one waits in its account's line."""
    m = type("Machine", (ConcurrencyMachine,), {"client": client})()
    m.limit(1)
    m.enqueue(2, True, 5, "acct-a")
    m.enqueue(1, True, 5, "acct-b")
    m.lease("w1", 6, False)
    m.a_redeploy_changes_whether_the_limit_is_kept_per_key()
    m.enqueue(1, True, 5, None)
    m.lease("w2", 6, False)
    m.slots_are_the_limited_names_leases()
    assert len(m.holders) == 2  # one of each account, none since
    m.settle(0, "ack")
    m.settle(1, "ack")
    m.lease("w2", 6, False)
    m.slots_are_the_limited_names_leases()
    assert len(m.holders) == 3
    m.teardown()
