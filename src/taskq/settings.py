"""The one place taskq reads its configuration from the environment."""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields
from typing import Literal, TypeVar

from taskq.errors import ConfigError
from taskq.keys import QUEUE_NAME

LedgerGuard = Literal["none", "dedupe", "fence"]
LEDGER_GUARDS: tuple[LedgerGuard, ...] = ("none", "dedupe", "fence")

# More copies than cores only adds contention; the cap catches a typo like 1000.
MAX_WORKER_PROCESSES = 256

T = TypeVar("T")


@dataclass(frozen=True)
class Settings:
    """Every tunable of taskq; build it with `Settings.from_env()` and pass it down."""

    redis_url: str = "redis://localhost:6379/0"
    redis_timeout_seconds: float = 5.0
    queue: str = "default"
    ledger_path: str = "ledger.db"
    ledger_guard: LedgerGuard = "dedupe"
    lease_seconds: float = 10.0
    work_seconds: float = 3.0
    after_effect_seconds: float = 0.0
    fail_rate: float = 0.0
    backoff_base_seconds: float = 1.0
    backoff_max_seconds: float = 60.0
    poll_seconds: float = 0.5
    shutdown_grace_seconds: float = 10.0
    concurrency: int = 1
    worker_processes: int = 1
    events_retention: int = 100_000
    max_payload_bytes: int = 1_048_576
    idempotency_ttl_seconds: int = 86_400
    completed_ttl_seconds: float = 86_400.0
    dead_ttl_seconds: float = 7 * 86_400.0
    redis_server: str = ""
    api_token: str = ""
    feed_heartbeat_seconds: float = 15.0
    feed_send_timeout_seconds: float = 10.0
    redis_cluster: bool = False
    redis_url_given: bool = False

    def __post_init__(self) -> None:
        _check(
            self.redis_timeout_seconds > 0,
            "REDIS_TIMEOUT_SECONDS",
            self.redis_timeout_seconds,
            "must be > 0",
        )
        _check(
            QUEUE_NAME.fullmatch(self.queue) is not None,
            "TASKQ_QUEUE",
            self.queue,
            "is not a queue name: use 1-100 letters, digits, '_', '.' or '-'",
        )
        _check(self.lease_seconds > 0, "LEASE_SECONDS", self.lease_seconds, "must be > 0")
        _check(0.0 <= self.fail_rate <= 1.0, "FAIL_RATE", self.fail_rate, "must be in [0, 1]")
        _check(self.work_seconds >= 0, "WORK_SECONDS", self.work_seconds, "must be >= 0")
        _check(
            self.after_effect_seconds >= 0,
            "AFTER_EFFECT_SECONDS",
            self.after_effect_seconds,
            "must be >= 0",
        )
        _check(
            self.backoff_base_seconds >= 0,
            "BACKOFF_BASE_SECONDS",
            self.backoff_base_seconds,
            "must be >= 0",
        )
        _check(
            self.backoff_max_seconds >= self.backoff_base_seconds,
            "BACKOFF_MAX_SECONDS",
            self.backoff_max_seconds,
            f"must be >= BACKOFF_BASE_SECONDS ({self.backoff_base_seconds!r})",
        )
        _check(self.poll_seconds > 0, "POLL_SECONDS", self.poll_seconds, "must be > 0")
        _check(
            self.shutdown_grace_seconds >= 0,
            "SHUTDOWN_GRACE_SECONDS",
            self.shutdown_grace_seconds,
            "must be >= 0",
        )
        _check(self.concurrency >= 1, "TASKQ_CONCURRENCY", self.concurrency, "must be >= 1")
        _check(1 <= self.worker_processes <= MAX_WORKER_PROCESSES, "TASKQ_WORKER_PROCESSES",
               self.worker_processes, f"must be from 1 to {MAX_WORKER_PROCESSES}")
        _check(
            self.events_retention >= 1,
            "TASKQ_EVENTS_RETENTION",
            self.events_retention,
            "must be >= 1",
        )
        _check(
            self.max_payload_bytes >= 2,
            "TASKQ_MAX_PAYLOAD_BYTES",
            self.max_payload_bytes,
            "must be >= 2",
        )
        _check(
            1 <= self.idempotency_ttl_seconds <= 10 * 365 * 86_400,
            "TASKQ_IDEMPOTENCY_TTL_SECONDS",
            self.idempotency_ttl_seconds,
            "must be from 1 to 315360000 (ten years)",
        )
        _check(self.completed_ttl_seconds > 0, "TASKQ_COMPLETED_TTL_SECONDS",
               self.completed_ttl_seconds, "must be > 0")
        _check(self.dead_ttl_seconds > 0, "TASKQ_DEAD_TTL_SECONDS", self.dead_ttl_seconds,
               "must be > 0")
        _check(
            0 < self.feed_heartbeat_seconds <= 15,
            "TASKQ_FEED_HEARTBEAT_SECONDS",
            self.feed_heartbeat_seconds,
            "must be in (0, 15]",
        )
        _check(
            self.feed_send_timeout_seconds > 0,
            "TASKQ_FEED_SEND_TIMEOUT_SECONDS",
            self.feed_send_timeout_seconds,
            "must be > 0",
        )
        _check(
            self.ledger_guard in LEDGER_GUARDS,
            "LEDGER_GUARD",
            self.ledger_guard,
            f"must be one of {', '.join(LEDGER_GUARDS)}",
        )

    @property
    def heartbeat_seconds(self) -> float:
        """A lease survives two missed heartbeats."""
        return self.lease_seconds / 3

    @property
    def lease_ms(self) -> int:
        return max(1, round(self.lease_seconds * 1000))

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, **overrides: object) -> Settings:
        """Read every variable of `ENVIRONMENT` (or `environ`), then apply `overrides`."""
        env = os.environ if environ is None else environ
        values: dict[str, object] = {}
        for name, (variable, parse) in ENVIRONMENT.items():
            raw = env.get(variable)
            if raw is not None and raw.strip() != "":
                values[name] = _parse(variable, raw.strip(), parse)
        values["redis_url_given"] = "redis_url" in values
        values.update(overrides)
        known = {f.name for f in fields(cls)}
        unknown = set(values) - known
        if unknown:
            raise ConfigError(f"unknown settings: {', '.join(sorted(unknown))}")
        return cls(**values)  # type: ignore[arg-type]


def _check(ok: bool, variable: str, value: object, rule: str) -> None:
    if not ok:
        raise ConfigError(f"{variable}={value!r} {rule}")


def _parse(variable: str, raw: str, parse: Callable[[str], T]) -> T:
    try:
        return parse(raw)
    except ValueError as e:
        raise ConfigError(f"{variable}={raw!r} is not valid: {e}") from e


def _guard(raw: str) -> LedgerGuard:
    if raw not in LEDGER_GUARDS:
        raise ValueError(f"expected one of {', '.join(LEDGER_GUARDS)}")
    return LEDGER_GUARDS[LEDGER_GUARDS.index(raw)]


def _flag(raw: str) -> bool:
    if raw.lower() in ("1", "true", "yes", "on"):
        return True
    if raw.lower() in ("0", "false", "no", "off"):
        return False
    raise ValueError("expected 1/true/yes/on or 0/false/no/off")


def _finite(raw: str) -> float:
    value = float(raw)
    if not math.isfinite(value):
        raise ValueError("expected a finite number")
    return value


# attribute -> (environment variable, parser); the README's table lists the same names.
ENVIRONMENT: dict[str, tuple[str, Callable[[str], object]]] = {
    "redis_url": ("REDIS_URL", str),
    "redis_timeout_seconds": ("REDIS_TIMEOUT_SECONDS", _finite),
    "queue": ("TASKQ_QUEUE", str),
    "ledger_path": ("LEDGER_PATH", str),
    "ledger_guard": ("LEDGER_GUARD", _guard),
    "lease_seconds": ("LEASE_SECONDS", _finite),
    "work_seconds": ("WORK_SECONDS", _finite),
    "after_effect_seconds": ("AFTER_EFFECT_SECONDS", _finite),
    "fail_rate": ("FAIL_RATE", _finite),
    "backoff_base_seconds": ("BACKOFF_BASE_SECONDS", _finite),
    "backoff_max_seconds": ("BACKOFF_MAX_SECONDS", _finite),
    "poll_seconds": ("POLL_SECONDS", _finite),
    "shutdown_grace_seconds": ("SHUTDOWN_GRACE_SECONDS", _finite),
    "concurrency": ("TASKQ_CONCURRENCY", int),
    "worker_processes": ("TASKQ_WORKER_PROCESSES", int),
    "events_retention": ("TASKQ_EVENTS_RETENTION", int),
    "max_payload_bytes": ("TASKQ_MAX_PAYLOAD_BYTES", int),
    "idempotency_ttl_seconds": ("TASKQ_IDEMPOTENCY_TTL_SECONDS", int),
    "completed_ttl_seconds": ("TASKQ_COMPLETED_TTL_SECONDS", _finite),
    "dead_ttl_seconds": ("TASKQ_DEAD_TTL_SECONDS", _finite),
    "redis_server": ("REDIS_SERVER", str),
    "redis_cluster": ("TASKQ_REDIS_CLUSTER", _flag),
    "api_token": ("TASKQ_API_TOKEN", str),
    "feed_heartbeat_seconds": ("TASKQ_FEED_HEARTBEAT_SECONDS", _finite),
    "feed_send_timeout_seconds": ("TASKQ_FEED_SEND_TIMEOUT_SECONDS", _finite),
}
