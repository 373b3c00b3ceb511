"""Priorities: a lease takes the highest priority ready, the oldest first within one, and
a task keeps its priority through delays, retries, releases, revivals and cancels."""

from __future__ import annotations

import pytest

from helpers import events, lease_one, ready_ids, record_of, view, wait_past
from taskq.broker import Broker, NewTask
from taskq.errors import InvalidTaskError


def lease_all(broker: Broker) -> list[str]:
    return [t.task_id for t in broker.lease_many("w", 30, 100).tasks]


class TestLeaseOrder:
    def test_the_highest_priority_goes_first_and_the_oldest_within_one(
        self, broker: Broker
    ) -> None:
        for task_id, priority in [("low", 0), ("mid1", 5), ("high1", 9), ("mid2", 5),
                                  ("high2", 9), ("six", 6), ("four", 4)]:
            broker.enqueue(task_id, priority=priority)
        assert ready_ids(broker.client, broker.keys) == [
            "high1", "high2", "six", "mid1", "mid2", "four", "low"]
        assert lease_all(broker) == ["high1", "high2", "six", "mid1", "mid2", "four", "low"]

    def test_one_at_a_time_too(self, broker: Broker) -> None:
        broker.enqueue_many([NewTask("a", priority=1), NewTask("b", priority=8),
                             NewTask("c")])
        assert [lease_one(broker)[0] for _ in range(3)] == ["b", "c", "a"]
        assert broker.lease("w", 30) is None

    def test_a_queue_that_never_uses_priorities_has_no_other_keys(self, broker: Broker) -> None:
        broker.enqueue("a")
        broker.enqueue("b", priority=5)
        lease_all(broker)
        assert not broker.client.exists(broker.keys.ready_levels)
        assert "priority" not in broker.client.hkeys(broker.keys.task("a"))
        assert record_of(broker, "a").priority == 5

    def test_an_emptied_level_is_forgotten(self, broker: Broker) -> None:
        broker.enqueue("a", priority=7)
        assert broker.client.zrange(broker.keys.ready_levels, 0, -1) == ["7"]
        lease_all(broker)
        broker.enqueue("b")
        lease_all(broker)
        assert not broker.client.exists(broker.keys.ready_levels)

    def test_counts_cover_every_priority(self, broker: Broker) -> None:
        broker.enqueue_many([NewTask(f"t{p}", priority=p) for p in range(10)])
        assert broker.counts().ready == 10
        assert view(broker.client, broker.keys).violations() == []


class TestAPriorityIsKept:
    def test_through_a_delay(self, broker: Broker) -> None:
        broker.enqueue("later", delay=0.01, priority=9)
        broker.enqueue("now")
        wait_past(0.01)
        broker.promote()
        assert lease_all(broker) == ["later", "now"]

    def test_through_a_retry(self, broker: Broker) -> None:
        broker.enqueue("flaky", priority=8)
        task_id, token = lease_one(broker)
        broker.fail(task_id, token, "boom", backoff_base=0.001, backoff_max=0.001)
        broker.enqueue("plain")
        wait_past(0.01)
        broker.promote()
        assert lease_all(broker) == ["flaky", "plain"]

    def test_through_a_release_which_puts_it_at_the_front_of_its_own_level(
        self, broker: Broker
    ) -> None:
        broker.enqueue_many([NewTask("first", priority=2), NewTask("second", priority=2),
                             NewTask("plain")])
        broker.client.delete(broker.keys.ready)  # leave only the priority 2 tasks
        task_id, token = lease_one(broker)
        assert task_id == "first"
        broker.release(task_id, token)
        broker.enqueue("other")
        assert ready_ids(broker.client, broker.keys) == ["other", "first", "second"]

    def test_through_a_revival_from_the_dlq(self, broker: Broker) -> None:
        broker.enqueue("doomed", max_retries=0, priority=9)
        task_id, token = lease_one(broker)
        broker.fail(task_id, token, "boom")
        broker.enqueue("plain")
        assert broker.retry_dead("doomed")
        assert lease_all(broker) == ["doomed", "plain"]

    def test_a_cancel_takes_it_out_of_its_own_level(self, broker: Broker) -> None:
        broker.enqueue("a", priority=3)
        broker.enqueue("b", priority=3)
        assert broker.cancel("a").outcome == "cancelled"
        assert ready_ids(broker.client, broker.keys) == ["b"]
        assert broker.cancel("b").outcome == "cancelled"
        assert not broker.client.exists(broker.keys.ready_levels)


def test_the_enqueued_event_names_a_priority_other_than_the_default(broker: Broker) -> None:
    broker.enqueue("urgent", priority=9)
    broker.enqueue("plain")
    fields = [e.fields for e in events(broker.client, broker.keys)]
    assert fields[0]["priority"] == "9" and "priority" not in fields[1]
    assert record_of(broker, "urgent").priority == 9


@pytest.mark.parametrize("priority", [-1, 10, 2.5, "9", True, None])
def test_a_priority_outside_0_to_9_is_refused_and_nothing_written(
    broker: Broker, priority: object
) -> None:
    with pytest.raises(InvalidTaskError, match="priority"):
        broker.enqueue("t", priority=priority)  # type: ignore[arg-type]
    assert broker.task("t") is None
