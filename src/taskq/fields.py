"""A new task's values, checked one by one before they reach the enqueue script."""

from __future__ import annotations

from typing import Any

from taskq.boundary import to_ms
from taskq.codec import encode_payload
from taskq.errors import InvalidTaskError
from taskq.keys import check_idempotency_key, check_task_id

MAX_RETRIES_LIMIT = 1000
DEFAULT_IDEMPOTENCY_TTL = 86_400
MAX_IDEMPOTENCY_TTL = 10 * 365 * 86_400


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
    if not isinstance(name, str) or not 0 < len(name) <= 200:
        raise InvalidTaskError(f"task name must be 1-200 characters, not {name!r}")
    if isinstance(max_retries, bool) or not isinstance(max_retries, int):
        raise InvalidTaskError(f"max_retries must be an integer, not {max_retries!r}")
    if not 0 <= max_retries <= MAX_RETRIES_LIMIT:
        raise InvalidTaskError(
            f"max_retries must be between 0 and {MAX_RETRIES_LIMIT}, not {max_retries}"
        )
    key = "" if idempotency_key is None else check_idempotency_key(idempotency_key)
    ttl = DEFAULT_IDEMPOTENCY_TTL if idempotency_ttl is None else idempotency_ttl
    if isinstance(ttl, bool) or not isinstance(ttl, int) or not 1 <= ttl <= MAX_IDEMPOTENCY_TTL:
        raise InvalidTaskError(
            f"idempotency_ttl must be an integer from 1 to {MAX_IDEMPOTENCY_TTL} seconds, "
            f"not {ttl!r}"
        )
    return [task_id, name, encode_payload(payload, max_payload_bytes), to_ms(delay, "delay"),
            max_retries, key, ttl]
