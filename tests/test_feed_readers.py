"""The feed's readers: one hub per existing queue, however many streams ask at once."""

from __future__ import annotations

import asyncio

import redis
import redis.asyncio as aioredis

from feed_support import run
from taskq.broker import Broker
from taskq.feed.hub import Hub
from taskq.feed.readers import EXISTENCE_CHECKS, Readers, Refused
from taskq.keys import QUEUES_KEY
from taskq.tools.embedded import EmbeddedRedis

NAME = "feed-readers-test"


def test_a_barrage_of_streams_for_made_up_queues_asks_redis_a_few_at_a_time(
    redis_server: EmbeddedRedis,
) -> None:
    async def scenario() -> tuple[list[object], int]:
        aclient = aioredis.Redis.from_pool(aioredis.BlockingConnectionPool.from_url(
            redis_server.url, decode_responses=True, client_name=NAME, max_connections=64))
        readers = Readers(aclient, ring_size=10)
        try:
            refused = await asyncio.gather(
                *(readers.acquire(f"made-up-{n}") for n in range(300)))
            with redis.Redis.from_url(redis_server.url) as client:
                held = sum(1 for c in client.client_list() if c["name"] == NAME)
            return list(refused), held
        finally:
            await readers.close()
            await aclient.aclose()

    refused, held = run(scenario())
    assert refused == [Refused("missing", f"made-up-{n}") for n in range(300)]
    # Each check held a connection of its own only while it ran: the pool made no more
    # than ran at once.
    assert 1 <= held <= EXISTENCE_CHECKS


def test_a_queue_whose_log_outlived_its_registration_is_followed(
    redis_server: EmbeddedRedis, client: redis.Redis
) -> None:
    """After Redis lost its data, a producer names its queue again only within
    REGISTER_AGAIN_SECONDS; its first enqueue's events are there at once."""
    queue = Broker(client, "relisted")
    queue.enqueue("t1")
    client.srem(QUEUES_KEY, "relisted")

    async def scenario() -> tuple[object, object]:
        aclient = aioredis.Redis.from_url(redis_server.url, decode_responses=True)
        readers = Readers(aclient, ring_size=10)
        try:
            followed = await readers.acquire("relisted")
            if isinstance(followed, Hub):
                await readers.release("relisted", followed)
            return followed, await readers.acquire("never-used")
        finally:
            await readers.close()
            await aclient.aclose()

    followed, unknown = run(scenario())
    assert isinstance(followed, Hub)
    assert unknown == Refused("missing", "never-used")
