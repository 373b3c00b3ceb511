"""What the producer's calls make of Redis's replies and refusals."""

from __future__ import annotations

from pathlib import Path

import pytest
import redis

from taskq.broker import Broker
from taskq.calls import enqueue_errors
from taskq.errors import BrokerError, IncompleteEnqueueError, InvalidTaskError
from taskq.results import NewTask
from taskq.tools.embedded import EmbeddedRedis


def test_a_run_at_the_server_finds_past_ten_years_is_an_invalid_task_naming_both_times(
) -> None:
    """A server clock behind this host's lets a run_at through the host's check."""
    refusal = redis.ResponseError(
        "user_script:386: run_at_ms 2111945791437 is more than ten years after the server "
        "time 1796542591574 script: bdc5f951b53db7a0fd2e624f960c9a1f849dbafa, on "
        "@user_script:386.")
    said = (r"run_at \(Unix ms 2111945791437\) is more than ten years ahead of the Redis "
            r"server's time \(1796542591574 ms\).*batches sent before it were enqueued")
    with pytest.raises(InvalidTaskError, match=said), enqueue_errors():
        raise refusal


def test_any_other_refusal_stays_a_broker_error() -> None:
    said = "Redis could not enqueue tasks: ResponseError"
    with pytest.raises(BrokerError, match=said), enqueue_errors():
        raise redis.ResponseError("OOM command not allowed")


def test_a_batch_refused_after_others_went_in_says_how_many_did(tmp_path: Path) -> None:
    """Out of memory part way through: the batches before the refused one stay
    enqueued, and the caller, who gets no handle of theirs, is told so."""
    with EmbeddedRedis(data_dir=tmp_path) as server, \
            redis.Redis(unix_socket_path=str(server.socket_path),
                        decode_responses=True) as client:
        broker = Broker(client, "partial")
        broker.register_queue()
        # Room for several batches of ten (200 kB each, and as much again in the query
        # buffer while one is read), but not for all twenty.
        client.config_set("maxmemory", client.info("memory")["used_memory"] + 2_000_000)
        tasks = [NewTask(f"t{i}", payload={"pad": "x" * 20_000}) for i in range(200)]
        with pytest.raises(BrokerError) as caught:
            broker.enqueue_many(tasks, batch_size=10)
        enqueued = client.llen(broker.keys.ready)
        client.config_set("maxmemory", 0)
        assert 0 < enqueued < len(tasks)
        # Refused as the call arrives, or by the script's own write (Redis 6.2 then says
        # so as a script error): the same refusal, and the same mend.
        assert str(caught.value).startswith("Redis could not enqueue tasks: ")
        assert "OutOfMemoryError" in str(caught.value) or "OOM command not allowed" in \
            str(caught.value)
        assert "; Redis is at its maxmemory" in str(caught.value)
        assert isinstance(caught.value, IncompleteEnqueueError)
        assert caught.value.task_ids == tuple(t.task_id for t in tasks)
        assert f"; this batch was not enqueued; the {enqueued} task(s) of the batches " \
            "before this one were enqueued: an id that names a task is not enqueued " \
            "again, so sending the same task ids (or idempotency keys) again enqueues " \
            "only what is missing (this call's: t0, t1," in str(caught.value)
        assert sum(h.created for h in broker.enqueue_many(tasks, batch_size=10)) == \
            len(tasks) - enqueued
