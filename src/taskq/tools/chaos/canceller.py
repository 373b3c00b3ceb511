"""A user cancelling tasks through the faults: a seeded sample of pending, delayed, running
and dead ones, each through `Broker.cancel`."""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeVar

import redis

from taskq.broker import Broker, NewTask
from taskq.errors import BrokerError
from taskq.limits import PRIORITY
from taskq.results import Cancellation
from taskq.tools.chaos.producer import Produced
from taskq.tools.chaos.queue import ChaosQueue

# One task in this many of the run's is cancelled.
CANCEL_EVERY = 20
# A task name no worker registers: each such task dies at once (an unknown task is not
# worth a retry), so the run has dead tasks to cancel out of the DLQ.
DOOMED_TASK = "taskq.chaos.unregistered"
# Where a cancel's target is picked, and how often each place comes first; a place with
# nothing of ours in it (no task delayed or dead at the moment) gives way to the next.
PLACES = {"ready": 3, "leased": 4, "delayed": 3, "dlq": 2}
PAUSE = 0.02
# Seconds a doomed task is waited for to reach the DLQ before it is cancelled anyway.
DOOMED_WAIT = 20.0

T = TypeVar("T")


def doomed_id(i: int) -> str:
    return f"x{i:07d}"


@dataclass
class Cancels:
    """What the canceller did: each task it asked to cancel, with the first definite
    answer (None while an outage kept every call from answering; such a call may still
    have acted), the calls an outage cut off (each made again), and the tasks it enqueued
    to die."""

    asked: dict[str, Cancellation | None] = field(default_factory=dict)
    outages: int = 0
    doomed: list[str] = field(default_factory=list)
    finished: threading.Event = field(default_factory=threading.Event)


class Canceller(threading.Thread):
    """Cancels one task in CANCEL_EVERY of the run's, picked from the places of PLACES
    while the producer and the faults run, keeping pace with the run (fewer when the
    run ends first);
    first it enqueues a few tasks no worker can run, and last it cancels whichever of
    those it has not yet, once dead. A call an outage cuts off is made again (a cancel
    is safe to repeat) until one answers."""

    def __init__(self, queue: ChaosQueue, produced: Produced, tasks: int, seed: int,
                 cancels: Cancels) -> None:
        super().__init__(name="chaos-canceller", daemon=True)
        self.queue = queue
        self.produced = produced
        self.tasks = tasks
        self.budget = max(1, tasks // CANCEL_EVERY)
        self.rng = random.Random(seed)
        self.cancels = cancels
        self.stopping = threading.Event()
        self.doomed = [doomed_id(i) for i in range(max(3, self.budget // 25))]

    def run(self) -> None:
        try:
            self._enqueue_doomed()
            while len(self.cancels.asked) < self.budget and not self.stopping.is_set():
                behind = self._behind()
                if behind is None:
                    break
                target = self._pick_any() if behind else None
                if target is not None:
                    self._cancel(target)
                self.stopping.wait(PAUSE)
            for task_id in self.doomed:
                if task_id not in self.cancels.asked:
                    self._wait_dead(task_id)
                    self._cancel(task_id)
        finally:
            self.cancels.finished.set()

    def _enqueue_doomed(self) -> None:
        tasks = [NewTask(t, max_retries=3, name=DOOMED_TASK) for t in self.doomed]
        if self._retried(lambda: self.queue.enqueue_many(tasks)) is not None:
            self.cancels.doomed = list(self.doomed)

    def _behind(self) -> bool | None:
        """Whether the cancels are behind the run's progress (the share of its tasks that
        have left ready), so that they spread over the whole run; None once every task
        was sent and none is ready, leased or delayed: nothing is left to cancel."""
        counts = self._retried(self.queue.counts)
        if counts is None:
            return None
        if self.produced.done.is_set() and counts.ready == counts.leased == counts.delayed == 0:
            return None
        progress = max(0, len(self.produced.acknowledged) - counts.ready) / self.tasks
        return len(self.cancels.asked) < self.budget * progress + 1

    def _wait_dead(self, task_id: str) -> None:
        """Give a doomed task time to reach the DLQ (its worker may be down), so that it
        is cancelled out of it; it is cancelled wherever it is once the time is up."""
        deadline = time.monotonic() + DOOMED_WAIT
        while time.monotonic() < deadline and not self.stopping.is_set():
            record = self._retried(lambda: self.queue.task(task_id))
            if record is None or record.state == "dead":
                return
            self.stopping.wait(0.1)

    def _pick_any(self) -> str | None:
        """A task to cancel from the places in a random order weighted by PLACES (a
        weighted shuffle: each place keyed by u ** (1 / weight)), so a turn that finds
        no delayed or dead task still cancels one elsewhere."""
        order = sorted(PLACES, key=lambda place: self.rng.random() ** (1 / PLACES[place]),
                       reverse=True)
        for place in order:
            if (target := self._pick(place)) is not None:
                return target
        return None

    def _pick(self, place: str) -> str | None:
        """A random task of this run's producer (or a doomed one) in `place` (of a shard
        picked at random), not asked about before; None when there is none at hand or
        Redis cannot say."""
        brokers = self.queue.brokers
        broker = brokers[0] if len(brokers) == 1 else self.rng.choice(brokers)
        k, client = broker.keys, broker.client
        try:
            if place in ("leased", "delayed"):
                key = k.leased if place == "leased" else k.delayed
                found = [str(t) for t in client.zrandmember(key, 20) or []]
            else:
                key = self._ready_list(broker) if place == "ready" else k.dlq
                length = int(client.llen(key))
                starts = [self.rng.randrange(length) for _ in range(5)] if length else []
                found = [str(t) for n in starts if (t := client.lindex(key, n)) is not None]
        except (redis.RedisError, BrokerError):
            return None
        ours = [t for t in found if (t.startswith("t") or t in self.doomed)
                and t not in self.cancels.asked]
        return self.rng.choice(ours) if ours else None

    def _ready_list(self, broker: Broker) -> str:
        """One of the ready lists that hold tasks, one per priority, picked at random."""
        k = broker.keys
        levels = [int(str(p)) for p in broker.client.zrange(k.ready_levels, 0, -1)]
        return k.ready_at(self.rng.choice([PRIORITY.default, *levels]))

    def _cancel(self, task_id: str) -> None:
        self.cancels.asked[task_id] = None
        self.cancels.asked[task_id] = self._retried(lambda: self.queue.cancel(task_id))

    def _retried(self, call: Callable[[], T]) -> T | None:
        """`call`'s answer, through outages; None once the run stops first."""
        while not self.stopping.is_set():
            try:
                return call()
            except BrokerError:
                self.cancels.outages += 1
                time.sleep(0.1)
        return None
