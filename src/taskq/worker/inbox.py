"""The loop thread's inbox: handlers report how their runs ended, other threads nudge it."""

from __future__ import annotations

import collections
import queue
from collections.abc import Callable
from dataclasses import dataclass

from taskq.context import TaskContext
from taskq.results import Failure, LeasedTask
from taskq.retry import BACKOFF, Decision


@dataclass(frozen=True)
class Outcome:
    """How one run of a handler ended: `failure` is None when it returned normally, and
    then `result` is its return value as JSON text (None when it is not kept); a failure
    is settled as `decision` says (retried after the backoff of the settings unless
    told otherwise). A task whose handler never `started` (it waited for one until it
    was cancelled, lost its lease, or the worker began to stop) is handed back."""

    task: LeasedTask
    context: TaskContext
    failure: Failure | None
    result: str | None = None
    decision: Decision = BACKOFF
    started: bool = True


class Inbox:
    """Messages for the loop thread. Any thread may `put` an outcome (waking the loop),
    `hold` one (kept for the loop's next look, waking it only when asked to and not
    already woken since that look) or `nudge` (ask the loop to look around again); only
    the loop thread calls `wait` and `take`."""

    def __init__(self) -> None:
        # None is a nudge: it carries nothing but the wake-up.
        self._messages: queue.SimpleQueue[Outcome | None] = queue.SimpleQueue()
        self._arrived: list[Outcome] = []
        # The queue's own method: every handler thread calls it once per task.
        self.put: Callable[[Outcome], None] = self._messages.put
        # Held outcomes: a deque, as handler threads append while the loop takes.
        self._held: collections.deque[Outcome] = collections.deque()
        # Whether a hold has woken the loop since its last take. Read and set without a
        # lock: a race costs one wake-up too many, or leaves a held outcome to the
        # loop's next timed look (see Worker._wait), never loses one.
        self._woken = False

    def nudge(self) -> None:
        self._messages.put(None)

    def hold(self, outcome: Outcome, wake: bool) -> None:
        """Keep `outcome` for the next `take`; with `wake`, wake the loop unless a hold
        has already done so since its last take."""
        self._held.append(outcome)
        if wake and not self._woken:
            self._woken = True
            self._messages.put(None)

    def wait(self, timeout: float) -> None:
        """Block until a message arrives or `timeout` seconds pass; an outcome that
        arrives is kept for the next `take`."""
        try:
            message = self._messages.get(timeout=timeout)
        except queue.Empty:
            return
        if message is not None:
            self._arrived.append(message)

    def take(self) -> list[Outcome]:
        """Every outcome that has arrived and was not taken yet."""
        outcomes, self._arrived = self._arrived, []
        self._woken = False  # before emptying the held: a hold after it wakes the loop
        held = self._held
        while held:
            outcomes.append(held.popleft())
        while True:
            try:
                message = self._messages.get_nowait()
            except queue.Empty:
                return outcomes
            if message is not None:
                outcomes.append(message)
