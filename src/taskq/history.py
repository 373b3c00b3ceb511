"""One task as people look at it: its record with the result and failure decoded, and
its events still in the queue's log, found by a bounded scan from the log's newest end."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any, Literal

from taskq.boundary import redis_errors, text, whole_text
from taskq.broker import Broker
from taskq.codec import STRICT, read_json
from taskq.errors import ResultError
from taskq.keys import check_task_id
from taskq.limits import HISTORY_SCAN
from taskq.results import Failure, TaskRecord

# Where the scan of the log ended: at the task's `enqueued` event (every event of the
# task since is listed), at the log's oldest entry (older ones were trimmed, or never
# were), or at the bound on entries read (older events of the task may be in the log).
ScanEnd = Literal["enqueued", "log_start", "limit"]

# Entries per XREVRANGE: each reply stays small, and a task's recent events, the ones
# usually wanted, come in the first.
CHUNK = 500
# Fields the scripts write as whole numbers: numbers in JSON, as on the feed.
NUMERIC_FIELDS = frozenset({"token", "retries", "at", "result_bytes", "priority"})
# The indented result a task view gives however deep its nesting (see `indented`).
INDENTED_CHARS = 64 * 1024
# States in which the attempt counted by `retries` has been made (or is running).
ATTEMPTED = frozenset({"running", "completed", "dead"})


@dataclass(frozen=True)
class TaskEvent:
    """One event of a task as its queue's log holds it: the event's dense sequence
    number, its type, the state it left the task in, its Redis time (ms), and whatever
    else its script wrote (token, worker, retries, error, error_type, at, name, priority,
    result, result_bytes)."""

    seq: int
    type: str
    state: str
    ts: int
    fields: dict[str, str]

    @classmethod
    def from_entry(cls, entry_id: str, fields: dict[str, str]) -> TaskEvent:
        rest = {k: v for k, v in fields.items() if k not in ("type", "task", "state", "ts")}
        return cls(seq=int(entry_id.partition("-")[0]), type=fields.get("type", ""),
                   state=fields.get("state", ""), ts=_whole(fields.get("ts", "")),
                   fields=rest)

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {"seq": self.seq, "type": self.type, "state": self.state,
                                "ts": self.ts}
        for key, value in self.fields.items():
            number = whole_text(value) if key in NUMERIC_FIELDS else None
            data[key] = value if number is None else number
        return data


@dataclass(frozen=True)
class TaskEvents:
    """A task's events found in its queue's log, oldest first: `read` log entries were
    scanned, newest first, and the scan ended at `end`."""

    task_id: str
    events: list[TaskEvent]
    read: int
    end: ScanEnd

    @property
    def complete(self) -> bool:
        """Whether every event of the task still in the log is listed: False when the
        scan stopped at its bound before the task's `enqueued` event or the log's start."""
        return self.end != "limit"


def task_events(broker: Broker, task_id: str, scan: int = HISTORY_SCAN.default) -> TaskEvents:
    """The task's events still in its queue's log, oldest first, found by reading the
    log newest first in chunks, at most `scan` entries. The scan stops at the task's
    `enqueued` event: anything older belongs to an earlier task that had the same id.

    The chunks are separate reads, but a log entry never changes and ids only grow, so
    the result is every event of the task between the oldest entry read and the head
    at the first read; events appended meanwhile are left for the next look."""
    check_task_id(task_id)
    HISTORY_SCAN.check(scan)
    found: list[TaskEvent] = []
    read, upper = 0, "+"
    end: ScanEnd = "limit"
    with redis_errors("read a task's events"):
        while read < scan and end == "limit":
            want = min(CHUNK, scan - read)
            chunk = broker.client.xrevrange(broker.keys.events, max=upper, min="-",
                                            count=want) or []
            examined, enqueued = _collect(chunk, task_id, found)
            read += examined
            if enqueued:
                end = "enqueued"
            elif len(chunk) < want:
                end = "log_start"
            else:
                upper = "(" + text(chunk[-1][0])
    found.reverse()
    return TaskEvents(task_id, found, read, end)


def _collect(chunk: Sequence[tuple[Any, Mapping[Any, Any] | None]], task_id: str,
             found: list[TaskEvent]) -> tuple[int, bool]:
    """Add the task's events in `chunk` (newest first) to `found`, up to its `enqueued`
    event: how many entries were read, and whether that event was among them."""
    for i, (entry_id, raw) in enumerate(chunk):
        fields = {text(k): text(v) for k, v in (raw or {}).items()}
        if fields.get("task") != task_id:
            continue
        event = TaskEvent.from_entry(text(entry_id), fields)
        found.append(event)
        if event.type == "enqueued":
            return i + 1, True
    return len(chunk), False


@dataclass(frozen=True)
class TaskView:
    """A task as a person reads it: its record, its result decoded from JSON, how its
    last failed attempt failed, and its events. The record and the events are separate
    reads: a change between them shows in the next look."""

    record: TaskRecord
    events: TaskEvents
    # The queue it was read from: for a task of a sharded queue, the shard holding it.
    queue: str = ""

    @property
    def attempts(self) -> int:
        """Attempts made so far, counting the one running."""
        r = self.record
        # Cancelled as it ran (its run was told), or out of the DLQ: its last attempt
        # was made.
        ran = r.state in ATTEMPTED or (r.state == "cancelled" and (
            r.cancel_requested_at > 0 or r.cancelled_from == "dead"))
        return r.retries + (1 if ran else 0)

    @property
    def result_bytes(self) -> int | None:
        """The size of the kept result as JSON text; None when no result is kept."""
        result = self.record.result
        return None if result is None else len(result.encode())

    def result(self) -> Any:
        """The kept result as a Python value (None also when none is kept: see
        `result_bytes`). Raises `ResultError` when the stored text is not JSON, as
        text given to `Broker.ack` directly may not be."""
        return None if self.record.result is None else _strict_json(self.record.result)

    @property
    def failure(self) -> Failure | None:
        """How the last failed attempt failed, or None if no attempt has failed: every
        failed attempt, retried or not, keeps its exception's type, message and
        traceback beside its one-line summary (`last_error`); an expired lease has no
        traceback."""
        r = self.record
        if not (r.error_type or r.error_message or r.last_error):
            return None
        # A described failure's own message, empty or not: last_error, its one-line
        # summary, would name the type again.
        message = r.error_message if r.error_type else r.error_message or r.last_error
        return Failure(r.error_type, message, r.traceback, r.last_error)

    def to_json(self) -> dict[str, Any]:
        """The view as JSON values: the record's fields (times in Redis ms), `result`
        decoded with `result_bytes` (null when none is kept) and `result_json` (it as
        indented JSON text, null when none is kept or it is not JSON), `error` {type,
        message, traceback} (null when no attempt failed), `events` oldest first and
        `events_scan` {read, end, complete} and the `queue` it was read from."""
        body = asdict(self.record)
        for key in ("result", "error_type", "error_message", "traceback"):
            del body[key]
        try:
            result, result_error = self.result(), None
            shown = None if self.record.result is None \
                else indented(result, self.record.result)
        except ResultError as e:
            result, result_error, shown = self.record.result, str(e), None
        failure = self.failure
        body.update(
            attempts=self.attempts,
            result=result,
            result_json=shown,
            result_bytes=self.result_bytes,
            result_error=result_error,
            error=None if failure is None else {
                "type": failure.error_type, "message": failure.message,
                "traceback": failure.traceback},
            events=[event.to_json() for event in self.events.events],
            events_scan={"read": self.events.read, "end": self.events.end,
                         "complete": self.events.complete},
            queue=self.queue,
        )
        return body


def read_task(broker: Broker, task_id: str, scan: int = HISTORY_SCAN.default) -> TaskView | None:
    """The task's view, or None when it has no record (it never existed on this queue,
    or it ended and its record expired)."""
    record = broker.task(task_id)
    if record is None:
        return None
    return TaskView(record, task_events(broker, task_id, scan), broker.queue)


def indented(value: Any, stored: str, ascii: bool = False) -> str:
    """`value` (decoded from `stored`, its JSON text) as indented JSON, for a page to
    show: indented here, where every number is exact (a browser's JSON.parse rounds
    integers past 2^53). Indentation grows with depth on every line, so deep nesting
    can make it many times the stored text: past twice that, or INDENTED_CHARS when
    more, the stored text is given as it is. `ascii` escapes every other character."""
    most = max(INDENTED_CHARS, 2 * len(stored))
    parts, size = [], 0
    for part in json.JSONEncoder(indent=2, ensure_ascii=ascii).iterencode(value):
        size += len(part)
        if size > most:
            return stored
        parts.append(part)
    return "".join(parts)


def _strict_json(value: str) -> Any:
    """`value` decoded, refusing what JSON has no form for (NaN, Infinity), which Python
    reads but a JSON reply could not carry."""
    try:
        return read_json(value, STRICT)
    except (ValueError, RecursionError) as e:
        reason = "it nests too deeply" if isinstance(e, RecursionError) else str(e)
        raise ResultError(f"stored result is not valid JSON: {reason}") from e


def _whole(value: str) -> int:
    return whole_text(value) or 0
