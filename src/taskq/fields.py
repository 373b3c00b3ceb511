"""A new task's values, checked one by one before they reach the enqueue script."""

from __future__ import annotations

import time
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, NoReturn

from taskq.codec import encode_payload
from taskq.errors import InvalidTaskError
from taskq.keys import (
    SCHEDULE_TASK_PREFIX,
    check_idempotency_key,
    check_limit_key,
    check_task_id,
    check_task_name,
)
from taskq.limits import (
    IDEMPOTENCY_TTL,
    MAX_RETRIES,
    PRIORITY,
    RUN_AT_MS_MAX,
    TEN_YEARS,
    Seconds,
    shown,
    to_ms,
)
from taskq.results import NewTask


def enqueue_fields(
    task_id: str,
    name: str,
    payload: dict[str, Any] | None,
    delay: Seconds,
    max_retries: int,
    idempotency_key: str | None,
    idempotency_ttl: int | None,
    max_payload_bytes: int,
    run_at: datetime | None = None,
    result_ttl: Seconds | None = None,
    priority: int = PRIORITY.default,
    limit_key: str | None = None,
) -> list[Any]:
    """The eleven ARGV values of one task in enqueue.lua's order, or `InvalidTaskError`
    (`PayloadError` for the payload) saying which value is wrong and why."""
    if check_task_id(task_id).startswith(SCHEDULE_TASK_PREFIX):
        # Such an id would stand for a schedule's tick: fire.lua would take that tick as
        # fired, and its task would never be made.
        raise InvalidTaskError(f"invalid task id {shown(task_id)}: ids starting with "
                               f"{SCHEDULE_TASK_PREFIX!r} are kept for periodic tasks")
    check_task_name(name)
    max_retries = MAX_RETRIES.check(max_retries)
    key = "" if idempotency_key is None else check_idempotency_key(idempotency_key)
    ttl = IDEMPOTENCY_TTL.check(IDEMPOTENCY_TTL.default if idempotency_ttl is None
                                else idempotency_ttl)
    delay_ms = to_ms(delay, "delay")
    run_at_ms = run_at_milliseconds(run_at)
    if run_at_ms and delay_ms:
        raise InvalidTaskError("give a task either delay or run_at, not both")
    result_ttl_ms = "" if result_ttl is None else to_ms(result_ttl, "result_ttl")
    return [task_id, name, encode_payload(payload, max_payload_bytes), delay_ms, run_at_ms,
            max_retries, key, ttl, result_ttl_ms, PRIORITY.check(priority),
            "" if limit_key is None else check_limit_key(limit_key)]


def new_task_fields(tasks: Sequence[NewTask], max_payload_bytes: int,
                    positions: Sequence[int] | None = None,
                    count: int | None = None) -> list[list[Any]]:
    """`enqueue_fields` of each of `tasks`, all checked before any is sent, or
    `InvalidTaskError` naming the first that is wrong: by its index in `tasks`, or, for
    tasks picked from a caller's `count`, by its index there (`positions`)."""
    if isinstance(tasks, str | bytes) or not isinstance(tasks, Sequence):
        raise InvalidTaskError(f"tasks must be a sequence of NewTask, not {shown(tasks)}")
    fields: list[list[Any]] = []
    try:
        for t in tasks:
            if not isinstance(t, NewTask):
                raise InvalidTaskError(f"each task must be a NewTask, not {shown(t)}")
            fields.append(enqueue_fields(t.task_id, t.name, t.payload, t.delay,
                                         t.max_retries, t.idempotency_key, t.idempotency_ttl,
                                         max_payload_bytes, t.run_at, t.result_ttl,
                                         t.priority, t.limit_key))
    except InvalidTaskError as e:
        index, task_id = len(fields), getattr(tasks[len(fields)], "task_id", None)
        if positions is not None:
            index = positions[index]
        raise_at_item(e, index, len(tasks) if count is None else count, task_id)
    return fields


def raise_at_item(error: InvalidTaskError, index: int, count: int | None,
                  task_id: object = None) -> NoReturn:
    """Raise `error` again, of its own class, saying which item of a call's many it is
    about: in a batch of thousands, a message that names no item leaves the caller to
    hunt. One item alone is named by the call."""
    if count == 1:
        raise error
    of = "" if count is None else f" of {count}"
    which = f" (task id {shown(task_id)})" if isinstance(task_id, str) else ""
    raise type(error)(f"item {index}{of}, counted from 0{which}: {error}") from error


EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def run_at_milliseconds(run_at: datetime | None) -> int:
    """`run_at` as Unix milliseconds (0 for None), compared with Redis server time by the
    script; `InvalidTaskError` unless it is an aware datetime before the year 2286."""
    if run_at is None:
        return 0
    if not isinstance(run_at, datetime):
        raise InvalidTaskError(f"run_at must be a datetime, not {shown(run_at)}")
    if run_at.tzinfo is None or run_at.tzinfo.utcoffset(run_at) is None:
        raise InvalidTaskError(
            f"run_at must be timezone-aware, not the naive {run_at.isoformat()}: a naive "
            "time could mean any zone (use datetime.now(timezone.utc) + timedelta(...))"
        )
    # Whole microseconds, rounded up to the millisecond: a task is never due before the
    # time it was given (float seconds would round a microsecond either way).
    ms = -(-((run_at - EPOCH) // timedelta(microseconds=1)) // 1000)
    if not 0 < ms <= RUN_AT_MS_MAX:
        raise InvalidTaskError(f"run_at must be after 1970 and before 2286, not "
                               f"{run_at.isoformat()}")
    # The script measures this against the server's clock too; this host's refuses it
    # before anything is sent, so that calls to several shards or batches are refused
    # whole rather than half enqueued.
    if ms - time.time() * 1000 > TEN_YEARS * 1000:
        raise InvalidTaskError(f"run_at {run_at.isoformat()} is more than ten years ahead; "
                               "a task may wait at most ten years")
    return ms
