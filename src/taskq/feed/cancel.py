"""Stopping a feed task for sure, on every supported Python."""

from __future__ import annotations

import asyncio
from typing import Any

RECHECK_SECONDS = 0.05


async def cancel_and_wait(task: asyncio.Task[Any]) -> None:
    """Cancel `task` and return once it has ended.

    One `cancel()` is not always enough on Python 3.11: `asyncio.wait_for` (which
    redis-py wraps around every send once a socket timeout is set, and which the feed
    uses itself) returns normally when the cancellation lands in the loop iteration in
    which its inner future completes, so the cancellation is lost and the task runs on
    (fixed in 3.12). Cancel again until the task is done."""
    while not task.done():
        task.cancel()
        await asyncio.wait({task}, timeout=RECHECK_SECONDS)
    if not task.cancelled():
        task.exception()  # retrieved: an error it ended with is not reported again
