"""Huey on Redis (blocking reads): a no-op task."""

from __future__ import annotations

from huey import RedisHuey  # type: ignore[import-untyped]

from bench.peers.counter import QUEUE, URL, incr

huey = RedisHuey(QUEUE, url=URL)


@huey.task()  # type: ignore[untyped-decorator]
def noop() -> None:
    incr()


def enqueue(n: int) -> list[float]:
    from bench.peers.client import stamps  # noqa: PLC0415

    return stamps(n, noop)
