"""RQ: a no-op job function on one queue."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from redis import Redis
from rq import Queue, Retry

from bench.peers.counter import QUEUE, URL, count_run


def noop(data: str = "") -> None:
    count_run()


def enqueue(n: int) -> dict[str, Any]:
    from bench.peers.client import stamps  # noqa: PLC0415

    queue = Queue(QUEUE, connection=Redis.from_url(URL))
    return stamps(n, lambda: queue.enqueue(noop))


def fill(n: int, data: str, delay: float) -> None:
    """N jobs of `noop(data)`, a pipeline per chunk: `enqueue_many` for ready jobs, and
    for delayed ones `schedule_job` (the job hash plus the scheduled registry's ZSET).
    Each job may be retried three times, so that it keeps a retry count as taskq's do."""
    from bench.peers.fill import chunks  # noqa: PLC0415

    queue = Queue(QUEUE, connection=Redis.from_url(URL))
    for size in chunks(n):
        if not delay:
            queue.enqueue_many([Queue.prepare_data(noop, (data,), retry=Retry(3))
                                for _ in range(size)])
            continue
        at = datetime.now(UTC) + timedelta(seconds=delay)
        with queue.connection.pipeline() as pipe:
            for _ in range(size):
                job = queue.create_job(noop, args=(data,), retry=Retry(3))
                queue.schedule_job(job, at, pipeline=pipe)
            pipe.execute()
