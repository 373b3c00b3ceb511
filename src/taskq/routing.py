"""A producer's view of a sharded queue: each call sent to its shard's broker (see
`taskq.shards` for which shard and why), handles found from the id alone."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from taskq.aio import AsyncBroker
from taskq.broker import Broker
from taskq.errors import InvalidTaskError
from taskq.fields import new_task_fields, raise_at_item
from taskq.handle import TaskHandle
from taskq.keys import Registration, check_idempotency_key, check_task_id
from taskq.limits import BATCH_SIZE, shown
from taskq.outages import Outage, ride_out, ride_out_async
from taskq.results import NewTask
from taskq.shards import (
    SHARDS_KEY,
    Layout,
    check_stored,
    holding_calls,
    refuse_if_holding,
    register,
    route,
    shard_holding,
)


def by_shard(layout: Layout, tasks: Sequence[NewTask]) -> dict[int, list[int]]:
    """The positions in `tasks` of each shard's tasks, in order. A task with a key goes
    to the key's shard, which must be its id's too: else an id sent once with the key
    and once without would name a task on each of two shards (the Shards model's
    Shards_ExplicitIds.cfg). Ids taskq draws (`Layout.new_id`) always are; one a
    producer gives that is not is refused, before anything is sent."""
    groups: dict[int, list[int]] = {}
    for i, task in enumerate(tasks):
        try:
            shard = _shard_of(layout, task)
        except InvalidTaskError as e:
            raise_at_item(e, i, len(tasks), getattr(task, "task_id", None))
        groups.setdefault(shard, []).append(i)
    return groups


def _shard_of(layout: Layout, task: NewTask) -> int:
    # Checked here, before `route` hashes them, as new_task_fields checks them.
    shard = route(check_task_id(task.task_id), layout.count)
    if task.idempotency_key is not None:
        keyed = route(check_idempotency_key(task.idempotency_key), layout.count)
        if keyed != shard:
            raise InvalidTaskError(
                f"task id {task.task_id!r} and idempotency key "
                f"{shown(task.idempotency_key)} route to different shards of queue "
                f"{layout.queue!r} ({layout.shards[shard]}, {layout.shards[keyed]}), so "
                "the id could name a second task on its own shard: leave task_id out "
                "(taskq then draws one on the key's shard) or draw it with "
                "app.new_task_id(idempotency_key)")
    return shard


def checked(layout: Layout, tasks: Sequence[NewTask], payload_limits: Sequence[int]
            ) -> dict[int, tuple[list[int], list[list[Any]]]]:
    """Each shard's positions in `tasks` and their checked, encoded fields (see
    `taskq.fields`), every task checked before any is sent."""
    return {shard: (positions, new_task_fields([tasks[i] for i in positions],
                                               payload_limits[shard], positions, len(tasks)))
            for shard, positions in by_shard(layout, tasks).items()}


def in_order(n: int, sent: list[tuple[list[int], list[TaskHandle]]]) -> list[TaskHandle]:
    """The handles each shard gave for its positions, in the calls' order."""
    handles: list[TaskHandle | None] = [None] * n
    for positions, shard_handles in sent:
        for i, handle in zip(positions, shard_handles, strict=True):
            handles[i] = handle
    return [h for h in handles if h is not None]


class ShardedBroker:
    """Enqueues onto a sharded queue: every call is checked before any is sent, then
    each shard's share goes to it in `batch_size` batches, each one atomic step on its
    shard (as `Broker.enqueue_many`, whose promises hold per shard); handles come back
    in the order of the calls. The layout is registered (or checked against the one
    stored) on first use."""

    def __init__(self, layout: Layout, brokers: Sequence[Broker]) -> None:
        self.layout = layout
        self.brokers = tuple(brokers)
        self._registration = Registration()

    def enqueue_many(self, tasks: Sequence[NewTask], batch_size: int = 1000
                     ) -> list[TaskHandle]:
        batch_size = BATCH_SIZE.check(batch_size)
        shares = checked(self.layout, tasks, [b.max_payload_bytes for b in self.brokers])
        # One time for the whole enqueue to ride out an outage in (see taskq.outages),
        # every shard's queue registered before any task is sent.
        outage = Outage(self.brokers[0].producer_retry)
        ride_out(self._register, outage)
        for broker in self.brokers:
            broker.register_for(outage)
        # Each shard's error counts the tasks the shards before it took (they stay), and
        # names every task of the call, whose caller got no handle of any.
        ids = [task.task_id for task in tasks]
        sent: list[tuple[list[int], list[TaskHandle]]] = []
        for shard, (positions, fields) in shares.items():
            went = sum(len(handles) for _, handles in sent)
            sent.append((positions, self.brokers[shard].send_checked(
                fields, batch_size, went, ids, outage)))
        return in_order(len(tasks), sent)

    def handle(self, task_id: str) -> TaskHandle:
        """A handle on `task_id`, on the shard that holds it (see shard_holding)."""
        return self.brokers[shard_holding(check_task_id(task_id), self.layout.count)
                            ].handle(task_id)

    def _register(self) -> None:
        if self._registration.due():
            register(self.brokers[0].client, self.layout)
            self._registration.done()


class AsyncShardedBroker:
    """`ShardedBroker` for coroutines, on `AsyncBroker`s sharing one asyncio client."""

    def __init__(self, layout: Layout, brokers: Sequence[AsyncBroker]) -> None:
        self.layout = layout
        self.brokers = tuple(brokers)
        self._registration = Registration()

    async def enqueue_many(self, tasks: Sequence[NewTask], batch_size: int = 1000
                           ) -> list[TaskHandle]:
        batch_size = BATCH_SIZE.check(batch_size)
        shares = checked(self.layout, tasks, [b.max_payload_bytes for b in self.brokers])
        outage = Outage(self.brokers[0].producer_retry)  # as ShardedBroker's
        await ride_out_async(self._register, outage)
        for broker in self.brokers:
            await broker.register_for(outage)
        ids = [task.task_id for task in tasks]
        sent: list[tuple[list[int], list[TaskHandle]]] = []
        for shard, (positions, fields) in shares.items():
            went = sum(len(handles) for _, handles in sent)
            sent.append((positions, await self.brokers[shard].send_checked(
                fields, batch_size, went, ids, outage)))
        return in_order(len(tasks), sent)

    def handle(self, task_id: str) -> TaskHandle:
        """A handle on `task_id` on the shard that holds it (see shard_holding)."""
        return self.brokers[shard_holding(check_task_id(task_id), self.layout.count)
                            ].handle(task_id)

    async def aclose(self) -> None:
        await self.brokers[0].aclose()

    @property
    def closed(self) -> bool:
        """Whether its shards' one client was closed."""
        return self.brokers[0].closed

    @property
    def loop(self) -> asyncio.AbstractEventLoop | None:
        """The event loop its shards' one client belongs to (see AsyncBroker.loop)."""
        return self.brokers[0].loop

    async def _register(self) -> None:
        if self._registration.due():
            client: Any = self.brokers[0].client
            async with self.brokers[0].calling(
                    f"register the shards of queue {self.layout.queue!r}"):
                stored = await client.hget(SHARDS_KEY, self.layout.queue)
                if stored is None:
                    refuse_if_holding(self.layout.queue, [
                        await getattr(client, command)(key)
                        for command, key in holding_calls(self.layout.queue)])
                    await client.hsetnx(SHARDS_KEY, self.layout.queue, self.layout.stored)
                    stored = await client.hget(SHARDS_KEY, self.layout.queue)
            check_stored(self.layout, stored)
            self._registration.done()
