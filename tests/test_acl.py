"""A Redis ACL user that may not run what taskq's scripts call: a script refused part
way keeps the writes it made before (Redis undoes none), so producers and workers are
refused before they write anything, with words that name what to grant."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from taskq import App, chain
from taskq.aio import AsyncBroker
from taskq.broker import Broker
from taskq.calls import can_run_call
from taskq.errors import ConfigError
from taskq.safety import redis_version
from taskq.scripts import PRODUCER_SCRIPTS, WORKER_SCRIPTS, commands_called
from taskq.settings import Settings
from taskq.tools.embedded import EmbeddedRedis, free_port
from taskq.worker.loop import Worker


@pytest.fixture
def own_server(tmp_path: Path) -> Iterator[EmbeddedRedis]:
    """A Redis of this test's own, whose users it may change."""
    with EmbeddedRedis(port=free_port(), data_dir=tmp_path) as server:
        yield server


@pytest.fixture
def admin(own_server: EmbeddedRedis) -> Iterator[redis.Redis]:
    with redis.Redis(port=own_server.port, decode_responses=True) as client:
        yield client


def user_url(admin: redis.Redis, own_server: EmbeddedRedis, *commands: str) -> str:
    """The URL of a user allowed every command and key but as `commands` say."""
    admin.acl_setuser("app", enabled=True, passwords=["+pw"], keys=["*"], channels=["*"],
                      commands=["+@all", *commands])
    return f"redis://app:pw@127.0.0.1:{own_server.port}/0"


@pytest.fixture
def checks(admin: redis.Redis) -> None:
    """Redis 7 and newer tell a script what its user may run (redis.acl_check_cmd)."""
    version = redis_version(str(admin.info("server")["redis_version"]))
    if version is None or version < (7, 0, 0):
        pytest.skip("Redis 6.2 cannot tell a script what its user may run")


@pytest.mark.usefixtures("checks")
class TestAUserDeniedACommandTheScriptsCall:
    def test_a_producer_is_refused_naming_it_and_nothing_is_written(
        self, admin: redis.Redis, own_server: EmbeddedRedis
    ) -> None:
        url = user_url(admin, own_server, "-xtrim")
        with redis.Redis.from_url(url) as client, pytest.raises(
                ConfigError, match=r"may not run XTRIM on the keys of queue 'orders'.*"
                                   r"ACL SETUSER <user> \+xtrim"):
            Broker(client, "orders").enqueue("t1")
        assert admin.keys("*") == []

    def test_an_asyncio_producer_is_refused_alike(
        self, admin: redis.Redis, own_server: EmbeddedRedis
    ) -> None:
        url = user_url(admin, own_server, "-xadd", "-zadd")

        async def main() -> None:
            broker = AsyncBroker(redis.asyncio.Redis.from_url(url), "orders")
            try:
                await broker.enqueue("t1")
            finally:
                await broker.aclose()

        with pytest.raises(ConfigError, match="may not run XADD, ZADD on the keys"):
            asyncio.run(main())
        assert admin.keys("*") == []

    def test_a_worker_refuses_to_start_and_leaves_every_task_pending(
        self, admin: redis.Redis, own_server: EmbeddedRedis
    ) -> None:
        Broker(admin, "orders").enqueue("t1")
        url = user_url(admin, own_server, "-xtrim")
        app = App(queue="orders", settings=Settings.from_env({}, redis_url=url))
        with pytest.raises(ConfigError, match="may not run XTRIM on the keys of queue"):
            Worker(app)
        assert admin.hget(Broker(admin, "orders").keys.task("t1"), "state") == "pending"

    def test_a_producer_allowed_only_what_its_own_calls_run_is_not_refused(
        self, admin: redis.Redis, own_server: EmbeddedRedis
    ) -> None:
        """Checked against every script taskq has, it was refused 29 commands it never
        calls: a least-privilege producer that worked stopped working."""
        commands = set(admin.command_list())
        known = [w.lower().replace(" ", "|") for w in commands_called(PRODUCER_SCRIPTS)
                 if w.split()[0].lower() in commands]
        own = ["hget", "sadd", "hmget", "blmove", "evalsha", "script|load"]
        admin.acl_setuser("producer", enabled=True, passwords=["+pw"], keys=["*"],
                          commands=["-@all", *(f"+{c}" for c in [*own, *known])])
        url = f"redis://producer:pw@127.0.0.1:{own_server.port}/0"
        with redis.Redis.from_url(url) as client:
            handle = Broker(client, "orders").enqueue("t1")
            assert handle.status() == "pending"
            with pytest.raises(ConfigError, match="may not run"):
                Worker(App(queue="orders", settings=Settings.from_env({}, redis_url=url)))

    def test_the_commands_a_container_command_is_checked_by_its_subcommand(
        self, admin: redis.Redis, own_server: EmbeddedRedis
    ) -> None:
        url = user_url(admin, own_server, "-xinfo|stream")
        with redis.Redis.from_url(url) as client:
            broker = Broker(client, "orders")
            keys, args = can_run_call(broker.keys, WORKER_SCRIPTS)
            assert "XINFO STREAM" in args
            assert broker.scripts.can_run(keys=keys, args=args)[1:] == [b"XINFO STREAM"]


def test_a_worker_whose_user_may_run_no_script_refuses_to_start_rather_than_wait(
    admin: redis.Redis, own_server: EmbeddedRedis
) -> None:
    """It waited for good, as for an outage, and a supervisor never heard of it."""
    url = user_url(admin, own_server, "-evalsha", "-eval")
    app = App(queue="orders", settings=Settings.from_env({}, redis_url=url))
    with pytest.raises(ConfigError, match=r"cannot start: .*NoPermissionError"):
        Worker(app)


@pytest.mark.usefixtures("checks")
class TestAProducerDeniedWhatItsOtherCallsRun:
    """Enqueue's check said nothing of cancel.lua, retry_dead.lua or cancel_flow.lua,
    which call more: each is asked about before its first call."""

    def test_a_cancel_is_refused_naming_it_and_the_task_is_left_as_it_was(
        self, admin: redis.Redis, own_server: EmbeddedRedis
    ) -> None:
        Broker(admin, "orders").enqueue("t1")
        url = user_url(admin, own_server, "-lrem")
        with redis.Redis.from_url(url) as client, pytest.raises(
                ConfigError, match=r"may not run LREM on the keys of queue 'orders'"):
            Broker(client, "orders").cancel("t1")
        keys = Broker(admin, "orders").keys
        assert admin.hget(keys.task("t1"), "state") == "pending"
        assert admin.lrange(keys.ready, 0, -1) == ["t1"]

    def test_an_asyncio_cancel_is_refused_alike(
        self, admin: redis.Redis, own_server: EmbeddedRedis
    ) -> None:
        Broker(admin, "orders").enqueue("t1")
        url = user_url(admin, own_server, "-lrem")

        async def main() -> None:
            broker = AsyncBroker(redis.asyncio.Redis.from_url(url), "orders")
            try:
                await broker.cancel("t1")
            finally:
                await broker.aclose()

        with pytest.raises(ConfigError, match="may not run LREM on the keys"):
            asyncio.run(main())
        assert admin.hget(Broker(admin, "orders").keys.task("t1"), "state") == "pending"

    def test_a_dead_tasks_revival_is_refused_and_it_stays_in_the_dlq(
        self, admin: redis.Redis, own_server: EmbeddedRedis
    ) -> None:
        broker = Broker(admin, "orders")
        broker.enqueue("t1", max_retries=0)
        lease = broker.lease("w1", 10)
        assert lease is not None
        broker.fail("t1", lease[1], "boom")
        url = user_url(admin, own_server, "-lpos")
        with redis.Redis.from_url(url) as client, pytest.raises(
                ConfigError, match="may not run LPOS on the keys"):
            Broker(client, "orders").retry_dead("t1")
        assert admin.lrange(broker.keys.dlq, 0, -1) == ["t1"]
        assert admin.hget(broker.keys.task("t1"), "state") == "dead"

    def test_a_workflow_cancel_is_refused_and_the_workflow_runs_on(
        self, admin: redis.Redis, own_server: EmbeddedRedis
    ) -> None:
        app = App(queue="orders", settings=Settings.from_env(
            {}, redis_url=f"redis://127.0.0.1:{own_server.port}/0"))

        @app.task("pass_on")
        def pass_on(value: object = None) -> None:
            pass

        flow = chain(pass_on.s(), pass_on.s()).enqueue()
        denied = App(queue="orders", settings=Settings.from_env(
            {}, redis_url=user_url(admin, own_server, "-lrem")))
        with pytest.raises(ConfigError, match="may not run LREM on the keys"):
            denied.workflow(flow.flow_id).cancel()
        status = flow.status()
        assert status is not None and status.state == "running"
