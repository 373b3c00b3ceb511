"""What the producer's calls make of Redis's replies and refusals."""

from __future__ import annotations

import pytest
import redis

from taskq.calls import enqueue_errors
from taskq.errors import BrokerError, InvalidTaskError


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
