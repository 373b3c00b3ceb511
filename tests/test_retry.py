"""Retry policies and time limits, end to end: a real worker on a real Redis."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import gc
import logging
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import pytest
import redis

from conftest import ON_CLUSTER
from helpers import events, leased_token, stalling
from taskq import (
    App,
    InvalidTaskError,
    LeaseLostError,
    Retry,
    RetryPolicy,
    TimeLimitExceeded,
    current_task,
)
from taskq.errors import ConfigError
from taskq.results import TaskRecord
from taskq.retry import Decision, decision_problem
from taskq.settings import Settings
from waiting import event_types, wait_for_state, wait_until
from worker_support import StartWorker

TIME_LIMIT_ERROR = "taskq.errors.TimeLimitExceeded"


def ended(app: App, task_id: str, state: str) -> TaskRecord:
    wait_for_state(app.broker, task_id, state)
    record = app.broker.task(task_id)
    assert record is not None
    return record


def try_effect(said: list[str]) -> None:
    """Enter an effect() block of the running task: "applied" in `said`, or why not."""
    try:
        with current_task().effect():
            said.append("applied")
    except LeaseLostError as e:
        said.append(str(e))


class CardDeclined(Exception):
    pass


class TestRetryPolicy:
    def test_by_default_every_exception_is_retried_after_the_settings_backoff(self) -> None:
        decision = RetryPolicy().decide(KeyError("x"))
        assert (decision.mode, decision.backoff_base, decision.backoff_max) == \
            ("backoff", None, None)

    def test_an_exception_in_dont_retry_on_goes_dead_even_inside_retry_on(self) -> None:
        policy = RetryPolicy(retry_on=(Exception,), dont_retry_on=(CardDeclined,))
        assert policy.decide(CardDeclined()).mode == "dead"
        assert policy.decide(ValueError()).mode == "backoff"

    def test_an_exception_outside_retry_on_goes_dead(self) -> None:
        policy = RetryPolicy(retry_on=ConnectionError)
        assert policy.retry_on == (ConnectionError,)
        assert policy.decide(ValueError()).mode == "dead"

    def test_retry_asked_for_with_a_delay_is_retried_after_it_whatever_the_policy(
        self,
    ) -> None:
        decision = RetryPolicy(retry_on=()).decide(Retry(delay=2.5, reason="rate limited"))
        assert (decision.mode, decision.delay) == ("delay", 2.5)
        assert RetryPolicy().decide(Retry()).mode == "backoff"
        assert Retry(delay=timedelta(minutes=1)).delay == 60

    def test_durations_may_be_timedeltas_kept_as_seconds(self) -> None:
        policy = RetryPolicy(backoff_base=timedelta(seconds=2), backoff_max=timedelta(minutes=1))
        assert (policy.backoff_base, policy.backoff_max) == (2.0, 60.0)
        decision = Decision("delay", timedelta(milliseconds=1500), timedelta(seconds=1),
                            timedelta(seconds=3))
        assert (decision.delay, decision.backoff_base, decision.backoff_max) == (1.5, 1.0, 3.0)
        assert decision_problem(decision) is None
        assert decision == Decision("delay", 1.5, 1.0, 3.0)

    def test_a_policy_subclass_that_is_a_dataclass_is_checked_alike(self) -> None:
        @dataclass(frozen=True)
        class Patient(RetryPolicy):
            patience: int = 3

        assert Patient(backoff_base=timedelta(seconds=4)).backoff_base == 4.0
        with pytest.raises(InvalidTaskError, match="backoff_base must be"):
            Patient(backoff_base=-1)

    @pytest.mark.parametrize(("options", "message"), [
        ({"retry_on": ValueError("x")}, "retry_on must be an exception class"),
        ({"dont_retry_on": (int,)}, "dont_retry_on must be"),
        ({"backoff_base": -1}, "backoff_base must be"),
        ({"backoff_max": 10**6}, "backoff_max must be"),
        ({"backoff_base": 5, "backoff_max": 1}, "must be at least its backoff_base"),
    ])  # fmt: skip
    def test_a_bad_policy_is_refused_naming_what_is_wrong(
        self, options: dict[str, Any], message: str
    ) -> None:
        with pytest.raises(InvalidTaskError, match=message):
            RetryPolicy(**options)

    def test_a_retry_with_a_bad_delay_is_refused_where_it_is_raised(self) -> None:
        with pytest.raises(InvalidTaskError, match="Retry delay must be"):
            Retry(delay=-1)

    def test_a_retry_says_the_delay_it_checked(self) -> None:
        class Seconds(float):
            def __format__(self, spec: str) -> str:
                return "nan"

        assert str(Retry(Seconds(2.0))) == "retry asked for in 2s"
        assert str(Retry(-0.0, "busy")) == "retry asked for in 0s: busy"

    def test_app_task_refuses_a_retry_that_is_not_a_policy_and_a_bad_time_limit(
        self, app: App
    ) -> None:
        with pytest.raises(InvalidTaskError, match=r"retry must be a taskq\.RetryPolicy"):
            app.task("a", retry=3)  # type: ignore[arg-type]
        with pytest.raises(InvalidTaskError, match="time_limit must be"):
            app.task("b", time_limit=-1)

    def test_a_bad_default_time_limit_names_its_variable(self) -> None:
        with pytest.raises(ConfigError, match="TASKQ_TIME_LIMIT_SECONDS"):
            Settings.from_env({"TASKQ_TIME_LIMIT_SECONDS": "-1"})


class TestPoliciesOnAWorker:
    def test_an_exception_not_to_retry_goes_dead_after_one_attempt(
        self, app: App, start_worker: StartWorker
    ) -> None:
        attempts: list[int] = []

        @app.task("charge", max_retries=5, retry=RetryPolicy(dont_retry_on=(CardDeclined,)))
        def charge() -> None:
            attempts.append(current_task().attempt)
            raise CardDeclined("insufficient funds")

        task_id = charge.enqueue().task_id
        start_worker()
        record = ended(app, task_id, "dead")
        assert (attempts, record.retries) == ([1], 0)
        assert record.error_type.endswith("CardDeclined")
        assert record.last_error.startswith("CardDeclined: insufficient funds")

    @pytest.mark.parametrize("decided", [
        None, Decision("delay", -5.0), Decision("delay", float("nan")),
        Decision("later"),  # type: ignore[arg-type]
        Decision("backoff", None, 5.0, 1.0),
        Decision("dead", 1.0), Decision("backoff", -1.0), Decision("backoff", 5.0),
    ], ids=["none", "negative", "nan", "mode", "cap-below-base", "dead-with-delay",
            "backoff-with-bad-delay", "backoff-with-delay"])  # fmt: skip
    def test_a_policy_whose_decision_no_attempt_can_be_settled_by_is_retried_by_backoff(
        self, app: App, start_worker: StartWorker, decided: object,
        caplog: pytest.LogCaptureFixture
    ) -> None:
        """A subclass's own decide(): whatever it gives, the worker goes on, and the task
        is retried after its backoff rather than released to stop the next worker."""
        class Odd(RetryPolicy):
            def decide(self, error: BaseException) -> Decision:
                return decided  # type: ignore[return-value]

        attempts: list[int] = []

        @app.task("odd", max_retries=1, retry=Odd(backoff_base=0.0, backoff_max=0.0))
        def odd() -> None:
            attempts.append(current_task().attempt)
            raise ValueError("no")

        task_id = odd.enqueue().task_id
        caplog.set_level(logging.WARNING, logger="taskq.worker")
        start_worker()
        record = ended(app, task_id, "dead")
        assert (attempts, record.retries) == ([1, 2], 1)
        assert any("its retry policy's decision for its ValueError" in r.getMessage()
                   for r in caplog.records)

    def test_only_exceptions_in_retry_on_are_retried(
        self, app: App, start_worker: StartWorker
    ) -> None:
        attempts: list[int] = []

        @app.task("fetch", max_retries=5, retry=RetryPolicy(retry_on=(ConnectionError,)))
        def fetch() -> None:
            attempts.append(current_task().attempt)
            if len(attempts) < 3:
                raise ConnectionError("reset by peer")
            raise ValueError("bad page")

        task_id = fetch.enqueue().task_id
        start_worker()
        record = ended(app, task_id, "dead")
        assert (attempts, record.retries) == ([1, 2, 3], 2)
        assert record.last_error.startswith("ValueError: bad page")

    def test_a_handler_that_raises_retry_runs_again_no_sooner_than_its_delay(
        self, app: App, start_worker: StartWorker
    ) -> None:
        started: list[float] = []

        @app.task("poll", max_retries=3)
        def poll() -> str:
            started.append(time.monotonic())
            if len(started) == 1:
                raise Retry(delay=0.5, reason="not ready yet")
            return "ready"

        task_id = poll.enqueue().task_id
        start_worker()
        record = ended(app, task_id, "completed")
        assert record.retries == 1
        assert started[1] - started[0] >= 0.5

    def test_retry_counts_an_attempt_and_goes_dead_when_none_are_left(
        self, app: App, start_worker: StartWorker
    ) -> None:
        @app.task("forever", max_retries=2)
        def forever() -> None:
            raise Retry(delay=0, reason="again")

        task_id = forever.enqueue().task_id
        start_worker()
        record = ended(app, task_id, "dead")
        assert record.retries == 2
        assert record.error_type == "taskq.errors.Retry"
        assert "again" in record.last_error

    @pytest.mark.parametrize("policy", [
        RetryPolicy(backoff_base=0.6, backoff_max=0.6),
        # A base above the settings' cap, with no cap of its own: not cut down to it.
        RetryPolicy(backoff_base=0.6),
    ], ids=["base-and-cap", "base-alone"])
    def test_a_task_backoff_replaces_the_settings(
        self, app: App, start_worker: StartWorker, policy: RetryPolicy
    ) -> None:
        started: list[float] = []

        @app.task("slow_retry", max_retries=1, retry=policy)
        def slow_retry() -> None:
            started.append(time.monotonic())
            raise ValueError("x")

        task_id = slow_retry.enqueue().task_id
        start_worker()  # its settings back off at most 0.05 s
        ended(app, task_id, "dead")
        assert started[1] - started[0] >= 0.3  # equal jitter: from half the backoff

    def test_an_unknown_task_goes_dead_at_once_with_retries_left(
        self, app: App, start_worker: StartWorker
    ) -> None:
        task_id = app.broker.enqueue("stranger", max_retries=5, name="nobody.knows.me").task_id
        start_worker()
        record = ended(app, task_id, "dead")
        assert record.retries == 0
        assert record.last_error.startswith("UnknownTaskError: unknown task 'nobody.knows.me'")

    def test_a_payload_that_is_no_call_goes_dead_at_once(
        self, app: App, start_worker: StartWorker
    ) -> None:
        @app.task("add")
        def add(a: int, b: int) -> int:
            return a + b

        task_id = app.broker.enqueue("odd", max_retries=5, payload={"args": "1, 2"},
                                     name="add").task_id
        start_worker()
        record = ended(app, task_id, "dead")
        assert record.retries == 0
        assert record.last_error.startswith("PayloadError: payload 'args' must be a list")

    def test_arguments_that_do_not_bind_go_dead_at_once(
        self, app: App, start_worker: StartWorker
    ) -> None:
        called: list[tuple[int, ...]] = []

        @app.task("add")
        def add(a: int, b: int) -> int:
            called.append((a, b))
            return a + b

        task_id = app.broker.enqueue("three", max_retries=5, payload={"args": [1, 2, 3]},
                                     name="add").task_id
        start_worker()
        record = ended(app, task_id, "dead")
        assert (record.retries, called) == (0, [])
        assert record.error_type == "taskq.errors.InvalidTaskError"
        assert "do not fit add(a: " in record.last_error
        assert "too many positional arguments" in record.last_error

    def test_a_type_error_raised_inside_the_handler_is_retried(
        self, app: App, start_worker: StartWorker
    ) -> None:
        attempts: list[int] = []

        @app.task("typed", max_retries=2)
        def typed(a: int) -> None:
            attempts.append(a)
            raise TypeError("unsupported operand")

        task_id = typed.enqueue(1).task_id
        start_worker()
        record = ended(app, task_id, "dead")
        assert (attempts, record.retries) == ([1, 1, 1], 2)


class TestTimeLimits:
    def test_an_async_handler_past_its_limit_is_cancelled_and_retried(
        self, app: App, start_worker: StartWorker
    ) -> None:
        cancelled: list[int] = []

        @app.task("stuck", max_retries=1, time_limit=0.3)
        async def stuck() -> None:
            try:
                await asyncio.sleep(30)
            except asyncio.CancelledError:
                cancelled.append(current_task().attempt)
                raise

        task_id = stuck.enqueue().task_id
        start_worker()
        record = ended(app, task_id, "dead")
        assert (cancelled, record.retries) == ([1, 2], 1)
        assert record.error_type == TIME_LIMIT_ERROR
        assert "ran past its time limit of 0.3s" in record.last_error
        assert "CancelledError" in record.traceback  # where the handler was

    @pytest.mark.skipif(ON_CLUSTER, reason="the stalling script runs on one node of a cluster")
    def test_a_limit_is_kept_while_the_heartbeat_waits_on_a_stalled_redis(
        self, app: App, start_worker: StartWorker, client: redis.Redis
    ) -> None:
        started, cancelled_after = threading.Event(), []

        # Past one beat (a third of the 1 s lease): a beat is under way, waiting, by then.
        @app.task("stuck", max_retries=0, time_limit=0.6)
        async def stuck() -> None:
            began = time.monotonic()
            started.set()
            try:
                await asyncio.sleep(30)
            except asyncio.CancelledError:
                cancelled_after.append(time.monotonic() - began)
                raise

        stuck.enqueue()
        start_worker()
        assert started.wait(5)
        stall = stalling(client, 2.5)  # every beat of the lease (1 s) waits behind it
        try:
            wait_until(lambda: cancelled_after, timeout=5)
        finally:
            stall.join(5)
        # Cancelled near its limit, not when Redis answered the heartbeat again.
        assert cancelled_after[0] < 1.5

    def test_a_limit_holds_for_a_task_registered_after_the_worker_was_built(
        self, app: App, start_worker: StartWorker
    ) -> None:
        start_worker()

        @app.task("late", max_retries=0, time_limit=0.3)
        async def late() -> None:
            await asyncio.sleep(30)

        record = ended(app, late.enqueue().task_id, "dead")
        assert record.error_type == TIME_LIMIT_ERROR

    def test_an_async_handler_that_returns_from_its_cancel_fails_its_attempt(
        self, app: App, start_worker: StartWorker
    ) -> None:
        @app.task("swallows", max_retries=0, time_limit=0.3)
        async def swallows() -> str:
            try:
                await asyncio.sleep(30)
            except asyncio.CancelledError:
                return "returned after its time limit"
            return "in time"

        task_id = swallows.enqueue().task_id
        start_worker()
        record = ended(app, task_id, "dead")
        assert record.error_type == TIME_LIMIT_ERROR
        assert record.result is None

    def test_an_async_handler_whose_cleanup_raises_after_its_cancel_fails_at_its_limit(
        self, app: App, start_worker: StartWorker
    ) -> None:
        attempts: list[int] = []

        @app.task("cleanup", max_retries=1, time_limit=0.3,
                  retry=RetryPolicy(retry_on=(TimeLimitExceeded,), backoff_base=0.01))
        async def cleanup() -> None:
            attempts.append(current_task().attempt)
            try:
                await asyncio.sleep(30)
            finally:
                raise OSError("connection already closed")

        task_id = cleanup.enqueue().task_id
        start_worker()
        record = ended(app, task_id, "dead")
        # Retried as the policy says of a time limit, the cleanup's error its cause.
        assert (attempts, record.error_type) == ([1, 2], TIME_LIMIT_ERROR)
        assert "connection already closed" in record.traceback

    def test_an_async_handler_that_goes_on_after_its_cancel_is_failed_and_fenced(
        self, app: App, start_worker: StartWorker, caplog: pytest.LogCaptureFixture
    ) -> None:
        refused: list[str] = []

        @app.task("stubborn", max_retries=0, time_limit=0.3)
        async def stubborn() -> None:
            try:
                await asyncio.sleep(30)
            except asyncio.CancelledError:
                await asyncio.sleep(5)  # swallows its cancel and goes on
                try_effect(refused)

        @app.task("quick_async")
        async def quick_async() -> str:
            return "ok"

        caplog.set_level(logging.INFO, logger="taskq.worker")
        stuck = stubborn.enqueue().task_id
        start_worker(concurrency=1)
        record = ended(app, stuck, "dead")
        assert refused == []  # failed at its limit, not when its handler gave up
        assert record.error_type == TIME_LIMIT_ERROR
        after = quick_async.enqueue().task_id
        assert ended(app, after, "completed").result == '"ok"'
        wait_until(lambda: bool(refused), 15, "the stubborn handler to try its effect")
        assert refused == [f"task {stuck} ran past its time limit (0.3s); its effect is skipped"]
        assert any("went on after being cancelled" in r.message and stuck in r.message
                   for r in caplog.records if r.levelno == logging.WARNING)

    def test_an_async_handler_that_goes_on_after_its_cancel_gives_its_place_to_the_next(
        self, app: App, start_worker: StartWorker
    ) -> None:
        went_on: list[str] = []

        @app.task("stubborn", max_retries=0, time_limit=0.3)
        async def stubborn() -> None:
            try:
                await asyncio.sleep(30)
            except asyncio.CancelledError:
                await asyncio.sleep(10)  # swallows its cancel and goes on
                went_on.append("ended")

        @app.task("quick_async")
        async def quick_async() -> str:
            return "ok"

        stuck = stubborn.enqueue().task_id
        # One handler and a task in hand beside it: async runs wait at a gate of one.
        start_worker(concurrency=1, prefetch=1)
        ended(app, stuck, "dead")
        after = quick_async.enqueue().task_id
        assert ended(app, after, "completed").result == '"ok"'
        assert went_on == []  # run beside the stubborn handler, not after it

    def test_an_async_handler_blocking_its_loop_is_failed_at_its_limit_not_reaped(
        self, app: App, start_worker: StartWorker
    ) -> None:
        """A sync call in an `async def` holds the loop, so its cancel never lands; the
        lease, no longer renewed, must not run out before the attempt is failed."""
        runs: list[int] = []

        @app.task("blocking", max_retries=0, time_limit=0.3)
        async def blocking() -> None:
            runs.append(current_task().attempt)
            time.sleep(2.5)  # blocks the loop: the case under test

        task_id = blocking.enqueue().task_id
        start_worker(lease_seconds=1.2)
        record = ended(app, task_id, "dead")
        assert record.error_type == TIME_LIMIT_ERROR
        assert "ran past its time limit of 0.3s" in record.last_error
        assert runs == [1]

    def test_a_time_limit_follows_the_retry_policy(
        self, app: App, start_worker: StartWorker
    ) -> None:
        @app.task("once", max_retries=5, time_limit=0.2,
                  retry=RetryPolicy(dont_retry_on=(TimeLimitExceeded,)))
        async def once() -> None:
            await asyncio.sleep(30)

        task_id = once.enqueue().task_id
        start_worker()
        record = ended(app, task_id, "dead")
        assert (record.retries, record.error_type) == (0, TIME_LIMIT_ERROR)

    def test_the_default_limit_applies_unless_the_task_sets_its_own(
        self, app: App, start_worker: StartWorker
    ) -> None:
        @app.task("limited", max_retries=0)
        async def limited() -> None:
            await asyncio.sleep(30)

        @app.task("unlimited", time_limit=0)
        async def unlimited() -> str:
            await asyncio.sleep(0.5)
            return "done"

        cut = limited.enqueue().task_id
        whole = unlimited.enqueue().task_id
        start_worker(concurrency=2, time_limit_seconds=0.2)
        assert ended(app, cut, "dead").error_type == TIME_LIMIT_ERROR
        assert ended(app, whole, "completed").result == '"done"'

    def test_a_sync_handler_past_its_limit_frees_its_slot_and_is_fenced(
        self, app: App, start_worker: StartWorker, caplog: pytest.LogCaptureFixture
    ) -> None:
        release = threading.Event()
        refused: list[str] = []

        @app.task("blocking", max_retries=0, time_limit=0.3)
        def blocking() -> None:
            release.wait(30)
            try_effect(refused)

        @app.task("quick")
        def quick() -> str:
            return "ok"

        caplog.set_level(logging.INFO, logger="taskq.worker")
        stuck = blocking.enqueue().task_id
        running = start_worker(concurrency=1)
        record = ended(app, stuck, "dead")
        assert record.error_type == TIME_LIMIT_ERROR
        # Its one slot is free again while its handler still runs.
        after = quick.enqueue().task_id
        assert ended(app, after, "completed").result == '"ok"'
        release.set()
        wait_until(lambda: bool(refused), 10, "the abandoned handler to try its effect")
        assert refused == [f"task {stuck} ran past its time limit (0.3s); its effect is skipped"]
        warnings = [r for r in caplog.records
                    if r.levelno == logging.WARNING and "passed its time limit" in r.message]
        assert len(warnings) == 1 and stuck in warnings[0].message
        assert running.worker.stats.dead == 1 and running.worker.stats.acked == 1

    @pytest.mark.parametrize("kind", ["def", "async def"])
    def test_a_limited_run_past_its_limit_keeps_its_slot_until_its_handler_ends(
        self, app: App, start_worker: StartWorker, caplog: pytest.LogCaptureFixture,
        kind: str
    ) -> None:
        """Failed at its limit (an `async def` one that goes on after its cancel, a grace
        later), its slot was given back with the handler still running, and the next run
        started beside it: 4 at once under a limit of 1."""
        release = threading.Event()
        running: list[str] = []
        most: list[int] = []
        refused: list[str] = []
        lock = threading.Lock()

        def partner(n: int) -> None:
            with lock:
                running.append(current_task().task_id)
                most.append(len(running))
            if n == 0:
                release.wait(30)
                try_effect(refused)
            with lock:
                running.remove(current_task().task_id)

        async def partner_async(n: int) -> None:
            work = asyncio.ensure_future(asyncio.to_thread(partner, n))
            while not work.done():  # its cancel caught, it goes on waiting
                with contextlib.suppress(asyncio.CancelledError):
                    await asyncio.shield(work)

        app.task("partner", max_retries=0, time_limit=0.3, max_concurrency=1)(
            partner if kind == "def" else partner_async)
        caplog.set_level(logging.WARNING, logger="taskq.worker")
        first, *rest = [h.task_id for h in app.tasks["partner"].enqueue_many(
            [(n,) for n in range(3)])]
        start_worker(concurrency=4)
        wait_until(lambda: running == [first], 10, "the first run")
        time.sleep(2.8)  # past its limit and two 1 s leases: renewed, and no one let in
        assert max(most) == 1
        record = app.handle(first).record()
        assert record is not None and record.state == "running"
        assert all(app.handle(t).status() == "pending" for t in rest)
        assert "keeps its lease and slot until the handler" in caplog.text
        release.set()
        dead = ended(app, first, "dead")
        assert dead.error_type == TIME_LIMIT_ERROR and dead.retries == 0
        assert all(ended(app, t, "completed") for t in rest)
        assert max(most) == 1
        assert refused == [f"task {first} ran past its time limit (0.3s); its effect is skipped"]
        assert "reaped" not in event_types(app.broker.client, app.broker.keys, first)

    @pytest.mark.parametrize("kind", ["def", "async def"])
    def test_a_handler_that_returned_in_time_keeps_its_lease_while_its_result_encodes(
        self, app: App, start_worker: StartWorker, kind: str
    ) -> None:
        """The limit (0.3 s) passes while the result encodes (1.5 s, past the 1 s lease):
        failed then, or its lease left to lapse, the task would run again."""
        runs: list[int] = []

        class SlowToRead(dict[str, int]):
            """Read by the encoder's key check for 1.5 s."""

            def __iter__(self) -> Iterator[str]:
                time.sleep(1.5)
                return super().__iter__()

        def prompt() -> dict[str, int]:
            with current_task().effect():
                runs.append(current_task().attempt)
            return SlowToRead({"rows": 7})

        async def prompt_async() -> dict[str, int]:
            return prompt()

        app.task("prompt", max_retries=1, time_limit=0.3)(
            prompt if kind == "def" else prompt_async)
        task_id = app.tasks["prompt"].enqueue().task_id
        start_worker()
        record = ended(app, task_id, "completed")
        assert (record.result, record.retries, runs) == ('{"rows":7}', 0, [1])
        assert "reaped" not in event_types(app.broker.client, app.broker.keys, task_id)

    @pytest.mark.parametrize("kind", ["def", "async def"])
    def test_a_claimed_run_whose_result_raises_a_base_exception_as_it_encodes_dies(
        self, app: App, start_worker: StartWorker, kind: str
    ) -> None:
        """Its report claimed as it returned, and the outcome dropped, it would stay
        running, renewed, for ever, and its handler thread with it."""
        class Interrupting(dict[str, int]):
            def __iter__(self) -> Iterator[str]:
                raise KeyboardInterrupt

        def odd() -> dict[str, int]:
            return Interrupting({"rows": 7})

        async def odd_async() -> dict[str, int]:
            return odd()

        app.task("odd", max_retries=0, time_limit=5)(odd if kind == "def" else odd_async)
        after = app.task("after")(lambda: "ok")
        task_id = app.tasks["odd"].enqueue().task_id
        start_worker()
        assert ended(app, task_id, "dead").error_type == "KeyboardInterrupt"
        assert ended(app, after.enqueue().task_id, "completed").result == '"ok"'

    def test_a_returned_future_is_work_under_way_but_another_awaitable_is_work_not_done(
        self, app: App, start_worker: StartWorker
    ) -> None:
        """A client's send that returns a delivery Future (aiokafka's) did its work; an
        awaitable that does nothing until awaited did not."""
        @app.task("send", store_result=False)
        async def send() -> Any:
            delivered: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            delivered.set_result(None)
            return delivered

        class Lazy:
            """An HTTP client's request: it does nothing until awaited."""

            def __await__(self) -> Iterator[None]:
                yield None

        @app.task("lazy", store_result=False)
        async def lazy() -> Any:
            return Lazy()

        task_id, unrun = send.enqueue().task_id, lazy.enqueue().task_id
        start_worker()
        assert ended(app, task_id, "completed").retries == 0
        assert "the handler returned an awaitable (Lazy) instead of running it" in \
            ended(app, unrun, "dead").last_error

    @pytest.mark.parametrize("kind", ["def", "async def"])
    def test_a_handler_past_its_limit_inside_an_effect_is_failed_after_the_block(
        self, app: App, start_worker: StartWorker, kind: str
    ) -> None:
        """Failed at once, its retry (a 0.01 s backoff) would apply the effect beside the
        block still under way; the block outlasts the 1 s lease, which holds meanwhile.
        An `async def` one blocks its loop inside the block, so no cancel reaches it."""
        blocks: list[tuple[int, str]] = []
        tokens: list[int] = []

        def slow_charge() -> None:
            attempt = current_task().attempt
            tokens.append(current_task().token)
            with current_task().effect():
                blocks.append((attempt, "begins"))
                time.sleep(1.5 if attempt == 1 else 0)
                blocks.append((attempt, "ends"))

        async def slow_charge_async() -> None:
            slow_charge()

        app.task("slow_charge", max_retries=1, time_limit=0.3)(
            slow_charge if kind == "def" else slow_charge_async)
        task_id = app.tasks["slow_charge"].enqueue().task_id
        start_worker()
        time.sleep(0.1)  # the first takes it; the retry of an async one, on the other
        start_worker()
        record = ended(app, task_id, "completed")
        assert blocks == [(1, "begins"), (1, "ends"), (2, "begins"), (2, "ends")]
        # Two leases, the retry's token above the first's, and no reap between them
        # minting another: the record holds the retry's.
        assert record.retries == 1 and len(tokens) == 2
        assert record.fencing_token == leased_token(tokens[0], tokens[1])
        assert [int(e.fields["token"]) for e in events(app.broker.client, app.broker.keys)
                if e.task == task_id and e.type == "leased"] == tokens
        assert "reaped" not in event_types(app.broker.client, app.broker.keys, task_id)


class TestUnusualEndings:
    def test_a_result_that_cannot_be_kept_sends_the_task_to_the_dlq_with_its_effect_once(
        self, app: App, start_worker: StartWorker
    ) -> None:
        attempts: list[int] = []

        @app.task("unkept", max_retries=3)  # the default policy retries any exception
        def unkept() -> set[int]:
            with current_task().effect():
                attempts.append(current_task().attempt)
            return {1, 2}

        task_id = unkept.enqueue().task_id
        start_worker()
        record = ended(app, task_id, "dead")
        assert (attempts, record.retries) == ([1], 0)
        assert record.last_error.startswith("ResultError")

    def test_a_result_is_judged_by_the_worker_s_limit_not_the_app_s(
        self, app: App, start_worker: StartWorker
    ) -> None:
        """The worker's brokers check the ack against its own settings: a result the app's
        larger limit let through was refused there, after the effect, and run again."""
        attempts: list[int] = []

        @app.task("big", max_retries=3)
        def big() -> str:
            with current_task().effect():
                attempts.append(current_task().attempt)
            return "x" * 1000

        assert app.settings.max_result_bytes > 1000
        task_id = big.enqueue().task_id
        running = start_worker(max_result_bytes=512)
        record = ended(app, task_id, "dead")
        assert (attempts, record.retries) == ([1], 0)
        assert record.last_error.startswith("ResultError") and "512" in record.last_error
        assert running.thread.is_alive()

    @pytest.mark.parametrize("keep", [False, True])
    def test_a_handler_that_returns_its_body_unrun_sends_its_task_to_the_dlq_saying_so(
        self, app: App, start_worker: StartWorker, keep: bool
    ) -> None:
        ran: list[str] = []

        async def charge(who: str) -> None:
            ran.append(who)

        def plain_wrapper(fn: Callable[[str], Any]) -> Callable[[str], Any]:
            @functools.wraps(fn)  # a plain def: the worker runs it on a thread
            def wrapper(who: str) -> Any:
                return fn(who)
            return wrapper

        @app.task("wrapped", store_result=keep)
        @plain_wrapper
        async def wrapped(who: str) -> None:
            ran.append(who)

        @app.task("unawaited", store_result=keep)
        async def unawaited(who: str) -> Any:
            return charge(who)  # the coroutine made, never awaited

        ids = [wrapped.enqueue("a").task_id, unawaited.enqueue("b").task_id]
        start_worker()
        for task_id in ids:
            record = ended(app, task_id, "dead")  # acked, it would read completed
            assert record.retries == 0 and record.error_type == "taskq.InvalidTaskError"
            assert "the handler returned a coroutine instead of running it" in \
                record.last_error
        assert ran == []

    def test_system_exit_in_a_task_a_handler_started_leaves_the_loop_running(
        self, app: App, start_worker: StartWorker
    ) -> None:
        async def exits() -> None:
            sys.exit("a background notifier gave up")

        @app.task("spawns")
        async def spawns() -> None:
            asyncio.get_running_loop().create_task(exits())

        @app.task("after")
        async def after() -> str:
            return "still running"

        first = spawns.enqueue().task_id
        start_worker()
        ended(app, first, "completed")
        second = after.enqueue().task_id
        assert ended(app, second, "completed").result == '"still running"'
        # The exiting task, never awaited, is logged when collected: here rather than
        # wherever the collector next runs (CPython 3.11's parser, re-entered from a
        # finalizer that formats a traceback mid-parse, fails every later parse).
        gc.collect()
