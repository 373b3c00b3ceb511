"""Bounded retries through a Redis outage: a call is retried while the leases it settles
last, calls that wait for the same leases share that wait, and once one has given up
they are sent at most one per probe interval."""

from __future__ import annotations

import logging
import time

import pytest

from taskq.errors import BrokerError
from taskq.worker.outage import Outage

LEASE = 0.3
PROBE = 0.05


class Redis:
    """A call's far end: away until told otherwise, counting what reached it."""

    def __init__(self) -> None:
        self.up = False
        self.calls = 0

    def call(self) -> str:
        self.calls += 1
        if not self.up:
            raise BrokerError("Redis is away")
        return "ok"


def a_lease() -> float:
    """The end of a lease renewed just now: a call's `held_until`."""
    return time.monotonic() + LEASE


def test_a_call_waits_a_lease_for_redis_and_then_gives_up() -> None:
    redis, outage = Redis(), Outage()
    assert outage.retry("ack t1", redis.call, a_lease()) is None
    assert redis.calls > 2  # retried with backoff, not given up at the first refusal


def test_later_calls_in_the_same_outage_do_not_wait_another_lease_each() -> None:
    redis, outage = Redis(), Outage(probe_seconds=60)
    held_until = a_lease()  # the tasks a shutdown releases, renewed together
    assert outage.retry("release t1", redis.call, held_until) is None
    before = redis.calls
    for task in ("t2", "t3", "t4"):
        assert outage.retry(f"release {task}", redis.call, held_until) is None
    # Not even sent: each try costs the client's own retries, which add up over the
    # hundred tasks a worker may hold at shutdown.
    assert redis.calls == before


def test_a_spent_outage_lets_one_call_through_per_probe_interval() -> None:
    redis, outage = Redis(), Outage(probe_seconds=PROBE)
    held_until = a_lease()
    assert outage.retry("release t1", redis.call, held_until) is None
    time.sleep(PROBE)
    before = redis.calls
    assert outage.retry("release t2", redis.call, held_until) is None
    assert outage.retry("release t3", redis.call, held_until) is None
    assert redis.calls == before + 1  # t2 probed and was refused once; t3 not sent


def test_redis_back_ends_the_outage_and_the_next_one_gets_a_lease_of_its_own() -> None:
    redis, outage = Redis(), Outage(probe_seconds=PROBE)
    held_until = a_lease()
    assert outage.retry("ack t1", redis.call, held_until) is None
    redis.up = True
    time.sleep(PROBE)
    assert outage.retry("ack t2", redis.call, held_until) == "ok"
    assert not outage.away
    redis.up = False
    before = redis.calls
    assert outage.retry("ack t3", redis.call, a_lease()) is None
    assert redis.calls > before + 2


def test_a_call_that_redis_answers_after_a_refusal_returns_its_result() -> None:
    redis, outage = Redis(), Outage()
    answers = iter([False, False, True])

    def flaky() -> str:
        redis.up = next(answers)
        return redis.call()

    assert outage.retry("fail t1", flaky, a_lease()) == "ok"
    assert redis.calls == 3 and not outage.away


def test_a_call_whose_leases_were_renewed_since_a_spent_outage_is_retried_till_they_end(
) -> None:
    """Between two stalls the heartbeats renewed the leases: the second stall's ack must
    be retried while they last, not dropped unsent because the first stall gave up."""
    redis, outage = Redis(), Outage(probe_seconds=60)
    assert outage.retry("ack t1", redis.call, a_lease()) is None  # the first stall: spent
    answers = iter([False, False, True])

    def second_stall() -> str:
        redis.up = next(answers)
        return redis.call()

    held_until = time.monotonic() + LEASE  # a renewal just accepted
    assert outage.retry("ack t2", second_stall, held_until) == "ok"


def test_a_call_is_tried_once_more_as_its_leases_end_then_given_up() -> None:
    redis, outage = Redis(), Outage()
    held_until = time.monotonic() + LEASE
    assert outage.retry("ack t1", redis.call, held_until) is None
    assert time.monotonic() >= held_until  # not a backoff's pause before it


def test_a_call_whose_leases_have_run_out_still_outlasts_a_passing_fault() -> None:
    """A worker resumed after a pause settles runs whose leases are over: a connection
    the pause left broken must not turn its stale fail into an unrecorded one."""
    redis, outage = Redis(), Outage(probe_seconds=0.5)
    answers = iter([False, True])

    def after_a_pause() -> str:
        redis.up = next(answers)
        return redis.call()

    assert outage.retry("fail t1", after_a_pause, time.monotonic() - 1) == "ok"


def test_an_outage_is_timed_from_when_its_first_failing_call_went_out(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A call that hung for the client's timeouts before it failed was said to give up
    after Redis had been away 0.0 s."""
    def hangs_then_fails() -> str:
        time.sleep(0.4)  # as a call to a silent Redis waits out its timeout
        raise BrokerError("Timeout reading from socket")

    with caplog.at_level(logging.ERROR, logger="taskq.worker"):
        assert Outage(probe_seconds=0).retry("release t1", hangs_then_fails,
                                             time.monotonic()) is None
    (said,) = [r.message for r in caplog.records if "gave up" in r.message]
    away = float(said.split("Redis has been away ")[1].split("s,")[0])
    assert away >= 0.4, said
