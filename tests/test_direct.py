"""Direct connections: commands past the pool's per-call work, with the pool's safety kept."""

from __future__ import annotations

import gc
import os
import signal
import threading
import time
import uuid
import weakref
from collections.abc import Iterator
from types import FrameType
from typing import Any

import pytest
import redis
from redis.backoff import NoBackoff
from redis.connection import Connection
from redis.retry import Retry

from conftest import ON_CLUSTER
from taskq.broker import Broker
from taskq.connection import connect
from taskq.settings import Settings
from taskq.transport.direct import DirectConnections
from waiting import wait_until

pytestmark = pytest.mark.skipif(ON_CLUSTER, reason="a cluster client has no direct connections")


class Interrupted(Exception):
    """Raised by a timer in the middle of a blocking call, as a signal handler might."""


@pytest.fixture
def own_client(settings: Settings) -> Iterator[redis.Redis]:
    """A client of the test's own, so closing it is part of what a test checks."""
    client = connect(settings)
    yield client
    client.close()


@pytest.fixture
def named_client(settings: Settings) -> Iterator[tuple[redis.Redis, str]]:
    """A client of the test's own whose connections carry a name the server lists."""
    name = f"direct-{uuid.uuid4().hex[:6]}"
    own = redis.Redis.from_url(settings.redis_url, decode_responses=True, client_name=name)
    yield own, name
    own.close()


def client_ids(client: redis.Redis, name: str) -> list[int]:
    """The ids of the server's connections named `name`."""
    return [int(c["id"]) for c in client.client_list() if c["name"] == name]


def test_a_call_returns_its_reply_and_an_error_reply_raises_without_spoiling_the_connection(
    own_client: redis.Redis,
) -> None:
    direct = DirectConnections.of(own_client)
    assert direct.call("SET", "k", "v") == "OK"
    assert direct.call("GET", "k") == "v"
    with pytest.raises(redis.ResponseError, match="WRONGTYPE"):
        direct.call("LPUSH", "k", "x")
    assert direct.call("ECHO", "after the error") == "after the error"


def test_call_many_returns_every_reply_in_order_with_errors_in_their_places(
    own_client: redis.Redis,
) -> None:
    direct = DirectConnections.of(own_client)
    own_client.set("s", "v")
    first, wrong, last = direct.call_many([("ECHO", "a"), ("LPUSH", "s", "x"), ("GET", "s")])
    assert first == "a" and last == "v"
    assert isinstance(wrong, redis.ResponseError) and "WRONGTYPE" in str(wrong)


def test_sequential_calls_reuse_one_connection(own_client: redis.Redis) -> None:
    direct = DirectConnections.of(own_client)
    name = f"direct-{uuid.uuid4().hex[:6]}"
    direct.call("CLIENT", "SETNAME", name)
    seen = {direct.call("CLIENT", "ID") for _ in range(20)}
    assert len(seen) == 1 and client_ids(own_client, name) == [seen.pop()]


def test_closing_the_client_closes_its_direct_connections(
    own_client: redis.Redis, client: redis.Redis
) -> None:
    direct = DirectConnections.of(own_client)
    name = f"direct-{uuid.uuid4().hex[:6]}"
    direct.call("CLIENT", "SETNAME", name)
    assert len(client_ids(client, name)) == 1
    own_client.close()
    # Redis drops a closed connection from its list once it reads the close: soon after.
    wait_until(lambda: client_ids(client, name) == [], 5, "the connection's close")
    assert client_ids(client, name) == []


def test_a_killed_connection_is_replaced_and_the_call_still_answers(
    own_client: redis.Redis, client: redis.Redis
) -> None:
    direct = DirectConnections.of(own_client)
    killed = direct.call("CLIENT", "ID")
    client.client_kill_filter(_id=killed)
    assert direct.call("ECHO", "still here") == "still here"
    assert direct.call("CLIENT", "ID") != killed


def test_an_interrupted_blocking_call_leaves_neither_its_reply_nor_its_pop_behind(
    own_client: redis.Redis, client: redis.Redis
) -> None:
    direct = DirectConnections.of(own_client)
    key = f"never-{uuid.uuid4().hex[:6]}"

    def interrupt(_signum: int, _frame: FrameType | None) -> None:
        raise Interrupted

    previous = signal.signal(signal.SIGALRM, interrupt)
    try:
        signal.setitimer(signal.ITIMER_REAL, 0.1)
        with pytest.raises(Interrupted):
            direct.call("BLPOP", key, 2)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    # The abandoned BLPOP must not answer the next call, nor take what arrives later.
    assert direct.call("ECHO", "mine") == "mine"
    client.rpush(key, "item")
    assert direct.call("LRANGE", key, 0, -1) == ["item"]


def test_a_call_stopped_between_replies_never_hands_its_leftovers_to_the_next_call(
    own_client: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    direct = DirectConnections.of(own_client)
    read = DirectConnections._read
    replies: list[Any] = []

    def stopped_after_the_first_reply(connection: Connection) -> Any:
        replies.append(read(connection))
        if len(replies) == 1:
            raise Interrupted
        return replies[-1]

    monkeypatch.setattr(DirectConnections, "_read", staticmethod(stopped_after_the_first_reply))
    with pytest.raises(Interrupted):
        direct.call_many([("ECHO", "first"), ("ECHO", "second")])
    monkeypatch.undo()
    assert replies == ["first"]
    assert direct.call("ECHO", "mine") == "mine"  # not the "second" left on the socket


def test_a_forked_child_uses_a_connection_of_its_own(own_client: redis.Redis) -> None:
    direct = DirectConnections.of(own_client)
    parent_id = direct.call("CLIENT", "ID")
    reader, writer = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report its connection's id, never run the test's teardown
        try:
            os.write(writer, str(direct.call("CLIENT", "ID")).encode())
        finally:
            os._exit(0)
    os.close(writer)
    child_id = int(os.read(reader, 64) or b"0")
    os.waitpid(pid, 0)
    os.close(reader)
    assert child_id not in (0, parent_id)
    assert direct.call("CLIENT", "ID") == parent_id  # and the parent's is untouched


def test_brokers_built_on_one_client_share_its_connections_instead_of_keeping_their_own(
    named_client: tuple[redis.Redis, str], client: redis.Redis
) -> None:
    own, name = named_client
    for n in range(150):  # as a dashboard building a Broker per frame would
        assert Broker(own, f"q{n}").promote() == []
    assert 1 <= len(client_ids(client, name)) <= 2


def test_a_dropped_client_leaves_neither_its_pool_nor_its_connections_behind(
    settings: Settings, client: redis.Redis
) -> None:
    name = f"dropped-{uuid.uuid4().hex[:6]}"
    dropped = redis.Redis.from_url(settings.redis_url, decode_responses=True, client_name=name)
    assert Broker(dropped, "q").promote() == []
    pool = weakref.ref(dropped.connection_pool)
    del dropped
    gc.collect()
    assert pool() is None  # the shared table must not keep a pool alive
    wait_until(lambda: client_ids(client, name) == [], 5, "the dropped client's connection")


def test_a_bad_argument_is_refused_and_keeps_no_connection_out_of_the_pool(
    named_client: tuple[redis.Redis, str], client: redis.Redis
) -> None:
    own, name = named_client
    direct = DirectConnections.of(own)
    for _ in range(150):  # past the pool's 100 connections if each leaked one
        with pytest.raises(redis.DataError):
            direct.call("SET", "k", None)
    assert direct.call("ECHO", "fine") == "fine"
    assert len(client_ids(client, name)) <= 1


def test_a_connection_the_server_closed_while_it_rested_is_replaced_before_a_call(
    settings: Settings, client: redis.Redis
) -> None:
    never_retries = redis.Redis.from_url(settings.redis_url, decode_responses=True,
                                         retry=Retry(NoBackoff(), 0))
    try:
        direct = DirectConnections.of(never_retries)
        killed = direct.call("CLIENT", "ID")
        client.client_kill_filter(_id=killed)
        assert direct.call("ECHO", "no retry needed") == "no retry needed"
    finally:
        never_retries.close()


def test_a_thread_waiting_on_its_connection_does_not_hold_up_another_thread(
    own_client: redis.Redis, client: redis.Redis
) -> None:
    direct = DirectConnections.of(own_client)
    name, key = f"waiter-{uuid.uuid4().hex[:6]}", f"slow-{uuid.uuid4().hex[:6]}"
    waiting = threading.Thread(
        target=direct.call_many, args=([("CLIENT", "SETNAME", name), ("BLPOP", key, 5)],)
    )
    waiting.start()
    try:
        wait_until(lambda: [c for c in client.client_list()
                            if c["name"] == name and c["cmd"] == "blpop"], 5, "the waiter")
        started = time.monotonic()
        assert direct.call("CLIENT", "GETNAME") is None  # another connection than the waiter's
        assert time.monotonic() - started < 2.5  # and not after the waiter's 5 s
    finally:
        client.rpush(key, "go")
        waiting.join(5)


def test_a_closed_client_answers_again_on_new_connections(own_client: redis.Redis) -> None:
    direct = DirectConnections.of(own_client)
    before = direct.call("CLIENT", "ID")
    own_client.close()
    assert direct.call("CLIENT", "ID") != before

