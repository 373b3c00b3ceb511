"""Waiting out Redis outages: backoff for the loop, bounded retries for ack/fail/release."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TypeVar

from taskq.errors import BrokerError

log = logging.getLogger("taskq.worker")

T = TypeVar("T")


class Backoff:
    """Exponential backoff for the loop while Redis is down; logs the start and the end."""

    def __init__(self, base: float = 0.1, cap: float = 5.0) -> None:
        self.base = base
        self.cap = cap
        self.failures = 0
        self.since = 0.0

    def failed(self, error: BrokerError) -> float:
        """Record a failure; return how long to wait before the next try."""
        if self.failures == 0:
            self.since = time.monotonic()
            log.warning("redis unavailable, waiting it out: %s", error)
        self.failures += 1
        return float(min(self.cap, self.base * 2.0 ** (self.failures - 1)))

    def succeeded(self) -> None:
        if self.failures:
            log.info("redis is back after %.1fs", time.monotonic() - self.since)
        self.failures = 0


def retry_for(seconds: float, what: str, call: Callable[[], T]) -> T | None:
    """Retry `call` through outages for up to `seconds`; None if Redis stayed away.

    A lost ack means the task runs again, so it is worth waiting a whole lease for.
    """
    deadline = time.monotonic() + seconds
    backoff = Backoff(base=0.05, cap=1.0)
    while True:
        try:
            result = call()
        except BrokerError as e:
            pause = backoff.failed(e)
            if time.monotonic() + pause > deadline:
                log.error("%s gave up after %.1fs of outage: %s", what, seconds, e)
                return None
            time.sleep(pause)
            continue
        backoff.succeeded()
        return result
