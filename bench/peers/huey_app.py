"""Huey on Redis (blocking reads): a no-op task."""

from __future__ import annotations

from huey import RedisHuey  # type: ignore[import-untyped]

from bench.peers.counter import QUEUE, URL, count_run

huey = RedisHuey(QUEUE, url=URL)


@huey.task()  # type: ignore[untyped-decorator]
def noop() -> None:
    count_run()


def enqueue(n: int) -> list[float]:
    from bench.peers.client import stamps  # noqa: PLC0415

    return stamps(n, noop)
