"""The task log: a line per finished run (name, id, attempt, duration, outcome), in-process
and from real `taskq worker` processes in text and JSON, and none when turned off."""

from __future__ import annotations

import json
import logging
import time
import uuid

import pytest

from taskq import App
from taskq.broker import Broker
from taskq.errors import TaskqError
from taskq.retry import RetryPolicy
from waiting import WorkerProcesses, wait_for_state, wait_until
from worker_support import StartWorker

CHARGE = {"args": [], "kwargs": {"charge": 1}}


def lines(caplog: pytest.LogCaptureFixture, task_id: str) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == "taskq.tasks"
            and r.__dict__.get("task_id") == task_id]


class TestInProcess:
    def test_a_completed_run_logs_one_line_with_its_facts(
        self, app: App, start_worker: StartWorker, caplog: pytest.LogCaptureFixture
    ) -> None:
        caplog.set_level(logging.INFO, "taskq.tasks")

        @app.task("shop.pack")
        def pack(n: int) -> int:
            time.sleep(0.05)
            return n

        start_worker()
        handle = pack.enqueue(3)
        assert handle.result(timeout=10) == 3
        wait_until(lambda: lines(caplog, handle.task_id))
        (record,) = lines(caplog, handle.task_id)
        assert record.levelno == logging.INFO
        facts = {k: record.__dict__[k] for k in ("task", "queue", "attempt", "outcome")}
        assert facts == {"task": "shop.pack", "queue": app.queue, "attempt": 1,
                         "outcome": "completed"}
        assert 50 <= record.__dict__["duration_ms"] < 5000
        assert record.getMessage().startswith(f"shop.pack {handle.task_id} attempt 1 "
                                              "completed in ")

    def test_a_retried_then_dead_task_logs_each_attempt_and_dies_as_a_warning(
        self, app: App, start_worker: StartWorker, caplog: pytest.LogCaptureFixture
    ) -> None:
        caplog.set_level(logging.INFO, "taskq.tasks")

        quick = RetryPolicy(backoff_base=0.01, backoff_max=0.02)

        @app.task("shop.broken", max_retries=1, retry=quick)
        def broken() -> None:
            raise ValueError("no lines on this order")

        start_worker()
        handle = broken.enqueue()
        with pytest.raises(TaskqError):
            handle.result(timeout=10)
        wait_until(lambda: len(lines(caplog, handle.task_id)) == 2)
        first, last = lines(caplog, handle.task_id)
        assert (first.__dict__["outcome"], first.__dict__["attempt"], first.levelno) == (
            "retried", 1, logging.INFO)
        assert "ValueError: no lines on this order" in first.getMessage()
        assert (last.__dict__["outcome"], last.__dict__["attempt"], last.levelno) == (
            "dead", 2, logging.WARNING)
        assert "after 1 retries: ValueError" in last.getMessage()

    def test_a_run_that_heard_its_cancel_logs_cancelled(
        self, app: App, start_worker: StartWorker, caplog: pytest.LogCaptureFixture
    ) -> None:
        caplog.set_level(logging.INFO, "taskq.tasks")

        @app.task("shop.slow")
        def slow() -> None:
            time.sleep(1.5)

        start_worker()
        handle = slow.enqueue()
        wait_for_state(app.broker, handle.task_id, "running")
        assert app.broker.cancel(handle.task_id).outcome == "requested"
        wait_until(lambda: lines(caplog, handle.task_id), 10)
        assert [r.__dict__["outcome"] for r in lines(caplog, handle.task_id)] == ["cancelled"]

    def test_turned_off_it_logs_nothing(
        self, app: App, start_worker: StartWorker, caplog: pytest.LogCaptureFixture
    ) -> None:
        caplog.set_level(logging.INFO, "taskq.tasks")
        noop = app.task("shop.noop")(lambda: None)
        start_worker(task_log=False)
        handle = noop.enqueue()
        handle.result(timeout=10)
        time.sleep(0.2)  # the ack, and the line it would log, come after the result
        assert wait_for_state(app.broker, handle.task_id, "completed")
        assert lines(caplog, handle.task_id) == []


@pytest.mark.processes
class TestProcesses:
    def test_json_lines_carry_the_task_facts_as_fields(
        self, workers: WorkerProcesses, queue: Broker
    ) -> None:
        worker = workers.start("--log-format", "json", "--processes", "2")
        ids = [queue.enqueue(uuid.uuid4().hex, payload=CHARGE).task_id for _ in range(4)]
        for task_id in ids:
            wait_for_state(queue, task_id, "completed")

        def logged() -> dict[str, dict[str, object]]:
            entries = [json.loads(line) for line in workers.log(worker).splitlines()
                       if line.startswith("{")]
            return {str(e["task_id"]): e for e in entries if "task_id" in e}

        found = wait_until(lambda: (seen := logged()).keys() >= set(ids) and seen)
        for task_id in ids:
            entry = found[task_id]
            assert entry["logger"] == "taskq.tasks" and entry["level"] == "INFO"
            assert (entry["task"], entry["attempt"], entry["outcome"]) == (
                "taskq.simulate", 1, "completed")
            assert isinstance(entry["duration_ms"], int | float)
        # Every line of the worker's output is JSON, its own start-up lines included.
        assert all(line.startswith("{") for line in workers.log(worker).splitlines()
                   if line.strip())

    def test_text_lines_by_default_and_none_with_no_task_log(
        self, workers: WorkerProcesses, queue: Broker
    ) -> None:
        quiet = workers.start("--no-task-log")
        first = queue.enqueue(uuid.uuid4().hex, payload=CHARGE).task_id
        wait_for_state(queue, first, "completed")
        time.sleep(0.3)
        assert first not in workers.log(quiet)
        workers.stop_all()
        talking = workers.start()
        second = queue.enqueue(uuid.uuid4().hex, payload=CHARGE).task_id
        wait_for_state(queue, second, "completed")
        wait_until(lambda: f"taskq.simulate {second} attempt 1 completed in "
                   in workers.log(talking))
