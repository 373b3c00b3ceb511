"""The bench's counted no-op: each run of a task appends one byte to a tally file.

The count is the file's size. A run that lost a task never reaches N; one that ran a
task twice goes past it, so both still fail the bench, as the Redis counter did. What
changes is the cost of counting: one `write` to a file opened with O_APPEND (atomic
for one byte, from any number of processes and threads) costs a few microseconds,
where an INCR through redis-py costs a worker a round trip and, on this 2-core
machine, more CPU than a queue's own work per task. Counted that way the drain timed
redis-py's client as much as the queue.
"""

from __future__ import annotations

import os
from pathlib import Path

TALLY_ENV = "BENCH_TALLY"

# By process: a forked pool worker opens its own descriptor.
_descriptors: dict[int, int] = {}


def tick() -> None:
    """Count one run of a task in the file named by $BENCH_TALLY."""
    pid = os.getpid()
    fd = _descriptors.get(pid)
    if fd is None:
        fd = os.open(os.environ[TALLY_ENV], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        _descriptors[pid] = fd
    os.write(fd, b".")


def count(path: Path) -> int:
    """How many runs the tally file at `path` holds (0 before the first)."""
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return 0
