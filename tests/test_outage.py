"""Redis paused, restarted and crashed under a running worker process: nothing is lost."""

from __future__ import annotations

import os
import signal
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from helpers import events
from taskq.broker import Broker
from taskq.connection import connect
from taskq.errors import BrokerError
from taskq.settings import Settings
from taskq.tools.embedded import EmbeddedRedis
from taskq.tools.ledger import Ledger
from waiting import WorkerProcesses, event_types, wait_until, worker_env

pytestmark = pytest.mark.outage

CHARGE = {"args": [], "kwargs": {"charge": 1}}
QUEUE = "outage"


class Outage:
    """A private Redis (AOF on) that a test may pause, restart or crash, with a worker
    pool, a broker and a ledger on it."""

    def __init__(self, tmp_path: Path, appendfsync: str) -> None:
        self.server = EmbeddedRedis(
            binary=os.environ.get("REDIS_SERVER", ""),
            data_dir=tmp_path / "redis",
            appendfsync=appendfsync,
        ).start()
        settings = Settings.from_env({}, redis_url=self.server.url, redis_timeout_seconds=1.0)
        # An enqueue while Redis is down fails at once (see taskq.outages), as the
        # tests' timings assume: a worker that starts meanwhile must find Redis up.
        self.broker = Broker(connect(settings), QUEUE, producer_retry=0.0)
        self.ledger_path = tmp_path / "ledger.db"
        Ledger(self.ledger_path).close()
        self.workers = WorkerProcesses(tmp_path, worker_env(
            self.server.url, QUEUE, self.ledger_path, REDIS_TIMEOUT_SECONDS="1",
            WORK_SECONDS="0.3", BACKOFF_MAX_SECONDS="0.2", TASKQ_CONCURRENCY="2"))

    def enqueue(self, count: int) -> list[str]:
        return [self.broker.enqueue(uuid.uuid4().hex, payload=CHARGE).task_id
                for _ in range(count)]

    def states(self, task_ids: list[str]) -> list[str]:
        records = [self.broker.task(task_id) for task_id in task_ids]
        return [r.state if r else "missing" for r in records]

    def completed(self, task_ids: list[str]) -> int:
        return self.states(task_ids).count("completed")

    def wait_all_completed(self, task_ids: list[str], timeout: float = 30.0) -> None:
        wait_until(lambda: self.completed(task_ids) == len(task_ids), timeout,
                   f"all {len(task_ids)} tasks to complete")

    def assert_charged_once_each(self, task_ids: list[str]) -> None:
        ledger = Ledger(self.ledger_path)
        try:
            summary = ledger.summary()
        finally:
            ledger.close()
        assert (summary.charges, summary.tasks, summary.charged_twice) == (
            len(task_ids), len(task_ids), [])

    def close(self) -> None:
        self.workers.stop_all()
        self.broker.client.close()
        self.server.stop()


@pytest.fixture
def outage(tmp_path: Path) -> Iterator[Callable[..., Outage]]:
    made: list[Outage] = []

    def make(appendfsync: str = "everysec") -> Outage:
        made.append(Outage(tmp_path, appendfsync))
        return made[-1]

    yield make
    for each in made:
        each.close()


def test_worker_waits_out_a_paused_redis_and_every_task_completes_once(
    outage: Callable[..., Outage],
) -> None:
    o = outage()
    # A short timeout, so calls made during the pause time out and are retried rather
    # than blocking through it.
    worker = o.workers.start(REDIS_TIMEOUT_SECONDS="0.3")
    task_ids = o.enqueue(8)
    wait_until(lambda: o.completed(task_ids) >= 2, 15, "the first tasks to complete")
    o.server.signal(signal.SIGSTOP)
    time.sleep(3)  # the outage itself; leases (1 s) run out on Redis's clock meanwhile
    o.server.signal(signal.SIGCONT)
    o.wait_all_completed(task_ids)
    o.assert_charged_once_each(task_ids)
    assert worker.poll() is None


def test_graceful_redis_restart_mid_run_loses_nothing(outage: Callable[..., Outage]) -> None:
    o = outage()
    worker = o.workers.start()
    task_ids = o.enqueue(8)
    wait_until(lambda: o.completed(task_ids) >= 2, 15, "the first tasks to complete")
    done_before = [t for t, s in zip(task_ids, o.states(task_ids), strict=True)
                   if s == "completed"]
    first_pid = o.server.pid
    o.server.stop()
    o.server.start()
    assert o.server.pid != first_pid
    assert o.states(done_before) == ["completed"] * len(done_before)
    o.wait_all_completed(task_ids)
    o.assert_charged_once_each(task_ids)
    assert worker.poll() is None


def test_crashed_redis_with_appendfsync_always_keeps_every_acknowledged_task(
    outage: Callable[..., Outage],
) -> None:
    o = outage("always")
    o.workers.start()
    acknowledged = o.enqueue(10)
    o.server.kill()  # right after the last reply: nothing had time to be flushed later
    with pytest.raises(BrokerError):
        o.broker.enqueue("while-down", payload=CHARGE)
    o.server.start()
    assert o.states(acknowledged).count("missing") == 0
    acknowledged += o.enqueue(4)
    o.wait_all_completed(acknowledged)
    o.assert_charged_once_each(acknowledged)


def test_ack_is_retried_across_a_short_outage_and_the_task_is_not_rerun(
    outage: Callable[..., Outage],
) -> None:
    o = outage()
    worker = o.workers.start(LEASE_SECONDS="5", WORK_SECONDS="0.5")
    [task_id] = o.enqueue(1)
    wait_until(lambda: o.states([task_id]) == ["running"], 15, "the task to be leased")
    o.server.stop()
    wait_until(lambda: "cannot reach Redis to mark a task completed" in o.workers.log(worker),
               15, "the worker to report its ack failing")
    o.server.start()
    wait_until(lambda: o.states([task_id]) == ["completed"], 10, "the retried ack")
    wait_until(lambda: "redis is back after" in o.workers.log(worker), 5, "the recovery log")
    record = o.broker.task(task_id)
    assert event_types(o.broker.client, o.broker.keys, task_id).count("leased") == 1
    # Leased once and never reaped: the record holds that one lease's token.
    [token] = [e.fields["token"] for e in events(o.broker.client, o.broker.keys)
               if e.task == task_id and e.type == "leased"]
    assert record is not None and (str(record.fencing_token), record.retries) == (token, 0)
    assert "refused" not in o.workers.log(worker)
    o.assert_charged_once_each([task_id])


def test_a_stop_that_comes_while_an_ack_rides_out_an_outage_exits_75(
    outage: Callable[..., Outage],
) -> None:
    """The ack, sent before the stop, gave up after it: counted from the first drain's
    look, which came only once the ack had given up, it made no difference, and the
    worker exited 0."""
    o = outage()
    worker = o.workers.start(LEASE_SECONDS="6", WORK_SECONDS="1", TASKQ_CONCURRENCY="1",
                             SHUTDOWN_GRACE_SECONDS="2")
    task_ids = o.enqueue(1)
    wait_until(lambda: o.states(task_ids) == ["running"], 15, "the worker to hold the task")
    o.server.stop()
    # The handler returns within a second, and its ack waits out the outage till its
    # lease ends, 4 to 6 s from now (renewed every 2 s).
    time.sleep(2.5)
    worker.send_signal(signal.SIGTERM)
    worker.wait(60)
    assert worker.returncode == 75
    assert "stopped with 1 task(s) it could not settle" in o.workers.log(worker)


def test_a_worker_stopped_with_redis_gone_waits_one_lease_not_one_try_per_task(
    outage: Callable[..., Outage],
) -> None:
    o = outage()
    worker = o.workers.start(LEASE_SECONDS="2", WORK_SECONDS="60", TASKQ_CONCURRENCY="1",
                             TASKQ_PREFETCH="24", SHUTDOWN_GRACE_SECONDS="1")
    task_ids = o.enqueue(25)
    wait_until(lambda: o.states(task_ids).count("running") == 25, 15,
               "the worker to hold every task, one running and the rest prefetched")
    o.server.stop()
    stopped_at = time.monotonic()
    worker.send_signal(signal.SIGTERM)
    worker.wait(60)
    took = time.monotonic() - stopped_at
    # The grace, then a lease for the first refused release, then at most a probe a
    # second: not the client's own retries (about 0.7 s against a closed port) for
    # each of the 24 tasks after it.
    assert took < 1 + 2 + 6, f"the worker took {took:.1f}s to stop"
    # Not 0: a supervisor can tell this stop from a clean drain.
    assert worker.returncode == 75
    log = o.workers.log(worker)
    assert log.count("left to be reaped") == 25
    assert "stopped with 25 task(s) it could not settle or give back" in log
    o.server.start()
    assert o.states(task_ids) == ["running"] * 25  # still leased: reaped, not lost
