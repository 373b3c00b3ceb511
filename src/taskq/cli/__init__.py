"""The `taskq` command: parses arguments, builds Settings, delegates, returns a status."""

from __future__ import annotations

import argparse
import io
import os
import sys
from collections.abc import Sequence
from typing import NoReturn

import redis
from redis.exceptions import RedisClusterException

from taskq.cli import (
    cancel,
    chaos,
    dashboard,
    demo,
    dlq,
    flow,
    history,
    ledger,
    producer,
    redis_server,
    schedules,
    serve,
    task,
    worker,
    workers,
)
from taskq.cli.common import error_line
from taskq.cli.logs import FORMATS, configure
from taskq.errors import ConfigError, InvalidTaskError, TaskqError, UnsafeRedisError
from taskq.processes import REFUSED_STATUS
from taskq.terminal import one_line
from taskq.version import __version__

COMMANDS = {
    "worker": worker,
    "workers": workers,
    "enqueue": producer,
    "dlq": dlq,
    "task": task,
    "history": history,
    "cancel": cancel,
    "flow": flow,
    "ledger": ledger,
    "schedules": schedules,
    "dashboard": dashboard,
    "serve": serve,
    "redis": redis_server,
    "demo": demo,
    "chaos": chaos,
}


LOG_LEVELS = ["DEBUG", "INFO", "WARNING", "ERROR"]


class Parser(argparse.ArgumentParser):
    """argparse's parser, whose error for a missing ID says how to pass one that starts
    with '-' (task ids may), which it reads as an option and so finds no ID."""

    def error(self, message: str) -> NoReturn:
        if "arguments are required: ID" in message:
            message += ("; an ID that starts with '-' goes after '--', as in "
                        f"`{self.prog} -- -a1`")
        super().error(message)


def parser() -> argparse.ArgumentParser:
    top = Parser(
        prog="taskq",
        description="A Redis task queue: no task lost, no effect twice, watched live.",
    )
    top.add_argument("--version", action="version", version=f"taskq {__version__}")
    top.add_argument("--log-level", default="INFO", choices=LOG_LEVELS, help="default INFO")
    top.add_argument("--log-format", default="text", choices=FORMATS,
                     help="text lines (default), or one JSON object per line")
    sub = top.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, module in COMMANDS.items():
        command = sub.add_parser(name, help=module.HELP, description=module.HELP)
        add_global_options(command)
        module.add_arguments(command)
        command.set_defaults(handler=module.main)
    return top


def add_global_options(command: argparse.ArgumentParser) -> None:
    """The options of `taskq` itself, taken after the command too (`taskq worker
    --log-level DEBUG`): given there they win, left out they keep the top's value."""
    command.add_argument("--log-level", default=argparse.SUPPRESS, choices=LOG_LEVELS,
                         help="default INFO (here or before the command)")
    command.add_argument("--log-format", default=argparse.SUPPRESS, choices=FORMATS,
                         help="text (default) or json (here or before the command)")


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    configure(args.log_level, args.log_format)
    try:
        status: int = args.handler(args)
    # Redis errors a command meets outside the broker (chaos, a redis-py internal) are
    # reported like the broker's own: one line, no traceback.
    except (TaskqError, redis.RedisError, RedisClusterException) as e:
        # One line, cleaned: a damaged record's value is quoted in its error.
        print(f"taskq {args.command}: {one_line(error_line(e, args))}", file=sys.stderr)
        refused = isinstance(e, ConfigError | InvalidTaskError | UnsafeRedisError)
        return REFUSED_STATUS if refused and getattr(args, "pool_copy", False) else 2
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # The reader of the output has gone (`taskq dlq | head`): stop without a
        # traceback, and point stdout at nothing so the exit's own flush cannot fail.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141  # as a command killed by SIGPIPE, which is what a shell expects
    return status


def run() -> None:
    escape_what_output_cannot_hold()
    sys.exit(main())


def escape_what_output_cannot_hold() -> None:
    """An output whose encoding cannot hold a character of a task's name or error
    (PYTHONIOENCODING=ascii, a POSIX locale without UTF-8 mode) gets it escaped, as the
    log does, rather than a traceback part way through a listing."""
    for stream in (sys.stdout, sys.stderr):
        if isinstance(stream, io.TextIOWrapper):
            stream.reconfigure(errors="backslashreplace")
