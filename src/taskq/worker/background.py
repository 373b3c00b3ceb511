"""The wake-up listener: the thread that waits for work while the worker is idle."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Literal

# What one wait for work came to: "woken" (the loop should look around), "again" (the
# wait leased what there was and ready is empty: keep waiting, the loop has nothing to
# do), or "away" (Redis could not be asked).
WaitOutcome = Literal["woken", "again", "away"]


class Waker(threading.Thread):
    """Waits for work while the worker is idle, so no idle worker sits out a poll
    interval: `wait(timeout)` blocks until a producer signals work (and may lease it in
    the same round trip); the loop is nudged unless the wait says there is no need."""

    def __init__(self, wait: Callable[[float], WaitOutcome], wake: Callable[[], None],
                 timeout: float) -> None:
        super().__init__(name="taskq-waker", daemon=True)
        self.wait = wait
        self.wake = wake
        self.timeout = timeout
        self.armed = threading.Event()
        self.stopping = threading.Event()

    def arm(self) -> None:
        self.armed.set()

    def run(self) -> None:
        while not self.stopping.is_set():
            if not self.armed.wait(self.timeout):
                continue
            outcome = self.wait(self.timeout)
            if outcome == "again":
                continue
            if outcome == "away":
                self.stopping.wait(self.timeout)  # the loop's next call will say why
            self.armed.clear()
            self.wake()

    def stop(self) -> None:
        self.stopping.set()
        self.armed.set()
