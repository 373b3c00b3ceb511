"""A producer's handle: results and failures come back, waits are woken through Redis."""

from __future__ import annotations

import asyncio
import dataclasses
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from helpers import record_of
from taskq import App
from taskq.broker import Broker
from taskq.errors import (
    InvalidTaskError,
    NoResultError,
    ResultTimeoutError,
    TaskFailed,
    TaskNotFoundError,
    TaskqError,
)
from taskq.handle import TaskHandle
from taskq.registry import Presence
from taskq.registry import register as register_worker
from taskq.results import Enqueued
from taskq.settings import Settings
from waiting import wait_until
from worker_support import WorkerThread, worker_running


class Boom(Exception):
    pass


def inner(n: int) -> None:
    raise Boom(f"no {n}")


def register(app: App) -> dict[str, Any]:
    @app.task("add")
    def add(a: int, b: int) -> int:
        return a + b

    @app.task("explode", max_retries=1)
    def explode(n: int) -> None:
        inner(n)

    @app.task("quiet", store_result=False)
    def quiet() -> int:
        return 1

    @app.task("unjsonable", max_retries=0)
    def unjsonable() -> set[int]:
        return {1, 2}

    @app.task("slow")
    def slow(seconds: float) -> str:
        time.sleep(seconds)
        return "done"

    @app.task("mute", max_retries=0)
    def mute() -> None:
        raise Boom

    return {"add": add, "explode": explode, "quiet": quiet, "unjsonable": unjsonable,
            "slow": slow, "mute": mute}


@pytest.fixture
def tasks(app: App) -> dict[str, Any]:
    return register(app)


@pytest.fixture
def worker(app: App, settings: Settings, tasks: dict[str, Any]) -> Iterator[WorkerThread]:
    with worker_running(app, settings) as thread:
        yield thread


class TestResult:
    def test_the_return_value_comes_back_from_the_worker(
        self, tasks: dict[str, Any], worker: WorkerThread
    ) -> None:
        handle = tasks["add"].enqueue(2, 3)
        assert handle.result(timeout=10) == 5
        assert handle.status() == "completed"

    def test_a_handle_is_still_the_enqueued_value(self, tasks: dict[str, Any]) -> None:
        handle = tasks["add"].enqueue(1, 1, task_id="same")
        assert handle == Enqueued("same", True)
        assert (handle.task_id, handle.created) == ("same", True)

    def test_a_dead_task_raises_task_failed_with_type_message_and_whole_traceback(
        self, tasks: dict[str, Any], worker: WorkerThread
    ) -> None:
        handle = tasks["explode"].enqueue(7)
        with pytest.raises(TaskFailed) as failed:
            handle.result(timeout=10)
        error = failed.value
        assert (error.error_type, error.message, error.attempts) == (
            "test_handle.Boom", "no 7", 2)
        # The whole traceback: the handler's frame and the helper it called.
        assert "in explode" in error.traceback and "in inner" in error.traceback
        assert "test_handle.Boom: no 7" in error.traceback
        assert "no 7" in str(error) and "in inner" in str(error)

    def test_an_error_with_no_message_is_named_once_by_its_type(
        self, tasks: dict[str, Any], worker: WorkerThread
    ) -> None:
        """Its empty message fell back to the record's summary, which names the type
        and where it was raised: "Boom: Boom:  (at ...)"."""
        handle = tasks["mute"].enqueue()
        with pytest.raises(TaskFailed) as failed:
            handle.result(timeout=10)
        assert (failed.value.error_type, failed.value.message) == ("test_handle.Boom", "")
        assert str(failed.value).startswith(
            f"task {handle.task_id} failed after 1 attempt(s): test_handle.Boom\n")

    def test_the_record_keeps_the_failure_of_each_attempt(
        self, tasks: dict[str, Any], worker: WorkerThread, app: App
    ) -> None:
        handle = tasks["explode"].enqueue(3)
        with pytest.raises(TaskFailed):
            handle.result(timeout=10)
        record = record_of(app.broker, handle.task_id)
        assert (record.state, record.error_type, record.error_message) == (
            "dead", "test_handle.Boom", "no 3")
        assert record.last_error.startswith("Boom: no 3 (at ")

    def test_a_task_that_keeps_no_result_says_so(
        self, tasks: dict[str, Any], worker: WorkerThread
    ) -> None:
        handle = tasks["quiet"].enqueue()
        with pytest.raises(NoResultError, match="store_result=False"):
            handle.result(timeout=10)
        assert handle.status() == "completed"

    def test_a_value_with_no_json_form_fails_the_attempt_saying_why(
        self, tasks: dict[str, Any], worker: WorkerThread
    ) -> None:
        handle = tasks["unjsonable"].enqueue()
        with pytest.raises(TaskFailed) as failed:
            handle.result(timeout=10)
        assert failed.value.error_type == "taskq.ResultError"
        assert "cannot be encoded as JSON" in failed.value.message

    def test_an_unknown_task_id_is_not_found(self, app: App) -> None:
        with pytest.raises(TaskNotFoundError, match="no task 'nope'"):
            app.handle("nope").result(timeout=1)
        assert app.handle("nope").status() == "unknown"

    def test_a_timeout_that_passes_first_raises_and_leaves_the_task(
        self, tasks: dict[str, Any]
    ) -> None:
        handle = tasks["add"].enqueue(1, 2)
        started = time.monotonic()
        with pytest.raises(ResultTimeoutError, match=r"not ended within 0\.3s: it is pending"):
            handle.result(timeout=0.3)
        assert time.monotonic() - started >= 0.3
        assert handle.status() == "pending"

    def test_a_timeout_may_be_a_timedelta(self, tasks: dict[str, Any]) -> None:
        handle = tasks["add"].enqueue(1, 2)
        with pytest.raises(ResultTimeoutError, match=r"not ended within 0\.2s"):
            handle.result(timeout=timedelta(milliseconds=200))

    def test_a_timeout_on_a_queue_no_worker_serves_says_so(
        self, tasks: dict[str, Any], app: App
    ) -> None:
        """A producer and workers that disagree on TASKQ_QUEUE leave tasks pending for good:
        the timeout says where to look rather than only that the task is pending."""
        handle = tasks["add"].enqueue(1, 2)
        with pytest.raises(ResultTimeoutError, match=rf"it is pending, and no worker is "
                           rf"registered on queue '{app.queue}'.*TASKQ_QUEUE"):
            handle.result(timeout=0.2)

        async def wait() -> None:
            try:
                with pytest.raises(ResultTimeoutError, match="no worker is registered"):
                    await (await tasks["add"].enqueue_async(3, 4)).result_async(timeout=0.2)
            finally:
                await app.aclose()

        asyncio.run(wait())
        register_worker(app.broker, Presence(worker_id="w-1", host="box", pid=1,
                                      queues=(app.queue,), concurrency=1, tasks=(),
                                      version="0"), in_hand=0, ttl=30)
        with pytest.raises(ResultTimeoutError) as served:
            handle.result(timeout=0.2)
        assert str(served.value).endswith("it is pending")

    def test_a_fleet_killed_at_once_counts_as_no_worker_once_its_records_expire(
        self, tasks: dict[str, Any], app: App
    ) -> None:
        """Its entries stay until a registration prunes them, and none comes."""
        register_worker(app.broker, Presence(worker_id="w-killed", host="box", pid=1,
                                             queues=(app.queue,), concurrency=1, tasks=(),
                                             version="0"), in_hand=0, ttl=0.05)
        assert app.broker.has_workers()
        time.sleep(0.1)
        handle = tasks["add"].enqueue(1, 2)
        with pytest.raises(ResultTimeoutError, match="no worker is registered"):
            handle.result(timeout=0.2)

        async def served() -> bool:
            try:
                return await app.async_broker.has_workers()
            finally:
                await app.aclose()

        assert asyncio.run(served()) is False

    def test_a_short_socket_timeout_still_ends_the_wait_at_its_own_timeout(
        self, settings: Settings
    ) -> None:
        """Each blocking wait asks Redis for less than the client's socket timeout, so
        the client never gives up reading first and calls that Redis unreachable."""
        short = App(queue="short", settings=dataclasses.replace(
            settings, redis_timeout_seconds=0.3))
        idle = short.task("idle")(lambda: None)
        with pytest.raises(ResultTimeoutError, match=r"not ended within 1\.5s"):
            idle.enqueue().result(timeout=1.5)

        async def wait() -> None:
            try:
                await (await idle.enqueue_async()).result_async(timeout=1.5)
            finally:
                await short.aclose()

        with pytest.raises(ResultTimeoutError, match=r"not ended within 1\.5s"):
            asyncio.run(wait())
        short.broker.client.close()

    def test_a_timeout_of_a_millisecond_or_less_ends_as_a_timeout(
        self, tasks: dict[str, Any], app: App
    ) -> None:
        # Redis 6.2 read a blocking timeout that comes to 0 ms as "for ever": this
        # result() was held 20 s and then said Redis could not be reached.
        handle = tasks["add"].enqueue(1, 2)
        for timeout in (0.001, 0.0004):
            with pytest.raises(ResultTimeoutError, match="it is pending"):
                handle.result(timeout=timeout)
        assert app.broker.wait_done(handle.task_id, 0.0005) is False
        assert Broker(app.broker.client, f"{app.queue}-idle").wait_for_work(0.0005)  # answered

        async def wait() -> None:
            try:
                with pytest.raises(ResultTimeoutError, match="it is pending"):
                    await (await tasks["add"].enqueue_async(3, 4)).result_async(
                        timeout=0.0004)
            finally:
                await app.aclose()

        asyncio.run(wait())

    def test_a_timeout_of_zero_reads_the_outcome_once_and_waits_for_nothing(
        self, tasks: dict[str, Any], worker: WorkerThread
    ) -> None:
        done = tasks["add"].enqueue(2, 3)
        assert done.result(timeout=5) == 5
        assert done.result(timeout=0) == 5
        waiting = tasks["add"].enqueue(1, 1, delay=60)
        for zero in (0, 0.0, -0.0):
            with pytest.raises(ResultTimeoutError,
                               match="has not ended within 0s: it is delayed"):
                waiting.result(timeout=zero)

    def test_a_blocking_handle_awaited_counts_its_timeout_from_the_call(
        self, tasks: dict[str, Any]
    ) -> None:
        """`result_async` on a `Broker` handle waits on the loop's threads: a wait that
        finds them all busy does not start its timeout only once one comes free."""
        first, second = tasks["add"].enqueue(1, 2), tasks["add"].enqueue(3, 4)

        async def both() -> float:
            asyncio.get_running_loop().set_default_executor(ThreadPoolExecutor(1))
            started = time.monotonic()
            ends = await asyncio.gather(first.result_async(timeout=2),
                                        second.result_async(timeout=2),
                                        return_exceptions=True)
            assert [type(end) for end in ends] == [ResultTimeoutError] * 2, ends
            assert all("within 2s: it is pending" in str(end) for end in ends), ends
            return time.monotonic() - started

        # The second wait gets the thread once the first times out, 2 s in, and reads
        # the task once: not a 2 s wait of its own on top.
        assert asyncio.run(both()) < 3.5

    def test_a_cancelled_await_of_a_blocking_handle_lets_its_thread_go(
        self, tasks: dict[str, Any], app: App
    ) -> None:
        """A blocking handle awaited waits on a thread of the loop's default executor:
        cancelled (a web request's own timeout), the wait must end there too, or a few
        of them hold every thread `asyncio.to_thread` shares, each blocked in Redis for
        as long as the task takes."""
        handle = tasks["add"].enqueue(1, 2)  # no worker: it never ends

        async def cancel_waits_then_use_a_thread() -> int:
            asyncio.get_running_loop().set_default_executor(ThreadPoolExecutor(2))
            for _ in range(4):  # twice the executor's threads
                with pytest.raises(TimeoutError):
                    await asyncio.wait_for(handle.result_async(), 0.2)
            return await asyncio.wait_for(asyncio.to_thread(lambda: 42), 5)

        assert asyncio.run(cancel_waits_then_use_a_thread()) == 42
        # The last ones end within a slice of their wait.
        wait_until(lambda: not any("b" in c["flags"]
                                   for c in app.broker.client.client_list()),
                   5, "the cancelled waits to leave Redis")

    def test_a_bad_timeout_is_refused(self, tasks: dict[str, Any]) -> None:
        handle = tasks["add"].enqueue(1, 2)
        with pytest.raises(InvalidTaskError, match="timeout must be"):
            handle.result(timeout=-1)

    def test_a_handle_made_later_from_the_id_gets_the_result(
        self, tasks: dict[str, Any], worker: WorkerThread, settings: Settings, app: App
    ) -> None:
        task_id = tasks["add"].enqueue(20, 22).task_id
        other = App(queue=app.queue, settings=settings)
        try:
            assert other.handle(task_id).result(timeout=10) == 42
        finally:
            other.broker.client.close()


class TestEventLoops:
    def test_a_handle_made_outside_a_loop_belongs_to_the_first_that_awaits_it(
        self, app: App, tasks: dict[str, Any]
    ) -> None:
        """It failed in the second loop with redis-py's "Event loop is closed"."""
        broker = app.async_broker  # as app.handle_async(task_id) makes it, outside a loop
        handle = broker.handle(tasks["add"].enqueue(1, 2).task_id)

        async def first() -> str:
            try:
                return await handle.status_async()
            finally:
                await broker.aclose()

        assert asyncio.run(first()) == "pending"
        with pytest.raises(TaskqError, match=r"first used in another\), whose connections"):
            asyncio.run(handle.status_async())

    def test_the_apps_aclose_closes_a_broker_made_outside_a_loop_in_the_loop_it_took(
        self, app: App, tasks: dict[str, Any]
    ) -> None:
        """It compared the loop it had recorded (none) and dropped it unclosed, and a
        second client was made for the same loop meanwhile."""
        handle = app.handle_async(tasks["add"].enqueue(1, 2).task_id)

        async def main() -> tuple[bool, bool]:
            await handle.status_async()
            same = app.async_broker is handle.async_broker
            await app.aclose()
            assert handle.async_broker is not None
            return same, handle.async_broker.closed

        assert asyncio.run(main()) == (True, True)

    def test_a_broker_closed_by_its_own_aclose_is_made_again_by_the_app(
        self, app: App, tasks: dict[str, Any]
    ) -> None:
        async def main() -> str:
            await app.async_broker.aclose()
            try:
                handle = await tasks["add"].enqueue_async(1, 2)
                return await handle.status_async()
            finally:
                await app.aclose()

        assert asyncio.run(main()) == "pending"

    def test_a_handle_awaited_in_another_loop_than_its_own_says_to_make_one_there(
        self, app: App, tasks: dict[str, Any]
    ) -> None:
        async def enqueue() -> TaskHandle[int]:
            handle: TaskHandle[int] = await tasks["add"].enqueue_async(1, 2)
            await app.aclose()  # as an ASGI app's lifespan does when its loop ends
            return handle

        handle = asyncio.run(enqueue())
        with pytest.raises(TaskqError, match=r"made in another event loop.*"
                                             r"app\.handle_async\("):
            asyncio.run(handle.status_async())

        async def again() -> str:
            try:
                return await app.handle_async(handle.task_id).status_async()
            finally:
                await app.aclose()

        assert asyncio.run(again()) == "pending"


class TestWaitingInsideAHandler:
    def test_a_handler_whose_wait_for_another_task_times_out_is_told_of_the_trap(
        self, app: App, settings: Settings
    ) -> None:
        @app.task("child")
        def child() -> int:
            return 1

        @app.task("parent", max_retries=0)
        def parent() -> int:
            return int(child.enqueue().result(timeout=0.5))

        with worker_running(app, settings, concurrency=1):
            handle = parent.enqueue()
            with pytest.raises(TaskFailed) as failed:
                handle.result(timeout=10)
        assert failed.value.error_type == "taskq.errors.ResultTimeoutError"
        assert f"inside the handler of task {handle.task_id} (parent)" in failed.value.message
        assert "taskq.chain" in failed.value.message

    def test_a_timeout_outside_a_handler_says_nothing_of_handlers(
        self, tasks: dict[str, Any]
    ) -> None:
        with pytest.raises(ResultTimeoutError) as timed_out:
            tasks["add"].enqueue(1, 2).result(timeout=0.1)
        assert "handler" not in str(timed_out.value)


def waiting_on_a_thread(handle: TaskHandle) -> tuple[threading.Thread, list[TaskqError]]:
    """`handle.result(timeout=10)` running on a thread; the error it raises lands in the
    list."""
    errors: list[TaskqError] = []

    def wait() -> None:
        try:
            handle.result(timeout=10)
        except TaskqError as e:
            errors.append(e)

    waiter = threading.Thread(target=wait)
    waiter.start()
    return waiter, errors


class TestWaiting:
    """result() blocks on the task's done list and is woken by the script that ends it."""

    def test_every_waiter_wakes_when_the_task_is_acked(self, broker: Broker) -> None:
        handle = broker.enqueue("t1")
        results: list[Any] = []
        waiters = [threading.Thread(target=lambda: results.append(handle.result(timeout=10)))
                   for _ in range(3)]
        for waiter in waiters:
            waiter.start()
        # Each waiter has marked the record before it blocks.
        deadline = time.monotonic() + 5
        while broker.client.hget(broker.keys.task("t1"), "waiters") is None:
            assert time.monotonic() < deadline
            time.sleep(0.01)
        task = broker.lease_many("w", 30, 1).tasks[0]
        time.sleep(0.2)  # every waiter blocked in BLMOVE by now
        acked_at = time.monotonic()
        assert broker.ack(task.task_id, task.token, '{"v":1}')
        for waiter in waiters:
            waiter.join(5)
        # Woken by the ack, not by the once-a-second re-read.
        assert time.monotonic() - acked_at < 0.5
        assert results == [{"v": 1}] * 3

    def test_a_waiter_wakes_when_the_task_dies(self, broker: Broker) -> None:
        handle = broker.enqueue("t1", max_retries=0)
        waiter, errors = waiting_on_a_thread(handle)
        time.sleep(0.2)
        task = broker.lease_many("w", 30, 1).tasks[0]
        assert broker.fail(task.task_id, task.token, "boom").status == "dead"
        waiter.join(5)
        assert [type(e) for e in errors] == [TaskFailed]
        assert str(errors[0]).startswith("task t1 failed after 1 attempt(s): ")

    def test_an_unwatched_task_leaves_no_done_list(self, broker: Broker) -> None:
        broker.enqueue("t1")
        task = broker.lease_many("w", 30, 1).tasks[0]
        assert broker.ack(task.task_id, task.token, "1")
        assert not broker.client.exists(broker.keys.done("t1"))

    def test_a_revived_task_drops_its_done_list_so_the_next_wait_blocks(
        self, broker: Broker
    ) -> None:
        handle = broker.enqueue("t1", max_retries=0)
        broker.watch("t1")
        task = broker.lease_many("w", 30, 1).tasks[0]
        broker.fail(task.task_id, task.token, "boom")
        assert broker.client.exists(broker.keys.done("t1"))
        assert broker.retry_dead("t1")
        assert not broker.client.exists(broker.keys.done("t1"))
        with pytest.raises(ResultTimeoutError):
            handle.result(timeout=0.3)

    def test_an_id_enqueued_again_after_its_record_expired_waits_without_spinning(
        self, broker: Broker
    ) -> None:
        broker.enqueue("t1")
        broker.watch("t1")
        task = broker.lease_many("w", 30, 1).tasks[0]
        assert broker.ack(task.task_id, task.token, "1")  # wakes the done list
        broker.client.delete(broker.keys.task("t1"))  # its record expired
        handle = broker.enqueue("t1")
        assert handle.created
        reads = 0
        watch = broker.watch

        def counted(task_id: str, mark: bool = True) -> Any:
            nonlocal reads
            reads += 1
            return watch(task_id, mark)

        broker.watch = counted  # type: ignore[method-assign]
        with pytest.raises(ResultTimeoutError):
            handle.result(timeout=0.5)
        assert reads <= 3, reads  # blocked in BLMOVE, not woken by the old run's list

    def test_a_record_deleted_while_waited_for_is_noticed(self, broker: Broker) -> None:
        handle = broker.enqueue("t1")
        waiter, errors = waiting_on_a_thread(handle)
        time.sleep(0.2)
        broker.client.delete(broker.keys.task("t1"))
        waiter.join(5)
        assert [type(e) for e in errors] == [TaskNotFoundError] and not waiter.is_alive()


class TestStoredResult:
    def test_a_stale_ack_keeps_nothing_and_the_current_runs_result_wins(
        self, broker: Broker
    ) -> None:
        broker.enqueue("t1")
        first = broker.lease_many("w1", 0.05, 1).tasks[0]
        time.sleep(0.1)
        broker.reap()
        broker.promote()  # its backoff may not have passed: wait for it
        deadline = time.monotonic() + 5
        while not (leased := broker.lease_many("w2", 30, 1).tasks):
            assert time.monotonic() < deadline
            time.sleep(0.02)
            broker.promote()
        second = leased[0]
        assert not broker.ack(first.task_id, first.token, '"stale"')
        assert record_of(broker, "t1").result is None
        assert broker.ack(second.task_id, second.token, '"current"')
        assert not broker.ack(first.task_id, first.token, '"stale"')
        assert record_of(broker, "t1").result == '"current"'

    def test_a_result_over_the_limit_is_refused_before_anything_is_sent(
        self, client: Any
    ) -> None:
        broker = Broker(client, "test", max_result_bytes=8)
        broker.enqueue("t1")
        task = broker.lease_many("w", 30, 1).tasks[0]
        with pytest.raises(InvalidTaskError, match="over the limit of 8 bytes"):
            broker.ack(task.task_id, task.token, '"123456789"')
        assert record_of(broker, "t1").state == "running"

    def test_the_per_task_result_ttl_sets_how_long_the_record_is_kept(
        self, broker: Broker
    ) -> None:
        broker.enqueue("t1", result_ttl=30)
        task = broker.lease_many("w", 30, 1).tasks[0]
        broker.ack(task.task_id, task.token, "1")
        assert 29_000 < broker.client.pttl(broker.keys.task("t1")) <= 30_000


class TestEnqueueOptions:
    def test_run_at_in_the_future_delays_the_task_to_that_server_time(
        self, tasks: dict[str, Any], app: App
    ) -> None:
        at = datetime.now(UTC) + timedelta(seconds=30)
        handle = tasks["add"].enqueue(1, 2, run_at=at)
        record = record_of(app.broker, handle.task_id)
        assert record.state == "delayed"
        assert abs(record.run_at - at.timestamp() * 1000) <= 1

    def test_a_run_at_between_two_milliseconds_is_due_at_the_later(
        self, tasks: dict[str, Any], app: App
    ) -> None:
        at = datetime.now(UTC).replace(microsecond=900) + timedelta(seconds=30)
        handle = tasks["add"].enqueue(1, 2, run_at=at)
        whole_ms = (at - datetime(1970, 1, 1, tzinfo=UTC)) // timedelta(milliseconds=1)
        assert record_of(app.broker, handle.task_id).run_at == whole_ms + 1

    def test_run_at_in_the_past_is_ready_now(self, tasks: dict[str, Any], app: App) -> None:
        handle = tasks["add"].enqueue(1, 2, run_at=datetime.now(UTC) - timedelta(hours=1))
        assert record_of(app.broker, handle.task_id).state == "pending"

    @pytest.mark.parametrize(("options", "error"), [
        ({"run_at": datetime(2030, 1, 1)}, "must be timezone-aware"),
        ({"run_at": "2030-01-01"}, "run_at must be a datetime"),
        ({"run_at": datetime(2300, 1, 1, tzinfo=UTC)}, "before 2286"),
        ({"run_at": datetime.now(UTC) + timedelta(days=3660)}, "more than ten years ahead"),
        ({"run_at": datetime.now(UTC), "delay": 5}, "either delay or run_at"),
        ({"result_ttl": 0}, "result_ttl must be"),
        ({"max_retries": -1}, "max_retries must be"),
        ({"task_id": "bad id"}, "invalid task id"),
    ])  # fmt: skip
    def test_a_bad_option_is_refused_and_nothing_is_enqueued(
        self, tasks: dict[str, Any], app: App, options: dict[str, Any], error: str
    ) -> None:
        with pytest.raises(InvalidTaskError, match=error):
            tasks["add"].enqueue(1, 2, **options)
        assert app.broker.counts().ready + app.broker.counts().delayed == 0

    def test_enqueue_many_returns_a_handle_per_call_in_order(
        self, tasks: dict[str, Any], worker: WorkerThread
    ) -> None:
        add = tasks["add"]
        handles = add.enqueue_many([(1, 1), add.call(2, 2), add.call(b=3, a=3, delay=0.1)])
        assert [h.result(timeout=10) for h in handles] == [2, 4, 6]

    def test_enqueue_many_checks_every_call_before_sending_any(
        self, tasks: dict[str, Any], app: App
    ) -> None:
        add = tasks["add"]
        with pytest.raises(InvalidTaskError, match="cannot enqueue add"):
            add.enqueue_many([(1, 1), (2, 2), (3,)])
        with pytest.raises(InvalidTaskError, match="a call of explode"):
            add.enqueue_many([(1, 1), tasks["explode"].call(1)])
        assert app.broker.counts().ready == 0
