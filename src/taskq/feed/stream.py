"""One client's feed: resume (gap or replay), then live rows, as server-sent event frames."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass

import redis

from taskq.errors import BrokerError
from taskq.feed.cursor import Cursor, Malformed
from taskq.feed.frames import gap_frame
from taskq.feed.hub import Hub
from taskq.feed.log import Framed, Gap, Row

# What a read of the log raises when Redis cannot answer.
REDIS_ERRORS = (redis.RedisError, BrokerError)


@dataclass(frozen=True)
class StreamSettings:
    """Batch size of a read, the longest silence before a comment heartbeat, and how
    long a stream that has every row rides out Redis failing under it (its own reads,
    or the hub's while the ring serves it)."""

    batch: int = 500
    heartbeat_seconds: float = 15.0
    retry_ms: int = 1000
    # A restart takes moments; a longer outage ends the stream (its caller sends the
    # client an `unavailable` event that says when to come back).
    outage_grace_seconds: float = 5.0


async def feed_frames(
    hub: Hub, start: Cursor | Malformed, settings: StreamSettings
) -> AsyncIterator[str]:
    """Frames for one client from `start`: a gap or the missed rows, then live rows.

    Every batch is either taken from the hub's contiguous ring or read from Redis by
    the atomic gap-checked script, so the cursor never skips a row unannounced and no
    row is sent twice.
    """
    yield f"retry: {settings.retry_ms}\n\n"
    if isinstance(start, Malformed):
        async with hub.catch_up:  # a barrage of bad ids waits its turn like catch-ups
            probed = await hub.log.probe()
        gap = dataclasses.replace(probed, reason="malformed")
        cursor = gap.resume_at
        yield gap_frame(start.echo, gap)
    else:
        cursor = start
    stalled = False
    # When reads began to fail while this client had every row the hub had seen.
    failing_since: float | None = None
    while True:
        rows: Sequence[Row | Framed] | None = hub.rows_after(cursor, settings.batch)
        if rows is None:
            # A cursor with no epoch yet binds to the log with a one-row read, after
            # which the hub's ring may serve the rest: a thousand new clients then cost
            # a thousand small reads, not a thousand replays of a batch each.
            count = settings.batch if cursor.epoch else 1
            seen = hub.tail
            began = asyncio.get_running_loop().time()
            try:
                result = await hub.read_for_client(cursor, count)
                failing_since = None
            except REDIS_ERRORS:
                # A client behind the hub cannot be served: it hears so at once. One at
                # the hub's tail (its ring empty: nothing has come since the hub began)
                # misses nothing while Redis restarts, so it waits, as one whose rows
                # the ring holds does without reading, until the grace runs out,
                # counted from when the first failed read began (one Redis did not
                # answer took seconds to fail), or the hub's own reads began to fail.
                now = asyncio.get_running_loop().time()
                failing_since = min(began if failing_since is None else failing_since,
                                    now if hub.failing_since is None else hub.failing_since)
                if cursor != hub.tail or now - failing_since >= settings.outage_grace_seconds:
                    raise
            if failing_since is not None:
                left = settings.outage_grace_seconds - (
                    asyncio.get_running_loop().time() - failing_since)
                await hub.wait(cursor, max(0.0, min(settings.heartbeat_seconds, left)),
                               stalled=True)
                yield ": keepalive\n\n"
                continue
            if isinstance(result, Gap) and result.resume_at != cursor:
                yield gap_frame(cursor.wire_id if cursor.seq else "", result)
                cursor = result.resume_at
                continue
            # Redis itself has nothing after the cursor (or, at a head no row holds,
            # the gap just sent again): until the hub moves, another read would find
            # nothing else, whatever its tail says. A hub that moved while the read was
            # under way may have seen rows the read was too early for: read again.
            rows = [] if isinstance(result, Gap) else result.rows
            stalled = not rows and hub.tail == seen
            del result
        if rows:
            hub.delivered += len(rows)
            cursor = rows[-1].cursor
            frames = "".join([row.frame for row in rows])
            # Rows read from Redis are this client's own. A slow client holds its
            # batch for up to its send timeout: let it hold the batch's text, not also
            # its rows' objects (several times the text), which hundreds of clients
            # catching up at once would multiply.
            del rows
            stalled = False
            yield frames
            continue
        before = hub.tail
        await hub.wait(cursor, outage_bound(hub, settings), stalled)
        if hub.tail == before and (stalled or hub.tail.seq <= cursor.seq):
            yield ": keepalive\n\n"


def outage_bound(hub: Hub, settings: StreamSettings) -> float:
    """How long a client with nothing to send may wait for the hub: a heartbeat, or
    less while the hub's reads fail, so that the client hears `unavailable` (this
    raises the hub's error) once they have failed for the grace, as it would from a
    read of its own, instead of keeping alive a stream to which nothing will come.
    Each client gets an error of its own: one object raised by hundreds of streams
    would gather all their tracebacks."""
    if hub.failing_since is None or not isinstance(hub.failure, REDIS_ERRORS):
        return settings.heartbeat_seconds
    down = asyncio.get_running_loop().time() - hub.failing_since
    if down >= settings.outage_grace_seconds:
        raise BrokerError(str(hub.failure))
    return min(settings.heartbeat_seconds, settings.outage_grace_seconds - down)
