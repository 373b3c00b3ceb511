"""Concurrency limits as users declare them, and as real worker processes keep them:
never more runs at once than the limit across every worker, and a killed worker's
slots come back when its leases are reaped."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from helpers import events
from taskq import App, chain
from taskq.broker import Broker, NewTask
from taskq.concurrency import ConcurrencyLimit
from taskq.errors import ConfigError, InvalidTaskError
from taskq.settings import Settings
from taskq.tools.tracecheck import read_log, validate
from waiting import WorkerProcesses, wait_until, worker_env


class TestDeclaring:
    def test_the_apps_limits_are_those_of_its_tasks(self, app: App) -> None:
        @app.task("one", max_concurrency=3)
        def one() -> None: ...

        @app.task("other")
        def other() -> None: ...

        assert app.concurrency_limits() == (ConcurrencyLimit("one", 3),)

    def test_a_bad_limit_is_refused_naming_the_task(self, app: App) -> None:
        with pytest.raises(ConfigError, match="'bad': max_concurrency must be a whole number"):
            @app.task("bad", max_concurrency=0)
            def bad() -> None: ...
        assert "bad" not in app.tasks


class TestAKeyedLimit:
    def test_each_call_carries_its_keys_value_however_it_was_passed(self, app: App) -> None:
        @app.task("send", max_concurrency=2, concurrency_key="account")
        def send(message: str, account: str | int = "default") -> None: ...

        assert app.concurrency_limits() == (ConcurrencyLimit("send", 2, "account"),)
        assert send.call("hi", "acct-1").limit_key == "acct-1"
        assert send.call("hi", account=42).limit_key == "42"
        assert send.call("hi").limit_key == "default"
        handle = send.enqueue("hi", account="acct-9")
        record = app.broker.task(handle.task_id)
        assert record is not None and record.limit_key == "acct-9"

    def test_a_key_that_is_not_text_or_a_whole_number_is_refused_before_sending(
        self, app: App
    ) -> None:
        @app.task("send", max_concurrency=2, concurrency_key="account")
        def send(account: object) -> None: ...

        for bad in (None, 1.5, True, ["a"]):
            with pytest.raises(InvalidTaskError, match="concurrency_key 'account' must be a "
                                                       "string or an integer"):
                send.enqueue(bad)
        with pytest.raises(InvalidTaskError, match="invalid concurrency key"):
            send.enqueue("")
        # Past Python's int-to-text limit (4300 digits), not only past the key's size.
        with pytest.raises(InvalidTaskError, match="an integer too long to be a key"):
            send.enqueue(10**5000)
        assert app.broker.counts().ready == 0

    @pytest.mark.parametrize("bad", ["", "k" * 513])
    def test_a_workflows_first_step_is_held_to_the_same_key_rule(
        self, app: App, bad: str
    ) -> None:
        @app.task("send", max_concurrency=2, concurrency_key="account")
        def send(account: str) -> None: ...

        with pytest.raises(InvalidTaskError, match="invalid concurrency key"):
            chain(send.s(bad)).enqueue()
        assert app.broker.counts().ready == 0

    def test_a_key_must_name_a_parameter_and_needs_a_limit(self, app: App) -> None:
        with pytest.raises(ConfigError, match="concurrency_key must name one of its "
                                              "parameters \\(account\\), not 'acount'"):
            @app.task("a", max_concurrency=1, concurrency_key="acount")
            def a(account: str) -> None: ...
        with pytest.raises(ConfigError, match="concurrency_key needs max_concurrency"):
            @app.task("b", concurrency_key="account")
            def b(account: str) -> None: ...
        assert not app.tasks


LIMITED_APP = '''
import time
import taskq

app = taskq.App()

@app.task("limited", max_concurrency=2)
def limited(seconds: float) -> None:
    time.sleep(seconds)
'''


def runs_at_once(queue: Broker, tasks: set[str] | None = None) -> int:
    """The most runs (of `tasks`, or of all) that held leases at the same moment, by the
    Redis times of their events: a run holds from its `leased` event to the event that
    ended its lease."""
    changes: list[tuple[int, int]] = []
    for e in events(queue.client, queue.keys):
        if tasks is not None and e.task not in tasks:
            continue
        if e.type == "leased":
            changes.append((int(e.fields["ts"]), 1))
        elif e.type in ("completed", "failed", "released", "reaped", "cancelled") \
                and e.fields.get("from", "running") == "running":
            changes.append((int(e.fields["ts"]), -1))
    # At one millisecond an end comes before a start, as the scripts ran.
    held = most = 0
    for _, change in sorted(changes):
        held += change
        most = max(most, held)
    return most


def start_workers(tmp_path: Path, settings: Settings, queue: Broker, ledger_path: Path,
                  n: int) -> WorkerProcesses:
    (tmp_path / "limited_app.py").write_text(LIMITED_APP)
    workers = WorkerProcesses(tmp_path, worker_env(settings.redis_url, queue.queue, ledger_path,
                                                   PYTHONPATH=str(tmp_path)))
    for _ in range(n):
        workers.start("--app", "limited_app:app", "--concurrency", "4")
    return workers


def drained(queue: Broker) -> bool:
    counts = queue.counts()
    return counts.ready + counts.delayed + counts.leased == 0


def test_workers_together_never_run_more_than_the_limit(
    tmp_path: Path, settings: Settings, queue: Broker, ledger_path: Path
) -> None:
    """Three worker processes with four handlers each drain twelve 0.2 s tasks limited
    to two at once: never more than two run, and the twelve take about six rounds."""
    queue.enqueue_many([NewTask(f"c{i:02}", name="limited", payload={"seconds": 0.2})
                        for i in range(12)])
    workers = start_workers(tmp_path, settings, queue, ledger_path, 3)
    try:
        wait_until(lambda: drained(queue), 30, "the drain")
    finally:
        workers.stop_all()
    log = events(queue.client, queue.keys)
    assert sum(1 for e in log if e.type == "completed") == 12, workers.logs()
    assert runs_at_once(queue) == 2
    assert any(e.type == "parked" for e in log)
    assert not queue.client.smembers(queue.keys.holding("limited"))
    # Every task's events form a legal path, parked ones included, and P1 held.
    report = validate(read_log(queue.client, queue.keys.events))
    assert report.ok, report.violations
    assert report.priority.checked == 12


def test_a_killed_workers_slots_come_back_when_its_leases_are_reaped(
    tmp_path: Path, settings: Settings, queue: Broker, ledger_path: Path
) -> None:
    """The first worker takes both slots with long runs and is killed; the second, which
    found every slot taken, runs everything once the dead leases (1 s) are reaped."""
    queue.enqueue_many([NewTask(f"k{i}", name="limited", payload={"seconds": 60},
                                max_retries=0) for i in range(2)])
    queue.enqueue_many([NewTask(f"q{i}", name="limited", payload={"seconds": 0.05})
                        for i in range(3)])
    workers = start_workers(tmp_path, settings, queue, ledger_path, 1)
    try:
        wait_until(lambda: len(queue.client.smembers(queue.keys.holding("limited"))) == 2,
                   20, "the first worker to take both slots")
        wait_until(lambda: queue.client.llen(queue.keys.parked("limited")) == 3, 20,
                   "the other three to be parked")
        workers.processes[0].send_signal(signal.SIGKILL)
        workers.processes[0].wait()
        workers.start("--app", "limited_app:app", "--concurrency", "4")
        wait_until(lambda: sum(1 for e in events(queue.client, queue.keys)
                               if e.type == "completed") == 3, 30, "the three short runs")
    finally:
        workers.stop_all()
    reaped = [e.task for e in events(queue.client, queue.keys) if e.type == "reaped"]
    assert sorted(reaped) == ["k0", "k1"], workers.logs()
    assert runs_at_once(queue) == 2
    assert queue.counts().dead == 2


KEYED_APP = '''
import time
import taskq

app = taskq.App()

@app.task("per_account", max_concurrency=1, concurrency_key="account")
def per_account(account: str, seconds: float) -> None:
    time.sleep(seconds)
'''


def test_a_keyed_limit_holds_per_key_and_keys_run_side_by_side(
    tmp_path: Path, settings: Settings, queue: Broker, ledger_path: Path
) -> None:
    """Two worker processes drain four 0.2 s tasks of each of two accounts, one at a time
    per account: never two of one account at once, but the two accounts side by side."""
    (tmp_path / "keyed_app.py").write_text(KEYED_APP)
    queue.enqueue_many([NewTask(f"{a}{i}", name="per_account", limit_key=a,
                                payload={"kwargs": {"account": a, "seconds": 0.2}, "args": []})
                        for a in ("a", "b") for i in range(4)])
    workers = WorkerProcesses(tmp_path, worker_env(settings.redis_url, queue.queue, ledger_path,
                                                   PYTHONPATH=str(tmp_path)))
    try:
        for _ in range(2):
            workers.start("--app", "keyed_app:app", "--concurrency", "4")
        wait_until(lambda: drained(queue), 30, "the drain")
    finally:
        workers.stop_all()
    log = events(queue.client, queue.keys)
    assert sum(1 for e in log if e.type == "completed") == 8, workers.logs()
    assert runs_at_once(queue, {f"a{i}" for i in range(4)}) == 1
    assert runs_at_once(queue, {f"b{i}" for i in range(4)}) == 1
    assert runs_at_once(queue) == 2
    report = validate(read_log(queue.client, queue.keys.events))
    assert report.ok, report.violations
