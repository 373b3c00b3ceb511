"""taskq.testing: a user's tasks run through a real Redis and worker inside their tests."""

from __future__ import annotations

import asyncio
import os
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import redis

from helpers import strict_mypy_errors
from taskq import App, Settings, TaskqError, chain, current_task
from taskq.broker import Broker
from taskq.errors import (
    ConfigError,
    IdleTimeoutError,
    InvalidTaskError,
    TaskCancelledError,
    TaskFailed,
    UpstreamFailed,
)
from taskq.shards import route
from taskq.testing import TEST_SETTINGS, TaskRunner
from waiting import wait_until


@dataclass
class Shop:
    """A user's app as a project declares it, and what its tasks touched."""

    app: App
    charged: list[str] = field(default_factory=list)
    attempts: list[int] = field(default_factory=list)


def make_shop() -> Shop:
    # Settings of a user's production setup: a Redis that is not there, slow retries.
    shop = Shop(App(queue="shop", settings=Settings(redis_url="redis://nowhere.invalid:6379/0",
                                                   backoff_base_seconds=30.0,
                                                   backoff_max_seconds=60.0)))
    app = shop.app

    @app.task("shop.add")
    def add(a: int, b: int) -> int:
        return a + b

    @app.task("shop.double")
    async def double(n: int) -> int:
        return 2 * n

    @app.task("shop.flaky", max_retries=3)
    def flaky(order: str) -> int:
        attempt = current_task().attempt
        shop.attempts.append(attempt)
        if attempt == 1:
            raise ConnectionError("the payment service hung up")
        return attempt

    @app.task("shop.charge")
    def charge(order: str) -> dict[str, object]:
        task = current_task()
        with task.effect():
            shop.charged.append(order)
        return {"task_id": task.task_id, "attempt": task.attempt, "queue": task.queue}

    @app.task("shop.broken", max_retries=1)
    def broken(order: str) -> None:
        raise ValueError(f"order {order} has no lines")

    @app.task("shop.checkout")
    def checkout(orders: list[str]) -> int:
        for order in orders:
            charge.enqueue(order)
        return len(orders)

    return shop


@pytest.fixture
def shop() -> Shop:
    return make_shop()


@pytest.fixture
def tasks(shop: Shop) -> Iterator[TaskRunner]:
    """The fixture the README recommends to users."""
    with TaskRunner(shop.app) as runner:
        yield runner


class TestResults:
    def test_a_sharded_apps_tasks_run_on_one_queue_and_its_shards_come_back_after(
        self
    ) -> None:
        app = App(queue="shop", settings=Settings(redis_url="redis://nowhere.invalid:6379/0"),
                  shards=3)
        add = app.task("shop.add")(lambda a, b: a + b)
        layout = app.layout
        with TaskRunner(app) as runner:
            handle = add.enqueue(2, 3)
            assert runner.run_until_idle().results == {handle.task_id: 5}
        assert app.layout is layout is not None

    def test_a_sharded_app_refuses_in_a_test_what_its_shards_refuse_in_production(
        self
    ) -> None:
        """One queue in the test, it would run a workflow or send a task whose id and key
        route to two shards, which production refuses."""
        app = App(queue="shop", settings=Settings(redis_url="redis://nowhere.invalid:6379/0"),
                  shards=3)
        add = app.task("shop.add")(lambda a, b: a + b)
        layout = app.layout
        assert layout is not None
        key = "order-7"
        other = next(f"id-{i}" for i in range(100)
                     if route(f"id-{i}", 3) != route(key, 3))
        with TaskRunner(app) as runner:
            with pytest.raises(ConfigError, match="has 3 shards: a workflow runs in one queue"):
                chain(add.s(1, 2), add.s(3)).enqueue()
            with pytest.raises(InvalidTaskError, match="route to different shards"):
                add.enqueue(1, 2, task_id=other, idempotency_key=key)
            keyed = add.enqueue(1, 2, idempotency_key=key)
            assert route(keyed.task_id, 3) == route(key, 3)
            assert runner.run_until_idle().results == {keyed.task_id: 3}
        assert app.shard_rules is None and app.layout is layout

    def test_a_plain_and_an_async_task_run_on_the_worker_and_their_values_come_back(
        self, shop: Shop, tasks: TaskRunner
    ) -> None:
        added = shop.app.tasks["shop.add"].enqueue(2, 3)
        doubled = shop.app.tasks["shop.double"].enqueue(21)
        report = tasks.run_until_idle()
        assert report.result(added) == 5
        assert report.result(doubled.task_id) == 42
        assert report.results == {added.task_id: 5, doubled.task_id: 42}
        assert report.names == {added.task_id: "shop.add", doubled.task_id: "shop.double"}
        assert report.failed == {} and report.dead == []
        assert added.result(timeout=5) == 5  # the producer's own handle agrees

    def test_a_task_that_fails_once_is_retried_and_reported_with_its_second_value(
        self, shop: Shop, tasks: TaskRunner
    ) -> None:
        handle = shop.app.tasks["shop.flaky"].enqueue("o-1")
        report = tasks.run_until_idle()
        assert report.result(handle) == 2
        assert shop.attempts == [1, 2]
        record = tasks.broker.task(handle.task_id)
        assert record is not None and record.retries == 1
        assert "the payment service hung up" in record.last_error

    def test_a_task_sees_its_own_context_and_applies_its_effect_once(
        self, shop: Shop, tasks: TaskRunner
    ) -> None:
        handle = shop.app.tasks["shop.charge"].enqueue("o-7")
        report = tasks.run_until_idle()
        assert report.result(handle) == {"task_id": handle.task_id, "attempt": 1,
                                         "queue": "shop"}
        assert shop.charged == ["o-7"]

    def test_a_task_that_uses_up_its_retries_is_reported_dead_with_its_failure(
        self, shop: Shop, tasks: TaskRunner
    ) -> None:
        handle = shop.app.tasks["shop.broken"].enqueue("o-9")
        report = tasks.run_until_idle()
        assert report.dead == [handle.task_id] and report.results == {}
        failure = report.failed[handle.task_id]
        assert isinstance(failure, TaskFailed)
        assert (failure.error_type, failure.message, failure.attempts) == (
            "ValueError", "order o-9 has no lines", 2)
        assert "raise ValueError" in failure.traceback
        with pytest.raises(TaskFailed, match="order o-9 has no lines"):
            report.result(handle)

    def test_a_task_cancelled_before_it_ran_is_reported_cancelled(
        self, shop: Shop, tasks: TaskRunner
    ) -> None:
        charge = shop.app.tasks["shop.charge"]
        dropped = charge.enqueue("o-3", delay=0.5)
        kept = charge.enqueue("o-4")
        assert dropped.cancel().outcome == "cancelled"
        report = tasks.run_until_idle()
        assert report.cancelled == [dropped.task_id]
        assert list(report.results) == [kept.task_id] and shop.charged == ["o-4"]
        assert report.names[dropped.task_id] == "shop.charge"
        with pytest.raises(TaskCancelledError, match="was cancelled"):
            report.result(dropped)

    def test_the_steps_a_dead_step_skipped_are_reported_cancelled_not_dead(
        self, shop: Shop, tasks: TaskRunner
    ) -> None:
        add = shop.app.tasks["shop.add"]
        broken = shop.app.tasks["shop.broken"]
        flow = chain(broken.s("o-5"), add.s(2), add.s(3)).enqueue()
        report = tasks.run_until_idle()
        first, *skipped = [step.task_id for step in flow.status().steps]
        assert report.dead == [first]
        assert sorted(report.cancelled) == sorted(skipped)
        for step in skipped:
            with pytest.raises(UpstreamFailed, match=first):
                report.result(step)

    def test_tasks_enqueued_by_the_code_under_test_are_reported_by_task(
        self, shop: Shop, tasks: TaskRunner
    ) -> None:
        shop.app.tasks["shop.checkout"].enqueue(["a", "b", "c"])
        report = tasks.run_until_idle()
        assert report.values(shop.app.tasks["shop.checkout"]) == [3]
        charges = report.values(shop.app.tasks["shop.charge"])
        assert sorted(c["attempt"] for c in charges) == [1, 1, 1]
        assert sorted(shop.charged) == ["a", "b", "c"]

    def test_each_report_holds_only_what_ended_since_the_last_one(
        self, shop: Shop, tasks: TaskRunner
    ) -> None:
        add = shop.app.tasks["shop.add"]
        first = add.enqueue(1, 1)
        assert tasks.run_until_idle().results == {first.task_id: 2}
        second = add.enqueue(2, 2)
        report = tasks.run_until_idle()
        assert report.results == {second.task_id: 4}
        with pytest.raises(TaskqError, match=f"task '{first.task_id}' did not end during"):
            report.result(first)

    def test_an_idle_queue_gives_an_empty_report(self, tasks: TaskRunner) -> None:
        report = tasks.run_until_idle()
        assert (report.results, report.failed, report.names) == ({}, {}, {})


class TestIdle:
    def test_a_task_delayed_far_ahead_keeps_the_queue_busy_and_the_timeout_names_it(
        self, shop: Shop, tasks: TaskRunner
    ) -> None:
        later = shop.app.tasks["shop.add"].enqueue(1, 2, delay=3600)
        with pytest.raises(IdleTimeoutError) as raised:
            tasks.run_until_idle(timeout=0.3)
        message = str(raised.value)
        assert "queue 'shop' was not idle after 0.3s: 0 ready, 0 running, 1 delayed" in message
        assert f"delayed: shop.add {later.task_id} due in 3599." in message
        assert "enqueue it without a delay" in message
        assert isinstance(raised.value, TaskqError) and isinstance(raised.value, TimeoutError)

    def test_a_timeout_outside_its_range_is_refused(self, tasks: TaskRunner) -> None:
        with pytest.raises(TaskqError, match="timeout must be a number of seconds above 0"):
            tasks.run_until_idle(timeout=0)


class TestLifetime:
    def test_the_app_gets_its_own_settings_and_broker_back(self, shop: Shop) -> None:
        own_settings = shop.app.settings
        own_broker = Broker(redis.Redis(unix_socket_path="/nonexistent/redis.sock"), "shop")
        shop.app.use_broker(own_broker)
        with TaskRunner(shop.app) as runner:
            assert shop.app.settings is runner.settings
            assert shop.app.settings.redis_url == runner.server.url  # type: ignore[union-attr]
            assert shop.app.settings.backoff_max_seconds == TEST_SETTINGS["backoff_max_seconds"]
            assert shop.app.broker is not own_broker
        assert shop.app.settings is own_settings
        assert shop.app.use_broker(None) is own_broker

    def test_enqueue_async_in_the_block_reaches_the_runner_not_the_apps_own_redis(
        self, shop: Shop
    ) -> None:
        shop.app.settings = Settings(redis_url="unix:///nonexistent/redis.sock")

        async def scenario() -> None:
            own = shop.app.async_broker  # made in this loop before the block, never used
            with TaskRunner(shop.app) as runner:
                handle = await shop.app.tasks["shop.add"].enqueue_async(2, 3)
                assert runner.run_until_idle().result(handle) == 5
                assert await handle.result_async(timeout=5) == 5
                await shop.app.aclose()  # the block's asyncio client, as an app's lifespan would
            assert shop.app.async_broker is own

        asyncio.run(scenario())

    def test_an_app_that_had_made_no_broker_makes_its_own_again_afterwards(
        self, shop: Shop
    ) -> None:
        with TaskRunner(shop.app):
            shop.app.tasks["shop.add"].enqueue(1, 1)
        assert shop.app.use_broker(None) is None

    def test_nothing_is_left_running_after_the_block(self, shop: Shop) -> None:
        before = set(threading.enumerate())
        with TaskRunner(shop.app, concurrency=2) as runner:
            shop.app.tasks["shop.double"].enqueue(1)
            runner.run_until_idle()
            server = runner.server
            assert server is not None and server.pid is not None
            pid = server.pid
        assert [t.name for t in threading.enumerate() if t not in before] == []
        assert server.process is None
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)  # stopped and reaped: not even a zombie is left

    def test_a_handler_let_go_at_its_time_limit_has_the_grace_to_return(
        self, shop: Shop
    ) -> None:
        @shop.app.task("shop.slow", time_limit=0.3, max_retries=0)
        def slow() -> None:
            time.sleep(2.5)  # returns well within the shutdown grace (5 s)

        with TaskRunner(shop.app) as runner:
            handle = slow.enqueue()
            assert runner.run_until_idle().dead == [handle.task_id]

    def test_the_app_is_put_back_when_the_block_raises(self, shop: Shop) -> None:
        own_settings = shop.app.settings
        with pytest.raises(RuntimeError, match="the test failed"), TaskRunner(shop.app):
            raise RuntimeError("the test failed")
        assert shop.app.settings is own_settings

    def test_a_given_redis_is_used_as_it_is_and_no_server_is_started(
        self, shop: Shop, settings: Settings, client: redis.Redis
    ) -> None:
        with TaskRunner(shop.app, redis_url=settings.redis_url) as runner:
            assert runner.server is None
            handle = shop.app.tasks["shop.add"].enqueue(4, 5)
            assert runner.run_until_idle().result(handle) == 9
        assert client.hget(f"{{taskq:shop}}:task:{handle.task_id}", "state") == "completed"

    def test_a_given_redis_whose_queue_another_worker_serves_is_refused_naming_it(
        self, shop: Shop, settings: Settings
    ) -> None:
        with TaskRunner(shop.app, redis_url=settings.redis_url) as first:
            wait_until(first.broker.has_workers, what="the runner's worker to register")
            other = make_shop()
            with pytest.raises(ConfigError, match="already served by a running worker"):
                TaskRunner(other.app, redis_url=settings.redis_url).__enter__()
            assert other.app.settings.redis_url == "redis://nowhere.invalid:6379/0"
        with TaskRunner(shop.app, redis_url=settings.redis_url) as runner:  # it stopped
            assert runner.run_until_idle().results == {}

    def test_overrides_reach_the_worker(self, shop: Shop) -> None:
        with TaskRunner(shop.app, overrides={"shutdown_grace_seconds": 1.0}) as runner:
            assert runner.settings.shutdown_grace_seconds == 1.0


class TestBadInput:
    def test_an_unknown_setting_in_overrides_is_named(self, shop: Shop) -> None:
        with pytest.raises(ConfigError, match="unknown settings in overrides: lease"):
            TaskRunner(shop.app, overrides={"lease": 1})

    def test_a_redis_url_in_overrides_is_sent_to_the_redis_url_argument(
        self, shop: Shop
    ) -> None:
        with pytest.raises(ConfigError, match=r"give TaskRunner\(redis_url=\.\.\.\)"):
            TaskRunner(shop.app, overrides={"redis_url": "redis://localhost:6379/0"})

    def test_an_override_outside_its_range_names_its_variable(self, shop: Shop) -> None:
        with pytest.raises(ConfigError, match="POLL_SECONDS=0"), \
                TaskRunner(shop.app, overrides={"poll_seconds": 0}):
            pytest.fail("the runner started")
        assert shop.app.settings.redis_url == "redis://nowhere.invalid:6379/0"

    def test_a_concurrency_of_zero_is_refused(self, shop: Shop) -> None:
        with pytest.raises(ConfigError, match="concurrency must be a whole number"):
            TaskRunner(shop.app, concurrency=0)

    def test_something_other_than_an_app_is_refused(self) -> None:
        with pytest.raises(ConfigError, match=r"TaskRunner runs the tasks of a taskq\.App"):
            TaskRunner("myproject.tasks:app")  # type: ignore[arg-type]

    def test_a_runner_that_has_not_started_says_so(self, shop: Shop) -> None:
        with pytest.raises(TaskqError, match="not running: use it in a `with` block"):
            TaskRunner(shop.app).run_until_idle()


class TestOutsideAWorker:
    def test_calling_a_task_function_directly_runs_it_in_place(self, shop: Shop) -> None:
        assert shop.app.tasks["shop.add"](2, 2) == 4

    def test_current_task_outside_a_worker_says_how_to_test_a_task(self, shop: Shop) -> None:
        with pytest.raises(TaskqError) as raised:
            shop.app.tasks["shop.charge"]("o-1")
        message = str(raised.value)
        assert "outside a running task handler" in message
        assert "Calling the task function directly runs it without the queue" in message
        assert "taskq.testing.TaskRunner" in message
        assert shop.charged == []


USER_TEST = """
import taskq
from taskq.testing import TaskRunner

app = taskq.App(queue="shop")

@app.task()
def add(a: int, b: int) -> int:
    return a + b

def test_add() -> None:
    with TaskRunner(app) as tasks:
        handle = add.enqueue(2, 3)
        report = tasks.run_until_idle(timeout=10)
        total: int = report.result(handle)
        wrong: str = report.result(handle)
        by_id: str = report.result(handle.task_id)
"""


def test_a_reports_result_for_a_handle_has_its_functions_type_under_mypy_strict(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    errors, out, _ = strict_mypy_errors("test_user.py", USER_TEST, tmp_path, monkeypatch)
    assert errors == ['Incompatible types in assignment (expression has type "int", '
                      'variable has type "str")  [assignment]'], out
