"""Redis failures become `BrokerError`s that say, in the user's words, what could not be done."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import re
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from taskq import App, chain
from taskq.aio import AsyncBroker
from taskq.boundary import mend_for, refused_by_script
from taskq.broker import Broker
from taskq.errors import BrokerError, ConfigError, ResultTimeoutError
from taskq.safety import check_server, check_server_when_free
from taskq.settings import Settings
from taskq.snapshot import queue_names
from taskq.tools.embedded import EmbeddedRedis, free_port
from waiting import wait_until

SRC = Path(__file__).resolve().parent.parent / "src" / "taskq"


@pytest.fixture
def unreachable() -> redis.Redis:
    """A client for a port nothing listens on, failing at once rather than retrying:
    port 1, which no test's server takes (a free port picked here could be picked by
    another test's server meanwhile)."""
    return redis.Redis(port=1, socket_connect_timeout=1, retry=None)


class TestUnreachableRedis:
    def test_listing_the_dlq_says_so_in_words(self, unreachable: redis.Redis) -> None:
        with pytest.raises(BrokerError) as caught:
            Broker(unreachable).dead()
        message = str(caught.value)
        assert message.startswith("cannot reach Redis to list the dead letter queue: ")
        assert "Connection refused" in message

    def test_enqueueing_names_what_it_was_doing_not_its_internal_step(
        self, unreachable: redis.Redis
    ) -> None:
        with pytest.raises(BrokerError, match=r"^cannot reach Redis to register the queue: "):
            Broker(unreachable).enqueue("t1")

    def test_a_connection_that_cannot_be_made_says_to_start_redis_or_set_redis_url(
        self, unreachable: redis.Redis
    ) -> None:
        with pytest.raises(BrokerError) as caught:
            Broker(unreachable).enqueue("t1")
        assert "is Redis running there?" in str(caught.value)
        assert "`taskq redis`" in str(caught.value) and "REDIS_URL" in str(caught.value)

    def test_a_connection_that_timed_out_says_something_listens_there(self) -> None:
        """It said to start a Redis, where one (or something) listens and stalls."""
        with socket.socket() as listening:
            listening.bind(("127.0.0.1", 0))
            listening.listen(0)  # never accepts
            port = listening.getsockname()[1]
            with redis.Redis(port=port, socket_connect_timeout=0.3, socket_timeout=0.3) as c, \
                    pytest.raises(BrokerError) as caught:
                Broker(c).dead()
        message = str(caught.value)
        assert "Timeout connecting to server; something listens there" in message
        assert "is Redis running there?" not in message

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


@pytest.mark.parametrize(("reply", "refused"), [
    # Redis 7, then 6.2: the script's own error(), and its Lua failing.
    ("user_script:1: limits must be x script: d123, on @user_script:1.", True),
    ("user_script:1: attempt to index local 't' (a nil value) script: 8a16, on "
     "@user_script:1.", True),
    ("Error running script (call to f_d123): @user_script:1: user_script:1: limits must "
     "be x", True),
    # A command inside the script refused: Redis's state, not the script's arguments.
    ("NOREPLICAS Not enough good replicas to write. script: 7569, on @user_script:1.", False),
    ("Error running script (call to f_7569): @user_script:1: @user_script: 1: -NOREPLICAS "
     "Not enough good replicas to write.", False),
    ("WRONGTYPE Operation against a key holding the wrong kind of value script: ca9f, on "
     "@user_script:1.", False),
    ("Error running script (call to f_ca9f): @user_script:1: WRONGTYPE Operation against a "
     "key holding the wrong kind of value", False),
])
def test_only_a_scripts_own_error_is_a_refusal(reply: str, refused: bool) -> None:
    try:
        raise BrokerError("could not fire") from redis.ResponseError(reply)
    except BrokerError as e:
        assert refused_by_script(e) is refused


@pytest.fixture
def own_server(tmp_path: Path) -> Iterator[EmbeddedRedis]:
    """A Redis of this test's own, whose settings it may change, on TCP: there a client
    reads the error a refused connection is sent (on a unix socket, its write may
    meet the closed socket first)."""
    with EmbeddedRedis(port=free_port(), data_dir=tmp_path) as server:
        yield server


class TestARedisThatTurnsConnectionsAway:
    """A running Redis refusing a new connection is no unreachable one: the error says
    what it refused and what mends it, not to start a Redis."""

    def test_wrong_credentials_say_to_fix_them_in_redis_url(
            self, own_server: EmbeddedRedis) -> None:
        redis.Redis(port=own_server.port).config_set("requirepass", "right")
        client = redis.Redis(port=own_server.port, password="wrong", retry=None)
        with pytest.raises(BrokerError) as caught:
            Broker(client).dead()
        message = str(caught.value)
        assert message.startswith("Redis could not list the dead letter queue: it refused "
                                  "the credentials (")
        assert message.endswith("put the right user and password in REDIS_URL")

    def test_a_redis_at_its_maxclients_says_to_raise_it(
            self, own_server: EmbeddedRedis) -> None:
        holder = redis.Redis(port=own_server.port)
        holder.config_set("maxclients", 1)
        client = redis.Redis(port=own_server.port, retry=None)
        with pytest.raises(BrokerError) as caught:
            Broker(client).dead()
        assert str(caught.value) == (
            "Redis could not list the dead letter queue: max number of clients reached: it "
            "has as many connections as its maxclients setting allows; raise it, or stop "
            "what holds connections idle")
        holder.config_set("maxclients", 10000)


class TestAWriteRedisRefusesUntilSomeoneActs:
    """A refusal no wait ends says what mends it, where Redis's own words do not."""

    def test_a_replica_says_to_point_redis_url_at_the_primary(
            self, own_server: EmbeddedRedis, tmp_path: Path) -> None:
        with EmbeddedRedis(data_dir=tmp_path / "replica") as replica, \
                redis.Redis(unix_socket_path=str(replica.socket_path)) as client:
            client.replicaof("127.0.0.1", str(own_server.port))
            with pytest.raises(BrokerError) as caught:
                Broker(client).enqueue("t1")
        assert str(caught.value).startswith("Redis could not register the queue: "
                                            "ReadOnlyError: ")
        assert str(caught.value).endswith("; this Redis is a read-only replica (after a "
                                          "failover, perhaps): point REDIS_URL at the primary")

    def test_a_worker_is_refused_a_replica_as_it_starts(
            self, own_server: EmbeddedRedis, tmp_path: Path) -> None:
        """Its READONLY refusals, waited out as an outage, kept it idle for good."""
        with EmbeddedRedis(data_dir=tmp_path / "replica") as replica, \
                redis.Redis(unix_socket_path=str(replica.socket_path)) as client:
            client.replicaof("127.0.0.1", str(own_server.port))
            with pytest.raises(ConfigError, match=r"read-only replica \(role:slave\).*point "
                                                  "REDIS_URL at the primary"):
                check_server_when_free(client)

    def test_a_redis_out_of_memory_says_to_raise_maxmemory(
            self, own_server: EmbeddedRedis) -> None:
        client = redis.Redis(port=own_server.port)
        client.config_set("maxmemory", 1)
        with pytest.raises(BrokerError) as caught:
            Broker(client).enqueue("t1")
        client.config_set("maxmemory", 0)
        assert str(caught.value).startswith("Redis could not register the queue: "
                                            "OutOfMemoryError: ")
        assert str(caught.value).endswith("; Redis is at its maxmemory and evicts nothing "
                                          "(noeviction, as taskq needs): raise maxmemory, "
                                          "or free memory")

    def test_an_acl_user_denied_a_command_says_to_grant_it(
            self, own_server: EmbeddedRedis) -> None:
        redis.Redis(port=own_server.port).acl_setuser(
            "producer", enabled=True, passwords=["+pw"], keys=["*"], channels=["*"],
            commands=["+@all", "-evalsha"])
        client = redis.Redis(port=own_server.port, username="producer", password="pw")
        with pytest.raises(BrokerError) as caught:
            Broker(client).enqueue("t1")
        assert str(caught.value).startswith("Redis could not check what the ACL user may "
                                            "run: NoPermissionError: ")
        assert str(caught.value).endswith("; the ACL user REDIS_URL names may not run it: "
                                          "grant that user the commands and the keys taskq "
                                          "uses (each queue's {taskq:<queue>}:*, "
                                          "taskq:queues and taskq:shards)")

    def test_an_acl_user_denied_a_key_is_told_which_keys_taskq_uses(
            self, own_server: EmbeddedRedis) -> None:
        redis.Redis(port=own_server.port).acl_setuser(
            "producer", enabled=True, passwords=["+pw"], keys=["{taskq:orders}:*"],
            channels=["*"], commands=["+@all"])
        client = redis.Redis(port=own_server.port, username="producer", password="pw")
        with pytest.raises(BrokerError, match=r"NoPermissionError: .*key.*taskq:queues and "
                                              r"taskq:shards\)$"):
            Broker(client, "orders").enqueue("t1")


class TestAResultWhileRedisRefusesWrites:
    """Redis 7 refuses any script that may write while it refuses writes (its maxmemory
    reached, a failed save, a replica), the read of a result among them: a completed
    task's result failed to read, and a wait for a pending one failed at once."""

    @pytest.fixture
    def refusing(self, own_server: EmbeddedRedis) -> Iterator[Broker]:
        client = redis.Redis(port=own_server.port, decode_responses=True)
        broker = Broker(client, "orders")
        broker.enqueue("done")
        (task,) = broker.lease_many("w", 30, 1).tasks
        assert broker.ack("done", task.token, json.dumps(42))
        broker.enqueue("waits")
        client.config_set("maxmemory", 1)
        yield broker
        client.config_set("maxmemory", 0)

    def test_a_completed_tasks_result_is_read_and_a_wait_runs_to_its_timeout(
        self, refusing: Broker
    ) -> None:
        assert refusing.handle("done").result(timeout=5) == 42
        with pytest.raises(ResultTimeoutError):
            refusing.handle("waits").result(timeout=1.5)

    def test_an_asyncio_wait_alike(self, refusing: Broker, own_server: EmbeddedRedis) -> None:
        async def main() -> object:
            broker = AsyncBroker(redis.asyncio.Redis(port=own_server.port), "orders")
            try:
                assert await broker.handle("done").result_async(timeout=5) == 42
                with pytest.raises(ResultTimeoutError):
                    await broker.handle("waits").result_async(timeout=1.5)
                return await broker.handle("waits").status_async()
            finally:
                await broker.aclose()

        assert asyncio.run(main()) == "pending"


def test_a_script_write_refused_out_of_memory_gets_the_same_mend_on_redis_6_2() -> None:
    """Redis 6.2 passes the refusal on as a plain script error, not as -OOM."""
    refused = redis.ResponseError(
        "Error running script (call to f_0): @user_script:12: @user_script: 12: -OOM "
        "command not allowed when used memory > 'maxmemory'.")
    assert mend_for(refused) == mend_for(redis.exceptions.OutOfMemoryError("OOM"))
    assert mend_for(redis.ResponseError("Error running script: wrong number")) is None


@contextlib.contextmanager
def busy(server: EmbeddedRedis, seconds: int) -> Iterator[None]:
    """Redis running another client's script for about `seconds` (whole seconds of its
    clock), answering BUSY to everyone else meanwhile."""
    admin = redis.Redis(port=server.port)
    admin.config_set("lua-time-limit", 100)
    long_script = threading.Thread(target=admin.eval, args=(
        "local s = tonumber(redis.call('TIME')[1]) "
        f"while tonumber(redis.call('TIME')[1]) < s + {seconds} do end return 1", 0))
    long_script.start()
    with redis.Redis(port=server.port, retry=None) as probe:
        wait_until(lambda: busy_now(probe), 5)
    try:
        yield
    finally:
        long_script.join()


def test_a_worker_starting_while_redis_runs_a_long_script_waits_for_it(
    own_server: EmbeddedRedis, caplog: pytest.LogCaptureFixture
) -> None:
    """BUSY ends by itself, as a worker running meanwhile waits it out: it is no setting
    of the server's to refuse (the worker exited 2)."""
    with (busy(own_server, 2), redis.Redis(port=own_server.port, retry=None) as client,
          caplog.at_level(logging.WARNING, "taskq")):
        check_server_when_free(client)
    assert any(r.getMessage().startswith("Redis is busy running a script (BUSY")
               for r in caplog.records)


class TestAResultWaitWhileRedisCannotAnswer:
    """A wait rides out a Redis busy, loading or restarting, as the task it waits for
    does, until its timeout: it failed at once, its timeout unused."""

    @pytest.fixture
    def completed(self, own_server: EmbeddedRedis) -> Broker:
        broker = Broker(redis.Redis(port=own_server.port, decode_responses=True), "orders")
        broker.enqueue("done")
        (task,) = broker.lease_many("w", 30, 1).tasks
        assert broker.ack("done", task.token, json.dumps(42))
        broker.enqueue("waits")
        return broker

    def test_the_result_comes_once_redis_answers_again(
        self, completed: Broker, own_server: EmbeddedRedis
    ) -> None:
        with busy(own_server, 2):
            assert completed.handle("done").result(timeout=30) == 42

    def test_past_its_timeout_it_says_redis_could_not_answer(
        self, completed: Broker, own_server: EmbeddedRedis
    ) -> None:
        with busy(own_server, 3), pytest.raises(
                ResultTimeoutError, match=r"within 0.5s: Redis could not answer \(.*BUSY"):
            completed.handle("waits").result(timeout=0.5)

    def test_a_workflows_wait_alike(self, own_server: EmbeddedRedis) -> None:
        app = App(queue="orders", settings=Settings.from_env(
            {}, redis_url=f"redis://127.0.0.1:{own_server.port}/0"))

        @app.task("double")
        def double(x: int) -> int:
            return 2 * x

        handle = chain(double.s(21), double.s()).enqueue()
        for _ in range(2):
            (task,) = app.producer.lease_many("w", 30, 1).tasks
            assert app.producer.ack(task.task_id, task.token,
                                    json.dumps(2 * json.loads(task.payload)["args"][0]))
        with busy(own_server, 2):
            assert handle.result(timeout=30) == 84

    def test_an_asyncio_wait_alike(
        self, completed: Broker, own_server: EmbeddedRedis
    ) -> None:
        async def main() -> object:
            broker = AsyncBroker(redis.asyncio.Redis(port=own_server.port), "orders")
            try:
                return await broker.handle("done").result_async(timeout=30)
            finally:
                await broker.aclose()

        with busy(own_server, 2):
            assert asyncio.run(main()) == 42


def busy_now(client: redis.Redis) -> bool:
    try:
        client.ping()
    except redis.ResponseError as e:
        return str(e).startswith("BUSY")
    return False
