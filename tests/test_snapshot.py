"""A queue's snapshot: what a caller may ask it to list."""

from __future__ import annotations

import logging
import uuid
from pathlib import Path
from typing import Any

import pytest
import redis

from taskq.broker import Broker
from taskq.errors import InvalidTaskError
from taskq.keys import QUEUES_KEY
from taskq.settings import Settings
from taskq.snapshot import queue_names, take_snapshot
from taskq.tools.embedded import EmbeddedRedis, free_port
from taskq.web.totals import read_totals


@pytest.mark.parametrize(("limit", "groups", "said"), [
    (-1, 0, "limit must be a whole number of tasks between 0 and 100000, not -1"),
    (None, 0, "limit must be a whole number of tasks between 0 and 100000, not None"),
    (2.5, 0, "limit must be a whole number of tasks between 0 and 100000, not 2.5"),
    (10, 10**6, "groups must be a whole number of groups between 0 and 100000, not 1000000"),
])  # fmt: skip
def test_a_count_outside_its_range_is_refused_naming_it(
    broker: Broker, limit: Any, groups: Any, said: str
) -> None:
    with pytest.raises(InvalidTaskError, match=said):
        take_snapshot(broker, limit=limit, groups=groups)


def test_a_limit_of_zero_counts_and_lists_nothing(broker: Broker) -> None:
    broker.enqueue("t1", delay=60)
    snap = take_snapshot(broker, limit=0, groups=0)
    assert snap.counts.delayed == 1 and snap.delayed == []


def test_a_broker_on_a_client_that_does_not_decode_reads_the_same_state(
    client: redis.Redis, settings: Settings
) -> None:
    """`Broker(redis.Redis(...))` is the README's own call, and redis-py does not decode
    by default: the readers of snapshots, totals and the queue list must not read
    b'...' as text."""
    made = redis.RedisCluster if settings.redis_cluster else redis.Redis
    raw_client: Any = made.from_url(settings.redis_url)
    try:
        raw = Broker(raw_client, "bytes")
        raw.enqueue("t1")
        raw.enqueue("t2", delay=60)
        snapshot = take_snapshot(raw)
        assert [d.task_id for d in snapshot.delayed] == ["t2"]
        assert (snapshot.epoch, snapshot.seq) == (client.get(raw.keys.epoch), 2)
        assert read_totals(raw)["enqueued"] == 2
        assert queue_names(raw) == ["bytes"]
    finally:
        raw_client.close()


def test_thousands_of_bad_queue_names_are_left_out_in_one_log_line(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Each was a line of its own, before every answer of every command. (A server of
    its own: the registry of queues is shared by every test on the session's.)"""
    junk = [f"bad name {uuid.uuid4().hex} {n}" for n in range(2000)]
    with EmbeddedRedis(port=free_port(), data_dir=tmp_path) as server, \
            redis.Redis(port=server.port, decode_responses=True) as client:
        client.sadd(QUEUES_KEY, *junk)
        broker = Broker(client, "real")
        broker.enqueue("t1")
        with caplog.at_level(logging.WARNING, "taskq"):
            listed = queue_names(broker)
            again = queue_names(broker)
    assert listed == again == ["real"]
    lines = [r.getMessage() for r in caplog.records if "not listed" in r.getMessage()]
    assert len(lines) == 1, lines[:3]
    assert lines[0].endswith(f"not listed (a member of {QUEUES_KEY}) (and 1,999 more such "
                             "members)")
