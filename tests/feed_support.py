"""What the feed tests share: a producer on the real log, the log as Redis holds it,
and an SSE client that parses what `feed_frames` sends."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any, TypeVar, cast

import redis
import redis.asyncio as aioredis

from taskq.broker import Broker
from taskq.feed.cursor import Cursor, parse_cursor
from taskq.feed.hub import Hub
from taskq.feed.log import FeedLog
from taskq.feed.stream import StreamSettings, feed_frames
from taskq.keys import QueueKeys

QUEUE = "feed"
KEYS = QueueKeys(QUEUE)
# Small batches so a replay takes several reads; a short heartbeat so "quiet" comes soon.
QUICK = StreamSettings(batch=4, heartbeat_seconds=0.02, retry_ms=1000)
DEADLINE = 10.0

T = TypeVar("T")


def run(scenario: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(scenario)


# -- the log, as the test sees it in Redis -----------------------------------------------


class Producer:
    """Appends events through the real scripts (enqueue, lease, ack), trimming the log to
    `retention` rows as production does."""

    def __init__(self, client: redis.Redis, retention: int) -> None:
        self.broker = Broker(client, QUEUE, events_retention=retention)
        self.made = 0
        self.turn = 0

    def append(self, n: int = 1) -> None:
        """Append exactly `n` events: enqueues, and now and then a lease and its ack."""
        while n > 0:
            self.turn += 1
            if n >= 2 and self.turn % 3 == 0 and self.broker.counts().ready:
                got = self.broker.lease("w", 30)
                assert got is not None and self.broker.ack(*got)
                n -= 2
            else:
                self.made += 1
                assert self.broker.enqueue(f"t{self.made}").created
                n -= 1


def bounds(client: redis.Redis) -> tuple[str, int, int]:
    """(epoch, oldest retained seq, head seq) of the log right now; oldest = head + 1 when
    it holds nothing."""
    epoch = str(client.get(KEYS.epoch) or "")
    head = int(client.get(KEYS.seq) or 0)
    first = client.xrange(KEYS.events, count=1)
    oldest = int(str(first[0][0]).split("-")[0]) if first else head + 1
    return epoch, oldest, head


def retained(client: redis.Redis, low: int, high: int) -> list[int]:
    """The seqs in low..high the log still holds."""
    rows = client.xrange(KEYS.events, min=f"{low}-0", max=f"{high}-0") or []
    return [int(str(i).split("-")[0]) for i, _ in rows]


def row_ts(client: redis.Redis, seq: int) -> str:
    rows = client.xrange(KEYS.events, min=f"{seq}-0", max=f"{seq}-0")
    fields = rows[0][1] if rows else None
    assert fields is not None, f"row {seq} is not in the log"
    return str(fields["ts"])


def cursor_at(client: redis.Redis, seq: int) -> Cursor:
    """The cursor of a client whose last row is `seq` (which the log must hold)."""
    return Cursor(str(client.get(KEYS.epoch)), seq, row_ts(client, seq))


# -- one SSE client, as it parses what feed_frames sends ---------------------------------


@dataclass(frozen=True)
class Frame:
    """One server-sent event: a row (its type as `event`), a `gap`, a `keepalive`
    comment, or the opening `retry` advice."""

    event: str
    id: str = ""
    data: dict[str, Any] = field(default_factory=dict)

    @property
    def seq(self) -> int:
        return int(self.id.split(".")[1])

    @property
    def epoch(self) -> str:
        return self.id.split(".")[0]


def parse(text: str) -> list[Frame]:
    frames = []
    for block in text.split("\n\n"):
        if not block:
            continue
        fields: dict[str, str] = {}
        for line in block.split("\n"):
            name, _, value = line.partition(":")
            fields[name] = value.removeprefix(" ")
        if "" in fields:
            frames.append(Frame("keepalive"))
        elif "retry" in fields:
            frames.append(Frame("retry"))
        else:
            frames.append(Frame(fields["event"], fields["id"], json.loads(fields["data"])))
    return frames


@dataclass
class Reader:
    """One feed client across connections: the id it resumes with, and all it was sent."""

    hub: Hub
    settings: StreamSettings = QUICK
    last_id: str | None = None
    rows: list[tuple[str, int]] = field(default_factory=list)  # (epoch, seq), as received
    gaps: list[dict[str, Any]] = field(default_factory=list)
    stream: AsyncIterator[str] | None = None

    @property
    def connected(self) -> bool:
        return self.stream is not None

    @property
    def seq(self) -> int:
        """The seq of the last row held (or the row a gap resumed at); 0 at the start."""
        cursor = parse_cursor(self.last_id)
        return cursor.seq if isinstance(cursor, Cursor) else 0

    def connect(self) -> None:
        assert self.stream is None
        self.stream = feed_frames(self.hub, parse_cursor(self.last_id), self.settings)

    async def next(self) -> list[Frame]:
        """The next chunk the server sends, parsed and taken in."""
        assert self.stream is not None
        async with asyncio.timeout(DEADLINE):  # in this task: no wait_for's extra task
            frames = parse(await anext(self.stream))
        for frame in frames:
            if frame.event == "gap":
                self.gaps.append({**frame.data, "after_rows": len(self.rows),
                                  "cursor": self.last_id})
            elif frame.event not in ("keepalive", "retry"):
                assert frame.data["seq"] == frame.seq and frame.data["id"] == frame.id
                self.rows.append((frame.epoch, frame.seq))
            if frame.id:
                self.last_id = frame.id
        return frames

    async def drop(self, lose_in_flight: bool = False) -> None:
        """The connection dies; with `lose_in_flight` the chunk being sent dies with it."""
        assert self.stream is not None
        if lose_in_flight:
            async with asyncio.timeout(DEADLINE):
                await anext(self.stream)
        await cast(AsyncGenerator[str, None], self.stream).aclose()
        self.stream = None

    async def until_quiet(self) -> list[Frame]:
        """Everything sent until the stream goes quiet (a keepalive comment)."""
        got: list[Frame] = []
        while True:
            frames = await self.next()
            got += frames
            if any(f.event == "keepalive" for f in frames):
                return got

    async def until_gap(self) -> list[Frame]:
        """Everything sent up to and including the first gap."""
        got: list[Frame] = []
        while not any(f.event == "gap" for f in got):
            got += await self.next()
        return got

    async def until_seq(self, seq: int) -> None:
        """Read on until the last row held is `seq` (F5: an open stream reaches the head)."""
        deadline = asyncio.get_running_loop().time() + DEADLINE
        while self.seq != seq:
            assert asyncio.get_running_loop().time() < deadline, (
                f"the open stream is stuck at {self.seq}, the head is {seq}")
            await self.next()

    def seqs(self) -> list[int]:
        return [seq for _, seq in self.rows]


@contextlib.asynccontextmanager
async def running_hub(
    url: str, ring_size: int = 10_000, log: Callable[[aioredis.Redis], FeedLog] | None = None
) -> AsyncIterator[Hub]:
    """A started hub on its own asyncio client, as `taskq serve` runs one per queue."""
    aclient = aioredis.Redis.from_url(url, decode_responses=True)
    feed_log = log(aclient) if log else FeedLog(aclient, KEYS)
    hub = Hub(feed_log, ring_size=ring_size)
    await hub.start()
    try:
        yield hub
    finally:
        await hub.stop()
        await aclient.aclose()


def head_cursor(client: redis.Redis) -> Cursor:
    """The cursor of the log's last row, fingerprint included; seq 0 when it is empty."""
    epoch, _, head = bounds(client)
    return cursor_at(client, head) if head else Cursor(epoch, 0, "")


async def hub_reaches(hub: Hub, client: redis.Redis) -> None:
    """Wait until the hub has read the log up to its head (that very row, same ts)."""
    deadline = asyncio.get_running_loop().time() + DEADLINE
    while hub.tail != (head := head_cursor(client)):
        assert asyncio.get_running_loop().time() < deadline, (
            f"hub stuck at {hub.tail}, the log's head is {head}")
        await asyncio.sleep(0.005)


async def seen_then_gone(hub: Hub, producer: Producer, rows: int) -> Reader:
    """A client that received the first `rows` rows of a fresh log and then dropped."""
    producer.append(rows)
    reader = Reader(hub)
    reader.connect()
    await reader.until_seq(rows)
    await reader.drop()
    return reader


async def resumed_until_quiet(hub: Hub, last_id: str) -> Reader:
    """A client that resumed from `last_id`, read until the stream went quiet, and left."""
    reader = Reader(hub, last_id=last_id)
    reader.connect()
    await reader.until_quiet()
    await reader.drop()
    return reader
