"""Cancellation as a worker carries it out: a real worker on a real Redis learns of a
running task's cancel from its heartbeat's reply, fences its effects, stops an async
handler, and ends the task cancelled once the handler returns."""

from __future__ import annotations

import asyncio
import threading

import pytest

from taskq import App, LeaseLostError, TaskCancelledError, current_task
from taskq.results import TaskRecord
from waiting import event_types, wait_for_state, wait_until
from worker_support import StartWorker


def ended_cancelled(app: App, task_id: str) -> TaskRecord:
    wait_for_state(app.broker, task_id, "cancelled")
    record = app.broker.task(task_id)
    assert record is not None and record.result is None
    return record


def running(app: App, task_id: str) -> None:
    wait_until(lambda: app.broker.handle(task_id).status() == "running", 10,
               f"{task_id} to run")


class TestASyncHandler:
    def test_sees_the_cancel_has_its_effect_refused_and_ends_cancelled(
        self, app: App, start_worker: StartWorker
    ) -> None:
        seen: list[str] = []

        @app.task("report")
        def report() -> str:
            wait_until(lambda: current_task().cancelled, 10, "the cancel to reach the run")
            try:
                with current_task().effect():
                    seen.append("applied")
            except LeaseLostError as e:
                seen.append(str(e))
            return "finished anyway"

        handle = report.enqueue()
        worker = start_worker()
        running(app, handle.task_id)
        assert handle.cancel().outcome == "requested"
        ended_cancelled(app, handle.task_id)
        assert seen == [f"task {handle.task_id} was cancelled; its effect is skipped"]
        with pytest.raises(TaskCancelledError):
            handle.result(timeout=5)
        assert worker.worker.stats.cancelled == 1 and worker.worker.stats.acked == 0
        told = [t for t in event_types(app.broker.client, app.broker.keys, handle.task_id)
                if t != "heartbeat"]
        assert told == ["enqueued", "leased", "cancel_requested", "cancelled"]

    def test_learns_of_the_cancel_from_its_effect_check_before_any_heartbeat(
        self, app: App, start_worker: StartWorker
    ) -> None:
        go = threading.Event()
        seen: list[str] = []

        @app.task("charge")
        def charge() -> None:
            go.wait(10)
            try:
                with current_task().effect():
                    seen.append("applied")
            except LeaseLostError:
                seen.append(f"refused, cancelled={current_task().cancelled}")

        handle = charge.enqueue()
        # A long lease: no heartbeat comes before the effect's own check.
        start_worker(lease_seconds=30)
        running(app, handle.task_id)
        handle.cancel()
        go.set()
        ended_cancelled(app, handle.task_id)
        assert seen == ["refused, cancelled=True"]

    def test_that_raises_after_the_cancel_still_ends_cancelled_not_retried(
        self, app: App, start_worker: StartWorker
    ) -> None:
        @app.task("fragile", max_retries=3)
        def fragile() -> None:
            wait_until(lambda: current_task().cancelled, 10, "the cancel")
            raise RuntimeError("stopping")

        handle = fragile.enqueue()
        start_worker()
        running(app, handle.task_id)
        handle.cancel()
        record = ended_cancelled(app, handle.task_id)
        assert record.retries == 0


class TestAnAsyncHandler:
    def test_gets_cancelled_error_at_its_next_await_and_ends_cancelled(
        self, app: App, start_worker: StartWorker
    ) -> None:
        stopped: list[str] = []

        @app.task("poll")
        async def poll() -> None:
            try:
                await asyncio.sleep(30)
            except asyncio.CancelledError:
                stopped.append(f"cancelled={current_task().cancelled}")
                raise

        handle = poll.enqueue()
        start_worker()
        running(app, handle.task_id)
        handle.cancel()
        ended_cancelled(app, handle.task_id)
        assert stopped == ["cancelled=True"]

    def test_that_swallows_the_cancel_and_returns_still_ends_cancelled(
        self, app: App, start_worker: StartWorker
    ) -> None:
        @app.task("stubborn")
        async def stubborn() -> str:
            try:
                await asyncio.sleep(30)
            except asyncio.CancelledError:
                return "ignored the cancel"
            return "slept"

        handle = stubborn.enqueue()
        start_worker()
        running(app, handle.task_id)
        handle.cancel()
        ended_cancelled(app, handle.task_id)

    def test_that_cancels_itself_again_and_returns_is_settled_once(
        self, app: App, start_worker: StartWorker
    ) -> None:
        """Its asyncio task then ends cancelled, as one cancelled before it began."""
        @app.task("recancels")
        async def recancels() -> None:
            try:
                await asyncio.sleep(30)
            except asyncio.CancelledError:
                task = asyncio.current_task()
                assert task is not None
                task.cancel()

        handle = recancels.enqueue()
        worker = start_worker()
        running(app, handle.task_id)
        handle.cancel()
        ended_cancelled(app, handle.task_id)
        quick = app.task("after")(lambda: None).enqueue().task_id
        wait_for_state(app.broker, quick, "completed")
        # The worker counts an ack once its reply is back, after Redis shows it.
        wait_until(lambda: worker.worker.stats.acked == 1, 5, "the ack to be counted")
        assert (worker.worker.stats.cancelled, worker.worker.stats.acked) == (1, 1)


class TestATaskNotYetRunning:
    def test_is_never_run_once_cancelled(
        self, app: App, start_worker: StartWorker
    ) -> None:
        ran: list[int] = []

        @app.task("later")
        def later(n: int) -> None:
            ran.append(n)

        skipped = later.enqueue(1, delay=0.3)
        kept = later.enqueue(2, delay=0.3)
        assert skipped.cancel().outcome == "cancelled"
        start_worker()
        wait_for_state(app.broker, kept.task_id, "completed")
        assert ran == [2]
        assert skipped.status() == "cancelled"
