"""The chaos run's queue: one queue, or (with `--shards`) a sharded one, whose shards the
producer, the canceller, the waiter, the monitor and the checks all see through this."""

from __future__ import annotations

from dataclasses import dataclass

from taskq.broker import Broker, NewTask
from taskq.handle import TaskHandle
from taskq.keys import SCHEDULE_TASK_PREFIX
from taskq.results import Cancellation, QueueCounts, TaskRecord
from taskq.routing import ShardedBroker
from taskq.shards import Layout, register
from taskq.transport import Client

QUEUE = "chaos"


def key_of(task_id: str) -> str | None:
    """The idempotency key the run's producer gives a task: `k<i>` for its task `t<i>`
    and the resend `r<i>`; None for the other tasks (doomed ones, schedule ticks)."""
    digits = task_id[1:]
    if task_id[:1] in ("t", "r") and digits.isdigit():
        return f"k{int(digits)}"
    return None


@dataclass
class ChaosQueue:
    """The run's queue through one broker per shard (one in all when not sharded)."""

    brokers: list[Broker]
    layout: Layout | None = None

    @classmethod
    def open(cls, client: Client, shards: int, events_retention: int) -> ChaosQueue:
        layout = Layout.of(QUEUE, shards) if shards > 1 else None
        names = layout.shards if layout is not None else (QUEUE,)
        if layout is not None:
            register(client, layout)
        return cls([Broker(client, name, events_retention=events_retention)
                    for name in names], layout)

    @property
    def first(self) -> Broker:
        """Where the workers fire the schedules' ticks: the first shard."""
        return self.brokers[0]

    def broker_of(self, task_id: str) -> Broker:
        """The broker of the shard that holds `task_id`."""
        if self.layout is None or task_id.startswith(SCHEDULE_TASK_PREFIX):
            return self.first
        shard = self.layout.shard_of(task_id, key_of(task_id))
        return self.brokers[self.layout.shards.index(shard)]

    def enqueue_many(self, tasks: list[NewTask]) -> list[TaskHandle]:
        if self.layout is None:
            return self.first.enqueue_many(tasks)
        return ShardedBroker(self.layout, self.brokers).enqueue_many(tasks)

    def counts(self) -> QueueCounts:
        """Every shard's counts added up (read one shard after the other)."""
        each = [b.counts() for b in self.brokers]
        return QueueCounts(ready=sum(c.ready for c in each),
                           leased=sum(c.leased for c in each),
                           delayed=sum(c.delayed for c in each),
                           dead=sum(c.dead for c in each))

    def task(self, task_id: str) -> TaskRecord | None:
        return self.broker_of(task_id).task(task_id)

    def cancel(self, task_id: str) -> Cancellation:
        return self.broker_of(task_id).cancel(task_id)

    def handle(self, task_id: str) -> TaskHandle:
        return self.broker_of(task_id).handle(task_id)
