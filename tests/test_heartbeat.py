"""The heartbeat thread: one renewal call per beat, on time, never held up by a handler."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
import redis

from helpers import events
from taskq import App, current_task
from taskq.broker import Broker
from taskq.context import TaskContext
from taskq.registry import Presence, read_workers
from taskq.settings import Settings
from taskq.worker import time_limits
from taskq.worker.heartbeat import Cadence, Heartbeat
from taskq.worker.queues import Queues
from taskq.worker.slots import Slots
from taskq.worker.time_limits import TimeLimits
from test_broker_heartbeat import evalsha_calls, hold
from waiting import event_types, wait_for_state, wait_until
from worker_support import WorkerThread


def lease(seconds: float) -> Settings:
    return Settings.from_env({}, lease_seconds=seconds)


def holding(*contexts: TaskContext) -> Slots:
    slots = Slots(len(contexts) or 1)
    for context in contexts:
        slots.hold(context)
    return slots


def context_of(broker: Broker, task_id: str, token: int) -> TaskContext:
    return TaskContext(task_id=task_id, name="n", queue=broker.queue, worker_id="w1",
                       token=token, attempt=1, max_retries=3)


@contextmanager
def beating(heartbeat: Heartbeat) -> Iterator[Heartbeat]:
    """`heartbeat` running while the block runs, stopped after it."""
    heartbeat.start()
    try:
        yield heartbeat
    finally:
        heartbeat.stop()
        heartbeat.join(5)


class TestCadence:
    def test_beats_are_due_an_interval_apart_counted_from_the_first(self) -> None:
        cadence = Cadence(1.0, start=100.0)
        assert cadence.wait(100.0) == 1.0
        cadence.beaten(101.4)  # the beat itself took 0.4 s
        assert cadence.wait(101.4) == pytest.approx(0.6)

    def test_an_overdue_beat_is_due_at_once_and_missed_ones_are_not_made_up(self) -> None:
        cadence = Cadence(1.0, start=100.0)
        cadence.beaten(104.5)  # Redis held the beat for 3.5 s
        assert cadence.wait(104.5) == 0.0
        cadence.beaten(104.6)  # due at 104.5, so the next is due at 105.5
        assert cadence.wait(104.6) == pytest.approx(0.9)


class TestBeat:
    def test_a_beat_renews_every_lease_in_hand_with_one_call(
        self, broker: Broker, client: redis.Redis
    ) -> None:
        contexts = [context_of(broker, t, k) for t, k in hold(broker, "a", "b", "c")]
        broker.heartbeat("a", contexts[0].token, 10)  # loads the script
        calls = evalsha_calls(client)
        before = [c.confirmed_at for c in contexts]
        Heartbeat(Queues.of(broker), lease(10), holding(*contexts)).beat()
        assert evalsha_calls(client) == calls + 1
        assert all(c.confirmed_at > b for c, b in zip(contexts, before, strict=True))
        assert not any(c.lease_lost for c in contexts)

    def test_a_stale_lease_is_marked_lost_and_a_settled_one_is_not_sent(
        self, broker: Broker, client: redis.Redis
    ) -> None:
        held = hold(broker, "a", "b", "c")
        stale, fresh, settled = (context_of(broker, t, k) for t, k in held)
        client.hincrby(broker.keys.task("a"), "fencing_token", 1)
        settled.finished = True
        seen = len(events(client, broker.keys))
        Heartbeat(Queues.of(broker), lease(10), holding(stale, fresh, settled)).beat()
        assert stale.lease_lost and not fresh.lease_lost and not settled.lease_lost
        assert [e.task for e in events(client, broker.keys, seen)] == ["b"]

    def test_a_run_past_its_time_limit_is_timed_out_and_no_longer_renewed(
        self, broker: Broker, client: redis.Redis
    ) -> None:
        (a, ka), (b, kb), (c, kc) = hold(broker, "a", "b", "c")
        overdue, within = context_of(broker, a, ka), context_of(broker, b, kb)
        overdue.limit(0.01)
        within.limit(60)
        waiting = context_of(broker, c, kc)
        waiting.limit(0.01)  # never begun: its task waits for a free handler
        for context in (overdue, within):
            context.begin()
        time.sleep(0.02)
        seen = len(events(client, broker.keys))
        slots, ended = holding(overdue, within, waiting), []
        TimeLimits(slots, ended.append).enforce()
        Heartbeat(Queues.of(broker), lease(10), slots).beat()
        assert overdue.timed_out and not within.timed_out and not waiting.timed_out
        assert ended == [overdue]
        assert [e.task for e in events(client, broker.keys, seen)] == ["b", "c"]

    def test_a_run_kept_past_its_limit_is_renewed_and_said_to_run_on_once_a_while(
        self, broker: Broker, client: redis.Redis, caplog: pytest.LogCaptureFixture,
        monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """A concurrency-limited task's run keeps its lease and slot until its handler
        ends: one that never does holds them for good, and the log says so again."""
        (a, ka), = hold(broker, "a")
        kept = context_of(broker, a, ka)
        kept.limit(0.01)
        kept.begin()
        time.sleep(0.02)
        slots = holding(kept)
        limits = TimeLimits(slots, lambda context: context.keep_to_end())
        caplog.set_level(logging.WARNING, logger="taskq.worker")
        limits.enforce()
        assert kept.timed_out and kept.kept_to_end
        seen = len(events(client, broker.keys))
        Heartbeat(Queues.of(broker), lease(10), slots).beat()
        assert [e.task for e in events(client, broker.keys, seen)] == ["a"]


        def said() -> list[str]:
            return [r.message for r in caplog.records if "has not ended" in r.message]

        limits.enforce()
        assert said() == []  # not a minute yet
        monkeypatch.setattr(time_limits, "KEPT_SAY_SECONDS", 0.0)
        limits.enforce()
        monkeypatch.setattr(time_limits, "KEPT_SAY_SECONDS", 60.0)
        limits.enforce()
        (once,) = said()
        assert once.startswith(f"task {a} (n) is ") and "past its time limit of 0.01s" in once

    def test_the_thread_outlives_an_error_in_a_beat(self, broker: Broker) -> None:
        (a, token), = hold(broker, "a", seconds=0.5)
        renewed = 0

        class BrokenOnce(Slots):
            """Slots whose first listing fails, as a bug in one beat would."""

            def in_hand(self) -> list[TaskContext]:
                nonlocal renewed
                renewed += 1
                if renewed == 1:
                    raise OverflowError("a bug in one beat")
                return super().in_hand()

        slots = BrokenOnce(1)
        slots.hold(context_of(broker, a, token))
        with beating(Heartbeat(Queues.of(broker), lease(0.3), slots)):
            wait_until(lambda: renewed >= 3, 5, "beats after the failing one")
        assert broker.reap() == [] and broker.ack(a, token)


def test_beats_that_come_so_late_a_lease_is_near_lapsing_are_said_once(
    broker: Broker, caplog: pytest.LogCaptureFixture
) -> None:
    """A heartbeat starved of the GIL by many CPU-bound handler threads ran late with
    nothing in the log until the leases lapsed and their tasks ran again."""
    beats = 0

    class Slow(Slots):
        """Slots whose listing holds the second and third beats up, as a starved
        thread is held."""

        def in_hand(self) -> list[TaskContext]:
            nonlocal beats
            beats += 1
            if beats in (2, 3):
                time.sleep(0.25)  # the interval is 0.1 s: more than two intervals late
            return super().in_hand()

    caplog.set_level("WARNING", logger="taskq.worker")
    with beating(Heartbeat(Queues.of(broker), lease(0.3), Slow(1))):
        wait_until(lambda: beats >= 6, 5, "beats after the slow ones")
    said = [r.getMessage() for r in caplog.records if "the heartbeat ran" in r.getMessage()]
    assert len(said) == 1, said
    assert "leases of 0.3s renewed every 0.1s" in said[0] and "--processes" in said[0]


def test_a_lost_lease_inside_a_long_effect_does_not_stall_the_other_leases(
    app: App, settings: Settings, client: redis.Redis
) -> None:
    """X sits in its effect() for three leases and loses its lease meanwhile; the
    heartbeat must go on renewing Y, whose handler works two and a half leases."""
    lease = settings.lease_seconds
    in_effect = threading.Event()

    @app.task("x")
    def x() -> None:
        with current_task().effect():
            in_effect.set()
            time.sleep(3 * lease)

    @app.task("y")
    def y() -> None:
        time.sleep(2.5 * lease)

    x_id = x.enqueue().task_id
    y_id = y.enqueue().task_id
    running = WorkerThread(app, settings, concurrency=2)
    try:
        assert in_effect.wait(5)
        # As a reap and a lease elsewhere would leave it: X's token is no longer ours.
        client.hincrby(app.broker.keys.task(x_id), "fencing_token", 1)
        record = wait_for_state(app.broker, y_id, "completed", 4 * lease + 5)
        # Y kept its one lease: no reap or other lease minted a token over it.
        assert record.retries == 0
        assert [int(e.fields["token"]) for e in events(client, app.broker.keys)
                if e.task == y_id and e.type == "leased"] == [record.fencing_token]
        assert "reaped" not in event_types(client, app.broker.keys, y_id)
    finally:
        running.close(client)


class TestTheRegistry:
    def test_a_registration_that_fails_is_warned_of_once_and_its_return_said(
        self, broker: Broker, caplog: pytest.LogCaptureFixture
    ) -> None:
        presence = Presence(worker_id="w-1", host="box", pid=42, queues=[broker.queue],
                            concurrency=1, tasks=[], version="0")
        heartbeat = Heartbeat(Queues.of(broker), lease(10), holding(), presence=presence)
        broker.client.set(broker.keys.workers, "not a sorted set")
        with caplog.at_level("INFO", logger="taskq.worker"):
            heartbeat.announce()
            heartbeat.announce()
            broker.client.delete(broker.keys.workers)
            heartbeat.announce()
            heartbeat.announce()
        said = [(r.levelname, r.getMessage()) for r in caplog.records
                if "regist" in r.getMessage()]
        assert [level for level, _ in said] == ["WARNING", "INFO"]
        assert said[0][1].startswith(f"registering on queue {broker.queue!r} failed, so the "
                                     "queue's workers view and the other workers do not see")
        assert said[1][1] == f"registered on queue {broker.queue!r} again"
        assert [w.worker_id for w in read_workers(broker)[1]] == ["w-1"]
