"""`python -m bench.peers.fill PEER N DELAY`: put N tasks of PEER's no-op, each with the
memory bench's argument, in Redis through the peer's fastest bulk path (ready, or
DELAY seconds ahead), and exit. Runs in the peer's own interpreter."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Iterator

# The argument every task carries: 100 bytes, as the memory bench's issue asks.
ARGUMENT = "x" * 100
# Tasks per pipeline (or per bulk call) for peers that have one.
CHUNK = 1000
# Enqueue calls awaited together by the asyncio peers, which have no bulk call.
IN_FLIGHT = 100


def chunks(n: int, size: int = CHUNK) -> Iterator[int]:
    """The sizes of `n` split into chunks of at most `size`."""
    for start in range(0, n, size):
        yield min(size, n - start)


def main(argv: list[str]) -> int:
    peer, n, delay = argv[0], int(argv[1]), float(argv[2])
    module = importlib.import_module(f"bench.peers.{peer}_app")
    module.fill(n, ARGUMENT, delay)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
