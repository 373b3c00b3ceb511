"""Producing from asyncio: enqueue and wait for results without blocking the event loop.

`AsyncBroker` runs the same scripts as `Broker`, built and read by the same functions
(`taskq.fields`, `taskq.calls`), on a `redis.asyncio` client; it offers what a
producer needs (enqueue, read, wait), not what a worker does.
"""

from __future__ import annotations

import asyncio
import contextlib
import weakref
from collections.abc import AsyncIterator, Sequence
from datetime import datetime
from functools import partial
from typing import Any

from redis.commands.core import AsyncScript

from taskq.boundary import block_limit, block_seconds, redis_errors, write_refused
from taskq.calls import (
    WATCHED,
    can_run_call,
    cancel_call,
    counts_call,
    counts_from,
    enqueue_calls,
    enqueue_errors,
    enqueued,
    record_from,
    refuse_unrunnable,
    watch_call,
    watched_alone,
)
from taskq.connection import MAX_CONNECTIONS, AsyncClient, async_client
from taskq.errors import BrokerError, ConfigError, TaskqError
from taskq.fields import enqueue_fields, new_task_fields
from taskq.handle import TaskHandle
from taskq.keys import QUEUES_KEY, QueueKeys, Registration, check_task_id
from taskq.limits import (
    BATCH_SIZE,
    COMPLETED_TTL,
    EVENTS_RETENTION,
    IDEMPOTENCY_TTL,
    MAX_PAYLOAD_BYTES,
    PRIORITY,
    PRODUCER_RETRY,
    TIMEOUT,
    Seconds,
    to_ms,
)
from taskq.outages import Outage, ride_out_async
from taskq.results import SIMULATE_TASK, Cancellation, NewTask, QueueCounts, TaskRecord, Watched
from taskq.scripts import PRODUCER_SCRIPTS, source
from taskq.settings import Settings
from taskq.shards import SHARDS_KEY, refuse_sharded

__all__ = ["AsyncBroker"]

# The gate of each client's blocking waits (result_async's BLMOVEs): half its pool's
# connections at once, so the other half serve the short commands (each waiter's watch
# between two blocks, enqueues). Past that a wait queues at the gate, first come first
# served, within its own timeout: the pool's own queue is not in order, and a burst of
# waits over its size had the later ones fail "every connection in use" while the
# first ones kept theirs.
_GATES: weakref.WeakKeyDictionary[Any, asyncio.Semaphore] = weakref.WeakKeyDictionary()

# The clients an AsyncBroker has closed (brokers of one sharded queue share one).
_CLOSED: weakref.WeakSet[Any] = weakref.WeakSet()
# How many calls are under way on each client: the last to end on a closed one closes
# it again, once (see `AsyncBroker._open`).
_UNDER_WAY: weakref.WeakKeyDictionary[Any, int] = weakref.WeakKeyDictionary()
# The event loop each client's connections belong to: the one a broker on it was made
# in, or, made outside one, its first call's. Kept by client, not by broker: a sharded
# queue's brokers share one.
_LOOPS: weakref.WeakKeyDictionary[Any, asyncio.AbstractEventLoop] = \
    weakref.WeakKeyDictionary()


def _closed(words: str) -> TaskqError:
    return TaskqError(f"cannot {words}: this asyncio client was closed (app.aclose(), or "
                      "its AsyncBroker's aclose()); the app makes a new one on its next "
                      "use: app.handle_async(task_id) for a new handle")


def _blocking_gate(client: AsyncClient) -> asyncio.Semaphore:
    gate = _GATES.get(client)
    if gate is None:
        pool = getattr(client, "connection_pool", None)
        most = getattr(pool, "max_connections", None) or MAX_CONNECTIONS
        gate = _GATES[client] = asyncio.Semaphore(max(1, most // 2))
    return gate


class AsyncBroker:
    """A queue on a Redis server, for coroutines: `Broker`'s producer operations, each
    awaited, each the same atomic script with the same checks and errors.

    It belongs to the event loop its client first connects on: make one per loop, and
    `await aclose()` it on that loop. Scripts go as EVALSHA, loaded again by redis-py
    when the server lost them (NOSCRIPT), on a single node and a cluster alike."""

    def __init__(
        self,
        client: AsyncClient,
        queue: str = "default",
        *,
        events_retention: int = EVENTS_RETENTION.default,
        max_payload_bytes: int = MAX_PAYLOAD_BYTES.default,
        completed_ttl: float = COMPLETED_TTL.default,
        producer_retry: float = PRODUCER_RETRY.default,
    ) -> None:
        self.keys = QueueKeys(queue)
        # How long an enqueue sends its tasks again while Redis cannot answer.
        self.producer_retry = PRODUCER_RETRY.check(producer_retry, error=ConfigError)
        self.events_retention = EVENTS_RETENTION.check(events_retention, error=ConfigError)
        self.max_payload_bytes = MAX_PAYLOAD_BYTES.check(max_payload_bytes, error=ConfigError)
        completed_ttl = COMPLETED_TTL.check(completed_ttl, error=ConfigError)
        self.completed_ttl_ms = to_ms(completed_ttl, "completed_ttl")
        self.client = client
        self.queue = queue
        # Made in a loop, its client's connections belong to it (see `loop`).
        with contextlib.suppress(RuntimeError):
            _LOOPS.setdefault(client, asyncio.get_running_loop())
        self._block_limit = block_limit(client)
        self._enqueue = self._script("enqueue")
        self._watch = self._script("watch")
        self._cancel = self._script("cancel")
        self._snapshot = self._script("snapshot")
        self._live_workers = self._script("live_workers")
        self._can_run = self._script("can_run")
        self._registration = Registration()
        self._permitted: set[str] = set()  # see Broker._permitted

    def _script(self, name: str) -> AsyncScript:
        return self.client.register_script(source(name))

    @classmethod
    def from_settings(cls, settings: Settings, queue: str | None = None,
                      client: AsyncClient | None = None) -> AsyncBroker:
        """An AsyncBroker for `queue` on `client` (brokers of several queues may share
        one), or on a new client for `settings.redis_url`, which connects on its first
        command."""
        return cls(
            async_client(settings) if client is None else client,
            settings.queue if queue is None else queue,
            events_retention=settings.events_retention,
            max_payload_bytes=settings.max_payload_bytes,
            completed_ttl=settings.completed_ttl_seconds,
            producer_retry=settings.producer_retry_seconds,
        )

    async def aclose(self) -> None:
        """Close the client and its connections: calls after it are refused, and a call
        under way closes what it connected again when it ends."""
        _CLOSED.add(self.client)
        await self.client.aclose()

    @property
    def loop(self) -> asyncio.AbstractEventLoop | None:
        """The event loop its client's connections belong to (None until one is known):
        a call in another says so rather than fail inside redis-py ("Event loop is
        closed")."""
        return _LOOPS.get(self.client)

    @property
    def closed(self) -> bool:
        """Whether its client was closed (by this broker or another sharing it)."""
        return self.client in _CLOSED

    @contextlib.asynccontextmanager
    async def _open(self, words: str) -> AsyncIterator[None]:
        """Around a call on the client, to `words`: refused in another event loop than
        the one the broker was made in (made outside one: its first call's), and once
        the client is closed. A call under way
        as it closed (a result wait) reconnects by its retry, and fails, if it does,
        saying the client was closed; the last such call to end closes what they
        connected again. Each closing as it ended cut the others' new connections, so
        that they failed saying Redis could not be reached."""
        running = asyncio.get_running_loop()
        if _LOOPS.setdefault(self.client, running) is not running:
            raise TaskqError(f"cannot {words}: this asyncio client was made in another "
                             "event loop (or, made outside one, first used in another), "
                             "whose connections it holds, and cannot be used in this one: "
                             "make one in this loop (app.handle_async(task_id) for a "
                             "handle, app.async_broker for a broker)")
        client = self.client
        if client in _CLOSED:
            raise _closed(words)
        _UNDER_WAY[client] = _UNDER_WAY.get(client, 0) + 1
        try:
            yield
        except Exception as e:
            if client in _CLOSED:
                raise _closed(words) from e
            raise
        finally:
            left = _UNDER_WAY.pop(client) - 1
            if left:
                _UNDER_WAY[client] = left
            elif client in _CLOSED:
                await client.aclose()

    @contextlib.asynccontextmanager
    async def calling(self, words: str) -> AsyncIterator[None]:
        """Around a call on the client, to `words`: refused once the client is closed
        (see `_open`), its Redis errors as `redis_errors(words)` gives them."""
        async with self._open(words):
            with redis_errors(words):
                yield

    # -- producers ---------------------------------------------------------------------

    async def enqueue(
        self,
        task_id: str,
        delay: Seconds = 0,
        max_retries: int = 3,
        payload: dict[str, Any] | None = None,
        idempotency_key: str | None = None,
        idempotency_ttl: int = IDEMPOTENCY_TTL.default,
        *,
        name: str = SIMULATE_TASK,
        run_at: datetime | None = None,
        result_ttl: Seconds | None = None,
        priority: int = PRIORITY.default,
    ) -> TaskHandle:
        """`Broker.enqueue`, awaited: create a task unless its id or idempotency key
        already names one. The handle waits with `await handle.result_async()`."""
        fields = enqueue_fields(task_id, name, payload, delay, max_retries, idempotency_key,
                                idempotency_ttl, self.max_payload_bytes, run_at, result_ttl,
                                priority)
        return (await self.send_checked([fields], 1))[0]

    async def enqueue_many(self, tasks: Sequence[NewTask],
                           batch_size: int = 1000) -> list[TaskHandle]:
        """`Broker.enqueue_many`, awaited: every task checked before any is sent, then
        `batch_size` per atomic script call; handles come back in order."""
        batch_size = BATCH_SIZE.check(batch_size)
        return await self.send_checked(new_task_fields(tasks, self.max_payload_bytes),
                                           batch_size)

    async def send_checked(self, fields: list[list[Any]], batch_size: int, sent: int = 0,
                           call_ids: Sequence[str] | None = None,
                           outage: Outage | None = None) -> list[TaskHandle]:
        """`Broker.send_checked`, awaited."""
        if outage is None:
            outage = Outage(self.producer_retry)
        if self._registration.due():
            await self.register_for(outage)
        results: list[TaskHandle] = []
        for keys, args in enqueue_calls(self.keys, self.events_retention, fields, batch_size):
            async with self._open("enqueue a task"):
                with enqueue_errors(sent + len(results), outage, fields, call_ids):
                    reply = await ride_out_async(
                        partial(self._enqueue, keys=keys, args=args), outage)
            outage.step_done()
            results.extend(TaskHandle(task_id, created, async_broker=self)
                           for task_id, created in enqueued(reply))
        return results

    async def register_for(self, outage: Outage) -> None:
        """`Broker.register_for`, awaited."""
        if self._registration.due():
            await ride_out_async(self.register_queue, outage)
            outage.step_done()

    async def register_queue(self) -> None:
        """`Broker.register_queue`, awaited: name the queue in the registry of queues
        (again each REGISTER_AGAIN_SECONDS), so dashboards find it."""
        if self._registration.due():
            async with self.calling("register the queue"):
                stored = await self.client.hget(SHARDS_KEY, self.queue)
            refuse_sharded(self.queue, stored)
            await self.permit(PRODUCER_SCRIPTS)
            async with self.calling("register the queue"):
                await self.client.sadd(QUEUES_KEY, self.queue)
            self._registration.done()

    async def permit(self, scripts: tuple[str, ...],
                     doing: str = "check what the ACL user may run") -> None:
        """`Broker.permit`, awaited: ConfigError if the ACL user may not run a command
        one of `scripts` not asked about on this broker yet calls."""
        unasked = tuple(name for name in scripts if name not in self._permitted)
        if unasked:
            keys, args = can_run_call(self.keys, unasked)
            async with self.calling(doing):
                reply = await self._can_run(keys=keys, args=args)
            refuse_unrunnable(self.queue, reply)
            self._permitted.update(unasked)

    async def cancel(self, task_id: str, only: str | None = None) -> Cancellation:
        """`Broker.cancel`, awaited: a task not running ends cancelled now; a running one
        is stopped by its worker, told at its next heartbeat."""
        keys, args = cancel_call(self.keys, task_id, self.events_retention,
                                 self.completed_ttl_ms, only)
        outage = Outage(self.producer_retry)
        await ride_out_async(partial(self.permit, ("cancel",), "cancel a task"), outage)
        async with self.calling("cancel a task"):
            reply = await ride_out_async(partial(self._cancel, keys=keys, args=args), outage)
        return Cancellation.from_reply(task_id, reply)

    def handle(self, task_id: str) -> TaskHandle:
        """A handle on the task `task_id` (which may not exist yet, or any more), whose
        `status_async()` and `result_async()` use this broker."""
        return TaskHandle(check_task_id(task_id), False, async_broker=self)

    # -- reads and waits ---------------------------------------------------------------

    async def task(self, task_id: str) -> TaskRecord | None:
        """The task's stored record, or None if there is none."""
        key = self.keys.task(check_task_id(task_id))
        async with self.calling("read a task's record"):
            raw = await self.client.hgetall(key)
        return record_from(task_id, raw)

    async def counts(self) -> QueueCounts:
        """How many ids are ready, leased, delayed and dead, read in one atomic step."""
        keys, args = counts_call(self.keys)
        async with self.calling("count the queue's tasks"):
            reply = await self._snapshot(keys=keys, args=args)
        return counts_from(reply)

    async def watch(self, task_id: str, mark: bool = True) -> Watched | None:
        """`Broker.watch`, awaited: how the task stands, None if it has no record; with
        `mark`, a task that has not ended will wake `wait_done` when it ends."""
        keys, args = watch_call(self.keys, task_id, mark)
        try:
            async with self.calling("read a task's result"):
                reply = await self._watch(keys=keys, args=args)
        except BrokerError as e:
            if not write_refused(e):
                raise
            async with self.calling("read a task's result"):
                reply = watched_alone(await self.client.hmget(keys[0], WATCHED))
        return Watched.from_reply(reply)

    async def has_workers(self) -> bool:
        """`Broker.has_workers`, awaited."""
        async with self.calling("read the workers"):
            return bool(await self._live_workers(keys=[self.keys.workers]))

    async def wait_done(self, task_id: str, timeout: float) -> bool:
        """`Broker.wait_done`, awaited: until a task that `watch` marked ends, or
        `timeout` seconds pass, the loop runs other coroutines while Redis holds the
        BLMOVE. True if it woke for an end (call `watch` again to read it); False too
        when the client's blocking connections stayed in use that long."""
        done = self.keys.done(check_task_id(task_id))
        timeout = TIMEOUT.check(timeout)
        gate, clock = _blocking_gate(self.client), asyncio.get_running_loop().time
        began = clock()
        try:
            async with asyncio.timeout(timeout):
                await gate.acquire()
        except TimeoutError:
            return False
        try:
            left = block_seconds(timeout - (clock() - began), self._block_limit)
            async with self.calling("wait for a task to end"):
                # Redis takes a fractional timeout; redis-py's hint says int but
                # passes it.
                moved = await self.client.blmove(
                    done, done, left, "RIGHT", "LEFT")  # type: ignore[arg-type]
        finally:
            gate.release()
        return moved is not None
