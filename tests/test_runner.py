"""The Runner: handlers run where the worker can watch them, and a hand-off can be awaited."""

from __future__ import annotations

import asyncio
import contextvars
import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from taskq import App, Retry, RetryPolicy, TimeLimitExceeded, current_task
from taskq.context import LeaseLostError, TaskContext
from taskq.results import LeasedTask
from taskq.settings import Settings
from taskq.worker.inbox import Inbox, Outcome
from taskq.worker.runner import Runner
from waiting import wait_until

HANDLER_LIMIT_SECONDS = 10.0


class Abort(BaseException):
    """A class of the handler's own outside Exception, as some libraries raise."""


class Unprintable(Exception):
    def __str__(self) -> str:
        raise ValueError("no text for this one")


class NotText(Exception):
    def __str__(self) -> str:
        return 42  # type: ignore[return-value]  # noqa: PLE0307  (the hostile case itself)


class ExitingText(Exception):
    def __str__(self) -> str:
        raise SystemExit(3)


class RetryUnbuilt(Retry):
    """A Retry of the handler's own that never calls Retry.__init__: it has no delay."""

    def __init__(self) -> None:
        pass


class RetryAfterText(Retry):
    """A Retry whose delay is set afterwards to what no retry can wait (a header's text)."""

    def __init__(self) -> None:
        super().__init__(reason="429")
        self.delay = "30"  # type: ignore[assignment]  # the hostile case itself


class RetryDelayRaises(Retry):
    """A Retry whose delay is a property reading a header that is not there."""

    def __init__(self) -> None:
        Exception.__init__(self, "429")

    @property
    def delay(self) -> float:  # type: ignore[override]  # the hostile case itself
        raise KeyError("Retry-After")


class Agreeable(float):
    """A float that says yes to every comparison: NaN in a range, as far as it knows."""

    def __lt__(self, other: object) -> bool:
        return True

    __le__ = __gt__ = __ge__ = __lt__  # type: ignore[assignment]


class RetryAgreeableDelay(Retry):
    def __init__(self) -> None:
        Exception.__init__(self, "429")
        self.delay = Agreeable("nan")


class Unnamed(Exception):
    """A class whose module is no text, and compares by raising."""


class Module:
    def __eq__(self, other: object) -> bool:
        raise RuntimeError("no comparing this")

    __hash__ = object.__hash__


Unnamed.__module__ = Module()  # type: ignore[assignment]  # the hostile case itself


HOSTILE: dict[str, type[BaseException]] = {
    "interrupt": KeyboardInterrupt, "own": Abort, "exit": SystemExit,
    "unprintable": Unprintable, "not-text": NotText, "exiting-text": ExitingText,
    "generator-exit": GeneratorExit, "retry-unbuilt": RetryUnbuilt,
    "retry-after-text": RetryAfterText, "retry-delay-raises": RetryDelayRaises,
    "retry-agreeable-delay": RetryAgreeableDelay, "unnamed": Unnamed}


class Handlers:
    """Handlers that start, say so, and then wait to be let go."""

    def __init__(self, settings: Settings) -> None:
        self.app = App(queue="runner", settings=settings)
        self.started = threading.Event()
        self.release = threading.Event()
        self.inbox = Inbox()
        self._outcomes: list[Outcome] = []

        @self.app.task("blocking_sync")
        def blocking_sync() -> None:
            self.started.set()
            self.release.wait(HANDLER_LIMIT_SECONDS)

        @self.app.task("blocking_async")
        async def blocking_async() -> None:
            self.started.set()
            await asyncio.to_thread(self.release.wait, HANDLER_LIMIT_SECONDS)

        @self.app.task("raising_sync")
        def raising_sync(kind: str) -> None:
            raise HOSTILE[kind]()

        @self.app.task("raising_async")
        async def raising_async(kind: str) -> None:
            raise HOSTILE[kind]()

        @self.app.task("overrun_sync", time_limit=0.01)
        def overrun_sync() -> int:
            time.sleep(0.05)
            return 1

        @self.app.task("overrun_async", time_limit=0.01)
        async def overrun_async() -> int:
            time.sleep(0.05)  # blocks its loop: no cancel can reach it before it returns
            return 1

        self._late_raisers()

        @self.app.task("stopping_async")
        async def stopping_async() -> str:
            """Stops the loop it runs in, then carries on once it runs again."""
            asyncio.get_running_loop().stop()
            await asyncio.sleep(0)
            return "went on"

        @self.app.task("fine_sync")
        def fine_sync() -> None:
            """Runs after a hostile one: the handler that ran it must still be there."""

        @self.app.task("fine_async")
        async def fine_async() -> None:
            """The async one's check."""

    def _late_raisers(self) -> None:
        """A client whose own timeout is the task's limit raises just past it: a failure
        the policy would not retry, where one at the time limit it would."""
        late = RetryPolicy(retry_on=(TimeLimitExceeded,))

        @self.app.task("overraise_sync", time_limit=0.01, retry=late)
        def overraise_sync() -> None:
            time.sleep(0.05)
            raise ConnectionError("timed out")

        @self.app.task("overraise_async", time_limit=0.01, retry=late)
        async def overraise_async() -> None:
            time.sleep(0.05)
            raise ConnectionError("timed out")

    def finish(self, runner: Runner, submitted: int) -> None:
        """Let every handler go, wait for their outcomes, then close the runner (a
        coroutine still pending when its loop closes would be torn down mid-run)."""
        self.release.set()
        wait_until(lambda: len(self.outcomes) == submitted, HANDLER_LIMIT_SECONDS,
                   "every handler to finish")
        runner.close()

    @property
    def outcomes(self) -> list[Outcome]:
        """Every outcome the runner has put in the inbox so far."""
        self._outcomes.extend(self.inbox.take())
        return self._outcomes

    def runner(self, concurrency: int, backlog: int = 0) -> Runner:
        runner = Runner(self.app, concurrency, self.inbox, backlog=backlog)
        runner.start()
        return runner


def job(name: str, task_id: str = "t1", payload: str = "{}") -> tuple[LeasedTask, TaskContext]:
    task = LeasedTask(task_id, 1, name, payload, 0, 3)
    context = TaskContext(task_id=task_id, name=name, queue="runner", worker_id="w",
                          token=1, attempt=1, max_retries=3)
    return task, context


@pytest.fixture
def handlers(settings: Settings) -> Iterator[Handlers]:
    handlers = Handlers(settings)
    yield handlers
    handlers.release.set()


@pytest.mark.parametrize("name", ["blocking_sync", "blocking_async"])
def test_wait_taken_returns_once_the_handler_has_started_not_when_it_ends(
    handlers: Handlers, name: str
) -> None:
    runner = handlers.runner(concurrency=2)
    try:
        assert runner.submit([job(name)])
        assert runner.wait_taken(HANDLER_LIMIT_SECONDS)
        assert handlers.started.wait(HANDLER_LIMIT_SECONDS)
        assert handlers.outcomes == []  # still running: taken means started, not done
    finally:
        handlers.finish(runner, submitted=1)


def test_wait_taken_times_out_when_no_handler_is_free_to_take_the_job(
    handlers: Handlers,
) -> None:
    runner = handlers.runner(concurrency=1)
    try:
        runner.submit([job("blocking_sync", "busy")])
        assert runner.wait_taken(HANDLER_LIMIT_SECONDS)
        runner.submit([job("blocking_sync", "queued")])
        assert not runner.wait_taken(0.05)
        handlers.release.set()
        assert runner.wait_taken(HANDLER_LIMIT_SECONDS)
    finally:
        handlers.finish(runner, submitted=2)


def test_a_finished_coroutine_is_let_go_so_a_long_run_holds_no_dead_tasks(
    handlers: Handlers,
) -> None:
    runner = handlers.runner(concurrency=1)
    handlers.release.set()
    try:
        runner.submit([job("blocking_async", f"t{n}") for n in range(20)])
        wait_until(lambda: len(handlers.outcomes) == 20, HANDLER_LIMIT_SECONDS, "20 outcomes")
        wait_until(lambda: not runner._running, HANDLER_LIMIT_SECONDS, "no task still held")
        assert [o.failure for o in handlers.outcomes] == [None] * 20
    finally:
        runner.close()


def test_a_batch_that_fails_at_once_hands_nothing_over_so_nobody_waits_for_it(
    handlers: Handlers,
) -> None:
    runner = handlers.runner(concurrency=1)
    try:
        assert not runner.submit([job("no.such.task", "t1"), job("no.such.task", "t2")])
        assert [o.task.task_id for o in handlers.outcomes] == ["t1", "t2"]
        failures = [o.failure for o in handlers.outcomes]
        assert all(f is not None and f.error_type == "taskq.errors.UnknownTaskError"
                   and "unknown task 'no.such.task'" in f.line for f in failures)
    finally:
        runner.close()


@pytest.mark.parametrize("kind", sorted(HOSTILE))
@pytest.mark.parametrize("flavour", ["sync", "async"])
def test_whatever_a_handler_raises_fails_its_run_and_the_next_run_still_starts(
    handlers: Handlers, kind: str, flavour: str
) -> None:
    runner = handlers.runner(concurrency=1)
    try:
        payload = json.dumps({"args": [kind], "kwargs": {}})
        assert runner.submit([job(f"raising_{flavour}", "hostile", payload)])
        assert runner.submit([job(f"fine_{flavour}", "next")])
        wait_until(lambda: len(handlers.outcomes) == 2, HANDLER_LIMIT_SECONDS,
                   "both runs to end, the second on the same single handler")
        hostile, after = handlers.outcomes
        assert (hostile.task.task_id, after.task.task_id) == ("hostile", "next")
        assert after.failure is None
        failure = hostile.failure
        assert failure is not None and failure.error_type.endswith(HOSTILE[kind].__name__)
        assert failure.line.startswith(HOSTILE[kind].__name__)
        if kind == "unprintable":
            assert failure.message == "<str() of the test_runner.Unprintable raised ValueError>"
            assert "<exception str() failed>" in failure.traceback
        if kind == "not-text":
            assert "TypeError" in failure.message
        if kind == "exiting-text":
            assert failure.message == "<str() of the test_runner.ExitingText raised SystemExit>"
            assert "ExitingText" in failure.traceback
        if kind.startswith("retry-"):
            assert hostile.decision is not None and hostile.decision.mode == "backoff"
    finally:
        runner.close()


@pytest.mark.parametrize("name", ["blocking_sync", "blocking_async"])
def test_at_a_stop_tasks_waiting_for_a_handler_are_handed_back_before_it_frees_up(
    handlers: Handlers, name: str
) -> None:
    """With prefetch, tasks wait for a busy handler; a stopping worker gets them back as
    unstarted at once, to release, not when the running handler ends."""
    runner = handlers.runner(concurrency=1, backlog=4)
    try:
        assert runner.submit([job(name, "running")])
        assert handlers.started.wait(HANDLER_LIMIT_SECONDS)
        assert runner.submit([job(name, f"waiting{n}") for n in range(3)])
        runner.stop_starting()
        wait_until(lambda: len(handlers.outcomes) == 3, HANDLER_LIMIT_SECONDS,
                   "the three waiting tasks to come back")
        assert sorted(o.task.task_id for o in handlers.outcomes) == [
            "waiting0", "waiting1", "waiting2"]
        assert [o.started for o in handlers.outcomes] == [False] * 3
        assert [o.failure for o in handlers.outcomes] == [None] * 3
    finally:
        handlers.finish(runner, submitted=4)
    assert handlers.outcomes[-1].task.task_id == "running"
    assert handlers.outcomes[-1].started and handlers.outcomes[-1].failure is None


def test_a_coroutine_closed_with_its_loop_reports_nothing_and_raises_nothing(
    handlers: Handlers,
) -> None:
    """At the end of a worker whose async handler outlived the grace, the loop closes
    under it and the coroutine is closed: that is no failure of its handler, and
    undoing its context from outside its task must not raise."""
    runner = handlers.runner(concurrency=1)
    assert runner.submit([job("blocking_async", "outlives")])
    assert handlers.started.wait(HANDLER_LIMIT_SECONDS)
    (running, _), = runner._running.values()
    runner.close()
    runner.join(HANDLER_LIMIT_SECONDS)
    wait_until(runner._loop.is_closed, HANDLER_LIMIT_SECONDS, "the loop to close")
    running.get_coro().close()  # what collecting the pending task does
    assert handlers.outcomes == []


def test_an_async_handler_that_stops_its_loop_does_not_end_it(handlers: Handlers) -> None:
    """Only the runner's close ends the loop of async handlers: a handler's own
    `loop.stop()` would leave every later async run leased in a loop that never runs,
    and the runner's next hand-off to it raising."""
    runner = handlers.runner(concurrency=2)
    try:
        assert runner.submit([job("stopping_async", "stops")])
        wait_until(lambda: len(handlers.outcomes) == 1, HANDLER_LIMIT_SECONDS,
                   "the stopping handler to end")
        assert runner.submit([job("fine_async", "after")])
        wait_until(lambda: len(handlers.outcomes) == 2, HANDLER_LIMIT_SECONDS,
                   "the next async run to end")
        assert [(o.task.task_id, o.failure) for o in handlers.outcomes] == [
            ("stops", None), ("after", None)]
        assert not runner._loop.is_closed()
    finally:
        runner.close()
    assert runner.join(HANDLER_LIMIT_SECONDS) == []
    wait_until(runner._loop.is_closed, HANDLER_LIMIT_SECONDS, "close to end the loop")


@pytest.mark.parametrize("flavour", ["sync", "async"])
@pytest.mark.parametrize("ending", ["overrun", "overraise"])
def test_a_run_that_ends_past_its_time_limit_fails_at_it_though_nothing_timed_it_out(
    handlers: Handlers, flavour: str, ending: str
) -> None:
    """No time-limit thread runs here, as none looks between its ticks: a handler that
    returns or raises past its limit before the next look has its attempt failed at
    its time limit all the same, its result not kept, and its policy judging
    TimeLimitExceeded (retried) rather than the late raise (which it would not)."""
    runner = handlers.runner(concurrency=1)
    try:
        assert runner.submit([job(f"{ending}_{flavour}")])
        wait_until(lambda: len(handlers.outcomes) == 1, HANDLER_LIMIT_SECONDS,
                   "the run to end")
        (outcome,) = handlers.outcomes
        assert outcome.failure is not None and outcome.result is None
        assert outcome.failure.error_type == "taskq.errors.TimeLimitExceeded"
        assert outcome.decision is not None and outcome.decision.mode == "backoff"
    finally:
        runner.close()


def test_threads_of_handlers_given_up_on_are_let_go_once_they_return(
    handlers: Handlers,
) -> None:
    """A worker whose handlers keep timing out keeps only the threads still running."""
    @handlers.app.task("slow_sync", time_limit=60)
    def slow_sync() -> None:
        """Given up on at its limit (by the test), it returns a little later."""
        handlers.started.set()
        time.sleep(0.1)

    runner = handlers.runner(concurrency=1)
    try:
        for n in range(6):
            handlers.started.clear()
            task, context = job("slow_sync", task_id=f"t{n}")
            assert runner.submit([(task, context)])
            assert handlers.started.wait(HANDLER_LIMIT_SECONDS)
            context.time_out()
            runner.time_out(context)  # as the time-limit thread does: a thread replaces it
            time.sleep(0.15)  # the one given up on returns, and ends
        assert len(runner._threads) <= 2, [t.name for t in runner._threads]
        assert len(handlers.outcomes) == 6
    finally:
        runner.close()


def in_an_effect_on_a_thread(handlers: Handlers, in_block: threading.Event) -> None:
    """An effect() block, as an `async def` handler runs one with `asyncio.to_thread`."""
    with current_task().effect():
        in_block.set()
        handlers.release.wait(HANDLER_LIMIT_SECONDS)


@contextmanager
def in_its_block(handlers: Handlers, name: str,
                 in_block: threading.Event) -> Iterator[tuple[Runner, TaskContext]]:
    """Runs task `name` on a runner of one handler, and yields it and the run's context
    once the run is inside its effect() block; the runner is closed after."""
    runner = handlers.runner(concurrency=1)
    try:
        task, context = job(name)
        assert runner.submit([(task, context)])
        assert in_block.wait(HANDLER_LIMIT_SECONDS)
        yield runner, context
    finally:
        runner.close()


def failed_at_its_limit(handlers: Handlers) -> None:
    """Waits for the one outcome the runner reports, which must be the time limit's
    failure."""
    wait_until(lambda: len(handlers.outcomes) == 1, HANDLER_LIMIT_SECONDS,
               "the attempt to be failed")
    (outcome,) = handlers.outcomes
    assert outcome.failure is not None
    assert outcome.failure.error_type == "taskq.errors.TimeLimitExceeded"


def timed_out_in_its_block(handlers: Handlers, in_block: threading.Event) -> None:
    """Runs "charging_async", times it out while its effect() block is under way, and
    waits past the cancel's grace and then for the one outcome the block's end lets
    the runner report, which must be the time limit's failure."""
    with in_its_block(handlers, "charging_async", in_block) as (runner, context):
        context.time_out()
        runner.time_out(context)  # as the time-limit thread does
        time.sleep(0.6)  # past the cancel's grace: the give-up waits for the block
        assert handlers.outcomes == [] and context.in_effect
        handlers.release.set()
        failed_at_its_limit(handlers)
        assert not context.in_effect
        time.sleep(0.2)
        assert len(handlers.outcomes) == 1


@pytest.mark.parametrize("by", ["cancel", "time limit"])
def test_an_async_runs_cancel_waits_for_the_block_it_awaits_in_to_end(
    handlers: Handlers, by: str
) -> None:
    """Delivered at the await inside the block, the cancel cut the effect in two: half a
    transfer landed, and under a time limit the retry applied it whole again."""
    in_block, legs = threading.Event(), []

    @handlers.app.task("transfer_async", time_limit=60)
    async def transfer_async() -> None:
        with current_task().effect():
            legs.append("debit")
            in_block.set()
            await asyncio.to_thread(handlers.release.wait, HANDLER_LIMIT_SECONDS)
            legs.append("credit")
        await asyncio.sleep(HANDLER_LIMIT_SECONDS)  # where the cancel comes
        legs.append("went on")

    with in_its_block(handlers, "transfer_async", in_block) as (runner, context):
        if by == "cancel":
            context.cancel()
            runner.cancel(context)  # as the heartbeat does when Redis says so
        else:
            context.time_out()
            runner.time_out(context)  # as the time-limit thread does
        time.sleep(0.3)
        assert legs == ["debit"] and context.in_effect
        handlers.release.set()
        wait_until(lambda: len(handlers.outcomes) == 1, HANDLER_LIMIT_SECONDS,
                   "the run to end")
        assert legs == ["debit", "credit"]
        if by == "time limit":
            failed_at_its_limit(handlers)


def test_a_kept_async_run_that_fails_while_a_block_it_left_goes_on_is_failed_after_it(
    handlers: Handlers,
) -> None:
    """Kept to its end past its limit (its task has a concurrency limit), it has no
    give-up to report it: it stayed running, its slot held, until the worker stopped."""
    in_block, timed_out = threading.Event(), threading.Event()

    @handlers.app.task("limited_async", time_limit=60, max_concurrency=1)
    async def limited_async() -> None:
        threading.Thread(target=contextvars.copy_context().run,  # its run's context
                         args=(in_an_effect_on_a_thread, handlers, in_block)).start()
        await asyncio.to_thread(timed_out.wait, HANDLER_LIMIT_SECONDS)
        raise ValueError("after its limit, its block still under way")

    with in_its_block(handlers, "limited_async", in_block) as (runner, context):
        context.time_out()
        runner.time_out(context)  # as the time-limit thread does
        assert context.kept_to_end
        timed_out.set()
        time.sleep(0.3)
        assert handlers.outcomes == [] and context.in_effect
        handlers.release.set()
        failed_at_its_limit(handlers)


def test_an_async_run_timed_out_in_an_effect_on_a_thread_is_failed_once_the_block_ends(
    handlers: Handlers,
) -> None:
    """Its cancel ends the await at once, but not the block on the thread: failed then,
    its retry could apply the effect beside the block still under way."""
    in_block = threading.Event()

    @handlers.app.task("charging_async", time_limit=60)
    async def charging_async() -> None:
        await asyncio.to_thread(in_an_effect_on_a_thread, handlers, in_block)

    timed_out_in_its_block(handlers, in_block)


def test_an_async_run_that_catches_its_time_limit_in_an_effect_is_failed_once_the_block_ends(
    handlers: Handlers,
) -> None:
    """Its return claims the report the give-up would make: it must still be made, after
    the block, or the run holds its slot and its task for good."""
    in_block = threading.Event()

    @handlers.app.task("charging_async", time_limit=60)
    async def charging_async() -> str:
        try:
            await asyncio.to_thread(in_an_effect_on_a_thread, handlers, in_block)
        except asyncio.CancelledError:
            return "cancelled, and said so"
        return "charged"

    timed_out_in_its_block(handlers, in_block)


def charge_beside(handlers: Handlers, in_block: threading.Event) -> asyncio.Task[None]:
    """Starts, on the running loop, a coroutine that holds an effect() block of the
    current run across its awaits until the handlers are let go."""
    context = current_task()

    async def charge() -> None:
        with context.effect():
            in_block.set()
            await asyncio.to_thread(handlers.release.wait, HANDLER_LIMIT_SECONDS)

    return asyncio.get_running_loop().create_task(charge())


def test_an_async_run_timed_out_while_a_coroutine_it_left_is_in_an_effect_is_failed_after_it(
    handlers: Handlers,
) -> None:
    """The coroutine holds the block across its awaits on the loop's own thread, where
    the block's re-entrant lock is no sign of it: the attempt was failed at once, and
    each retry's block ran beside the last."""
    in_block = threading.Event()

    @handlers.app.task("charging_async", time_limit=60)
    async def charging_async() -> None:
        charging = charge_beside(handlers, in_block)
        await asyncio.sleep(HANDLER_LIMIT_SECONDS)
        await charging

    timed_out_in_its_block(handlers, in_block)


def left_in_an_effect(handlers: Handlers, in_block: threading.Event) -> None:
    """Starts a thread that runs an effect() block, and returns once it is in it."""
    context = current_task()

    def charge() -> None:
        with context.effect():
            in_block.set()
            handlers.release.wait(HANDLER_LIMIT_SECONDS)

    threading.Thread(target=charge, daemon=True).start()
    assert in_block.wait(HANDLER_LIMIT_SECONDS)


def reported_once_the_block_ends(handlers: Handlers, name: str) -> Outcome:
    """Runs `name`, whose handler leaves an effect() block under way as it ends, and
    returns its one outcome, which must come only once the block has ended; no block
    of the run starts after the handler ended."""
    runner = handlers.runner(concurrency=1)
    try:
        task, context = job(name)
        assert runner.submit([(task, context)])
        wait_until(lambda: context.ended_at or context.in_effect, HANDLER_LIMIT_SECONDS,
                   "the handler to end")
        time.sleep(0.3)
        assert handlers.outcomes == [] and context.in_effect
        handlers.release.set()
        wait_until(lambda: len(handlers.outcomes) == 1, HANDLER_LIMIT_SECONDS,
                   "the run to be reported")
        with pytest.raises(LeaseLostError, match="handler ended"), context.effect():
            pytest.fail("an effect ran after the run ended")
        (outcome,) = handlers.outcomes
        return outcome
    finally:
        runner.close()


@pytest.mark.parametrize("ending", ["raises", "returns once cancelled"])
def test_a_sync_run_that_ends_while_a_thread_it_left_is_in_an_effect_is_reported_after_it(
    handlers: Handlers, ending: str
) -> None:
    """Reported at once, its retry could apply the effect beside the block, or its task
    end cancelled, the cancel acknowledged, before the effect."""
    in_block = threading.Event()

    @handlers.app.task("charging_sync")
    def charging_sync() -> None:
        left_in_an_effect(handlers, in_block)
        if ending == "raises":
            raise RuntimeError("the charge went to a thread of its own")
        current_task().cancel()  # as a heartbeat does when it hears of the cancel

    outcome = reported_once_the_block_ends(handlers, "charging_sync")
    assert (outcome.failure is not None) == (ending == "raises")
    assert outcome.context.cancelled == (ending == "returns once cancelled")


def test_an_async_run_that_fails_while_a_coroutine_it_left_is_in_an_effect_is_failed_after_it(
    handlers: Handlers,
) -> None:
    in_block = threading.Event()

    @handlers.app.task("charging_async")
    async def charging_async() -> None:
        charge_beside(handlers, in_block)
        await asyncio.to_thread(in_block.wait, HANDLER_LIMIT_SECONDS)
        raise RuntimeError("the charge went to a coroutine of its own")

    outcome = reported_once_the_block_ends(handlers, "charging_async")
    assert outcome.failure is not None and outcome.failure.error_type == "RuntimeError"
