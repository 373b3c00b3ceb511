"""RoostPush's split-attach bug (seed 002): a client that reads the log and then attaches
to live delivery in two steps silently loses a row appended between them; taskq's
`feed_frames` reads and attaches in one gap-checked step and does not."""

from __future__ import annotations

from collections.abc import Callable
from contextvars import ContextVar
from typing import cast

import pytest
import redis
import redis.asyncio as aioredis

from feed_support import KEYS, Producer, Reader, cursor_at, hub_reaches, run, running_hub
from taskq.feed.cursor import Cursor
from taskq.feed.log import FeedLog, Gap, Rows
from taskq.settings import Settings

# The log armed in this task, seen by the tasks it starts after (a client's stream,
# and the read that stream starts), not by those started before (the hub's tail reader).
ARMED: ContextVar[FeedLog | None] = ContextVar("armed", default=None)


class AppendsAfterRead(FeedLog):
    """Test instrumentation: once armed, the first read made by the arming task or a
    task it starts appends one row right after it returns, as a writer would in the
    instant after the read. Reads by tasks started before (the hub's tail reader) pass
    untouched."""

    def __init__(self, client: aioredis.Redis, append: Callable[[], None]) -> None:
        super().__init__(client, KEYS)
        self.append = append
        self.fired = False
        self.injected = 0

    def arm(self) -> None:
        ARMED.set(self)

    async def read(self, cursor: Cursor, count: int) -> Rows | Gap:
        result = await super().read(cursor, count)
        if ARMED.get() is self and not self.fired:
            self.fired = True
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
