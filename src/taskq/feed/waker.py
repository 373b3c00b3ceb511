"""One blocking XREAD for every queue a server follows: it wakes the hubs whose log moved.

A hub waits here between its reads of the log. The waker reads all the waiting hubs'
logs in one `XREAD BLOCK` on one pooled connection at a time, so a hub idle on a quiet
queue costs an entry in that read, not a connection, and the number of queues a
server can follow is not bounded by its connection pool.
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass

import redis
from redis.crc import key_slot
from redis.typing import KeyT, StreamIdT

from taskq.boundary import text
from taskq.connection import AsyncClient
from taskq.feed.backoff import Backoff
from taskq.feed.cancel import cancel_and_wait

# A hub that starts waiting while a read is out is in the next read: it hears of its
# log moving at most this much late. Short enough to be live on a dashboard, long enough
# that a server whose queues are all quiet makes a handful of cheap reads a second.
WAKE_BLOCK_MS = 50


@dataclass(frozen=True)
class Waiter:
    """A hub waiting for its log (`key`) to hold an entry past `seq`."""

    key: str
    seq: int
    woken: asyncio.Future[None]


class Waker:
    """Wakes each waiting hub when its log holds an entry past the hub's tail. Runs
    while some hub waits. A read Redis refuses (a key of another type, a tail no
    stream id can hold) is tried again key by key, and only the waiters of the keys
    it refuses get the error, to report and back off from in their own hub; a read
    that fails for want of Redis wakes every waiter, to meet the error in its own
    read, as it would alone."""

    def __init__(self, client: AsyncClient, by_slot: bool = False) -> None:
        self.client = client
        # On a Redis Cluster one command reads the keys of one slot, and each queue's
        # keys share a slot (their hash tag), most often one no other queue has: there
        # the waker reads each slot's keys in one pipeline, without blocking, and
        # pauses WAKE_BLOCK_MS between reads that find nothing.
        self.by_slot = by_slot
        self.waiting: dict[int, Waiter] = {}
        self._someone = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    async def wait(self, key: str, seq: int, timeout: float) -> None:
        """Return when the stream `key` holds an entry past `seq-0`, or after `timeout`
        seconds, whichever is first; the caller reads its log again either way."""
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._run(), name="feed-waker")
        waiter = Waiter(key, seq, asyncio.get_running_loop().create_future())
        token = id(waiter)
        self.waiting[token] = waiter
        self._someone.set()
        try:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(timeout):
                    await waiter.woken
        finally:
            self.waiting.pop(token, None)

    async def close(self) -> None:
        if self._task is not None:
            await cancel_and_wait(self._task)
            self._task = None

    async def _run(self) -> None:
        backoff = Backoff("feed waker")
        while True:
            if not self.waiting:
                self._someone.clear()
                await self._someone.wait()
            try:
                await self._turn()
            except asyncio.CancelledError:
                raise
            except Exception as e:
                self._wake(None)
                await backoff.failed(e)
                continue
            backoff.succeeded()

    async def _turn(self) -> None:
        """One shared read, and the waiters it concerns woken or refused."""
        if self.by_slot:
            moved = await self._read_by_slot()
            self._wake(moved)
            if not moved:
                await asyncio.sleep(WAKE_BLOCK_MS / 1000)
            return
        try:
            moved = await self._read()
        except redis.ResponseError:
            moved, refused = await self._read_each(self._streams())
            if not refused:
                raise  # no one key is to blame: as for Redis being away
        self._wake(moved)

    def _streams(self) -> dict[KeyT, StreamIdT]:
        """Each key waited on, with the id to read past: its lowest waiter's seq."""
        streams: dict[str, int] = {}
        for waiter in self.waiting.values():
            streams[waiter.key] = min(streams.get(waiter.key, waiter.seq), waiter.seq)
        ids: dict[KeyT, StreamIdT] = {key: f"{seq}-0" for key, seq in streams.items()}
        return ids

    async def _read(self, streams: dict[KeyT, StreamIdT] | None = None,
                    block: int | None = WAKE_BLOCK_MS) -> set[str]:
        """The keys, of `streams` (those waited on now), that hold an entry past their
        id: after `block` ms at most."""
        return keys_of(await self.client.xread(streams or self._streams(), count=1,
                                               block=block))

    async def _read_by_slot(self) -> set[str]:
        """The keys waited on now that hold an entry past their id, read a slot at a
        time in one pipeline; the waiters of a key Redis refuses get its error."""
        slots: dict[int, dict[KeyT, StreamIdT]] = {}
        for key, after in self._streams().items():
            slots.setdefault(key_slot(text(key).encode()), {})[key] = after
        pipe = self.client.pipeline(transaction=False)
        for streams in slots.values():
            pipe.xread(streams, count=1)
        replies = await pipe.execute(raise_on_error=False)
        moved: set[str] = set()
        for streams, reply in zip(slots.values(), replies, strict=True):
            if isinstance(reply, redis.ResponseError):
                # Two queues may share a slot: refuse only the keys refused alone.
                moved |= (await self._read_each(streams))[0]
            elif isinstance(reply, Exception):
                raise reply
            else:
                moved |= keys_of(reply)
        return moved

    async def _read_each(self, streams: dict[KeyT, StreamIdT]) -> tuple[set[str], int]:
        """`streams` read one key at a time, without blocking: the keys that moved, and
        how many waiters were refused (those of a key Redis refuses get its error)."""
        moved: set[str] = set()
        refused = 0
        for key, after in streams.items():
            try:
                moved |= await self._read({key: after}, block=None)
            except redis.ResponseError as e:
                refused += self._refuse(text(key), e)
        return moved, refused

    def _refuse(self, key: str, error: redis.ResponseError) -> int:
        """Fail the waiters of `key` with `error`; returns how many."""
        refused = 0
        for token, waiter in list(self.waiting.items()):
            if waiter.key == key:
                del self.waiting[token]
                if not waiter.woken.done():
                    waiter.woken.set_exception(error)
                    refused += 1
        return refused

    def _wake(self, moved: set[str] | None) -> None:
        """Wake the waiters on `moved` keys, or every waiter for None, and leave them
        out of the next read: until they wait again they are reading, and their old
        seq would end that read at once. A waiter that came after the read began may be
        woken for an entry it has read: it reads once more and finds nothing, which
        costs a read and loses nothing."""
        for token, waiter in list(self.waiting.items()):
            if moved is None or waiter.key in moved:
                del self.waiting[token]
                if not waiter.woken.done():
                    waiter.woken.set_result(None)


def keys_of(reply: object) -> set[str]:
    """The stream keys an XREAD reply holds entries of: RESP2 or RESP3, and bytes on a
    client that does not decode replies."""
    if not reply:
        return set()
    if isinstance(reply, dict):
        return {text(key) for key in reply}
    assert isinstance(reply, list), reply
    return {text(item[0]) for item in reply}
