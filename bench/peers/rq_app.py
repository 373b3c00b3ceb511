"""RQ: a no-op job function on one queue."""

from __future__ import annotations

from redis import Redis
from rq import Queue

from bench.peers.counter import QUEUE, URL, count_run


def noop() -> None:
    count_run()


def enqueue(n: int) -> list[float]:
    from bench.peers.client import stamps  # noqa: PLC0415

    queue = Queue(QUEUE, connection=Redis.from_url(URL))
    return stamps(n, lambda: queue.enqueue(noop))
