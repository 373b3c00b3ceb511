"""The real feed read path on the real Redis, driven by Hypothesis against TaskFeed's model.

Rows are appended through the broker's scripts on a queue with a tiny retention, so the
log trims itself; its keys are deleted now and then (a reset: the next row starts a new
epoch). One client reads it only through FeedLog.read, the atomic gap-checked script, in
batches of 1 to 3 rows; a connection may break anywhere in a read's delivery (the client
keeps a prefix of the rows, or misses the gap frame) and the client reconnects with its
cursor's wire id, parsed back as Last-Event-ID. The model predicts every reply (a gap and
its reason, or exactly which rows) and F1-F5 are checked on the client after every step.
"""

from __future__ import annotations

import asyncio
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

import redis
import redis.asyncio as aioredis
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule, run_state_machine_as_test

from taskq.broker import Broker
from taskq.feed.cursor import Cursor, parse_cursor
from taskq.feed.log import FeedLog, Gap, Rows
from taskq.settings import Settings

RETENTION = 3
SEEN: Counter[str] = Counter()
PATHS = {
    "rows, all of them", "rows, cut off", "gap: trimmed", "gap: epoch", "gap frame lost",
    "reconnect at the start", "reconnect mid-log", "reset",
}  # fmt: skip
Row = tuple[int, int]  # (epoch number, seq)


@dataclass
class Client:
    """The model client: where it is, what it has, and what the oracle knows about it."""

    cursor: Cursor = field(default_factory=Cursor.start)
    epoch: int = 0  # the cursor's epoch as a number (0: none)
    got: set[Row] = field(default_factory=set)
    mark: Row = (0, 0)  # where its last gap resynced it
    lost: bool = False  # since then, rows it was owed were trimmed or its log was reset
    open: bool = True
    dupes: int = 0


class FeedMachine(RuleBasedStateMachine):
    client: redis.Redis
    url: str

    def __init__(self) -> None:
        super().__init__()
        self.broker = Broker(self.client, f"f-{uuid.uuid4().hex[:10]}", events_retention=RETENTION)
        self.keys = self.broker.keys
        self.loop = asyncio.new_event_loop()
        self.aclient = aioredis.Redis.from_url(self.url, decode_responses=True)
        self.log = FeedLog(self.aclient, self.keys)
        self.epochs: list[str] = []  # epoch names, oldest first; number = index + 1
        self.has_epoch = False
        self.head, self.first = 0, 1
        self.rows: dict[Row, str] = {}  # the task each row of each epoch was about
        self.me = Client()
        self.appended = 0

    # -- the log ----------------------------------------------------------------------

    @property
    def epoch(self) -> int:
        return len(self.epochs) if self.has_epoch else 0

    def follows(self) -> bool:
        return self.me.epoch in (0, self.epoch)

    @rule(n=st.integers(1, 3))
    def append(self, n: int) -> None:
        for _ in range(n):
            self.appended += 1
            task_id = f"t{self.appended}"
            assert self.broker.enqueue(task_id).created
            if not self.has_epoch:
                name = str(self.client.get(self.keys.epoch))
                assert name not in self.epochs, "a new log got an old epoch"
                self.epochs.append(name)
                self.has_epoch = True
            self.head += 1
            self.rows[(self.epoch, self.head)] = task_id
            first = max(self.first, self.head - RETENTION + 1)  # XADD MAXLEN, exact
            self.me.lost |= self.follows() and first - 1 > self.me.cursor.seq
            self.first = first

    @rule()
    def reset(self) -> None:
        """The log's keys are lost, as after a crash without persistence."""
        if not self.has_epoch:
            return
        self.client.delete(self.keys.events, self.keys.seq, self.keys.epoch)
        self.me.lost |= self.me.epoch == self.epoch
        self.has_epoch, self.head, self.first = False, 0, 1
        SEEN["reset"] += 1

    # -- the client -------------------------------------------------------------------

    @rule()
    def drop(self) -> None:
        self.me.open = False

    @rule()
    def reconnect(self) -> None:
        """Reconnect with Last-Event-ID: the cursor's wire id must parse back to it."""
        if self.me.open:
            return
        again = parse_cursor(self.me.cursor.wire_id)
        assert isinstance(again, Cursor)
        assert (again.epoch, again.seq) == (self.me.cursor.epoch, self.me.cursor.seq)
        self.me.cursor, self.me.open = again, True
        SEEN["reconnect at the start" if again.seq == 0 else "reconnect mid-log"] += 1

    @rule(batch=st.integers(1, 3), cut=st.one_of(st.none(), st.integers(0, 2)))
    def read(self, batch: int, cut: int | None) -> None:
        """One atomic read; with `cut`, the connection breaks after that many rows."""
        if not self.me.open:
            return
        got = self.loop.run_until_complete(self.log.read(self.me.cursor, batch))
        reason = self.predicted_gap()
        if reason is not None:
            assert isinstance(got, Gap) and got.reason == reason, got
            assert (got.first, got.head, got.resume_at.seq) == (self.first, self.head, self.head)
            self.take_gap(got, lost_frame=cut is not None)
            return
        expected = list(
            range(self.me.cursor.seq + 1, min(self.head, self.me.cursor.seq + batch) + 1)
        )
        assert isinstance(got, Rows), got
        assert [r.cursor.seq for r in got.rows] == expected
        assert all(r.cursor.epoch == self.epochs[self.epoch - 1] for r in got.rows)
        assert [r.fields["task"] for r in got.rows] == [
            self.rows[(self.epoch, s)] for s in expected
        ]
        self.take_rows(got, batch, cut)

    def predicted_gap(self) -> str | None:
        """What read_events.lua must answer, by its rules, in its order."""
        me = self.me
        if me.epoch not in (0, self.epoch):
            return "epoch"
        if me.cursor.seq > self.head:
            return "ahead"
        if me.cursor.seq < self.first - 1:
            return "trimmed"
        return None

    def take_gap(self, gap: Gap, lost_frame: bool) -> None:
        if lost_frame:  # the gap frame went to a dead socket: nothing changes
            self.me.open = False
            SEEN["gap frame lost"] += 1
            return
        assert self.me.lost, f"F4: a {gap.reason} gap, but nothing owed was lost"
        SEEN[f"gap: {gap.reason}"] += 1
        self.me.cursor, self.me.epoch = gap.resume_at, self.epoch
        self.me.mark, self.me.lost = (self.epoch, self.head), False

    def take_rows(self, got: Rows, batch: int, cut: int | None) -> None:
        me = self.me
        arrived = got.rows if cut is None else got.rows[:cut]
        if cut is not None and cut < len(got.rows):
            me.open = False
            SEEN["rows, cut off"] += 1
        for row in arrived:
            key = (self.epoch, row.cursor.seq)
            me.dupes += key in me.got
            me.got.add(key)
        if arrived:
            if me.epoch == 0:
                me.lost = False  # it now follows this log from its first row
            me.cursor, me.epoch = arrived[-1].cursor, self.epoch
        if me.open and len(got.rows) < batch:
            SEEN["rows, all of them"] += 1
            self.assert_at_head("F3: a read that reached the head")

    def assert_at_head(self, why: str) -> None:
        head = int(self.client.get(self.keys.seq) or 0)
        epoch = str(self.client.get(self.keys.epoch) or "")
        assert (self.me.cursor.epoch, self.me.cursor.seq) == (epoch, head), why

    # -- F1, F2, F5 -------------------------------------------------------------------

    @invariant()
    def no_silent_gap_and_no_duplicate(self) -> None:
        me = self.me
        mark_epoch, mark_seq = me.mark
        assert mark_epoch in (0, me.epoch), "F1: left its log without a gap"
        since = mark_seq if me.epoch == mark_epoch else 0
        missing = [s for s in range(since + 1, me.cursor.seq + 1) if (me.epoch, s) not in me.got]
        assert missing == [], f"F1: rows {missing} skipped without a gap"
        assert me.dupes == 0, "F2"

    def teardown(self) -> None:
        try:
            self.me.open = True  # F5: once the stream stays open, the client reaches the head
            for _ in range(self.head + 4):
                got = self.loop.run_until_complete(self.log.read(self.me.cursor, 3))
                if isinstance(got, Gap):
                    self.take_gap(got, lost_frame=False)
                elif len(got.rows) < 3:
                    self.take_rows(got, 3, None)
                    break
                else:
                    self.take_rows(got, 3, None)
            self.assert_at_head("F5: an open stream reaches the head")
        finally:
            self.loop.run_until_complete(self.aclient.aclose())
            self.loop.close()


def machine_on(client: redis.Redis, settings_: Settings) -> type[FeedMachine]:
    return type("Machine", (FeedMachine,), {"client": client, "url": settings_.redis_url})


def test_the_real_feed_read_path_answers_as_the_taskfeed_model(
    client: redis.Redis, settings: Settings
) -> None:
    run_state_machine_as_test(
        machine_on(client, settings),
        settings=hypothesis_settings(),
    )


def hypothesis_settings() -> settings:
    return settings(
        max_examples=40,
        stateful_step_count=30,
        deadline=None,
        database=None,
        suppress_health_check=[HealthCheck.too_slow],
    )


def test_every_path_of_the_feed_is_compared_with_the_model(
    client: redis.Redis, settings: Settings
) -> None:
    """A fixed run through the same rules, so each path is checked whatever Hypothesis
    draws: a fresh client behind a trimmed log, cut-off reads, a lost gap frame, resets
    both while the client follows the log and while it waits at an empty one."""
    SEEN.clear()
    m = machine_on(client, settings)()
    step = Steps(m)
    step(m.append, 3)
    step(m.append, 2)  # rows 1 and 2 are trimmed before the client's first read
    step(m.read, 2, 0)  # the gap frame is lost with the connection
    step(m.reconnect)
    step(m.read, 2, None)  # gap: trimmed
    step(m.append, 3)
    step(m.read, 2, 1)  # one of two rows arrives
    step(m.reconnect)
    step(m.read, 3, None)
    step(m.reset)
    step(m.append, 1)
    step(m.read, 1, None)  # gap: epoch
    step(m.reset)
    step(m.read, 1, None)  # gap: epoch, onto a log with no epoch yet
    step(m.drop)
    step(m.reconnect)  # with `.0.0`, the start
    step(m.append, 2)
    step(m.read, 3, None)
    m.teardown()
    assert set(+SEEN) >= PATHS, PATHS - set(+SEEN)


class Steps:
    """Runs one rule of a machine, then its invariant, as Hypothesis would."""

    def __init__(self, machine: FeedMachine) -> None:
        self.machine = machine

    def __call__(self, rule: Callable[..., None], *args: object) -> None:
        rule(*args)
        self.machine.no_silent_gap_and_no_duplicate()
