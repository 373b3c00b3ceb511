"""Celery on the Redis transport: a no-op task, results ignored unless $BENCH_KEEP_RESULTS
asks for the Redis result backend."""

from __future__ import annotations

import os
from typing import Any

from celery import Celery  # type: ignore[import-untyped]

from bench.peers.counter import QUEUE, URL, count_run

KEEP_RESULTS = bool(os.environ.get("BENCH_KEEP_RESULTS"))
app = Celery("bench_peer", broker=URL, backend=URL if KEEP_RESULTS else None)
app.conf.update(
    task_default_queue=QUEUE,
    task_ignore_result=not KEEP_RESULTS,
    broker_connection_retry_on_startup=True,
    worker_hijack_root_logger=False,
)


@app.task(name="bench.noop")  # type: ignore[untyped-decorator]
def noop(data: str = "") -> None:
    count_run()


def enqueue(n: int) -> dict[str, Any]:
    from bench.peers.client import stamps  # noqa: PLC0415

    return stamps(n, noop.delay)


def fill(n: int, data: str, delay: float) -> None:
    """N `noop(data)` messages through one producer (the Redis transport sends each with
    its own LPUSH: Celery has no bulk send). Its ETA tasks are not kept apart in Redis
    (a worker holds them), so `delay` is refused."""
    if delay:
        raise ValueError("Celery keeps ETA tasks in its workers, not in Redis")
    with app.producer_or_acquire() as producer:
        for _ in range(n):
            noop.apply_async((data,), producer=producer)
