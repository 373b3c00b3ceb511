"""The chaos run's queue: one queue, or (with `--shards`) a sharded one, whose shards the
producer, the canceller, the waiter, the monitor and the checks all see through this."""

from __future__ import annotations

from dataclasses import dataclass

from taskq.broker import Broker, NewTask
from taskq.handle import TaskHandle
from taskq.results import Cancellation, QueueCounts, TaskRecord
from taskq.routing import ShardedBroker
from taskq.shards import Layout, register, shard_holding
from taskq.transport import Client

QUEUE = "chaos"


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
        """The broker of the shard that holds `task_id`: the shard its id routes to (a
        schedule's tick, the shard the workers fire on)."""
        return self.brokers[0 if self.layout is None
                            else shard_holding(task_id, self.layout.count)]

    def key_for(self, task_id: str, base: str) -> str:
        """The idempotency key of the producer's task `task_id`: `base`, or on a sharded
        queue the first `base.<n>` on the id's shard (a key must route with its id)."""
        return base if self.layout is None else self.layout.matching(base, task_id)

    def resend_id(self, base: str, key: str) -> str:
        """The id of a resend under `key`: `base`, or on a sharded queue the first
        `base.<n>` on the key's shard."""
        return base if self.layout is None else self.layout.matching(base, key)

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
