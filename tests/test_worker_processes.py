"""Real `taskq worker` processes killed, paused and stopped with signals, on the session Redis."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import sqlite3
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from helpers import leased_token, minted, record_of
from taskq.broker import Broker
from taskq.processes import taskq_command
from taskq.shards import Layout, register
from taskq.tools.embedded import EmbeddedRedis
from taskq.tools.ledger import Ledger, LedgerSummary
from waiting import WorkerProcesses, event_types, pid_of, wait_for_state, wait_until, worker_env

pytestmark = pytest.mark.processes

CHARGE = {"args": [], "kwargs": {"charge": 7}}


@pytest.fixture
def workers(
    redis_server: EmbeddedRedis, queue: Broker, ledger_path: Path, tmp_path: Path
) -> Iterator[WorkerProcesses]:
    env = worker_env(redis_server.url, queue.queue, ledger_path)
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


def only_lease(broker: Broker, task_id: str) -> int:
    """The token of the task's one lease, which no reap or later lease minted over: the
    record's."""
    token = record_of(broker, task_id).fencing_token
    assert minted(broker.client, broker.keys, task_id) == [("leased", leased_token(0, token))]
    return token


def leased_reaped_leased(broker: Broker, task_id: str) -> tuple[int, int, int]:
    """The tokens of a task leased, reaped and leased again (the takeover), as its events
    tell: each above the one before, and the takeover's the record's."""
    steps = minted(broker.client, broker.keys, task_id)
    assert [kind for kind, _ in steps] == ["leased", "reaped", "leased"], steps
    first, reaped, takeover = (token for _, token in steps)
    assert first < reaped < takeover == record_of(broker, task_id).fencing_token
    return first, reaped, takeover


def ledger_summary(path: Path) -> LedgerSummary:
    ledger = Ledger(path)
    try:
        return ledger.summary()
    finally:
        ledger.close()


def test_sigkilled_worker_task_is_reaped_and_completed_elsewhere(
    workers: WorkerProcesses, queue: Broker, ledger_path: Path
) -> None:
    # Killed after its charge and before its ack: the rerun must not charge again.
    for _ in range(2):
        workers.start(TASKQ_CONCURRENCY="2", AFTER_EFFECT_SECONDS="1.5")
    task_ids = [queue.enqueue(uuid.uuid4().hex, payload=CHARGE).task_id for _ in range(4)]
    victim = wait_until(
        lambda: next((t for t in task_ids if charge_tokens(ledger_path, t)), ""),
        10, "a task to charge the ledger",
    )
    killed_id = record_of(queue, victim).worker
    workers.holding(killed_id).send_signal(signal.SIGKILL)
    for task_id in task_ids:
        wait_for_state(queue, task_id, "completed")
    rerun = record_of(queue, victim)
    assert rerun.worker != killed_id and rerun.retries == 1
    # Leased, reaped, leased elsewhere; the killed worker charged with the first token.
    first, _, _ = leased_reaped_leased(queue, victim)
    assert charge_tokens(ledger_path, victim) == [first]
    assert "reaped" in event_types(queue.client, queue.keys, victim)
    summary = ledger_summary(ledger_path)
    assert (summary.charges, summary.tasks, summary.charged_twice) == (4, 4, [])


def test_paused_worker_is_fenced_after_takeover_even_with_no_ledger_guard(
    workers: WorkerProcesses, queue: Broker, ledger_path: Path
) -> None:
    # Paused long before its charge: on SIGCONT its heartbeat finds the token stale
    # before the handler reaches its effect, so effect() refuses the charge.
    for _ in range(2):
        workers.start(LEDGER_GUARD="none", WORK_SECONDS="3")
    task_id = queue.enqueue("t1", payload=CHARGE).task_id
    paused_id = wait_for_state(queue, task_id, "running").worker
    paused = workers.holding(paused_id)
    paused.send_signal(signal.SIGSTOP)
    # Reaped, then leased a second time: by the other worker, this one being stopped.
    wait_until(lambda: [kind for kind, _ in minted(queue.client, queue.keys, task_id)
                        ].count("leased") == 2, 10, "another worker to lease")
    paused.send_signal(signal.SIGCONT)
    done = wait_for_state(queue, task_id, "completed")
    first, _, takeover = leased_reaped_leased(queue, task_id)
    assert done.worker != paused_id and done.fencing_token == takeover
    # Its handler had started (its effect is refused, its failure report too) or, paused
    # between the lease and the start, it never starts: the lease lapsed meanwhile.
    log = wait_until(lambda: (log := workers.log(paused)) and (
        f"fail of task t1 refused: token {first} is stale" in log
        or "task t1 had not started" in log) and log, 10, "the paused worker to give t1 up")
    if "had not started" in log:
        assert "this worker no longer holds it" in log
    else:  # it ran: its heartbeat or its effect() found the lease lost
        assert f"lost its lease (token {first})" in log
        assert "LeaseLostError" in log or "this worker no longer holds it" in log
    assert charge_tokens(ledger_path, task_id) == [takeover]
    assert paused.poll() is None  # a refused report is routine: the worker goes on


# `charged`: whose charges the ledger keeps, in order: the paused holder's (the first
# lease's token) and the takeover's (the token leased after the reap).
@pytest.mark.parametrize(("guard", "charged"), [("none", ["paused", "takeover"]),
                                                ("dedupe", ["paused"])])
def test_worker_paused_after_its_charge_has_its_ack_refused_after_takeover(
    workers: WorkerProcesses, queue: Broker, ledger_path: Path, guard: str, charged: list[str]
) -> None:
    # The task runs twice (exactly-once execution is not promised); only a guarded
    # effect is applied once.
    for _ in range(2):
        workers.start(LEDGER_GUARD=guard, AFTER_EFFECT_SECONDS="1.5")
    task_id = queue.enqueue("t1", payload=CHARGE).task_id
    wait_until(lambda: charge_tokens(ledger_path, task_id), 10, "the first charge")
    paused_id = record_of(queue, task_id).worker
    paused = workers.holding(paused_id)
    paused.send_signal(signal.SIGSTOP)
    done = wait_for_state(queue, task_id, "completed")
    first, _, takeover = leased_reaped_leased(queue, task_id)
    assert done.worker != paused_id and done.fencing_token == takeover
    paused.send_signal(signal.SIGCONT)
    wait_until(lambda: f"ack of task t1 refused: token {first} is stale" in workers.log(paused),
               10, "the paused worker's ack to be refused")
    tokens = {"paused": first, "takeover": takeover}
    assert charge_tokens(ledger_path, task_id) == [tokens[run] for run in charged]
    assert record_of(queue, task_id) == done  # the refused ack changed nothing
    # The result is the accepted run's: the paused holder's return value never lands.
    assert queue.handle("t1").result(timeout=5)["token"] == takeover


def test_result_waited_for_here_comes_from_a_worker_process(
    workers: WorkerProcesses, queue: Broker, ledger_path: Path
) -> None:
    workers.start(WORK_SECONDS="0.3")
    handles = [queue.enqueue(f"t{n}", payload=CHARGE) for n in range(3)]
    results = [handle.result(timeout=20) for handle in handles]
    # Each charged on its one lease, with that lease's token.
    tokens = [only_lease(queue, handle.task_id) for handle in handles]
    assert results == [{"outcome": "applied", "token": token, "attempt": 1} for token in tokens]
    assert charge_tokens(ledger_path, "t0") == [tokens[0]]


# SIGHUP: the terminal or ssh session the worker ran in went away.
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP], ids=["SIGTERM", "SIGHUP"])
def test_sigterm_drains_the_task_in_hand_and_exits_zero(
    workers: WorkerProcesses, queue: Broker, ledger_path: Path, signum: signal.Signals
) -> None:
    worker = workers.start(WORK_SECONDS="1")
    first = queue.enqueue("first", payload=CHARGE).task_id
    second = queue.enqueue("second", payload=CHARGE).task_id
    wait_for_state(queue, first, "running")
    worker.send_signal(signum)
    assert worker.wait(10) == 0
    assert record_of(queue, first).state == "completed"
    assert charge_tokens(ledger_path, first) == [only_lease(queue, first)]
    untouched = record_of(queue, second)
    assert (untouched.state, untouched.fencing_token) == ("pending", 0)
    log = workers.log(worker)
    assert f"draining ({signum.name})" in log and "taskq.worker: stopped" in log


def test_under_nohup_a_sighup_is_left_ignored_and_sigterm_still_drains(
    workers: WorkerProcesses, queue: Broker
) -> None:
    """The worker took SIGHUP over the SIG_IGN nohup set, and stopped as the ssh
    session it was started from closed."""
    worker = workers.start(under=["nohup"], WORK_SECONDS="0.5")
    wait_until(lambda: ", concurrency " in workers.log(worker), 15, "the worker to run")
    worker.send_signal(signal.SIGHUP)
    task_id = queue.enqueue("after", payload=CHARGE).task_id
    wait_for_state(queue, task_id, "completed")
    assert worker.poll() is None and "draining" not in workers.log(worker)
    worker.send_signal(signal.SIGTERM)
    assert worker.wait(10) == 0
    assert "draining (SIGTERM)" in workers.log(worker)


def test_second_sigterm_exits_at_once_and_the_lease_is_reaped_later(
    workers: WorkerProcesses, queue: Broker
) -> None:
    worker = workers.start(WORK_SECONDS="10")
    task_id = queue.enqueue("t1", payload=CHARGE).task_id
    wait_for_state(queue, task_id, "running")
    worker.send_signal(signal.SIGTERM)
    wait_until(lambda: "draining" in workers.log(worker), 10, "the worker to drain")
    worker.send_signal(signal.SIGTERM)
    assert worker.wait(2) == 128 + signal.SIGTERM
    assert record_of(queue, task_id).state == "running"  # nothing was released on the way out
    wait_until(lambda: (task_id, "delayed") in queue.reap(), 5, "the lease to be reaped")
    reaped = record_of(queue, task_id)
    assert (reaped.state, reaped.retries) == ("delayed", 1)
    assert reaped.last_error.startswith("lease expired while held by worker")


def test_cli_enqueue_of_ten_tasks_is_worked_off_by_a_cli_worker(
    workers: WorkerProcesses, queue: Broker, ledger_path: Path
) -> None:
    sent = subprocess.run(
        taskq_command("enqueue", "10", "--charge", "3"),
        env=workers.env, capture_output=True, text=True, timeout=30, check=True,
    )
    assert f"enqueued 10 new task(s) on queue {queue.queue!r}" in sent.stdout
    assert queue.counts().ready == 10
    task_ids = [key.rsplit(":", 1)[1] for key in queue.client.scan_iter(queue.keys.task("*"))]
    assert len(task_ids) == 10
    workers.start(TASKQ_CONCURRENCY="2")
    for task_id in task_ids:
        wait_for_state(queue, task_id, "completed")
    summary = ledger_summary(ledger_path)
    assert (summary.charges, summary.tasks, summary.amount) == (10, 10, 30)


# -- one command, several processes (`taskq worker --processes N`) ---------------------


def pool_pids(log: str) -> list[int]:
    """The pids the pool's log says it started, in order."""
    return [int(m) for m in re.findall(r"started \(pid (\d+)\)", log)]


def test_a_pool_of_two_runs_tasks_in_two_worker_processes(
    workers: WorkerProcesses, queue: Broker, ledger_path: Path
) -> None:
    pool = workers.start(TASKQ_WORKER_PROCESSES="2")
    task_ids = [queue.enqueue(uuid.uuid4().hex, payload=CHARGE).task_id for _ in range(20)]
    for task_id in task_ids:
        wait_for_state(queue, task_id, "completed")
    ran_in = {pid_of(record_of(queue, t).worker) for t in task_ids}
    assert ran_in == set(pool_pids(workers.log(pool))) and len(ran_in) == 2
    assert pool.pid not in ran_in
    summary = ledger_summary(ledger_path)
    assert (summary.charges, summary.tasks, summary.charged_twice) == (20, 20, [])


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP], ids=["SIGTERM", "SIGHUP"])
def test_sigterm_to_a_pool_drains_every_process_and_exits_zero(
    workers: WorkerProcesses, queue: Broker, signum: signal.Signals
) -> None:
    pool = workers.start(TASKQ_WORKER_PROCESSES="2", WORK_SECONDS="1")
    task_ids = [queue.enqueue(f"t{i}", payload=CHARGE).task_id for i in range(4)]
    wait_until(lambda: queue.counts().leased == 2, 10, "both processes to hold a task")
    held = [t for t in task_ids if record_of(queue, t).state == "running"]
    pool.send_signal(signum)
    assert pool.wait(15) == 0
    assert [record_of(queue, t).state for t in held] == ["completed", "completed"]
    assert queue.counts().ready == 2  # the rest wait for the next worker
    for pid in pool_pids(workers.log(pool)):
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)


def test_a_stop_sent_to_the_pool_and_to_each_process_drains_them_all_once(
    workers: WorkerProcesses, queue: Broker, ledger_path: Path
) -> None:
    # As systemd's default KillMode (control-group) stops a unit: every process gets
    # SIGTERM. Here the copies' come a little before the pool's, so that no two merge
    # into one: the pool's must not read as a second one, which exits at once and
    # leaves a task whose effect was applied to be reaped and charged again.
    pool = workers.start(TASKQ_WORKER_PROCESSES="2", AFTER_EFFECT_SECONDS="1.5",
                         LEDGER_GUARD="none")
    task_ids = [queue.enqueue(f"t{i}", payload=CHARGE).task_id for i in range(2)]
    wait_until(lambda: all(charge_tokens(ledger_path, t) for t in task_ids), 10,
               "both charges")
    for pid in pool_pids(workers.log(pool)):
        os.kill(pid, signal.SIGTERM)
    time.sleep(0.3)
    pool.send_signal(signal.SIGTERM)
    assert pool.wait(15) == 0, workers.log(pool)[-2000:]
    assert [record_of(queue, t).state for t in task_ids] == ["completed", "completed"]
    # Each charged once, on its one lease: none was reaped and run again.
    assert [charge_tokens(ledger_path, t) for t in task_ids] == [
        [only_lease(queue, t)] for t in task_ids]


def test_a_pool_stops_though_one_of_its_processes_is_stopped(
    workers: WorkerProcesses, queue: Broker
) -> None:
    pool = workers.start(TASKQ_WORKER_PROCESSES="2")
    wait_until(lambda: workers.log(pool).count("concurrency 1") == 2, 15,
               "both processes to run")
    stopped = pool_pids(workers.log(pool))[0]
    os.kill(stopped, signal.SIGSTOP)
    try:
        pool.send_signal(signal.SIGTERM)
        assert pool.wait(15) == 0
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(stopped, signal.SIGCONT)


def test_a_pool_stopped_while_its_processes_start_exits_zero(
    workers: WorkerProcesses, queue: Broker
) -> None:
    # Its copies may not have set their handlers yet: the pool's SIGTERM ends them
    # before they lease anything, which is a clean stop.
    pool = workers.start(TASKQ_WORKER_PROCESSES="2")
    wait_until(lambda: "process 1 started" in workers.log(pool), 15, "the second start")
    pool.send_signal(signal.SIGTERM)
    assert pool.wait(15) == 0, workers.log(pool)[-2000:]


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGQUIT],
                         ids=["second-stop", "SIGQUIT"])
def test_a_second_stop_signal_or_sigquit_ends_every_pool_process_at_once(
    workers: WorkerProcesses, queue: Broker, ledger_path: Path, signum: signal.Signals
) -> None:
    """SIGQUIT, left to its default, killed the pool alone, its processes draining on."""
    # Each charges at once, then works on: a charge says its handler runs.
    pool = workers.start(TASKQ_WORKER_PROCESSES="2", WORK_SECONDS="0",
                         AFTER_EFFECT_SECONDS="30")
    # Both running: one process may lease both tasks while the other still starts, and a
    # process told to exit before its worker runs says so in other words; a task leased
    # but not yet started is released at the first signal, its process then stopped.
    wait_until(lambda: workers.log(pool).count(", concurrency ") == 2, 15,
               "both processes' workers to run")
    task_ids = [queue.enqueue(f"t{i}", payload=CHARGE).task_id for i in range(2)]
    wait_until(lambda: all(charge_tokens(ledger_path, t) for t in task_ids), 10,
               "both handlers to run")
    if signum == signal.SIGINT:  # the first of two
        pool.send_signal(signal.SIGTERM)
        wait_until(lambda: workers.log(pool).count("draining (SIGTERM)") == 2, 10,
                   "both processes to drain")
    pool.send_signal(signum)
    assert pool.wait(10) == 128 + signum
    log = workers.log(pool)
    said = "SIGQUIT" if signum == signal.SIGQUIT else "second SIGINT"
    assert f"worker pool: {said}: every process exits now" in log
    assert log.count("second stop signal: exiting now") == 2
    assert [record_of(queue, t).state for t in task_ids] == ["running", "running"]
    for pid in pool_pids(workers.log(pool)):
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)


def test_a_pool_starts_a_killed_process_again_and_the_task_is_rerun(
    workers: WorkerProcesses, queue: Broker, ledger_path: Path
) -> None:
    pool = workers.start(TASKQ_WORKER_PROCESSES="2", AFTER_EFFECT_SECONDS="1.5")
    task_id = queue.enqueue("t1", payload=CHARGE).task_id
    wait_until(lambda: charge_tokens(ledger_path, task_id), 10, "the first charge")
    os.kill(pid_of(record_of(queue, task_id).worker), signal.SIGKILL)
    wait_until(lambda: len(pool_pids(workers.log(pool))) == 3, 10, "a third process to start")
    assert "exited with status -9" in workers.log(pool)
    done = wait_for_state(queue, task_id, "completed")
    # Rerun after the reap; the killed process's charge (its first token) is the only one.
    first, _, _ = leased_reaped_leased(queue, task_id)
    assert done.retries == 1 and charge_tokens(ledger_path, task_id) == [first]
    assert pool.poll() is None


def test_a_pool_size_out_of_range_is_refused_with_the_reason(
    redis_server: EmbeddedRedis,
) -> None:
    # Set in the environment, the error names the variable (given as --processes, the
    # option: see test_cli_errors).
    done = subprocess.run(
        taskq_command("worker"), capture_output=True, text=True, timeout=60, check=False,
        env={**os.environ, "REDIS_URL": redis_server.url, "TASKQ_WORKER_PROCESSES": "0"},
    )
    assert done.returncode == 2
    assert "TASKQ_WORKER_PROCESSES" in done.stderr and "between 1 and 256" in done.stderr


def test_a_pool_refused_by_the_queues_shard_layout_exits_2_saying_why(
    redis_server: EmbeddedRedis, queue: Broker
) -> None:
    register(queue.client, Layout.of(queue.queue, 4))  # as a sharded producer did
    done = subprocess.run(
        taskq_command("worker", "--processes", "2"), capture_output=True, text=True,
        timeout=60, check=False,
        env={**os.environ, "REDIS_URL": redis_server.url, "TASKQ_QUEUE": queue.queue},
    )
    assert done.returncode == 2, done.stderr
    assert "has 4 shards in Redis" in done.stderr and "the pool stops" in done.stderr


# -- effects at the edges of a lease and of the grace period ---------------------------


@pytest.mark.parametrize("trial", [1, 2])
def test_a_worker_woken_past_its_lease_refuses_its_effect_before_the_heartbeat_notices(
    workers: WorkerProcesses, queue: Broker, ledger_path: Path, trial: int
) -> None:
    # Paused with its handler asleep; the sleep is over when it wakes, so the handler
    # reaches effect() at once, racing the heartbeat thread: effect() asks Redis itself.
    paused = workers.start(LEDGER_GUARD="none", WORK_SECONDS="0.5")
    task_id = queue.enqueue(f"t{trial}", payload=CHARGE).task_id
    wait_for_state(queue, task_id, "running")
    paused.send_signal(signal.SIGSTOP)
    workers.start(LEDGER_GUARD="none", WORK_SECONDS="0.5")
    done = wait_for_state(queue, task_id, "completed")
    paused.send_signal(signal.SIGCONT)
    # Paused between the lease and the handler's start, it never starts it instead.
    wait_until(lambda: "LeaseLostError" in (log := workers.log(paused))
               or f"task {task_id} had not started" in log, 10, "the effect to be refused")
    assert charge_tokens(ledger_path, task_id) == [done.fencing_token]


def test_a_worker_woken_past_its_lease_starts_none_of_the_tasks_it_prefetched(
    workers: WorkerProcesses, queue: Broker, ledger_path: Path
) -> None:
    # Paused holding one run and two prefetched tasks, all taken over meanwhile: when it
    # wakes, its handler thread is free before its heartbeat has asked Redis anything.
    paused = workers.start("--concurrency", "1", "--prefetch", "2",
                           LEDGER_GUARD="none", WORK_SECONDS="2")
    task_ids = [queue.enqueue(f"t{i}", payload=CHARGE).task_id for i in range(3)]
    wait_until(lambda: queue.counts().leased == 3, 10, "one run and two prefetched")
    # The handler starts t0 a moment after the lease: stopped before it has, all three
    # are unstarted. Its run works 2 s before its charge, so 0.8 s on (room for a loaded
    # machine to start it) it is still under way.
    time.sleep(0.8)
    paused.send_signal(signal.SIGSTOP)
    workers.start("--concurrency", "3", LEDGER_GUARD="none", WORK_SECONDS="0.5")
    for task_id in task_ids:
        wait_for_state(queue, task_id, "completed")
    paused.send_signal(signal.SIGCONT)

    def given_up() -> tuple[list[str], list[str]]:
        log = workers.log(paused)
        return ([t for t in task_ids if re.search(f"(ack|fail) of task {t} refused", log)],
                [t for t in task_ids if f"task {t} had not started" in log])

    wait_until(lambda: sum(map(len, given_up())) == 3, 10, "each task given up")
    ran, unstarted = given_up()
    assert (len(ran), len(unstarted)) == (1, 2), workers.log(paused)
    assert all(len(charge_tokens(ledger_path, t)) == 1 for t in task_ids)


def stopped(pid: int) -> bool:
    """Whether process `pid` is stopped by a signal (state T in /proc)."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    return stat[stat.rindex(")") + 2] == "T"


PAUSED_IN_EFFECT_APP = '''
import signal, threading
from taskq import App, Ledger, current_task
from taskq.settings import Simulation

app = App()

@app.task("taskq.simulate")
def charge(charge: int) -> None:
    task = current_task()
    with task.effect():
        if task.attempt == 1:
            # Sent to this thread, so it stops before its next step (a signal sent to the
            # process may be taken by another thread, and this one run on a moment).
            signal.pthread_kill(threading.get_ident(), signal.SIGSTOP)
        simulation = Simulation.from_env()
        ledger = Ledger(simulation.ledger_path, simulation.ledger_guard)
        ledger.charge(task.task_id, task.token, "alice", charge)
        ledger.close()
'''


# `charged`: whose charges the ledger keeps, in order: the takeover's (the token leased
# after the reap), then the late one of the holder paused in its effect (the first's).
@pytest.mark.parametrize(("guard", "charged"), [("none", ["takeover", "paused"]),
                                                ("dedupe", ["takeover"])])
def test_a_pause_inside_an_effect_block_is_the_window_only_a_guard_closes(
    workers: WorkerProcesses, queue: Broker, ledger_path: Path, tmp_path: Path,
    guard: str, charged: list[str],
) -> None:
    (tmp_path / "paused_in_effect.py").write_text(PAUSED_IN_EFFECT_APP)
    app = {"PYTHONPATH": str(tmp_path), "LEDGER_GUARD": guard}
    paused = workers.start("--app", "paused_in_effect:app", **app)
    task_id = queue.enqueue("t1", payload=CHARGE).task_id
    wait_until(lambda: stopped(paused.pid), 10, "the worker to stop itself")
    workers.start("--app", "paused_in_effect:app", **app)
    wait_for_state(queue, task_id, "completed")
    paused.send_signal(signal.SIGCONT)
    wait_until(lambda: len(charge_tokens(ledger_path, task_id)) == len(charged)
               and "ack of task t1 refused" in workers.log(paused), 10, "the late charge")
    first, _, takeover = leased_reaped_leased(queue, task_id)
    tokens = {"paused": first, "takeover": takeover}
    assert charge_tokens(ledger_path, task_id) == [tokens[run] for run in charged]


def test_a_handler_past_the_grace_after_its_effect_is_acked_not_run_again(
    workers: WorkerProcesses, queue: Broker, ledger_path: Path
) -> None:
    slow = {"LEDGER_GUARD": "none", "WORK_SECONDS": "0.2", "AFTER_EFFECT_SECONDS": "3",
            "SHUTDOWN_GRACE_SECONDS": "0.5"}
    first = workers.start(**slow)
    task_id = queue.enqueue("t1", payload=CHARGE).task_id
    wait_until(lambda: charge_tokens(ledger_path, task_id), 10, "the charge")
    first.send_signal(signal.SIGTERM)
    workers.start(**slow)
    assert first.wait(10) == 0
    done = record_of(queue, task_id)
    token = only_lease(queue, task_id)  # acked on the first worker's lease
    assert (done.state, done.fencing_token, pid_of(done.worker)) == (
        "completed", token, first.pid)
    assert "after its effect was applied: acked" in workers.log(first)
    time.sleep(1.0)  # the second worker would have leased it by now
    assert charge_tokens(ledger_path, task_id) == [token]
    assert record_of(queue, task_id) == done


CHATTY_APP = '''
import time
from taskq import App

app = App()

@app.task("chatty")
def chatty() -> None:
    end = time.monotonic() + 30
    while time.monotonic() < end:
        print("still going " + "x" * 200)
'''


def test_handlers_printing_past_the_grace_leave_a_clean_exit_not_an_abort(
    workers: WorkerProcesses, queue: Broker, tmp_path: Path
) -> None:
    """The interpreter's shutdown took the stdout lock from under them: "Fatal Python
    error: _enter_buffered_busy" and SIGABRT, after a stop the log called clean."""
    (tmp_path / "chatty.py").write_text(CHATTY_APP)
    # Output buffered, as a worker's is where nothing asks otherwise (systemd, Docker).
    worker = workers.start("--app", "chatty:app", "-c", "4", PYTHONPATH=str(tmp_path),
                           SHUTDOWN_GRACE_SECONDS="0.5", PYTHONUNBUFFERED="")
    ids = [queue.enqueue(f"c{n}", name="chatty").task_id for n in range(4)]
    wait_until(lambda: all(record_of(queue, t).state == "running" for t in ids), 15,
               "every handler to run")
    worker.send_signal(signal.SIGTERM)
    assert worker.wait(15) == 0, workers.log(worker)[-2000:]
    assert "Fatal Python error" not in workers.log(worker)


SLOW_IMPORT_APP = '''
import pathlib, time
from taskq import App

pathlib.Path(__file__).with_name("importing").touch()
time.sleep(2)
app = App()

@app.task("slow.noop")
def noop() -> None:
    pass
'''


@pytest.mark.parametrize(("signum", "options", "says"), [
    (signal.SIGTERM, (), "draining (SIGTERM before it started)"),
    (signal.SIGHUP, (), "draining (SIGHUP before it started)"),
    (signal.SIGTERM, ("--processes", "2"), "stopped (SIGTERM before it started): no process"),
], ids=["sigterm", "sighup", "pool"])
def test_a_stop_while_the_app_is_imported_stops_the_worker_saying_so(
    workers: WorkerProcesses, queue: Broker, tmp_path: Path, signum: int,
    options: tuple[str, ...], says: str
) -> None:
    """Before the worker's own handlers, such a stop ended it without a word: exit -15,
    or -1 for SIGHUP, which a supervisor takes for a failure."""
    (tmp_path / "slow_import.py").write_text(SLOW_IMPORT_APP)
    task_id = queue.enqueue("t1", name="slow.noop").task_id
    worker = workers.start("--app", "slow_import:app", *options, PYTHONPATH=str(tmp_path))
    wait_until((tmp_path / "importing").exists, 15, "the app's import to begin")
    worker.send_signal(signum)
    assert worker.wait(15) == 0
    assert says in workers.log(worker)
    assert record_of(queue, task_id).state == "pending"


def test_a_sigkilled_workers_prefetched_tasks_are_reaped_and_each_charged_once_elsewhere(
    workers: WorkerProcesses, queue: Broker, ledger_path: Path
) -> None:
    first = workers.start("--concurrency", "1", "--prefetch", "3", WORK_SECONDS="3")
    task_ids = [queue.enqueue(uuid.uuid4().hex, payload=CHARGE).task_id for _ in range(4)]
    wait_until(lambda: queue.counts().leased == 4, 10, "one task running and three waiting")
    first.send_signal(signal.SIGKILL)
    workers.start(TASKQ_CONCURRENCY="4")
    for task_id in task_ids:
        wait_for_state(queue, task_id, "completed")
        assert "reaped" in event_types(queue.client, queue.keys, task_id)
    summary = ledger_summary(ledger_path)
    assert (summary.charges, summary.tasks, summary.charged_twice) == (4, 4, [])


def test_sigterm_hands_back_the_prefetched_tasks_and_drains_the_running_one(
    workers: WorkerProcesses, queue: Broker
) -> None:
    worker = workers.start("--concurrency", "1", "--prefetch", "3", WORK_SECONDS="1")
    task_ids = [queue.enqueue(f"t{i}", payload=CHARGE).task_id for i in range(4)]
    wait_until(lambda: queue.counts().leased == 4, 10, "one task running and three waiting")
    worker.send_signal(signal.SIGTERM)
    assert worker.wait(15) == 0
    states = sorted(record_of(queue, t).state for t in task_ids)
    assert states == ["completed", "pending", "pending", "pending"]
    for task_id in task_ids:
        if record_of(queue, task_id).state == "pending":
            assert event_types(queue.client, queue.keys, task_id)[-1] == "released"


def test_sigusr1_reports_each_task_in_hand_with_its_threads_stack_and_work_goes_on(
    workers: WorkerProcesses, queue: Broker, ledger_path: Path
) -> None:
    """Left to its default, SIGUSR1 (what Celery's workers dump their stacks on) ended
    the worker at once without a word."""
    worker = workers.start(WORK_SECONDS="2")
    task_id = queue.enqueue("t1", payload=CHARGE).task_id
    wait_for_state(queue, task_id, "running")
    worker.send_signal(signal.SIGUSR1)
    wait_until(lambda: "running for" in workers.log(worker), 10, "the report")
    log = workers.log(worker)
    assert "1 tasks in hand, 1 running and 0 waiting for a handler" in log
    line = next(ln for ln in log.splitlines() if "running for" in ln)
    assert f"{task_id} attempt 1: running for" in line and "taskq-handler-" in line
    # The thread the report names is one whose stack is logged, in the handler's sleep.
    ident = re.search(r"\((0x[0-9a-f]{16})\), at ", line)
    assert ident is not None, line
    # The stacks follow the summary in the same report, written a moment later.
    stack = wait_until(lambda: next((ln for ln in workers.log(worker).splitlines()
                                     if f"({ident.group(1)}): " in ln), ""), 10, "the stacks")
    assert "simulation.py" in stack and " in simulate <- " in stack, workers.log(worker)[-3000:]
    wait_for_state(queue, task_id, "completed")
    assert worker.poll() is None
    worker.send_signal(signal.SIGTERM)
    assert worker.wait(10) == 0
    assert charge_tokens(ledger_path, task_id) == [only_lease(queue, task_id)]


@pytest.mark.parametrize("signum", [signal.SIGQUIT, signal.SIGUSR2], ids=["SIGQUIT", "SIGUSR2"])
def test_sigquit_and_sigusr2_end_the_worker_at_once_saying_so(
    workers: WorkerProcesses, queue: Broker, signum: signal.Signals
) -> None:
    """Left to their defaults, they ended it with no line in its log."""
    worker = workers.start(WORK_SECONDS="10")
    task_id = queue.enqueue("t1", payload=CHARGE).task_id
    wait_for_state(queue, task_id, "running")
    worker.send_signal(signum)
    assert worker.wait(5) == 128 + signum
    assert f"{signum.name}: exiting now; leases in hand will be reaped" in workers.log(worker)
    assert record_of(queue, task_id).state == "running"  # its lease is reaped later


def test_sigusr1_to_a_pool_names_its_processes_and_each_reports_its_own_tasks(
    workers: WorkerProcesses, queue: Broker
) -> None:
    pool = workers.start(TASKQ_WORKER_PROCESSES="2", WORK_SECONDS="3")
    for i in range(2):
        queue.enqueue(f"t{i}", payload=CHARGE)
    wait_until(lambda: queue.counts().leased == 2, 10, "both processes to hold a task")
    pool.send_signal(signal.SIGUSR1)
    wait_until(lambda: workers.log(pool).count("running for") == 2, 10,
               "both processes' reports")
    log = workers.log(pool)
    pids = pool_pids(log)
    assert all(f"pid {pid}, up" in log for pid in pids) and len(pids) == 2
    assert "worker pool: 2 of 2 processes running" in log
    assert log.count("1 tasks in hand, 1 running") == 2
    pool.send_signal(signal.SIGTERM)
    assert pool.wait(15) == 0


def test_sigusr1_while_the_app_is_imported_shows_where_the_import_is(
    workers: WorkerProcesses, queue: Broker, tmp_path: Path
) -> None:
    (tmp_path / "slow_import.py").write_text(SLOW_IMPORT_APP)
    task_id = queue.enqueue("t1", name="slow.noop").task_id
    worker = workers.start("--app", "slow_import:app", PYTHONPATH=str(tmp_path))
    wait_until((tmp_path / "importing").exists, 15, "the app's import to begin")
    worker.send_signal(signal.SIGUSR1)
    wait_until(lambda: "slow_import.py" in workers.log(worker), 10, "the stack dump")
    wait_for_state(queue, task_id, "completed")
    worker.send_signal(signal.SIGTERM)
    assert worker.wait(10) == 0


FORKING_APP = '''
import os, pathlib, sys, time
import taskq

app = taskq.App()
EFFECTS = pathlib.Path(__file__).with_name("effects")


@app.task("forker.fork")
def fork(code: int) -> int:
    pid = os.fork()
    if pid == 0:
        time.sleep(0.3)  # the worker's other handlers' tasks wait meanwhile
        sys.exit(code)
    return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])


@app.task("forker.afork")
async def afork(code: int) -> int:
    pid = os.fork()
    if pid == 0:
        sys.exit(code)
    return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])


def charge() -> None:
    with taskq.current_task().effect():
        with EFFECTS.open("a") as out:
            out.write(f"{taskq.current_task().task_id} {os.getpid()}\\n")


@app.task("forker.charge")
def sync_charge() -> None:
    time.sleep(0.05)
    charge()


@app.task("forker.acharge")
async def async_charge() -> None:
    import asyncio
    await asyncio.sleep(0.5)  # under way in the loop as the other handler forks it
    charge()


@app.task("forker.terminate")
def terminate() -> int:
    import multiprocessing
    child = multiprocessing.get_context("fork").Process(target=time.sleep, args=(30,))
    child.start()
    child.terminate()
    child.join(10)
    return child.exitcode
'''


@pytest.mark.parametrize(("fork", "charge", "options"), [
    ("forker.fork", "forker.charge", ("-c", "1", "--prefetch", "8")),
    ("forker.afork", "forker.acharge", ("-c", "8")),
], ids=["sync-prefetched", "async-under-way"])
def test_a_process_a_handler_forks_ends_with_its_handler_and_applies_no_effect(
    workers: WorkerProcesses, queue: Broker, tmp_path: Path, fork: str, charge: str,
    options: tuple[str, ...]
) -> None:
    """The child went on with the worker's work: a sync handler's thread took the jobs
    queued behind it, the async loop ran the other coroutines on, and each of their
    effects passed its lease check a second time (same token) in the child."""
    (tmp_path / "forker.py").write_text(FORKING_APP)
    first = charge == "forker.acharge"  # under way when the loop forks; else queued after
    charges = [queue.enqueue(f"c{n}", name=charge).task_id for n in range(5)] if first \
        else []
    forked = queue.enqueue("f1", name=fork, payload={"args": [5], "kwargs": {}}).task_id
    if not first:
        charges = [queue.enqueue(f"c{n}", name=charge).task_id for n in range(5)]
    worker = workers.start("--app", "forker:app", *options, PYTHONPATH=str(tmp_path))
    for task_id in [forked, *charges]:
        wait_for_state(queue, task_id, "completed")
    assert queue.handle(forked).result(timeout=5) == 5  # the child exited with its code
    lines = (tmp_path / "effects").read_text().split()
    assert sorted(lines[::2]) == sorted(charges), lines  # each effect once
    assert set(lines[1::2]) == {str(pid_of(record_of(queue, charges[0]).worker))}
    worker.send_signal(signal.SIGTERM)
    assert worker.wait(10) == 0


def test_process_terminate_in_a_handler_ends_its_child_under_the_worker_command(
    workers: WorkerProcesses, queue: Broker, tmp_path: Path
) -> None:
    """The child kept the command's start-up handler (EarlyStop), which swallowed the
    SIGTERM: terminate() gave exit 0 after the child's whole sleep."""
    (tmp_path / "forker.py").write_text(FORKING_APP)
    task_id = queue.enqueue("t1", name="forker.terminate").task_id
    worker = workers.start("--app", "forker:app", PYTHONPATH=str(tmp_path))
    assert queue.handle(task_id).result(timeout=20) == -signal.SIGTERM
    worker.send_signal(signal.SIGTERM)
    assert worker.wait(10) == 0


FORK_RUN = '''
import multiprocessing, os, signal, sys, time
import taskq
from taskq.worker.loop import Worker

app = taskq.App(queue=sys.argv[1])


@app.task("forkrun.add")
def add(a: int, b: int) -> int:
    return a + b


worker = Worker(app)  # made here, run in a forked process, as a preforking server does
handles = [add.enqueue(i, 1) for i in range(5)]
child = multiprocessing.get_context("fork").Process(target=worker.run)
child.start()
print([h.result(timeout=20) for h in handles], flush=True)
os.kill(child.pid, signal.SIGTERM)
child.join(15)
print(child.exitcode)
'''


def test_a_worker_made_in_one_process_and_run_in_a_forked_one_runs_every_task(
    queue: Broker, tmp_path: Path, redis_server: EmbeddedRedis
) -> None:
    """The fork check took the process the runner was made in for the worker's: the
    child left after its first task, four tasks waiting."""
    (tmp_path / "fork_run.py").write_text(FORK_RUN)
    done = subprocess.run([sys.executable, str(tmp_path / "fork_run.py"), queue.queue],
                          env={**os.environ, "REDIS_URL": redis_server.url},
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split("\n")[:2] == ["[1, 2, 3, 4, 5]", "0"], done.stderr[-2000:]


def test_sigusr1_to_a_pool_as_its_processes_start_kills_none_of_them(
    workers: WorkerProcesses, queue: Broker
) -> None:
    """Before a process set its handler, SIGUSR1's default ended it (-10), counted as a
    crash: now the pool starts them with it blocked until then."""
    pool = workers.start(TASKQ_WORKER_PROCESSES="2")
    wait_until(lambda: len(pool_pids(workers.log(pool))) == 2, 10, "both processes")
    pool.send_signal(signal.SIGUSR1)  # while they import and check Redis
    wait_until(lambda: workers.log(pool).count("concurrency") >= 2, 15,
               "both processes to start working")
    task_id = queue.enqueue("t1", payload=CHARGE).task_id
    wait_for_state(queue, task_id, "completed")
    log = workers.log(pool)
    assert "exited with status" not in log, log[-3000:]
    assert log.count("thread MainThread (0x") == 2  # each process logged its stacks
    pool.send_signal(signal.SIGTERM)
    assert pool.wait(15) == 0


def test_sigusr1_with_json_logs_writes_json_lines_only(
    workers: WorkerProcesses, queue: Broker
) -> None:
    """The stacks came from faulthandler, as plain text in the JSON stream."""
    worker = workers.start("--log-format", "json", WORK_SECONDS="2")
    task_id = queue.enqueue("t1", payload=CHARGE).task_id
    wait_for_state(queue, task_id, "running")
    worker.send_signal(signal.SIGUSR1)
    wait_until(lambda: "running for" in workers.log(worker), 10, "the report")
    worker.send_signal(signal.SIGTERM)
    assert worker.wait(10) == 0
    records = [json.loads(line) for line in workers.log(worker).splitlines() if line]
    assert any(r["message"].startswith("thread taskq-handler-") for r in records)


RELOADING_APP = '''
import pathlib, signal, time
from taskq import App

app = App()
RELOADS = pathlib.Path(__file__).with_name("reloads")
signal.signal(signal.SIGUSR2, lambda signum, frame: RELOADS.open("a").write("reload\\n"))


@app.task("reloading.slow")
def slow() -> None:
    time.sleep(1)
'''


def test_an_apps_own_sigusr2_handler_set_as_it_is_imported_is_kept(
    workers: WorkerProcesses, queue: Broker, tmp_path: Path
) -> None:
    """The worker took SIGUSR2 over as an exit, in the middle of the task."""
    (tmp_path / "reloading.py").write_text(RELOADING_APP)
    task_id = queue.enqueue("t1", name="reloading.slow").task_id
    worker = workers.start("--app", "reloading:app", PYTHONPATH=str(tmp_path))
    wait_for_state(queue, task_id, "running")
    worker.send_signal(signal.SIGUSR2)
    wait_for_state(queue, task_id, "completed")
    assert (tmp_path / "reloads").read_text() == "reload\n"
    assert worker.poll() is None
    worker.send_signal(signal.SIGTERM)
    assert worker.wait(10) == 0
