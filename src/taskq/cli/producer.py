"""`taskq enqueue`: the seed's producer, sending simulated tasks (or any named task)."""

from __future__ import annotations

import argparse
import difflib
import json
import sys
from typing import Any

from taskq.app import App
from taskq.broker import Broker, NewTask
from taskq.cli.common import add_queue_argument, settings_from
from taskq.codec import read_json
from taskq.errors import ConfigError, TaskqError
from taskq.handle import TaskHandle
from taskq.limits import ENQUEUE_COUNT, PRIORITY, shown
from taskq.registry import read_workers
from taskq.results import SIMULATE_TASK
from taskq.terminal import one_line, some_of
from taskq.tools.ledger import MAX_AMOUNT

HELP = "enqueue tasks (by default the built-in simulated task)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("count", nargs="?", type=int, default=5, help="number of tasks (default 5)")
    parser.add_argument("--delay", type=float, default=0.0, help="seconds before they may run")
    parser.add_argument("--max-retries", type=int, default=3,
                        help="retries before a task goes to the DLQ (default 3)")
    parser.add_argument("--charge", type=int, default=None,
                        help="each task charges this amount to account alice in the ledger")
    parser.add_argument("--idempotency-prefix", default=None,
                        help="task i gets the key PREFIX-i, so re-running creates nothing")
    parser.add_argument("--name", default=SIMULATE_TASK, help="task name to run")
    parser.add_argument("--priority", type=int, default=PRIORITY.default,
                        help=f"{PRIORITY.low} (lowest) to {PRIORITY.high} (highest), "
                             f"default {PRIORITY.default}")
    parser.add_argument("--kwargs", default=None,
                        help="JSON object of keyword arguments for each task")
    add_queue_argument(parser)


def _one_value_a_key(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    seen: set[str] = set()
    for key, _ in pairs:
        if key in seen:
            raise ValueError(f"key {key!r} is given twice, and one of its values would be lost")
        seen.add(key)
    return dict(pairs)


# A key given twice would be read as its last value, the other dropped without a word.
ONE_VALUE_A_KEY = json.JSONDecoder(object_pairs_hook=_one_value_a_key)


def build_tasks(args: argparse.Namespace, app: App) -> list[NewTask]:
    ENQUEUE_COUNT.check(args.count, error=ConfigError)
    kwargs: dict[str, object] = {}
    if args.kwargs:
        try:
            kwargs = read_json(args.kwargs, ONE_VALUE_A_KEY)
        except (ValueError, RecursionError) as e:
            why = "it nests too deeply" if isinstance(e, RecursionError) else str(e)
            raise ConfigError(f"--kwargs is not valid JSON: {why}") from e
        if not isinstance(kwargs, dict):
            raise ConfigError("--kwargs must be a JSON object")
    if args.charge is not None:
        kwargs["charge"] = args.charge
    charge = kwargs.get("charge")
    if args.name == SIMULATE_TASK and charge is not None and not (
            isinstance(charge, int) and not isinstance(charge, bool)
            and abs(charge) <= MAX_AMOUNT):
        # The ledger is SQLite, whose integers are 64-bit: a task charging more would
        # fail every attempt and end in the DLQ.
        raise ConfigError(f"the charge must be a whole number of at most {MAX_AMOUNT:,} "
                          f"either way, not {shown(charge)}")
    if args.idempotency_prefix == "":
        # An unset shell variable, most likely: taken as no prefix, each run would
        # enqueue the tasks again.
        raise ConfigError("--idempotency-prefix is empty: give the prefix that names this "
                          "batch, or leave the option out")
    keys = [f"{args.idempotency_prefix}-{i}" if args.idempotency_prefix is not None else None
            for i in range(args.count)]
    return [
        NewTask(
            task_id=app.new_task_id(key),
            delay=args.delay,
            max_retries=args.max_retries,
            payload={"args": [], "kwargs": kwargs},
            idempotency_key=key,
            idempotency_ttl=app.settings.idempotency_ttl_seconds,
            name=args.name,
            priority=args.priority,
        )
        for key in keys
    ]


def unknown_name(app: App, name: str) -> str | None:
    """Why `name` looks like a typo, or None: the live workers of the queue (of its
    first shard, on a sharded one) that registered what they run and none runs it. A
    task no worker knows goes to the DLQ as soon as one leases it."""
    producer = app.producer  # its connection, already open from the enqueue
    _, live = read_workers(producer if isinstance(producer, Broker) else producer.brokers[0])
    if not live:
        return None
    known = sorted({task for worker in live for task in worker.tasks})
    if name in known:
        return None
    # A name given without its module (`add` for `tasks.add`) is too short for difflib.
    close = ([task for task in known if task.rsplit(".", 1)[-1] == name]
             or difflib.get_close_matches(name, known, n=1))
    listed = some_of(known, none="nothing")
    return one_line(f"no live worker of queue {app.queue!r} runs a task named {name!r}"
                    + (f" (did you mean {close[0]!r}?)" if close else "")
                    + f"; they run: {listed}. A worker that does not know it sends it to "
                    "the DLQ when it leases it.")


# Tasks sent per enqueue_many call (a batch of each shard): what a run cut short can say
# it had sent, within one batch.
CHUNK = 1000


def main(args: argparse.Namespace) -> int:
    app = App(settings=settings_from(args))
    tasks = build_tasks(args, app)
    results: list[TaskHandle] = []
    chunk = CHUNK * (1 if app.layout is None else app.layout.count)
    try:
        for start in range(0, len(tasks), chunk):
            results += app.producer.enqueue_many(tasks[start:start + chunk], CHUNK)
    except (KeyboardInterrupt, TaskqError) as e:
        if not results and not isinstance(e, KeyboardInterrupt):
            raise  # nothing sent, or the first batch's own error says what may have been
        under_way = min(chunk, len(tasks) - len(results))
        again = ("sending the same --idempotency-prefix again sends only the rest"
                 if args.idempotency_prefix else "sending them again makes new tasks: give "
                 "--idempotency-prefix to resend safely")
        print(f"taskq enqueue: stopped after {len(results)} of {len(tasks)} task(s) were "
              f"sent (and maybe some of the {under_way:,} under way); {again}",
              file=sys.stderr)
        raise
    created = sum(r.created for r in results)
    duplicates = len(results) - created
    note = f", {duplicates} duplicate(s) created nothing" if duplicates else ""
    where = "" if app.layout is None else f" ({app.layout.count} shards)"
    print(f"enqueued {created} new task(s) on queue {app.queue!r}{where}{note}")
    if args.count:
        warning = unknown_name(app, args.name)
        if warning:
            print(f"taskq enqueue: warning: {warning}", file=sys.stderr)
    return 0
