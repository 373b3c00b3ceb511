"""taskiq with taskiq-redis: an async no-op task on the list broker (no acks) or the
stream broker (acks), chosen by BENCH_VARIANT."""

from __future__ import annotations

import asyncio
import os
from typing import Any

from taskiq import AsyncBroker
from taskiq_redis import ListQueueBroker, RedisStreamBroker

from bench.peers.counter import QUEUE, URL, acount_run

VARIANT = os.environ.get("BENCH_VARIANT", "list")
broker: AsyncBroker = (RedisStreamBroker(URL, queue_name=QUEUE) if VARIANT == "stream"
                       else ListQueueBroker(URL, queue_name=QUEUE))


@broker.task(task_name="bench.noop")
async def noop(data: str = "") -> None:
    await acount_run()


def enqueue(n: int) -> dict[str, Any]:
    from bench.peers.client import astamps  # noqa: PLC0415

    async def send() -> dict[str, Any]:
        await broker.startup()
        try:
            return await astamps(n, noop.kiq)
        finally:
            await broker.shutdown()

    return asyncio.run(send())


def fill(n: int, data: str, delay: float) -> None:
    """N `noop(data)` messages, `kiq` calls a chunk at a time concurrently (taskiq has no
    bulk send). Its brokers have no delay (a schedule source is a separate component),
    so `delay` is refused."""
    from bench.peers.fill import IN_FLIGHT, chunks  # noqa: PLC0415

    if delay:
        raise ValueError("taskiq's Redis brokers keep no delayed tasks")

    async def send() -> None:
        await broker.startup()
        try:
            for size in chunks(n, IN_FLIGHT):
                await asyncio.gather(*(noop.kiq(data) for _ in range(size)))
        finally:
            await broker.shutdown()

    asyncio.run(send())
