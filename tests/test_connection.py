"""The client taskq builds (taskq.connection): a Ctrl-C that lands while a command is
packed raises KeyboardInterrupt, not a segfault, and the command goes out as it would;
an asyncio client keeps every cancel, and passes on a connection a cancelled waiter
was woken for."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from redis.asyncio.connection import AbstractConnection

from conftest import ON_CLUSTER
from taskq.connection import TextArgsPacker, async_client, connect
from taskq.settings import Settings
from taskq.tools.embedded import EmbeddedRedis

# Packs a script call (numbers among its arguments, as every taskq call has) while a
# timer's handler raises KeyboardInterrupt at random instants. hiredis 3.5's own packer
# crashed this (SIGSEGV) within a fraction of a second.
INTERRUPTED = """
import random, signal
from taskq.connection import TextArgsPacker
from taskq.transport import direct
PACKERS = {
    "connections": TextArgsPacker().pack,
    "direct": lambda *command: direct.pack(None, [command]),  # the hot path's own
}
pack = PACKERS[%r]
def interrupt(*_): raise KeyboardInterrupt
signal.signal(signal.SIGALRM, interrupt)
interrupted = tries = 0
# Until the handler has landed inside a pack often enough: how often one lands per try
# depends on how fast the machine packs, and on what else runs on it.
while interrupted < 200 and tries < 2_000_000:
    tries += 1
    try:
        try:
            signal.setitimer(signal.ITIMER_REAL, random.uniform(0.00001, 0.0003))
            pack("EVALSHA", "abc", 2, "k1", "k2", 5, 0.5, "x")
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
    except KeyboardInterrupt:
        interrupted += 1
print(interrupted)
"""


@pytest.mark.parametrize("packer", ["connections", "direct"])
def test_interrupts_while_packing_raise_and_never_crash(packer: str) -> None:
    done = subprocess.run([sys.executable, "-c", INTERRUPTED % packer], check=False,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, (done.returncode, done.stderr[-2000:])
    assert int(done.stdout) == 200  # the handler did land, and raised, that often


def test_numbers_go_out_as_the_text_redis_reads(settings: Settings) -> None:
    assert TextArgsPacker().pack("SET", "k", 5, 0.5, b"x") == \
        redis.connection.HiredisRespSerializer().pack("SET", "k", "5", "0.5", b"x")
    client = connect(settings)
    try:
        client.set("taskq-test:n", 12)
        assert client.incrbyfloat("taskq-test:n", 0.5) == 12.5
    finally:
        client.delete("taskq-test:n")
        client.close()


def test_every_connection_packs_numbers_as_text(settings: Settings) -> None:
    client = connect(settings)  # on a cluster run, a RedisCluster's nodes' connections
    try:
        client.ping()
        pools = ([node.redis_connection.connection_pool for node in client.get_nodes()]
                 if isinstance(client, redis.RedisCluster) else [client.connection_pool])
        connections = [pool.get_connection() for pool in pools]
        try:
            assert connections and all(isinstance(c._command_packer, TextArgsPacker)
                                       for c in connections)
        finally:
            for pool, connection in zip(pools, connections, strict=True):
                pool.release(connection)
    finally:
        client.close()


@pytest.fixture
def unable_to_save(tmp_path: Path) -> Iterator[EmbeddedRedis]:
    """A Redis whose last save failed, with stop-writes-on-bgsave-error (its default):
    it refuses every write, and PING, with MISCONF until a save succeeds. Its save fails
    because a directory stands where the snapshot is renamed to."""
    with EmbeddedRedis(data_dir=tmp_path) as server:
        (tmp_path / "dump.rdb").mkdir()
        admin = redis.Redis(unix_socket_path=str(server.socket_path))
        admin.config_set("save", "3600 1")
        admin.bgsave()
        deadline = time.monotonic() + 10
        while admin.info("persistence")["rdb_last_bgsave_status"] != "err":
            assert time.monotonic() < deadline, "the save did not fail"
            time.sleep(0.01)
        with pytest.raises(redis.ResponseError, match="MISCONF"):
            admin.set("taskq-test:k", "v")
        yield server
        admin.config_set("save", "")  # else its shutdown tries to save, and fails too
        admin.close()


def test_reads_go_on_while_redis_refuses_writes_after_a_failed_save(
        unable_to_save: EmbeddedRedis) -> None:
    settings = Settings.from_env({}, redis_url=unable_to_save.url, redis_url_given=True)
    client = connect(settings)
    try:
        assert client.hget("taskq-test:h", "f") is None
    finally:
        client.close()

    async def read() -> object:
        aclient = async_client(settings)
        try:
            return await aclient.hget("taskq-test:h", "f")
        finally:
            await aclient.aclose()

    assert asyncio.run(read()) is None


@pytest.mark.skipif(ON_CLUSTER, reason="a cluster client's nodes make their own connections")
def test_a_cancel_that_lands_as_a_write_completes_ends_the_call(settings: Settings) -> None:
    """asyncio.wait_for around the write (redis-py's bound) drops such a cancel on Python
    3.11, and the call goes on until Redis answers."""
    async def main() -> list[int]:
        client = async_client(settings)
        pool = client.connection_pool
        connection = await pool.get_connection()
        dropped = []
        try:
            for turns in range(8):  # a cancel every loop turn of the write in turn
                await connection.disconnect()
                await connection.connect()
                send = asyncio.ensure_future(
                    connection.send_packed_command(connection.pack_command("PING")))
                for _ in range(turns):
                    await asyncio.sleep(0)
                if send.cancel():
                    try:
                        await send
                    except asyncio.CancelledError:
                        continue
                    dropped.append(turns)
        finally:
            await pool.release(connection)
            await client.aclose()
        return dropped

    assert asyncio.run(main()) == []


@pytest.mark.skipif(ON_CLUSTER, reason="a cluster client keeps no pool of its own")
def test_a_waiter_cancelled_as_a_connection_comes_free_passes_it_on(
    settings: Settings,
) -> None:
    """asyncio.Condition (before Python 3.13) lets the cancelled waiter take the
    wake-up with it: the next waited out the pool's timeout beside a free connection."""
    async def main() -> object:
        pool = async_client(settings, max_connections=2).connection_pool
        held = [await pool.get_connection(), await pool.get_connection()]
        first = asyncio.create_task(pool.get_connection())
        second = asyncio.create_task(pool.get_connection())
        await asyncio.sleep(0.1)  # both wait for a connection
        await pool.release(held[0])  # wakes the first
        first.cancel()  # before it runs again
        try:
            got = await asyncio.wait_for(second, timeout=settings.redis_timeout_seconds * 2)
        except redis.ConnectionError as e:
            got = e
        await pool.disconnect()
        return got

    assert isinstance(asyncio.run(main()), AbstractConnection)
