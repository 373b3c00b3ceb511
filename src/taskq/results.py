"""The typed values broker operations take and return."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from taskq.boundary import text

FailStatus = Literal["retry", "dead", "stale"]
ReapOutcome = Literal["delayed", "dead"]
TaskState = Literal["pending", "delayed", "running", "completed", "dead"]

SIMULATE_TASK = "taskq.simulate"


@dataclass(frozen=True)
class NewTask:
    """One task for `Broker.enqueue_many`, with the same meaning as `enqueue`'s arguments."""

    task_id: str
    delay: float = 0.0
    max_retries: int = 3
    payload: dict[str, Any] | None = None
    idempotency_key: str | None = None
    idempotency_ttl: int | None = None
    name: str = SIMULATE_TASK


@dataclass(frozen=True)
class Enqueued:
    """What enqueue did: `created` is False when the id or key already named a task."""

    task_id: str
    created: bool


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

    @property
    def attempt(self) -> int:
        return self.retries + 1


@dataclass(frozen=True)
class LeaseBatch:
    """Tasks leased by one call, and how long until something may become due."""

    tasks: list[LeasedTask]
    wait_seconds: float | None

    @classmethod
    def from_reply(cls, reply: list[Any]) -> LeaseBatch:
        """The lease script's reply: n, wait_ms, then six fields per leased task."""
        n, wait_ms = int(reply[0]), int(reply[1])
        tasks = [
            LeasedTask(
                task_id=text(reply[i]),
                token=int(reply[i + 1]),
                name=text(reply[i + 2]),
                payload=text(reply[i + 3]),
                retries=int(reply[i + 4]),
                max_retries=int(reply[i + 5]),
            )
            for i in range(2, 2 + 6 * n, 6)
        ]
        return cls(tasks, None if wait_ms < 0 else wait_ms / 1000)


@dataclass(frozen=True)
class QueueCounts:
    """How many task ids each of a queue's structures holds."""

    ready: int
    leased: int
    delayed: int
    dead: int


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
    extra: dict[str, str] = field(default_factory=dict)

    @classmethod
    def from_hash(cls, task_id: str, raw: dict[str, str]) -> TaskRecord:
        def number(key: str) -> int:
            return int(float(raw.get(key) or 0))

        known = {
            "state", "name", "payload", "retries", "max_retries", "fencing_token", "worker",
            "idempotency_key", "last_error", "created_at", "run_at", "leased_at",
            "heartbeat_at", "completed_at", "dead_at",
        }  # fmt: skip
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
            extra={k: v for k, v in raw.items() if k not in known},
        )
