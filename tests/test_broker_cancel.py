"""Broker.cancel and Broker.ack_cancelled: a task that is not running ends cancelled at
once; a running one is flagged, its holder told by the heartbeat's reply, and it ends
cancelled however its holder settles it, except by an ack that came first."""

from __future__ import annotations

import threading

import pytest
import redis

from helpers import (
    assert_refused_unchanged,
    events,
    lease_one,
    leased,
    overwrite,
    record_of,
    view,
    wait_past,
)
from taskq.broker import Broker
from taskq.errors import InvalidTaskError, TaskCancelledError
from taskq.results import Renewal
from waiting import wait_until


def cancelled_cleanly(broker: Broker, task_id: str) -> None:
    """`task_id` ended cancelled: in no list or set, its record saying so and expiring."""
    record = record_of(broker, task_id)
    assert record.state == "cancelled" and record.cancelled_at > 0
    assert view(broker.client, broker.keys).where(task_id) == []
    assert broker.client.pttl(broker.keys.task(task_id)) > 0
    assert view(broker.client, broker.keys).violations() == []


class TestATaskThatIsNotRunning:
    def test_a_pending_task_ends_cancelled_and_is_never_leased(self, broker: Broker) -> None:
        broker.enqueue("t1")
        cancellation = broker.cancel("t1")
        assert (cancellation.outcome, cancellation.state) == ("cancelled", "pending")
        cancelled_cleanly(broker, "t1")
        assert broker.lease("w1", 10) is None

    def test_a_delayed_task_ends_cancelled_and_is_never_promoted(self, broker: Broker) -> None:
        broker.enqueue("t1", delay=0.01)
        assert broker.cancel("t1").outcome == "cancelled"
        wait_past(0.01)
        assert broker.promote() == []
        cancelled_cleanly(broker, "t1")

    def test_a_dead_task_is_cancelled_out_of_the_dlq(self, broker: Broker) -> None:
        broker.fail("t1", leased(broker, max_retries=0), "boom")
        cancellation = broker.cancel("t1")
        assert (cancellation.outcome, cancellation.state) == ("cancelled", "dead")
        assert broker.dead() == []
        assert not broker.retry_dead("t1")
        cancelled_cleanly(broker, "t1")

    def test_only_the_cancelled_task_leaves_ready(self, broker: Broker) -> None:
        for task_id in ("a", "b", "c"):
            broker.enqueue(task_id)
        broker.cancel("b")
        assert [lease_one(broker)[0], lease_one(broker)[0]] == ["a", "c"]

    def test_its_cancel_is_one_event_naming_the_state_it_left(self, broker: Broker) -> None:
        broker.enqueue("t1", delay=30)
        seen = len(events(broker.client, broker.keys))
        broker.cancel("t1")
        (event,) = events(broker.client, broker.keys)[seen:]
        assert (event.type, event.state, event.fields["from"]) == ("cancelled", "cancelled",
                                                                   "delayed")

    def test_a_completed_cancelled_or_unknown_task_is_left_as_it_is(self, broker: Broker) -> None:
        broker.ack("t1", leased(broker))
        broker.enqueue("t2")
        broker.cancel("t2")
        seen = len(events(broker.client, broker.keys))
        assert broker.cancel("t1").outcome == "unchanged"
        assert broker.cancel("t2").outcome == "unchanged"
        assert broker.cancel("nosuch").outcome == "unknown"
        broker.client.set(broker.keys.task("hand-made"), "not a record")
        assert broker.cancel("hand-made").outcome == "unknown"  # not a WRONGTYPE error
        assert record_of(broker, "t1").state == "completed"
        assert len(events(broker.client, broker.keys)) == seen

    def test_a_cancel_limited_to_one_state_leaves_a_task_in_any_other(
        self, broker: Broker
    ) -> None:
        broker.fail("t1", leased(broker, max_retries=0), "boom")
        broker.enqueue("waiting")
        assert broker.cancel("waiting", only="dead").outcome == "unchanged"
        assert broker.cancel("t1", only="dead").outcome == "cancelled"
        assert record_of(broker, "waiting").state == "pending"
        with pytest.raises(InvalidTaskError, match="only must be one of pending, delayed"):
            broker.cancel("waiting", only="completed")

    def test_its_idempotency_key_still_names_it(self, broker: Broker) -> None:
        broker.enqueue("t1", idempotency_key="order-7", idempotency_ttl=3600)
        broker.cancel("t1")
        again = broker.enqueue("t2", idempotency_key="order-7")
        assert (again.task_id, again.created) == ("t1", False)
        assert broker.client.pttl(broker.keys.task("t1")) > 3_000_000


class TestARunningTask:
    def test_is_flagged_and_its_holder_told_by_the_next_heartbeat(self, broker: Broker) -> None:
        token = leased(broker)
        assert broker.heartbeat("t1", token, 10) is Renewal.HELD
        cancellation = broker.cancel("t1")
        assert (cancellation.outcome, cancellation.state) == ("requested", "running")
        assert broker.heartbeat("t1", token, 10) is Renewal.CANCEL
        assert record_of(broker, "t1").state == "running"
        assert broker.cancel("t1").outcome == "unchanged"

    def test_ends_cancelled_when_its_holder_settles_it_so(self, broker: Broker) -> None:
        token = leased(broker)
        broker.cancel("t1")
        assert broker.ack_cancelled("t1", token)
        cancelled_cleanly(broker, "t1")
        assert record_of(broker, "t1").result is None

    def test_a_log_of_another_type_refuses_the_settling_before_any_write(
        self, broker: Broker
    ) -> None:
        token = leased(broker)
        broker.cancel("t1")
        key = overwrite(broker.client, broker.keys, "events")
        assert_refused_unchanged(broker.client, key, lambda: broker.ack_cancelled("t1", token))
        broker.client.delete(key)
        assert broker.ack_cancelled("t1", token)
        cancelled_cleanly(broker, "t1")

    def test_a_stale_holder_cannot_settle_it(self, broker: Broker) -> None:
        token = leased(broker)
        broker.cancel("t1")
        assert not broker.ack_cancelled("t1", token + 1)
        assert record_of(broker, "t1").state == "running"

    def test_no_holder_can_end_a_task_cancelled_that_no_one_cancelled(
        self, broker: Broker
    ) -> None:
        token = leased(broker)
        assert not broker.ack_cancelled("t1", token)
        assert record_of(broker, "t1").state == "running"

    def test_a_failure_ends_it_cancelled_not_retried(self, broker: Broker) -> None:
        token = leased(broker)
        broker.cancel("t1")
        assert broker.fail("t1", token, "boom").status == "cancelled"
        cancelled_cleanly(broker, "t1")
        assert record_of(broker, "t1").last_error == "boom"

    def test_a_release_at_shutdown_ends_it_cancelled_not_ready(self, broker: Broker) -> None:
        token = leased(broker)
        broker.cancel("t1")
        assert broker.release("t1", token)
        cancelled_cleanly(broker, "t1")

    def test_an_expired_lease_is_reaped_cancelled(self, broker: Broker) -> None:
        broker.enqueue("t1")
        _, token = lease_one(broker, seconds=0.01)
        broker.cancel("t1")
        wait_past(0.01)
        assert broker.reap() == [("t1", "cancelled")]
        cancelled_cleanly(broker, "t1")
        assert not broker.ack_cancelled("t1", token)

    def test_an_ack_that_came_first_completes_it(self, broker: Broker) -> None:
        token = leased(broker)
        broker.cancel("t1")
        assert broker.ack("t1", token, '"done"')
        assert record_of(broker, "t1").state == "completed"
        assert broker.cancel("t1").outcome == "unchanged"


class TestAWaitingProducer:
    def test_is_woken_by_the_cancel_and_told_so(self, broker: Broker) -> None:
        handle = broker.enqueue("t1", delay=60)
        errors: list[BaseException] = []

        def wait() -> None:
            try:
                handle.result(timeout=30)
            except BaseException as e:
                errors.append(e)

        waiter = threading.Thread(target=wait)
        waiter.start()
        wait_until(lambda: broker.client.hget(broker.keys.task("t1"), "waiters") is not None)
        assert handle.cancel().outcome == "cancelled"
        waiter.join(10)
        assert not waiter.is_alive()
        assert len(errors) == 1 and isinstance(errors[0], TaskCancelledError)
        assert handle.status() == "cancelled"

    def test_of_a_running_task_is_woken_when_it_ends_cancelled(self, broker: Broker) -> None:
        token = leased(broker)
        handle = broker.handle("t1")
        broker.watch("t1")
        handle.cancel()
        assert not broker.wait_done("t1", 0.05)
        broker.ack_cancelled("t1", token)
        assert broker.wait_done("t1", 5)
        with pytest.raises(TaskCancelledError, match="t1 was cancelled"):
            handle.result(timeout=1)


def test_a_refused_argument_writes_nothing(client: redis.Redis) -> None:
    broker = Broker(client, "test", completed_ttl=1)
    broker.enqueue("t1")
    keys, args = broker.keys, [broker.keys.prefix, "t1", 1000, 10**20, ""]
    with pytest.raises(redis.ResponseError, match="completed_ttl must be a whole number"):
        broker.scripts.cancel(keys=[keys.ready, keys.delayed, keys.leased, keys.dlq,
                                    keys.events, keys.seq, keys.epoch], args=args)
    assert record_of(broker, "t1").state == "pending"
