"""Celery on the Redis transport: a no-op task, results ignored."""

from __future__ import annotations

from celery import Celery  # type: ignore[import-untyped]

from bench.peers.counter import QUEUE, URL, count_run

app = Celery("bench_peer", broker=URL)
app.conf.update(
    task_default_queue=QUEUE,
    task_ignore_result=True,
    broker_connection_retry_on_startup=True,
    worker_hijack_root_logger=False,
)


@app.task(name="bench.noop")  # type: ignore[untyped-decorator]
def noop() -> None:
    count_run()


def enqueue(n: int) -> list[float]:
    from bench.peers.client import stamps  # noqa: PLC0415

    return stamps(n, noop.delay)
