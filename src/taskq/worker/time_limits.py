"""The time-limit thread: every LIMIT_TICK, end the runs in hand past their time limits,
and once a stop's grace has ended, fence every run still going.

Its own thread, apart from the heartbeat and the loop: a renewal, or a settle, that
waits on a slow Redis must not let a handler overrun its limit, or apply its effect
past the grace, by as long; and this needs no Redis at all.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from taskq.context import TaskContext
from taskq.worker.slots import Slots

log = logging.getLogger("taskq.worker")

# How often time limits are looked at: how late past its limit a run can end.
LIMIT_TICK = 0.05
# How often a run kept past its time limit (a concurrency-limited task's, holding its
# slot until its handler ends) is said to be still running, at most.
KEPT_SAY_SECONDS = 60.0


class TimeLimits(threading.Thread):
    """Times out every run in hand past its time limit (its effects fenced, its lease no
    longer renewed) and has `end` (the runner's `time_out`) end it. Takes only the
    slots' lock, briefly, and no error ends it."""

    def __init__(self, slots: Slots, end: Callable[[TaskContext], None],
                 grace_ends: Callable[[], float] = lambda: float("inf")) -> None:
        super().__init__(name="taskq-time-limits", daemon=True)
        self.slots = slots
        self.end = end
        # When (monotonic) a stop's grace ends: infinity until a stop begins.
        self.grace_ends = grace_ends
        self.stopping = threading.Event()
        # Runs kept past their limits, and when (monotonic) each was last said to be
        # still running; kept apart so that the tick looks at no other run for them.
        self._kept: dict[tuple[str, str, int], tuple[TaskContext, float]] = {}

    def run(self) -> None:
        while not self.stopping.wait(LIMIT_TICK):
            try:
                self.enforce()
            except Exception:
                log.exception("time limit check failed; checking on")

    def enforce(self) -> None:
        """Time out every run in hand past its time limit, and end it."""
        now = time.monotonic()
        past_grace = now >= self.grace_ends()
        in_hand = self.slots.in_hand()
        for context in in_hand:
            if not (context.finished or context.timed_out) and context.overdue(now) \
                    and context.time_out():
                self.end(context)
                if context.kept_to_end:
                    self._kept[context.key] = (context, now)
            elif past_grace and context.started_at and not context.abandoned:
                # The loop gives it back, but may be waiting on Redis meanwhile. A block
                # under way ends as it will; no block of the run starts after this.
                context.fence_now()
        if self._kept:
            self._say_kept({c.key for c in in_hand}, now)

    def _say_kept(self, in_hand: set[tuple[str, str, int]], now: float) -> None:
        """Say once a KEPT_SAY_SECONDS of each run kept past its limit that its handler
        has not ended: one that never ends holds its task's slot for good."""
        for key, (context, said) in list(self._kept.items()):
            if key not in in_hand or context.ended_at:
                del self._kept[key]
            elif now - said >= KEPT_SAY_SECONDS:
                self._kept[key] = (context, now)
                log.warning("task %s (%s) is %.0fs past its time limit of %gs and its "
                            "handler (or an effect() block it left under way) has not "
                            "ended: it holds its concurrency slot, so no other run of the "
                            "task starts, until it does (or the worker stops)",
                            context.task_id, context.name, now - (context.deadline or now),
                            context.time_limit)

    def stop(self) -> None:
        self.stopping.set()
