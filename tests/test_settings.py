"""Settings: the README's table is the truth, and every bad value is named with its variable."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest

from taskq import limits
from taskq.errors import ConfigError, TaskqError
from taskq.settings import (
    ENVIRONMENT,
    SIMULATION_ENVIRONMENT,
    Settings,
    Simulation,
    child_environment,
)

README = Path(__file__).resolve().parent.parent / "README.md"
SRC = Path(__file__).resolve().parent.parent / "src" / "taskq"

FLAGS = [v for v, parse in ENVIRONMENT.values() if parse.__name__ == "_flag"]
NUMBERS = [v for v, parse in ENVIRONMENT.values()
           if parse is not str and v not in ("LEDGER_GUARD", "REDIS_URL") and v not in FLAGS]
INTEGERS = [variable for variable, parse in ENVIRONMENT.values() if parse.__name__ == "_whole"]
assert INTEGERS, "no whole-number setting found: the tests over them would all be skipped"


def readme_configuration() -> dict[str, str]:
    """Variable -> default text, from the table under '## Configuration' in the README."""
    text = README.read_text()
    section = text.split("## Configuration", 1)[1].split("\n## ", 1)[0]
    rows: dict[str, str] = {}
    for line in section.splitlines():
        match = re.match(r"\|\s*`([A-Z_]+)`\s*\|\s*([^|]+?)\s*\|", line)
        if match:
            rows[match[1]] = match[2].strip("`")
    return rows


# Every variable taskq reads: the queue's Settings and the simulated task's Simulation.
EVERY_VARIABLE = {**ENVIRONMENT, **SIMULATION_ENVIRONMENT}


def defaults() -> dict[str, object]:
    return {f.name: f.default for cls in (Settings, Simulation) for f in dataclasses.fields(cls)}


def with_env(**variables: str) -> Settings:
    return Settings.from_env(variables)


def simulated(**variables: str) -> Simulation:
    return Simulation.from_env(variables)


class TestDefaultsMatchTheReadme:
    def test_the_readme_table_lists_every_variable_settings_reads(self) -> None:
        table = readme_configuration()
        assert len(table) >= 10
        assert set(table) == {variable for variable, _ in EVERY_VARIABLE.values()}

    def test_every_readme_default_is_the_dataclass_default(self) -> None:
        table, expected = readme_configuration(), defaults()
        for name, (variable, parse) in EVERY_VARIABLE.items():
            documented = table[variable]
            # A default in parentheses, such as REDIS_SERVER's "(search)", means none.
            value = "" if documented.startswith("(") else parse(documented)
            assert value == expected[name], f"{variable}: README {documented!r}"

    def test_an_empty_environment_gives_the_dataclass_defaults(self) -> None:
        assert Settings.from_env({}) == Settings()
        assert Simulation.from_env({}) == Simulation()

    def test_every_environment_entry_names_a_field_of_its_own_object(self) -> None:
        assert set(ENVIRONMENT) <= {f.name for f in dataclasses.fields(Settings)}
        assert set(SIMULATION_ENVIRONMENT) == {f.name for f in dataclasses.fields(Simulation)}

    def test_blank_values_mean_the_default(self) -> None:
        assert with_env(LEASE_SECONDS="  ", TASKQ_QUEUE="").lease_seconds == 10.0


class TestValuesAreParsed:
    def test_numbers_and_names_are_read_from_the_environment(self) -> None:
        settings = with_env(
            LEASE_SECONDS="2.5",
            TASKQ_CONCURRENCY="8",
            TASKQ_QUEUE="emails",
        )
        assert (settings.lease_seconds, settings.concurrency, settings.queue) == (2.5, 8, "emails")

    def test_the_simulated_task_reads_its_own_variables(self) -> None:
        simulation = simulated(LEDGER_GUARD="fence", FAIL_RATE="1", WORK_SECONDS="0.5",
                               LEDGER_PATH="/tmp/l.db")
        assert (simulation.ledger_guard, simulation.fail_rate, simulation.work_seconds,
                simulation.ledger_path) == ("fence", 1.0, 0.5, "/tmp/l.db")

    def test_surrounding_whitespace_is_ignored(self) -> None:
        assert with_env(POLL_SECONDS=" 0.25 ").poll_seconds == 0.25

    def test_redis_url_given_records_whether_redis_url_was_set(self) -> None:
        assert not with_env().redis_url_given
        assert with_env(REDIS_URL="unix:///tmp/r.sock").redis_url_given

    def test_derived_values_follow_the_lease(self) -> None:
        settings = with_env(LEASE_SECONDS="1.5")
        assert settings.heartbeat_seconds == pytest.approx(0.5)
        assert settings.lease_ms == 1500


class TestFlags:
    @pytest.mark.parametrize("raw", ["1", "true", "YES", "on"])
    def test_a_flag_is_on_for_the_usual_yes_words(self, raw: str) -> None:
        assert with_env(TASKQ_REDIS_CLUSTER=raw).redis_cluster

    @pytest.mark.parametrize("raw", ["0", "false", "no", "off"])
    def test_a_flag_is_off_for_the_usual_no_words(self, raw: str) -> None:
        assert not with_env(TASKQ_REDIS_CLUSTER=raw).redis_cluster

    @pytest.mark.parametrize("variable", FLAGS)
    def test_any_other_flag_value_is_refused_by_name(self, variable: str) -> None:
        assert len(FLAGS) >= 2
        with pytest.raises(ConfigError, match=f"{variable}='-1'"):
            with_env(**{variable: "-1"})

    @pytest.mark.parametrize(("variable", "raw"), [
        ("TASKQ_CONCURRENCY", "\u0661\u0662"), ("TASKQ_CONCURRENCY", "\uff11\uff12"),
        ("TASKQ_CONCURRENCY", "1_0"), ("LEASE_SECONDS", "\u0663\u0660"),
        ("LEASE_SECONDS", "1_0.5"),
    ])
    def test_a_number_not_in_plain_ascii_digits_is_refused_by_name(
        self, variable: str, raw: str
    ) -> None:
        with pytest.raises(ConfigError, match=f"{variable}=.*ASCII digits"):
            with_env(**{variable: raw})

    def test_the_task_log_is_on_unless_turned_off(self) -> None:
        assert with_env().task_log and not with_env(TASKQ_TASK_LOG="0").task_log

    @pytest.mark.parametrize(("override", "variable"), [
        ({"redis_cluster": "0"}, "TASKQ_REDIS_CLUSTER"), ({"task_log": "off"}, "TASKQ_TASK_LOG"),
        ({"redis_url": None}, "REDIS_URL"), ({"queue": 5}, "TASKQ_QUEUE"),
    ])
    def test_an_override_of_the_wrong_kind_is_refused_by_name(
        self, override: dict[str, object], variable: str
    ) -> None:
        with pytest.raises(ConfigError, match=f"{variable}=.* must be (True or False|text)"):
            Settings.from_env({}, **override)  # type: ignore[arg-type]


class TestRedisUrl:
    @pytest.mark.parametrize(
        "url", ["redis://h:6379/0", "rediss://u:p@h:6380/1", "unix:///tmp/redis.sock?db=2"]
    )
    def test_a_url_with_a_scheme_redis_py_knows_is_kept_as_given(self, url: str) -> None:
        assert with_env(REDIS_URL=url).redis_url == url

    def test_a_url_naming_two_databases_is_refused_and_one_named_twice_alike_is_not(
        self,
    ) -> None:
        with pytest.raises(ConfigError, match="names database 1 in its path and 5 in"):
            with_env(REDIS_URL="redis://h:6379/1?db=5")
        assert with_env(REDIS_URL="redis://h:6379/1?db=1").redis_url.endswith("db=1")

    @pytest.mark.parametrize("url", ["redis://h:6379/analytics", "redis://h:6379/0/x",
                                     "redis://h:6379/-1"])
    def test_a_database_that_is_no_number_is_refused(self, url: str) -> None:
        with pytest.raises(ConfigError, match="Redis databases are numbers"):
            with_env(REDIS_URL=url)

    def test_a_url_without_a_scheme_is_refused_naming_it_and_the_fix(self) -> None:
        with pytest.raises(ConfigError) as caught:
            with_env(REDIS_URL="localhost:6379")
        message = str(caught.value)
        assert "REDIS_URL='localhost:6379' has no scheme" in message
        assert "redis://localhost:6379" in message

    @pytest.mark.parametrize(("url", "fixed"), [
        ("http://h:6379", "redis://h:6379"), ("REDIS://h:6379", "redis://h:6379"),
        ("redis:/h:6379", "redis://h:6379"), ("rediss:h:6379/1", "rediss://h:6379/1"),
        ("unix:/tmp/r.sock", "unix:///tmp/r.sock"), ("redis:6379/0", "redis://redis:6379/0"),
    ])  # fmt: skip
    def test_a_url_with_another_scheme_is_refused_with_the_url_it_meant(
        self, url: str, fixed: str
    ) -> None:
        with pytest.raises(ConfigError, match=f"REDIS_URL={re.escape(repr(url))}") as caught:
            with_env(REDIS_URL=url)
        assert f"write it as {fixed} (" in str(caught.value)

    @pytest.mark.parametrize(("query", "said"), [
        ("socket_timeout=-1", "socket_timeout=-1.0"), ("socket_timeout=0", "socket_timeout=0.0"),
        ("socket_connect_timeout=nan", "socket_connect_timeout=nan"),
        ("socket_connect_timeout=inf", "socket_connect_timeout=inf"),
    ])  # fmt: skip
    def test_a_timeout_in_the_url_a_socket_cannot_take_is_refused(
        self, query: str, said: str
    ) -> None:
        # Else the first connection raised a bare ValueError: a worker's start crashed.
        with pytest.raises(ConfigError, match=f"has {said}: give a number of seconds above 0"):
            with_env(REDIS_URL=f"redis://h:6379/0?{query}")
        assert with_env(REDIS_URL="redis://h/0?socket_timeout=2.5").redis_url.endswith("2.5")

    @pytest.mark.parametrize("url", ["redis://h/99999999999999999999",
                                     "redis://h/0?db=2147483648"])
    def test_a_database_past_what_redis_counts_is_refused(self, url: str) -> None:
        # Else every command failed with Redis's "value is not an integer or out of range".
        with pytest.raises(ConfigError, match="Redis counts its databases from 0"):
            with_env(REDIS_URL=url)
        assert with_env(REDIS_URL="redis://h/2147483647").redis_url.endswith("/2147483647")

    @pytest.mark.parametrize("query", ["encoding=latin-1", "encoding_errors=strict",
                                       "decode_responses=false",
                                       # redis-py takes the first of the two
                                       "encoding=latin-1&encoding=utf-8"])
    def test_a_url_that_sets_how_replies_are_decoded_is_refused(self, query: str) -> None:
        # Else every text that is not ASCII came back garbled: arguments and results.
        with pytest.raises(ConfigError, match=f"sets {query.partition('&')[0]}: taskq writes "
                                              "every value as UTF-8"):
            with_env(REDIS_URL=f"redis://h/0?{query}")
        for utf8 in ("utf-8", "UTF8", "utf_8"):
            assert with_env(REDIS_URL=f"redis://h/0?encoding={utf8}").redis_url

    def test_a_client_name_redis_refuses_is_refused_naming_the_url(self) -> None:
        # Else the first command failed with "Client names cannot contain spaces".
        with pytest.raises(ConfigError, match=r"REDIS_URL=.* has client_name='a b': Redis "
                                              "takes names of printable ASCII"):
            with_env(REDIS_URL="redis://h/0?client_name=a%20b")
        assert with_env(REDIS_URL="redis://h/0?client_name=web-1").redis_url

    def test_a_negative_health_check_interval_is_refused(self) -> None:
        # Else every command failed with an error about a MAINT_NOTIFICATIONS subcommand.
        with pytest.raises(ConfigError, match="has health_check_interval=-1: give a number"):
            with_env(REDIS_URL="redis://h/0?health_check_interval=-1")
        assert with_env(REDIS_URL="redis://h/0?health_check_interval=0").redis_url

    def test_a_url_parameter_a_connection_refuses_is_refused_naming_the_url(self) -> None:
        with pytest.raises(ConfigError, match=r"REDIS_URL=.* is not a Redis URL redis-py can "
                                              r"use: protocol must be either 2 or 3"):
            with_env(REDIS_URL="redis://h:6379/0?protocol=4")

    @pytest.mark.parametrize("query", ["sokcet_timeout=2", "single_connection_client=1"])
    def test_a_url_parameter_no_connection_takes_is_refused_naming_it(self, query: str) -> None:
        # Else every command died with a TypeError traceback at its first connection.
        name = query.partition("=")[0]
        with pytest.raises(ConfigError, match=f"has the parameter {name}, which a Redis "
                                              "connection does not take"):
            with_env(REDIS_URL=f"redis://u:s3cret@h:6379/0?{query}")

    @pytest.mark.parametrize(
        "url", [":s3cret@h:6379", "http://u:s3cret@h:6379", "redis:/h?db=1&password=s3cret",
                "redis://u:s3cret@h/0?bogus=1"]
    )
    def test_a_refused_url_never_shows_its_password(self, url: str) -> None:
        with pytest.raises(ConfigError) as caught:
            with_env(REDIS_URL=url)
        assert "s3cret" not in str(caught.value)
        assert "***" in str(caught.value)


    @pytest.mark.parametrize("url", ["redis://u:s3cret@h:6379/0", "redis://h/0?password=s3cret"])
    def test_the_repr_of_settings_never_shows_the_password_or_the_api_token(
        self, url: str
    ) -> None:
        settings = Settings(redis_url=url, api_token="t0ken")
        assert "s3cret" not in repr(settings) and "t0ken" not in repr(settings)
        assert "redis_url=" in repr(settings) and "***" in repr(settings)
        assert "lease_seconds=10.0" in repr(settings)


class TestBadValuesNameTheVariableAndTheValue:
    @pytest.mark.parametrize("variable", NUMBERS)
    @pytest.mark.parametrize("raw", ["lots", "1,5", "nan", "inf", "-inf"])
    def test_a_non_number_is_refused(self, variable: str, raw: str) -> None:
        with pytest.raises(ConfigError) as caught:
            with_env(**{variable: raw})
        assert variable in str(caught.value)
        assert repr(raw) in str(caught.value)

    @pytest.mark.parametrize("variable", NUMBERS)
    def test_a_negative_number_is_refused(self, variable: str) -> None:
        with pytest.raises(ConfigError) as caught:
            with_env(**{variable: "-1"})
        assert f"{variable}=-1" in str(caught.value)

    @pytest.mark.parametrize("variable", INTEGERS)
    def test_a_fraction_is_refused_where_a_count_is_wanted(self, variable: str) -> None:
        with pytest.raises(ConfigError, match=f"{variable}='2.5'"):
            with_env(**{variable: "2.5"})

    @pytest.mark.parametrize(
        "variable", ["LEASE_SECONDS", "POLL_SECONDS", "REDIS_TIMEOUT_SECONDS",
                     *(v for v in INTEGERS if v != "TASKQ_PREFETCH")]
    )
    def test_zero_is_refused_where_it_would_never_wait_or_hold_nothing(
        self, variable: str
    ) -> None:
        with pytest.raises(ConfigError, match=f"{variable}=0"):
            with_env(**{variable: "0"})

    def test_no_prefetch_is_the_default_and_a_lease_may_not_pass_its_largest_count(
        self,
    ) -> None:
        assert with_env().prefetch == 0
        assert with_env(TASKQ_CONCURRENCY="64", TASKQ_PREFETCH="9936").prefetch == 9936
        with pytest.raises(ConfigError, match="TASKQ_PREFETCH=9937 must leave"):
            with_env(TASKQ_CONCURRENCY="64", TASKQ_PREFETCH="9937")

    def test_a_fail_rate_above_one_is_refused(self) -> None:
        with pytest.raises(ConfigError, match=r"FAIL_RATE=1\.5 must be a number between 0 and 1"):
            simulated(FAIL_RATE="1.5")

    def test_an_unknown_ledger_guard_is_refused_with_the_choices(self) -> None:
        with pytest.raises(ConfigError) as caught:
            simulated(LEDGER_GUARD="bogus")
        message = str(caught.value)
        assert "LEDGER_GUARD='bogus'" in message
        assert all(guard in message for guard in ("none", "dedupe", "fence"))

    def test_a_ledger_no_other_process_can_open_is_refused(self) -> None:
        with pytest.raises(ConfigError, match=r"LEDGER_PATH=':memory:' must be the path of a "
                                              r"file"):
            simulated(LEDGER_PATH=":memory:")

    def test_a_backoff_cap_below_the_base_is_refused_naming_both(self) -> None:
        with pytest.raises(ConfigError) as caught:
            with_env(BACKOFF_BASE_SECONDS="5", BACKOFF_MAX_SECONDS="2")
        message = str(caught.value)
        assert "BACKOFF_MAX_SECONDS=2.0" in message
        assert "BACKOFF_BASE_SECONDS" in message
        assert "5.0" in message

    def test_an_invalid_queue_name_is_refused(self) -> None:
        with pytest.raises(ConfigError, match="TASKQ_QUEUE='no spaces please'"):
            with_env(TASKQ_QUEUE="no spaces please")

    def test_direct_construction_is_validated_too(self) -> None:
        with pytest.raises(ConfigError, match="LEASE_SECONDS=nan"):
            Settings(lease_seconds=float("nan"))

    def test_an_unknown_override_is_refused(self) -> None:
        with pytest.raises(ConfigError, match="unknown settings: lease_secs"):
            Settings.from_env({}, lease_secs=3)

    def test_config_error_is_a_taskq_error(self) -> None:
        assert issubclass(ConfigError, TaskqError)


class TestSettingsAreReadOnceAndFrozen:
    def test_settings_cannot_be_changed_after_they_are_built(self) -> None:
        settings = Settings.from_env({})
        with pytest.raises(dataclasses.FrozenInstanceError):
            settings.lease_seconds = 1.0  # type: ignore[misc]

    def test_an_explicit_mapping_ignores_the_process_environment(
        self, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        monkeypatch.setenv("LEASE_SECONDS", "99")
        monkeypatch.setenv("REDIS_URL", "redis://elsewhere:1/0")
        settings = Settings.from_env({"TASKQ_QUEUE": "mine"})
        assert settings.lease_seconds == 10.0
        assert settings.redis_url == "redis://localhost:6379/0"
        assert not settings.redis_url_given
        assert settings.queue == "mine"

    def test_without_a_mapping_the_process_environment_is_read(
        self, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        monkeypatch.setenv("LEASE_SECONDS", "99")
        assert Settings.from_env().lease_seconds == 99.0

    def test_overrides_win_over_the_environment(self) -> None:
        assert Settings.from_env({"LEASE_SECONDS": "4"}, lease_seconds=7.0).lease_seconds == 7.0

    def test_no_module_but_settings_reads_a_variable_from_the_environment(self) -> None:
        reading = re.compile(r"os\.getenv|os\.environ\.get|os\.environ\[")
        readers = [
            str(path.relative_to(SRC))
            for path in SRC.rglob("*.py")
            if path.name != "settings.py" and reading.search(path.read_text())
        ]
        assert readers == []


class TestEveryNumberHasItsRange:
    @pytest.mark.parametrize(("variable", "raw"), [
        ("LEASE_SECONDS", "1e14"), ("TASKQ_EVENTS_RETENTION", "100000000000000000000"),
        ("TASKQ_COMPLETED_TTL_SECONDS", "1e16"), ("TASKQ_DEAD_TTL_SECONDS", "1e16"),
        ("BACKOFF_MAX_SECONDS", "1e12"), ("TASKQ_MAX_PAYLOAD_BYTES", "1073741824"),
        ("POLL_SECONDS", "1e20"), ("TASKQ_CONCURRENCY", "10001"),
    ])
    def test_a_value_past_its_range_is_refused_naming_the_range(
        self, variable: str, raw: str
    ) -> None:
        with pytest.raises(ConfigError, match=rf"{variable}=\S+ must be a (whole )?number"
                                              r".* (between|above) [\d.]+ and (at most )?\d+"):
            with_env(**{variable: raw})

    @pytest.mark.parametrize("raw", ["0.001", "0.2"])
    def test_a_lease_no_heartbeat_can_keep_is_refused(self, raw: str) -> None:
        with pytest.raises(ConfigError, match=r"LEASE_SECONDS=\S+ must be a number of "
                                              r"seconds between 0\.25 and 604800"):
            with_env(LEASE_SECONDS=raw)

    def test_the_simulated_work_past_its_range_is_refused_naming_the_range(self) -> None:
        with pytest.raises(ConfigError, match=r"WORK_SECONDS=1e\+20 must be a number of "
                                              r"seconds between 0 and 86400"):
            simulated(WORK_SECONDS="1e20")

    def test_every_number_setting_has_a_range_whose_default_is_the_default(self) -> None:
        numbers = {name for name, (variable, _) in ENVIRONMENT.items() if variable in NUMBERS}
        assert set(limits.SETTINGS) == numbers
        assert set(limits.SIMULATION) == {"work_seconds", "after_effect_seconds", "fail_rate"}
        for name, bound in {**limits.SETTINGS, **limits.SIMULATION}.items():
            assert defaults()[name] == bound.default, name
            assert bound.holds(bound.default), name

    @pytest.mark.parametrize("value", ["5", None, True, 10**400, float("nan")])
    def test_an_override_that_is_not_a_number_in_range_is_refused(self, value: object) -> None:
        with pytest.raises(ConfigError, match="TASKQ_EVENTS_RETENTION="):
            Settings.from_env({}, events_retention=value)


class TestChildEnvironment:
    def test_a_child_reads_back_the_very_settings_it_was_given(self) -> None:
        given = Settings.from_env({}, lease_seconds=2.5, concurrency=4, queue="emails",
                                  redis_url="redis://h:1/2", redis_cluster=True)
        simulation = Simulation(work_seconds=0.25, ledger_guard="none", ledger_path="l.db")
        env = child_environment(given, simulation, EXTRA="1")
        assert Settings.from_env(env) == dataclasses.replace(given, redis_url_given=True)
        assert Simulation.from_env(env) == simulation
        assert env["EXTRA"] == "1"

    def test_variables_given_by_name_win(self) -> None:
        env = child_environment(Settings(), LEASE_SECONDS="3")
        assert Settings.from_env(env).lease_seconds == 3.0


def test_a_url_given_in_code_is_checked_like_one_from_the_environment() -> None:
    with pytest.raises(ConfigError, match="REDIS_URL='redis://h:abc/0' is not a Redis URL"):
        Settings.from_env({}, redis_url="redis://h:abc/0")
