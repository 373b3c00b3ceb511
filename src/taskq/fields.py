"""A new task's values, checked one by one before they reach the enqueue script."""

from __future__ import annotations

from typing import Any

from taskq.codec import encode_payload
from taskq.keys import check_idempotency_key, check_task_id, check_task_name
from taskq.limits import IDEMPOTENCY_TTL, MAX_RETRIES, to_ms


def enqueue_fields(
    task_id: str,
    name: str,
    payload: dict[str, Any] | None,
    delay: float,
    max_retries: int,
    idempotency_key: str | None,
    idempotency_ttl: int | None,
    max_payload_bytes: int,
) -> list[Any]:
    """The seven ARGV values of one task in enqueue.lua's order, or `InvalidTaskError`
    (`PayloadError` for the payload) saying which value is wrong and why."""
    check_task_id(task_id)
    check_task_name(name)
    MAX_RETRIES.check(max_retries)
    key = "" if idempotency_key is None else check_idempotency_key(idempotency_key)
    ttl = IDEMPOTENCY_TTL.check(IDEMPOTENCY_TTL.default if idempotency_ttl is None
                                else idempotency_ttl)
    return [task_id, name, encode_payload(payload, max_payload_bytes), to_ms(delay, "delay"),
            max_retries, key, ttl]
