"""How the feed's background loops ride out a Redis outage: soon, then less often."""

from __future__ import annotations

import asyncio
import logging

log = logging.getLogger("taskq.feed")

# A Redis restart takes moments: retry soon, then less often while it lasts.
RETRY_FIRST_SECONDS = 0.05
RETRY_MAX_SECONDS = 1.0


class Backoff:
    """The pause of one loop that reads Redis: none while its reads succeed, then
    RETRY_FIRST_SECONDS after a failure, doubling up to RETRY_MAX_SECONDS while they
    fail. `what` names the loop in the log, which hears of an outage once when it
    starts and once when it ends, not once per attempt."""

    def __init__(self, what: str) -> None:
        self.what = what
        self.pause = 0.0

    async def failed(self, error: Exception) -> None:
        """Log the outage if it is new, then sleep its next pause."""
        if not self.pause:
            log.warning("%s: %s; retrying", self.what, error)
        self.pause = min(RETRY_MAX_SECONDS, (self.pause * 2) or RETRY_FIRST_SECONDS)
        await asyncio.sleep(self.pause)

    def succeeded(self) -> None:
        if self.pause:
            log.warning("%s: reading again", self.what)
            self.pause = 0.0
