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

    def test_when_a_keyed_lease_whose_record_is_gone_is_reaped(self, limited: Broker) -> None:
        limited.enqueue_many([NewTask(t, name=NAME, limit_key="acct") for t in "abc"])
        lease_all(limited, seconds=0.05)
        limited.client.delete(limited.keys.task("b"))
        wait_past(0.05)
        assert ("b", "gone") in limited.reap()
        assert limited.client.smembers(limited.keys.holding(f"{NAME}|acct")) == set()
        assert first_runs(lease_all(limited)) == {"c"}

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
        broker.concurrency_limits = (ConcurrencyLimit(NAME, 1),)
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

    def test_each_key_has_its_own_slots(self, limited: Broker) -> None:
        self.keyed(limited, ("a1", "acct-a"), ("a2", "acct-a"), ("a3", "acct-a"),
                   ("b1", "acct-b"), ("b2", "acct-b"), ("b3", "acct-b"))
        leases = lease_all(limited)
        assert set(leases) == {"a1", "a2", "b1", "b2"}
        assert parked(limited) == []  # the name's own group holds nothing
        group = f"{NAME}|acct-a"
        assert list(limited.client.lrange(limited.keys.parked(group), 0, -1)) == ["a3"]
        assert set(limited.client.smembers(limited.keys.holding(group))) == {"a1", "a2"}
        sound(limited)
        limited.ack("b1", leases["b1"])
        assert first_runs(lease_all(limited)) == {"b3"}  # b's slot, not a's
        limited.ack("a1", leases["a1"])
        assert first_runs(lease_all(limited)) == {"a3"}
        sound(limited)

    def test_a_group_of_another_type_sends_the_tasks_not_leased_back_in_their_order(
        self, limited: Broker
    ) -> None:
        enqueue(limited, "first", name="mod.other")
        self.keyed(limited, ("k1", "acct-a"))
        enqueue(limited, "last", name="mod.other")
        key = limited.keys.parked(f"{NAME}|acct-a")
        limited.client.set(key, "not taskq's")
        got = limited.lease_many("w", 30, 10)
        assert [t.task_id for t in got.tasks] == ["first"] and got.wait_seconds == 0
        assert limited.client.lrange(limited.keys.ready, 0, -1) == ["last", "k1"]
        assert_refused_unchanged(limited.client, key, lambda: lease_all(limited))
        limited.client.delete(key)
        assert [t.task_id for t in limited.lease_many("w", 30, 1).tasks] == ["k1"]
        assert [t.task_id for t in limited.lease_many("w", 30, 1).tasks] == ["last"]
        sound(limited)

    def test_the_snapshot_lists_each_key_that_holds_or_waits(self, limited: Broker) -> None:
        self.keyed(limited, ("a1", "acct-a"), ("a2", "acct-a"), ("a3", "acct-a"),
                   ("b1", "acct-b"))
        enqueue(limited, "plain")
        leases = lease_all(limited)
        assert take_snapshot(limited, limit=0, groups=10).limits == [
            LimitView(NAME, 2, 1, 0), LimitView(NAME, 2, 2, 1, "acct-a"),
            LimitView(NAME, 2, 1, 0, "acct-b")]
        for task_id, token in leases.items():
            limited.ack(task_id, token)
        lease_all(limited)  # a3
        assert take_snapshot(limited, limit=0, groups=10).limits == [
            LimitView(NAME, 2, 1, 0, "acct-a")]
        assert set(limited.client.smembers(limited.keys.groups(NAME))) == {f"{NAME}|acct-a"}

    def test_the_snapshot_lists_the_first_groups_asked_for_and_counts_them_all(
        self, limited: Broker
    ) -> None:
        self.keyed(limited, *((f"t{i}", f"acct-{i:02}") for i in range(12)))
        self.keyed(limited, *((f"u{i}", f"acct-{i:02}") for i in range(12)))
        self.keyed(limited, *((f"v{i}", f"acct-{i:02}") for i in range(12)))
        lease_all(limited)  # two of each account run, the third parked
        snap = take_snapshot(limited, limit=5, groups=3)
        assert [v.key for v in snap.limits] == ["acct-00", "acct-01", "acct-02"]
        assert snap.limit_groups == 12
        assert snap.counts.ready == limited.counts().ready == 12  # every parked one
        # Unless told otherwise, a snapshot lists them all, however few tasks it lists.
        assert len(take_snapshot(limited, limit=0).limits) == 12

    def test_a_parked_keyed_task_can_be_cancelled(self, limited: Broker) -> None:
        self.keyed(limited, ("a1", "acct-a"), ("a2", "acct-a"), ("a3", "acct-a"))
        lease_all(limited)
        assert limited.cancel("a3").outcome == "cancelled"
        assert not limited.client.exists(limited.keys.parked_names)
        sound(limited)


    def test_a_run_ending_then_its_groups_parked_task_cancelled_leaves_no_mark_behind(
        self, limited: Broker
    ) -> None:
        """Kept per account until some group parks again, such marks grew with every
        account whose waiting task was cancelled before a lease came."""
        self.keyed(limited, ("a1", "acct-a"), ("a2", "acct-a"), ("a3", "acct-a"))
        held = lease_all(limited)
        assert limited.ack("a1", held["a1"])  # marks acct-a: a3 waits for that slot
        assert limited.client.sismember(limited.keys.slots_freed,
                                        f"{NAME}|acct-a")
        assert limited.cancel("a3").outcome == "cancelled"
        assert not limited.client.exists(limited.keys.slots_freed)
        sound(limited)


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
