"""`python -m bench.peers.client PEER N`: enqueue N no-op tasks of PEER one call at a
time and print the rate, timed from the end of the first call (so connecting is not
counted) to the end of the last. Runs in the peer's own interpreter."""

from __future__ import annotations

import importlib
import json
import sys
import time
from collections.abc import Awaitable, Callable
from typing import Any


def stamps(n: int, send: Callable[[], Any]) -> list[float]:
    marks = []
    for _ in range(n):
        send()
        marks.append(time.perf_counter())
    return marks


async def astamps(n: int, send: Callable[[], Awaitable[Any]]) -> list[float]:
    marks = []
    for _ in range(n):
        await send()
        marks.append(time.perf_counter())
    return marks


def main(argv: list[str]) -> int:
    peer, n = argv[0], int(argv[1])
    module = importlib.import_module(f"bench.peers.{peer}_app")
    marks: list[float] = module.enqueue(n)
    print(json.dumps({"rate": (len(marks) - 1) / (marks[-1] - marks[0])}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
