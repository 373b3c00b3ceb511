"""`taskq history`: the queue's recently ended tasks, searchable by id prefix and name."""

from __future__ import annotations

import argparse

from taskq.cli.common import add_queue_argument, queue_brokers, settings_from
from taskq.recent import ENDS, RECENT_LIMIT, check_search, recent
from taskq.terminal import show_table, utc_time

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
    queue = settings_from(args).queue
    # Before Redis is asked anything: a note that the queue is unknown would come first.
    check_search(args.state or ENDS, args.id, args.name)
    RECENT_LIMIT.check(args.limit)
    brokers = queue_brokers(args)
    founds = [recent(broker, states=args.state or ENDS, id_prefix=args.id, name=args.name,
                     limit=args.limit) for broker in brokers]
    # A sharded queue's shards each keep their own log: their tasks merged, newest first.
    tasks = sorted((t for found in founds for t in found.tasks), key=lambda t: t.ended_at,
                   reverse=True)[:args.limit]
    scanned = sum(found.scanned for found in founds)
    logs = "every shard's whole log" if len(brokers) > 1 else "the whole log"
    where = f" ({logs})" if all(found.complete for found in founds) else \
        f" (the newest {scanned} log entries)"
    if not tasks:
        print(f"no ended task found on queue {queue!r}{where}")
        return 0
    title = f"{len(tasks)} ended task(s) on queue {queue!r}, newest first{where}:"
    plain, rows = [title], []
    for task in tasks:
        when = utc_time(task.ended_at)
        error = task.last_error if task.state != "completed" else ""
        plain.append(f"  {when}  {task.state:<9}  {task.task_id}  "
                     f"{task.name}  retries {task.retries}" + (f"  {error}" if error else ""))
        rows.append([when, task.state, task.task_id, task.name, str(task.retries), error])
    show_table(title, ["ended", "how", "task id", "name", "retries", "last error"], rows,
               plain)
    return 0
