"""arq: an async no-op job. Runs in the bench's own arq venv (arq pins redis<6)."""

from __future__ import annotations

import asyncio
import os
from typing import Any, ClassVar

# arq lives in its own venv, so the type checker of taskq's venv may not see it.
from arq import create_pool  # type: ignore[import-not-found, unused-ignore]
from arq.connections import RedisSettings  # type: ignore[import-not-found, unused-ignore]

from bench.peers.counter import BODY, COUNTER, QUEUE, URL
from bench.tally import tick

REDIS = RedisSettings.from_dsn(URL)


async def noop(ctx: dict[str, Any], data: str = "") -> None:
    if BODY == "incr":
        await ctx["redis"].incr(COUNTER)
    else:
        tick()


class WorkerSettings:
    functions: ClassVar[list[Any]] = [noop]
    redis_settings = REDIS
    queue_name = QUEUE
    max_jobs = int(os.environ.get("BENCH_ARQ_MAX_JOBS", "10"))


def enqueue(n: int) -> dict[str, Any]:
    from bench.peers.client import astamps  # noqa: PLC0415

    async def send() -> dict[str, Any]:
        pool = await create_pool(REDIS, default_queue_name=QUEUE)
        try:
            return await astamps(n, lambda: pool.enqueue_job("noop"))
        finally:
            await pool.aclose()

    return asyncio.run(send())


def fill(n: int, data: str, delay: float) -> None:
    """N `noop(data)` jobs, `enqueue_job` calls a chunk at a time concurrently (arq has no
    bulk enqueue); a delayed job is the same job key and queue ZSET entry, scored later."""
    from bench.peers.fill import IN_FLIGHT, chunks  # noqa: PLC0415

    options = {"_defer_by": delay} if delay else {}

    async def send() -> None:
        pool = await create_pool(REDIS, default_queue_name=QUEUE)
        try:
            for size in chunks(n, IN_FLIGHT):
                await asyncio.gather(*(pool.enqueue_job("noop", data, **options)
                                       for _ in range(size)))
        finally:
            await pool.aclose()

    asyncio.run(send())
