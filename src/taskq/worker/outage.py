"""Waiting out Redis outages: backoff for the loop, bounded retries for ack/fail/release."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TypeVar

from taskq.errors import BrokerError

log = logging.getLogger("taskq.worker")

T = TypeVar("T")

# While a spent outage lasts, how often a call is let through to see if Redis is back.
PROBE_SECONDS = 1.0


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


class Outage:
    """Bounded retries through an outage for ack, fail and release: a call is retried
    until the leases it settles run out (`held_until`, from their last renewals Redis
    accepted), or, for a call given none, until a lease from the outage's first
    refused call.

    A lost ack means the task runs again, so it is worth waiting for as long as its
    lease lasts. No longer: its task is then another worker's to reap. The lease is
    judged by its own renewals, not by the outage: between two stalls of Redis the
    heartbeats may have renewed it (a call that gave up in the first stall must not make
    the second one's calls give up at once). Calls made one after another in the same
    outage (a shutdown releasing each task it holds) wait for the same leases, renewed
    together, rather than a lease each.

    Once the lease is spent, even one try a call is costly: the client's own retries
    take most of a second against a closed port, and a timeout each against a host that
    does not answer. So a spent outage sends at most one call per `probe_seconds`, and
    gives up the calls between unsent. Any one it lets through that Redis answers ends
    the outage. A call given up so loses no task: the task it would have settled is
    reaped and run again, as it may be anyway once its lease has run out, which by then
    every lease the worker held has, unless Redis came back in the last second. An
    Outage is one queue's (on a cluster, one primary's): another queue's calls do not
    meet it.
    """

    def __init__(self, lease_seconds: float, probe_seconds: float = PROBE_SECONDS) -> None:
        self.lease_seconds = lease_seconds
        self.probe_seconds = probe_seconds
        self.deadline: float | None = None
        self.began = 0.0
        self.refused_at = 0.0

    def retry(self, what: str, call: Callable[[], T],
              held_until: float | None = None) -> T | None:
        """`call`, retried while Redis is away until `held_until` (monotonic time) or,
        without it, the outage's deadline; None if Redis stayed away that long, or if
        the leases have run out, the outage is spent and the last refusal was under
        `probe_seconds` ago (the call is then not sent at all)."""
        now = time.monotonic()
        if (held_until is None or now >= held_until) and self._spent() \
                and now - self.refused_at < self.probe_seconds:
            return None  # the caller logs what is left to be reaped or rerun
        backoff = Backoff(base=0.05, cap=1.0)
        # However late (its leases run out, as after a pause of the process), a call is
        # given a probe's while against a passing fault, such as a connection the pause
        # left broken: recorded, its outcome beats a reap's.
        least = now + self.probe_seconds
        while True:
            try:
                result = call()
            except BrokerError as e:
                self.refused_at = now = time.monotonic()
                if self.deadline is None:
                    self.deadline, self.began = now + self.lease_seconds, now
                limit = self.deadline if held_until is None else max(held_until, least)
                if now >= limit:
                    self.deadline = min(self.deadline, now)  # spent: later calls probe
                    log.error("%s gave up: Redis has been away %.1fs, and the leases it "
                              "would settle have run out: %s", what, now - self.began, e)
                    return None
                # The last try comes as the leases end, not a backoff's pause before.
                time.sleep(min(backoff.failed(e), limit - now))
                continue
            self.deadline = None
            backoff.succeeded()
            return result

    def _spent(self) -> bool:
        return self.deadline is not None and time.monotonic() >= self.deadline
