"""One tail reader per queue in a server process: it follows the log and wakes clients.

The hub reads the log only through the atomic gap-checked step, so its ring always
holds contiguous rows of one epoch; a client may take rows from the ring instead of
asking Redis, and its cursor still only advances through contiguous rows.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque

import redis

from taskq.connection import AsyncClient
from taskq.feed.backoff import Backoff
from taskq.feed.cancel import cancel_and_wait
from taskq.feed.cursor import Cursor
from taskq.feed.log import FeedLog, Framed, Gap, Rows
from taskq.feed.waker import Waker

TAIL_BATCH = 1000
# A hub reads its log again after this long with no news of it: a log reset or emptied
# by hand adds no entry past the tail for the waker to see.
REREAD_SECONDS = 2.0
# A hub's step (its wait for news, at most REREAD_SECONDS, and a read of its log) that
# has not ended this long after it began finds Redis not answering: a Redis paused or
# cut off by the network fails no call until the client's timeouts and retries run out,
# half a minute and more, and its clients would hear nothing of it meanwhile.
STEP_SECONDS = REREAD_SECONDS + 1.0
# Clients behind the ring read Redis through a fair (first come, first served) queue,
# this many at a time: well under the server's connection pool, so the hub's own tail
# reads and the JSON API always find a connection, and no client waits out the pool's
# timeout and loses its stream, however many fall behind at once.
CATCH_UP_READS = 32


class Hub:
    """Follows one queue's event log; `rows_after` serves from memory, `wait` sleeps
    until the log moves past a sequence number."""

    def __init__(self, feed_log: FeedLog, ring_size: int = 10_000,
                 catch_up_reads: int = CATCH_UP_READS,
                 catch_up: asyncio.Semaphore | None = None,
                 waker: Waker | None = None) -> None:
        self.log = feed_log
        self.ring: deque[Framed] = deque(maxlen=ring_size)
        self.tail = Cursor.start()
        self.clients = 0
        self.delivered = 0
        self._moved: asyncio.Future[None] | None = None
        # A server following several queues passes one semaphore to all its hubs, so
        # their clients' catch-up reads together stay under its connection pool.
        self.catch_up = catch_up or asyncio.Semaphore(catch_up_reads)
        # A server following several queues passes one waker to all its hubs, so they
        # wait for their logs in one read on one connection.
        self._own_waker = waker is None
        self.waker = waker or Waker(feed_log.client)
        self._task: asyncio.Task[None] | None = None
        self._started: asyncio.Future[None] | None = None
        # While the hub's own reads of its log fail: since when (the loop's clock) and
        # the last error. A client whose rows the ring holds never reads Redis itself,
        # so this is how it learns that nothing more will come.
        self.failing_since: float | None = None
        self.failure: Exception | None = None
        # Clients' catch-up reads under way, held so that one whose client left ends.
        self._reads: set[asyncio.Task[Rows | Gap]] = set()

    @property
    def client(self) -> AsyncClient:
        return self.log.client

    async def start(self) -> None:
        self.begin()
        await self.ready()

    def begin(self) -> None:
        """Start following in the background; `ready` says when the tail is known."""
        self._started = asyncio.get_running_loop().create_future()
        # Retrieved here, so a start no client waited for is not reported as unhandled.
        self._started.add_done_callback(lambda f: f.cancelled() or f.exception())
        self._task = asyncio.create_task(self._run(), name=f"feed-hub-{self.log.keys.queue}")

    async def ready(self) -> None:
        """Return once the hub knows the log's head, or raise what stopped it reading it.
        Shielded: a client that leaves while waiting must not cancel the hub's start."""
        assert self._started is not None, "begin() first"
        await asyncio.shield(self._started)

    async def read_for_client(self, cursor: Cursor, count: int) -> Rows | Gap:
        """A client's read of the log after `cursor`, taking its turn among the clients
        reading Redis at once (`catch_up`). Shielded: a client that leaves while Redis
        answers lets the read end by itself, and its connection goes back to the pool;
        cut short mid-reply, the connection would be closed, and a server whose clients
        come and go would open one for each that leaves during a read."""
        read = asyncio.ensure_future(self._catch_up_read(cursor, count))
        self._reads.add(read)
        read.add_done_callback(self._read_ended)
        return await asyncio.shield(read)

    async def _catch_up_read(self, cursor: Cursor, count: int) -> Rows | Gap:
        async with self.catch_up:
            # Timed once its turn has come, as the hub's own step is: a Redis that does
            # not answer fails no call until the client's timeouts run out.
            try:
                return await asyncio.wait_for(self.log.read(cursor, count), STEP_SECONDS)
            except TimeoutError:
                raise redis.TimeoutError(
                    f"Redis has not answered the feed's read for {STEP_SECONDS:g}s") from None

    def _read_ended(self, read: asyncio.Task[Rows | Gap]) -> None:
        self._reads.discard(read)
        # Retrieved: the failed read of a client that left is no one's error to report.
        if not read.cancelled():
            read.exception()

    async def stop(self) -> None:
        for read in list(self._reads):
            await cancel_and_wait(read)
        if self._task is not None:
            await cancel_and_wait(self._task)
        if self._started is not None and not self._started.done():
            self._started.cancel()
        if self._own_waker:
            await self.waker.close()

    def rows_after(self, cursor: Cursor, limit: int) -> list[Framed] | None:
        """Rows right after `cursor` from memory, or None when the ring cannot tell
        (another epoch, or the ring does not hold the cursor's own row, whose
        fingerprint must match: a row rewritten after a crash is a gap)."""
        if not self.ring or self.ring[0].cursor.epoch != cursor.epoch:
            return None
        first = self.ring[0].cursor.seq
        last = self.ring[-1].cursor.seq
        index = cursor.seq - first
        # Bounded by the ring's length as well as its last seq: ids missing from the
        # log make the ring shorter than the span of its seqs.
        if cursor.seq < first or cursor.seq > last or index >= len(self.ring):
            return None
        held = self.ring[index]
        if held.cursor.seq != cursor.seq:
            # Ids missing from the log (a counter set ahead, a row deleted by hand) put
            # the cursor's row elsewhere in the ring: reckoned by position, the rows
            # after it would skip some, or none would come.
            return None
        if cursor.ts and held.cursor.ts != cursor.ts:
            return None  # a rewritten row: only the atomic read may judge it
        start = index + 1
        return [self.ring[i] for i in range(start, min(len(self.ring), start + limit))]

    async def wait(self, cursor: Cursor, timeout: float, stalled: bool = False) -> None:
        """Return when the log has moved past `cursor` (or its epoch changed), or after
        `timeout` seconds; the caller reads again either way. `stalled`: a read from
        the cursor found nothing though the hub's tail says there is more (a counter
        ahead of the log's rows, a log emptied but for its epoch): block until the hub
        next moves, as if the cursor were at the tail, rather than read again at once
        for ever."""
        moved = self.tail.epoch != cursor.epoch or self.tail.seq > cursor.seq
        if moved and not stalled:
            return
        if self._moved is None or self._moved.done():
            self._moved = asyncio.get_running_loop().create_future()
        # Shielded: one client's timeout must not cancel the future every client shares.
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout):
                await asyncio.shield(self._moved)

    def _notify(self) -> None:
        if self._moved is not None and not self._moved.done():
            self._moved.set_result(None)

    async def _run(self) -> None:
        assert self._started is not None
        try:
            self.tail = await self.log.head()
        except Exception as e:
            self._started.set_exception(e)
            return
        self._started.set_result(None)
        await self._follow()

    async def _follow(self) -> None:
        backoff = Backoff(f"feed hub for {self.log.keys.queue!r}")
        loop = asyncio.get_running_loop()
        while True:
            began = loop.time()
            overdue = loop.call_later(STEP_SECONDS, self._overdue, began)
            try:
                await self._step()
            except asyncio.CancelledError:
                raise
            except Exception as e:
                self._failed(e)
                await backoff.failed(e)
                continue
            finally:
                overdue.cancel()
            backoff.succeeded()

    def _overdue(self, began: float) -> None:
        """The step begun at `began` has not ended: Redis has not answered since, for
        all that no call of it has failed yet. Its end, a success, clears this."""
        self._failed(redis.TimeoutError(
            f"Redis has not answered the feed's reads for {STEP_SECONDS:g}s"), began)

    def _failed(self, error: Exception, since: float | None = None) -> None:
        if self.failing_since is None:
            self.failing_since = asyncio.get_running_loop().time() if since is None \
                else since
            # Clients asleep at the tail wake to bound their wait by the outage.
            self._notify()
        self.failure = error

    async def _step(self) -> None:
        result = await self.log.read(self.tail, TAIL_BATCH)
        # Cleared before the wait below, which may last seconds after Redis is back.
        self.failing_since = self.failure = None
        if isinstance(result, Gap):
            # The log was reset or trimmed past us: restart the ring at the head.
            self.ring.clear()
            moved, self.tail = result.resume_at != self.tail, result.resume_at
            if moved:
                self._notify()
                return
            # The same gap again: the head names a row the log does not hold (its last
            # row deleted by hand, its counter set ahead). Only the next append can
            # move it: wait for that below, as at the head, not read again at once.
        elif result.rows:
            self.ring.extend(row.framed() for row in result.rows)
            self.tail = result.rows[-1].cursor
            self._notify()
            if len(result.rows) == TAIL_BATCH:
                return
        await self.waker.wait(self.log.keys.events, self.tail.seq, REREAD_SECONDS)
