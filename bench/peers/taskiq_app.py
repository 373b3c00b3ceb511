"""taskiq with taskiq-redis: an async no-op task on the list broker (no acks) or the
stream broker (acks), chosen by BENCH_VARIANT."""

from __future__ import annotations

import asyncio
import os

from taskiq import AsyncBroker
from taskiq_redis import ListQueueBroker, RedisStreamBroker

from bench.peers.counter import QUEUE, URL, acount_run

VARIANT = os.environ.get("BENCH_VARIANT", "list")
broker: AsyncBroker = (RedisStreamBroker(URL, queue_name=QUEUE) if VARIANT == "stream"
                       else ListQueueBroker(URL, queue_name=QUEUE))


@broker.task(task_name="bench.noop")
async def noop() -> None:
    await acount_run()


def enqueue(n: int) -> list[float]:
    from bench.peers.client import astamps  # noqa: PLC0415

    async def send() -> list[float]:
        await broker.startup()
        try:
            return await astamps(n, noop.kiq)
        finally:
            await broker.shutdown()

    return asyncio.run(send())
