"""The chaos producer: sends every task once, resends some, and survives Redis faults."""

from __future__ import annotations

import random
import threading
import time
from collections import Counter
from dataclasses import dataclass, field

from taskq.broker import NewTask
from taskq.errors import BrokerError
from taskq.limits import PRIORITY
from taskq.results import SIMULATE_TASK
from taskq.tools.chaos.flows import FlowStarter
from taskq.tools.chaos.options import ChaosOptions
from taskq.tools.chaos.queue import ChaosQueue
from taskq.tools.chaos.schedules import LIMITED_TASK, THROTTLED_TASK

BATCH = 500
# Keep this much work ready so workers never starve, and enqueues span the whole run.
READY_TARGET = 3000
# The share of tasks left at the default priority, as most of a real queue's are; the
# rest are spread over every priority, so leases cross levels all the time and each
# level empties and fills again.
DEFAULT_SHARE = 0.5
# The share of tasks sent as the concurrency-limited task (schedules.LIMITED_TASK), and
# as the rate-limited one (schedules.THROTTLED_TASK).
LIMITED_SHARE = 0.1
# Rate-limited tasks are sent in a run of THROTTLED_RUN in the middle of every
# THROTTLED_EVERY tasks, at the default priority, so each run is leased at once, past
# the limit's burst: some of every run are throttled.
THROTTLED_RUN = 10
THROTTLED_EVERY = 1000


def task_id(i: int) -> str:
    return f"t{i:07d}"


def priorities(seed: int, count: int) -> list[int]:
    """The priority of each of `count` tasks, the same for the same seed."""
    rng = random.Random(f"priorities:{seed}")
    return [PRIORITY.default if rng.random() < DEFAULT_SHARE
            else rng.randint(PRIORITY.low, PRIORITY.high) for _ in range(count)]


# The keys the limited tasks are spread over, as accounts would be: the limit holds per
# key, so each key's runs are counted on their own.
LIMIT_KEYS = ("acct-1", "acct-2", "acct-3")


def task_names(seed: int, count: int, shards: int = 1) -> list[str]:
    """The name each of `count` tasks is sent as (the simulated task, or one of the
    limited ones), the same for the same seed; no limited one on a sharded queue, where
    a limit cannot hold across shards."""
    rng = random.Random(f"limited:{seed}")
    middle = THROTTLED_EVERY // 2
    names = []
    for i in range(count):
        limited = rng.random() < LIMITED_SHARE and shards == 1
        throttled = shards == 1 and middle <= i % THROTTLED_EVERY < middle + THROTTLED_RUN
        names.append(THROTTLED_TASK if throttled else LIMITED_TASK if limited
                     else SIMULATE_TASK)
    return names


@dataclass
class Produced:
    """What Redis acknowledged to the producer, and what duplicate sends returned."""

    acknowledged: set[str] = field(default_factory=set)
    acknowledged_at: dict[str, float] = field(default_factory=dict)
    # Acknowledged tasks by priority.
    by_priority: Counter[int] = field(default_factory=Counter)
    resends: int = 0
    # The original task of each resend that created a task.
    resends_created: list[str] = field(default_factory=list)
    retries: int = 0
    done: threading.Event = field(default_factory=threading.Event)


class Producer(threading.Thread):
    """Enqueues tasks `t0000000…` with idempotency keys and seeded priorities, and every
    `resend_every`-th one again under a new id: the key must return the original and
    create nothing."""

    def __init__(self, queue: ChaosQueue, options: ChaosOptions, produced: Produced,
                 flows: FlowStarter | None = None) -> None:
        super().__init__(name="chaos-producer", daemon=True)
        self.queue = queue
        self.options = options
        self.produced = produced
        # Starts the run's workflows among its tasks, a share after each batch.
        self.flows = flows
        self.stopping = threading.Event()

    def run(self) -> None:
        o = self.options
        payload = {"args": [], "kwargs": {"charge": 1}}
        name = task_names(o.seed, o.tasks, o.shards)
        priority = [PRIORITY.default if n == THROTTLED_TASK else p
                    for n, p in zip(name, priorities(o.seed, o.tasks), strict=True)]
        for start in range(0, o.tasks, BATCH):
            if self.stopping.is_set():
                break
            self._wait_for_room()
            tasks = [NewTask(task_id(i), payload=payload, max_retries=o.max_retries,
                             idempotency_key=self.queue.key_for(task_id(i), f"k{i}"),
                             idempotency_ttl=o.idempotency_ttl,
                             priority=priority[i], name=name[i],
                             limit_key=LIMIT_KEYS[i % len(LIMIT_KEYS)]
                             if name[i] == LIMITED_TASK else None)
                     for i in range(start, min(o.tasks, start + BATCH))]
            self._send(tasks, resend=False)
            originals = [t for n, t in enumerate(tasks, start)
                         if o.resend_every and n % o.resend_every == 0]
            resends = [NewTask(self.queue.resend_id(f"r{t.task_id[1:]}", str(t.idempotency_key)),
                               payload=payload, max_retries=o.max_retries,
                               idempotency_key=t.idempotency_key, idempotency_ttl=o.idempotency_ttl,
                               priority=t.priority, name=t.name, limit_key=t.limit_key)
                       for t in originals]
            self._send(resends, resend=True, originals=[t.task_id for t in originals])
            if self.flows is not None:
                self.flows.start_share(start + len(tasks), o.tasks, self.stopping)
        self.produced.done.set()

    def _wait_for_room(self) -> None:
        while not self.stopping.is_set():
            try:
                if self.queue.counts().ready < READY_TARGET:
                    return
            except BrokerError:
                pass
            time.sleep(0.05)

    def _send(self, tasks: list[NewTask], resend: bool, originals: list[str] | None = None
              ) -> None:
        """Send until Redis answers; a resend of the same batch is safe by key and id."""
        while tasks and not self.stopping.is_set():
            try:
                results = self.queue.enqueue_many(tasks)
            except BrokerError:
                self.produced.retries += 1
                time.sleep(0.1)
                continue
            now = time.monotonic()
            if resend:
                self.produced.resends += len(results)
                self.produced.resends_created += [
                    original for original, r in zip(originals or [], results, strict=True)
                    if r.created]
            else:
                for task, result in zip(tasks, results, strict=True):
                    if result.task_id not in self.produced.acknowledged:
                        self.produced.by_priority[task.priority] += 1
                    self.produced.acknowledged.add(result.task_id)
                    self.produced.acknowledged_at[result.task_id] = now
            return
