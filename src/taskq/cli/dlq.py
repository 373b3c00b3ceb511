"""`taskq dlq`: list dead tasks with their errors, and send them back to ready."""

from __future__ import annotations

import argparse
import datetime
import sys

from taskq.broker import Broker
from taskq.bulk import BULK_LIMIT, Bulk, cancel_all, retry_all
from taskq.cli.common import (
    add_queue_after_action,
    add_queue_argument,
    add_task_ids,
    settings_from,
)
from taskq.terminal import one_line

HELP = "list the dead letter queue, or retry or cancel dead tasks"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_queue_argument(parser)
    actions = parser.add_subparsers(dest="action", metavar="ACTION")
    retry = actions.add_parser("retry", help="move dead tasks back to ready, retries reset")
    add_task_ids(retry, "*")
    retry.add_argument("--all", action="store_true", help="retry every dead task (asks "
                       "first on a terminal)")
    retry.add_argument("--yes", "-y", action="store_true", help="do not ask")
    add_queue_after_action(retry)
    cancel = actions.add_parser("cancel", help="take dead tasks out of the DLQ for good: "
                                "they end cancelled, their records kept like completed ones")
    add_task_ids(cancel, "*")
    cancel.add_argument("--all", action="store_true", help="cancel every dead task (asks "
                        "first on a terminal)")
    cancel.add_argument("--yes", "-y", action="store_true", help="do not ask")
    add_queue_after_action(cancel)


def main(args: argparse.Namespace) -> int:
    broker = Broker.from_settings(settings_from(args))
    if args.action == "retry":
        return retry(broker, args.task_ids, args.all, args.yes)
    if args.action == "cancel":
        return cancel(broker, args.task_ids, args.all, args.yes)
    dead = broker.dead()
    if not dead:
        print(f"the DLQ of queue {broker.queue!r} is empty")
        return 0
    print(f"{len(dead)} dead task(s) on queue {broker.queue!r}, most recent first:")
    for task_id in dead:
        record = broker.task(task_id)
        if record is None:
            print(f"  {task_id}  (record missing)")
            continue
        when = datetime.datetime.fromtimestamp(record.dead_at / 1000, datetime.UTC)
        print(one_line(f"  {task_id}  {record.name}  retries={record.retries}  "
                       f"dead_at={when:%Y-%m-%d %H:%M:%S}Z"))
        print(f"      {one_line(record.last_error)}")
    return 0


def retry(broker: Broker, task_ids: list[str], everything: bool, yes: bool = False) -> int:
    if everything == bool(task_ids):
        print("taskq dlq retry: give task ids or --all (not both)")
        return 2
    if everything:
        if not confirmed(broker, "send back to ready", yes):
            return 1
        done = retry_all(broker)
        print(f"moved {len(done.done)} task(s) back to ready" + left_note(done))
        return 0
    missing = [task_id for task_id in task_ids if not broker.retry_dead(task_id)]
    print(f"moved {len(task_ids) - len(missing)} task(s) back to ready")
    for task_id in missing:
        print(f"  {task_id}: not in the DLQ")
    return 1 if missing else 0


def cancel(broker: Broker, task_ids: list[str], everything: bool, yes: bool = False) -> int:
    if everything == bool(task_ids):
        print("taskq dlq cancel: give task ids or --all (not both)")
        return 2
    if everything:
        if not confirmed(broker, "take out of the DLQ for good (they end cancelled)", yes):
            return 1
        done = cancel_all(broker)
        print(f"cancelled {len(done.done)} dead task(s)" + left_note(done))
        return 0
    # Only dead tasks: an id given here that runs or waits is not this command's to end.
    missing = [task_id for task_id in task_ids
               if broker.cancel(task_id, only="dead").outcome != "cancelled"]
    print(f"cancelled {len(task_ids) - len(missing)} dead task(s)")
    for task_id in missing:
        print(f"  {task_id}: not in the DLQ")
    return 1 if missing else 0


def confirmed(broker: Broker, what: str, yes: bool) -> bool:
    """Whether to act on every dead task: asked on a terminal unless --yes; a script
    (no terminal) is taken to mean it."""
    if yes or not sys.stdin.isatty():
        return True
    count = broker.counts().dead
    answer = input(f"{what}: all {count} dead task(s) of queue {broker.queue!r}? [y/N] ")
    if answer.strip().lower() in ("y", "yes"):
        return True
    print("nothing done")
    return False


def left_note(done: Bulk) -> str:
    gone = f"; {len(done.missed)} had left the DLQ meanwhile" if done.missed else ""
    more = f"; {done.left} still dead (run it again for the next {BULK_LIMIT.default})" \
        if done.left else ""
    return gone + more
