"""`taskq cancel ID...`: cancel tasks, saying what became of each."""

from __future__ import annotations

import argparse

from taskq.cli.common import (
    add_queue_argument,
    add_task_ids,
    queue_brokers,
    settings_from,
    task_router,
)
from taskq.results import Cancellation
from taskq.terminal import one_line

HELP = "cancel tasks: a waiting or dead one ends now, a running one when its worker stops it"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_task_ids(parser, "+", "the tasks' ids")
    add_queue_argument(parser)


def main(args: argparse.Namespace) -> int:
    """One line per task as each is cancelled, so that a failure part way (Redis gone,
    Ctrl-C) leaves the ones done said; 1 if any task was unknown, else 0."""
    route = task_router(queue_brokers(args))
    queue = settings_from(args).queue
    unknown = False
    for task_id in args.task_ids:
        c = route(task_id).cancel(task_id)
        print(one_line(f"{c.task_id}: {line(c, queue)}"), flush=True)
        unknown = unknown or c.outcome == "unknown"
    return 1 if unknown else 0


def line(c: Cancellation, queue: str) -> str:
    if c.outcome == "cancelled":
        return f"cancelled (it was {c.state})"
    if c.outcome == "requested":
        return ("cancel requested: it is running; its worker stops it at its next heartbeat "
                "and it ends cancelled (or completed, if it finishes first)")
    if c.outcome == "unchanged":
        if c.state == "running":
            return "unchanged: its cancel was requested already"
        if c.state in ("completed", "cancelled"):
            return f"unchanged: it has ended ({c.state})"
        # Its record says it waits, but it is in no list that state has: a record or a
        # list changed by hand, left as it is rather than guessed at.
        return (f"unchanged: its record says {c.state}, but it is not where a {c.state} "
                "task waits (see `taskq task` and its events)")
    return f"unknown: no task with this id on queue {queue!r}"
