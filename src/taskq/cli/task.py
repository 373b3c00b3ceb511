"""`taskq task ID`: one task's record, its result or its failure, and its events."""

from __future__ import annotations

import argparse
import json
import sys

from taskq.boundary import whole_text
from taskq.cli.common import add_queue_argument, queue_brokers, task_router
from taskq.errors import ConfigError, ResultError
from taskq.handle import missing
from taskq.history import TaskEvent, TaskView, indented, read_task
from taskq.keys import check_task_id
from taskq.limits import HISTORY_SCAN, PRIORITY
from taskq.terminal import clean, one_line, utc_time

HELP = "show one task: its record, its result or error with traceback, and its events"

TIMES = (("created", "created_at"), ("run at", "run_at"), ("leased", "leased_at"),
         ("heartbeat", "heartbeat_at"), ("cancel asked", "cancel_requested_at"),
         ("completed", "completed_at"), ("dead", "dead_at"), ("cancelled", "cancelled_at"))
MAX_PAYLOAD_SHOWN = 200
# The most of a result or a traceback shown: a worker keeps a traceback under 8,192
# characters, but a result may be any size, and a hand-written record anything.
BLOCK_CHARS = 20000
BLOCK_LINES = 300
# Event fields that hold a Redis time in ms.
EVENT_TIMES = frozenset({"at"})


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("task_id", metavar="ID", help="the task's id")
    add_queue_argument(parser)
    parser.add_argument("--json", action="store_true",
                        help="print what GET /api/tasks/{id} returns (times in Redis ms)")
    parser.add_argument("--scan", type=int, default=HISTORY_SCAN.default, metavar="N",
                        help="log entries to read, newest first, looking for the task's "
                             f"events (default {HISTORY_SCAN.default}, at most "
                             f"{HISTORY_SCAN.high})")


def main(args: argparse.Namespace) -> int:
    scan = HISTORY_SCAN.check(args.scan, "--scan", ConfigError)
    check_task_id(args.task_id)  # before a note that the queue is unknown
    broker = task_router(queue_brokers(args))(args.task_id)
    view = read_task(broker, args.task_id, scan)
    if view is None:
        print(f"taskq task: {missing(args.task_id, broker.queue)}", file=sys.stderr)
        return 1
    if args.json:
        print(as_json(view))
    else:
        print("\n".join(describe(view, broker.queue)))
    return 0


def as_json(view: TaskView) -> str:
    """The view's JSON, indented unless deep nesting would make that many times its
    size; every character past ASCII escaped, so a bidi control or a C1 escape in a
    value reaches the terminal as `\\u202e`, not as itself."""
    data = view.to_json()
    return indented(data, json.dumps(data, ensure_ascii=True), ascii=True)


def describe(view: TaskView, queue: str) -> list[str]:
    """The view as lines of text: the record, the result or failure, then the events."""
    return [*record_lines(view, queue), *outcome_lines(view), *event_lines(view)]


def record_lines(view: TaskView, queue: str) -> list[str]:
    r = view.record
    rows = [("state", r.state), ("name", r.name), ("priority", priority(r.priority)),
            ("attempts", f"{view.attempts} (retries {r.retries} of {r.max_retries})"),
            ("progress", "" if r.progress is None else
             f"{r.progress:.0%}" + (f" ({r.progress_message})" if r.progress_message
                                    else "")),
            ("token", str(r.fencing_token)), ("worker", r.worker),
            ("idempotency key", r.idempotency_key), ("payload", payload(r.payload))]
    rows += [(label, iso(getattr(r, field))) for label, field in TIMES]
    lines = [f"task {r.task_id} on queue {queue!r}"]
    lines += [f"  {label:<17}{one_line(value)}" for label, value in rows if value]
    return lines


def priority(value: int) -> str:
    """Always shown, the default too: why a task waits is the first thing asked of it."""
    return f"{value} (default)" if value == PRIORITY.default else str(value)


def payload(text: str) -> str:
    """The payload's JSON, or its size when it is too long for one line."""
    if text in ("", "{}"):
        return ""
    if len(text) > MAX_PAYLOAD_SHOWN:
        return f"{len(text.encode())} bytes of JSON (--json shows it)"
    return text


def outcome_lines(view: TaskView) -> list[str]:
    lines = []
    stored = view.record.result
    if stored is not None:
        try:
            shown = indented(view.result(), stored)
        except ResultError as e:
            shown = f"{stored}\n({e})"
        lines += [f"result ({view.result_bytes} bytes):", block(shown)]
    elif view.record.state == "completed":
        lines.append("result: none kept")
    failure = view.failure
    if failure is not None:
        summary = ": ".join(part for part in (failure.error_type, failure.message) if part)
        lines.append(f"error of the last failed attempt: {one_line(summary)}")
        if failure.traceback:
            lines.append(block(failure.traceback.rstrip()))
    return lines


def event_lines(view: TaskView) -> list[str]:
    found = view.events
    if not found.events:
        lines = ["events: none found in the log"]
    else:
        lines = [f"events ({len(found.events)}, oldest first):"]
        lines += [one_line(f"  #{e.seq:<6} {iso(e.ts)}  {e.type:<10} {e.state:<10} "
                           f"{details(e)}".rstrip()) for e in found.events]
    if found.end == "limit":
        lines.append(f"  (the scan stopped after {found.read} log entries, before the task "
                     "was enqueued: older events of it may remain; --scan reads further)")
    elif found.end == "log_start" and found.events:
        lines.append("  (its earlier events were trimmed from the log)")
    return lines


def details(event: TaskEvent) -> str:
    """The event's other fields as `key=value`, each on the one line."""
    parts = []
    for key, value in event.fields.items():
        at = whole_text(value) if key in EVENT_TIMES else None
        shown = value if at is None else iso(at)
        parts.append(f"{key}={clean(shown)}".replace("\n", " "))
    return "  ".join(parts)


def iso(ms: int) -> str:
    """A Redis time in ms as ISO 8601 UTC; '' for 0 (not set)."""
    return utc_time(ms, milliseconds=True) if ms else ""


def block(text: str) -> str:
    """`text` cleaned, each of its lines indented under the line that names it; its
    first BLOCK_LINES lines and BLOCK_CHARS characters, then how much more there is
    (`--json` shows it whole)."""
    visible = "\n".join(text.split("\n", BLOCK_LINES)[:BLOCK_LINES])[:BLOCK_CHARS]
    lines = clean(visible).split("\n")
    if len(visible) < len(text):
        more_lines = text.count("\n") - visible.count("\n")
        lines.append(f"… [{more_lines:,} more lines, {len(text) - len(visible):,} more "
                     "characters] (--json shows it whole)")
    return "\n".join(f"  {line}" for line in lines)

