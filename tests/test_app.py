"""The task registry: `@app.task()` registers, `fn(...)` calls, `fn.enqueue(...)` queues."""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import AsyncIterator, Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import redis

from helpers import strict_mypy_errors
from taskq.app import App, Task
from taskq.broker import Broker, Enqueued
from taskq.errors import InvalidTaskError, PayloadError
from taskq.settings import Settings


def add(a: int, b: int = 0) -> int:
    return a + b


def greet(name: str, *, punctuation: str = "!") -> str:
    return f"hello {name}{punctuation}"


async def fetch(url: str) -> str:
    return url


@pytest.fixture
def app(settings: Settings, broker: Broker) -> App:
    app = App(queue=broker.queue, settings=settings)
    app.use_broker(broker)
    return app


@pytest.fixture
def adder(app: App) -> Task[[int, int], int]:
    return app.task()(add)


def task_keys(client: redis.Redis) -> list[str]:
    return [str(k) for k in client.scan_iter(match="*:task:*")]


def nothing_was_created(broker: Broker) -> bool:
    c = broker.counts()
    return (c.ready, c.leased, c.delayed, c.dead) == (0, 0, 0, 0) and not task_keys(
        broker.client
    )


class TestRegistration:
    def test_the_default_name_is_module_and_qualname(self, app: App) -> None:
        task = app.task()(add)
        assert task.name == f"{add.__module__}.add"
        assert app.tasks[task.name] is task

    def test_an_explicit_name_is_used_as_given(self, app: App) -> None:
        task = app.task("emails.send-welcome:v2")(greet)
        assert task.name == "emails.send-welcome:v2"
        assert set(app.tasks) == {"emails.send-welcome:v2"}

    def test_max_retries_given_at_registration_is_kept(self, app: App) -> None:
        assert app.task(max_retries=7)(add).max_retries == 7

    @pytest.mark.parametrize(
        "name", ["", "has space", "9starts-with-digit", "semi;colon", "x" * 201, "é"]
    )
    def test_an_invalid_name_is_refused_naming_it(self, app: App, name: str) -> None:
        with pytest.raises(InvalidTaskError, match="invalid task name"):
            app.task(name)(add)
        assert app.tasks == {}

    @pytest.mark.parametrize("value", ["no", 0, None])
    def test_store_result_must_be_a_bool_not_anything_truthy(self, app: App,
                                                             value: object) -> None:
        with pytest.raises(InvalidTaskError, match="store_result must be True or False"):
            app.task("kept", store_result=value)(lambda: None)  # type: ignore[arg-type]
        assert "kept" not in app.tasks

    def test_a_nested_function_needs_an_explicit_name(self, app: App) -> None:
        def local() -> None:
            pass

        with pytest.raises(InvalidTaskError, match=r"<locals>"):
            app.task()(local)
        assert app.task("local")(local).name == "local"

    def test_a_different_function_under_a_taken_name_is_refused(self, app: App) -> None:
        app.task("shared")(add)
        with pytest.raises(InvalidTaskError, match="already registered as 'shared'"):
            app.task("shared")(greet)
        assert app.tasks["shared"].fn is add

    def test_the_same_function_under_its_name_with_other_options_is_refused(
        self, app: App
    ) -> None:
        """Taken, the first Task would enqueue with max_retries=1 while the worker ran
        the task with 9."""
        first = app.task("same", max_retries=1)(add)
        with pytest.raises(InvalidTaskError, match="'same' is already registered with other"):
            app.task("same", max_retries=9)(add)
        assert app.tasks["same"] is first

    def test_a_callable_with_no_name_of_its_own_is_refused_asking_for_one(
        self, app: App
    ) -> None:
        with pytest.raises(InvalidTaskError, match="has no name of its own"):
            app.task()(functools.partial(add, 1))
        assert app.task("add_one")(functools.partial(add, 1)).name == "add_one"

    def test_a_generator_function_is_refused_its_body_would_never_run(self, app: App) -> None:
        def rows() -> Iterator[int]:
            yield 1

        async def pages() -> AsyncIterator[int]:
            yield 1

        class Rows:
            def __call__(self) -> Iterator[int]:
                yield 1

        for fn, name in ((rows, "rows"), (pages, "pages"), (Rows(), "Rows")):
            with pytest.raises(InvalidTaskError, match=f"'{name}' is a generator function"):
                app.task(name)(fn)
        assert not {"rows", "pages", "Rows"} & app.tasks.keys()

    def test_registering_the_same_function_again_is_harmless(self, app: App) -> None:
        first = app.task("same")(add)
        second = app.task("same")(add)
        assert second.fn is first.fn
        assert list(app.tasks) == ["same"]

    def test_the_decorator_without_parentheses_is_refused_not_silently_ignored(
        self, app: App
    ) -> None:
        with pytest.raises(InvalidTaskError, match=r"@app\.task\(\)"):
            app.task(add)  # type: ignore[arg-type]
        assert app.tasks == {}

    def test_an_async_function_is_registered_as_async(self, app: App) -> None:
        task = app.task()(fetch)
        assert task.is_async
        assert not app.task()(add).is_async

    def test_the_task_keeps_the_functions_docstring(self, app: App) -> None:
        def documented() -> None:
            """Does a thing."""

        assert app.task("documented")(documented).__doc__ == "Does a thing."

    def test_the_app_queue_defaults_to_the_settings_queue(self, settings: Settings) -> None:
        assert App(settings=settings).queue == settings.queue
        assert App(queue="other", settings=settings).queue == "other"

    def test_an_empty_queue_name_is_refused_not_taken_for_the_default(
        self, settings: Settings
    ) -> None:
        for make in (lambda: App(queue="", settings=settings),
                     lambda: Broker.from_settings(settings, "")):
            with pytest.raises(InvalidTaskError, match="invalid queue name ''"):
                make()


def test_a_task_of_a_script_run_as_main_is_named_with_a_warning(
    app: App, caplog: pytest.LogCaptureFixture
) -> None:
    def add(a: int, b: int) -> int:
        return a + b

    add.__module__, add.__qualname__ = "__main__", "add"
    caplog.set_level(logging.WARNING, logger="taskq")
    assert app.task()(add).name == "__main__.add"
    (warned,) = [r.getMessage() for r in caplog.records]
    assert "named after a script run as __main__" in warned
    caplog.clear()
    app.task("job.add")(add)
    assert caplog.records == []


def test_a_lambda_needs_an_explicit_name_and_gets_no_warning_about_main(
    app: App, caplog: pytest.LogCaptureFixture
) -> None:
    square = eval("lambda x: x * x", {"__name__": "__main__"})  # as a script defines it
    caplog.set_level(logging.WARNING, logger="taskq")
    with pytest.raises(InvalidTaskError, match=r"a lambda has no name of its own: name the "):
        app.task()(square)
    assert caplog.records == []
    assert app.task("square")(square).name == "square"


def test_the_repr_of_an_app_names_its_queue_and_counts_its_tasks_but_not_its_url() -> None:
    app = App(queue="maths", redis_url="redis://user:s3cret@h:6379/0")
    app.task("add")(add)
    assert repr(app) == "<App queue='maths' tasks=1>"
    assert repr(App(queue="maths", settings=Settings(), shards=4)) == (
        "<App queue='maths' shards=4 tasks=0>")


USER_MODULE = """
from datetime import timedelta

import taskq
from taskq.retry import Decision

app = taskq.App(queue="maths")


class Slow(taskq.RetryPolicy):
    def decide(self, error: BaseException) -> Decision:
        return Decision("delay", timedelta(seconds=30))


@app.task(retry=taskq.RetryPolicy(backoff_base=timedelta(seconds=2),
                                  backoff_max=timedelta(minutes=5)))
def patient() -> None:
    pass

@app.task()
def add(a: int, b: int) -> int:
    return a + b

@app.task()
async def fetch(url: str) -> str:
    return url

async def endpoint() -> str:
    return await (await fetch.enqueue_async("u")).result_async(timeout=1)

total: int = add.enqueue(2, 3).result(timeout=10)
first: int = add.enqueue_many([(1, 2)])[0].result()
wrong: str = add.enqueue(2, 3).result()
text: str = fetch.enqueue("u").result()
later: taskq.TaskHandle = app.handle("x")
later_total: int = add.options(delay=5, priority=7).enqueue(2, 3).result()
unchecked: int = add.options(priority=7).enqueue("2", 3).result()
"""


def test_a_handles_result_has_the_type_its_function_returns_under_mypy_strict(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    errors, out, status = strict_mypy_errors("user.py", USER_MODULE, tmp_path, monkeypatch)
    # A call with options set apart has its arguments checked as well.
    assert errors == ['Incompatible types in assignment (expression has type "int", '
                      'variable has type "str")  [assignment]',
                      'Argument 1 to "enqueue" of "Options" has incompatible type "str"; '
                      'expected "int"  [arg-type]'], out
    assert status == 1


class TestCallingDirectly:
    def test_calling_the_task_runs_the_function_and_enqueues_nothing(
        self, adder: Task[[int, int], int], broker: Broker
    ) -> None:
        assert adder(2, 3) == 5
        assert nothing_was_created(broker)

    def test_keyword_arguments_pass_through(self, app: App) -> None:
        assert app.task()(greet)("ann", punctuation="?") == "hello ann?"


class TestEnqueue:
    def test_enqueue_stores_args_and_kwargs_as_the_payload(
        self, adder: Task[[int, int], int], broker: Broker
    ) -> None:
        result = adder.enqueue(1, b=2)
        assert result.created
        assert broker.payload(result.task_id) == {"args": [1], "kwargs": {"b": 2}}
        record = broker.task(result.task_id)
        assert record is not None
        assert (record.name, record.state, record.max_retries) == (adder.name, "pending", 3)
        assert broker.counts().ready == 1

    def test_each_enqueue_gets_a_fresh_task_id(self, adder: Task[[int, int], int]) -> None:
        ids = {adder.enqueue(i).task_id for i in range(3)}
        assert len(ids) == 3

    def test_delay_puts_the_task_on_delayed_until_it_is_due(
        self, adder: Task[[int, int], int], broker: Broker
    ) -> None:
        result = adder.enqueue(1, delay=30)
        record = broker.task(result.task_id)
        assert record is not None
        assert record.state == "delayed"
        assert record.run_at - record.created_at == pytest.approx(30_000, abs=50)
        assert (broker.counts().ready, broker.counts().delayed) == (0, 1)
        assert broker.payload(result.task_id) == {"args": [1], "kwargs": {}}

    def test_a_delay_and_a_result_ttl_may_be_timedeltas(
        self, adder: Task[[int, int], int], broker: Broker
    ) -> None:
        """As a schedule's period is: a duration is seconds or a timedelta throughout."""
        result = adder.enqueue(1, delay=timedelta(seconds=30), result_ttl=timedelta(hours=2))
        record = broker.task(result.task_id)
        assert record is not None
        assert record.run_at - record.created_at == pytest.approx(30_000, abs=50)
        assert record.result_ttl == 2 * 3600 * 1000
        with pytest.raises(InvalidTaskError, match=r"delay must be .*timedelta\(days=-1"):
            adder.enqueue(1, delay=timedelta(seconds=-5))

    def test_options_set_apart_from_the_call_go_to_the_queue_and_not_the_function(
        self, app: App, broker: Broker
    ) -> None:
        @app.task("notify")
        def notify(user: str, channel: str = "mail") -> None:
            pass

        handle = notify.options(delay=30, priority=7, max_retries=1).enqueue(
            "ada", channel="sms")
        record = broker.task(handle.task_id)
        assert record is not None
        assert (record.state, record.priority, record.max_retries) == ("delayed", 7, 1)
        assert broker.payload(handle.task_id) == {"args": ["ada"],
                                                  "kwargs": {"channel": "sms"}}
        plain = broker.task(notify.options().enqueue("bo").task_id)
        assert plain is not None and (plain.state, plain.priority) == ("pending", 5)
        with pytest.raises(InvalidTaskError, match="cannot enqueue notify"):
            notify.options(priority=1).enqueue()  # type: ignore[call-arg]
        with pytest.raises(InvalidTaskError, match=r"notify\.s\(\) takes no delay"):
            notify.options(delay=5).s("ada")
        assert notify.options(max_retries=2).s("ada").max_retries == 2
        (later,) = notify.enqueue_many([notify.options(priority=2).call("cy")])
        called = broker.task(later.task_id)
        assert called is not None and called.priority == 2

    def test_max_retries_at_enqueue_overrides_the_registered_one(
        self, app: App, broker: Broker
    ) -> None:
        task = app.task(max_retries=7)(add)
        default = broker.task(task.enqueue(1).task_id)
        overridden = broker.task(task.enqueue(1, max_retries=0).task_id)
        assert default is not None and overridden is not None
        assert (default.max_retries, overridden.max_retries) == (7, 0)

    def test_a_task_registered_with_a_priority_runs_before_the_rest(
        self, app: App, broker: Broker
    ) -> None:
        urgent = app.task("urgent", priority=9)(add)
        plain = app.task("plain")(add)
        first, second = plain.enqueue(1, 2), plain.enqueue(3, 4, priority=8)
        third = urgent.enqueue(5, 6)
        leased = [t.task_id for t in broker.lease_many("w", 30, 3).tasks]
        assert leased == [third.task_id, second.task_id, first.task_id]

    def test_a_time_limit_may_be_a_timedelta(self, app: App) -> None:
        assert app.task("slow", time_limit=timedelta(minutes=2))(add).time_limit == 120

    def test_a_priority_outside_its_range_is_refused_at_registration(self, app: App) -> None:
        with pytest.raises(InvalidTaskError, match="priority must be"):
            app.task("urgent", priority=10)(add)

    def test_a_resend_with_the_same_idempotency_key_creates_nothing(
        self, adder: Task[[int, int], int], broker: Broker
    ) -> None:
        first = adder.enqueue(1, idempotency_key="order-17")
        again = adder.enqueue(99, idempotency_key="order-17")
        assert first.created and not again.created
        assert again.task_id == first.task_id
        assert broker.payload(first.task_id) == {"args": [1], "kwargs": {}}
        assert broker.counts().ready == 1

    def test_a_resend_with_the_same_task_id_creates_nothing(
        self, adder: Task[[int, int], int], broker: Broker
    ) -> None:
        first = adder.enqueue(1, task_id="charge-1")
        again = adder.enqueue(2, task_id="charge-1")
        assert (first, again) == (Enqueued("charge-1", True), Enqueued("charge-1", False))
        assert broker.payload("charge-1") == {"args": [1], "kwargs": {}}
        assert broker.counts().ready == 1

    def test_reserved_options_are_not_passed_as_arguments(
        self, adder: Task[[int, int], int], broker: Broker
    ) -> None:
        result = adder.enqueue(1, 2, delay=0, max_retries=1, idempotency_key="k", task_id="t")
        assert broker.payload(result.task_id) == {"args": [1, 2], "kwargs": {}}

    def test_an_app_without_use_broker_connects_with_its_settings(
        self, settings: Settings, client: redis.Redis
    ) -> None:
        app = App(queue="own", settings=settings)
        result = app.task()(add).enqueue(5)
        assert Broker(client, "own").payload(result.task_id) == {"args": [5], "kwargs": {}}

    def test_threads_enqueueing_for_the_first_time_at_once_share_one_broker(
        self, settings: Settings, client: redis.Redis
    ) -> None:
        made: list[Broker] = []

        class SlowToConnect(App):
            def make_broker(self) -> Broker:
                time.sleep(0.05)  # a connection that takes a while: the threads meet here
                made.append(broker := super().make_broker())
                return broker

        task = SlowToConnect(queue="own", settings=settings).task()(add)
        with ThreadPoolExecutor(8) as pool:
            list(pool.map(task.enqueue, range(8)))
        assert len(made) == 1
        assert Broker(client, "own").counts().ready == 8


class TestEnqueueRefusesWhatCannotRun:
    @pytest.mark.parametrize(
        ("args", "kwargs"),
        [((), {}), ((1, 2, 3), {}), ((1,), {"c": 3}), ((1,), {"a": 1})],
    )
    def test_arguments_that_do_not_fit_the_signature_are_refused_naming_the_task(
        self,
        adder: Task[[int, int], int],
        broker: Broker,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
    ) -> None:
        with pytest.raises(InvalidTaskError, match=f"cannot enqueue {adder.name}"):
            adder.enqueue(*args, **kwargs)
        assert nothing_was_created(broker)

    def test_a_shape_that_fit_once_does_not_let_a_different_shape_through(
        self, adder: Task[[int, int], int], broker: Broker
    ) -> None:
        adder.enqueue(1, 2)
        adder.enqueue(a=1, b=2)
        for args, kwargs in (((1, 2, 3), {}), ((1, 2), {"a": 1}), ((), {"a": 1, "c": 2}),
                             ((1,), {"a": 2})):
            with pytest.raises(InvalidTaskError, match=f"cannot enqueue {adder.name}"):
                adder.enqueue(*args, **kwargs)
        assert broker.counts().ready == 2

    def test_a_function_taking_any_keywords_is_still_checked_past_the_shapes_it_remembers(
        self, app: App, broker: Broker
    ) -> None:
        def anything(a: int, **options: int) -> None:
            return None

        task = app.task("anything")(anything)
        for i in range(100):  # more distinct keyword names than a task remembers
            task.call(1, **{f"k{i}": i})
        with pytest.raises(InvalidTaskError, match="cannot enqueue anything"):
            task.call(k0=1)
        assert nothing_was_created(broker)

    def test_a_keyword_only_argument_given_positionally_is_refused(
        self, app: App, broker: Broker
    ) -> None:
        task = app.task("greet")(greet)
        with pytest.raises(InvalidTaskError, match="cannot enqueue greet"):
            task.enqueue("ann", "?")
        assert nothing_was_created(broker)

    @pytest.mark.parametrize(
        "value", [{1, 2}, b"bytes", float("nan"), float("inf"), object(), [float("-inf")]]
    )
    def test_an_argument_json_cannot_carry_is_refused_and_nothing_is_created(
        self, adder: Task[[int, int], int], broker: Broker, value: Any
    ) -> None:
        with pytest.raises(PayloadError):
            adder.enqueue(value)
        assert nothing_was_created(broker)

    @pytest.mark.parametrize(
        ("option", "value"), [("delay", -1), ("max_retries", -1), ("task_id", "no spaces"),
                              ("priority", 12)]
    )
    def test_a_bad_option_is_refused_and_nothing_is_created(
        self, adder: Task[[int, int], int], broker: Broker, option: str, value: object
    ) -> None:
        with pytest.raises(InvalidTaskError, match=option.replace("_id", " id")):
            adder.enqueue(1, **{option: value})
        assert nothing_was_created(broker)
