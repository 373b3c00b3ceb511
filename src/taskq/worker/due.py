"""When something a worker must act on comes due: the soonest moment its leases said."""

from __future__ import annotations

import threading
import time


class Due:
    """The soonest moment a lease reported something coming due on the worker's queues:
    a delayed task or throttled start to promote, a lease expiring to reap (lease.lua's
    wait hint). The loop and the wakers `note` what their leases say; the loop waits no
    longer than `left` and, once the moment has come, `take`s it and runs maintenance
    then, not after its interval. A moment already handled elsewhere costs one early
    look, never a late one; a moment that has come and not been taken yet gives way to
    any later one noted meanwhile, as a lease made after it came found nothing due."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._at: float | None = None  # monotonic; None: nothing known

    def note(self, seconds: float | None) -> bool:
        """Something comes due in `seconds` (None: nothing is scheduled); True if the loop
        should look again: that is sooner than what was known, or what was known has
        come (and a lease made since says what comes next)."""
        if seconds is None:
            return False
        now = time.monotonic()
        at = now + seconds
        with self._lock:
            if self._at is not None and now < self._at <= at:
                return False
            self._at = at
            return True

    def left(self) -> float | None:
        """Seconds until the soonest moment known (0 once it has come), or None."""
        with self._lock:
            return None if self._at is None else max(0.0, self._at - time.monotonic())

    def take(self) -> bool:
        """Whether the soonest moment known has come; it is forgotten if so."""
        with self._lock:
            if self._at is None or self._at > time.monotonic():
                return False
            self._at = None
            return True
