"""Dramatiq on its Redis broker: a no-op actor with the default middleware."""

from __future__ import annotations

from typing import Any

import dramatiq
from dramatiq.brokers.redis import RedisBroker

from bench.peers.counter import QUEUE, URL, count_run

broker = RedisBroker(url=URL)  # type: ignore[no-untyped-call]
dramatiq.set_broker(broker)


@dramatiq.actor(queue_name=QUEUE)
def noop(data: str = "") -> None:
    count_run()


def enqueue(n: int) -> dict[str, Any]:
    from bench.peers.client import stamps  # noqa: PLC0415

    return stamps(n, noop.send)


def fill(n: int, data: str, delay: float) -> None:
    """N `noop(data)` messages, one `send` each (Dramatiq has no bulk send); delayed ones
    go to the queue's delay queue (its `.DQ` list and message hash) in Redis."""
    for _ in range(n):
        noop.send_with_options(args=(data,), delay=round(delay * 1000) or None)
