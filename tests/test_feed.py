"""The change feed's invariants F1-F5 (design.md section 3) on its real read path: the
atomic gap-checked read (`FeedLog`), a running per-queue `Hub` with its ring, and
`feed_frames`, the frames one SSE client is sent, all on the session's real Redis.

F1 no silent gap, F2 no duplicate, F3 caught up right after a resume, F4 a gap only when
rows the client had not received were really trimmed (or the log was reset), F5 an open
stream reaches the head. The oracle is Redis itself, read between the client's steps.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
import threading
import time
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any, TypeVar, cast

import pytest
import redis
import redis.asyncio as aioredis

from taskq.broker import Broker, NewTask
from taskq.feed.cursor import Cursor, parse_cursor
from taskq.feed.hub import Hub
from taskq.feed.log import FeedLog, Gap, Rows
from taskq.feed.stream import StreamSettings, feed_frames
from taskq.keys import QueueKeys
from taskq.settings import Settings

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


# -- ids -----------------------------------------------------------------------------


@pytest.mark.parametrize("cursor", [Cursor.start(), Cursor("1795956998499247", 42, "17959569")],
                         ids=["start", "row"])
def test_every_id_the_feed_hands_out_parses_back_to_its_position(cursor: Cursor) -> None:
    assert parse_cursor(cursor.wire_id) == cursor


# -- the atomic read step ----------------------------------------------------------------


class TestAtomicRead:
    """`FeedLog.read` (read_events.lua): a gap exactly when a row after the cursor is gone."""

    def test_a_gap_comes_exactly_when_the_row_after_the_cursor_was_trimmed(
        self, settings: Settings, client: redis.Redis
    ) -> None:
        producer = Producer(client, retention=5)
        producer.append(6)  # rows 2..6 are retained, row 1 is trimmed
        epoch, oldest, head = bounds(client)
        assert (oldest, head) == (2, 6)

        async def scenario() -> None:
            aclient = aioredis.Redis.from_url(settings.redis_url, decode_responses=True)
            log = FeedLog(aclient, KEYS)
            try:
                held_one = await log.read(Cursor(epoch, 1, ""), 100)
                assert isinstance(held_one, Rows), "row 1 was trimmed but the client has it"
                assert [r.cursor.seq for r in held_one.rows] == [2, 3, 4, 5, 6]
                nothing = await log.read(Cursor.start(), 100)
                assert isinstance(nothing, Gap) and nothing.reason == "trimmed"
                assert (nothing.first, nothing.head) == (2, 6)
                assert retained(client, 1, nothing.first - 1) == []
                producer.append(1)  # now row 2 goes
                still = await log.read(Cursor(epoch, 2, ""), 100)  # 3.. all retained
                assert isinstance(still, Rows) and still.rows[0].cursor.seq == 3
                lost_two = await log.read(Cursor(epoch, 1, ""), 100)
                assert isinstance(lost_two, Gap) and lost_two.reason == "trimmed"
                assert (lost_two.first, lost_two.head) == (3, 7)
                assert lost_two.resume_at == Cursor(epoch, 7, row_ts(client, 7))
            finally:
                await aclient.aclose()

        run(scenario())

    def test_the_head_of_an_empty_log_is_seq_zero_without_an_epoch(
        self, settings: Settings, client: redis.Redis
    ) -> None:
        async def scenario() -> Cursor:
            aclient = aioredis.Redis.from_url(settings.redis_url, decode_responses=True)
            try:
                return await FeedLog(aclient, KEYS).head()
            finally:
                await aclient.aclose()

        assert run(scenario()) == Cursor("", 0, "")


# -- F1-F5 under random appends, drops and resumes --------------------------------------


class RandomFeed:
    """Clients that read, drop (sometimes losing the chunk in flight), resume with their
    last id and follow, while the log grows and is trimmed; every frame is checked
    against the log in Redis, which does not change while a client reads."""

    def __init__(self, hub: Hub, client: redis.Redis, producer: Producer, seed: int) -> None:
        self.hub, self.client, self.producer = hub, client, producer
        self.rng = random.Random(seed)
        self.readers = [Reader(hub) for _ in range(3)]
        self.resumes = 0
        self.gaps = 0

    async def step(self) -> None:
        rng = self.rng
        reader = rng.choice(self.readers)
        action = rng.choices(["append", "read", "drop", "resume", "follow"],
                             weights=[4, 3, 2, 2, 1])[0]
        if action == "append":
            self.producer.append(rng.randint(1, 7))
        elif not reader.connected:
            await self.resume(reader)
        elif action == "read":
            for _ in range(rng.randint(1, 3)):
                await self.take(reader)
        elif action == "drop":
            await reader.drop(lose_in_flight=rng.random() < 0.3)
        elif action == "follow":
            await self.follow(reader)

    async def take(self, reader: Reader) -> list[Frame]:
        """Read one chunk and check every frame in it against the log."""
        epoch, oldest, head = bounds(self.client)
        before = reader.seq
        frames = await reader.next()
        for frame in frames:
            if frame.event == "gap":
                self.gaps += 1
                # F4: the row right after the cursor is really gone, and the gap tells
                # the truth about where the log starts and ends.
                assert frame.data["reason"] == "trimmed", frame.data
                assert before < oldest - 1, f"gap at cursor {before}, oldest {oldest}"
                assert (frame.data["first_available"], frame.data["head"]) == (oldest, head)
                assert frame.seq == head and frame.epoch == epoch
                assert retained(self.client, before + 1, oldest - 1) == []
                before = head
            elif frame.event not in ("keepalive", "retry"):
                # F1, F2: each row is the one right after the last.
                assert (frame.epoch, frame.seq) == (epoch, before + 1), (
                    f"after {before} the client got {frame.seq}")
                before = frame.seq
        return frames

    async def resume(self, reader: Reader) -> None:
        """Reconnect with the last id; the resume must end at the head (F3)."""
        await hub_reaches(self.hub, self.client)
        self.resumes += 1
        reader.connect()
        while not any(f.event == "keepalive" for f in await self.take(reader)):
            pass
        _, _, head = bounds(self.client)
        assert reader.seq == head, f"resumed to {reader.seq}, the head is {head}"

    async def follow(self, reader: Reader) -> None:
        """F5: an open stream reaches the head."""
        _, _, head = bounds(self.client)
        deadline = asyncio.get_running_loop().time() + DEADLINE
        while reader.seq != head:
            assert asyncio.get_running_loop().time() < deadline, "open stream not at head"
            await self.take(reader)

    async def finish(self) -> None:
        for reader in self.readers:
            if reader.connected:
                await self.follow(reader)
                await reader.drop()
            else:
                await self.resume(reader)
                await reader.drop()


@pytest.mark.parametrize("ring_size", [3, 10_000], ids=["small-ring", "big-ring"])
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_random_appends_drops_and_resumes_keep_f1_to_f5(
    settings: Settings, client: redis.Redis, seed: int, ring_size: int
) -> None:
    producer = Producer(client, retention=10)

    async def scenario() -> RandomFeed:
        async with running_hub(settings.redis_url, ring_size) as hub:
            feed = RandomFeed(hub, client, producer, seed)
            for _ in range(80):
                await feed.step()
            await feed.finish()
            return feed

    feed = run(scenario())
    _, _, head = bounds(client)
    assert head > 50, "the log (10 rows kept) should have been trimmed many times over"
    for reader in feed.readers:
        seqs = reader.seqs()
        assert len(seqs) == len(set(seqs)), "a row was delivered twice"
        assert seqs == sorted(seqs)
        assert reader.seq == head
        # Every hole in what the client holds is announced by a gap just before it.
        announced = {g["after_rows"] for g in reader.gaps}
        holes = [i for i in range(1, len(seqs)) if seqs[i] != seqs[i - 1] + 1]
        assert set(holes) <= announced, f"silent holes at {holes} in {seqs}"
    assert feed.resumes >= 10
    if ring_size == 3:
        assert feed.gaps > 0, "with a small ring some resume should meet a trimmed log"


# -- resumes, one invariant at a time ----------------------------------------------------


def test_a_resume_replays_exactly_the_missed_rows_and_ends_at_the_head(
    settings: Settings, client: redis.Redis
) -> None:
    producer = Producer(client, retention=1000)

    async def scenario() -> None:
        async with running_hub(settings.redis_url) as hub:
            producer.append(5)
            reader = Reader(hub)
            reader.connect()
            await reader.until_seq(5)
            await reader.drop()
            producer.append(11)  # missed while away: 6..16, batches of 4 to replay
            await hub_reaches(hub, client)
            reader.connect()
            frames = await reader.until_quiet()
            assert [f.seq for f in frames if f.id] == list(range(6, 17))  # F3
            assert reader.gaps == []
            producer.append(2)  # and it is live again
            await reader.until_seq(18)
            await reader.drop()
            assert reader.seqs() == list(range(1, 19))

    run(scenario())


def test_a_client_whose_cursor_is_retained_never_gets_a_gap(
    settings: Settings, client: redis.Redis
) -> None:
    """F4 at the boundary: with the log holding cursor + 1 onward there is no gap, even
    though the cursor's own row is gone; one trim more and there is one."""
    producer = Producer(client, retention=4)

    async def scenario() -> None:
        producer.append(3)
        held = cursor_at(client, 2).wire_id
        producer.append(3)  # log holds 3..6: row 2 (the client's) is gone, 3 is not
        assert bounds(client)[1:] == (3, 6)
        async with running_hub(settings.redis_url) as hub:  # its ring starts at the head
            reader = Reader(hub, last_id=held)
            reader.connect()
            await reader.until_quiet()
            await reader.drop()
            assert reader.gaps == [] and reader.seqs() == [3, 4, 5, 6]

            producer.append(1)  # log holds 4..7: row 3, never received, is gone
            late = Reader(hub, last_id=held)
            late.connect()
            await late.until_quiet()
            await late.drop()
            assert [(g["reason"], g["first_available"], g["head"]) for g in late.gaps] == [
                ("trimmed", 4, 7)]
            assert late.seqs() == [] and late.seq == 7
            assert retained(client, 3, 3) == []

    run(scenario())


# -- the RoostPush split-attach bug ------------------------------------------------------


class AppendsAfterRead(FeedLog):
    """Test instrumentation: once armed, the first read made by the arming task appends
    one row right after it returns, as a writer would in the instant after the read.
    Reads by other tasks (the hub's tail reader) pass untouched."""

    def __init__(self, client: aioredis.Redis, append: Callable[[], None]) -> None:
        super().__init__(client, KEYS)
        self.append = append
        self.armed: asyncio.Task[Any] | None = None
        self.injected = 0

    def arm(self) -> None:
        self.armed = asyncio.current_task()

    async def read(self, cursor: Cursor, count: int) -> Rows | Gap:
        result = await super().read(cursor, count)
        if self.armed is not None and asyncio.current_task() is self.armed:
            self.armed = None
            self.append()
            self.injected += 1
        return result


async def split_attach(log: FeedLog, cursor: Cursor, then: Callable[[], None]) -> list[int]:
    """The RoostPushSplitAttach mutant: replay what the log holds after the cursor, then,
    as a second step, attach a live listener where the log ends now. `then` appends the
    next row once the listener is attached; returns the seqs the client received."""
    replay = await log.read(cursor, 1000)  # step 1: replay
    assert isinstance(replay, Rows)
    received = [row.cursor.seq for row in replay.rows]
    attached = await log.head()  # step 2: attach the listener at the head
    then()
    reply = cast(list[tuple[str, list[tuple[str, dict[str, str]]]]], await log.client.xread(
        {log.keys.events: f"{attached.seq}-0"}, block=5000))
    assert reply, "the live row never came"
    for _, entries in reply:
        received += [int(str(entry_id).split("-")[0]) for entry_id, _ in entries]
    return received


@pytest.mark.parametrize("held", [0, 2], ids=["empty-log", "mid-log"])
def test_split_attach_loses_a_row_silently_where_feed_frames_does_not(
    settings: Settings, client: redis.Redis, held: int
) -> None:
    """The checker's 4-step counterexample, replayed on Redis: the client resumes, the
    replay finds what it finds, the writer appends one row before the listener attaches,
    the listener attaches at the head, the next row arrives live. The two-step variant
    now holds the later row without the earlier one and signals nothing; feed_frames,
    given the same interleaving, delivers both."""
    rows_before = held + 1 if held else 0  # the client holds 1..held; one left to replay
    replayed = list(range(held + 1, rows_before + 1))
    injected, live = rows_before + 1, rows_before + 2
    producer = Producer(client, retention=1000)
    producer.append(rows_before)
    start = cursor_at(client, held) if held else Cursor.start()

    async def mutant() -> tuple[list[int], int]:
        aclient = aioredis.Redis.from_url(settings.redis_url, decode_responses=True)
        log = AppendsAfterRead(aclient, producer.append)
        log.arm()
        try:
            return await split_attach(log, start, producer.append), log.injected
        finally:
            await aclient.aclose()

    received, appended = run(mutant())
    assert appended == 1
    assert received == [*replayed, live], received
    assert injected not in received  # lost, and the client's cursor is already past it

    client.flushall()
    producer = Producer(client, retention=1000)
    producer.append(rows_before)
    start = cursor_at(client, held) if held else Cursor.start()

    async def real() -> tuple[Reader, int]:
        box: list[AppendsAfterRead] = []

        def instrumented(aclient: aioredis.Redis) -> FeedLog:
            box.append(AppendsAfterRead(aclient, producer.append))
            return box[0]

        async with running_hub(settings.redis_url, log=instrumented) as hub:
            await hub_reaches(hub, client)
            reader = Reader(hub, last_id=start.wire_id if held else None)
            box[0].arm()
            reader.connect()
            await reader.until_seq(injected)
            producer.append(1)  # the live row
            await reader.until_seq(live)
            await reader.drop()
            return reader, box[0].injected

    reader, appended = run(real())
    assert appended == 1
    assert reader.seqs() == [*replayed, injected, live]
    assert reader.gaps == []


# -- log resets, cursors ahead, rewritten rows ------------------------------------------


def reset_log(client: redis.Redis) -> None:
    """The queue's event log is gone (a FLUSH, a restore of an old backup): DEL its keys."""
    client.delete(KEYS.events, KEYS.seq, KEYS.epoch)


def test_a_reset_log_gives_a_resuming_client_an_epoch_gap(
    settings: Settings, client: redis.Redis
) -> None:
    producer = Producer(client, retention=1000)

    async def scenario() -> None:
        async with running_hub(settings.redis_url) as hub:
            producer.append(4)
            reader = Reader(hub)
            reader.connect()
            await reader.until_seq(4)
            await reader.drop()
            old = reader.last_id
            reset_log(client)
            producer.append(3)  # a new log: seqs 1..3 in a new epoch
            epoch, _, _ = bounds(client)
            assert old is not None and not old.startswith(epoch + ".")
            reader.connect()
            frames = await reader.until_quiet()
            gap = frames[1]
            assert gap.event == "gap" and gap.data["reason"] == "epoch"
            assert gap.data["requested"] == old
            assert (gap.epoch, gap.seq, gap.data["head"]) == (epoch, 3, 3)
            producer.append(1)
            await reader.until_seq(4)
            await reader.drop()
            assert [s for e, s in reader.rows if e != epoch] == [1, 2, 3, 4]
            assert [s for e, s in reader.rows if e == epoch] == [4]

    run(scenario())


def test_the_id_a_gap_hands_out_on_an_empty_log_resumes_without_a_second_gap(
    settings: Settings, client: redis.Redis
) -> None:
    """After a reset nothing is left: the gap resumes the client at 'no rows yet'. A
    client that drops there and comes back with that id must get the new log's rows,
    all retained, with no second gap (F4)."""
    producer = Producer(client, retention=1000)

    async def scenario() -> None:
        async with running_hub(settings.redis_url) as hub:
            producer.append(2)
            reader = Reader(hub)
            reader.connect()
            await reader.until_seq(2)
            await reader.drop()
            reset_log(client)
            reader.connect()
            await reader.until_quiet()
            await reader.drop()
            assert [g["reason"] for g in reader.gaps] == ["epoch"]
            producer.append(3)
            await hub_reaches(hub, client)
            reader.connect()
            frames = await reader.until_quiet()
            await reader.drop()
            assert [g["reason"] for g in reader.gaps] == ["epoch"], (
                f"the id {reader.gaps[0]['resume_id']!r} handed out by the gap was refused: "
                f"{reader.gaps[1:]}")
            assert [f.seq for f in frames if f.id] == [1, 2, 3]

    run(scenario())


def test_a_cursor_ahead_of_the_head_gets_an_ahead_gap(
    settings: Settings, client: redis.Redis
) -> None:
    producer = Producer(client, retention=1000)
    producer.append(3)
    epoch, _, _ = bounds(client)

    async def scenario() -> Reader:
        async with running_hub(settings.redis_url) as hub:
            reader = Reader(hub, last_id=f"{epoch}.9.123")
            reader.connect()
            frames = await reader.until_quiet()
            assert frames[1].event == "gap"
            producer.append(1)
            await reader.until_seq(4)
            await reader.drop()
            return reader

    reader = run(scenario())
    assert [(g["reason"], g["requested"], g["head"]) for g in reader.gaps] == [
        ("ahead", f"{epoch}.9.123", 3)]
    assert reader.seqs() == [4]


def test_a_malformed_id_gets_a_gap_at_the_head(settings: Settings, client: redis.Redis) -> None:
    Producer(client, retention=1000).append(2)

    async def scenario() -> Reader:
        async with running_hub(settings.redis_url) as hub:
            reader = Reader(hub, last_id="not-an-id\r\nevent: x")
            reader.connect()
            await reader.until_quiet()
            await reader.drop()
            return reader

    reader = run(scenario())
    assert [(g["reason"], g["requested"], g["head"]) for g in reader.gaps] == [
        ("malformed", "not-an-id\r\nevent: x", 2)]
    assert reader.seq == 2 and reader.rows == []


def lose_tail(client: redis.Redis, lost: int) -> None:
    """A Redis crash that lost the last `lost` rows (appendfsync everysec): the rows, the
    counter and the stream's last id all go back, as an AOF replay would leave them."""
    _, _, head = bounds(client)
    for seq in range(head - lost + 1, head + 1):
        client.xdel(KEYS.events, f"{seq}-0")
    client.execute_command("XSETID", KEYS.events, f"{head - lost}-0")  # type: ignore[no-untyped-call]
    client.set(KEYS.seq, head - lost)


def rewrite_tail(client: redis.Redis, producer: Producer, lost: int, rewritten: int) -> None:
    """Lose the last `lost` rows, then append `rewritten` new ones: seqs that existed
    before come back with later timestamps."""
    _, _, head = bounds(client)
    old_ts = int(row_ts(client, head))
    lose_tail(client, lost)
    # A rewritten row must not share the old row's ts: wait out that millisecond.
    deadline = time.monotonic() + DEADLINE
    while producer.broker.server_time_ms() <= old_ts:
        assert time.monotonic() < deadline, "the Redis clock does not move"
        time.sleep(0.001)
    producer.append(rewritten)


@pytest.mark.parametrize("rewritten", [2, 3], ids=["same-head", "past-old-head"])
@pytest.mark.parametrize("hub_since", ["before-crash", "after-crash"])
def test_a_rewritten_row_gives_a_diverged_gap_never_a_silent_one(
    settings: Settings, client: redis.Redis, rewritten: int, hub_since: str
) -> None:
    """The client holds rows 1..5; a crash loses 4 and 5 and new rows take their seqs.
    Its cursor names a row that no longer exists as it knew it: it must get a gap,
    whether the resume is judged by Redis or served from the hub's ring."""
    producer = Producer(client, retention=1000)
    producer.append(5)
    held = cursor_at(client, 5)

    async def scenario() -> Reader:
        crash_first = hub_since == "after-crash"
        if crash_first:
            rewrite_tail(client, producer, lost=2, rewritten=rewritten)
        async with running_hub(settings.redis_url) as hub:
            if not crash_first:
                await hub_reaches(hub, client)
                rewrite_tail(client, producer, lost=2, rewritten=rewritten)
            await hub_reaches(hub, client)  # the hub has seen the rewrite
            producer.append(1)  # and one row more, which its ring now holds
            await hub_reaches(hub, client)
            reader = Reader(hub, last_id=held.wire_id)
            reader.connect()
            await reader.until_quiet()
            await reader.drop()
            return reader

    reader = run(scenario())
    head = 3 + rewritten + 1
    assert [(g["reason"], g["head"]) for g in reader.gaps] == [("diverged", head)], (
        f"resuming at a rewritten row, the client got {reader.seqs()} and gaps {reader.gaps}")
    assert reader.seqs() == [] and reader.seq == head


def test_a_client_at_a_row_the_crash_kept_resumes_without_a_gap(
    settings: Settings, client: redis.Redis
) -> None:
    producer = Producer(client, retention=1000)
    producer.append(5)
    held = cursor_at(client, 3)
    rewrite_tail(client, producer, lost=2, rewritten=3)

    async def scenario() -> Reader:
        async with running_hub(settings.redis_url) as hub:
            reader = Reader(hub, last_id=held.wire_id)
            reader.connect()
            await reader.until_quiet()
            await reader.drop()
            return reader

    reader = run(scenario())
    assert reader.gaps == [] and reader.seqs() == [4, 5, 6]


def test_many_appends_at_once_reach_an_open_stream_in_order(
    settings: Settings, client: redis.Redis
) -> None:
    """F5 with more rows than a batch and than the ring: all of them, in order."""
    broker = Broker(client, QUEUE, events_retention=100_000)

    async def scenario() -> Reader:
        async with running_hub(settings.redis_url, ring_size=50) as hub:
            reader = Reader(hub, settings=StreamSettings(batch=64, heartbeat_seconds=0.05))
            reader.connect()
            await reader.until_quiet()
            broker.enqueue_many([NewTask(f"bulk-{i}") for i in range(1500)])
            await reader.until_seq(1500)
            await reader.drop()
            return reader

    reader = run(scenario())
    assert reader.seqs() == list(range(1, 1501)) and reader.gaps == []


def test_a_hub_stops_promptly_right_after_serving_a_client(
    settings: Settings, client: redis.Redis
) -> None:
    """`taskq serve` stops its hubs on shutdown, and the SSE response stops its pump when
    a client leaves: a stop that lands while a Redis command is being sent must not be
    lost (on Python 3.11 one `cancel()` can be swallowed by `asyncio.wait_for`)."""
    producer = Producer(client, retention=1000)

    async def scenario() -> None:
        for _ in range(5):
            async with running_hub(settings.redis_url) as hub:
                reader = Reader(hub, last_id=head_cursor(client).wire_id)
                producer.append(5)
                reader.connect()
                await reader.until_seq(reader.seq + 5)
                await reader.drop()
            # leaving `running_hub` stopped the hub

    # On a loop of its own in a daemon thread, so a stop that never ends fails the test
    # instead of hanging the run.
    failures: list[BaseException] = []

    def target() -> None:
        try:
            asyncio.run(scenario())
        except BaseException as e:
            failures.append(e)

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(DEADLINE * 2)
    assert not thread.is_alive(), "a hub was told to stop and did not"
    assert failures == []
