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
    accepted).

    A lost ack means the task runs again, so it is worth waiting for as long as its
    lease lasts. No longer: its task is then another worker's to reap. The lease is
    judged by its own renewals, not by the outage: between two stalls of Redis the
    heartbeats may have renewed it (a call that gave up in the first stall must not make
    the second one's calls give up at once). Calls made one after another in the same
    outage (a shutdown releasing each task it holds) wait for the same leases, renewed
    together, rather than a lease each. However late its call comes (its leases run out,
    as after a pause of the process), a call first met by an outage gets `probe_seconds`
    of retries against a passing fault, such as a connection the pause left broken:
    recorded, its outcome beats a reap's.

    Once a call has given up, even one try is costly: the client's own retries take most
    of a second against a closed port, and a timeout each against a host that does not
    answer. So until a call gets through, a call whose leases have run out is sent at
    most one per `probe_seconds`, tried once, and the calls between are given up unsent.
    Any one that Redis answers ends the outage. A call given up so loses no task: the
    task it would have settled is reaped and run again, as it may be anyway once its
    lease has run out. An Outage is one queue's (on a cluster, one primary's): another
    queue's calls do not meet it.
    """

    def __init__(self, probe_seconds: float = PROBE_SECONDS) -> None:
        self.probe_seconds = probe_seconds
        # The outage under way: when its first call was refused (None: none is), whether
        # a call has given up in it, and when the last refusal came.
        self.began: float | None = None
        self.gave_up = False
        self.refused_at = 0.0

    @property
    def away(self) -> bool:
        """Whether the last call made met Redis away."""
        return self.began is not None

    def retry(self, what: str, call: Callable[[], T], held_until: float) -> T | None:
        """`call`, retried while Redis is away until `held_until` (monotonic time); None
        if Redis stayed away that long, or if the leases have run out, a call has given
        up in this outage and the last refusal was under `probe_seconds` ago (the call
        is then not sent at all)."""
        now = time.monotonic()
        if now >= held_until and self.gave_up and now - self.refused_at < self.probe_seconds:
            return None  # the caller logs what is left to be reaped or rerun
        limit = held_until if self.gave_up else max(held_until, now + self.probe_seconds)
        backoff = Backoff(base=0.05, cap=1.0)
        while True:
            sent = time.monotonic()
            try:
                result = call()
            except BrokerError as e:
                self.refused_at = now = time.monotonic()
                if self.began is None:
                    # From when the call went out: one that hung for the client's
                    # timeouts was already that long without an answer.
                    self.began = sent
                if now >= limit:
                    self.gave_up = True
                    log.error("%s gave up: Redis has been away %.1fs, and the leases it "
                              "would settle have run out: %s", what, now - self.began, e)
                    return None
                # The last try comes as the leases end, not a backoff's pause before.
                time.sleep(min(backoff.failed(e), limit - now))
                continue
            self.began, self.gave_up = None, False
            backoff.succeeded()
            return result
