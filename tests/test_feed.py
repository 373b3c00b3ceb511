"""The change feed's invariants F1-F5 (design.md section 3) on its real read path: the
atomic gap-checked read (`FeedLog`), a running per-queue `Hub` with its ring, and
`feed_frames`, the frames one SSE client is sent, all on the session's real Redis.

F1 no silent gap, F2 no duplicate, F3 caught up right after a resume, F4 a gap only when
rows the client had not received were really trimmed (or the log was reset), F5 an open
stream reaches the head. The oracle is Redis itself, read between the client's steps.
"""

from __future__ import annotations

import asyncio
import gc
import json
import random
import threading
import tracemalloc
from collections.abc import AsyncIterator
from typing import Any

import pytest
import redis
import redis.asyncio as aioredis

from feed_support import (
    DEADLINE,
    KEYS,
    QUEUE,
    Frame,
    Producer,
    Reader,
    bounds,
    cursor_at,
    head_cursor,
    hub_reaches,
    resumed_until_quiet,
    retained,
    row_ts,
    run,
    running_hub,
    seen_then_gone,
)
from helpers import stalling
from taskq.broker import Broker, NewTask
from taskq.errors import BrokerError
from taskq.feed.cancel import cancel_and_wait
from taskq.feed.cursor import Cursor, parse_cursor
from taskq.feed.hub import Hub
from taskq.feed.log import FeedLog, Gap, Row, Rows
from taskq.feed.stream import StreamSettings, feed_frames
from taskq.settings import Settings

# -- ids -----------------------------------------------------------------------------


@pytest.mark.parametrize("cursor", [Cursor.start(), Cursor("1795956998499247", 42, "17959569")],
                         ids=["start", "row"])
def test_every_id_the_feed_hands_out_parses_back_to_its_position(cursor: Cursor) -> None:
    assert parse_cursor(cursor.wire_id) == cursor


# -- the atomic read step ----------------------------------------------------------------


def test_a_row_whose_number_fields_are_not_ascii_digits_still_makes_its_frame() -> None:
    """'²'.isdigit() holds and int('²') raises: one such row ended every stream that
    reached it, and every resume after it, until retention trimmed it."""
    row = Row(Cursor("1795956998499247", 2, "17959569"),
              {"type": "leased", "ts": "17959569", "retries": "²", "token": "\u0661"})
    data = json.loads(row.frame.split("data: ", 1)[1])
    assert (data["ts"], data["retries"], data["token"]) == (17959569, "²", "\u0661")


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

    def test_a_cursor_one_past_the_head_gets_an_ahead_gap_at_once(
        self, settings: Settings, client: redis.Redis
    ) -> None:
        """What a crash that lost the newest row leaves a client holding: it must hear
        of the gap now, not wait for the next row to find out the log diverged."""
        producer = Producer(client, retention=1000)
        producer.append(3)
        epoch, _, head = bounds(client)

        async def scenario() -> Rows | Gap:
            aclient = aioredis.Redis.from_url(settings.redis_url, decode_responses=True)
            try:
                return await FeedLog(aclient, KEYS).read(Cursor(epoch, head + 1, ""), 100)
            finally:
                await aclient.aclose()

        got = run(scenario())
        assert isinstance(got, Gap) and got.reason == "ahead"
        assert got.head == head

    def test_an_epoch_written_by_hand_reaches_no_id_as_it_is_and_a_resume_still_matches(
        self, settings: Settings, client: redis.Redis
    ) -> None:
        """A CR or LF in the epoch would start an SSE field of the writer's choosing on
        the `id:` line: it is handed out as digits, the same each read."""
        producer = Producer(client, retention=1000)
        producer.append(3)
        client.set(KEYS.epoch, "1\nevent: injected\ndata: {}")

        async def scenario() -> tuple[Rows | Gap, Rows | Gap]:
            aclient = aioredis.Redis.from_url(settings.redis_url, decode_responses=True)
            try:
                log = FeedLog(aclient, KEYS)
                read = await log.read(Cursor.start(), 100)
                assert isinstance(read, Rows)
                return read, await log.read(parse_cursor(read.rows[-1].cursor.wire_id), 100)
            finally:
                await aclient.aclose()

        read, resumed = run(scenario())
        assert isinstance(read, Rows) and len(read.rows) == 3
        assert all(parse_cursor(row.cursor.wire_id) == row.cursor for row in read.rows)
        assert isinstance(resumed, Rows) and resumed.rows == []

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
            reader = await seen_then_gone(hub, producer, 5)
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
            reader = await resumed_until_quiet(hub, held)
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


@pytest.mark.parametrize(("catch_up_reads", "every_client_reaches_the_head"),
                         [(2, True), (24, False)], ids=["queued", "unqueued"])
def test_clients_behind_the_ring_queue_for_redis_instead_of_losing_their_stream(
    settings: Settings, client: redis.Redis, catch_up_reads: int,
    every_client_reaches_the_head: bool,
) -> None:
    """Many clients replaying from Redis at once, on a small connection pool with a short
    wait: queued, every one reaches the head; let through all at once (the control),
    some wait out the pool and their streams end with an error."""
    Producer(client, retention=10_000).append(3_000)

    async def reach_head(hub: Hub) -> BaseException | None:
        stream = feed_frames(hub, Cursor.start(), StreamSettings(batch=300))
        try:
            async for text in stream:
                if ".3000." in text:
                    return None
        except Exception as e:
            return e
        finally:
            await stream.aclose()  # type: ignore[attr-defined]
        return AssertionError("the stream ended")

    async def scenario() -> list[BaseException | None]:
        pool = aioredis.BlockingConnectionPool.from_url(
            settings.redis_url, decode_responses=True, max_connections=4, timeout=0.05)
        aclient = aioredis.Redis(connection_pool=pool)
        hub = Hub(FeedLog(aclient, KEYS), ring_size=10, catch_up_reads=catch_up_reads)
        await hub.start()
        try:
            return await asyncio.gather(*(reach_head(hub) for _ in range(24)))
        finally:
            await hub.stop()
            await aclient.aclose(close_connection_pool=True)

    failures = [e for e in run(scenario()) if e is not None]
    if every_client_reaches_the_head:
        assert failures == []
    else:
        assert failures and all("No connection available" in str(e) for e in failures)


def test_a_client_catching_up_holds_its_batch_as_text_while_it_is_sent(
    settings: Settings, client: redis.Redis
) -> None:
    """A slow client holds the batch it is being sent for up to its send timeout; many
    catching up at once must not also hold every row's objects, six times the text."""
    Producer(client, retention=10_000).append(3_000)

    async def scenario() -> tuple[int, int]:
        async with running_hub(settings.redis_url, ring_size=10) as hub:
            held: list[tuple[AsyncIterator[str], str]] = []
            tracemalloc.start()
            try:
                before = tracemalloc.get_traced_memory()[0]
                for _ in range(50):
                    stream = feed_frames(hub, Cursor.start(), StreamSettings(batch=500))
                    for _ in range(2):  # the retry advice, then the one-row read
                        await anext(stream)
                    held.append((stream, await anext(stream)))  # a batch, being sent
                grown = tracemalloc.get_traced_memory()[0] - before
            finally:
                tracemalloc.stop()
            text = sum(len(frames) for _, frames in held)
            for stream, _ in held:
                await stream.aclose()  # type: ignore[attr-defined]
            return grown, text

    grown, text = run(scenario())
    assert grown < 2 * text, f"{grown / 50 / 1024:.0f} KiB held a client for " \
        f"{text / 50 / 1024:.0f} KiB of text"


def test_a_hubs_ring_holds_its_rows_as_frames_not_as_their_fields(
    settings: Settings, client: redis.Redis
) -> None:
    """A busy queue's ring holds its last 10,000 rows for every client that catches up
    from memory; each row's fields (a dict, its names new strings from Redis's reply)
    held it at five times its frames' text, where the frames alone come to twice."""

    async def scenario() -> tuple[int, int]:
        async with running_hub(settings.redis_url, ring_size=1_000) as hub:
            gc.collect()
            tracemalloc.start(20)  # deep enough to find the producer's calls
            try:
                Producer(client, retention=10_000).append(1_000)
                while hub.tail.seq < 1_000:
                    await asyncio.sleep(0.01)
                gc.collect()
                # What is still held, but for what the producer made (through the
                # blocking Broker, which the hub does not use).
                held = tracemalloc.take_snapshot().filter_traces(
                    [tracemalloc.Filter(False, "*/taskq/broker.py", all_frames=True)])
            finally:
                tracemalloc.stop()
            grown = sum(stat.size for stat in held.statistics("filename"))
            return grown, sum(len(row.frame) for row in hub.ring)

    grown, text = run(scenario())
    assert grown < 3 * text, \
        f"{grown / 1000:.0f} B a row held for {text / 1000:.0f} B of frame"


def test_a_client_that_leaves_during_its_read_leaves_the_connection_in_the_pool(
    settings: Settings, client: redis.Redis
) -> None:
    """Cut short mid-reply, redis-py closes a connection: a server whose clients come
    and go would open a connection for each that leaves while Redis answers it."""
    Producer(client, retention=10_000).append(200)

    def opened() -> int:
        return int(client.info("stats")["total_connections_received"])

    async def scenario() -> tuple[int, int]:
        async with running_hub(settings.redis_url, ring_size=10) as hub:
            settings_ = StreamSettings(batch=100)
            warm = feed_frames(hub, Cursor.start(), settings_)
            for _ in range(3):  # the retry advice, the one-row read, a batch
                await anext(warm)
            await warm.aclose()  # type: ignore[attr-defined]
            before = opened()
            for _ in range(3):
                stream = feed_frames(hub, Cursor.start(), settings_)
                await anext(stream)  # the retry advice; its read comes next
                stall = stalling(client, 0.3)
                await asyncio.sleep(0.05)  # Redis busy: the read will wait for its reply
                reading = asyncio.ensure_future(anext(stream))
                await asyncio.sleep(0.05)
                await cancel_and_wait(reading)  # the client leaves mid-read
                await stream.aclose()  # type: ignore[attr-defined]
                await asyncio.to_thread(stall.join)
                await asyncio.sleep(0.05)  # the read ends by itself
            later = feed_frames(hub, Cursor.start(), settings_)
            for _ in range(3):
                await anext(later)  # a read that needs a connection of the pool
            await later.aclose()  # type: ignore[attr-defined]
            return before, opened()

    before, after = run(scenario())
    assert after == before, f"{after - before} connection(s) opened for 3 clients that left"


def test_a_barrage_of_malformed_ids_reads_redis_a_few_at_a_time_like_catch_ups(
    settings: Settings, client: redis.Redis
) -> None:
    """Each malformed id costs a read of where the log ends: many at once take their
    turns with the catch-up reads, rather than a pooled connection each (a cluster's
    client fails a command past its bound instead of waiting), and each gets its gap."""
    Producer(client, retention=10_000).append(5)
    name = "feed-malformed-test"

    async def first_event(hub: Hub) -> str:
        stream = feed_frames(hub, parse_cursor("not-an-id"), StreamSettings())
        try:
            await anext(stream)  # the retry advice
            return await anext(stream)
        finally:
            await stream.aclose()  # type: ignore[attr-defined]

    async def scenario() -> tuple[list[str], int]:
        aclient = aioredis.Redis.from_pool(aioredis.BlockingConnectionPool.from_url(
            settings.redis_url, decode_responses=True, client_name=name, max_connections=64))
        hub = Hub(FeedLog(aclient, KEYS), ring_size=10, catch_up_reads=2)
        await hub.start()
        try:
            firsts = await asyncio.gather(*(first_event(hub) for _ in range(200)))
            return firsts, sum(1 for c in client.client_list() if c["name"] == name)
        finally:
            await hub.stop()
            await aclient.aclose()

    firsts, held = run(scenario())
    assert all("\nevent: gap\n" in f and '"reason":"malformed"' in f for f in firsts)
    # Two catch-up reads, and the hub's own read and wait.
    assert held <= 2 + 2


# -- a log edited by hand ----------------------------------------------------------------


class CountingLog(FeedLog):
    """The atomic read, counting its calls: a stream that has nothing to send must wait
    for the log to move, not read it again and again."""

    reads = 0

    async def read(self, cursor: Cursor, count: int) -> Rows | Gap:
        CountingLog.reads += 1
        return await super().read(cursor, count)


def run_guarded(scenario: Any, seconds: float = 30.0) -> None:
    """Run `scenario` on a loop of its own thread: a stream that never awaits would
    freeze the test's own loop too, and the test must fail, not hang."""
    failed: list[BaseException] = []

    def main() -> None:
        try:
            run(scenario)
        except BaseException as e:  # reported on the test's thread
            failed.append(e)

    thread = threading.Thread(target=main, daemon=True)
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), "the feed stopped awaiting: its event loop is frozen"
    if failed:
        raise failed[0]


def test_ids_missing_from_the_log_skip_no_row_and_stall_no_stream(
    settings: Settings, client: redis.Redis
) -> None:
    """A counter set ahead by hand leaves ids no row holds (5 to 9 here): a client on
    either side of them gets every row after its own, once, and the stream goes on."""
    producer = Producer(client, retention=1000)
    producer.append(5)

    async def scenario() -> None:
        async with running_hub(settings.redis_url) as hub:
            await hub_reaches(hub, client)
            client.incrby(KEYS.seq, 3)
            producer.append(6)  # rows 9..14
            await hub_reaches(hub, client)
            for held, expected in ((5, list(range(9, 15))), (9, list(range(10, 15))),
                                   (12, [13, 14])):
                reader = await resumed_until_quiet(hub, cursor_at(client, held).wire_id)
                assert (reader.seqs(), reader.gaps) == (expected, []), held

    run_guarded(scenario())


def test_ids_of_fifteen_digits_and_more_are_read_as_any_other(
    settings: Settings, client: redis.Redis
) -> None:
    """Lua writes a number of 1e14 or more in exponent form, "1e+14-0", which XRANGE
    refused: a counter set that far by hand (or an XADD of such an id) made every read
    of the queue's feed fail as "Redis is unavailable", for good."""
    producer = Producer(client, retention=1000)
    producer.append(2)
    client.set(KEYS.seq, 10**15 - 2)
    producer.append(4)  # rows 999999999999999 to 10**15 + 2

    async def scenario() -> None:
        async with running_hub(settings.redis_url) as hub:
            await hub_reaches(hub, client)
            for held, expected in ((2, [10**15 - 1, 10**15, 10**15 + 1, 10**15 + 2]),
                                   (10**15, [10**15 + 1, 10**15 + 2])):
                reader = await resumed_until_quiet(hub, cursor_at(client, held).wire_id)
                assert (reader.seqs(), reader.gaps) == (expected, []), held

    run_guarded(scenario())


def test_ids_missing_inside_the_hubs_ring_skip_no_row_and_end_no_stream(
    settings: Settings, client: redis.Redis
) -> None:
    """The same hole, met by a running hub: its ring holds rows on both sides of it, so
    the ring is shorter than the span of its seqs, and a client at its tail must still
    be served (from Redis) and hear of the next row, not fail reckoning by position."""
    producer = Producer(client, retention=1000)
    producer.append(1)

    async def scenario() -> None:
        async with running_hub(settings.redis_url) as hub:
            producer.append(2)  # rows 2, 3 in the ring
            await hub_reaches(hub, client)
            client.incrby(KEYS.seq, 3)
            producer.append(3)  # rows 7..9: the ring holds 2, 3, 7, 8, 9
            await hub_reaches(hub, client)
            assert [row.cursor.seq for row in hub.ring] == [2, 3, 7, 8, 9]
            for held, expected in ((2, [3, 7, 8, 9]), (3, [7, 8, 9]), (8, [9]), (9, [])):
                reader = await resumed_until_quiet(hub, cursor_at(client, held).wire_id)
                assert (reader.seqs(), reader.gaps) == (expected, []), held
            live = Reader(hub, last_id=cursor_at(client, 9).wire_id)
            live.connect()
            await live.until_quiet()
            producer.append(1)
            await live.until_quiet()
            await live.drop()
            assert (live.seqs(), live.gaps) == ([10], [])

    run_guarded(scenario())


@pytest.mark.parametrize("edit", ["newest row deleted", "log and counter deleted"])
def test_a_head_no_row_holds_is_waited_on_not_read_again_at_once(
    settings: Settings, client: redis.Redis, edit: str
) -> None:
    producer = Producer(client, retention=1000)
    producer.append(3)
    if edit == "newest row deleted":
        client.xdel(KEYS.events, "3-0")  # the counter still names row 3
        expected = [1, 2]
    else:
        client.delete(KEYS.events, KEYS.seq)  # only the epoch is left
        expected = []

    async def scenario() -> None:
        CountingLog.reads = 0
        async with running_hub(settings.redis_url,
                               log=lambda c: CountingLog(c, KEYS)) as hub:
            reader = Reader(hub, settings=StreamSettings(batch=64, heartbeat_seconds=0.2))
            reader.connect()
            frames: list[Frame] = []
            started = asyncio.get_running_loop().time()
            while asyncio.get_running_loop().time() - started < 1.0:
                frames += await reader.next()
            keepalives = sum(f.event == "keepalive" for f in frames)
            assert 2 <= keepalives <= 7, keepalives  # one per 0.2 s of silence
            assert reader.seqs() == expected
            assert CountingLog.reads < 30, CountingLog.reads
            producer.append(1)  # the log moves: the stream goes on with it
            await reader.until_seq(int(client.get(KEYS.seq)))
            await reader.drop()

    run_guarded(scenario())


@pytest.mark.parametrize("resume", ["junk", "ahead", "old epoch"])
@pytest.mark.parametrize("edit", ["newest row deleted", "counter set ahead"])
def test_a_resume_that_gets_a_gap_at_a_head_no_row_holds_gets_it_once(
    settings: Settings, client: redis.Redis, resume: str, edit: str
) -> None:
    """The gap's resume point is the head, which no row holds: the stream waits there
    for the next append (one gap, then heartbeats), and then goes on with no other gap."""
    producer = Producer(client, retention=1000)
    producer.append(3)
    epoch = str(client.get(KEYS.epoch))
    if edit == "newest row deleted":
        client.xdel(KEYS.events, "3-0")
    else:
        client.incrby(KEYS.seq, 4)
    last_id = {"junk": "junk", "ahead": f"{epoch}.900.1", "old epoch": "1.2.1"}[resume]

    async def scenario() -> None:
        CountingLog.reads = 0
        async with running_hub(settings.redis_url,
                               log=lambda c: CountingLog(c, KEYS)) as hub:
            await asyncio.sleep(0.1)  # the hub settles on the head first
            reader = Reader(hub, settings=StreamSettings(batch=64, heartbeat_seconds=0.2),
                            last_id=last_id)
            reader.connect()
            frames: list[Frame] = []
            started = asyncio.get_running_loop().time()
            while asyncio.get_running_loop().time() - started < 1.0:
                frames += await reader.next()
            assert sum(f.event == "gap" for f in frames) == 1
            assert 2 <= sum(f.event == "keepalive" for f in frames) <= 7
            assert CountingLog.reads < 30, CountingLog.reads
            producer.append(1)
            await reader.until_seq(int(client.get(KEYS.seq)))
            assert len(reader.gaps) == 1 and reader.rows[-1][1] == int(client.get(KEYS.seq))
            await reader.drop()

    run_guarded(scenario())


CLIENT_BATCH = 7  # tells the client's reads from the hub's


class RowDuringRead(FeedLog):
    """The atomic read, once made to find nothing while a row is appended and the hub
    sees it before the read returns, as a busy event loop can order them."""

    producer: Producer
    hub: Hub | None = None

    async def read(self, cursor: Cursor, count: int) -> Rows | Gap:
        result = await super().read(cursor, count)
        hub = RowDuringRead.hub
        if hub is not None and count == CLIENT_BATCH:  # the client's read, not the hub's
            RowDuringRead.hub = None
            before = hub.tail
            await asyncio.to_thread(RowDuringRead.producer.append, 1)
            while hub.tail == before:
                await asyncio.sleep(0.005)
        return result


def test_a_row_the_hub_sees_during_a_clients_empty_read_reaches_it_at_once(
    settings: Settings, client: redis.Redis
) -> None:
    RowDuringRead.producer = Producer(client, retention=1000)
    RowDuringRead.producer.append(2)

    async def scenario() -> None:
        async with running_hub(settings.redis_url,
                               log=lambda c: RowDuringRead(c, KEYS)) as hub:
            # A hub just started holds no rows: a client at the head reads from Redis.
            assert not hub.ring and hub.tail == head_cursor(client)
            RowDuringRead.hub = hub
            frames = feed_frames(hub, hub.tail, StreamSettings(
                batch=CLIENT_BATCH, heartbeat_seconds=20.0))
            started = asyncio.get_running_loop().time()
            async with asyncio.timeout(5):
                async for frame in frames:
                    if frame.startswith("id:"):
                        break
            assert asyncio.get_running_loop().time() - started < 3
            await frames.aclose()

    run_guarded(scenario())


class FailingLog(FeedLog):
    """The atomic read, made to fail as a Redis gone away would while `down` is set."""

    down = False

    async def read(self, cursor: Cursor, count: int) -> Rows | Gap:
        if FailingLog.down:
            raise redis.ConnectionError("Redis went away")
        return await super().read(cursor, count)


async def next_frames(frames: AsyncIterator[str], until: str, seconds: float) -> list[str]:
    """Frames up to and including the first that starts with `until`."""
    got: list[str] = []
    async with asyncio.timeout(seconds):
        async for frame in frames:
            got.append(frame)
            if frame.startswith(until):
                return got
    raise AssertionError(f"the stream ended first: {got}")


@pytest.mark.parametrize("outage", ["brief", "past the grace"])
def test_a_client_served_from_the_ring_ends_only_when_the_hubs_reads_fail_past_the_grace(
    settings: Settings, client: redis.Redis, outage: str
) -> None:
    """A client whose rows the hub's ring holds reads nothing of Redis itself: the
    hub's failing reads are how it learns of an outage. A brief one costs it nothing;
    one that lasts the grace ends its stream, so its caller can say `unavailable`."""
    producer = Producer(client, retention=1000)
    producer.append(1)
    FailingLog.down = False
    grace = 0.6

    async def scenario() -> None:
        async with running_hub(settings.redis_url,
                               log=lambda c: FailingLog(c, KEYS)) as hub:
            producer.append(1)
            await hub_reaches(hub, client)
            assert hub.ring and hub.failing_since is None
            frames = feed_frames(hub, hub.tail, StreamSettings(
                heartbeat_seconds=20.0, outage_grace_seconds=grace))
            assert await next_frames(frames, "retry:", 1) == ["retry: 1000\n\n"]
            loop = asyncio.get_running_loop()
            FailingLog.down = True
            producer.append(1)  # wakes the hub, whose read of it fails
            while hub.failing_since is None:
                await asyncio.sleep(0.01)
            failed_at = hub.failing_since
            if outage == "brief":
                await asyncio.sleep(grace / 3)
                FailingLog.down = False
                got = await next_frames(frames, "id:", 5)
                assert got[:-1] == [": keepalive\n\n"] * (len(got) - 1), got
                assert "event: enqueued" in got[-1] and hub.failing_since is None
            else:
                with pytest.raises(BrokerError, match="Redis went away"):
                    await next_frames(frames, "id:", 5)
                assert loop.time() - failed_at >= grace
                assert hub.failing_since == failed_at  # still down, since then
            await frames.aclose()
        FailingLog.down = False

    run_guarded(scenario())
