"""The transports: what the single node one needs of redis-py, and both giving one answer."""

from __future__ import annotations

import gc
import hashlib
import inspect
import re
import select
import socket
import weakref
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from redis.commands.core import Script
from redis.connection import Connection
from redis.exceptions import NoScriptError

from conftest import ON_CLUSTER
from helpers import events, lease_one, leased_token
from taskq.broker import Broker
from taskq.connection import connect
from taskq.keys import QueueKeys
from taskq.results import LeaseBatch
from taskq.scripts import source
from taskq.settings import Settings
from taskq.transport import Cluster, SingleNode, Transport, transport_for
from taskq.transport.direct import pack

SRC = Path(__file__).resolve().parents[1] / "src" / "taskq"
TRANSPORT = SRC / "transport"
single_node_only = pytest.mark.skipif(ON_CLUSTER, reason="a cluster client has no single node")


def relied_on(what: str, ok: bool) -> None:
    """Fail naming the redis-py feature the single-node transport can no longer use."""
    assert ok, (f"redis-py {redis.__version__} does not provide {what}, which "
                f"taskq.transport.single and taskq.transport.direct rely on: adapt them to "
                f"it, or keep redis to the range pyproject.toml pins")


def accepts(function: Callable[..., Any], *args: Any) -> bool:
    """Whether `function` can be called with `args` (checked without calling it)."""
    try:
        inspect.signature(function).bind(*args)
    except TypeError:
        return False
    return True


@single_node_only
class TestWhatTheSingleNodeTransportNeedsOfRedisPy:
    @pytest.fixture
    def connection(self, client: redis.Redis) -> Iterator[Connection]:
        relied_on("ConnectionPool.get_connection() taking no arguments",
                  accepts(client.connection_pool.get_connection))
        connection = client.connection_pool.get_connection()
        yield connection
        client.connection_pool.release(connection)

    def test_a_pool_hands_out_connections_and_takes_them_back(self, client: redis.Redis) -> None:
        pool = client.connection_pool
        relied_on("ConnectionPool.get_connection() taking no arguments",
                  accepts(pool.get_connection))
        connection = pool.get_connection()
        relied_on("ConnectionPool.release(connection)", accepts(pool.release, connection))
        pool.release(connection)

    def test_a_connection_sends_commands_packed_together_and_reads_each_reply(
        self, connection: Connection
    ) -> None:
        commands = [("SET", "k", "v"), ("LPUSH", "k", "x"), ("GET", "k")]
        relied_on("Connection.pack_commands(commands)",
                  accepts(connection.pack_commands, commands))
        packed = connection.pack_commands(commands)
        relied_on("Connection.send_packed_command(packed)",
                  accepts(connection.send_packed_command, packed))
        connection.send_packed_command(packed)
        relied_on("Connection.read_response() taking no arguments",
                  accepts(connection.read_response))
        first = connection.read_response()
        try:
            connection.read_response()
            error = None
        except redis.ResponseError as e:
            error = e
        last = connection.read_response()
        relied_on("Connection.read_response() returning decoded replies in order",
                  (first, last) == ("OK", "v"))
        relied_on("Connection.read_response() raising ResponseError for an error reply",
                  error is not None)

    def test_a_connection_retries_by_its_own_policy(self, connection: Connection) -> None:
        retry = getattr(connection, "retry", None)
        relied_on("Connection.retry", retry is not None)
        relied_on("Retry.call_with_retry(do, fail)",
                  accepts(retry.call_with_retry, lambda: None, lambda error: None))
        relied_on("Retry.call_with_retry returning what `do` returns",
                  retry.call_with_retry(lambda: "done", lambda error: None) == "done")

    def test_a_connected_connection_keeps_its_socket_in_sock(
        self, connection: Connection
    ) -> None:
        connection.connect()
        sock = getattr(connection, "_sock", None)
        relied_on("Connection._sock holding the socket once connected",
                  isinstance(sock, socket.socket))
        assert sock is not None
        poller = select.poll()
        poller.register(sock, select.POLLIN)
        assert poller.poll(0) == []  # nothing to read on a resting connection
        relied_on("Connection.disconnect() taking no arguments",
                  accepts(connection.disconnect))
        connection.disconnect()
        relied_on("Connection._sock being None once disconnected",
                  getattr(connection, "_sock", "gone") is None)

    def test_a_script_object_holds_its_sha_and_its_text(self, client: redis.Redis) -> None:
        text = source("lease")
        script = client.register_script(text)
        relied_on("Script.sha being the SHA1 of the script's text",
                  getattr(script, "sha", None) == hashlib.sha1(text.encode()).hexdigest())
        relied_on("Script.script holding the script's text", getattr(script, "script", None)
                  == text)
        relied_on("NoScriptError being a ResponseError",
                  issubclass(NoScriptError, redis.ResponseError))


class TestPacking:
    """What a direct connection sends is what redis-py would send, and a bad argument
    fails as redis-py makes it fail."""

    COMMANDS = (
        ("EVALSHA", "a" * 40, 2, "taskq:{q}:ready", "taskq:{q}:events", "", "x" * 7000),
        ("BLPOP", "taskq:{q}:wake", 0.25),
        ("SET", "k", 0, -7, 2**64, 1e-05, 1.5, float("inf")),
        ("SET", b"\x00\xff", "\u00e9\u4e2d\U0001f600", "a\r\nb"),
        ("SCRIPT", "LOAD", "return 1"),
    )

    def test_hiredis_packs_taskq_s_commands_to_the_same_bytes_as_redis_py(self) -> None:
        connection = Connection()
        for command in self.COMMANDS:
            assert b"".join(pack(connection, [command])) == b"".join(
                connection.pack_commands([command]))
        assert pack(connection, self.COMMANDS) == [b"".join(
            connection.pack_commands(self.COMMANDS))]

    @pytest.mark.parametrize("command", [
        ("SET", "k", bytearray(b"v")), ("SET", "k", memoryview(b"v")),
        ("CLIENT SETNAME", "taskq"), (b"CLIENT SETNAME", "taskq"),
    ], ids=["bytearray", "memoryview", "two-words", "two-words-bytes"])
    def test_what_hiredis_does_not_take_is_packed_by_redis_py(
        self, command: tuple[Any, ...]
    ) -> None:
        connection = Connection()
        assert b"".join(pack(connection, [command])) == b"".join(
            connection.pack_commands([command]))

    @pytest.mark.parametrize("bad", [True, None, object()], ids=["bool", "None", "object"])
    def test_an_argument_redis_py_refuses_fails_with_its_data_error(self, bad: object) -> None:
        with pytest.raises(redis.DataError):
            pack(Connection(), [("SET", "k", bad)])

    def test_a_lone_surrogate_fails_to_encode_as_in_redis_py(self) -> None:
        with pytest.raises(UnicodeEncodeError):
            pack(Connection(), [("SET", "k", "\ud800")])


def test_only_the_transport_tells_a_cluster_client_from_a_single_node_one() -> None:
    """Besides `connect`, which makes a cluster client when told to."""
    outside = [p for p in SRC.rglob("*.py")
               if TRANSPORT not in p.parents and p != SRC / "connection.py"]
    mentions = [p.relative_to(SRC) for p in outside
                if re.search(r"\bRedisCluster\b", p.read_text(encoding="utf-8"))]
    assert mentions == []


def test_only_the_single_node_transport_goes_past_redis_pys_public_api() -> None:
    internals = re.compile(r"\b_sock\b|pack_commands|send_packed_command|read_response|"
                           r"get_connection|call_with_retry|\.script\.script\b")
    allowed = {TRANSPORT / "single.py", TRANSPORT / "direct.py", TRANSPORT / "keeping.py"}
    reaching = [p.relative_to(SRC) for p in SRC.rglob("*.py")
                if p not in allowed and internals.search(p.read_text(encoding="utf-8"))]
    assert reaching == []


def test_the_transport_is_chosen_by_the_kind_of_client(client: redis.Redis) -> None:
    assert type(transport_for(client)) is (Cluster if ON_CLUSTER else SingleNode)


# -- both transports, one answer -----------------------------------------------------------

@pytest.fixture(params=["single node", "cluster"])
def transport(request: pytest.FixtureRequest, client: redis.Redis) -> Transport:
    """Each transport the test server can carry: on a single node the cluster one too,
    as it uses nothing but redis-py's public API."""
    if request.param == "single node":
        if ON_CLUSTER:
            pytest.skip("a cluster client has no single node")
        return SingleNode(client)
    return Cluster(client)


KEYS = QueueKeys("test")


def lease_call(count: int = 1, request_id: str = "") -> tuple[list[str], list[Any]]:
    """The lease script's keys and args, as `Broker.lease_many` passes them."""
    k = KEYS
    return ([k.ready, k.leased, k.delayed, k.events, k.seq, k.epoch, k.wake, k.rates],
            [k.prefix, "w", 10_000, count, 100, request_id, 0])


def leased(broker: Broker, reply: Any) -> list[str]:
    """The ids a lease script's reply hands out, each with the token its record holds:
    that lease's, above the none (0) a task has before its first."""
    tasks = LeaseBatch.from_reply(reply).tasks
    for task in tasks:
        record = broker.task(task.task_id)
        assert record is not None and record.fencing_token == leased_token(0, task.token)
    return [task.task_id for task in tasks]


@pytest.fixture
def lease(transport: Transport) -> Script:
    return transport.script(source("lease"))


@pytest.fixture
def queued(client: redis.Redis) -> Broker:
    """A queue holding t1 and t2, ready."""
    broker = Broker(client, "test")
    broker.enqueue("t1")
    broker.enqueue("t2")
    return broker


class TestBothTransports:
    def test_a_script_runs_and_returns_its_reply(
        self, transport: Transport, lease: Script, queued: Broker
    ) -> None:
        assert leased(queued, transport.run(lease, *lease_call())) == ["t1"]

    def test_a_scripts_error_reply_raises(
        self, transport: Transport, lease: Script, queued: Broker
    ) -> None:
        keys, args = lease_call(count=-1)
        with pytest.raises(redis.ResponseError, match="count must be"):
            transport.run(lease, keys, args)
        assert queued.counts().ready == 2

    def test_several_scripts_reply_in_order_with_an_error_in_its_place(
        self, transport: Transport, lease: Script, queued: Broker
    ) -> None:
        refused, first, second = transport.run_many(
            [(lease, *lease_call(count=-1)), (lease, *lease_call()), (lease, *lease_call())])
        assert isinstance(refused, redis.ResponseError) and "count must be" in str(refused)
        assert (leased(queued, first), leased(queued, second)) == (["t1"], ["t2"])

    def test_a_server_that_lost_its_scripts_runs_each_once_after_loading_them(
        self, transport: Transport, lease: Script, queued: Broker, client: redis.Redis
    ) -> None:
        client.script_flush()
        assert leased(queued, transport.run(lease, *lease_call())) == ["t1"]
        client.script_flush()
        assert [leased(queued, r) for r in transport.run_many([(lease, *lease_call())])] == [
            ["t2"]]
        assert [e.fields["type"] for e in events(client, KEYS)].count("leased") == 2

    def test_the_wait_returns_once_work_is_signalled_or_the_timeout_passes(
        self, transport: Transport, client: redis.Redis
    ) -> None:
        client.rpush(KEYS.wake, "1")
        assert transport.wait([KEYS.wake], 5) is True
        assert client.llen(KEYS.wake) == 0
        assert transport.wait([KEYS.wake], 0.05) is True

    def test_one_wait_names_several_queues_where_the_transport_spans_slots(
        self, transport: Transport, client: redis.Redis
    ) -> None:
        if not transport.spans_slots:
            assert isinstance(transport, Cluster)  # a cluster's queues are in their own slots
            return
        other = QueueKeys("other")
        client.rpush(other.wake, "1")
        assert transport.wait([KEYS.wake, other.wake], 5) is True
        assert client.llen(other.wake) == 0

    def test_the_wait_says_false_when_redis_cannot_be_asked(self) -> None:
        gone = redis.Redis(unix_socket_path="/nonexistent/redis.sock")
        assert SingleNode(gone).wait([KEYS.wake], 0.05) is False
        assert Cluster(gone).wait([KEYS.wake], 0.05) is False

    def test_the_wait_with_a_script_runs_it_behind_the_pop_or_declines_having_done_nothing(
        self, transport: Transport, lease: Script, queued: Broker, client: redis.Redis
    ) -> None:
        signals = client.llen(KEYS.wake)  # one per enqueue
        assert signals > 0
        reply = transport.wait_then_run(KEYS.wake, 5, lease, *lease_call())
        if isinstance(transport, Cluster):
            assert reply is None
            assert (client.llen(KEYS.wake), queued.counts().ready) == (signals, 2)
        else:
            assert leased(queued, reply) == ["t1"]


def test_a_broker_on_a_server_that_lost_the_scripts_runs_each_call_once(
    broker: Broker, client: redis.Redis
) -> None:
    client.script_flush()
    assert broker.enqueue("t1").created
    client.script_flush()
    task_id, token = lease_one(broker, "w", 10)
    assert task_id == "t1"
    leased_token(0, token)
    client.script_flush()
    assert broker.ack("t1", token)
    assert client.xlen(broker.keys.events) == 3  # enqueued, leased, completed: once each


def test_the_brokers_of_one_client_hash_each_script_once(
    client: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A Broker is made for each queue a listing shows; each made its thirty scripts
    again, hashing every one (thousands of queues took seconds)."""
    first = Broker(client, "q1")
    monkeypatch.setattr(Script, "__init__", lambda *_: pytest.fail("hashed again"))
    assert Broker(client, "q2").scripts.lease.script.sha == first.scripts.lease.script.sha


def test_a_client_brokers_were_made_on_is_freed_once_dropped(settings: Settings) -> None:
    """A table of each client's scripts kept every client, and its sockets, for ever:
    a Script holds its client."""
    dropped = connect(settings)
    assert Broker(dropped, "q1").enqueue("t1").created
    gone = weakref.ref(dropped)
    # Its sockets closed first: one left to the collector warns as unclosed, and the
    # warning fails whichever test the collection falls in. What kept the client was
    # a reference to it, which closing does not drop.
    dropped.close()
    del dropped
    gc.collect()
    assert gone() is None
