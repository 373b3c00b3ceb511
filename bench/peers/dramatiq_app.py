"""Dramatiq on its Redis broker: a no-op actor with the default middleware."""

from __future__ import annotations

import dramatiq
from dramatiq.brokers.redis import RedisBroker

from bench.peers.counter import QUEUE, URL, count_run

broker = RedisBroker(url=URL)  # type: ignore[no-untyped-call]
dramatiq.set_broker(broker)


@dramatiq.actor(queue_name=QUEUE)
def noop() -> None:
    count_run()


def enqueue(n: int) -> list[float]:
    from bench.peers.client import stamps  # noqa: PLC0415

    return stamps(n, noop.send)
