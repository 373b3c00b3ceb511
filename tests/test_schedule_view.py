"""read_schedules: a queue's schedules as Redis holds them, read without the app, with
their next tick computed from the stored definition by the server's clock."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import redis

from taskq import App
from taskq.broker import Broker
from taskq.schedule_view import ScheduleView, forget_schedule, read_schedules, schedules_queue
from taskq.schedules import Schedule, make_schedule
from taskq.settings import Settings
from taskq.shards import Layout, register

SECOND = 1000


def declared(**overrides: Any) -> Schedule:
    options: dict[str, Any] = {"name": "tidy", "task": "jobs.tidy", "cron": None,
                               "every": timedelta(seconds=10), "tz": None, "args": (),
                               "kwargs": {}, "policy": "latest",
                               "grace": timedelta(minutes=1), "max_retries": 3}
    options.update(overrides)
    return make_schedule(**options)


def only(broker: Broker) -> ScheduleView:
    (view,) = read_schedules(broker).schedules
    return view


class TestWhatIsListed:
    def test_a_queue_no_worker_fired_a_schedule_on_lists_none(self, broker: Broker) -> None:
        view = read_schedules(broker)
        assert (view.queue, view.schedules) == ("test", [])
        assert abs(view.now_ms - broker.server_time_ms()) < 60 * SECOND

    def test_each_fired_schedule_is_listed_by_name_with_its_definition(
        self, broker: Broker
    ) -> None:
        report = declared(name="weekday-report", task="jobs.report", cron="0 9 * * 1-5",
                          every=None, tz="Europe/Paris", policy="skip", max_retries=0)
        tidy = declared(policy="all", grace=timedelta(seconds=30))
        for s in (tidy, report):
            broker.fire(s)
        views = read_schedules(broker).schedules
        assert [v.name for v in views] == ["tidy", "weekday-report"]
        assert [(v.task, v.when, v.policy, v.max_retries, v.version, v.definition)
                for v in views] == [
            ("jobs.tidy", "every 0:00:10", "all", 3, tidy.version, "current"),
            ("jobs.report", "cron '0 9 * * 1-5' (Europe/Paris)", "skip", 0, report.version,
             "current")]
        assert (views[0].every_ms, views[0].grace_ms, views[0].cron) == (10_000, 30_000, None)
        assert (views[1].cron, views[1].tz, views[1].every_ms) == (
            "0 9 * * 1-5", "Europe/Paris", None)

    def test_schedules_of_another_queue_are_not_listed(
        self, broker: Broker, queue: Broker
    ) -> None:
        queue.fire(declared(name="elsewhere"))
        assert read_schedules(broker).schedules == []


class TestTicks:
    def test_the_next_tick_follows_the_last_by_the_stored_definition(
        self, broker: Broker
    ) -> None:
        s = declared(every=timedelta(seconds=10))
        first = broker.fire(s)
        view = read_schedules(broker)
        (listed,) = view.schedules
        assert listed.last_tick_ms == first.last_tick_ms
        assert listed.next_tick_ms == s.next_tick(first.last_tick_ms)
        assert listed.last_tick_ms <= view.now_ms < listed.next_tick_ms

    def test_a_tick_a_worker_fired_moves_the_last_and_the_next_tick(
        self, broker: Broker
    ) -> None:
        s = declared(every=timedelta(seconds=1), policy="all")
        broker.fire(s)
        start = (broker.server_time_ms() // SECOND - 3) * SECOND
        broker.client.hset(broker.keys.schedules, "last:tidy", start)
        fired = broker.fire(s, s.ticks(start, broker.server_time_ms(), 100), start)
        assert len(fired.task_ids) == 3
        listed = only(broker)
        assert (listed.last_tick_ms, listed.next_tick_ms) == (start + 3 * SECOND,
                                                              start + 4 * SECOND)

    def test_a_tick_no_worker_fired_shows_as_a_next_tick_in_the_past(
        self, broker: Broker
    ) -> None:
        s = declared(every=timedelta(seconds=1))
        broker.fire(s)
        long_ago = broker.server_time_ms() // SECOND * SECOND - 3600 * SECOND
        broker.client.hset(broker.keys.schedules, "last:tidy", long_ago)
        view = read_schedules(broker)
        assert view.schedules[0].next_tick_ms == long_ago + SECOND < view.now_ms

    def test_a_cron_in_a_fixed_offset_zone_is_read_back_in_that_zone(
        self, broker: Broker
    ) -> None:
        s = declared(cron="0 0 * * *", every=None, tz=timezone(timedelta(hours=-5)))
        broker.fire(s)
        midnight_utc = int(datetime(2030, 1, 1, tzinfo=UTC).timestamp() * 1000)
        broker.client.hset(broker.keys.schedules, "last:tidy", midnight_utc)
        listed = only(broker)
        assert listed.tz == "UTC-05:00"
        assert listed.next_tick_ms == midnight_utc + 5 * 3600 * SECOND

    def test_a_fixed_offset_named_as_an_iana_zone_is_read_back_as_its_offset(
        self, broker: Broker
    ) -> None:
        """Read back as Australia/Sydney (+11 in December), its next tick was an hour
        before the workers', and a forget unforced took out a schedule they fired."""
        sydney = timezone(timedelta(hours=10), "Australia/Sydney")
        s = declared(cron="0 9 * * *", every=None, tz=sydney)
        broker.fire(s)
        last = s.next_tick(int(datetime(2025, 12, 1, tzinfo=UTC).timestamp() * 1000))
        broker.client.hset(broker.keys.schedules, "last:tidy", last)
        listed = only(broker)
        assert (listed.tz, listed.next_tick_ms) == ("UTC+10:00", s.next_tick(last))
        assert listed.next_tick_ms == last + 86_400 * SECOND


class TestStoredDefinition:
    def test_a_definition_replaced_by_a_firer_that_keeps_none_is_older(
        self, broker: Broker
    ) -> None:
        s = declared()
        broker.fire(s)
        # What a taskq that keeps no definitions writes when its definition changed.
        broker.client.hset(broker.keys.schedules, "version:tidy", "0123456789abcdef")
        listed = only(broker)
        assert (listed.definition, listed.version) == ("older", "0123456789abcdef")
        assert listed.task == "jobs.tidy"  # the older description is still shown

    def test_a_schedule_without_a_definition_is_listed_with_none(
        self, broker: Broker
    ) -> None:
        s = declared()
        broker.fire(s)
        broker.client.hdel(broker.keys.schedules, "definition:tidy")
        listed = only(broker)
        assert (listed.definition, listed.task, listed.when, listed.next_tick_ms) == (
            "missing", "", "", None)
        assert listed.version == s.version

    def test_the_next_firing_stores_the_definition_again(self, broker: Broker) -> None:
        s = declared()
        broker.fire(s)
        broker.client.hdel(broker.keys.schedules, "definition:tidy")
        broker.fire(s)
        assert only(broker).definition == "current"

    def test_an_unreadable_definition_is_missing_and_nothing_fails(
        self, broker: Broker
    ) -> None:
        broker.fire(declared())
        for raw in ("not json", "[1, 2]", '{"version": 7, "cron": 5, "every_ms": "x"}',
                    '{"cron": "0 0 * * *", "tz": "Mars/Olympus"}',
                    '{"cron": "0 0 * * *", "tz": "UTC+99:00"}',
                    '{"cron": "0 0 * * *", "tz": "%s"}' % ("a" * 5000), "[" * 100_000,
                    # Periods past what a timedelta holds, either way.
                    '{"cron": null, "every_ms": -100000000000000000}',
                    '{"cron": null, "every_ms": 100000000000000000}'):
            broker.client.hset(broker.keys.schedules, "definition:tidy", raw)
            listed = only(broker)
            assert listed.next_tick_ms is None, raw
            assert listed.definition in ("missing", "older"), raw

    def test_a_schedule_with_no_next_tick_has_none_and_nothing_fails(
        self, broker: Broker
    ) -> None:
        # 30 February: refused when declared, so built by hand, as a definition stored by
        # another version of taskq or croniter might read.
        never = dataclasses.replace(declared(cron="0 0 1 1 *", every=None), cron="0 0 30 2 *")
        broker.fire(never)
        assert only(broker).next_tick_ms is None
        broker.client.hset(broker.keys.schedules, "last:tidy", "9" * 30)
        assert only(broker).next_tick_ms is None

    def test_a_last_tick_that_is_not_a_number_is_left_out(self, broker: Broker) -> None:
        broker.fire(declared())
        broker.fire(declared(name="other"))
        broker.client.hset(broker.keys.schedules, "last:other", "soon")
        assert [v.name for v in read_schedules(broker).schedules] == ["tidy"]


class TestTheQueueSchedulesAreOn:
    def test_a_sharded_queue_named_whole_is_the_shard_its_workers_fire_schedules_on(
        self, client: redis.Redis
    ) -> None:
        layout = Layout.of("mail", 3)
        register(client, layout)
        app = App(queue="mail", shards=3, settings=Settings.from_env({}))
        assert schedules_queue(client, "mail") == app.schedules_queue == layout.shards[0]
        for shard in layout.shards:
            assert schedules_queue(client, shard) == shard

    def test_a_plain_queue_is_itself(self, broker: Broker) -> None:
        assert schedules_queue(broker.client, broker.queue) == broker.queue

    def test_a_schedule_of_a_sharded_queue_is_read_and_forgotten_by_the_queues_name(
        self, client: redis.Redis
    ) -> None:
        layout = Layout.of("mail", 3)
        register(client, layout)
        fires_on = Broker(client, layout.shards[0])
        fires_on.fire(declared())
        asked = Broker(client, schedules_queue(client, "mail"))
        assert [v.name for v in read_schedules(asked).schedules] == ["tidy"]
        assert forget_schedule(asked, "tidy", force=True).verdict == "forgotten"
        assert fires_on.schedule_state("tidy") is None
