"""`python -m bench.counting_worker OUT [taskq worker options]`: a `taskq worker` run
in-process with redis-py's sends counted: round trips, and commands by name.

On SIGUSR1 it writes the counts so far to OUT as JSON, so the bench can read them at
the moment a drain ends, before idle polling adds more.
"""

from __future__ import annotations

import json
import signal
import sys
import threading
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from types import FrameType
from typing import Any

from redis.connection import AbstractConnection

from taskq.cli import main as taskq_main

_lock = threading.Lock()
_commands: Counter[str] = Counter()
_trips = [0]

# redis-py leaves these untyped.
_send_packed: Callable[..., None] = AbstractConnection.send_packed_command
_send_command: Callable[..., None] = AbstractConnection.send_command
_pack_commands: Callable[..., Any] = AbstractConnection.pack_commands


def _name(args: Sequence[Any]) -> str:
    first = args[0] if args else b"?"
    return (first.decode() if isinstance(first, bytes) else str(first)).upper()


def send_packed_command(self: AbstractConnection, command: Any, check_health: bool = True) -> None:
    with _lock:
        _trips[0] += 1
    _send_packed(self, command, check_health)


def send_command(self: AbstractConnection, *args: Any, **kwargs: Any) -> None:
    with _lock:
        _commands[_name(args)] += 1
    _send_command(self, *args, **kwargs)


def pack_commands(self: AbstractConnection, commands: Iterable[Sequence[Any]]) -> Any:
    commands = list(commands)
    with _lock:
        _commands.update(_name(args) for args in commands)
    return _pack_commands(self, commands)


def main(argv: Sequence[str]) -> int:
    out = Path(argv[0])

    def dump(signum: int, frame: FrameType | None) -> None:
        with _lock:
            data = {"round_trips": _trips[0], "commands": dict(_commands)}
        out.write_text(json.dumps(data))

    AbstractConnection.send_packed_command = send_packed_command  # type: ignore[method-assign]
    AbstractConnection.send_command = send_command  # type: ignore[method-assign]
    AbstractConnection.pack_commands = pack_commands  # type: ignore[method-assign]
    signal.signal(signal.SIGUSR1, dump)
    return taskq_main(["--log-level", "WARNING", "worker", *argv[1:]])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
