"""Bulk actions on a queue's dead tasks: newest first, past entries they leave, under
another operator's moves, and counting what is left truly."""

from __future__ import annotations

import redis

from taskq.broker import Broker
from taskq.bulk import _each, retry_all


def make_dead(broker: Broker, *task_ids: str) -> None:
    """Each dies in turn, so the last is the DLQ's newest."""
    for task_id in task_ids:
        broker.enqueue(task_id, max_retries=0)
        (task,) = broker.lease_many("w", 30, 1).tasks
        broker.fail(task.task_id, task.token, "broke")


def test_entries_with_no_record_are_stepped_past_however_many_there_are(
    queue: Broker, client: redis.Redis
) -> None:
    make_dead(queue, "d0", "d1", "d2")
    client.lpush(queue.keys.dlq, *(f"gone-{i}" for i in range(25)))
    done = retry_all(queue, limit=2)
    assert (done.done, done.missed, len(done.unusable)) == (["d2", "d1"], [], 25)
    assert done.left == 1 and retry_all(queue, limit=2).done == ["d0"]


def test_a_task_another_operator_retried_first_leaves_no_dead_task_skipped(
    queue: Broker, client: redis.Redis
) -> None:
    make_dead(queue, "e", "d", "c", "b", "a")  # newest first: a b c d e
    other = Broker(client, queue.queue)

    def retry_after_another(task_id: str) -> bool:
        if task_id == "a":
            assert other.retry_dead("a")  # the other operator's, a moment before
        return queue.retry_dead(task_id)

    done = _each(queue, 3, retry_after_another, None)
    assert (done.done, done.missed, done.left) == (["b", "c", "d"], ["a"], 1)
    assert queue.dead() == ["e"]


def test_copies_of_an_entry_that_is_no_task_s_are_not_counted_as_dead_tasks(
    queue: Broker, client: redis.Redis
) -> None:
    make_dead(queue, "d0")
    client.lpush(queue.keys.dlq, "gone", "gone")
    done = retry_all(queue)
    assert (done.done, done.unusable, done.left) == (["d0"], ["gone"], 0)
