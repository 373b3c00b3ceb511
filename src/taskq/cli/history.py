"""`taskq history`: the queue's recently ended tasks, searchable by id prefix and name."""

from __future__ import annotations

import argparse
import datetime

from taskq.cli.common import add_queue_argument, broker_from
from taskq.recent import ENDS, RECENT_LIMIT, recent
from taskq.terminal import show_table

HELP = "list recently ended tasks (completed, dead, cancelled), newest first; search them"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_queue_argument(parser)
    parser.add_argument("--state", action="append", choices=ENDS, default=None,
                        help="only tasks that ended so (repeatable; default: every end)")
    parser.add_argument("--id", default="", metavar="PREFIX",
                        help="only task ids that start with PREFIX")
    parser.add_argument("--name", default="", help="only task names that contain NAME")
    parser.add_argument("--limit", type=int, default=RECENT_LIMIT.default,
                        help=f"most tasks listed ({RECENT_LIMIT.low}-{RECENT_LIMIT.high}, "
                             f"default {RECENT_LIMIT.default})")


def main(args: argparse.Namespace) -> int:
    broker = broker_from(args)
    found = recent(broker, states=args.state or ENDS, id_prefix=args.id, name=args.name,
                   limit=args.limit)
    where = " (the whole log)" if found.complete else \
        f" (the newest {found.scanned} log entries)"
    if not found.tasks:
        print(f"no ended task found on queue {broker.queue!r}{where}")
        return 0
    title = f"{len(found.tasks)} ended task(s) on queue {broker.queue!r}, newest first{where}:"
    plain, rows = [title], []
    for task in found.tasks:
        when = datetime.datetime.fromtimestamp(task.ended_at / 1000, datetime.UTC)
        error = task.last_error if task.state != "completed" else ""
        plain.append(f"  {when:%Y-%m-%d %H:%M:%S}Z  {task.state:<9}  {task.task_id}  "
                     f"{task.name}  retries {task.retries}" + (f"  {error}" if error else ""))
        rows.append([f"{when:%Y-%m-%d %H:%M:%S}Z", task.state, task.task_id, task.name,
                     str(task.retries), error])
    show_table(title, ["ended", "how", "task id", "name", "retries", "last error"], rows,
               plain)
    return 0
