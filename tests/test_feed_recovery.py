"""The change feed after the log itself went wrong: reset logs (a new epoch), cursors
ahead of the head, malformed ids, and rows a crash lost or rewrote. Each gives a
resuming client an explicit gap with its reason, never a silent one."""

from __future__ import annotations

import time

import pytest
import redis

from feed_support import (
    DEADLINE,
    KEYS,
    Producer,
    Reader,
    bounds,
    cursor_at,
    hub_reaches,
    resumed_until_quiet,
    retained,
    row_ts,
    run,
    running_hub,
    seen_then_gone,
)
from taskq.results import NewTask
from taskq.settings import Settings

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
            reader = await seen_then_gone(hub, producer, 4)
            old = reader.last_id
            reset_log(client)
            producer.append(3)  # a new log: seqs 1..3 in a new epoch
            epoch, _, _ = bounds(client)
            assert old is not None and not old.startswith(epoch + ".")
            reader.connect()
            # A hub that already holds the old epoch's rows learns of the reset on its
            # next read of the log, so keepalives may come first; then the gap.
            frames = [f for f in await reader.until_gap() if f.event != "keepalive"]
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
            reader = await seen_then_gone(hub, producer, 2)
            reset_log(client)
            reader.connect()
            await reader.until_gap()
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
            reader = await resumed_until_quiet(hub, "not-an-id\r\nevent: x")
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
            reader = await resumed_until_quiet(hub, held.wire_id)
            return reader

    reader = run(scenario())
    head = 3 + rewritten + 1
    assert [(g["reason"], g["head"]) for g in reader.gaps] == [("diverged", head)], (
        f"resuming at a rewritten row, the client got {reader.seqs()} and gaps {reader.gaps}")
    assert reader.seqs() == [] and reader.seq == head


def test_a_rewritten_row_the_hubs_ring_holds_is_a_diverged_gap_not_served_from_it(
    settings: Settings, client: redis.Redis
) -> None:
    """The client got rows 1..5 elsewhere (another server, gone with the crash); this
    server's hub began after it and holds the rewritten 4, 5 and 6 in its ring. The
    client's row 5 is there by seq but not by fingerprint: serving 6 from the ring
    would pass over the new 4 and 5 in silence."""
    producer = Producer(client, retention=1000)
    producer.append(5)
    held = cursor_at(client, 5)
    rewrite_tail(client, producer, lost=2, rewritten=0)

    async def scenario() -> Reader:
        async with running_hub(settings.redis_url) as hub:
            await hub_reaches(hub, client)
            producer.append(3)
            await hub_reaches(hub, client)
            assert [row.cursor.seq for row in hub.ring] == [4, 5, 6]
            return await resumed_until_quiet(hub, held.wire_id)

    reader = run(scenario())
    assert [(g["reason"], g["head"]) for g in reader.gaps] == [("diverged", 6)], (
        f"resuming at a rewritten row, the client got {reader.seqs()} and gaps {reader.gaps}")
    assert reader.seqs() == [] and reader.seq == 6


def test_a_client_at_a_row_the_crash_kept_resumes_without_a_gap(
    settings: Settings, client: redis.Redis
) -> None:
    producer = Producer(client, retention=1000)
    producer.append(5)
    held = cursor_at(client, 3)
    rewrite_tail(client, producer, lost=2, rewritten=3)

    async def scenario() -> Reader:
        async with running_hub(settings.redis_url) as hub:
            reader = await resumed_until_quiet(hub, held.wire_id)
            return reader

    reader = run(scenario())
    assert reader.gaps == [] and reader.seqs() == [4, 5, 6]


# -- one of the log's keys lost alone ----------------------------------------------------


def test_a_lost_counter_restarts_after_the_last_row_in_a_new_epoch(client: redis.Redis) -> None:
    """A batch written after the counter alone was lost continues the stream's ids (an
    XADD at or below the last id would fail the script half done) and, since the
    server cannot tell what happened, names a new epoch."""
    producer = Producer(client, retention=1000)
    producer.append(4)
    epoch_before, _, _ = bounds(client)
    client.delete(KEYS.seq)
    created = producer.broker.enqueue_many([NewTask(task_id=f"late{i}") for i in range(3)])
    assert all(e.created for e in created)
    epoch, oldest, head = bounds(client)
    assert retained(client, 1, 100) == [1, 2, 3, 4, 5, 6, 7] and (oldest, head) == (1, 7)
    assert epoch and epoch != epoch_before


@pytest.mark.parametrize("counter", [None, "3"], ids=["lost", "behind"])
def test_a_counter_lost_or_behind_a_trimmed_log_gives_one_gap_then_quiet(
    settings: Settings, client: redis.Redis, counter: str | None
) -> None:
    """Until the next write restores it, the log's head is its last row, not the counter:
    with the counter missing or behind, the gap's resume point would be trimmed too, and
    the client and the hub would read gap after gap without ever waiting."""
    producer = Producer(client, retention=3)
    producer.append(10)
    epoch, oldest, head = bounds(client)
    assert (oldest, head) == (8, 10)
    if counter is None:
        client.delete(KEYS.seq)
    else:
        client.set(KEYS.seq, counter)

    async def scenario() -> tuple[list[str], int, list[int]]:
        async with running_hub(settings.redis_url) as hub:
            reader = Reader(hub, last_id=f"{epoch}.2.123")
            reader.connect()
            events: list[str] = []
            for _ in range(50):  # a spinning feed never goes quiet: stop it after 50 reads
                frames = await reader.next()
                events += [f.event for f in frames]
                if "keepalive" in events:
                    break
            await reader.drop()
            tail = hub.tail.seq
        return events, tail, [g["head"] for g in reader.gaps]

    events, tail, heads = run(scenario())
    assert events.count("gap") == 1 and "keepalive" in events, events[:10]
    assert heads == [10] and tail == 10


def test_a_lost_epoch_alone_keeps_the_ids_and_names_a_new_epoch(client: redis.Redis) -> None:
    producer = Producer(client, retention=1000)
    producer.append(4)
    epoch_before, _, _ = bounds(client)
    client.delete(KEYS.epoch)
    producer.append(2)
    epoch, oldest, head = bounds(client)
    assert retained(client, 1, 100) == [1, 2, 3, 4, 5, 6] and (oldest, head) == (1, 6)
    assert epoch and epoch != epoch_before
