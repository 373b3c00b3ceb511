"""Producing from asyncio: enqueue and wait for results without blocking the event loop."""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time
import urllib.request
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager, suppress
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

import pytest
import redis
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse
from starlette.routing import Route

from conftest import ON_CLUSTER
from helpers import record_of, stalling
from taskq import App, chain
from taskq.aio import AsyncBroker
from taskq.broker import Broker, NewTask
from taskq.connection import connect_async
from taskq.errors import (
    BrokerError,
    InvalidTaskError,
    ResultTimeoutError,
    TaskFailed,
    TaskNotFoundError,
    TaskqError,
)
from taskq.keys import QUEUES_KEY
from taskq.results import Enqueued
from taskq.settings import Settings
from taskq.tools.embedded import free_port
from waiting import wait_until
from worker_support import WorkerThread, worker_running

T = TypeVar("T")


def run(app: App, main: Callable[[], Awaitable[T]]) -> T:
    """Run `main` on a new event loop, closing the app's asyncio client before it ends."""
    async def scoped() -> T:
        try:
            return await main()
        finally:
            await app.aclose()

    return asyncio.run(scoped())


def on_broker(settings: Settings, queue: str,
              main: Callable[[AsyncBroker], Awaitable[T]]) -> T:
    """Run `main` with an AsyncBroker for `queue` on a new event loop, then close it."""
    async def scoped() -> T:
        broker = AsyncBroker.from_settings(settings, queue)
        try:
            return await main(broker)
        finally:
            await broker.aclose()

    return asyncio.run(scoped())


class Boom(Exception):
    pass


@pytest.fixture
def tasks(app: App) -> dict[str, Any]:
    @app.task("add")
    def add(a: int, b: int) -> int:
        return a + b

    @app.task("explode", max_retries=0)
    def explode(n: int) -> None:
        raise Boom(f"no {n}")

    return {"add": add, "explode": explode}


@pytest.fixture
def worker(app: App, settings: Settings, tasks: dict[str, Any]) -> Iterator[WorkerThread]:
    with worker_running(app, settings) as thread:
        yield thread


class TestEnqueue:
    def test_enqueue_async_writes_the_record_the_blocking_enqueue_writes(
        self, tasks: dict[str, Any], app: App
    ) -> None:
        handle = run(app, lambda: tasks["add"].enqueue_async(1, b=2, task_id="async"))
        tasks["add"].enqueue(1, b=2, task_id="blocking")
        assert handle == Enqueued("async", True)
        made, reference = record_of(app.broker, "async"), record_of(app.broker, "blocking")
        assert (made.state, made.name, made.payload, made.max_retries) == (
            reference.state, reference.name, reference.payload, reference.max_retries)
        assert app.broker.counts().ready == 2

    def test_a_reused_idempotency_key_returns_the_original_and_creates_nothing(
        self, tasks: dict[str, Any], app: App
    ) -> None:
        async def twice() -> list[Any]:
            return [await tasks["add"].enqueue_async(1, 2, idempotency_key="k")
                    for _ in range(2)]

        first, second = run(app, twice)
        assert (first.created, second.created) == (True, False)
        assert first.task_id == second.task_id
        assert app.broker.counts().ready == 1

    def test_run_at_delays_the_task_to_that_server_time(
        self, tasks: dict[str, Any], app: App
    ) -> None:
        at = datetime.now(UTC) + timedelta(seconds=30)
        handle = run(app, lambda: tasks["add"].enqueue_async(1, 2, run_at=at, result_ttl=60))
        record = record_of(app.broker, handle.task_id)
        assert (record.state, record.result_ttl) == ("delayed", 60_000)
        assert abs(record.run_at - at.timestamp() * 1000) <= 1

    @pytest.mark.parametrize("options", [
        {"run_at": datetime(2030, 1, 1)},
        {"run_at": datetime.now(UTC), "delay": 5},
        {"result_ttl": 0},
        {"max_retries": -1},
        {"task_id": "bad id"},
        {"idempotency_key": ""},
        {"nope": 1},
    ])  # fmt: skip
    def test_a_bad_option_raises_the_blocking_error_and_enqueues_nothing(
        self, tasks: dict[str, Any], app: App, options: dict[str, Any]
    ) -> None:
        with pytest.raises(InvalidTaskError) as blocking:
            tasks["add"].enqueue(1, 2, **options)
        with pytest.raises(InvalidTaskError) as awaited:
            run(app, lambda: tasks["add"].enqueue_async(1, 2, **options))
        assert type(awaited.value) is type(blocking.value)
        assert str(awaited.value) == str(blocking.value)
        assert app.broker.counts().ready + app.broker.counts().delayed == 0

    @pytest.mark.skipif(ON_CLUSTER, reason=(
        "redis-py's asyncio cluster client fails a few of 300 calls at once with a raw "
        "AttributeError ('NoneType' object has no attribute 'writelines'): README, Known "
        "limitations"))
    def test_hundreds_of_calls_at_once_on_one_loop_all_go_through(
        self, tasks: dict[str, Any], app: App
    ) -> None:
        async def main() -> list[Any]:
            return await asyncio.gather(*(tasks["add"].enqueue_async(n, 1)
                                          for n in range(300)), return_exceptions=True)

        handles = run(app, main)
        assert [repr(h) for h in handles if isinstance(h, BaseException)] == []
        assert app.broker.counts().ready == 300

    def test_enqueue_many_async_returns_a_handle_per_call_in_order(
        self, tasks: dict[str, Any], app: App
    ) -> None:
        add = tasks["add"]
        calls = [(1, 1), add.call(2, 2, task_id="second"), add.call(3, 3, delay=60)]
        handles = run(app, lambda: add.enqueue_many_async(calls, batch_size=2))
        assert [h.created for h in handles] == [True, True, True]
        assert handles[1].task_id == "second"
        assert record_of(app.broker, handles[2].task_id).state == "delayed"
        assert app.broker.counts().ready == 2

    def test_enqueue_many_async_checks_every_call_before_sending_any(
        self, tasks: dict[str, Any], app: App
    ) -> None:
        add = tasks["add"]
        with pytest.raises(InvalidTaskError, match=r"^item 2 of 3, counted from 0: cannot "
                                                   r"enqueue add"):
            run(app, lambda: add.enqueue_many_async([(1, 1), (2, 2), (3,)]))
        with pytest.raises(InvalidTaskError, match="a call of explode"):
            run(app, lambda: add.enqueue_many_async([(1, 1), tasks["explode"].call(1)]))
        with pytest.raises(InvalidTaskError, match="batch_size"):
            run(app, lambda: add.enqueue_many_async([(1, 1)], batch_size=0))
        assert app.broker.counts().ready == 0


class TestAsyncBroker:
    def test_the_first_enqueue_registers_the_queue(
        self, settings: Settings, client: redis.Redis
    ) -> None:
        on_broker(settings, "aio-fresh", lambda b: b.enqueue("t1", payload={"n": 1}))
        assert client.sismember(QUEUES_KEY, "aio-fresh")

    def test_a_call_in_another_event_loop_than_its_own_says_to_make_one_there(
        self, settings: Settings, broker: Broker
    ) -> None:
        """Not redis-py's "Event loop is closed", from a workflow's handle or the
        broker itself as much as from a task's handle."""
        broker.enqueue("t1")

        async def made() -> AsyncBroker:
            made = AsyncBroker.from_settings(settings, broker.queue)
            assert await made.task("t1") is not None  # connected in this loop
            return made

        own = asyncio.new_event_loop()
        try:
            used = own.run_until_complete(made())
            with pytest.raises(TaskqError, match=r"cannot read a task's record: .*made in "
                                                 r"another event loop.*app\.async_broker"):
                asyncio.run(used.task("t1"))
            own.run_until_complete(used.aclose())
        finally:
            own.close()

    def test_it_reads_what_the_blocking_broker_reads(
        self, settings: Settings, broker: Broker
    ) -> None:
        broker.enqueue("t1", payload={"n": 1})
        broker.enqueue("t2", delay=60)

        async def read(b: AsyncBroker) -> tuple[Any, ...]:
            return (await b.task("t1"), await b.task("none"), await b.counts(),
                    await b.watch("t1", mark=False))

        record, none, counts, watched = on_broker(settings, broker.queue, read)
        assert (record, none, counts) == (broker.task("t1"), None, broker.counts())
        assert watched == broker.watch("t1", mark=False)

    def test_enqueue_many_refuses_what_is_not_a_new_task_as_the_blocking_broker_does(
        self, settings: Settings, broker: Broker
    ) -> None:
        for tasks in ("t1", [NewTask("t1"), "t2"]):
            with pytest.raises(InvalidTaskError) as blocking:
                broker.enqueue_many(tasks)  # type: ignore[arg-type]
            with pytest.raises(InvalidTaskError) as awaited:
                on_broker(settings, broker.queue,
                          lambda b, t=tasks: b.enqueue_many(t))  # type: ignore[misc]
            assert str(awaited.value) == str(blocking.value)
        assert broker.counts().ready == 0

    def test_a_redis_error_reply_is_a_broker_error_in_the_blocking_words(
        self, settings: Settings, broker: Broker, client: redis.Redis
    ) -> None:
        client.set(broker.keys.ready, "not a list")
        with pytest.raises(BrokerError) as blocking:
            broker.enqueue("t1")
        with pytest.raises(BrokerError) as awaited:
            on_broker(settings, broker.queue, lambda b: b.enqueue("t2"))
        assert str(awaited.value).startswith("Redis could not enqueue tasks: ResponseError")
        assert str(awaited.value).split(":")[:2] == str(blocking.value).split(":")[:2]

    def test_an_unreachable_redis_is_a_broker_error_saying_so(self) -> None:
        away = Settings.from_env({}, redis_url=f"redis://127.0.0.1:{free_port()}/0",
                                 redis_timeout_seconds=1.0)
        with pytest.raises(BrokerError, match="cannot reach Redis to register the queue"):
            on_broker(away, "q", lambda b: b.enqueue("t1"))

    def test_connect_async_makes_a_client_with_the_blocking_settings(
        self, settings: Settings, client: redis.Redis
    ) -> None:
        async def ping() -> Any:
            r = await connect_async(settings)
            try:
                return await r.ping()
            finally:
                await r.aclose()

        assert asyncio.run(ping()) is True


class TestResultAsync:
    @pytest.mark.skipif(ON_CLUSTER, reason="a cluster client keeps a pool per node")
    def test_more_waits_than_the_pool_has_connections_each_wait_their_turn(
        self, settings: Settings
    ) -> None:
        # Each wait holds a connection for a blocking slice, then asks for one again
        # to read: past the pool's size the later ones used to fail "every connection
        # of this client to Redis was in use" while the first ones kept theirs.
        async def main() -> list[str]:
            client = redis.asyncio.Redis.from_pool(redis.asyncio.BlockingConnectionPool.from_url(
                settings.redis_url, max_connections=6, timeout=0.5))
            broker = AsyncBroker(client, "few-connections")
            try:
                handles = [await broker.enqueue(f"t{i}") for i in range(24)]
                ended = await asyncio.gather(*(h.result_async(timeout=2) for h in handles),
                                             return_exceptions=True)
                return [type(e).__name__ for e in ended]
            finally:
                await broker.aclose()

        assert asyncio.run(main()) == ["ResultTimeoutError"] * 24

    def test_the_return_value_comes_back_from_the_worker(
        self, tasks: dict[str, Any], worker: WorkerThread
    ) -> None:
        async def main() -> tuple[Any, str]:
            handle = await tasks["add"].enqueue_async(2, 3)
            return await handle.result_async(timeout=10), await handle.status_async()

        assert run(tasks["add"].app, main) == (5, "completed")

    def test_a_cancel_caught_before_the_wait_and_never_withdrawn_does_not_end_it(
        self, tasks: dict[str, Any], worker: WorkerThread
    ) -> None:
        """`cancelling()` counts such a cancel for good; only one asked during the wait
        ends it."""
        async def main() -> tuple[Any, Any]:
            handle = await tasks["add"].enqueue_async(2, 3)
            flow = await chain(tasks["add"].s(1, 1), tasks["add"].s(b=1)).enqueue_async()
            current = asyncio.current_task()
            assert current is not None
            current.cancel()
            with suppress(asyncio.CancelledError):
                await asyncio.sleep(1)
            return await handle.result_async(timeout=10), await flow.result_async(timeout=10)

        assert run(tasks["add"].app, main) == (5, 3)

    def test_a_dead_task_raises_task_failed_as_the_blocking_wait_does(
        self, tasks: dict[str, Any], worker: WorkerThread
    ) -> None:
        async def main() -> Any:
            handle = await tasks["explode"].enqueue_async(7)
            return await handle.result_async(timeout=10)

        with pytest.raises(TaskFailed) as failed:
            run(tasks["explode"].app, main)
        assert (failed.value.error_type, failed.value.message) == ("test_aio.Boom", "no 7")

    def test_a_waiter_is_woken_by_an_ack_from_another_connection(
        self, app: App, broker: Broker, settings: Settings
    ) -> None:
        async def main(b: AsyncBroker) -> tuple[Any, float]:
            handle = await b.enqueue("t1")
            waiting = asyncio.create_task(handle.result_async(timeout=10))
            while await b.client.hget(b.keys.task("t1"), "waiters") is None:
                await asyncio.sleep(0.01)
            await asyncio.sleep(0.2)  # the waiter is blocked in BLMOVE by now
            task = (await asyncio.to_thread(broker.lease_many, "w", 30, 1)).tasks[0]
            acked_at = time.monotonic()
            assert await asyncio.to_thread(broker.ack, task.task_id, task.token, '{"v":1}')
            result = await waiting
            return result, time.monotonic() - acked_at

        result, after_ack = on_broker(settings, broker.queue, main)
        assert result == {"v": 1}
        # Woken by the ack, not by the once-a-second re-read.
        assert after_ack < 0.5

    @pytest.mark.skipif(ON_CLUSTER, reason="the stalling script runs on one node of a cluster")
    def test_a_result_wait_ends_at_its_timeout_while_redis_is_stalled(
        self, settings: Settings, broker: Broker, client: redis.Redis
    ) -> None:
        task_id = broker.enqueue("t1").task_id

        async def main(on: AsyncBroker) -> float:
            handle = on.handle(task_id)
            await handle.status_async()  # connected before the stall
            stall = stalling(client, 3.0)
            await asyncio.sleep(0.1)
            began = time.monotonic()
            try:
                with pytest.raises(ResultTimeoutError, match="Redis did not answer in time"):
                    await handle.result_async(timeout=0.3)
                return time.monotonic() - began
            finally:
                await asyncio.to_thread(stall.join, 5)

        # Its one watch call would otherwise wait out the 3 s stall; it gets the timeout
        # and CALL_SLACK_SECONDS (0.5 s).
        assert on_broker(settings, broker.queue, main) < 2.0

    def test_the_event_loop_runs_other_coroutines_while_a_result_is_awaited(
        self, tasks: dict[str, Any]
    ) -> None:
        async def main() -> int:
            ticks = 0
            waiting = True

            async def ticker() -> None:
                nonlocal ticks
                while waiting:
                    ticks += 1
                    await asyncio.sleep(0.02)

            ticking = asyncio.create_task(ticker())
            handle = await tasks["add"].enqueue_async(1, 2)
            try:
                with pytest.raises(ResultTimeoutError, match=r"not ended within 0\.6s"):
                    await handle.result_async(timeout=0.6)
            finally:
                waiting = False
                await ticking
            return ticks

        # A wait that held the loop would leave the ticker one tick at most.
        assert run(tasks["add"].app, main) >= 10

    def test_a_cancel_ends_the_wait_at_whichever_await_it_lands(
        self, tasks: dict[str, Any]
    ) -> None:
        """Cancelled after 0 to 23 turns of the loop, each wait ends cancelled, not at
        its 3 s timeout: on Python 3.11 redis-py's own wait_for around a socket write
        can drop the cancel, and the wait must still see it asked for (at worst when
        the one-second slice it was blocked in ends)."""
        async def main() -> list[tuple[int, str, float]]:
            handle = await tasks["add"].enqueue_async(1, 2)
            ended = []
            for turns in range(24):
                waiting = asyncio.ensure_future(handle.result_async(timeout=3))
                for _ in range(turns):
                    await asyncio.sleep(0)
                cancelled_at = time.monotonic()
                waiting.cancel()
                try:
                    await waiting
                    how = "returned"
                except asyncio.CancelledError:
                    how = "cancelled"
                except Exception as e:
                    how = type(e).__name__
                ended.append((turns, how, time.monotonic() - cancelled_at))
            return ended

        ended = run(tasks["add"].app, main)
        assert [(turns, how) for turns, how, _ in ended] == [
            (turns, "cancelled") for turns in range(24)]
        assert max(took for _, _, took in ended) < 2.0

    def test_an_unknown_task_is_not_found(self, app: App) -> None:
        async def main() -> str:
            handle = app.handle_async("nope")
            with pytest.raises(TaskNotFoundError, match="no task 'nope'"):
                await handle.result_async(timeout=1)
            return await handle.status_async()

        assert run(app, main) == "unknown"

    def test_a_bad_timeout_is_refused(self, app: App) -> None:
        with pytest.raises(InvalidTaskError, match="timeout must be"):
            run(app, lambda: app.handle_async("t1").result_async(timeout=-1))

    def test_a_handle_from_the_async_broker_refuses_to_block(self, app: App) -> None:
        handle = app.handle_async("t1")
        with pytest.raises(TaskqError, match=r"use `await handle.result_async\(\)`"):
            handle.result(timeout=1)
        with pytest.raises(TaskqError, match=r"use `await handle.status_async\(\)`"):
            handle.status()
        with pytest.raises(TaskqError, match=r"use `await handle.record_async\(\)`"):
            handle.record()

    @pytest.mark.parametrize("waits", [3, 100])
    def test_waits_under_way_when_the_app_closes_end_saying_so_and_leave_no_connection(
        self, tasks: dict[str, Any], client: redis.Redis, waits: int
    ) -> None:
        """Their client's retry connected again; the app had dropped that client, so its
        connections stayed open for the life of the process. With many, each wait that
        ended closed the client again, cutting the others' new connections: they failed
        saying Redis could not be reached."""
        app = tasks["add"].app
        client.client_setname("observer")

        def connections() -> set[int]:
            return {c["id"] for c in client.client_list() if c["name"] != "observer"}

        async def main() -> tuple[set[int], set[str]]:
            # By id: an earlier test's connection that closes meanwhile must not count.
            before = connections()  # on a cluster, the observer's own to other nodes
            handle = await tasks["add"].enqueue_async(1, 2)  # no worker: it never ends
            pending = [asyncio.create_task(handle.result_async(timeout=30))
                       for _ in range(waits)]
            deadline = time.monotonic() + 10  # a loaded machine opens them slowly
            while len(connections() - before) < waits and time.monotonic() < deadline:
                await asyncio.sleep(0.05)
            flow = app.workflow_async("wf-1")
            ours = connections() - before
            await app.aclose()
            ended = await asyncio.gather(*pending, return_exceptions=True)
            with pytest.raises(TaskqError, match="this asyncio client was closed"):
                await handle.status_async()
            with pytest.raises(TaskqError, match="cannot cancel a workflow: this asyncio"):
                await flow.cancel_async()
            return ours, {str(e) for e in ended}

        ours, errors = run(app, main)
        if not ON_CLUSTER:  # a cluster client's connections to each node are its own
            assert len(ours) >= waits
            # Closed as the last wait ends; Redis 6.2 lists a hundred for a moment after.
            wait_until(lambda: not connections() & ours, 5, "the waits' connections to close")
        # Each says the client was closed, in the words of the step it was at: waiting
        # for the task to end, or reading its result.
        said = ("this asyncio client was closed (app.aclose(), or its AsyncBroker's "
                "aclose()); the app makes a new one on its next use: "
                "app.handle_async(task_id) for a new handle")
        assert errors and errors <= {f"cannot wait for a task to end: {said}",
                                     f"cannot read a task's result: {said}"}, errors

    def test_an_async_handle_reads_its_record_as_the_method_its_refusal_names(
        self, tasks: dict[str, Any], worker: WorkerThread
    ) -> None:
        app = tasks["add"].app

        async def main() -> tuple[Any, Any, Any]:
            handle = app.handle_async(tasks["add"].enqueue(4, 5).task_id)
            await handle.result_async(timeout=10)
            return (await handle.record_async(), await app.handle_async("nope").record_async(),
                    await tasks["add"].enqueue(1, 1).record_async())

        record, missing, blocking = run(app, main)
        assert (record.state, record.result, missing) == ("completed", "9", None)
        assert blocking is not None and blocking.name == tasks["add"].name

    def test_a_blocking_handle_still_answers_result_async_on_a_thread(
        self, tasks: dict[str, Any], worker: WorkerThread
    ) -> None:
        handle = tasks["add"].enqueue(4, 5)
        assert run(tasks["add"].app, lambda: handle.result_async(timeout=10)) == 9
        assert run(tasks["add"].app, handle.status_async) == "completed"

    def test_each_event_loop_gets_its_own_client(
        self, tasks: dict[str, Any], app: App
    ) -> None:
        async def enqueue() -> AsyncBroker:
            await tasks["add"].enqueue_async(1, 2)
            return app.async_broker

        async def enqueue_and_close_only_the_client() -> AsyncBroker:
            broker = await enqueue()
            await broker.aclose()  # the app still holds it, bound to this loop
            return broker

        first = asyncio.run(enqueue_and_close_only_the_client())
        second = run(app, enqueue)
        assert first is not second
        assert app.broker.counts().ready == 2

    def test_loops_running_at_once_on_two_threads_keep_their_own_clients(
        self, tasks: dict[str, Any], app: App
    ) -> None:
        both_enqueued = threading.Barrier(2, timeout=10)
        kept: list[bool] = []

        async def enqueue_twice() -> None:
            await tasks["add"].enqueue_async(1, 2)
            mine = app.async_broker
            await asyncio.to_thread(both_enqueued.wait)
            await tasks["add"].enqueue_async(3, 4)
            kept.append(app.async_broker is mine)

        threads = [threading.Thread(target=run, args=(app, enqueue_twice)) for _ in range(2)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(10)
        assert kept == [True, True]
        assert app.broker.counts().ready == 4


class TestAsgi:
    """A Starlette app served by uvicorn, requested over real HTTP."""

    @pytest.fixture
    def url(self, app: App, tasks: dict[str, Any]) -> Iterator[str]:
        async def add(request: Request) -> JSONResponse:
            a, b = int(request.query_params["a"]), int(request.query_params["b"])
            handle = await tasks["add"].enqueue_async(a, b)
            return JSONResponse({"task_id": handle.task_id,
                                 "result": await handle.result_async(timeout=10)})

        async def wait(request: Request) -> JSONResponse:
            handle = app.handle_async(request.path_params["task_id"])
            return JSONResponse({"result": await handle.result_async(timeout=20)})

        async def ping(_request: Request) -> PlainTextResponse:
            return PlainTextResponse("pong")

        @asynccontextmanager
        async def lifespan(_web: Starlette) -> AsyncIterator[None]:
            yield
            await app.aclose()

        web = Starlette(routes=[Route("/add", add), Route("/wait/{task_id}", wait),
                                Route("/ping", ping)], lifespan=lifespan)
        # Bound here and handed over, so no other process can take the port in between.
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
        server = uvicorn.Server(uvicorn.Config(web, log_level="warning", ws="none"))
        thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
        thread.start()
        deadline = time.monotonic() + 10
        while not server.started:
            assert time.monotonic() < deadline and thread.is_alive(), "uvicorn did not start"
            time.sleep(0.02)
        yield f"http://127.0.0.1:{port}"
        server.should_exit = True
        thread.join(10)
        sock.close()
        assert not thread.is_alive()

    def test_an_endpoint_enqueues_and_awaits_the_result_a_worker_makes(
        self, url: str, worker: WorkerThread, app: App
    ) -> None:
        with urllib.request.urlopen(f"{url}/add?a=20&b=22", timeout=15) as reply:
            body = json.load(reply)
        assert body["result"] == 42
        assert record_of(app.broker, body["task_id"]).state == "completed"

    def test_the_server_answers_other_requests_while_an_endpoint_awaits_a_result(
        self, url: str, tasks: dict[str, Any], app: App, settings: Settings
    ) -> None:
        handle = tasks["add"].enqueue(1, 2)
        replies: list[Any] = []

        def wait() -> None:
            with urllib.request.urlopen(f"{url}/wait/{handle.task_id}", timeout=30) as reply:
                replies.append(json.load(reply))

        waiter = threading.Thread(target=wait)
        waiter.start()
        deadline = time.monotonic() + 10
        while app.broker.client.hget(app.broker.keys.task(handle.task_id), "waiters") is None:
            assert time.monotonic() < deadline, "the endpoint never started waiting"
            time.sleep(0.01)
        # No worker runs yet, so the first request is still waiting for its result.
        with urllib.request.urlopen(f"{url}/ping", timeout=5) as reply:
            assert reply.read() == b"pong"
        assert waiter.is_alive() and replies == []
        worker = WorkerThread(app, settings, concurrency=1)
        try:
            waiter.join(20)
        finally:
            worker.close(app.broker.client)  # type: ignore[arg-type]
        assert replies == [{"result": 3}]
