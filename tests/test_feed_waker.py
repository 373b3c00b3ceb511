"""The feed's waker: one blocking read for every followed log, on a real Redis."""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
import redis
import redis.asyncio as aioredis

from feed_support import run
from taskq.feed.waker import WAKE_BLOCK_MS, Waker
from taskq.settings import Settings
from taskq.tools.cluster import EmbeddedCluster

# Well past a read's block, well short of the waits' own timeouts below.
PROMPTLY = 1.0
QUIET = 10.0


def blocked_reads(client: redis.Redis) -> int:
    return sum(1 for c in client.client_list() if c["cmd"] == "xread")


@contextlib.asynccontextmanager
async def running_waker(url: str, by_slot: bool = False, **options: Any
                        ) -> AsyncIterator[Waker]:
    """A waker on an asyncio client of its own (decoding replies unless told not to)."""
    options.setdefault("decode_responses", True)
    aclient = aioredis.Redis.from_url(url, **options)
    waker = Waker(aclient, by_slot=by_slot)
    try:
        yield waker
    finally:
        await waker.close()
        await aclient.aclose()


async def woken_at(waker: Waker, key: str, seq: int, timeout: float = QUIET) -> float:
    """How long `waker.wait` took to return."""
    began = time.monotonic()
    await waker.wait(key, seq, timeout)
    return time.monotonic() - began


def test_a_waiter_is_woken_when_its_log_moves_and_not_when_another_does(
    settings: Settings, client: redis.Redis
) -> None:
    client.xadd("log:a", {"n": "1"}, id="1-0")
    client.xadd("log:b", {"n": "1"}, id="1-0")

    async def scenario() -> None:
        async with running_waker(settings.redis_url) as waker:
            a = asyncio.create_task(woken_at(waker, "log:a", 1))
            b = asyncio.create_task(woken_at(waker, "log:b", 1, timeout=3 * PROMPTLY))
            await asyncio.sleep(0.2)
            assert not a.done() and not b.done(), "woken with nothing past their seq"
            client.xadd("log:a", {"n": "2"}, id="2-0")
            assert await a < 0.2 + PROMPTLY
            assert not b.done(), "log:b did not move"
            assert await b >= 3 * PROMPTLY - 0.05  # it waited out its own timeout

    run(scenario())


def test_a_waiter_whose_log_is_already_past_its_seq_returns_at_once(
    settings: Settings, client: redis.Redis
) -> None:
    client.xadd("log:a", {"n": "1"}, id="5-0")

    async def scenario() -> float:
        async with running_waker(settings.redis_url) as waker:
            return await woken_at(waker, "log:a", 4)

    assert run(scenario()) < PROMPTLY


def test_forty_waiting_logs_hold_one_connection_in_one_blocking_read(
    settings: Settings, client: redis.Redis
) -> None:
    keys = [f"log:{i}" for i in range(40)]
    for key in keys:
        client.xadd(key, {"n": "1"}, id="1-0")

    async def scenario() -> list[float]:
        async with running_waker(settings.redis_url) as waker:
            waits = [asyncio.create_task(woken_at(waker, key, 1)) for key in keys]
            await asyncio.sleep(0.3)
            assert blocked_reads(client) == 1
            for key in keys:
                client.xadd(key, {"n": "2"}, id="2-0")
            return list(await asyncio.gather(*waits))

    assert max(run(scenario())) < 0.3 + PROMPTLY


def test_a_log_first_waited_on_while_a_read_is_out_is_heard_from_in_the_next(
    settings: Settings, client: redis.Redis
) -> None:
    client.xadd("log:a", {"n": "1"}, id="1-0")
    client.xadd("log:late", {"n": "1"}, id="1-0")

    async def scenario() -> float:
        async with running_waker(settings.redis_url) as waker:
            quiet = asyncio.create_task(woken_at(waker, "log:a", 1))
            await asyncio.sleep(WAKE_BLOCK_MS / 2000)  # a read on log:a alone is out
            late = asyncio.create_task(woken_at(waker, "log:late", 1))
            await asyncio.sleep(0)
            client.xadd("log:late", {"n": "2"}, id="2-0")
            took = await late
            assert not quiet.done()
            quiet.cancel()
            return took

    assert run(scenario()) < PROMPTLY


@pytest.mark.parametrize("key,seq", [("log:wrong", 0), ("log:ahead", 2**64)],
                         ids=["a key of another type", "a tail past any stream id"])
def test_a_key_redis_refuses_fails_its_own_waiter_and_leaves_the_others_live(
    settings: Settings, client: redis.Redis, key: str, seq: int
) -> None:
    client.xadd("log:a", {"n": "1"}, id="1-0")
    client.xadd("log:ahead", {"n": "1"}, id="1-0")
    client.set("log:wrong", "a string, not a stream")

    async def scenario() -> None:
        async with running_waker(settings.redis_url) as waker:
            good = asyncio.create_task(woken_at(waker, "log:a", 1))
            # Its hub reports the error and backs off, and waits again: twice here.
            for _ in range(2):
                with pytest.raises(redis.ResponseError):
                    await waker.wait(key, seq, QUIET)
                await asyncio.sleep(0.1)
            assert not good.done(), "woken though its log did not move"
            client.xadd("log:a", {"n": "2"}, id="2-0")
            assert await good < 0.2 + 2 * WAKE_BLOCK_MS / 1000 + PROMPTLY
            assert waker.waiting == {}

    run(scenario())


@pytest.mark.parametrize("protocol", [2, 3])
def test_a_client_that_does_not_decode_replies_is_woken_without_reading_in_a_loop(
    settings: Settings, client: redis.Redis, protocol: int
) -> None:
    client.xadd("log:a", {"n": "1"}, id="1-0")

    async def scenario() -> float:
        async with running_waker(settings.redis_url, protocol=protocol,
                                 decode_responses=False) as waker:
            wait = asyncio.create_task(woken_at(waker, "log:a", 1))
            await asyncio.sleep(0.5)
            client.xadd("log:a", {"n": "2"}, id="2-0")
            return await wait

    client.config_resetstat()
    assert run(scenario()) < 0.5 + PROMPTLY
    reads = int(client.info("commandstats")["cmdstat_xread"]["calls"])
    assert reads <= 0.5 / (WAKE_BLOCK_MS / 1000) + 3, f"{reads} reads: not blocking"


def test_a_waker_closed_mid_read_leaves_its_client_answering_true(
    settings: Settings, client: redis.Redis
) -> None:
    client.xadd("log:a", {"n": "1"}, id="1-0")
    client.set("plain", "value")

    async def scenario() -> None:
        aclient = aioredis.Redis.from_url(settings.redis_url, decode_responses=True)
        waker = Waker(aclient)
        try:
            wait = asyncio.create_task(woken_at(waker, "log:a", 1))
            await asyncio.sleep(WAKE_BLOCK_MS / 2000)
            await waker.close()  # a read is out: its reply must not answer a later call
            wait.cancel()
            client.xadd("log:a", {"n": "2"}, id="2-0")
            for _ in range(5):
                assert await aclient.get("plain") == "value"
            assert waker.waiting == {}
        finally:
            await aclient.aclose()

    run(scenario())


@pytest.fixture(scope="module")
def one_node_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedCluster]:
    with EmbeddedCluster(primaries=1, replicas=0, binary=os.environ.get("REDIS_SERVER", ""),
                         data_dir=tmp_path_factory.mktemp("cluster")) as cluster:
        cluster.wait_healthy()
        yield cluster


@pytest.fixture
def node(one_node_cluster: EmbeddedCluster) -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(one_node_cluster.url, decode_responses=True)
    client.flushall()
    yield client
    client.close()


@pytest.mark.cluster
def test_on_a_cluster_each_queues_log_is_read_in_its_own_slot_and_woken_alone(
    one_node_cluster: EmbeddedCluster, node: redis.Redis
) -> None:
    keys = ["{taskq:a}:events", "{taskq:b}:events"]  # each queue's own slot
    assert len({node.cluster("keyslot", key) for key in keys}) == 2
    for key in keys:
        node.xadd(key, {"n": "1"}, id="1-0")

    async def scenario() -> None:
        async with running_waker(one_node_cluster.url, by_slot=True) as waker:
            a = asyncio.create_task(woken_at(waker, keys[0], 1))
            b = asyncio.create_task(woken_at(waker, keys[1], 1, timeout=3 * PROMPTLY))
            await asyncio.sleep(0.3)
            assert not a.done() and not b.done(), "woken with nothing past their seq"
            node.xadd(keys[0], {"n": "2"}, id="2-0")
            assert await a < 0.3 + PROMPTLY
            assert not b.done(), "the other queue's log did not move"
            assert await b >= 3 * PROMPTLY - 0.05

    run(scenario())


@pytest.mark.cluster
def test_on_a_cluster_a_refused_key_fails_only_its_own_waiter_in_a_shared_slot(
    one_node_cluster: EmbeddedCluster, node: redis.Redis
) -> None:
    bad, good = "{taskq:alpha}:events", "{taskq:q16768}:events"
    assert node.cluster("keyslot", bad) == node.cluster("keyslot", good)
    node.set(bad, "a string, not a stream")
    node.xadd(good, {"n": "1"}, id="1-0")

    async def scenario() -> None:
        async with running_waker(one_node_cluster.url, by_slot=True) as waker:
            healthy = asyncio.create_task(woken_at(waker, good, 1))
            with pytest.raises(redis.ResponseError):
                await waker.wait(bad, 0, QUIET)
            await asyncio.sleep(0.2)
            assert not healthy.done(), "refused or woken though its log did not move"
            node.xadd(good, {"n": "2"}, id="2-0")
            assert await healthy < 0.2 + PROMPTLY

    run(scenario())
