"""The seed's Celery bug, run for real against taskq: an ETA longer than the lease, a
task that outlives several lease lengths, and a worker paused (SIGSTOP) past its lease,
with real `taskq worker` processes on the session Redis and the leases half a second.

In Celery the first two re-deliver a task that is still running and charge it twice. In
taskq a delayed task waits in `delayed` and is never leased early, and a long task keeps
its lease by heartbeat; only a worker paused past its lease runs a task twice, and then
the dedupe guard keeps the charge single, which the same run without a guard shows.
"""

from __future__ import annotations

import signal
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest

from helpers import minted, record_of
from taskq.broker import Broker
from taskq.tools.embedded import EmbeddedRedis
from taskq.tools.tracecheck import read_log, validate
from waiting import WorkerProcesses, event_types, wait_for_state, wait_until, worker_env

pytestmark = pytest.mark.processes

LEASE = 0.5
ETA = 2.0  # four leases long
CHARGE = {"args": [], "kwargs": {"charge": 5}}


@pytest.fixture
def workers(
    redis_server: EmbeddedRedis, queue: Broker, ledger_path: Path, tmp_path: Path
) -> Iterator[WorkerProcesses]:
    env = worker_env(redis_server.url, queue.queue, ledger_path, LEDGER_GUARD="none",
                     LEASE_SECONDS=str(LEASE), POLL_SECONDS="0.1", TASKQ_CONCURRENCY="2")
    processes = WorkerProcesses(tmp_path, env)
    yield processes
    processes.stop_all()


def charge_tokens(ledger_path: Path, task_id: str) -> list[int]:
    """The fencing token of every charge the ledger holds for `task_id`, in order."""
    with sqlite3.connect(ledger_path) as db:
        rows = db.execute("SELECT token FROM charges WHERE task_id = ? ORDER BY id", (task_id,))
        tokens = [int(token) for (token,) in rows.fetchall()]
    db.close()
    return tokens


def event_tokens(queue: Broker, task_id: str, kind: str) -> list[int]:
    """The token each of the task's `kind` events (leased, reaped) carries, oldest first."""
    return [token for type_, token in minted(queue.client, queue.keys, task_id)
            if type_ == kind]


def changes(queue: Broker, task_id: str) -> list[str]:
    """The task's events other than heartbeats, oldest first."""
    return [k for k in event_types(queue.client, queue.keys, task_id) if k != "heartbeat"]


def assert_legal_trace(queue: Broker) -> None:
    """Every event log row follows the protocol, T6 included: no lease before run-at."""
    report = validate(read_log(queue.client, queue.keys.events))
    assert report.ok, (report.violations[:5], report.unfinished[:5])


def test_a_task_due_after_four_leases_runs_once_at_its_time_even_without_a_guard(
    workers: WorkerProcesses, queue: Broker, ledger_path: Path
) -> None:
    for _ in range(2):
        workers.start()
    ids = [queue.enqueue(f"eta-{i}", delay=ETA, payload=CHARGE).task_id for i in range(4)]
    for task_id in ids:
        wait_for_state(queue, task_id, "completed")
    for task_id in ids:
        done = record_of(queue, task_id)
        assert done.leased_at >= done.run_at  # T6, on the server clock
        assert changes(queue, task_id) == ["enqueued", "promoted", "leased", "completed"]
        # One lease, no retry: the record keeps the token its only lease minted, and the
        # single charge was made under it.
        assert done.retries == 0
        assert event_tokens(queue, task_id, "leased") == [done.fencing_token]
        assert charge_tokens(ledger_path, task_id) == [done.fencing_token]
    assert_legal_trace(queue)


def test_a_task_three_leases_long_keeps_its_lease_by_heartbeat_and_runs_once(
    workers: WorkerProcesses, queue: Broker, ledger_path: Path
) -> None:
    for _ in range(2):
        workers.start(WORK_SECONDS="1.5")
    ids = [queue.enqueue(f"long-{i}", payload=CHARGE).task_id for i in range(3)]
    for task_id in ids:
        wait_for_state(queue, task_id, "completed")
    for task_id in ids:
        kinds = event_types(queue.client, queue.keys, task_id)
        assert kinds.count("leased") == 1 and "reaped" not in kinds
        assert kinds.count("heartbeat") >= 3  # about one every LEASE / 3 for 1.5 s
        # The heartbeats kept the one lease's token: the charge was made under it.
        token = record_of(queue, task_id).fencing_token
        assert event_tokens(queue, task_id, "leased") == [token]
        assert charge_tokens(ledger_path, task_id) == [token]
    assert_legal_trace(queue)


@pytest.mark.parametrize(
    ("guard", "charges_again"),
    [("dedupe", False), ("none", True)],
    ids=["dedupe charges once", "no guard charges twice"],
)
def test_a_worker_paused_past_its_lease_after_its_charge(
    workers: WorkerProcesses, queue: Broker, ledger_path: Path, guard: str, charges_again: bool
) -> None:
    # Paused after the charge and before the ack, for longer than the lease: the task is
    # reaped (a token above the paused run's) and run again elsewhere (a token above
    # that); the paused worker's ack is refused when it wakes. Only the guard decides
    # whether the rerun charges again.
    for _ in range(2):
        workers.start(LEDGER_GUARD=guard, AFTER_EFFECT_SECONDS="2")
    task_id = queue.enqueue("paused", delay=ETA, payload=CHARGE).task_id
    (first,) = wait_until(lambda: charge_tokens(ledger_path, task_id), ETA + 10,
                          "the first charge")
    held = record_of(queue, task_id)
    assert held.fencing_token == first  # the paused run's token, the one it charged under
    paused = workers.holding(held.worker)
    paused.send_signal(signal.SIGSTOP)
    try:
        wait_for_state(queue, task_id, "completed")
    finally:
        paused.send_signal(signal.SIGCONT)
    done = record_of(queue, task_id)
    assert workers.holding(done.worker) is not paused
    (reaped,) = event_tokens(queue, task_id, "reaped")
    assert first < reaped < done.fencing_token
    assert event_tokens(queue, task_id, "leased") == [first, done.fencing_token]
    wait_until(
        lambda: f"ack of task paused refused: token {first} is stale" in workers.log(paused),
        10, "the paused worker's ack to be refused",
    )  # fmt: skip
    assert record_of(queue, task_id) == done  # the refused ack changed nothing
    rerun = [done.fencing_token] if charges_again else []
    assert charge_tokens(ledger_path, task_id) == [first, *rerun]
    assert changes(queue, task_id) == [
        "enqueued", "promoted", "leased", "reaped", "promoted", "leased", "completed",
    ]  # fmt: skip
    assert_legal_trace(queue)
