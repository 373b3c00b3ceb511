"""Redis failures become `BrokerError`s that say, in the user's words, what could not be done."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import redis

from taskq.broker import Broker
from taskq.errors import BrokerError
from taskq.safety import check_server
from taskq.snapshot import queue_names
from taskq.tools.embedded import free_port

SRC = Path(__file__).resolve().parent.parent / "src" / "taskq"


@pytest.fixture
def unreachable() -> redis.Redis:
    """A client for a port nothing listens on, failing at once rather than retrying."""
    return redis.Redis(port=free_port(), socket_connect_timeout=1, retry=None)


class TestUnreachableRedis:
    def test_listing_the_dlq_says_so_in_words(self, unreachable: redis.Redis) -> None:
        with pytest.raises(BrokerError) as caught:
            Broker(unreachable).dead()
        message = str(caught.value)
        assert message.startswith("cannot reach Redis to list the dead letter queue: ")
        assert message.endswith("Connection refused")

    def test_enqueueing_names_what_it_was_doing_not_its_internal_step(
        self, unreachable: redis.Redis
    ) -> None:
        with pytest.raises(BrokerError, match=r"^cannot reach Redis to register the queue: "):
            Broker(unreachable).enqueue("t1")

    def test_listing_the_queues_says_so(self, unreachable: redis.Redis) -> None:
        with pytest.raises(BrokerError, match=r"^cannot reach Redis to list the queues: "):
            queue_names(Broker(unreachable))

    def test_the_safety_check_raises_a_broker_error(self, unreachable: redis.Redis) -> None:
        with pytest.raises(BrokerError, match=r"^cannot reach Redis to check the server's"):
            check_server(unreachable)


def test_every_failure_is_named_in_words_a_user_would_say() -> None:
    named = re.compile(r"(?:redis_errors|broker_error)\(\s*\"([^\"]+)\"")
    said = {name for path in SRC.rglob("*.py") for name in named.findall(path.read_text())}
    assert "list the dead letter queue" in said
    # A verb and what it acts on, never a bare internal name such as "dead" or "ack".
    assert all(len(words.split()) >= 2 for words in said), said
