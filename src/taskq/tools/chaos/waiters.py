"""Producers that wait for results through the faults, as a web request would."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any

from taskq.errors import BrokerError, ResultTimeoutError, TaskCancelledError, TaskqError
from taskq.tools.chaos.producer import Produced, task_id
from taskq.tools.chaos.queue import ChaosQueue

# Every this many acknowledged tasks, one is waited for.
WAIT_EVERY = 97


@dataclass
class Waited:
    """What the waiters got: each task's result as `result()` returned it, the tasks
    whose wait ended in `TaskCancelledError`, the tasks whose wait ended in another taskq
    error than an outage, and the outages ridden out."""

    results: dict[str, Any] = field(default_factory=dict)
    cancelled: list[str] = field(default_factory=list)
    errors: dict[str, str] = field(default_factory=dict)
    outages: int = 0


class Waiter(threading.Thread):
    """Calls `result()` on a sample of the acknowledged tasks, one after the other, each
    waited for until the run stops; a Redis fault mid-wait is retried, as a caller would."""

    def __init__(self, queue: ChaosQueue, produced: Produced, tasks: int,
                 waited: Waited) -> None:
        super().__init__(name="chaos-waiter", daemon=True)
        self.queue = queue
        self.produced = produced
        self.tasks = tasks
        self.waited = waited
        self.stopping = threading.Event()

    def run(self) -> None:
        for n in range(0, self.tasks, WAIT_EVERY):
            target = task_id(n)
            # Enqueued in order: wait until the producer has sent it (or gave up on it).
            while target not in self.produced.acknowledged and not self.produced.done.is_set():
                if self.stopping.wait(0.1):
                    return
            if self.stopping.is_set():
                return
            if target in self.produced.acknowledged:
                self._wait_for(target)

    def _wait_for(self, task_id: str) -> None:
        handle = self.queue.handle(task_id)
        while not self.stopping.is_set():
            try:
                self.waited.results[task_id] = handle.result(timeout=1.0)
                return
            except ResultTimeoutError:
                continue
            except TaskCancelledError:
                self.waited.cancelled.append(task_id)
                return
            except BrokerError:
                self.waited.outages += 1
                time.sleep(0.1)
            except TaskqError as e:
                self.waited.errors[task_id] = f"{type(e).__name__}: {e}"
                return
