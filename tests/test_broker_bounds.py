"""Each Broker argument's range: a value outside it is refused with a taskq error that
names the argument, the value and the range, and the database is left as it was."""

from __future__ import annotations

from collections.abc import Callable
from enum import Enum
from typing import Any

import pytest
import redis

from helpers import dump, lease_one, leased, record_of
from taskq.broker import Broker, NewTask
from taskq.errors import ConfigError, InvalidTaskError, PayloadError, TaskqError
from taskq.flow_handle import WorkflowHandle
from taskq.flows import Flows
from taskq.recent import recent

SURROGATE = "bad\ud800"


def refused(broker: Broker, error: type[TaskqError], match: str,
            call: Callable[[], object]) -> None:
    """`call` raises `error` matching `match`, and every key is as it was before."""
    before = dump(broker.client)
    with pytest.raises(error, match=match):
        call()
    assert dump(broker.client) == before


class TestHugeDurationsAreRefused:
    def test_a_delay_past_ten_years_is_refused_and_never_promoted(self, broker: Broker) -> None:
        refused(broker, InvalidTaskError, r"delay must be a number of seconds between 0 and "
                r"315360000, not 1e\+20", lambda: broker.enqueue("t1", delay=1e20))
        assert broker.promote() == []

    def test_the_longest_delay_waits_on_delayed(self, broker: Broker) -> None:
        broker.enqueue("t1", delay=315_360_000)
        assert broker.promote() == []
        assert broker.counts().delayed == 1

    def test_a_lease_past_a_week_is_refused_with_nothing_written(self, broker: Broker) -> None:
        broker.enqueue("t1")
        refused(broker, InvalidTaskError, r"lease_seconds must be a number of seconds above 0 "
                r"and at most 604800, not 100000000000000.0", lambda: broker.lease("w", 1e14))
        assert broker.lease("w", 604_800) is not None

    def test_a_huge_backoff_is_refused_before_the_retry_is_written(
        self, broker: Broker
    ) -> None:
        token = leased(broker)
        refused(broker, InvalidTaskError, "backoff_base must be a number of seconds between 0 "
                "and 86400", lambda: broker.fail("t1", token, "boom", backoff_base=1e12,
                                                   backoff_max=1e12))
        assert record_of(broker, "t1").state == "running"

    def test_the_longest_backoff_comes_back_as_whole_milliseconds(self, broker: Broker) -> None:
        token = leased(broker)
        result = broker.fail("t1", token, "boom", backoff_base=86_400, backoff_max=86_400)
        assert result.status == "retry"
        assert 43_200 <= result.delay <= 86_400
        # Whole milliseconds over 1000, as near as a float holds them (65833.533 * 1000
        # is 65833532.99999999).
        assert abs(result.delay * 1000 - round(result.delay * 1000)) < 1e-6

    @pytest.mark.parametrize("call", [
        lambda b: b.enqueue("t1", delay=10**400),
        lambda b: b.lease("w", 10**400),
        lambda b: b.reap(backoff_max=10**400),
        lambda b: b.purge(dead_ttl=10**400),
        lambda b: b.promote(limit=10**400),
        lambda b: b.ack("t1", 10**400),
    ])
    def test_an_integer_too_big_for_a_float_is_refused_not_overflowed(
        self, broker: Broker, call: Callable[[Broker], object]
    ) -> None:
        refused(broker, InvalidTaskError, "must be", lambda: call(broker))


class TestOptionsAreCheckedWhenTheBrokerIsMade:
    @pytest.mark.parametrize(("options", "match"), [
        ({"completed_ttl": 1e16}, r"completed_ttl must be a number of seconds above 0 and at "
                                  r"most 315360000, not 1e\+16"),
        ({"events_retention": 10**20}, "events_retention must be a whole number of events "
                                       "between 1 and 1000000000, not 100000000000000000000"),
        ({"events_retention": "5"}, "events_retention must be .*, not '5'"),
        ({"max_payload_bytes": "x"}, "max_payload_bytes must be .*, not 'x'"),
        ({"max_payload_bytes": 2**30}, "max_payload_bytes must be a whole number of bytes"),
    ])
    def test_an_option_out_of_its_range_is_a_config_error(
        self, client: redis.Redis, options: dict[str, Any], match: str
    ) -> None:
        with pytest.raises(ConfigError, match=match):
            Broker(client, "test", **options)

    @pytest.mark.parametrize("queue", [None, 5, b"q", SURROGATE])
    def test_a_queue_that_is_not_a_name_is_refused(self, client: redis.Redis, queue: Any) -> None:
        with pytest.raises(InvalidTaskError, match="invalid queue name"):
            Broker(client, queue)


class TestEveryStringIsUtf8:
    def test_a_payload_with_a_lone_surrogate_is_a_payload_error(self, broker: Broker) -> None:
        refused(broker, PayloadError, "lone surrogate",
                lambda: broker.enqueue("t1", payload={"s": SURROGATE}))

    @pytest.mark.parametrize(("options", "match"), [
        ({"idempotency_key": SURROGATE}, "invalid idempotency key"),
        ({"name": SURROGATE}, "invalid task name"),
    ])
    def test_an_enqueue_string_with_a_lone_surrogate_is_refused(
        self, broker: Broker, options: dict[str, Any], match: str
    ) -> None:
        refused(broker, InvalidTaskError, match, lambda: broker.enqueue("t1", **options))

    @pytest.mark.parametrize("call", [
        lambda b: b.lease(SURROGATE, 10),
        lambda b: b.lease_many("w", 10, 1, request_id=SURROGATE),
        lambda b: b.ack(SURROGATE, 1),
        lambda b: b.release(SURROGATE, 1),
        lambda b: b.fail(SURROGATE, 1, "boom"),
        lambda b: b.retry_dead(SURROGATE),
        lambda b: b.task(SURROGATE),
        lambda b: b.payload(SURROGATE),
    ])
    def test_an_id_with_a_lone_surrogate_is_refused(
        self, broker: Broker, call: Callable[[Broker], object]
    ) -> None:
        broker.enqueue("t1")
        refused(broker, InvalidTaskError, "UTF-8 text|invalid task id", lambda: call(broker))

    def test_error_text_with_a_lone_surrogate_is_kept_escaped(self, broker: Broker) -> None:
        token = leased(broker, max_retries=0)
        assert broker.fail("t1", token, f"boom {SURROGATE}").status == "dead"
        assert record_of(broker, "t1").last_error == "boom bad\\ud800"

    def test_error_text_is_cut_to_its_cap(self, broker: Broker) -> None:
        token = leased(broker, max_retries=0)
        broker.fail("t1", token, "x" * 100_000)
        assert record_of(broker, "t1").last_error == "x" * 8192


class TestWrongTypesAreTaskqErrors:
    @pytest.mark.parametrize("call", [
        lambda b: b.enqueue_many([NewTask("t1")], batch_size=1.5),
        lambda b: b.enqueue_many(None),
        lambda b: b.enqueue_many(["t1"]),
        lambda b: b.task(None),
        lambda b: b.payload(b"x"),
        lambda b: b.ack_many([("t1",)]),
        lambda b: b.ack_many("t1"),
        lambda b: b.ack_many([("t1", 2**53 + 1)]),
        lambda b: b.ack_many([("t1", -1)]),
        lambda b: b.ack_many([("..", 1)]),
        lambda b: b.heartbeat_many([("t 1", 1)], 10),
        lambda b: b.ack("t1", "1"),
        lambda b: b.ack("t1", True),
        lambda b: b.fail("t1", 1, None),
        lambda b: b.lease(None, 10),
        lambda b: b.reap(limit=0),
        lambda b: b.promote(limit=-1),
        lambda b: b.wait_for_work(-1),
    ])
    def test_a_wrong_type_or_value_is_an_invalid_task_error(
        self, broker: Broker, call: Callable[[Broker], object]
    ) -> None:
        broker.enqueue("t1")
        lease_one(broker)
        refused(broker, InvalidTaskError, "must be|invalid", lambda: call(broker))


class Few(int, Enum):
    """A count from an enum of the app's own, mixed into int (its str() is its name)."""

    RETRIES = 2
    PRIORITY = 7


class Agreeable(float):
    """A float that says yes to every comparison."""

    def __lt__(self, other: object) -> bool:
        return True

    __le__ = __gt__ = __ge__ = __lt__  # type: ignore[assignment]


class TestNumbersOfSubclassesAreTheirValues:
    def test_an_enum_count_is_stored_as_its_number(self, broker: Broker) -> None:
        broker.enqueue_many([NewTask("t1", max_retries=Few.RETRIES, priority=Few.PRIORITY)])
        record = record_of(broker, "t1")
        assert (record.max_retries, record.priority) == (2, 7)

    def test_a_search_limit_from_an_enum_is_its_number(self, broker: Broker) -> None:
        assert recent(broker, limit=Few.RETRIES, scan=Few.PRIORITY).tasks == []

    def test_a_flow_step_number_from_an_enum_names_the_step(self, broker: Broker) -> None:
        handle = WorkflowHandle("f", True, Flows(broker))
        assert handle.step(Few.RETRIES, Few.PRIORITY).task_id == "f.2.7"

    def test_a_float_that_agrees_with_every_bound_is_judged_by_its_value(
        self, broker: Broker
    ) -> None:
        refused(broker, InvalidTaskError, "delay must be",
                lambda: broker.enqueue("t1", delay=Agreeable("nan")))


def test_an_id_a_schedules_tick_would_take_is_refused(broker: Broker) -> None:
    refused(broker, InvalidTaskError, "kept for periodic tasks",
            lambda: broker.enqueue("sched:nightly:1796367854000"))


def test_a_wait_for_work_of_zero_seconds_is_refused_not_endless(broker: Broker) -> None:
    # BLPOP reads a timeout of 0 as "wait forever".
    with pytest.raises(InvalidTaskError, match="timeout must be a number of seconds above 0"):
        broker.wait_and_lease("w", 10, 1, 0)


class TestAResultIsOneJsonValue:
    @pytest.mark.parametrize(("result", "said"), [
        ("5, 100", "Extra data"), ('5],"kwargs":{"y":1000}}//', "Extra data"),
        ("NaN", "NaN has no JSON form"), ("[1e999]", "1e999 is past a float's range"),
        ("{'a': 1}", "not valid JSON"),
        ("[" * 100_000 + "]" * 100_000, "nests too deeply"),
    ])  # fmt: skip
    def test_text_that_is_not_one_json_value_is_refused_with_nothing_written(
        self, broker: Broker, result: str, said: str
    ) -> None:
        # A workflow hands a step's result text on as its next stage's first argument:
        # "5, 100" would have passed that stage two.
        broker.enqueue("t1")
        _, token = lease_one(broker)
        refused(broker, InvalidTaskError, f"a result must be one JSON value, not .*{said}",
                lambda: broker.ack("t1", token, result))
        assert broker.ack("t1", token, '{"total": 105}')
        assert broker.handle("t1").result() == {"total": 105}

    def test_the_cut_marker_is_no_result_a_caller_can_pass(self, broker: Broker) -> None:
        # The ack script reads a lone NUL as a run cut off after its effect (ack_cut).
        broker.enqueue("t1")
        _, token = lease_one(broker)
        refused(broker, InvalidTaskError, "a result must be JSON text or None",
                lambda: broker.ack("t1", token, "\x00"))
        assert broker.ack_cut("t1", token)
        record = broker.task("t1")
        assert record is not None and record.state == "completed" and record.result is None
