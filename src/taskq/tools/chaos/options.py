"""What a chaos run does, as chosen on the command line."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from taskq.errors import ConfigError
from taskq.limits import (
    CONCURRENCY,
    DAY,
    PREFETCH,
    SHARDS,
    WORK_SECONDS,
    WORKER_LEASE_SECONDS,
    Range,
)
from taskq.settings import LedgerGuard, Settings, Simulation

WORKER_FAULTS = ("kill", "stop", "term")
REDIS_FAULTS = ("redis-pause", "redis-restart", "redis-crash")

# The timings a run takes, by their command-line options: each a finite number, and an
# interval or a timeout above 0 (the fault loop divides by the interval and waits out
# the timeouts).
TIMINGS = {
    "fault_interval": Range("--fault-interval", 0.0, 3600.0, 0.5, "seconds", above=True),
    "max_seconds": Range("--max-seconds", 0.0, float(DAY), 1800.0, "seconds", above=True),
    "drain_timeout": Range("--drain-timeout", 0.0, float(DAY), 120.0, "seconds", above=True),
    "work_seconds": Range("--work-seconds", WORK_SECONDS.low, WORK_SECONDS.high, 0.01,
                          "seconds"),
    # A worker's own range: a lease it cannot renew in time (under 0.25 s) is refused.
    "lease_seconds": Range("--lease-seconds", WORKER_LEASE_SECONDS.low,
                           WORKER_LEASE_SECONDS.high, 2.0, "seconds"),
}
# Its counts: every task is tracked in memory by the run's checks, and every worker is
# a process of its own.
COUNTS = {
    "tasks": Range("--tasks", 1, 10_000_000, 100_000, "tasks", whole=True),
    "workers": Range("--workers", 1, 64, 8, "processes", whole=True),
    "concurrency": Range("--concurrency", 1, CONCURRENCY.high, 8, "handlers", whole=True),
    "prefetch": Range("--prefetch", 0, PREFETCH.high, 0, "tasks", whole=True),
    "resend_every": Range("--resend-every", 0, 10_000_000, 20, "tasks", whole=True),
    "shards": Range("--shards", 1, SHARDS.high, 1, whole=True),
}


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
    # Tasks each worker leases beyond its handlers (see Settings.prefetch).
    prefetch: int = 0
    work_seconds: float = 0.01
    after_effect_seconds: float = 0.01
    lease_seconds: float = 2.0
    appendfsync: str = "everysec"
    completed_ttl: float = 60.0
    idempotency_ttl: int = 120
    max_retries: int = 25
    workdir: Path = Path(".chaos")
    # Above 1, the run's queue is sharded (see taskq.shards), every check made per shard.
    shards: int = 1

    def __post_init__(self) -> None:
        for name, rule in (TIMINGS | COUNTS).items():
            rule.check(getattr(self, name), error=ConfigError)

    @property
    def fault_kinds(self) -> tuple[str, ...]:
        return WORKER_FAULTS + (REDIS_FAULTS if self.redis_faults else ())

    @property
    def events_retention(self) -> int:
        """Room for every event of the run, so trace validation sees whole histories:
        about five per task (enqueue, lease, ack, and retries) plus heartbeats."""
        return max(100_000, self.tasks * 12)

    def worker_settings(self, redis_url: str, ledger: Path) -> tuple[Settings, Simulation]:
        """What every worker process of the run is configured with."""
        settings = Settings.from_env(
            {}, redis_url=redis_url, queue="chaos", lease_seconds=self.lease_seconds,
            backoff_base_seconds=0.05, backoff_max_seconds=1.0, shutdown_grace_seconds=2.0,
            poll_seconds=0.5, redis_timeout_seconds=2.0, concurrency=self.concurrency,
            prefetch=self.prefetch,
            events_retention=self.events_retention, completed_ttl_seconds=self.completed_ttl,
            shards=self.shards,
        )
        simulation = Simulation(work_seconds=self.work_seconds,
                                after_effect_seconds=self.after_effect_seconds, fail_rate=0.0,
                                ledger_path=str(ledger), ledger_guard=self.guard)
        return settings, simulation
