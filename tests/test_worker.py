"""The Worker run in-process: handlers, failures, concurrency, waking, leases and shutdown."""

from __future__ import annotations

import asyncio
import dataclasses
import gc
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import redis

from helpers import leased_token, minted
from taskq import App, LeaseLostError, Ledger, Retry, current_task
from taskq.broker import Broker
from taskq.errors import BrokerError, ConfigError
from taskq.registry import read_workers, register
from taskq.settings import Settings
from taskq.tools.embedded import EmbeddedRedis
from taskq.worker import Worker
from taskq.worker import heartbeat as heartbeat_module
from waiting import event_types, wait_for_state, wait_until
from worker_support import StartWorker, WorkerThread


class TestRunningHandlers:
    def test_plain_and_async_tasks_run_with_their_arguments(
        self, app: App, start_worker: StartWorker
    ) -> None:
        calls: list[tuple[str, Any, Any]] = []

        @app.task("add")
        def add(a: int, b: int = 0) -> None:
            calls.append(("add", a, b))

        @app.task("greet")
        async def greet(name: str, *, punctuation: str) -> None:
            await asyncio.sleep(0)
            calls.append(("greet", name, punctuation))

        plain = add.enqueue(2, b=3).task_id
        coroutine = greet.enqueue("ada", punctuation="!").task_id
        start_worker()
        wait_for_state(app.broker, plain, "completed")
        wait_for_state(app.broker, coroutine, "completed")
        assert sorted(calls) == [("add", 2, 3), ("greet", "ada", "!")]

    def test_handler_sees_its_task_id_attempt_and_token(
        self, app: App, start_worker: StartWorker, client: redis.Redis
    ) -> None:
        seen: list[tuple[str, int, int, str]] = []

        @app.task("introspect")
        def introspect() -> None:
            task = current_task()
            seen.append((task.task_id, task.attempt, task.token, task.queue))

        task_id = introspect.enqueue().task_id
        start_worker()
        record = wait_for_state(app.broker, task_id, "completed")
        # Its one lease's token: the record's, and the one the lease's event carried.
        assert minted(client, app.broker.keys, task_id) == [("leased", record.fencing_token)]
        assert seen == [(task_id, 1, leased_token(0, record.fencing_token), app.queue)]

    def test_handler_exception_is_retried_then_dead_with_type_and_message(
        self, app: App, start_worker: StartWorker
    ) -> None:
        attempts: list[int] = []

        @app.task("broken", max_retries=2)
        def broken() -> None:
            attempts.append(current_task().attempt)
            raise ValueError("card declined")

        task_id = broken.enqueue().task_id
        start_worker()
        wait_for_state(app.broker, task_id, "dead")
        record = app.broker.task(task_id)
        assert record is not None
        assert record.last_error.startswith("ValueError: card declined")
        assert (attempts, record.retries) == ([1, 2, 3], 2)
        assert app.broker.dead() == [task_id]

    def test_unknown_task_fails_clearly_and_the_worker_goes_on(
        self, app: App, start_worker: StartWorker
    ) -> None:
        @app.task("known")
        def known() -> None:
            pass

        stranger = app.broker.enqueue("stranger", max_retries=0, name="nobody.knows.me").task_id
        later = known.enqueue().task_id
        running = start_worker()
        wait_for_state(app.broker, stranger, "dead")
        wait_for_state(app.broker, later, "completed")
        record = app.broker.task(stranger)
        assert record is not None
        assert record.last_error.startswith("UnknownTaskError: unknown task 'nobody.knows.me'")
        assert running.thread.is_alive()

    @pytest.mark.parametrize(
        ("corrupt", "error"),
        [
            ("not json {", "PayloadError: stored payload cannot be decoded: not valid JSON"),
            ('{"args": "notalist"}', "PayloadError: payload 'args' must be a list"),
            # What no producer encodes: it ran the handler, its effect with it, on nan.
            ('{"args": [NaN]}', "PayloadError: stored payload cannot be decoded: not valid "
                                "JSON: NaN has no JSON form"),
            # Deeper than the worker's stack can decode (a producer, shallower, may have
            # encoded it): one such task used to end the worker, and every worker after.
            ('{"args": [' + "[" * 5000 + "]" * 5000 + "]}",
             "PayloadError: stored payload cannot be decoded: it nests too deeply"),
        ],
    )
    def test_undecodable_payload_fails_clearly_and_the_worker_goes_on(
        self, app: App, start_worker: StartWorker, corrupt: str, error: str
    ) -> None:
        @app.task("echo")
        def echo(*args: Any) -> None:
            pass

        bad = echo.enqueue(1, max_retries=0).task_id
        app.broker.client.hset(app.broker.keys.task(bad), "payload", corrupt)
        later = echo.enqueue(2).task_id
        running = start_worker()
        wait_for_state(app.broker, bad, "dead")
        wait_for_state(app.broker, later, "completed")
        record = app.broker.task(bad)
        assert record is not None and record.last_error.startswith(error)
        assert running.thread.is_alive()

    def test_a_retry_with_a_delay_no_retry_can_wait_is_retried_and_the_worker_goes_on(
        self, app: App, start_worker: StartWorker
    ) -> None:
        class RetryAfter(Retry):
            def __init__(self, after: str) -> None:
                super().__init__(reason="429")
                self.delay = after  # type: ignore[assignment]  # a Retry-After header's text

        attempts: list[int] = []

        @app.task("polite", max_retries=1)
        def polite() -> None:
            attempts.append(current_task().attempt)
            raise RetryAfter("30")

        @app.task("after")
        def after() -> None:
            pass

        hostile = polite.enqueue().task_id
        later = after.enqueue().task_id
        running = start_worker(backoff_base_seconds=0.01, backoff_max_seconds=0.02)
        wait_for_state(app.broker, later, "completed")
        wait_for_state(app.broker, hostile, "dead")
        assert attempts == [1, 2]
        assert running.thread.is_alive()

    def test_an_object_whose_call_is_async_runs_its_body(
        self, app: App, start_worker: StartWorker
    ) -> None:
        sent: list[str] = []

        class Mailer:
            async def __call__(self, to: str) -> str:
                await asyncio.sleep(0)
                sent.append(to)
                return f"sent to {to}"

        send = app.task("send_mail")(Mailer())
        task_id = send.enqueue("ada@example.com").task_id
        start_worker()
        wait_for_state(app.broker, task_id, "completed")
        assert sent == ["ada@example.com"]
        assert app.handle(task_id).result(timeout=1) == "sent to ada@example.com"

    @pytest.mark.parametrize(("concurrency", "prefetch"), [(0, 0), (-2, 0), (True, 0),
                                                           (2, 9_999)])
    def test_a_concurrency_out_of_range_is_refused_before_the_worker_starts(
        self, app: App, concurrency: int, prefetch: int
    ) -> None:
        settings = dataclasses.replace(app.settings, prefetch=prefetch)
        with pytest.raises(ConfigError, match="concurrency"):
            Worker(app, settings=settings, concurrency=concurrency)

    @pytest.mark.parametrize("worker_id", ["", "w" * 513, "\ud800", 7])
    def test_a_worker_id_no_script_takes_is_refused_before_the_worker_starts(
        self, app: App, worker_id: object
    ) -> None:
        with pytest.raises(ConfigError, match="worker_id must be"):
            Worker(app, worker_id=worker_id)  # type: ignore[arg-type]

    def test_concurrency_n_runs_n_handlers_at_once(
        self, app: App, start_worker: StartWorker
    ) -> None:
        together = threading.Barrier(3, timeout=5)

        @app.task("meet")
        def meet() -> None:
            together.wait()  # breaks, failing every attempt, unless all three run at once

        task_ids = [meet.enqueue(max_retries=0).task_id for _ in range(3)]
        start_worker(concurrency=3)
        for task_id in task_ids:
            wait_for_state(app.broker, task_id, "completed")


    def test_a_busy_worker_acks_and_refills_its_slots_in_the_same_call(
        self, app: App, start_worker: StartWorker, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        carried: list[int] = []
        ack_and_lease = Broker.ack_and_lease

        def counted(broker: Broker, held: Any, *args: Any) -> Any:
            carried.append(len(held))
            return ack_and_lease(broker, held, *args)

        monkeypatch.setattr(Broker, "ack_and_lease", counted)

        @app.task("nothing")
        def nothing() -> None:
            pass

        task_ids = [nothing.enqueue().task_id for _ in range(40)]
        start_worker(concurrency=4)
        for task_id in task_ids:
            wait_for_state(app.broker, task_id, "completed")
        # With a backlog every turn's acks carry the next lease; only the last few, once
        # ready is empty and the waker holds the free slots, may go alone.
        assert sum(carried) >= 30, f"only {sum(carried)} of 40 acks carried a lease"


    def test_is_registered_before_it_leases_its_first_task(
        self, app: App, start_worker: StartWorker, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """Else another worker, seeing a rate limit its leases apply run by no live
        worker, may lift it meanwhile and let a fresh burst through."""
        registered_at_lease: list[bool] = []

        def noting(lease: Any) -> Any:
            def leasing(broker: Broker, *args: Any, **kwargs: Any) -> Any:
                registered_at_lease.append(bool(read_workers(broker)[1]))
                return lease(broker, *args, **kwargs)
            return leasing

        for name in ("lease_many", "wait_and_lease", "ack_and_lease"):
            monkeypatch.setattr(Broker, name, noting(getattr(Broker, name)))

        def slowly(*args: Any) -> int:
            time.sleep(0.2)  # a registration slower than the loop's first turn
            return register(*args)

        monkeypatch.setattr(heartbeat_module, "register", slowly)

        @app.task("add")
        def add(a: int) -> None:
            pass

        task_id = add.enqueue(1).task_id
        start_worker()
        wait_for_state(app.broker, task_id, "completed")
        assert registered_at_lease and registered_at_lease[0], registered_at_lease


    def test_whose_first_registration_fails_registers_again_at_once_not_a_beat_later(
        self, app: App, start_worker: StartWorker, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        calls: list[int] = []

        def failing_once(*args: Any) -> int:
            calls.append(1)
            if len(calls) == 1:
                raise BrokerError("Redis could not register the worker: a passing refusal")
            return register(*args)

        monkeypatch.setattr(heartbeat_module, "register", failing_once)
        start_worker(lease_seconds=60.0)  # beats 20 s apart
        wait_until(lambda: bool(read_workers(app.broker)[1]), 5, "the worker to register")


class TestScheduling:
    def test_idle_worker_is_woken_by_new_work_long_before_its_poll(
        self, app: App, start_worker: StartWorker
    ) -> None:
        @app.task("nothing")
        def nothing() -> None:
            pass

        running = start_worker(poll_seconds=5.0)
        wait_until(running.worker.waker.armed.is_set, 5, "the worker to go idle")
        task_id = nothing.enqueue().task_id
        wait_for_state(app.broker, task_id, "completed", timeout=1.5)

    @pytest.mark.parametrize("kind", ["def", "async def"])
    def test_bursts_while_handlers_finish_never_overfill_the_slots(
        self, app: App, start_worker: StartWorker, kind: str
    ) -> None:
        # Work that wakes a worker with free slots is leased on the waker's thread, while
        # the loop leases too whenever a handler finishes: together they must never run
        # more handlers than the concurrency, and they must use all of it.
        guard, running, peak = threading.Lock(), [0], [0]
        pauses = random.Random(7)

        def enter() -> None:
            with guard:
                running[0] += 1
                peak[0] = max(peak[0], running[0])

        def leave() -> None:
            with guard:
                running[0] -= 1

        @app.task("busy_sync")
        def busy_sync(seconds: float) -> None:
            enter()
            time.sleep(seconds)
            leave()

        @app.task("busy_async")
        async def busy_async(seconds: float) -> None:
            enter()
            await asyncio.sleep(seconds)
            leave()

        busy = busy_sync if kind == "def" else busy_async
        start_worker(concurrency=3)
        task_ids: list[str] = []
        for _ in range(100):
            task_ids += [busy.enqueue(pauses.uniform(0.002, 0.03)).task_id for _ in range(4)]
            time.sleep(pauses.uniform(0.005, 0.03))
        for task_id in task_ids:
            wait_for_state(app.broker, task_id, "completed")
        assert peak[0] == 3

    def test_a_delayed_task_only_the_waker_heard_of_runs_when_due_not_a_poll_later(
        self, app: App, start_worker: StartWorker
    ) -> None:
        # The enqueue wakes the idle worker's waker, whose lease finds ready empty and
        # learns when the task is due. The waker holds the free slots while it waits, and
        # only the loop promotes: the waker must hand back to it then.
        @app.task("later")
        def later() -> None:
            pass

        running = start_worker(concurrency=2, poll_seconds=5.0)
        wait_until(running.worker.waker.armed.is_set, 5, "the worker to go idle")
        task_id = later.enqueue(delay=0.3).task_id
        wait_for_state(app.broker, task_id, "completed", timeout=2.0)
        record = app.broker.task(task_id)
        assert record is not None
        assert record.leased_at >= record.run_at

    def test_delayed_task_runs_after_its_delay_and_not_before(
        self, app: App, start_worker: StartWorker
    ) -> None:
        @app.task("later")
        def later() -> None:
            pass

        start_worker()
        task_id = later.enqueue(delay=0.6).task_id
        wait_for_state(app.broker, task_id, "completed")
        record = app.broker.task(task_id)
        assert record is not None
        assert record.run_at - record.created_at == 600
        assert record.leased_at >= record.run_at


class TestLeases:
    def test_heartbeats_keep_a_task_three_leases_long_with_one_worker(
        self, app: App, start_worker: StartWorker, client: redis.Redis
    ) -> None:
        @app.task("long")
        def long() -> None:
            time.sleep(2.0)

        task_id = long.enqueue().task_id
        start_worker(lease_seconds=0.6)
        wait_for_state(app.broker, task_id, "completed", timeout=6)
        record = app.broker.task(task_id)
        # Leased once and never again: the record keeps that one lease's token.
        assert record is not None and record.retries == 0
        assert minted(client, app.broker.keys, task_id) == [("leased", record.fencing_token)]
        types = event_types(client, app.broker.keys, task_id)
        assert "reaped" not in types
        assert types.count("heartbeat") >= 3

    def test_lost_lease_fences_the_effect_and_refuses_the_stale_ack(
        self, app: App, start_worker: StartWorker, ledger_path: Path, client: redis.Redis
    ) -> None:
        """The lease is expired by hand (its score set in the past), as a paused heartbeat
        would leave it; the worker's heartbeat then finds its token stale. The real pause
        is in tests/test_worker_processes.py."""
        ledger = Ledger(ledger_path, "none")
        refused: list[LeaseLostError] = []

        @app.task("charge")
        def charge() -> None:
            task = current_task()
            if task.attempt == 1:
                wait_until(lambda: task.lease_lost, 5, "the heartbeat to notice")
            try:
                with task.effect():
                    ledger.charge(task.task_id, task.token, "alice", 10)
            except LeaseLostError as e:
                refused.append(e)

        task_id = charge.enqueue().task_id
        running = start_worker(concurrency=2)
        first = leased_token(0, wait_for_state(app.broker, task_id, "running").fencing_token)
        reaped = expire_and_reap(app.broker, task_id, first)
        wait_for_state(app.broker, task_id, "completed")
        wait_until(lambda: running.worker.stats.stale, 5, "the stale ack to be refused")
        record = app.broker.task(task_id)
        # Leased, reaped, leased: each step minted a token above the one before.
        assert record is not None and leased_token(reaped, record.fencing_token)
        assert minted(client, app.broker.keys, task_id) == [
            ("leased", first), ("reaped", reaped), ("leased", record.fencing_token)]
        assert len(refused) == 1 and f"lost its lease (token {first})" in str(refused[0])
        assert ledger.charges_for(task_id) == 1
        ledger.close()


def expire_and_reap(broker: Broker, task_id: str, token: int) -> int:
    """End the lease of `token` now and reap it; a heartbeat in between renews it, so try
    again. The token the reap minted, above `token`."""

    def reaped() -> int | None:
        broker.client.zadd(broker.keys.leased, {task_id: 0}, xx=True)
        broker.reap(backoff_base=0.01, backoff_max=0.01)
        record = broker.task(task_id)
        return record.fencing_token if record is not None and record.fencing_token > token \
            else None

    return wait_until(reaped, 5, f"the lease of {task_id} to be reaped")


# A program that runs a worker on its main thread, as `taskq worker` does, and goes on
# after it: its Ctrl-C raises KeyboardInterrupt again, and SIGTERM has its default.
RUN_THEN_GO_ON = """
import signal, sys, threading
from taskq import App
from taskq.settings import Settings
from taskq.worker import Worker
settings = Settings.from_env({}, redis_url=sys.argv[1], redis_url_given=True,
                             redis_cluster=sys.argv[2] == "True", poll_seconds=0.2,
                             shutdown_grace_seconds=0)
app = App(queue="runs-then-goes-on", settings=settings)
worker = Worker(app, settings=settings)
threading.Timer(0.5, worker.stop).start()
status = worker.run()
print(status, signal.getsignal(signal.SIGINT) is signal.default_int_handler,
      signal.getsignal(signal.SIGTERM) == signal.SIG_DFL)
"""


class TestShutdown:
    def test_a_worker_run_from_a_program_gives_its_signal_handlers_back(
        self, settings: Settings
    ) -> None:
        done = subprocess.run(
            [sys.executable, "-c", RUN_THEN_GO_ON, settings.redis_url,
             str(settings.redis_cluster)],
            capture_output=True, text=True, timeout=60, check=False)
        assert done.returncode == 0, done.stderr[-2000:]
        assert done.stdout.split() == ["0", "True", "True"], done.stderr[-2000:]

    def test_draining_worker_finishes_its_tasks_and_leases_no_more(
        self, app: App, start_worker: StartWorker, client: redis.Redis
    ) -> None:
        started = {name: threading.Event() for name in "abc"}
        finish = {name: threading.Event() for name in "abc"}

        @app.task("hold")
        def hold(name: str) -> None:
            started[name].set()
            finish[name].wait(10)

        a, b, c = (hold.enqueue(name).task_id for name in "abc")
        running = start_worker(concurrency=2, lease_seconds=0.6)
        assert started["a"].wait(5) and started["b"].wait(5)
        running.worker.stop("test drains")
        time.sleep(0.8)  # past the lease: only heartbeats sent while draining keep it
        assert app.broker.reap() == []
        finish["a"].set()
        wait_for_state(app.broker, a, "completed")  # a slot is free now, and c is ready
        finish["b"].set()
        running.thread.join(5)
        assert not running.thread.is_alive() and running.status == 0
        for task_id in (a, b):
            record = app.broker.task(task_id)
            # Completed on its one lease: no other lease and no reap minted a token.
            assert record is not None and record.state == "completed"
            assert minted(client, app.broker.keys, task_id) == [("leased", record.fencing_token)]
            assert "reaped" not in event_types(client, app.broker.keys, task_id)
        left = app.broker.task(c)
        assert left is not None and (left.state, left.fencing_token) == ("pending", 0)
        assert not started["c"].is_set()

    def test_a_stop_with_no_grace_waits_for_the_wakers_lease_under_way(
        self, app: App, start_worker: StartWorker
    ) -> None:
        @app.task("noop")
        def noop() -> None: ...

        running = start_worker(shutdown_grace_seconds=0, poll_seconds=1)
        slots = running.worker.slots
        # Idle: the waker waits for work holding the free slots for the lease it sends
        # with the wait.
        wait_until(lambda: slots.in_hand() == [] and not slots.idle(), timeout=5)
        running.worker.stop("test stops at once")
        task_id = noop.enqueue().task_id  # leased by that wait, as the worker stops
        running.thread.join(5)
        assert not running.thread.is_alive()
        # When run() returns, no lease is under way, and what the last one took is back.
        assert slots.idle()
        record = app.broker.task(task_id)
        assert record is not None and record.state == "pending"
        assert app.broker.counts().leased == 0

    def test_handler_past_the_grace_is_released_and_its_effect_refused(
        self, app: App, start_worker: StartWorker, ledger_path: Path, client: redis.Redis
    ) -> None:
        ledger = Ledger(ledger_path, "none")
        started, finish = threading.Event(), threading.Event()
        outcome: list[BaseException | None] = []

        @app.task("slow_charge")
        def slow_charge() -> None:
            started.set()
            finish.wait(10)
            task = current_task()
            try:
                with task.effect():
                    ledger.charge(task.task_id, task.token, "alice", 10)
                outcome.append(None)
            except LeaseLostError as e:
                outcome.append(e)

        task_id = slow_charge.enqueue().task_id
        running = start_worker(shutdown_grace_seconds=0.3)
        assert started.wait(5)
        running.stop()
        record = app.broker.task(task_id)
        assert record is not None and record.state == "pending"
        assert client.lrange(app.broker.keys.ready, 0, -1) == [task_id]
        assert event_types(client, app.broker.keys, task_id)[-1] == "released"
        finish.set()
        wait_until(lambda: outcome, 5, "the handler to try its effect")
        assert isinstance(outcome[0], LeaseLostError)
        assert "released at shutdown" in str(outcome[0])
        assert ledger.charges_for(task_id) == 0
        ledger.close()

    def test_every_run_past_the_grace_is_fenced_before_redis_is_asked_anything(
        self, settings: Settings, tmp_path: Path
    ) -> None:
        """With Redis not answering as the grace ends, giving the first run back is
        retried for up to a lease: every other run must be fenced already, or its
        effect passes on its lease's last renewal, and the task, reaped, runs twice."""
        own = EmbeddedRedis(data_dir=tmp_path / "redis")
        own.start()
        mine = dataclasses.replace(settings, redis_url=own.url, redis_cluster=False,
                                   lease_seconds=5,
                                   shutdown_grace_seconds=0.3, poll_seconds=0.1)
        app = App(queue="fenced", settings=mine)
        started = [threading.Event() for _ in range(3)]
        go = threading.Event()
        refused: list[int] = []
        applied: list[int] = []

        @app.task("charge", max_retries=3)
        def charge(n: int) -> None:
            started[n].set()
            go.wait(10)
            try:
                with current_task().effect():
                    applied.append(n)
            except LeaseLostError:
                refused.append(n)
                if n == 2:
                    raise  # failed by the fence: given back, its attempt not counted

        ids = [charge.enqueue(n).task_id for n in range(3)]
        running = WorkerThread(app, mine, concurrency=3)
        try:
            assert all(s.wait(5) for s in started)
            own.signal(signal.SIGSTOP)
            try:
                running.worker.stop("test stops as Redis stops answering")
                time.sleep(0.8)  # past the grace: the worker is asking Redis
                go.set()
                wait_until(lambda: len(refused) + len(applied) == 3, 5, "every effect tried")
            finally:
                own.signal(signal.SIGCONT)
            running.thread.join(15)
            assert not running.thread.is_alive()
            assert (sorted(refused), applied) == ([0, 1, 2], [])
            record = app.broker.task(ids[2])
            assert record is not None and (record.state, record.retries) == ("pending", 0)
        finally:
            running.close(app.broker.client)  # type: ignore[arg-type]
            app.broker.client.close()
            own.stop()

    def test_handlers_running_effect_blocks_back_to_back_are_fenced_as_the_grace_ends(
        self, app: App, start_worker: StartWorker
    ) -> None:
        """Such a handler holds its run's lock nearly always: a fence that had to take
        it found it taken, and each handler went on until its turn to be given back,
        the last over a second past the grace."""
        handlers, step = 16, 0.1
        entered: list[float] = []
        started = threading.Semaphore(0)

        @app.task("steps")
        def steps() -> None:
            started.release()
            for _ in range(200):
                with current_task().effect():
                    entered.append(time.monotonic())
                    time.sleep(step)

        for _ in range(handlers):
            steps.enqueue()
        running = start_worker(concurrency=handlers, shutdown_grace_seconds=0.3)
        assert all(started.acquire(timeout=10) for _ in range(handlers))
        grace_ends = time.monotonic() + 0.3
        running.worker.stop("test stops handlers that never rest")
        running.thread.join(20)
        assert not running.thread.is_alive()
        # A block starting as the time-limit thread looks is the latest (a tick later).
        late = [round(at - grace_ends, 2) for at in entered if at > grace_ends + 0.25]
        assert late == []

    def test_async_handlers_past_the_grace_are_cancelled_not_left_pending_at_close(
        self, app: App, start_worker: StartWorker, caplog: pytest.LogCaptureFixture
    ) -> None:
        """asyncio logs each task a closed loop still held as an error, "destroyed but
        it is pending", on a stop that settled everything as it should."""
        cleaned = threading.Event()
        loops: list[asyncio.AbstractEventLoop] = []

        @app.task("awaits")
        async def awaits() -> None:
            loops.append(asyncio.get_running_loop())
            try:
                await asyncio.sleep(30)
            finally:
                cleaned.set()

        task_id = awaits.enqueue().task_id
        running = start_worker(shutdown_grace_seconds=0.2)
        wait_until(lambda: loops, 5, "the handler to start")
        running.worker.stop("test stops a long async handler")
        running.thread.join(10)
        assert not running.thread.is_alive()
        assert cleaned.wait(5)  # its finally ran: it was cancelled, not dropped
        wait_until(loops[0].is_closed, 5, "the handlers' loop to close")
        del loops[:]
        gc.collect()
        assert not [r for r in caplog.records if "destroyed but it is pending" in r.getMessage()]
        record = app.broker.task(task_id)
        assert record is not None and record.state == "pending"

    def test_a_sync_run_past_its_time_limit_in_its_effect_at_shutdown_fails_not_reruns(
        self, app: App, start_worker: StartWorker, client: redis.Redis
    ) -> None:
        """Its effect applied, the run's attempt counts as failed, as without the stop:
        out of retries, it is dead. Released, it ran again, whatever its retries, and
        applied its effect a second time."""
        inside, leave = threading.Event(), threading.Event()
        applied: list[int] = []

        @app.task("charge", time_limit=0.3, max_retries=0)
        def charge() -> None:
            with current_task().effect():
                inside.set()
                leave.wait(10)  # passes its limit inside the block
                applied.append(current_task().attempt)
            time.sleep(1)  # its cleanup, after the effect

        task_id = charge.enqueue().task_id
        running = start_worker(shutdown_grace_seconds=0.2, lease_seconds=5, poll_seconds=0.1)
        assert inside.wait(5)
        time.sleep(0.5)  # past the limit: the time-limit thread waits for the block
        running.worker.stop("test stops within the block")
        time.sleep(1.0)  # past the grace and a waker's wait: the stop waits for it too
        leave.set()
        wait_for_state(app.broker, task_id, "dead")
        running.thread.join(5)
        assert not running.thread.is_alive()
        assert applied == [1]
        types = event_types(client, app.broker.keys, task_id)
        assert "released" not in types and types[-1] == "failed"
        record = app.broker.task(task_id)
        assert record is not None and record.error_type == "taskq.errors.TimeLimitExceeded"

    def test_an_async_run_past_its_time_limit_at_shutdown_fails_not_reruns(
        self, app: App, start_worker: StartWorker, client: redis.Redis
    ) -> None:
        """Its effect applied, it caught its time limit's cancel and went on: the stop
        came within the grace its give-up waits, and failed the attempt itself."""
        cancelled = threading.Event()
        applied: list[int] = []

        @app.task("charge", time_limit=0.3, max_retries=0)
        async def charge() -> None:
            with current_task().effect():
                applied.append(current_task().attempt)
            try:
                await asyncio.sleep(10)
            except asyncio.CancelledError:
                cancelled.set()
            await asyncio.sleep(3)

        task_id = charge.enqueue().task_id
        running = start_worker(shutdown_grace_seconds=0.1, lease_seconds=5)
        assert cancelled.wait(5)
        running.worker.stop("test stops within the give-up's wait")
        wait_for_state(app.broker, task_id, "dead", timeout=3)
        assert applied == [1]
        types = event_types(client, app.broker.keys, task_id)
        assert "released" not in types and types[-1] == "failed"

    def test_a_long_effect_at_shutdown_holds_back_only_its_own_task(
        self, app: App, start_worker: StartWorker, client: redis.Redis
    ) -> None:
        """Given back while its effect runs, a task could run twice: the worker waits for
        the block, but releases the others first rather than after it."""
        inside, leave = threading.Event(), threading.Event()
        started = threading.Event()

        @app.task("writes")
        def writes() -> None:
            with current_task().effect():
                inside.set()
                leave.wait(10)

        @app.task("sleeps")
        def sleeps() -> None:
            started.set()
            leave.wait(10)

        writing = writes.enqueue().task_id
        sleeping = sleeps.enqueue().task_id
        running = start_worker(concurrency=2, shutdown_grace_seconds=0.2)
        assert inside.wait(5) and started.wait(5)
        running.worker.stop()
        wait_for_state(app.broker, sleeping, "pending", timeout=3)
        assert "released" in event_types(client, app.broker.keys, sleeping)
        assert app.broker.task(writing).state == "running"  # type: ignore[union-attr]
        leave.set()
        wait_for_state(app.broker, writing, "completed")  # its effect was applied: acked
        running.thread.join(5)
        assert not running.thread.is_alive()

    def test_an_effect_inside_an_effect_runs_instead_of_waiting_on_itself(
        self, app: App, start_worker: StartWorker
    ) -> None:
        applied: list[str] = []

        def charge(what: str) -> None:
            with current_task().effect():  # a helper that guards its own effect
                applied.append(what)

        @app.task("order")
        def order() -> None:
            with current_task().effect():
                charge("card")
                applied.append("receipt")

        task_id = order.enqueue().task_id
        start_worker()
        wait_for_state(app.broker, task_id, "completed", timeout=5)
        assert applied == ["card", "receipt"]

    def test_a_task_leased_by_an_idle_wait_as_the_worker_stops_goes_back_at_once(
        self, app: App, start_worker: StartWorker, client: redis.Redis
    ) -> None:
        """The waker's wait for work, under way when the stop came, leases what a
        producer sends meanwhile: it must not sit a whole lease with a worker that left."""

        @app.task("late")
        def late() -> None:
            pass

        running = start_worker(poll_seconds=2.0, lease_seconds=20.0,
                               shutdown_grace_seconds=0.0)
        time.sleep(0.3)  # idle: its waker blocks for work
        running.worker.stop()
        running.thread.join(5)
        assert not running.thread.is_alive()
        task_id = late.enqueue().task_id
        # A wait under way answers at once; what it leased would be given back by now. (On
        # a cluster the waker only waits, and leaves the lease to the loop, gone here.)
        time.sleep(1.0)
        assert app.broker.task(task_id).state == "pending"  # type: ignore[union-attr]
        types = event_types(client, app.broker.keys, task_id)
        assert types.count("leased") == types.count("released"), types

