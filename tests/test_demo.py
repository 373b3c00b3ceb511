"""`taskq demo` as a user runs it: a small demo end to end, and Ctrl-C in the middle."""

from __future__ import annotations

import dataclasses
import json
import random
import re
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
import redis

from cli_support import command_env, processes_of, taskq
from taskq.broker import Broker
from taskq.registry import Presence, register
from taskq.tools.demo import busiest, dashboard_problem, stall_reason
from taskq.tools.embedded import free_port
from taskq.tools.ledger import Ledger
from waiting import wait_until


def demo_summary(out: str, tasks: int) -> int:
    """How many of the demo's `tasks` completed, by its summary line: each of them, but
    for one whose simulated failures (15% an attempt) outlast its five retries, as six
    in a row, or five and the reap of the killed worker's lease, rarely do; it ends dead
    beside the ten no worker knows."""
    found = re.search(r"summary: completed (\d+), dead (\d+)", out)
    assert found is not None, out
    completed, dead = int(found[1]), int(found[2])
    assert completed + dead == tasks + 10 and completed >= tasks - 1, out
    return completed


class TestDemo:
    def test_a_small_demo_exits_0_with_its_summary_and_leaves_nothing_running(
        self, tmp_path: Path, marker: str
    ) -> None:
        workdir = tmp_path / "demo"
        result = taskq(
            "demo", "--tasks", "60", "--workers", "2", "--dir", str(workdir),
            env=command_env(TASKQ_TEST_MARKER=marker), timeout=120,
        )  # fmt: skip
        assert result.returncode == 0, result.stdout + result.stderr
        completed = demo_summary(result.stdout, 60)
        assert "charged twice 0, duplicates that created a task 0" in result.stdout
        assert result.stdout.count("[ok]") == 5
        assert re.search(r"killed worker \d \(SIGKILL\) mid-run, holding ", result.stdout)
        assert "the guarantees held" in result.stdout
        assert processes_of(workdir, marker) == []
        assert Ledger(workdir / "ledger.db").summary().charges == completed

    def test_the_dashboard_takes_the_port_given_and_lingers_as_asked(
        self, tmp_path: Path, marker: str, started: list[subprocess.Popen[bytes]]
    ) -> None:
        workdir, out, port = tmp_path / "demo", tmp_path / "demo.out", free_port()
        with open(out, "wb") as log:
            demo = subprocess.Popen(
                [sys.executable, "-m", "taskq", "demo", "--tasks", "30", "--workers", "1",
                 "--dir", str(workdir), "--port", str(port), "--linger", "30"],
                env=command_env(TASKQ_TEST_MARKER=marker), stdout=log, stderr=subprocess.STDOUT,
            )  # fmt: skip
        started.append(demo)
        wait_until(lambda: b"the dashboard stays up for 30s" in out.read_bytes(), 90,
                   "the run to end")
        text = out.read_text()
        assert f"live dashboard: http://127.0.0.1:{port}/?queue=demo (up while the demo " \
               "runs; kept 30s after it)" in text
        # After the run, the dashboard still answers on the port given.
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=5) as reply:
            assert json.loads(reply.read()) == {"ok": True, "redis": "up"}
        demo.send_signal(signal.SIGINT)  # the end the linger offers: the summary follows
        assert demo.wait(timeout=30) == 0, out.read_text()[-2000:]
        assert "the guarantees held" in out.read_text()
        assert processes_of(workdir, marker) == []

    def test_sigterm_while_the_dashboard_lingers_exits_143_and_leaves_nothing_running(
        self, tmp_path: Path, marker: str, started: list[subprocess.Popen[bytes]]
    ) -> None:
        """Ctrl-C ends the linger with the summary; a supervisor's SIGTERM must still
        read as one, as it does during the run."""
        workdir, out = tmp_path / "demo", tmp_path / "demo.out"
        with open(out, "wb") as log:
            demo = subprocess.Popen(
                [sys.executable, "-m", "taskq", "demo", "--tasks", "20", "--workers", "1",
                 "--dir", str(workdir), "--linger", "60"],
                env=command_env(TASKQ_TEST_MARKER=marker), stdout=log, stderr=subprocess.STDOUT,
            )  # fmt: skip
        started.append(demo)
        wait_until(lambda: b"the dashboard stays up for 60s" in out.read_bytes(), 90,
                   "the run to end")
        demo.send_signal(signal.SIGTERM)
        assert demo.wait(timeout=30) == 128 + signal.SIGTERM, out.read_text()[-2000:]
        assert processes_of(workdir, marker) == []

    def test_a_dashboard_that_does_not_come_up_is_said_not_announced(
        self, tmp_path: Path
    ) -> None:
        log = tmp_path / "serve.log"
        with open(log, "wb") as out:
            gone = subprocess.Popen([sys.executable, "-c", "print('[Errno 98] error while "
                                     "attempting to bind: address already in use')"],
                                    stdout=out)
        assert dashboard_problem(gone, free_port(), log) == (
            "[Errno 98] error while attempting to bind: address already in use")
        silent = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
        try:
            assert "did not answer on port" in (
                dashboard_problem(silent, free_port(), log, timeout=0.5) or "")
        finally:
            silent.kill()
            silent.wait()

    def test_a_stalled_run_says_redis_refuses_writes(
        self, tmp_path: Path, client: redis.Redis
    ) -> None:
        broker = Broker(client, "demo")
        client.config_set("maxmemory", 1)
        try:
            reason = stall_reason(broker, [], tmp_path)
        finally:
            client.config_set("maxmemory", 0)
        assert reason.startswith("Redis refuses writes: ") and "maxmemory" in reason
        (tmp_path / "worker-0.log").write_text("started\nERROR cannot import mytasks\n")
        assert stall_reason(broker, [], tmp_path) == (
            "every worker has exited; the last logged: ERROR cannot import mytasks")

    def test_a_size_port_or_linger_taskq_cannot_use_is_refused(self, tmp_path: Path) -> None:
        for option, value, message in (
                ("--port", "70000", "--port must be a whole number between 0 and 65535"),
                ("--linger", "-1", "--linger must be a number of seconds between 0 and"),
                ("--linger", "nan", "--linger must be a number of seconds between 0 and"),
                ("--tasks", "0", "--tasks must be a whole number of tasks between 1 and"),
                ("--tasks", "10000000000", "--tasks must be a whole number of tasks"),
                ("--workers", "65", "--workers must be a whole number of processes")):
            result = taskq("demo", option, value, "--dir", str(tmp_path / "demo"),
                           env=command_env())
            assert result.returncode == 2 and message in result.stderr
            assert not (tmp_path / "demo").exists()

    @pytest.mark.parametrize("command", [["demo"], ["chaos", "--tasks", "1"]], ids=" ".join)
    def test_a_dir_holding_the_users_files_is_refused_not_wiped(
        self, tmp_path: Path, command: list[str]
    ) -> None:
        (tmp_path / "notes.txt").write_text("mine")
        result = taskq(*command, "--dir", str(tmp_path), env=command_env())
        assert result.returncode == 2 and "Traceback" not in result.stderr
        assert f"taskq {command[0]}: --dir '{tmp_path}' holds files a taskq run did not " \
               "write" in result.stderr
        assert [p.name for p in tmp_path.iterdir()] == ["notes.txt"]

    @pytest.mark.parametrize(("sent", "status"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)],
                             ids=["SIGINT", "SIGTERM"])
    def test_a_stop_signal_ends_the_demo_promptly_as_that_signal_and_leaves_nothing_running(
        self, tmp_path: Path, marker: str, started: list[subprocess.Popen[bytes]],
        sent: signal.Signals, status: int,
    ) -> None:
        workdir, out = tmp_path / "demo", tmp_path / "demo.out"
        with open(out, "wb") as log:
            demo = subprocess.Popen(
                [sys.executable, "-m", "taskq", "demo", "--tasks", "300", "--dir", str(workdir)],
                env=command_env(TASKQ_TEST_MARKER=marker), stdout=log, stderr=subprocess.STDOUT,
            )  # fmt: skip
        started.append(demo)
        under_way = re.compile(rb"completed +[1-9]")
        wait_until(lambda: bool(under_way.search(out.read_bytes())), 30, "tasks to complete")
        assert len(processes_of(workdir, marker)) >= 4  # demo, redis-server, 3 workers

        demo.send_signal(sent)
        interrupted = time.monotonic()
        assert demo.wait(timeout=15) == status, out.read_text()
        assert time.monotonic() - interrupted < 10
        assert "Traceback" not in out.read_text()
        assert "the guarantees" not in out.read_text()
        assert processes_of(workdir, marker) == []


def sleepers(n: int, started: list[subprocess.Popen[bytes]]) -> list[subprocess.Popen[bytes]]:
    """`n` live processes to stand for the demo's workers, killed after the test."""
    workers = [subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
               for _ in range(n)]
    started.extend(workers)
    return workers


class TestTheKilledWorker:
    def test_is_the_one_that_held_the_most_tasks_and_the_note_says_how_many(
        self, broker: Broker, started: list[subprocess.Popen[bytes]]
    ) -> None:
        workers = sleepers(3, started)
        presence = Presence(worker_id="w", host="h", pid=0, queues=[broker.queue],
                            concurrency=8, tasks=[], version="0")
        for i, in_hand in enumerate([1, 5, 2]):
            register(broker, dataclasses.replace(presence, worker_id=f"w{i}",
                                                 pid=workers[i].pid), in_hand=in_hand, ttl=30)
        victim, held = busiest(broker, workers, random.Random(7))
        assert victim == 1
        assert held.startswith("holding 5 task(s) at its last heartbeat: their leases")

    def test_that_held_none_is_said_to_hold_none(
        self, broker: Broker, started: list[subprocess.Popen[bytes]]
    ) -> None:
        workers = sleepers(2, started)
        victim, held = busiest(broker, workers, random.Random(7))
        assert victim in (0, 1)
        assert held == "holding no task at its last heartbeat"
