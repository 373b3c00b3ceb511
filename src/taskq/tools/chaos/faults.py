"""Fault injection for the chaos run: seeded, timed, and logged, so a run can be replayed."""

from __future__ import annotations

import functools
import logging
import os
import random
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from taskq.tools.embedded import EmbeddedRedis

log = logging.getLogger("taskq.tools.chaos")


@dataclass
class Fault:
    """One injected fault: when (seconds into the run), what, to whom, and when it ended."""

    at: float
    kind: str
    target: str
    ended: float | None = None
    recovered_after: float | None = None
    note: str = ""


@dataclass
class Pending:
    """An action due later: SIGCONT after a pause, or a replacement after a SIGTERM."""

    due: float
    action: Callable[[], None]
    fault: Fault


@dataclass
class Injector:
    """Picks a fault every Exp(`interval`) seconds from `kinds` with its own seeded RNG.

    Workers live in `workers` (index = slot); a slot whose process ends is refilled by
    `spawn(slot)`. Everything runs on the caller's thread, which must be the one that
    spawned the workers (their parent-death signal is tied to it)."""

    rng: random.Random
    interval: float
    kinds: tuple[str, ...]
    lease_seconds: float
    workers: list[subprocess.Popen[bytes]]
    spawn: Callable[[int], subprocess.Popen[bytes]]
    redis: EmbeddedRedis | None
    started: float = field(default_factory=time.monotonic)
    faults: list[Fault] = field(default_factory=list)
    pending: list[Pending] = field(default_factory=list)
    next_at: float = 0.0
    redis_down_until: float = 0.0
    # Workers sent SIGTERM: a second one would make them exit at once, not drain.
    terminated: set[int] = field(default_factory=set)

    def clock(self) -> float:
        return time.monotonic() - self.started

    def tick(self, injecting: bool) -> None:
        """Run due actions, refill dead worker slots, and inject a fault when one is due."""
        now = self.clock()
        for item in [p for p in self.pending if p.due <= now]:
            self.pending.remove(item)
            item.action()
            item.fault.ended = self.clock()
        self._refill()
        if injecting and now >= self.next_at:
            self._inject(self.rng.choice(self.kinds))
            self.next_at = self.clock() + self.rng.expovariate(1 / self.interval)

    def settle(self) -> None:
        """End every fault in progress (continue what is stopped, restart what is down)."""
        for item in list(self.pending):
            self.pending.remove(item)
            item.action()
            item.fault.ended = self.clock()
        self._refill()

    def _refill(self) -> None:
        for slot, process in enumerate(self.workers):
            if process.poll() is not None:
                self.workers[slot] = self.spawn(slot)

    def _record(self, kind: str, target: str, note: str = "") -> Fault:
        fault = Fault(self.clock(), kind, target, note=note)
        self.faults.append(fault)
        log.info("%7.2fs %-14s %s %s", fault.at, kind, target, note)
        return fault

    def _inject(self, kind: str) -> None:
        if kind.startswith("redis"):
            self._redis_fault(kind)
            return
        live = [(i, p) for i, p in enumerate(self.workers) if p.poll() is None]
        slot, process = self.rng.choice(live)
        target = f"worker {slot} (pid {process.pid})"
        if kind == "kill":
            os.kill(process.pid, signal.SIGKILL)
            self._record(kind, target).ended = self.clock()
        elif kind == "stop":
            pause = self.rng.uniform(1.5, 3.0) * self.lease_seconds
            os.kill(process.pid, signal.SIGSTOP)
            fault = self._record(kind, target, f"for {pause:.1f}s (lease {self.lease_seconds}s)")
            resume = _signal(process, signal.SIGCONT)
            self.pending.append(Pending(self.clock() + pause, resume, fault))
        else:
            os.kill(process.pid, signal.SIGCONT)
            os.kill(process.pid, signal.SIGTERM)
            self.terminated.add(process.pid)
            fault = self._record(kind, target, "graceful: drains, then a replacement starts")
            fault.ended = self.clock()

    def _redis_fault(self, kind: str) -> None:
        redis = self.redis
        if redis is None or self.clock() < self.redis_down_until:
            return
        if kind == "redis-pause":
            pause = self.rng.uniform(0.5, 3.0)
            redis.signal(signal.SIGSTOP)
            fault = self._record(kind, f"redis (pid {redis.pid})", f"for {pause:.1f}s")
            resume = functools.partial(redis.signal, signal.SIGCONT)
            self.pending.append(Pending(self.clock() + pause, resume, fault))
            self.redis_down_until = self.clock() + pause
        elif kind == "redis-restart":
            fault = self._record(kind, f"redis (pid {redis.pid})", "SIGTERM, AOF flushed, restart")
            redis.stop()
            redis.start()
            fault.ended = self.clock()
        else:
            fault = self._record(kind, f"redis (pid {redis.pid})", "SIGKILL, restart from the AOF")
            redis.kill()
            redis.start()
            fault.ended = self.clock()


def _signal(process: subprocess.Popen[bytes], signum: int) -> Callable[[], None]:
    def send() -> None:
        if process.poll() is None:
            os.kill(process.pid, signum)

    return send
