"""Declaring periodic schedules: their checks, their ticks, their time zones, their versions."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta, timezone, tzinfo
from pathlib import Path
from typing import Any
from zoneinfo import TZPATH, ZoneInfo

import dateutil.tz
import pytest

from helpers import in_other_processes
from taskq import App
from taskq.errors import ConfigError, InvalidTaskError, PayloadTooLargeError
from taskq.limits import MAX_DEFINITION_BYTES
from taskq.schedules import (
    DEFAULT_POLICY,
    MAX_CATCH_UP,
    Schedule,
    make_schedule,
    timing_of,
    zone_from_text,
    zone_text,
)
from taskq.settings import Settings


def ms(*parts: int, tz: tzinfo = UTC) -> int:
    return int(datetime(*parts, tzinfo=tz).timestamp() * 1000)  # type: ignore[misc]


def schedule(**overrides: Any) -> Schedule:
    options: dict[str, Any] = {"name": "s", "task": "mod.fn", "cron": None,
                               "every": timedelta(seconds=10), "tz": None, "args": (),
                               "kwargs": {}, "policy": "latest",
                               "grace": timedelta(minutes=1), "max_retries": 3}
    options.update(overrides)
    return make_schedule(**options)


def module_level_job() -> None:
    """A function periodic registers under its own module.qualname."""


@pytest.fixture
def app() -> App:
    return App("test", Settings.from_env({}))


class TestDeclaration:
    def test_periodic_registers_the_function_as_a_task_and_its_schedule(self, app: App) -> None:
        @app.periodic(every=timedelta(minutes=5), args=(1,), kwargs={"b": 2})
        @app.task("tidy")
        def tidy(a: int, b: int) -> int:
            return a + b

        assert app.tasks["tidy"] is tidy
        declared = app.schedules["tidy"]
        assert (declared.task, declared.every_ms, declared.policy) == ("tidy", 300_000,
                                                                       DEFAULT_POLICY)
        assert declared.payload == '{"args":[1],"kwargs":{"b":2}}'
        assert tidy(1, 2) == 3

    def test_a_schedule_takes_its_tasks_priority(self, app: App) -> None:
        @app.periodic(every=timedelta(minutes=5))
        @app.task("urgent", priority=8)
        def urgent() -> None: ...

        assert app.schedules["urgent"].priority == 8

    def test_a_plain_function_becomes_a_task_under_its_default_name(self, app: App) -> None:
        task = app.periodic(every=timedelta(seconds=1))(module_level_job)
        assert task.name == "test_schedules.module_level_job"
        assert set(app.schedules) == {task.name}

    def test_an_existing_task_can_be_scheduled_twice_under_two_names(self, app: App) -> None:
        @app.task("report")
        def report(kind: str) -> None: ...

        app.periodic(cron="0 * * * *", args=("hourly",), name="hourly")(report)
        app.periodic(cron="0 0 * * *", args=("daily",), name="daily")(report)
        assert {s.task for s in app.schedules.values()} == {"report"}
        assert set(app.schedules) == {"hourly", "daily"}

    def test_a_second_schedule_under_the_same_name_is_refused(self, app: App) -> None:
        @app.task("report")
        def report() -> None: ...

        app.periodic(cron="0 * * * *")(report)
        with pytest.raises(InvalidTaskError, match="'report' is already declared"):
            app.periodic(cron="0 0 * * *")(report)

    def test_a_task_name_too_long_for_a_schedule_says_to_give_a_name(self, app: App) -> None:
        long = app.task("n" * 150)(lambda: None)
        with pytest.raises(InvalidTaskError, match="named after its task unless it is given "
                                                   "name="):
            app.periodic(cron="0 * * * *")(long)
        app.periodic(cron="0 * * * *", name="short")(long)
        assert list(app.schedules) == ["short"]

    def test_arguments_the_function_cannot_take_are_refused(self, app: App) -> None:
        with pytest.raises(InvalidTaskError, match=r"cannot enqueue .*tidy"):
            @app.periodic(every=timedelta(seconds=1), args=(1, 2))
            @app.task("tidy")
            def tidy(a: int) -> None: ...


class TestErrors:
    @pytest.mark.parametrize("cron", ["bad", "* * *", "61 * * * *", "", "0 9 15 6 * 0 2027"])
    def test_a_bad_cron_is_named(self, cron: str) -> None:
        with pytest.raises(ConfigError, match="not a valid cron expression"):
            schedule(cron=cron, every=None)

    @pytest.mark.parametrize("cron", ["R * * * *", "* * * * * R", "r(0-29) 9 * * *",
                                      "0 R/6 * * *", "R(10-50)/10 * * * *"])
    def test_a_cron_that_draws_a_value_is_refused(self, cron: str) -> None:
        # croniter draws R anew for each iterator: every worker, and each of its
        # refreshes, would name other ticks, and each would fire.
        with pytest.raises(ConfigError, match=r"draws a value \(R or H\): name the"):
            schedule(cron=cron, every=None)

    def test_month_and_day_names_are_not_drawn_values(self) -> None:
        assert schedule(cron="0 9 * MAR,APR FRI", every=None).cron == "0 9 * MAR,APR FRI"

    def test_a_cron_that_names_no_date_that_comes_is_refused(self) -> None:
        with pytest.raises(ConfigError, match=r"'0 0 30 2 \*' names no date that comes"):
            schedule(cron="0 0 30 2 *", every=None)

    def test_cron_and_every_together_or_neither_are_refused(self) -> None:
        with pytest.raises(ConfigError, match="exactly one of cron"):
            schedule(cron="* * * * *")
        with pytest.raises(ConfigError, match="exactly one of cron"):
            schedule(every=None)

    @pytest.mark.parametrize("every", [timedelta(0), timedelta(seconds=-1), 5, None])
    def test_every_must_be_a_positive_timedelta(self, every: object) -> None:
        with pytest.raises(ConfigError, match=r"every must be a timedelta of at least 1 ms|"
                                              "exactly one"):
            schedule(every=every)

    @pytest.mark.parametrize("field", ["every", "grace"])
    @pytest.mark.parametrize("span", [timedelta(microseconds=1500),
                                      timedelta(seconds=1, microseconds=1)])
    def test_a_span_with_a_fraction_of_a_millisecond_is_refused_not_rounded(
        self, field: str, span: timedelta
    ) -> None:
        with pytest.raises(ConfigError, match=f"{field} {span} is not a whole number of "
                                              "milliseconds"):
            schedule(**{field: span})

    def test_a_span_of_whole_milliseconds_is_kept_exactly(self) -> None:
        declared = schedule(every=timedelta(seconds=1, milliseconds=1),
                            grace=timedelta(milliseconds=1500))
        assert (declared.every_ms, declared.grace_ms) == (1001, 1500)

    def test_an_interval_over_ten_years_is_refused(self) -> None:
        with pytest.raises(ConfigError, match="every 999999999 days, 0:00:00 is over 3650 days"):
            schedule(every=timedelta(days=999_999_999))

    def test_an_unknown_zone_is_named(self) -> None:
        with pytest.raises(ConfigError, match="unknown time zone 'Mars/Olympus'"):
            schedule(cron="* * * * *", every=None, tz="Mars/Olympus")

    @pytest.mark.parametrize("tz", ["localtime", "posixrules"])
    def test_the_hosts_own_zone_is_refused_by_name_or_as_a_zoneinfo(self, tz: str) -> None:
        # Under one version, each worker would fire at its own host's 09:00.
        said = f"tz {tz!r} is the host's own zone, which may differ between workers"
        with pytest.raises(ConfigError, match=said):
            schedule(cron="0 9 * * *", every=None, tz=tz)
        # The zone read from a file of the system's database, under that key, as
        # ZoneInfo(tz) reads it where the host has one.
        found = next(Path(d, "Etc/UTC") for d in TZPATH if Path(d, "Etc/UTC").is_file())
        with found.open("rb") as data, pytest.raises(ConfigError, match=said):
            schedule(cron="0 9 * * *", every=None, tz=ZoneInfo.from_file(data, key=tz))

    def test_dateutils_host_zone_is_refused(self) -> None:
        """It prints as tzlocal() on every host, so one version stood for each host's
        own zone, and a daily schedule fired once per zone the hosts were set to."""
        with pytest.raises(ConfigError, match=r"tz tzlocal\(\) is the host's own zone"):
            schedule(cron="0 9 * * *", every=None, tz=dateutil.tz.tzlocal())

    @pytest.mark.parametrize("tz", [dateutil.tz.tzutc(), dateutil.tz.tzoffset("CET", 3600),
                                    dateutil.tz.gettz("Europe/Paris")],
                             ids=["tzutc", "tzoffset", "tzfile"])
    def test_dateutils_zones_that_name_one_zone_are_taken(self, tz: tzinfo) -> None:
        assert schedule(cron="0 9 * * *", every=None, tz=tz).tz is tz

    def test_a_tzinfo_that_is_not_a_zone_is_refused(self) -> None:
        class Naive(tzinfo):
            def utcoffset(self, dt: datetime | None) -> timedelta | None:
                return None

        with pytest.raises(ConfigError, match="tz must be a time zone"):
            schedule(cron="* * * * *", every=None, tz=Naive())

    def test_a_tzinfo_with_an_offset_of_a_day_or_more_is_refused(self) -> None:
        class Far(tzinfo):
            def utcoffset(self, dt: datetime | None) -> timedelta | None:
                return timedelta(hours=25)

            def dst(self, dt: datetime | None) -> timedelta | None:
                return timedelta(0)

        with pytest.raises(ConfigError, match="is no usable time zone: offset must be"):
            schedule(cron="* * * * *", every=None, tz=Far())

    def test_a_zone_whose_name_redis_cannot_read_is_refused(self) -> None:
        class Odd(tzinfo):
            key = "Zone\ud800"

            def utcoffset(self, dt: datetime | None) -> timedelta | None:
                return timedelta(hours=1)

            def dst(self, dt: datetime | None) -> timedelta | None:
                return timedelta(0)

        with pytest.raises(ConfigError, match="a name that cannot be sent to Redis"):
            schedule(cron="* * * * *", every=None, tz=Odd())

    def test_the_payload_limit_is_the_apps(self) -> None:
        small = App("test", Settings.from_env({"TASKQ_MAX_PAYLOAD_BYTES": "1000"}))
        with pytest.raises(PayloadTooLargeError, match="over the limit of 1000 bytes"):
            small.periodic(every=timedelta(minutes=5), args=("x" * 2000,))(
                small.task("big")(lambda text: None))
        large = App("test", Settings.from_env({"TASKQ_MAX_PAYLOAD_BYTES": str(4 << 20)}))
        large.periodic(every=timedelta(minutes=5), args=("x" * 2_000_000,))(
            large.task("big")(lambda text: None))
        assert len(large.schedules["big"].payload) > 2_000_000

    def test_a_zone_with_every_is_refused(self) -> None:
        with pytest.raises(ConfigError, match="tz applies to cron"):
            schedule(tz="Europe/Paris")

    def test_an_unknown_policy_is_named(self) -> None:
        with pytest.raises(ConfigError, match="unknown policy 'sometimes'; use one of skip, "
                                              "latest, all"):
            schedule(policy="sometimes")

    def test_grace_must_be_positive(self) -> None:
        with pytest.raises(ConfigError, match="grace must be a timedelta"):
            schedule(grace=timedelta(0))

    def test_a_grace_under_a_second_no_worker_can_keep_is_refused(self) -> None:
        """Fired a turn and a round trip late, `skip` dropped 7 of 10 ticks of a 1 ms
        grace, silently."""
        with pytest.raises(ConfigError, match=r"grace 0:00:00\.999000 under policy 'skip' "
                                              "is under a second"):
            schedule(grace=timedelta(milliseconds=999), policy="skip")
        assert schedule(grace=timedelta(seconds=1), policy="skip").grace_ms == 1000
        # Read by no other policy: as declared before, it is no error there.
        assert schedule(grace=timedelta(milliseconds=500), policy="latest").grace_ms == 500

    @pytest.mark.parametrize("name", ["", "has space", "x" * 101, "ü", ".", ".."])
    def test_a_name_no_task_id_can_carry_is_refused(self, name: str) -> None:
        with pytest.raises(InvalidTaskError, match="invalid schedule name"):
            schedule(name=name)


class TestTicks:
    def test_every_ticks_at_whole_multiples_of_the_period_since_the_epoch(self) -> None:
        s = schedule(every=timedelta(seconds=10))
        assert s.next_tick(1_000) == 10_000
        assert s.next_tick(10_000) == 20_000
        assert s.ticks(10_000, 45_000, 10) == [20_000, 30_000, 40_000]

    def test_ticks_keep_the_latest_ones_when_more_are_due_than_the_limit(self) -> None:
        s = schedule(every=timedelta(seconds=1))
        assert s.ticks(0, 10_500, 3) == [8_000, 9_000, 10_000]

    def test_a_tick_at_the_upper_bound_is_included_and_one_at_the_lower_is_not(self) -> None:
        s = schedule(cron="*/5 * * * *", every=None)
        start = ms(2024, 1, 1, 0, 0)
        assert s.ticks(start, start + 600_000, 10) == [start + 300_000, start + 600_000]

    def test_cron_is_read_in_the_schedules_zone(self) -> None:
        paris = ZoneInfo("Europe/Paris")
        s = schedule(cron="0 9 * * *", every=None, tz="Europe/Paris")
        assert s.next_tick(ms(2024, 1, 1, 12, 0, tz=paris)) == ms(2024, 1, 2, 9, 0, tz=paris)
        assert s.next_tick(ms(2024, 1, 1, 12, 0, tz=paris)) == ms(2024, 1, 2, 8, 0)

    def test_a_fixed_offset_zone_is_a_zone(self) -> None:
        s = schedule(cron="0 0 * * *", every=None, tz=timezone(timedelta(hours=-5)))
        assert s.next_tick(ms(2024, 1, 1, 0, 0)) == ms(2024, 1, 1, 5, 0)

    def test_a_daylight_saving_change_skips_no_day(self) -> None:
        # Paris moves its clocks forward at 02:00 on 2024-03-31.
        s = schedule(cron="30 3 * * *", every=None, tz="Europe/Paris")
        paris = ZoneInfo("Europe/Paris")
        ticks = s.ticks(ms(2024, 3, 30, 0, 0, tz=paris), ms(2024, 4, 1, 12, 0, tz=paris), 10)
        assert ticks == [ms(2024, 3, 30, 3, 30, tz=paris), ms(2024, 3, 31, 3, 30, tz=paris),
                         ms(2024, 4, 1, 3, 30, tz=paris)]

    def test_a_fixed_hour_runs_once_in_the_hour_a_change_back_repeats(self) -> None:
        # Paris moves its clocks back from 03:00 to 02:00 on 2025-10-26.
        paris = ZoneInfo("Europe/Paris")
        before, after = ms(2025, 10, 25, 12, 0, tz=paris), ms(2025, 10, 27, 12, 0, tz=paris)
        first_0230 = ms(2025, 10, 26, 0, 30)  # 02:30 summer time, in UTC
        nightly = schedule(cron="30 2 * * *", every=None, tz="Europe/Paris")
        assert nightly.ticks(before, after, 10) == [first_0230, ms(2025, 10, 27, 1, 30)]
        assert nightly.next_tick(first_0230) == ms(2025, 10, 27, 1, 30)
        # Each hour is its own with a wildcard hour: 02:00 comes twice, an hour apart.
        hourly = schedule(cron="0 * * * *", every=None, tz="Europe/Paris")
        night = hourly.ticks(ms(2025, 10, 25, 23, 30), ms(2025, 10, 26, 2, 30), 10)
        assert night == [ms(2025, 10, 26, h, 0) for h in (0, 1, 2)]
        # So with a wildcard minute, as cron has it: 02:00 and 02:30, twice each.
        halves = schedule(cron="*/30 2 * * *", every=None, tz="Europe/Paris")
        night = halves.ticks(ms(2025, 10, 25, 23, 30), ms(2025, 10, 26, 2, 30), 10)
        assert night == [ms(2025, 10, 26, 0, 0), ms(2025, 10, 26, 0, 30),
                         ms(2025, 10, 26, 1, 0), ms(2025, 10, 26, 1, 30)]

    def test_six_fields_count_seconds(self) -> None:
        s = schedule(cron="* * * * * */15", every=None)
        assert s.ticks(0, 60_000, 10) == [15_000, 30_000, 45_000, 60_000]

    def test_task_ids_are_the_same_for_the_same_tick(self) -> None:
        assert schedule().task_id(5_000) == schedule().task_id(5_000) == "sched:s:5000"


class TestVersion:
    def test_the_version_changes_with_anything_that_decides_what_runs(self) -> None:
        base = schedule()
        changed = [schedule(every=timedelta(seconds=11)), schedule(args=(1,)),
                   schedule(policy="all"), schedule(max_retries=0), schedule(task="mod.g"),
                   schedule(cron="* * * * *", every=None)]
        versions = {base.version} | {s.version for s in changed}
        assert len(versions) == 1 + len(changed)

    def test_a_fixed_offset_named_as_a_zone_has_a_version_of_its_own(self) -> None:
        """Hashed by its name, timezone(+1, "CET") was the same definition as the IANA
        zone CET, whose offset is another in summer."""
        named = schedule(cron="0 9 * * *", every=None, tz=timezone(timedelta(hours=1), "CET"))
        assert named.version != schedule(cron="0 9 * * *", every=None, tz="CET").version
        assert named.version == schedule(cron="0 9 * * *", every=None,
                                         tz=timezone(timedelta(hours=1))).version

    def test_the_same_declaration_has_the_same_version_in_every_process(self) -> None:
        code = ("from datetime import timedelta\n"
                "from taskq.schedules import make_schedule\n"
                "print(make_schedule(name='s', task='mod.fn', cron=None, tz=None,"
                " every=timedelta(seconds=10), args=(), kwargs={}, policy='latest',"
                " grace=timedelta(minutes=1), max_retries=3).version)")
        assert in_other_processes(code) == {schedule().version}


class TestDefinition:
    def test_the_definition_describes_the_schedule_without_its_arguments(self) -> None:
        s = schedule(name="r", task="jobs.report", cron="0 9 * * 1-5", every=None,
                     tz="Europe/Paris", args=("secret",), policy="skip", max_retries=1)
        assert json.loads(s.definition) == {
            "version": s.version, "task": "jobs.report", "cron": "0 9 * * 1-5",
            "tz": "Europe/Paris", "every_ms": None, "policy": "skip", "grace_ms": 60_000,
            "max_retries": 1, "priority": 5}
        assert "secret" not in s.definition

    @pytest.mark.parametrize("declared", [
        {"every": timedelta(seconds=90)},
        {"cron": "*/5 * * * *", "every": None, "tz": "America/New_York"},
        {"cron": "0 0 * * *", "every": None, "tz": timezone(timedelta(hours=5, minutes=30))},
        {"cron": "0 0 * * *", "every": None, "tz": timezone(timedelta(hours=-3))},
        {"cron": "0 0 * * *", "every": None, "tz": UTC},
        {"cron": "* * * * * */15", "every": None},
    ])  # fmt: skip
    def test_the_timing_read_back_from_the_definition_names_the_same_ticks(
        self, declared: dict[str, Any]
    ) -> None:
        s = schedule(**declared)
        timing = timing_of(json.loads(s.definition))
        assert timing is not None
        start = ms(2024, 3, 30, 22, 17)
        assert timing.ticks(start, start + 3 * 86_400_000, 50) == s.ticks(
            start, start + 3 * 86_400_000, 50)
        assert timing.when == s.when

    @pytest.mark.parametrize("described", [
        {}, {"cron": "0 0 * * *"}, {"cron": "0 0 * * *", "tz": "Mars/Olympus"},
        {"cron": "not a cron", "tz": "UTC"}, {"every_ms": 0}, {"every_ms": True},
        {"every_ms": "1000"}, {"cron": "0 0 * * *", "tz": "UTC", "every_ms": 1000},
        {"cron": "R * * * *", "tz": "UTC"},
    ])  # fmt: skip
    def test_a_definition_naming_no_timing_this_process_can_rebuild_gives_none(
        self, described: dict[str, Any]
    ) -> None:
        assert timing_of(described) is None

    @pytest.mark.parametrize("zone", [UTC, ZoneInfo("Asia/Kolkata"),
                                      timezone(timedelta(hours=-9, minutes=-30)),
                                      timezone(timedelta(seconds=3661)),
                                      timezone(timedelta(microseconds=-1)),
                                      timezone(timedelta(hours=10), "Australia/Sydney")])
    def test_a_zone_is_read_back_from_its_text(self, zone: tzinfo) -> None:
        back = zone_from_text(zone_text(zone))
        assert back is not None
        instant = datetime(2024, 7, 1, tzinfo=UTC)
        assert back.utcoffset(instant) == zone.utcoffset(instant)

    def test_a_fixed_offset_is_kept_as_its_offset_whatever_it_is_named(self) -> None:
        """A reader takes a zone's text for an IANA key: Sydney's is +11 in December."""
        s = schedule(cron="0 9 * * *", every=None,
                     tz=timezone(timedelta(hours=10), "Australia/Sydney"))
        described = json.loads(s.definition)
        assert described["tz"] == "UTC+10:00"
        assert s.when == "cron '0 9 * * *' (UTC+10:00)"
        timing = timing_of(described)
        assert timing is not None
        december = ms(2025, 12, 1)
        assert timing.ticks(december, december + 3 * 86_400_000, 10) == s.ticks(
            december, december + 3 * 86_400_000, 10) == [
            ms(2025, 12, d, 23, 0) for d in (1, 2, 3)]

    def test_a_definition_too_long_to_keep_is_refused_at_declaration(self) -> None:
        cron = ",".join(str(m) for m in range(60)) + " * * * *"
        assert len(schedule(cron=cron, every=None).definition) < MAX_DEFINITION_BYTES
        with pytest.raises(ConfigError, match=r"definition takes \d+ bytes, over 4096"):
            schedule(task="t" * MAX_DEFINITION_BYTES)


def test_max_catch_up_bounds_all() -> None:
    assert 1 < MAX_CATCH_UP <= 1000
