"""Huey on Redis (blocking reads): a no-op task."""

from __future__ import annotations

from typing import Any

from huey import RedisHuey  # type: ignore[import-untyped]

from bench.peers.counter import QUEUE, URL, count_run

huey = RedisHuey(QUEUE, url=URL)


@huey.task()  # type: ignore[untyped-decorator]
def noop(data: str = "") -> None:
    count_run()


def enqueue(n: int) -> dict[str, Any]:
    from bench.peers.client import stamps  # noqa: PLC0415

    return stamps(n, noop)


def fill(n: int, data: str, delay: float) -> None:
    """N `noop(data)` messages, one call each (Huey has no bulk enqueue). A delayed one
    waits in the same queue list until a consumer moves it to its schedule ZSET."""
    for _ in range(n):
        if delay:
            noop.schedule(args=(data,), delay=delay)
        else:
            noop(data)
