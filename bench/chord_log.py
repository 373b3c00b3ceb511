"""The chord comparison's side store: every run of a member or a callback, one line each.

Both systems' handlers append to the same kind of file ($BENCH_CHORD_LOG), apart from
the Redis the queues use, so what the bench counts is what the handlers did, not what
the queue says they did. A line is one `write` to a file opened with O_APPEND: whole
lines from any number of processes, and a line written just before a SIGKILL stays.

    member <chord> <index> <pid>
    callback <chord> <pid> <results seen> <1 if they were exactly the members' values>
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

LOG_ENV = "BENCH_CHORD_LOG"

# By process: a forked pool worker opens its own descriptor.
_descriptors: dict[int, int] = {}


def _append(line: str) -> None:
    pid = os.getpid()
    fd = _descriptors.get(pid)
    if fd is None:
        fd = os.open(os.environ[LOG_ENV], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        _descriptors[pid] = fd
    os.write(fd, f"{line}\n".encode())


def member_ran(chord: str, index: int) -> None:
    _append(f"member {chord} {index} {os.getpid()}")


def callback_ran(chord: str, results: Sequence[object], members: int) -> None:
    """Record one run of a chord's callback and whether it saw each member's value once."""
    exact = sorted(r for r in results if isinstance(r, int)) == list(range(members))
    _append(f"callback {chord} {os.getpid()} {len(results)} {int(exact)}")


@dataclass
class ChordLog:
    """What a run's log file says: runs per member and per callback, by chord."""

    member_runs: Counter[tuple[str, int]] = field(default_factory=Counter)
    callback_runs: Counter[str] = field(default_factory=Counter)
    wrong_inputs: Counter[str] = field(default_factory=Counter)

    def fired(self, chords: Sequence[str]) -> dict[int, int]:
        """How many of `chords` fired their callback 0, 1, 2... times."""
        return dict(Counter(self.callback_runs[c] for c in chords))


def read(path: Path) -> ChordLog:
    log = ChordLog()
    if not path.exists():
        return log
    for line in path.read_text().splitlines():
        kind, chord, *rest = line.split()
        if kind == "member":
            log.member_runs[(chord, int(rest[0]))] += 1
        elif kind == "callback":
            log.callback_runs[chord] += 1
            if rest[2] != "1":
                log.wrong_inputs[chord] += 1
    return log
