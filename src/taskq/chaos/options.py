"""What a chaos run does, as chosen on the command line."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from taskq.settings import LedgerGuard

WORKER_FAULTS = ("kill", "stop", "term")
REDIS_FAULTS = ("redis-pause", "redis-restart", "redis-crash")


@dataclass(frozen=True)
class ChaosOptions:
    """The seed's options, plus the knobs that size a run for this machine."""

    tasks: int = 100_000
    workers: int = 8
    resend_every: int = 20
    fault_interval: float = 0.5
    redis_faults: bool = False
    max_seconds: float = 1800.0
    drain_timeout: float = 120.0
    guard: LedgerGuard = "dedupe"
    seed: int = 0
    redis_url: str | None = None
    report: Path | None = None
    concurrency: int = 8
    work_seconds: float = 0.01
    after_effect_seconds: float = 0.01
    lease_seconds: float = 2.0
    appendfsync: str = "everysec"
    completed_ttl: float = 60.0
    idempotency_ttl: int = 120
    max_retries: int = 25
    workdir: Path = Path(".chaos")

    @property
    def fault_kinds(self) -> tuple[str, ...]:
        return WORKER_FAULTS + (REDIS_FAULTS if self.redis_faults else ())

    @property
    def events_retention(self) -> int:
        """Room for every event of the run, so trace validation sees whole histories:
        about five per task (enqueue, lease, ack, and retries) plus heartbeats."""
        return max(100_000, self.tasks * 12)

    def worker_env(self, redis_url: str, ledger: Path) -> dict[str, str]:
        return {
            "REDIS_URL": redis_url,
            "TASKQ_QUEUE": "chaos",
            "LEDGER_PATH": str(ledger),
            "LEDGER_GUARD": self.guard,
            "LEASE_SECONDS": str(self.lease_seconds),
            "WORK_SECONDS": str(self.work_seconds),
            "AFTER_EFFECT_SECONDS": str(self.after_effect_seconds),
            "FAIL_RATE": "0",
            "BACKOFF_BASE_SECONDS": "0.05",
            "BACKOFF_MAX_SECONDS": "1",
            "SHUTDOWN_GRACE_SECONDS": "2",
            "POLL_SECONDS": "0.5",
            "REDIS_TIMEOUT_SECONDS": "2",
            "TASKQ_CONCURRENCY": str(self.concurrency),
            "TASKQ_EVENTS_RETENTION": str(self.events_retention),
            "TASKQ_COMPLETED_TTL_SECONDS": str(self.completed_ttl),
        }
