"""A queue's recent throughput, counted from the newest end of its event log, whether
the client decodes Redis's replies to text (as taskq's own do) or not."""

from __future__ import annotations

import pytest
import redis

from taskq.broker import Broker, NewTask
from taskq.settings import Settings
from taskq.throughput import read_throughput


@pytest.mark.parametrize("decoded", [True, False], ids=["text", "bytes"])
def test_the_minutes_completions_and_failed_attempts_are_counted(
    queue: Broker, settings: Settings, decoded: bool
) -> None:
    queue.enqueue_many([NewTask(f"ok-{i}") for i in range(3)] + [NewTask("bad")])
    for task in queue.lease_many("w-1", 30, 4).tasks:
        if task.task_id == "bad":
            assert queue.fail(task.task_id, task.token, "it broke").status == "retry"
        else:
            assert queue.ack(task.task_id, task.token)
    client = redis.Redis.from_url(settings.redis_url, decode_responses=decoded)
    seen = read_throughput(Broker(client, queue.queue))
    assert (seen.completed, seen.failed, seen.window_ms) == (3, 1, 60_000)
