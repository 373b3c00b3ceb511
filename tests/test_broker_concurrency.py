"""Concurrency limits: at most `most` runs of a name hold leases at once, whichever
worker leases them; the next waits parked (still pending) and comes back when a run's
lease ends, whichever way it ends, and only the current run's end frees a slot."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from conftest import ON_CLUSTER
from helpers import (
    assert_refused_unchanged,
    assert_refused_while_overwritten,
    events,
    leased_token,
    reaped_token,
    view,
    wait_past,
)
from taskq.broker import Broker, NewTask
from taskq.concurrency import ConcurrencyLimit, check_concurrency
from taskq.errors import ConfigError
from taskq.rates import RateLimit
from taskq.snapshot import LimitView, take_snapshot

NAME = "mod.limited"


@pytest.fixture
def limited(broker: Broker) -> Broker:
    broker.concurrency_limits = (ConcurrencyLimit(NAME, 2),)
    return broker


@pytest.fixture
def per_account(broker: Broker) -> Broker:
    broker.concurrency_limits = (ConcurrencyLimit(NAME, 2, "account"),)
    return broker


def enqueue(broker: Broker, *ids: str, name: str = NAME, priority: int = 5) -> None:
    broker.enqueue_many([NewTask(t, name=name, priority=priority) for t in ids])


def lease_all(broker: Broker, worker: str = "w", seconds: float = 30) -> dict[str, int]:
    return {t.task_id: t.token for t in broker.lease_many(worker, seconds, 100).tasks}


def first_runs(leases: dict[str, int]) -> set[str]:
    """The ids `lease_all` returned, each leased for the first time: its token minted
    above the none (0) its record held before."""
    for token in leases.values():
        leased_token(0, token)
    return set(leases)


def holding(broker: Broker) -> set[str]:
    return set(broker.client.smembers(broker.keys.holding(NAME)))


def parked(broker: Broker) -> list[str]:
    return list(broker.client.lrange(broker.keys.parked(NAME), 0, -1))


def sound(broker: Broker) -> None:
    assert view(broker.client, broker.keys).violations() == []


class TestAtMostMostRuns:
    def test_a_lease_takes_only_the_free_slots_and_parks_the_rest(self, limited: Broker) -> None:
        enqueue(limited, "a", "b", "c", "d")
        enqueue(limited, "free", name="mod.other")
        assert set(lease_all(limited)) == {"a", "b", "free"}
        assert holding(limited) == {"a", "b"}
        assert parked(limited) == ["c", "d"]
        assert limited.counts().ready == 2  # parked tasks are pending
        sound(limited)

    def test_a_snapshot_shows_each_limits_slots_and_parked_tasks(self, limited: Broker) -> None:
        enqueue(limited, "a", "b", "c")
        lease_all(limited)
        snap = take_snapshot(limited, limit=0, groups=10)
        assert snap.limits == [LimitView(NAME, 2, 2, 1)]
        assert snap.counts.ready == 1

    def test_a_limit_lowered_while_runs_hold_slots_shows_lowered_once_a_task_parks(
        self, limited: Broker
    ) -> None:
        enqueue(limited, "a", "b")
        lease_all(limited)
        limited.concurrency_limits = (ConcurrencyLimit(NAME, 1),)  # a redeploy lowers it
        enqueue(limited, "c")
        assert lease_all(limited) == {}
        snap = take_snapshot(limited, limit=0, groups=10)
        assert snap.limits == [LimitView(NAME, 1, 2, 1)]

    def test_parked_tasks_are_pending_and_say_why_in_the_feed(self, limited: Broker) -> None:
        enqueue(limited, "a", "b", "c")
        lease_all(limited)
        assert limited.task("c") is not None and limited.task("c").state == "pending"
        told = [(e.type, e.task, e.fields.get("limit")) for e in events(limited.client,
                                                                        limited.keys)]
        assert ("parked", "c", "2") in told

    def test_every_worker_shares_the_slots(self, limited: Broker) -> None:
        enqueue(limited, *(f"t{n}" for n in range(6)))
        first, second = lease_all(limited, "w1"), lease_all(limited, "w2")
        assert len(first) == 2 and second == {}
        assert len(holding(limited)) == 2

    def test_a_queue_that_never_limits_keeps_no_slot_keys(self, broker: Broker) -> None:
        enqueue(broker, "a", "b")
        for task_id, token in lease_all(broker).items():
            broker.ack(task_id, token)
        assert not [k for k in broker.client.keys("*") if "holding" in k or "parked" in k]
        assert "slot" not in broker.client.hkeys(broker.keys.task("a"))


class TestASlotComesBack:
    def test_when_a_run_is_acked(self, limited: Broker) -> None:
        enqueue(limited, "a", "b", "c")
        leases = lease_all(limited)
        assert limited.ack("a", leases["a"])
        assert first_runs(lease_all(limited)) == {"c"}
        assert holding(limited) == {"b", "c"}
        types = [e.type for e in events(limited.client, limited.keys) if e.task == "c"]
        assert types == ["enqueued", "parked", "unparked", "leased"]
        sound(limited)

    @pytest.mark.parametrize("settle", ["ack", "ack_cancelled"])
    def test_not_when_a_slot_key_is_of_another_type_and_then_nothing_moves(
        self, limited: Broker, settle: str
    ) -> None:
        enqueue(limited, "a")
        token = lease_all(limited)["a"]
        if settle == "ack_cancelled":
            limited.cancel("a")
        calls: dict[str, Callable[[], object]] = {
            "ack": lambda: limited.ack("a", token),
            "ack_cancelled": lambda: limited.ack_cancelled("a", token)}
        key = limited.keys.parked(NAME)
        limited.client.set(key, "not taskq's")
        assert_refused_unchanged(limited.client, key, calls[settle])
        limited.client.delete(key)
        assert calls[settle]()
        assert holding(limited) == set()
        sound(limited)

    @pytest.mark.parametrize("written", ["holding", "parked", "groups"])
    @pytest.mark.parametrize("end", ["reap", "fail", "release"])
    def test_nor_when_a_run_ends_otherwise_and_then_nothing_moves(
        self, limited: Broker, written: str, end: str
    ) -> None:
        """Refused at its slot's keys part way, a reap would leave the task in no place
        and the tasks reaped before it without their events."""
        limited.enqueue("plain", name="other")
        plain = lease_all(limited, seconds=0.05)
        enqueue(limited, "a")
        token = lease_all(limited, seconds=0.05)["a"]
        wait_past(0.05)
        key = getattr(limited.keys, written)(NAME)
        limited.client.delete(key)
        limited.client.set(key, "not taskq's")
        calls: dict[str, Callable[[], object]] = {
            "reap": limited.reap, "fail": lambda: limited.fail("a", token, "x"),
            "release": lambda: limited.release("a", token)}
        assert_refused_unchanged(limited.client, key, calls[end])
        limited.client.delete(key)
        assert calls[end]()
        assert holding(limited) == set()
        if end == "reap":
            reaped = {e.task for e in events(limited.client, limited.keys) if e.type == "reaped"}
            assert reaped == {"a", *plain}
        sound(limited)

    def test_when_a_run_fails_is_released_or_is_cancelled(self, limited: Broker) -> None:
        enqueue(limited, "a", "b", "c", "d", "e")
        leases = lease_all(limited)
        assert limited.fail("a", leases["a"], "boom").status == "retry"
        assert limited.release("b", leases["b"])
        # Parked tasks go back to the front of ready, ahead of the released one.
        again = lease_all(limited)
        assert first_runs(again) == {"c", "d"}
        assert limited.cancel("c").outcome == "requested"
        assert limited.ack_cancelled("c", again["c"])
        # b, leased behind them, was parked after e.
        assert first_runs(lease_all(limited)) == {"e"}
        assert holding(limited) == {"d", "e"}
        sound(limited)

    def test_when_a_crashed_holders_lease_is_reaped(self, limited: Broker) -> None:
        enqueue(limited, "a", "b", "c")
        lease_all(limited, seconds=0.05)
        assert lease_all(limited) == {}
        wait_past(0.05)
        assert len(limited.reap()) == 2
        assert holding(limited) == set()
        assert first_runs(lease_all(limited)) == {"c"}
        sound(limited)

    def test_when_a_lease_whose_record_is_gone_is_reaped(self, limited: Broker) -> None:
        enqueue(limited, "a", "b", "c")
        lease_all(limited, seconds=0.05)
        limited.client.delete(limited.keys.task("a"))  # evicted, or deleted by hand
        wait_past(0.05)
        assert ("a", "gone") in limited.reap()
        assert holding(limited) == set()
        assert first_runs(lease_all(limited)) == {"c"}

    def test_when_a_keyed_lease_whose_record_is_gone_is_reaped(self, per_account: Broker) -> None:
        per_account.enqueue_many([NewTask(t, name=NAME, limit_key="acct") for t in "abc"])
        lease_all(per_account, seconds=0.05)
        per_account.client.delete(per_account.keys.task("b"))
        wait_past(0.05)
        assert ("b", "gone") in per_account.reap()
        assert per_account.client.smembers(per_account.keys.holding(f"{NAME}|acct")) == set()
        assert per_account.client.smembers(per_account.keys.keyed(NAME)) == set()
        assert first_runs(lease_all(per_account)) == {"c"}

    def test_not_when_a_stale_holder_acks(self, limited: Broker) -> None:
        enqueue(limited, "a", "b", "c")
        lost = lease_all(limited, seconds=0.05)
        wait_past(0.05)
        limited.reap(backoff_base=0.001, backoff_max=0.001)
        reaped = reaped_token(limited, "a", lost["a"])
        wait_past(0.005)
        limited.promote()
        # c was parked first and goes first, its first run; a is leased again, above
        # the token its reap minted; b parked.
        again = lease_all(limited)
        assert set(again) == {"c", "a"}
        leased_token(0, again["c"])
        leased_token(reaped, again["a"])
        # The lost holders answer late: refused, and a's new run keeps its slot.
        assert limited.ack("a", lost["a"]) is False
        assert limited.fail("a", lost["a"], "late").status == "stale"
        assert not limited.release("a", lost["a"])
        assert holding(limited) == {"a", "c"}
        assert lease_all(limited) == {}
        sound(limited)

    def test_the_freeing_script_wakes_an_idle_worker(self, limited: Broker) -> None:
        enqueue(limited, "a", "b", "c")
        leases = lease_all(limited)
        limited.client.delete(limited.keys.wake)
        limited.ack("a", leases["a"])
        assert limited.client.llen(limited.keys.wake) == 1


class TestParkedTasks:
    def test_keep_their_order_and_priority(self, limited: Broker) -> None:
        enqueue(limited, "a", "b")
        enqueue(limited, "p3", "p4")
        enqueue(limited, "hi", priority=9)
        leases = lease_all(limited)
        assert set(leases) == {"hi", "a"}
        assert parked(limited) == ["b", "p3", "p4"]
        limited.ack("hi", leases["hi"])
        limited.ack("a", leases["a"])
        assert list(lease_all(limited)) == ["b", "p3"]

    def test_can_be_cancelled(self, limited: Broker) -> None:
        enqueue(limited, "a", "b", "c")
        lease_all(limited)
        assert limited.cancel("c").outcome == "cancelled"
        assert parked(limited) == []
        assert not limited.client.exists(limited.keys.parked_names)
        sound(limited)

    def test_one_whose_record_is_gone_is_dropped_and_the_others_still_lease(
        self, limited: Broker
    ) -> None:
        """Unparked, an id with no record must not get one made up, nor stop the lease
        part way after it has popped the ready tasks of others."""
        enqueue(limited, "a", "b", "c")
        leases = lease_all(limited)
        assert parked(limited) == ["c"]
        limited.client.delete(limited.keys.task("c"))  # evicted, or deleted by hand
        enqueue(limited, "x1", "x2", name="mod.other")
        limited.ack("a", leases["a"])
        assert first_runs(lease_all(limited)) == {"x1", "x2"}
        assert not limited.client.exists(limited.keys.task("c"))
        assert parked(limited) == [] and limited.counts().ready == 0
        sound(limited)

    def test_come_back_when_no_worker_limits_the_name_any_more(self, limited: Broker) -> None:
        enqueue(limited, "a", "b", "c")
        lease_all(limited)
        limited.concurrency_limits = ()
        assert first_runs(lease_all(limited)) == {"c"}
        sound(limited)

    def test_take_no_rate_limit_slot_while_parked(self, limited: Broker) -> None:
        limited.rate_limits = (RateLimit(NAME, 1.0, 3),)
        enqueue(limited, "a", "b", "c")
        leases = lease_all(limited)
        assert set(leases) == {"a", "b"}
        limited.ack("a", leases["a"])
        # The third start of a burst of three: c was parked, not throttled, before.
        assert first_runs(lease_all(limited)) == {"c"}

    @pytest.mark.parametrize("written", ["parked_names", "parked", "unparked"])
    def test_a_cancel_its_groups_keys_would_refuse_part_way_moves_nothing(
        self, broker: Broker, written: str
    ) -> None:
        """Parked (or sent back from there, promised a slot), a task cancelled while a
        key of its group is of another type is refused whole, not taken out of its
        place and left in none."""
        broker.concurrency_limits = (ConcurrencyLimit(NAME, 1),)
        enqueue(broker, "a", "b")
        enqueue(broker, "first", name="mod.first", priority=9)
        leases = lease_all(broker)
        assert set(leases) == {"first", "a"}  # b parked
        if written == "unparked":  # a's slot freed, b sent back; higher work leased first
            broker.ack("a", leases["a"])
            enqueue(broker, "next", name="mod.first", priority=9)
            assert [t.task_id for t in broker.lease_many("w", 30, 1).tasks] == ["next"]
            assert broker.client.hget(broker.keys.task("b"), "parked") == "back"
        key = (broker.keys.parked_names if written == "parked_names"
               else getattr(broker.keys, written)(NAME))
        assert_refused_while_overwritten(broker.client, key, lambda: broker.cancel("b"))
        assert broker.cancel("b").outcome == "cancelled"
        sound(broker)

    @pytest.mark.parametrize("written", ["parked", "holding", "unparked", "groups"])
    def test_a_limit_key_of_another_type_refuses_the_lease_before_any_task_moves(
        self, limited: Broker, written: str
    ) -> None:
        enqueue(limited, "a", "b", "c")
        key = getattr(limited.keys, written)(NAME)
        limited.client.set(key, "not taskq's")
        assert_refused_unchanged(limited.client, key, lambda: lease_all(limited))
        limited.client.delete(key)
        assert set(lease_all(limited)) == {"a", "b"}
        assert parked(limited) == ["c"]
        sound(limited)

    def test_a_parked_groups_key_of_another_type_refuses_the_lease_before_any_write(
        self, limited: Broker
    ) -> None:
        enqueue(limited, "a", "b", "c")
        leases = lease_all(limited)
        limited.ack("a", leases["a"])
        enqueue(limited, "other", name="mod.other")
        key = limited.keys.unparked(NAME)
        limited.concurrency_limits = ()  # the group is visited for its parked task alone
        limited.client.set(key, "not taskq's")
        assert_refused_unchanged(limited.client, key, lambda: lease_all(limited))
        limited.client.delete(key)
        assert set(lease_all(limited)) == {"c", "other"}
        sound(limited)


class TestSendingBack:
    def test_only_as_many_as_slots_are_free_and_the_oldest_keep_their_turn(
        self, broker: Broker
    ) -> None:
        """Sent-back tasks that a lease does not take at once (higher priority work came
        first) keep their promised slots: later leases send back no more, and newer
        parked tasks never overtake them."""
        broker.concurrency_limits = (ConcurrencyLimit(NAME, 3),)
        enqueue(broker, *"abcdefghi")
        first = lease_all(broker)
        assert set(first) == {"a", "b", "c"} and parked(broker) == list("defghi")
        for task_id, token in first.items():
            broker.ack(task_id, token)
        enqueue(broker, *(f"hi{i}" for i in range(6)), name="mod.urgent", priority=9)
        order = [t.task_id for _ in range(10) for t in broker.lease_many("w", 30, 1).tasks]
        assert order == [*(f"hi{i}" for i in range(6)), "d", "e", "f"]
        assert parked(broker) == ["g", "h", "i"]
        sound(broker)

    def test_a_sent_back_task_overtaken_for_its_slot_waits_at_the_front(
        self, limited: Broker
    ) -> None:
        enqueue(limited, "a", "b", "c", "d")
        leases = lease_all(limited)
        limited.ack("a", leases["a"])
        enqueue(limited, "urgent", name="mod.urgent", priority=9)
        enqueue(limited, "hi", priority=9)
        # The lease sends c back (one slot free), then leases higher priority work: the
        # newer "hi", of c's name, takes the slot (priority first), and c, popped next
        # with every slot held, waits at the front of the line again.
        assert [t.task_id for t in limited.lease_many("w", 30, 1).tasks] == ["urgent"]
        assert [t.task_id for t in limited.lease_many("w", 30, 1).tasks] == ["hi"]
        assert limited.lease_many("w", 30, 1).tasks == []
        assert parked(limited) == ["c", "d"]
        sound(limited)

    def test_sent_back_tasks_overtaken_together_keep_their_order_in_the_line(
        self, limited: Broker
    ) -> None:
        enqueue(limited, "a", "b", "p1", "p2", "p3")
        leases = lease_all(limited)
        assert parked(limited) == ["p1", "p2", "p3"]
        limited.ack_many(list(leases.items()))
        enqueue(limited, "h1", "h2", priority=9)
        # p1 and p2 are sent back; h1 and h2, of their name and higher priority, take
        # the two slots first, and both go back to the front of the line, in order.
        assert set(lease_all(limited)) == {"h1", "h2"}
        assert parked(limited) == ["p1", "p2", "p3"]
        sound(limited)

    def test_sent_back_tasks_of_two_priorities_keep_their_order_of_arrival(
        self, limited: Broker
    ) -> None:
        enqueue(limited, "a", "b")
        leases = lease_all(limited)
        enqueue(limited, "old", priority=1)
        assert lease_all(limited) == {}
        enqueue(limited, "new", priority=4)
        assert lease_all(limited) == {} and parked(limited) == ["old", "new"]
        assert limited.client.get(limited.keys.parked_line) == "2"  # each one's place
        limited.ack_many(list(leases.items()))
        enqueue(limited, "h1", "h2", priority=9)
        # Both sent back; popped by priority (new, then old) and beaten by h1 and h2.
        assert set(lease_all(limited)) == {"h1", "h2"}
        assert parked(limited) == ["old", "new"]
        sound(limited)

    def test_a_sent_back_task_can_be_cancelled_and_frees_its_promise(
        self, limited: Broker
    ) -> None:
        enqueue(limited, "a", "b", "c", "d")
        leases = lease_all(limited)
        limited.ack("a", leases["a"])
        enqueue(limited, "urgent", name="mod.urgent", priority=9)
        assert [t.task_id for t in limited.lease_many("w", 30, 1).tasks] == ["urgent"]
        assert limited.cancel("c").outcome == "cancelled"
        sound(limited)
        assert first_runs(lease_all(limited)) == {"d"}


def type_calls(broker: Broker) -> int:
    """TYPE commands run so far by the Redis node holding `broker`'s queue."""
    client: Any = broker.client
    where = {"target_nodes": client.get_node_from_key(broker.keys.ready)} if ON_CLUSTER else {}
    return int(client.info("commandstats", **where).get("cmdstat_type", {}).get("calls", 0))


class TestOneCallIsBounded:
    def test_a_lease_parks_at_most_a_thousand_and_asks_to_be_called_again(
        self, limited: Broker
    ) -> None:
        enqueue(limited, "a", "b")
        lease_all(limited)
        limited.enqueue_many([NewTask(f"w{i}", name=NAME) for i in range(2500)])
        batch = limited.lease_many("w", 30, 1)
        assert batch.tasks == [] and batch.wait_seconds == 0
        assert 1000 <= len(parked(limited)) <= 1001
        limited.lease_many("w", 30, 1)
        limited.lease_many("w", 30, 1)
        assert len(parked(limited)) == 2500
        assert limited.lease_many("w", 30, 1).wait_seconds != 0
        sound(limited)


    def test_a_lease_looks_at_freed_groups_and_a_turn_of_the_rest_not_at_every_group(
        self, broker: Broker
    ) -> None:
        """One run holds each of 1,000 accounts' slot and one task of each waits: an
        idle lease costs Redis about as much as with one account, a freed slot's group
        is looked at in the next lease wherever it is, and a removed limit reaches every
        account's waiting task within 1,000 / 100 leases."""
        broker.concurrency_limits = (ConcurrencyLimit(NAME, 1, "account"),)
        accounts = 1000
        broker.enqueue_many([NewTask(f"{a}-{n}", name=NAME, limit_key=f"acct{a}")
                             for a in range(accounts) for n in (1, 2)])
        leases: dict[str, int] = {}
        while broker.client.llen(broker.keys.ready):
            leases |= lease_all(broker, seconds=600)
        assert len(leases) == accounts
        assert broker.client.scard(broker.keys.parked_names) == accounts
        before = type_calls(broker)
        broker.lease_many("w", 30, 1)
        # 4 type checks a group looked at: about 100 of them (a cursor's turn), not 1,000.
        assert type_calls(broker) - before < 1000
        last = f"{accounts - 1}-1"
        assert broker.ack(last, leases[last])
        assert [t.task_id for t in broker.lease_many("w", 30, 5).tasks] == [
            f"{accounts - 1}-2"]
        broker.concurrency_limits = ()
        sent_back, calls = 0, 0
        while sent_back < accounts - 1 and calls < 50:
            sent_back += len(broker.lease_many("w", 30, 10_000).tasks)
            calls += 1
        assert sent_back == accounts - 1
        assert 5 <= calls <= 20, calls
        sound(broker)


class TestAKeyedLimit:
    """A limit kept per key (the record's limit_key, an account say): each key has its
    own slots and parked tasks, under the name's limit."""

    def keyed(self, broker: Broker, *ids_and_keys: tuple[str, str]) -> None:
        broker.enqueue_many([NewTask(t, name=NAME, limit_key=k) for t, k in ids_and_keys])

    def test_each_key_has_its_own_slots(self, per_account: Broker) -> None:
        self.keyed(per_account, ("a1", "acct-a"), ("a2", "acct-a"), ("a3", "acct-a"),
                   ("b1", "acct-b"), ("b2", "acct-b"), ("b3", "acct-b"))
        leases = lease_all(per_account)
        assert set(leases) == {"a1", "a2", "b1", "b2"}
        assert parked(per_account) == []  # the name's own group holds nothing
        group = f"{NAME}|acct-a"
        assert list(per_account.client.lrange(per_account.keys.parked(group), 0, -1)) == ["a3"]
        assert set(per_account.client.smembers(per_account.keys.holding(group))) == {"a1", "a2"}
        sound(per_account)
        per_account.ack("b1", leases["b1"])
        assert first_runs(lease_all(per_account)) == {"b3"}  # b's slot, not a's
        per_account.ack("a1", leases["a1"])
        assert first_runs(lease_all(per_account)) == {"a3"}
        sound(per_account)

    def test_a_group_of_another_type_sends_the_tasks_not_leased_back_in_their_order(
        self, per_account: Broker
    ) -> None:
        enqueue(per_account, "first", name="mod.other")
        self.keyed(per_account, ("k1", "acct-a"))
        enqueue(per_account, "last", name="mod.other")
        key = per_account.keys.parked(f"{NAME}|acct-a")
        per_account.client.set(key, "not taskq's")
        got = per_account.lease_many("w", 30, 10)
        assert [t.task_id for t in got.tasks] == ["first"] and got.wait_seconds == 0
        assert per_account.client.lrange(per_account.keys.ready, 0, -1) == ["last", "k1"]
        assert_refused_unchanged(per_account.client, key, lambda: lease_all(per_account))
        per_account.client.delete(key)
        assert [t.task_id for t in per_account.lease_many("w", 30, 1).tasks] == ["k1"]
        assert [t.task_id for t in per_account.lease_many("w", 30, 1).tasks] == ["last"]
        sound(per_account)

    def test_the_snapshot_lists_each_key_that_holds_or_waits(self, per_account: Broker) -> None:
        self.keyed(per_account, ("a1", "acct-a"), ("a2", "acct-a"), ("a3", "acct-a"),
                   ("b1", "acct-b"))
        enqueue(per_account, "plain")
        leases = lease_all(per_account)
        assert take_snapshot(per_account, limit=0, groups=10).limits == [
            LimitView(NAME, 2, 1, 0), LimitView(NAME, 2, 2, 1, "acct-a"),
            LimitView(NAME, 2, 1, 0, "acct-b")]
        for task_id, token in leases.items():
            per_account.ack(task_id, token)
        lease_all(per_account)  # a3
        assert take_snapshot(per_account, limit=0, groups=10).limits == [
            LimitView(NAME, 2, 1, 0, "acct-a")]
        assert set(per_account.client.smembers(per_account.keys.groups(NAME))) == {f"{NAME}|acct-a"}

    def test_the_snapshot_lists_the_first_groups_asked_for_and_counts_them_all(
        self, per_account: Broker
    ) -> None:
        self.keyed(per_account, *((f"t{i}", f"acct-{i:02}") for i in range(12)))
        self.keyed(per_account, *((f"u{i}", f"acct-{i:02}") for i in range(12)))
        self.keyed(per_account, *((f"v{i}", f"acct-{i:02}") for i in range(12)))
        lease_all(per_account)  # two of each account run, the third parked
        snap = take_snapshot(per_account, limit=5, groups=3)
        assert [v.key for v in snap.limits] == ["acct-00", "acct-01", "acct-02"]
        assert snap.limit_groups == 12
        assert snap.counts.ready == per_account.counts().ready == 12  # every parked one
        # Unless told otherwise, a snapshot lists them all, however few tasks it lists.
        assert len(take_snapshot(per_account, limit=0).limits) == 12

    def test_a_parked_keyed_task_can_be_cancelled(self, per_account: Broker) -> None:
        self.keyed(per_account, ("a1", "acct-a"), ("a2", "acct-a"), ("a3", "acct-a"))
        lease_all(per_account)
        assert per_account.cancel("a3").outcome == "cancelled"
        assert not per_account.client.exists(per_account.keys.parked_names)
        sound(per_account)


    def test_a_run_ending_then_its_groups_parked_task_cancelled_leaves_no_mark_behind(
        self, per_account: Broker
    ) -> None:
        """Kept per account until some group parks again, such marks grew with every
        account whose waiting task was cancelled before a lease came."""
        self.keyed(per_account, ("a1", "acct-a"), ("a2", "acct-a"), ("a3", "acct-a"))
        held = lease_all(per_account)
        assert per_account.ack("a1", held["a1"])  # marks acct-a: a3 waits for that slot
        assert per_account.client.sismember(per_account.keys.slots_freed,
                                        f"{NAME}|acct-a")
        assert per_account.cancel("a3").outcome == "cancelled"
        assert not per_account.client.exists(per_account.keys.slots_freed)
        sound(per_account)


class TestAChangedKeyMode:
    """A redeploy that starts or stops keeping a limit per key while tasks sent under
    the other declaration wait and run: each run is counted by its record's key, each
    waiting task by the declaration of the lease that looks at it."""

    def declare(self, broker: Broker, most: int, key: str) -> None:
        broker.concurrency_limits = (ConcurrencyLimit(NAME, most, key),)

    def accounts(self, broker: Broker, *ids: str) -> None:
        """Tasks `<account><n>`, each sent with its account as its key."""
        broker.enqueue_many([NewTask(t, name=NAME, limit_key=t[:-1]) for t in ids])

    def test_a_limit_no_longer_kept_per_key_runs_one_task_of_every_account_at_once(
        self, broker: Broker
    ) -> None:
        self.accounts(broker, "a1", "b1", "c1", "d1", "e1")
        self.declare(broker, 1, "")
        assert list(lease_all(broker)) == ["a1"]
        assert parked(broker) == ["b1", "c1", "d1", "e1"]
        sound(broker)

    def test_the_runs_started_per_key_hold_back_the_names_every_task(
        self, broker: Broker
    ) -> None:
        self.declare(broker, 1, "account")
        self.accounts(broker, "a1", "b1", "c1", "a2", "b2")
        leases = lease_all(broker)
        assert set(leases) == {"a1", "b1", "c1"}
        self.declare(broker, 1, "")
        self.accounts(broker, "d1")
        assert lease_all(broker) == {}  # three runs hold the name's one slot
        # Those parked per key went back and joined the name's line in their order.
        assert parked(broker) == ["a2", "b2", "d1"]
        sound(broker)
        for run in ("a1", "b1"):
            broker.ack(run, leases[run])
            assert lease_all(broker) == {}
        broker.ack("c1", leases["c1"])
        assert list(lease_all(broker)) == ["a2"]
        assert parked(broker) == ["b2", "d1"]
        sound(broker)

    def test_a_limit_newly_kept_per_key_counts_each_keys_runs_whatever_started_them(
        self, broker: Broker
    ) -> None:
        self.declare(broker, 2, "")
        self.accounts(broker, "a1", "a2", "b1")
        leases = lease_all(broker)
        assert set(leases) == {"a1", "a2"} and parked(broker) == ["b1"]
        self.declare(broker, 1, "account")
        self.accounts(broker, "a3")
        # b1 is counted against b's runs, none; a3 against a's two, though they were
        # started while the limit was the name's.
        assert list(lease_all(broker)) == ["b1"]
        assert list(broker.client.lrange(broker.keys.parked(f"{NAME}|a"), 0, -1)) == ["a3"]
        broker.ack("a1", leases["a1"])
        assert lease_all(broker) == {}
        broker.ack("a2", leases["a2"])
        assert list(lease_all(broker)) == ["a3"]
        sound(broker)

    def test_a_task_waiting_in_its_names_line_under_its_key_can_be_cancelled(
        self, broker: Broker
    ) -> None:
        self.declare(broker, 1, "")
        self.accounts(broker, "a1", "b1", "c1")
        leases = lease_all(broker)
        assert parked(broker) == ["b1", "c1"]
        self.declare(broker, 1, "account")
        assert broker.cancel("b1").outcome == "cancelled"
        assert parked(broker) == ["c1"]
        sound(broker)
        # Sent back with a slot of the name's line promised, then cancelled: the
        # promise is dropped where it was made, and the line's group looked at again.
        broker.ack("a1", leases["a1"])
        self.declare(broker, 1, "")
        enqueue(broker, "first", name="mod.first", priority=9)
        assert [t.task_id for t in broker.lease_many("w", 30, 1).tasks] == ["first"]
        assert broker.client.hget(broker.keys.task("c1"), "parked") == "back"
        assert broker.client.smembers(broker.keys.unparked(NAME)) == {"c1"}
        assert broker.cancel("c1").outcome == "cancelled"
        assert broker.client.smembers(broker.keys.unparked(NAME)) == set()
        sound(broker)

    def test_a_keyed_runs_end_frees_the_names_count_and_wakes_a_worker(
        self, broker: Broker
    ) -> None:
        self.declare(broker, 1, "account")
        self.accounts(broker, "a1")
        leases = lease_all(broker)
        self.declare(broker, 1, "")
        self.accounts(broker, "b1")
        assert lease_all(broker) == {} and parked(broker) == ["b1"]
        broker.client.delete(broker.keys.wake)
        assert broker.ack("a1", leases["a1"])
        assert broker.client.sismember(broker.keys.slots_freed, NAME)
        assert broker.client.llen(broker.keys.wake) == 1
        assert broker.client.smembers(broker.keys.keyed(NAME)) == set()
        assert list(lease_all(broker)) == ["b1"]
        sound(broker)

    def test_a_keyed_run_left_counted_by_an_older_scripts_end_is_dropped_from_the_count(
        self, broker: Broker
    ) -> None:
        """An older taskq's reap frees a keyed run's slot without knowing `keyed:`:
        left there, it would hold a limit of one slot not kept per key for ever."""
        self.declare(broker, 1, "account")
        self.accounts(broker, "a1", "b1")
        leases = lease_all(broker)
        broker.client.srem(broker.keys.holding(f"{NAME}|a"), "a1")  # as that reap does
        broker.client.hdel(broker.keys.task("a1"), "slot")
        broker.client.zrem(broker.keys.leased, "a1")
        broker.client.sadd(broker.keys.keyed(NAME), "gone")  # and a run whose record went
        self.declare(broker, 1, "")
        self.accounts(broker, "c1")
        assert lease_all(broker) == {}  # b1 still runs
        assert broker.client.smembers(broker.keys.keyed(NAME)) == {"b1"}
        broker.ack("b1", leases["b1"])
        assert list(lease_all(broker)) == ["c1"]


class TestLimitArguments:
    @pytest.mark.parametrize("most", [0, -1, 10_001, 2.5, True, "5", None])
    def test_a_bad_limit_is_refused_saying_what_is_wrong(self, most: object) -> None:
        with pytest.raises(ConfigError, match="max_concurrency must be a whole number"):
            check_concurrency("mod.fn", most)

    def test_the_script_refuses_a_limit_out_of_range_before_writing(self, broker: Broker) -> None:
        enqueue(broker, "a")
        broker.concurrency_limits = (ConcurrencyLimit(NAME, 10_001),)
        with pytest.raises(Exception, match="max must be a whole number"):
            broker.lease_many("w", 30, 1)
        assert broker.counts().ready == 1
