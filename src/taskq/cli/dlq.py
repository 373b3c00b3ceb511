"""`taskq dlq`: list dead tasks with their errors, and send them back to ready."""

from __future__ import annotations

import argparse
import datetime

from taskq.broker import Broker
from taskq.cli.common import add_queue_argument, settings_from

HELP = "list the dead letter queue, or retry or cancel dead tasks"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_queue_argument(parser)
    actions = parser.add_subparsers(dest="action", metavar="ACTION")
    retry = actions.add_parser("retry", help="move dead tasks back to ready, retries reset")
    retry.add_argument("task_ids", nargs="*", metavar="ID")
    retry.add_argument("--all", action="store_true", help="retry every dead task")
    add_queue_after_action(retry)
    cancel = actions.add_parser("cancel", help="take dead tasks out of the DLQ for good: "
                                "they end cancelled, their records kept like completed ones")
    cancel.add_argument("task_ids", nargs="*", metavar="ID")
    cancel.add_argument("--all", action="store_true", help="cancel every dead task")
    add_queue_after_action(cancel)


def add_queue_after_action(parser: argparse.ArgumentParser) -> None:
    """`--queue` after the action as well as before it (`taskq dlq retry --queue emails
    --all`); given in both places, the later wins."""
    parser.add_argument("--queue", default=argparse.SUPPRESS,
                        help="queue name (default: TASKQ_QUEUE or 'default')")


def main(args: argparse.Namespace) -> int:
    broker = Broker.from_settings(settings_from(args))
    if args.action == "retry":
        return retry(broker, args.task_ids, args.all)
    if args.action == "cancel":
        return cancel(broker, args.task_ids, args.all)
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
        print(f"  {task_id}  {record.name}  retries={record.retries}  "
              f"dead_at={when:%Y-%m-%d %H:%M:%S}Z")
        print(f"      {record.last_error}")
    return 0


def retry(broker: Broker, task_ids: list[str], everything: bool) -> int:
    if everything == bool(task_ids):
        print("taskq dlq retry: give task ids or --all (not both)")
        return 2
    targets = broker.dead() if everything else task_ids
    missing = [task_id for task_id in targets if not broker.retry_dead(task_id)]
    print(f"moved {len(targets) - len(missing)} task(s) back to ready")
    for task_id in missing:
        print(f"  {task_id}: not in the DLQ")
    return 1 if missing else 0


def cancel(broker: Broker, task_ids: list[str], everything: bool) -> int:
    if everything == bool(task_ids):
        print("taskq dlq cancel: give task ids or --all (not both)")
        return 2
    targets = broker.dead() if everything else task_ids
    # Only dead tasks: an id given here that runs or waits is not this command's to end.
    missing = [task_id for task_id in targets
               if broker.cancel(task_id, only="dead").outcome != "cancelled"]
    print(f"cancelled {len(targets) - len(missing)} dead task(s)")
    for task_id in missing:
        print(f"  {task_id}: not in the DLQ")
    return 1 if missing else 0
