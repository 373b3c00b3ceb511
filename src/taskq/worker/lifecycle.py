"""The worker's shutdown state machine: running -> draining -> stopped, logged."""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
from enum import Enum
from types import FrameType

from taskq.worker.inbox import Inbox

log = logging.getLogger("taskq.worker")

# The signals that stop a worker by draining it. SIGHUP is a closed terminal or an ssh
# session gone: left to its default, it would end the worker at once, its tasks in hand
# waiting for their leases to run out.
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


class Phase(Enum):
    RUNNING = "running"
    DRAINING = "draining"
    STOPPED = "stopped"


class Lifecycle:
    """Tracks the phase. A signal handler only calls `request_stop`, which nudges the
    loop's inbox; the loop acts on it."""

    def __init__(self, grace_seconds: float, inbox: Inbox) -> None:
        self.grace_seconds = grace_seconds
        self.phase = Phase.RUNNING
        self.drain_deadline = float("inf")
        self._inbox = inbox
        self._signals = 0
        self._lock = threading.Lock()

    @property
    def running(self) -> bool:
        return self.phase is Phase.RUNNING

    @property
    def draining(self) -> bool:
        return self.phase is Phase.DRAINING

    def grace_expired(self) -> bool:
        return time.monotonic() >= self.drain_deadline

    def request_stop(self, reason: str) -> None:
        """Start draining: no new leases; tasks in hand get the grace period to finish."""
        with self._lock:
            if self.phase is not Phase.RUNNING:
                return
            self.phase = Phase.DRAINING
            self.drain_deadline = time.monotonic() + self.grace_seconds
        log.info("draining (%s): no new tasks; %.1fs grace for tasks in hand",
                 reason, self.grace_seconds)
        self._inbox.nudge()

    def stopped(self) -> None:
        self.phase = Phase.STOPPED
        log.info("stopped")

    def install_signal_handlers(self) -> None:
        """First SIGTERM/SIGINT/SIGHUP drains; a second one exits at once (leases are
        reaped later)."""
        if threading.current_thread() is not threading.main_thread():
            return
        for signum in STOP_SIGNALS:
            signal.signal(signum, self._on_signal)

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        self._signals += 1
        name = signal.Signals(signum).name
        if self._signals == 1:
            self.request_stop(name)
        else:
            log.warning("second %s: exiting now; leases in hand will be reaped", name)
            os._exit(128 + signum)
