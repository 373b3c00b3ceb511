"""Firing schedules from a worker's maintenance: an idle worker wakes for the next tick,
not at its next poll."""

from __future__ import annotations

import dataclasses
import logging
import time
from datetime import timedelta

import pytest

from conftest import ON_CLUSTER
from helpers import Event, events, this_hours_tick
from taskq import App
from taskq.broker import Broker
from taskq.errors import BrokerError
from taskq.keys import schedule_task_id
from taskq.registry import Presence, lacking, register, unregister
from taskq.schedules import DEFAULT_GRACE, Schedule, make_schedule
from taskq.shards import SHARDS_KEY
from taskq.worker import periodic as periodic_module
from taskq.worker.periodic import Periodic
from waiting import wait_until
from worker_support import StartWorker

PERIOD = timedelta(milliseconds=700)


def tidy_every(period: timedelta) -> Schedule:
    return make_schedule(name="tidy", task="tidy", cron=None, every=period, tz=None,
                         args=(), kwargs={}, policy="latest", grace=DEFAULT_GRACE,
                         max_retries=3)


def test_no_wait_is_known_before_the_first_firing(queue: Broker) -> None:
    schedule = tidy_every(PERIOD)
    periodic = Periodic(queue, [schedule])
    assert Periodic(queue, []).wait_seconds() is None
    assert periodic.wait_seconds() is None
    periodic.run()
    wait = periodic.wait_seconds()
    assert wait is not None and 0 <= wait <= PERIOD.total_seconds()


def test_an_idle_worker_fires_each_tick_on_time_whatever_its_poll(
    app: App, start_worker: StartWorker
) -> None:
    @app.periodic(every=PERIOD)
    @app.task("tidy")
    def tidy() -> None:
        pass

    # A poll far longer than the period: a worker that slept a poll would fire late.
    start_worker(poll_seconds=5.0)
    broker = app.broker
    prefix = schedule_task_id("tidy", 0)[:-1]

    def ticks_made() -> list[Event]:
        return [e for e in events(broker.client, broker.keys)
                if e.type == "enqueued" and e.task.startswith(prefix)]

    made = wait_until(lambda: len(ticks_made()) >= 3, 10, "three ticks") and ticks_made()[1:3]
    # The first tick after start may be any amount late (the schedule was new); the ones
    # after it are fired when they come, give or take a maintenance turn and a round trip.
    late = [int(e.fields["ts"]) - int(e.task.rsplit(":", 1)[1]) for e in made]
    assert all(0 <= ms < 1000 for ms in late), late


def test_a_schedule_whose_ticks_cannot_be_computed_is_logged_once_and_left_out(
    queue: Broker, caplog: pytest.LogCaptureFixture
) -> None:
    # Declaring it is refused (see test_schedules); built by hand, as a definition from
    # another version of croniter might be, it must not stop the worker's maintenance.
    good = tidy_every(PERIOD)
    never = dataclasses.replace(good, name="never", cron="0 0 30 2 *", every_ms=None)
    periodic = Periodic(queue, [never, good])
    caplog.set_level(logging.ERROR, logger="taskq.worker")
    for _ in range(3):
        periodic.run()
    assert [r.message for r in caplog.records] == [
        "schedule 'never' (cron '0 0 30 2 *' (UTC)): its ticks cannot be computed, so this "
        "worker no longer fires it"]
    assert queue.schedule_state("tidy") is not None
    assert periodic.wait_seconds() is not None


def test_a_schedule_redis_refuses_to_fire_is_logged_once_and_left_out(
    queue: Broker, caplog: pytest.LogCaptureFixture
) -> None:
    # Built by hand past the declaration's checks: fire.lua refuses its definition. The
    # same call would fail for ever, so it is no outage to wait out.
    good = tidy_every(PERIOD)
    refused = dataclasses.replace(good, name="refused", max_retries=-1)
    periodic = Periodic(queue, [refused, good])
    caplog.set_level(logging.ERROR, logger="taskq.worker")
    for _ in range(3):
        periodic.run()
    (logged,) = [r.message for r in caplog.records]
    assert logged.startswith("schedule 'refused' (every 0:00:00.700000): Redis refuses to fire it")
    assert "max_retries must be" in logged
    assert queue.schedule_state("tidy") is not None
    assert queue.schedule_state("refused") is None


def test_a_schedule_a_key_of_another_type_stops_is_held_back_then_fires_its_tick(
    queue: Broker, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Redis state, not the declaration: once the key is mended the tick fires, and
    meanwhile the wait is the hold's, not 0 (which spun the worker's upkeep)."""
    monkeypatch.setattr(periodic_module, "REFRESH_SECONDS", 0.3)
    periodic = Periodic(queue, [tidy_every(PERIOD)])
    periodic.run()  # new: it starts now
    key = queue.keys.ready
    queue.client.set(key, "not taskq's")
    time.sleep(PERIOD.total_seconds())
    caplog.set_level(logging.WARNING, logger="taskq.worker")
    assert periodic.run() == 0 and periodic.run() == 0
    (held,) = [r.getMessage() for r in caplog.records]
    assert held.startswith("schedule 'tidy' (every 0:00:00.700000): not fired until Redis "
                           "takes it, asking every 0.3 s: Redis could not fire")
    assert f"WRONGTYPE {key} holds a string" in held
    wait = periodic.wait_seconds()
    assert wait is not None and 0 < wait <= 0.3
    queue.client.delete(key)
    wait_until(lambda: periodic.run() == 1, 5, "the held tick fired")
    assert caplog.records[-1].getMessage() == "schedule 'tidy' (every 0:00:00.700000): fires again"


@pytest.mark.skipif(ON_CLUSTER, reason="CONFIG SET reaches one node of a cluster")
def test_a_write_redis_refuses_for_a_while_is_waited_out_not_left_out(
    queue: Broker, caplog: pytest.LogCaptureFixture
) -> None:
    # Too few replicas (or a failed save) makes Redis refuse every write for a while:
    # the error names the script, but the schedule is not at fault.
    periodic = Periodic(queue, [tidy_every(PERIOD)])
    queue.client.config_set("min-replicas-to-write", 1)
    try:
        with pytest.raises(BrokerError, match="NOREPLICAS"):
            periodic.run()
    finally:
        queue.client.config_set("min-replicas-to-write", 0)
    caplog.set_level(logging.ERROR, logger="taskq.worker")
    periodic.run()
    assert caplog.records == []
    assert queue.schedule_state("tidy") is not None


def test_a_schedule_whose_queue_redis_holds_sharded_is_left_out_saying_why(
    queue: Broker, caplog: pytest.LogCaptureFixture
) -> None:
    queue.client.hset(SHARDS_KEY, queue.queue, f"{queue.queue}~0,{queue.queue}~1")
    periodic = Periodic(queue, [tidy_every(PERIOD)])
    caplog.set_level(logging.ERROR, logger="taskq.worker")
    for _ in range(2):
        periodic.run()
    (logged,) = [r.getMessage() for r in caplog.records]
    assert logged.startswith("schedule 'tidy' (every 0:00:00.700000): this worker no longer "
                             f"fires it: queue {queue.queue!r} has 2 shards in Redis")
    assert caplog.records[0].exc_info is None


def test_a_run_asks_at_most_its_share_of_schedules_and_the_next_goes_on_from_there(
    queue: Broker, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run is a step of the worker loop's turn: thousands of schedules due at once
    must not hold up its acks and leases for seconds."""
    monkeypatch.setattr(periodic_module, "FIRES_PER_RUN", 3, raising=False)
    schedules = [dataclasses.replace(tidy_every(PERIOD), name=f"tidy{n}") for n in range(7)]
    periodic = Periodic(queue, schedules)
    asked: list[str] = []
    fire = queue.fire
    monkeypatch.setattr(queue, "fire", lambda schedule, *rest: (
        asked.append(schedule.name), fire(schedule, *rest))[1])
    periodic.run()
    assert asked == ["tidy0", "tidy1", "tidy2"]
    assert periodic.more and periodic.wait_seconds() == 0.0
    periodic.run()
    periodic.run()
    assert asked[3:] == ["tidy3", "tidy4", "tidy5", "tidy6"] and not periodic.more


def test_a_last_tick_written_by_hand_starts_the_schedule_afresh_rather_than_failing_it(
    queue: Broker, caplog: pytest.LogCaptureFixture
) -> None:
    """fire.lua judges the stored tick before its first write: a value that names no
    tick is none, as for a new schedule, not a new definition written and then a
    failed call that made the worker give the schedule up."""
    old, new = tidy_every(timedelta(seconds=1)), tidy_every(timedelta(seconds=2))
    queue.client.hset(queue.keys.schedules, mapping={
        "last:tidy": "1.7e12x", "version:tidy": old.version, "definition:tidy": old.definition})
    caplog.set_level(logging.ERROR, logger="taskq.worker")
    periodic = Periodic(queue, [new])
    periodic.run()
    periodic.run()
    assert caplog.records == []
    state = queue.schedule_state("tidy")
    assert state is not None and state[1] == new.version
    assert abs(state[0] - queue.server_time_ms()) < 5000
    wait_until(lambda: periodic.run() == 1, 5, "the next tick fired")


# -- held while a live worker of the queue does not run the schedule's task ----------

BEAT = timedelta(milliseconds=200)


def beat_every(period: timedelta, policy: str = "all", name: str = "beat") -> Schedule:
    return make_schedule(name=name, task="jobs.beat", cron=None, every=period, tz=None,
                         args=(), kwargs={}, policy=policy, grace=DEFAULT_GRACE,
                         max_retries=3)


def worker_running(queue: Broker, worker_id: str, *tasks: str) -> None:
    register(queue, Presence(worker_id=worker_id, host="box", pid=7, queues=(queue.queue,),
                             concurrency=1, tasks=tasks, version="0.1.0"), in_hand=0, ttl=30)


def worker_of_an_older_taskq(queue: Broker, worker_id: str, record: dict[str, str]) -> None:
    """Registered as a taskq that writes no name index did: its record and its entry."""
    queue.client.hset(queue.keys.worker(worker_id), mapping=record)
    queue.client.zadd(queue.keys.workers, {worker_id: queue.server_time_ms() + 30_000})


def tick_tasks(queue: Broker, name: str = "beat") -> list[str]:
    prefix = queue.keys.task(schedule_task_id(name, 0)[:-1])
    return sorted(map(str, queue.client.scan_iter(f"{prefix}*")))


class TestHeldWhileALiveWorkerDoesNotRunTheTask:
    @pytest.mark.parametrize(("policy", "runs"), [("all", "each"), ("latest", "one")])
    def test_its_ticks_wait_for_that_worker_to_stop_then_fire_as_the_policy_says(
        self, queue: Broker, caplog: pytest.LogCaptureFixture,
        monkeypatch: pytest.MonkeyPatch, policy: str, runs: str
    ) -> None:
        """A rolling deploy that adds the task: a worker of the deploy before would lease
        each tick and send it to the DLQ as unknown."""
        monkeypatch.setattr(periodic_module, "REFRESH_SECONDS", 0.3)
        schedule = beat_every(BEAT, policy)
        periodic = Periodic(queue, [schedule])
        start = queue.fire(schedule).last_tick_ms  # new: it starts now
        worker_running(queue, "w-new", "jobs.beat", "jobs.other")
        worker_running(queue, "w-old", "jobs.other")
        caplog.set_level(logging.WARNING, logger="taskq.worker")
        time.sleep(1.0)
        for _ in range(3):
            assert periodic.run() == 0
            time.sleep(0.35)  # past each hold, so the registry is asked again
        assert tick_tasks(queue) == []
        (held,) = [r.getMessage() for r in caplog.records]
        assert held == (
            f"schedule 'beat' (every 0:00:00.200000): not fired while live worker 'w-old' "
            f"of queue {queue.queue!r} does not run task 'jobs.beat' (it would lease the "
            "ticks and send them to the DLQ as unknown); ticks resume when every live "
            f"worker of the queue runs it, and its policy ({policy}) then says which of "
            "the held ones run")
        wait = periodic.wait_seconds()
        assert wait is not None and 0 <= wait <= 0.3
        unregister(queue, "w-old")
        made = wait_until(periodic.run, 5, "the held ticks fired")
        last = queue.schedule_state("beat")
        assert last is not None
        owed = schedule.ticks(start, last[0], 100)
        assert len(owed) >= 5
        assert made == (len(owed) if runs == "each" else 1) == len(tick_tasks(queue))
        assert caplog.records[-1].getMessage() == (
            f"schedule 'beat' (every 0:00:00.200000): every live worker of queue "
            f"{queue.queue!r} runs task 'jobs.beat' now: fires again")

    def test_a_worker_of_an_older_taskq_lacks_a_task_only_if_its_record_says_so(
        self, queue: Broker
    ) -> None:
        """An older taskq writes no name index, but every one writes its names to its
        record; a record that holds none says nothing either way."""
        worker_of_an_older_taskq(queue, "w-runs", {"tasks": "jobs.other,jobs.beat"})
        worker_of_an_older_taskq(queue, "w-silent", {"host": "box"})
        assert lacking(queue, ["jobs.beat", "jobs.other"]) == {}
        worker_of_an_older_taskq(queue, "w-lacks", {"tasks": "jobs.other"})
        worker_running(queue, "w-none")
        assert lacking(queue, ["jobs.beat", "jobs.other", "jobs.beat"]) == {
            "jobs.beat": "w-lacks", "jobs.other": "w-none"}
        assert lacking(queue, []) == {}

    def test_a_worker_whose_record_expired_is_not_waited_for(self, queue: Broker) -> None:
        register(queue, Presence(worker_id="w-gone", host="box", pid=7, queues=(queue.queue,),
                                 concurrency=1, tasks=("jobs.other",), version="0.1.0"),
                 in_hand=0, ttl=0.05)
        time.sleep(0.1)
        assert lacking(queue, ["jobs.beat"]) == {}

    def test_a_run_asks_the_registry_once_for_all_its_schedules_and_only_with_a_tick_due(
        self, queue: Broker, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """Every worker fires every few seconds: the registry is one round trip a run
        however many schedules, and none while no tick is due."""
        hourly = [beat_every(timedelta(hours=1), name=f"beat{n}") for n in range(3)]
        tick = this_hours_tick(queue.server_time_ms())
        for schedule in hourly:
            queue.fire(schedule)
            queue.client.hset(queue.keys.schedules, f"last:{schedule.name}",
                              tick - 2 * 3_600_000)
        worker_running(queue, "w-new", "jobs.beat")
        asked: list[int] = []
        script = queue.scripts.lacking
        monkeypatch.setattr(queue.scripts, "lacking", lambda **kw: (
            asked.append(1), script(**kw))[1])
        periodic = Periodic(queue, hourly)
        assert periodic.run() == 0 and asked == []  # learns each last tick
        assert periodic.run() == 3 * 2 and asked == [1]
        assert periodic.run() == 0 and asked == [1]

    def test_a_registry_redis_cannot_read_is_warned_of_once_and_holds_nothing_back(
        self, queue: Broker, caplog: pytest.LogCaptureFixture
    ) -> None:
        queue.client.set(queue.keys.workers, "not taskq's")
        periodic = Periodic(queue, [beat_every(BEAT)])
        periodic.run()
        caplog.set_level(logging.WARNING, logger="taskq.worker")
        made = [wait_until(periodic.run, 5, f"tick {n}") for n in range(2)]
        assert all(made)
        (warned,) = [r.getMessage() for r in caplog.records]
        assert warned.startswith(f"queue {queue.queue!r}: schedules fire without asking "
                                 "whether every live worker runs their task")
        assert "WRONGTYPE" in warned


def test_two_workers_firing_one_schedule_under_two_definitions_are_told_once_a_minute(
    queue: Broker, caplog: pytest.LogCaptureFixture
) -> None:
    """Each writes its definition over the other's and fires its own ticks, so the task
    ran on the ticks of both, and nothing said so."""
    old = Periodic(queue, [tidy_every(timedelta(milliseconds=300))])
    new = Periodic(queue, [tidy_every(timedelta(milliseconds=500))])
    caplog.set_level(logging.INFO, logger="taskq.worker")
    old.run()
    new.run()  # a deploy: the new definition replaces the old, once
    assert "another definition" not in caplog.text
    assert "replaced the one stored for it" in caplog.text
    for _ in range(3):  # the old worker still runs: the two write over each other
        time.sleep(0.55)  # a tick of each is due
        old.run()
        new.run()
    said = [r.message for r in caplog.records
            if "fires it under another definition" in r.message]
    assert len(said) == 2 and all(r.levelno == logging.WARNING for r in caplog.records
                                  if r.message in said)
    assert {m.split("(this worker wrote its own, ")[1].split(",")[0] for m in said} == {
        old.schedules[0].when, new.schedules[0].when}
