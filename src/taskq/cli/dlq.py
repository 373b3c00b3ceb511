"""`taskq dlq`: list dead tasks with their errors, and send them back to ready."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable

from taskq.boundary import unusable_as_stored
from taskq.broker import Broker
from taskq.bulk import BULK_LIMIT, Bulk, cancel_all, retry_all
from taskq.cli.common import (
    add_queue_after_action,
    add_queue_argument,
    add_task_ids,
    queue_brokers,
    settings_from,
    task_router,
)
from taskq.errors import BrokerError, ConfigError, InvalidTaskError, TaskqError
from taskq.limits import Range
from taskq.limits import shown as shown_value
from taskq.results import TaskRecord
from taskq.terminal import one_line, utc_time

HELP = "list the dead letter queue, or retry or cancel dead tasks"
# How many dead tasks a listing shows: each is a read of its record.
LISTED = Range("limit", 1, 100_000, 100, "tasks", whole=True)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_queue_argument(parser)
    parser.add_argument("--limit", type=int, default=LISTED.default,
                        help=f"most dead tasks listed, the most recent first ({LISTED.low}-"
                             f"{LISTED.high:,}, default {LISTED.default})")
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
    queue = settings_from(args).queue
    brokers = queue_brokers(args)
    if args.action == "retry":
        return retry(brokers, task_router(brokers), args.task_ids, args.all, args.yes)
    if args.action == "cancel":
        return cancel(brokers, task_router(brokers), args.task_ids, args.all, args.yes)
    limit = LISTED.check(args.limit, "--limit", error=ConfigError)
    entries = listed(brokers, limit)
    if not entries:
        print(f"the DLQ of queue {queue!r} is empty")
        return 0
    total = sum(broker.counts().dead for broker in brokers)
    shown = f"the {len(entries)} most recent of {total:,}" if total > len(entries) else \
        f"{len(entries)}"
    shards = f" ({len(brokers)} shards)" if len(brokers) > 1 else ""
    print(f"{shown} dead task(s) on queue {queue!r}{shards}, most recent first:")
    for task_id, record in entries:
        if record == "no id":
            print(f"  {one_line(shown_value(task_id))}  (no task id: an entry taskq did not "
                  "write; LREM it by hand)")
        elif record == "other type":
            print(f"  {task_id}  (its record's key holds another type: something else "
                  "wrote it; the next purge drops the entry)")
        elif record is None:
            print(f"  {task_id}  (record missing: the next purge drops the entry)")
        else:
            assert isinstance(record, TaskRecord)
            print(one_line(f"  {task_id}  {record.name}  retries={record.retries}  "
                           f"dead_at={utc_time(record.dead_at)}"))
            print(f"      {one_line(record.last_error)}")
    return 0


# A DLQ entry and its record: None when it has none, "no id" when it is no task id,
# "other type" when its record's key holds another type.
Entry = tuple[str, TaskRecord | str | None]


def listed(brokers: list[Broker], limit: int) -> list[Entry]:
    """The `limit` most recent DLQ entries of the queue (of all its shards), each with its
    record: None when it has none, "no id" for an entry that is no task id, "other
    type" for one whose record's key something else wrote as another type."""
    entries: list[tuple[int, Entry]] = []
    for broker in brokers:
        for task_id in broker.dead(limit):
            try:
                record = broker.task(task_id)
            except InvalidTaskError:
                entries.append((0, (task_id, "no id")))
                continue
            except BrokerError as e:
                if not unusable_as_stored(e):
                    raise
                entries.append((0, (task_id, "other type")))
                continue
            entries.append((record.dead_at if record else 0, (task_id, record)))
    if len(brokers) > 1:  # one DLQ is in order already; shards' are merged by death
        entries.sort(key=lambda e: e[0], reverse=True)
    return [entry for _, entry in entries[:limit]]


def retry(brokers: list[Broker], route: Callable[[str], Broker], task_ids: list[str],
          everything: bool, yes: bool = False) -> int:
    if everything == bool(task_ids):
        print("taskq dlq retry: give task ids or --all (not both)", file=sys.stderr)
        return 2
    if everything:
        if not confirmed(brokers, "send back to ready", yes):
            return 1
        done = each_shard(brokers, retry_all, "moved {} task(s) back to ready")
        print(f"moved {len(done.done)} task(s) back to ready" + left_note(done, len(brokers)))
        print_workflow_steps(route, done.done)
        return 0
    task_ids = once_each(task_ids)
    missing = [task_id for task_id in task_ids if not route(task_id).retry_dead(task_id)]
    print(f"moved {len(task_ids) - len(missing)} task(s) back to ready")
    for task_id in missing:
        print(f"  {task_id}: not in the DLQ (or its record names no task to run)")
    print_workflow_steps(route, [task_id for task_id in task_ids if task_id not in missing])
    return 1 if missing else 0


def once_each(task_ids: list[str]) -> list[str]:
    """`task_ids` in order, each once: acted on a second time, an id has left the DLQ,
    and was said to be "not in the DLQ" beside the count that took it out."""
    return list(dict.fromkeys(task_ids))


def print_workflow_steps(route: Callable[[str], Broker], revived: list[str]) -> None:
    """Name the workflow of each revived task that is a step of one. A step's death
    settled its workflow's stage (failed it, or handed on its failure), and that is
    never undone: the step runs again on its own, its effects with it, and its result
    reaches no later step, so an operator must not take the retry for a resume."""
    steps: dict[str, list[str]] = {}
    for task_id in revived:
        record = route(task_id).task(task_id)
        flow_id = record.extra.get("flow", "") if record is not None else ""
        if flow_id:
            steps.setdefault(flow_id, []).append(task_id)
    if not steps:
        return
    count = sum(len(ids) for ids in steps.values())
    print(f"  {count} of them {'is a workflow step' if count == 1 else 'are workflow steps'}"
          ": a step's death already failed its workflow or moved it past the step, so each "
          "runs again on its own and no workflow resumes (start one again under a new "
          "flow_id):")
    for flow_id, ids in steps.items():
        print(f"    workflow {flow_id!r}: {', '.join(ids)}")


def cancel(brokers: list[Broker], route: Callable[[str], Broker], task_ids: list[str],
           everything: bool, yes: bool = False) -> int:
    if everything == bool(task_ids):
        print("taskq dlq cancel: give task ids or --all (not both)", file=sys.stderr)
        return 2
    if everything:
        if not confirmed(brokers, "take out of the DLQ for good (they end cancelled)", yes):
            return 1
        done = each_shard(brokers, cancel_all, "cancelled {} dead task(s)")
        print(f"cancelled {len(done.done)} dead task(s)" + left_note(done, len(brokers)))
        return 0
    # Only dead tasks: an id given here that runs or waits is not this command's to end.
    task_ids = once_each(task_ids)
    missing = [task_id for task_id in task_ids
               if route(task_id).cancel(task_id, only="dead").outcome != "cancelled"]
    print(f"cancelled {len(task_ids) - len(missing)} dead task(s)")
    for task_id in missing:
        print(f"  {task_id}: not in the DLQ")
    return 1 if missing else 0


def each_shard(brokers: list[Broker], act: Callable[[Broker, int, list[str]], Bulk],
               said: str) -> Bulk:
    """`act` on every shard's DLQ, its results added up. Cut short (Ctrl-C, Redis gone),
    it says first what was done, `said` with the count: each task was its own step."""
    done: list[str] = []
    try:
        results = [act(broker, BULK_LIMIT.default, done) for broker in brokers]
    except (KeyboardInterrupt, TaskqError):
        print(f"stopped part way: {said.format(len(done))} before it stopped",
              file=sys.stderr, flush=True)
        raise
    return Bulk(done, [i for r in results for i in r.missed],
                sum(r.left for r in results), [i for r in results for i in r.unusable])


def confirmed(brokers: list[Broker], what: str, yes: bool) -> bool:
    """Whether to act on every dead task: asked on a terminal unless --yes; a script
    (no terminal) is taken to mean it."""
    if yes or not sys.stdin.isatty():
        return True
    count = sum(broker.counts().dead for broker in brokers)
    try:
        answer = input(f"{what}: {each_run(len(brokers))} of the {count} dead task(s) of "
                       f"queue {brokers[0].queue!r}? [y/N] ")
    except EOFError:  # Ctrl-D: no answer, so no
        answer = ""
        print()
    if answer.strip().lower() in ("y", "yes"):
        return True
    print("nothing done")
    return False


# How many of a bulk call's unusable entries its line names.
SHOWN = 10


def each_run(shards: int) -> str:
    """How many dead tasks a bulk run takes: BULK_LIMIT from each shard's DLQ."""
    return f"up to {BULK_LIMIT.default}" + (f" from each of {shards} shards" if shards > 1
                                            else "")


def left_note(done: Bulk, shards: int = 1) -> str:
    gone = f"; {len(done.missed)} had left the DLQ meanwhile" if done.missed else ""
    if done.unusable:
        n = len(done.unusable)
        gone += (f"; {n} entr{'y' if n == 1 else 'ies'} no task's (no task id, a record "
                 f"of another type, or none), left as {'it is' if n == 1 else 'they are'}: "
                 f"{', '.join(map(shown_value, done.unusable[:SHOWN]))}"
                 + (f" and {n - SHOWN} more" if n > SHOWN else ""))
    more = f"; {done.left} still dead (run it again for {each_run(shards)})" \
        if done.left else ""
    return gone + more
