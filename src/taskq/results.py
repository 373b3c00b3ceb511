"""The typed values broker operations take and return."""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields
from datetime import datetime
from enum import IntEnum
from typing import Any, Literal

from taskq.boundary import stored_int, text
from taskq.limits import PRIORITY, Seconds

FailStatus = Literal["retry", "dead", "cancelled", "stale"]
# "gone": the id's record was gone (deleted by hand, or evicted), and it was dropped.
ReapOutcome = Literal["delayed", "dead", "cancelled", "gone"]
Definition = Literal["new", "same", "replaced"]
ForgetOutcome = Literal["forgotten", "fired", "missing"]
TaskState = Literal["pending", "delayed", "running", "completed", "dead", "cancelled"]
# What a cancel did: ended the task now; asked its worker to stop it; nothing (it had
# ended, or its cancel was asked for already); nothing (no such task).
CancelOutcome = Literal["cancelled", "requested", "unchanged", "unknown"]
CANCEL_OUTCOMES: tuple[CancelOutcome, ...] = ("cancelled", "requested", "unchanged", "unknown")
# The states a task ends in: its record stays until its TTL, and nothing moves it again
# (a dead one only by a retry or cancel from the DLQ).
ENDED = frozenset({"completed", "dead", "cancelled"})

SIMULATE_TASK = "taskq.simulate"

# The most of one field's repr a record's repr shows: a payload or result may be
# megabytes, and a repr lands in logs, tracebacks and a debugger's variables pane.
REPR_FIELD_CHARS = 200


def brief_repr(value: Any) -> str:
    """The dataclass repr of `value`, each field's repr cut to REPR_FIELD_CHARS with
    its full length said."""
    parts = []
    for f in fields(value):
        if not f.repr:
            continue
        text = repr(getattr(value, f.name))
        if len(text) > REPR_FIELD_CHARS:
            text = f"{text[:REPR_FIELD_CHARS]}...<{len(text):,} characters>"
        parts.append(f"{f.name}={text}")
    return f"{type(value).__name__}({', '.join(parts)})"


@dataclass(frozen=True)
class NewTask:
    """One task for `Broker.enqueue_many`, with the same meaning as `enqueue`'s arguments."""

    task_id: str
    delay: Seconds = 0.0
    max_retries: int = 3
    payload: dict[str, Any] | None = None
    idempotency_key: str | None = None
    idempotency_ttl: int | None = None
    name: str = SIMULATE_TASK
    run_at: datetime | None = None
    result_ttl: Seconds | None = None
    priority: int = PRIORITY.default  # 0 (lowest) to 9 (highest)
    # The value a keyed concurrency limit is kept per (e.g. the account); None: none.
    limit_key: str | None = None

    __repr__ = brief_repr


@dataclass(frozen=True)
class Enqueued:
    """What enqueue did: `created` is False when the id or key already named a task."""

    task_id: str
    created: bool


@dataclass(frozen=True)
class Failure:
    """How an attempt failed, as `fail` stores it: the exception's type (module.Name),
    its message and its whole traceback, and a one-line summary kept as last_error."""

    error_type: str
    message: str
    traceback: str = ""
    summary: str = ""

    @property
    def line(self) -> str:
        """The summary, or `Type: message` (the message alone, with no type) when none
        was made."""
        if self.summary:
            return self.summary
        return f"{self.error_type}: {self.message}" if self.error_type else self.message


class Renewal(IntEnum):
    """How Redis answered a lease renewal. True while the lease is held, so it reads as
    the plain held-or-lost answer where the cancel does not matter."""

    LOST = 0
    """The token is stale (the lease expired, was reaped or taken over): nothing changed."""
    HELD = 1
    """Extended."""
    CANCEL = 2
    """Extended, and the task's cancel was requested: its holder is to stop the run and
    settle it with `Broker.ack_cancelled`."""


class Released(IntEnum):
    """How Redis answered a release. True when the lease was the caller's, so it reads
    as the plain released-or-stale answer where the cancel does not matter."""

    STALE = 0
    """The token is stale: nothing changed."""
    RELEASED = 1
    """Back at the front of ready, its retries untouched."""
    CANCELLED = 2
    """Its cancel had been requested: it ended cancelled instead."""


@dataclass(frozen=True)
class Cancellation:
    """What cancelling one task did, and the state it was in when the cancel came ('' when
    it has no record)."""

    task_id: str
    outcome: CancelOutcome
    state: str

    @classmethod
    def from_reply(cls, task_id: str, reply: list[Any]) -> Cancellation:
        outcome, state = text(reply[0]), text(reply[1])
        for known in CANCEL_OUTCOMES:
            if outcome == known:
                return cls(task_id, known, state)
        raise ValueError(f"cancel returned an unknown outcome {outcome!r}")


@dataclass(frozen=True)
class Watched:
    """A task as a waiting producer reads it (the watch script's reply)."""

    state: str
    result: str | None
    error_type: str
    error_message: str
    traceback: str
    last_error: str
    fencing_token: int
    retries: int
    # The workflow step whose failure ended this one, still waiting, cancelled.
    upstream: str = ""

    @property
    def ended(self) -> bool:
        return self.state in ENDED

    @classmethod
    def from_reply(cls, reply: list[Any]) -> Watched | None:
        if not reply:
            return None
        fields = [None if v is None else text(v) for v in reply]
        return cls(
            state=fields[0] or "",
            result=fields[1],
            error_type=fields[2] or "",
            error_message=fields[3] or "",
            traceback=fields[4] or "",
            last_error=fields[5] or "",
            fencing_token=stored_int(fields[6]),
            retries=stored_int(fields[7]),
            upstream=(fields[8] if len(fields) > 8 else None) or "",
        )


@dataclass(frozen=True)
class Fired:
    """What firing a schedule did: how its stored definition compared with the one
    fired (`new`: first seen, it starts at the server's now and fires nothing), the
    last tick it has handled, the server's clock, and the tasks made now (none when
    another worker made them first)."""

    definition: Definition
    last_tick_ms: int
    server_ms: int
    task_ids: tuple[str, ...]

    @classmethod
    def from_reply(cls, reply: list[Any]) -> Fired:
        values = [text(v) for v in reply]
        definition: Definition = ("new" if values[0] == "new" else
                                  "replaced" if values[0] == "replaced" else "same")
        return cls(definition, int(values[1]), int(values[2]), tuple(values[3:]))


@dataclass(frozen=True)
class Forgotten:
    """What forgetting a schedule did: `forgotten` (its record is gone), `fired` (kept:
    its last tick was not the one the caller named, a worker fired it since) or
    `missing` (no record). `last_tick` is the stored last tick as text ('' when
    missing): a whole number of ms, unless it was written by hand."""

    outcome: ForgetOutcome
    last_tick: str

    @classmethod
    def from_reply(cls, reply: list[Any]) -> Forgotten:
        outcome, last = (text(v) for v in reply)
        forgotten: ForgetOutcome = ("forgotten" if outcome == "forgotten" else
                                    "fired" if outcome == "fired" else "missing")
        return cls(forgotten, last)


@dataclass(frozen=True)
class Lifted:
    """What lifting rate limits did: how many of the names had a limit (or a line of
    waiting tasks) now forgotten whole, and how many tasks still wait in their lines
    for another call (0: done)."""

    lifted: int
    left: int

    @classmethod
    def from_reply(cls, reply: list[Any]) -> Lifted:
        lifted, left = (int(v) for v in reply)
        return cls(lifted, left)


@dataclass(frozen=True)
class FailResult:
    """What fail did: a retry after `delay` seconds, a move to the DLQ, or nothing (stale)."""

    status: FailStatus
    retries: int
    delay: float


@dataclass(frozen=True)
class LeasedTask:
    """A task leased to a worker: what it needs to run it and to prove it holds it."""

    task_id: str
    token: int
    name: str
    payload: str
    retries: int
    max_retries: int

    __repr__ = brief_repr

    @property
    def attempt(self) -> int:
        return self.retries + 1


@dataclass(frozen=True)
class HeldLimit:
    """A rate limit a lease applied as stored, not as its caller declared it: a worker
    of another deploy that applied it as its own still runs (see lua/lease.lua's
    live_holder), so every worker applies one rate until that deploy's workers stop."""

    name: str  # the task name, or QUEUE_LIMIT for the queue's own
    interval_us: int
    burst: int
    holder: str  # the id of a live worker that applied it as its own

    __repr__ = brief_repr


@dataclass(frozen=True)
class LeaseBatch:
    """Tasks leased by one call, and how long until something may become due."""

    tasks: list[LeasedTask]
    wait_seconds: float | None
    held: tuple[HeldLimit, ...] = ()

    @classmethod
    def from_reply(cls, reply: list[Any]) -> LeaseBatch:
        """The lease script's reply: n, wait_ms, six fields per leased task, then four
        per limit applied as another worker holds it."""
        n, wait_ms = int(reply[0]), int(reply[1])
        tasks = [
            LeasedTask(
                task_id=text(reply[i]),
                token=int(reply[i + 1]),
                name=text(reply[i + 2]),
                payload=text(reply[i + 3]),
                retries=stored_int(reply[i + 4]),
                max_retries=stored_int(reply[i + 5]),
            )
            for i in range(2, 2 + 6 * n, 6)
        ]
        held = tuple(
            HeldLimit(name=text(reply[i]), interval_us=int(reply[i + 1]),
                      burst=int(reply[i + 2]), holder=text(reply[i + 3]))
            for i in range(2 + 6 * n, len(reply) - 3, 4)
        )
        return cls(tasks, None if wait_ms < 0 else wait_ms / 1000, held)


@dataclass(frozen=True)
class QueueCounts:
    """How many task ids each of a queue's structures holds."""

    ready: int
    leased: int
    delayed: int
    dead: int


def stored_priority(value: str | None) -> int:
    """A record's `priority` as the scripts take it (_common.lua's ready_list): a whole
    number from 0 to 9, else (none, or written by hand: 12, 2.5, nan) the default,
    which is the list the task waits on and is leased from."""
    try:
        number = float(value) if value is not None else math.nan
    except ValueError:
        return PRIORITY.default
    if number.is_integer() and PRIORITY.low <= number <= PRIORITY.high:
        return int(number)
    return PRIORITY.default


@dataclass(frozen=True)
class TaskRecord:
    """A task's stored record; times are Redis server milliseconds, 0 when unset."""

    task_id: str
    state: str
    name: str
    payload: str
    retries: int
    max_retries: int
    fencing_token: int
    worker: str
    idempotency_key: str
    last_error: str
    created_at: int
    run_at: int
    leased_at: int
    heartbeat_at: int
    completed_at: int
    dead_at: int
    # The handler's return value as JSON text; None when no result is kept.
    result: str | None = None
    # The last failed attempt: the exception's type, message and whole traceback.
    error_type: str = ""
    error_message: str = ""
    traceback: str = ""
    # Milliseconds the completed record is kept, when the task set its own; 0 otherwise.
    result_ttl: int = 0
    # When it ended cancelled, and when its cancel was asked for while it ran (0: never).
    cancelled_at: int = 0
    cancel_requested_at: int = 0
    # The state a cancel that ended it at once found it in ('' when its run ended it).
    cancelled_from: str = ""
    # Fixed at enqueue: 0 (lowest) to 9 (highest); the record holds it unless it is the
    # default.
    priority: int = PRIORITY.default
    # The value its concurrency limit is kept per ('' = the name's own slots).
    limit_key: str = ""
    # How far its latest run said it has got (0 to 1) and what it was doing; None and
    # '' when that run said nothing (progress an earlier run said is not shown).
    progress: float | None = None
    progress_message: str = ""
    extra: dict[str, str] = field(default_factory=dict)

    __repr__ = brief_repr

    @classmethod
    def from_hash(cls, task_id: str, raw: dict[str, str]) -> TaskRecord:
        def number(key: str) -> int:
            return stored_int(raw.get(key))

        known = {
            "state", "name", "payload", "retries", "max_retries", "fencing_token", "worker",
            "idempotency_key", "last_error", "created_at", "run_at", "leased_at",
            "heartbeat_at", "completed_at", "dead_at", "result", "error_type",
            "error_message", "traceback", "result_ttl", "waiters", "cancelled_at",
            "cancel_requested", "cancelled_from", "cancel_ttl", "priority", "limit_key", "progress",
            "progress_message", "progress_token", "progress_at",
        }  # fmt: skip
        current = bool(raw.get("progress")) and raw.get("progress_token") == raw.get(
            "fencing_token")
        return cls(
            task_id=task_id,
            state=raw.get("state", ""),
            name=raw.get("name", ""),
            payload=raw.get("payload", ""),
            retries=number("retries"),
            max_retries=number("max_retries"),
            fencing_token=number("fencing_token"),
            worker=raw.get("worker", ""),
            idempotency_key=raw.get("idempotency_key", ""),
            last_error=raw.get("last_error", ""),
            created_at=number("created_at"),
            run_at=number("run_at"),
            leased_at=number("leased_at"),
            heartbeat_at=number("heartbeat_at"),
            completed_at=number("completed_at"),
            dead_at=number("dead_at"),
            result=raw.get("result"),
            error_type=raw.get("error_type", ""),
            error_message=raw.get("error_message", ""),
            traceback=raw.get("traceback", ""),
            result_ttl=number("result_ttl"),
            cancelled_at=number("cancelled_at"),
            cancel_requested_at=number("cancel_requested"),
            cancelled_from=raw.get("cancelled_from", ""),
            priority=stored_priority(raw.get("priority")),
            limit_key=raw.get("limit_key", ""),
            progress=number("progress") / 1000 if current else None,
            progress_message=raw.get("progress_message", "") if current else "",
            extra={k: v for k, v in raw.items() if k not in known},
        )
