"""The `taskq` command: each subcommand in-process, and the real thing as subprocesses."""

from __future__ import annotations

import json
import re
import signal
import socket
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import redis

import taskq as taskq_package
from cli_support import CONFIG_VARIABLES, command_env, processes_of, states, taskq
from helpers import lease_one, record_of
from taskq import registry
from taskq.broker import Broker
from taskq.bulk import Bulk
from taskq.cli import main, parser
from taskq.cli.dlq import left_note
from taskq.cli.serve import listen
from taskq.errors import ConfigError
from taskq.flows import Flows, StageSpec
from taskq.results import Failure
from taskq.schedules import make_schedule
from taskq.settings import Settings, Simulation, child_environment
from taskq.shards import SHARDS_KEY, Layout, register
from taskq.tools.embedded import free_port
from taskq.tools.ledger import Ledger
from waiting import wait_until


@pytest.fixture
def env(settings: Settings, client: redis.Redis, monkeypatch: pytest.MonkeyPatch,
        ledger_path: Path) -> Settings:
    """Point in-process commands at the test Redis and a fresh ledger; queue 'default'."""
    for variable in CONFIG_VARIABLES:
        monkeypatch.delenv(variable, raising=False)
    monkeypatch.setenv("REDIS_URL", settings.redis_url)
    monkeypatch.setenv("LEDGER_PATH", str(ledger_path))
    return settings


@pytest.fixture
def queue(env: Settings, client: redis.Redis) -> Broker:
    """The CLI's default queue, which the commands here use when given no --queue."""
    return Broker(client, "default")


def make_dead(broker: Broker, task_id: str, error: str) -> None:
    broker.enqueue(task_id, max_retries=0, name="tests.fails")
    leased = broker.lease("w", 30)
    assert leased is not None and leased[0] == task_id
    assert broker.fail(task_id, leased[1], error).status == "dead"


class TestEnqueue:
    def test_enqueue_creates_the_tasks_and_says_how_many(
        self, queue: Broker, capsys: pytest.CaptureFixture[str]
    ) -> None:
        assert main(["enqueue", "3"]) == 0
        assert "enqueued 3 new task(s) on queue 'default'" in capsys.readouterr().out
        assert queue.counts().ready == 3

    def test_a_second_run_with_the_same_idempotency_prefix_creates_nothing(
        self, queue: Broker, capsys: pytest.CaptureFixture[str]
    ) -> None:
        assert main(["enqueue", "5", "--idempotency-prefix", "p"]) == 0
        assert "enqueued 5 new task(s)" in capsys.readouterr().out
        assert main(["enqueue", "5", "--idempotency-prefix", "p"]) == 0
        out = capsys.readouterr().out
        assert "enqueued 0 new task(s)" in out
        assert "5 duplicate(s) created nothing" in out
        assert queue.counts().ready == 5

    def test_an_empty_idempotency_prefix_is_refused_not_taken_as_none(
        self, queue: Broker, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """An unset shell variable (`--idempotency-prefix "$BATCH"`): taken as no
        prefix, each run enqueued the tasks again."""
        assert main(["enqueue", "3", "--idempotency-prefix", ""]) == 2
        assert "--idempotency-prefix is empty" in capsys.readouterr().err
        assert queue.counts().ready == 0

    def test_options_reach_the_task(self, env: Settings, client: redis.Redis) -> None:
        kwargs = '{"x": [1], "who": "zoë"}'
        assert main(["enqueue", "1", "--queue", "other", "--delay", "30", "--max-retries",
                     "7", "--name", "my.task", "--kwargs", kwargs, "--charge", "4",
                     "--priority", "8"]) == 0
        other = Broker(client, "other")
        assert (other.counts().ready, other.counts().delayed) == (0, 1)
        [task_id] = [str(i) for i in client.zrange(other.keys.delayed, 0, -1)]
        record = other.task(task_id)
        assert record is not None
        assert (record.name, record.max_retries, record.priority) == ("my.task", 7, 8)
        assert other.payload(task_id)["kwargs"] == {"x": [1], "who": "zoë", "charge": 4}

    @pytest.mark.parametrize(
        ("argv", "message"),
        [
            (["--kwargs", "notjson"], "--kwargs is not valid JSON"),
            (["--kwargs", "[" * 100_000 + "]" * 100_000], "--kwargs is not valid JSON: it nests"),
            (["--kwargs", "[1, 2]"], "--kwargs must be a JSON object"),
            # Read as its last value, the first dropped without a word.
            (["--kwargs", '{"amount": 1, "amount": 1000000}'],
             "--kwargs is not valid JSON: key 'amount' is given twice"),
            (["--kwargs", '{"to": {"id": 1, "id": 2}}'],
             "--kwargs is not valid JSON: key 'id' is given twice"),
            (["-1"], "count must be a whole number of tasks between 0 and 1000000, not -1"),
            (["--queue", "no spaces"], "--queue: invalid queue name 'no spaces'"),
            (["--priority", "10"], "priority must be"),
            (["--charge", "9" * 23], "the charge must be a whole number of at most"),
            (["--kwargs", '{"charge": 1e20}'], "the charge must be a whole number"),
        ],
    )
    def test_bad_input_exits_2_with_a_clear_message_and_creates_nothing(
        self, queue: Broker, capsys: pytest.CaptureFixture[str], argv: list[str], message: str
    ) -> None:
        assert main(["enqueue", *argv]) == 2
        assert message in capsys.readouterr().err
        assert queue.counts().ready == 0

    def test_a_count_that_is_not_a_number_is_a_usage_error(
        self, env: Settings, capsys: pytest.CaptureFixture[str]
    ) -> None:
        with pytest.raises(SystemExit) as caught:
            main(["enqueue", "many"])
        assert caught.value.code == 2
        assert "invalid int value: 'many'" in capsys.readouterr().err

    def test_an_id_that_starts_with_a_dash_is_read_after_two_and_the_error_says_so(
        self, queue: Broker, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """Task ids may start with '-', which argparse reads as an option: it said only
        that the ID was missing."""
        queue.enqueue("-json")
        with pytest.raises(SystemExit) as caught:
            main(["task", "-json"])
        assert caught.value.code == 2
        assert ("the following arguments are required: ID; an ID that starts with '-' goes "
                "after '--', as in `taskq task -- -a1`") in capsys.readouterr().err
        assert main(["task", "--", "-json"]) == 0
        assert "-json" in capsys.readouterr().out

    def test_a_bad_setting_in_the_environment_exits_2_naming_it(
        self, env: Settings, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
    ) -> None:
        monkeypatch.setenv("LEASE_SECONDS", "soon")
        assert main(["enqueue", "1"]) == 2
        assert "LEASE_SECONDS='soon'" in capsys.readouterr().err


class TestDlq:
    def test_an_empty_dlq_says_so(self, queue: Broker, capsys: pytest.CaptureFixture[str]) -> None:
        assert main(["dlq"]) == 0
        assert "the DLQ of queue 'default' is empty" in capsys.readouterr().out

    def test_dlq_lists_dead_tasks_with_their_errors(
        self, queue: Broker, capsys: pytest.CaptureFixture[str]
    ) -> None:
        make_dead(queue, "d1", "ValueError: first broke")
        make_dead(queue, "d2", "KeyError: second broke")
        assert main(["dlq"]) == 0
        out = capsys.readouterr().out
        assert "2 dead task(s) on queue 'default'" in out
        assert out.index("d2") < out.index("d1")
        assert "ValueError: first broke" in out and "KeyError: second broke" in out
        assert "tests.fails" in out

    def test_retry_moves_the_named_task_back_to_ready(
        self, queue: Broker, capsys: pytest.CaptureFixture[str]
    ) -> None:
        make_dead(queue, "d1", "boom")
        make_dead(queue, "d2", "boom")
        assert main(["dlq", "retry", "d1"]) == 0
        assert "moved 1 task(s) back to ready" in capsys.readouterr().out
        assert queue.dead() == ["d2"]
        assert queue.counts().ready == 1

    def test_retry_all_moves_every_dead_task_back(
        self, queue: Broker, capsys: pytest.CaptureFixture[str]
    ) -> None:
        for i in range(3):
            make_dead(queue, f"d{i}", "boom")
        assert main(["dlq", "retry", "--all"]) == 0
        assert "moved 3 task(s) back to ready" in capsys.readouterr().out
        assert (queue.counts().ready, queue.counts().dead) == (3, 0)

    def test_all_asks_first_on_a_terminal_and_does_nothing_unless_told_yes(
        self, queue: Broker, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch,
    ) -> None:
        for i in range(2):
            make_dead(queue, f"d{i}", "boom")
        answers = iter(["n", "y"])
        monkeypatch.setattr("sys.stdin.isatty", lambda: True)
        monkeypatch.setattr("builtins.input", lambda prompt: (print(prompt), next(answers))[1])
        assert main(["dlq", "retry", "--all"]) == 1
        out = capsys.readouterr().out
        assert ("send back to ready: up to 1000 of the 2 dead task(s) of queue 'default'? "
                "[y/N]") in out
        assert "nothing done" in out and queue.counts().dead == 2
        assert main(["dlq", "cancel", "--all"]) == 0
        assert "cancelled 2 dead task(s)" in capsys.readouterr().out
        assert queue.counts().dead == 0
        make_dead(queue, "d9", "boom")
        assert main(["dlq", "retry", "--all", "--yes"]) == 0  # no question asked
        assert "moved 1 task(s) back to ready" in capsys.readouterr().out

    def test_ctrl_d_at_the_question_is_no(
        self, queue: Broker, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch,
    ) -> None:
        make_dead(queue, "d1", "boom")

        def ctrl_d(prompt: str) -> str:
            raise EOFError

        monkeypatch.setattr("sys.stdin.isatty", lambda: True)
        monkeypatch.setattr("builtins.input", ctrl_d)
        assert main(["dlq", "retry", "--all"]) == 1
        assert "nothing done" in capsys.readouterr().out and queue.counts().dead == 1

    def test_an_output_that_cannot_hold_an_error_s_characters_gets_them_escaped(
        self, queue: Broker, settings: Settings
    ) -> None:
        make_dead(queue, "d1", "échec — ✗")
        env = command_env(REDIS_URL=settings.redis_url, PYTHONIOENCODING="ascii")
        done = taskq("dlq", env=env)
        assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
        assert "\\xe9chec \\u2014 \\u2717" in done.stdout, done.stdout

    def test_retrying_a_dead_workflow_step_says_its_workflow_does_not_resume(
        self, queue: Broker, capsys: pytest.CaptureFixture[str]
    ) -> None:
        no_args = '{"args":[],"kwargs":{}}'
        assert Flows(queue).start("etl", [
            StageSpec(((name, no_args, 0, "", 5, ""),), group=False, policy="fail")
            for name in ("extract", "load", "report")])
        assert queue.ack(*lease_one(queue), "1")
        assert queue.fail(*lease_one(queue), "gone in this deploy").status == "dead"
        make_dead(queue, "d1", "boom")
        assert main(["dlq", "retry", "etl.2.1", "d1"]) == 0
        out = capsys.readouterr().out
        assert "moved 2 task(s) back to ready" in out
        assert "1 of them is a workflow step: a step's death already failed its workflow" in out
        assert "no workflow resumes" in out
        assert "    workflow 'etl': etl.2.1\n" in out and "d1" not in out

    def test_retrying_an_unknown_id_exits_1_saying_it_is_not_in_the_dlq(
        self, queue: Broker, capsys: pytest.CaptureFixture[str]
    ) -> None:
        make_dead(queue, "d1", "boom")
        assert main(["dlq", "retry", "d1", "nosuch"]) == 1
        out = capsys.readouterr().out
        assert "moved 1 task(s) back to ready" in out
        assert "nosuch: not in the DLQ" in out

    @pytest.mark.parametrize(("action", "said"), [
        ("retry", "moved 1 task(s) back to ready"), ("cancel", "cancelled 1 dead task(s)")])
    def test_an_id_given_twice_is_acted_on_once_and_not_said_missing(
        self, queue: Broker, capsys: pytest.CaptureFixture[str], action: str, said: str
    ) -> None:
        make_dead(queue, "d1", "boom")
        assert main(["dlq", action, "d1", "d1"]) == 0
        out = capsys.readouterr().out
        assert said in out and "not in the DLQ" not in out

    def test_retry_needs_ids_or_all_but_not_both(
        self, queue: Broker, capsys: pytest.CaptureFixture[str]
    ) -> None:
        assert main(["dlq", "retry"]) == 2
        assert main(["dlq", "retry", "x", "--all"]) == 2
        assert main(["dlq", "cancel"]) == 2
        assert capsys.readouterr().err.count("give task ids or --all") == 3

    def test_a_listing_shows_the_most_recent_up_to_its_limit(
        self, queue: Broker, capsys: pytest.CaptureFixture[str]
    ) -> None:
        for i in range(5):
            make_dead(queue, f"d{i}", "boom")
        assert main(["dlq", "--limit", "2"]) == 0
        out = capsys.readouterr().out
        assert "the 2 most recent of 5 dead task(s) on queue 'default'" in out
        assert "d4" in out and "d3" in out and "d2" not in out
        assert main(["dlq", "--limit", "0"]) == 2
        assert "--limit must be a whole number of tasks between 1 and 100000" in (
            capsys.readouterr().err)


class TestRecordsChangedByHand:
    def test_bytes_that_are_no_utf8_are_listed_replaced(
        self, queue: Broker, client: redis.Redis, capsys: pytest.CaptureFixture[str]
    ) -> None:
        make_dead(queue, "d1", "boom")
        client.hset(queue.keys.task("d1"), mapping={"last_error": b"\xff\xfeoops",
                                                    "name": b"tests.\xfffails"})
        assert main(["dlq"]) == 0
        assert "\ufffd\ufffdoops" in capsys.readouterr().out
        assert main(["task", "d1"]) == 0
        assert "tests.\ufffdfails" in capsys.readouterr().out

    def test_a_time_past_the_years_a_date_holds_is_shown_as_its_number(
        self, queue: Broker, client: redis.Redis, capsys: pytest.CaptureFixture[str]
    ) -> None:
        make_dead(queue, "d1", "boom")
        client.hset(queue.keys.task("d1"), mapping={"dead_at": "99999999999999999",
                                                    "created_at": "1e300"})
        assert main(["dlq"]) == 0
        assert "dead_at=99999999999999999 ms (past the years a date holds)" in (
            capsys.readouterr().out)
        assert main(["task", "d1"]) == 0
        assert "past the years a date holds" in capsys.readouterr().out


    def test_an_entry_that_is_no_task_id_stops_no_listing_or_bulk_retry(
        self, queue: Broker, client: redis.Redis, capsys: pytest.CaptureFixture[str]
    ) -> None:
        make_dead(queue, "ok1", "boom")
        client.lpush(queue.keys.dlq, "weird{id}")
        make_dead(queue, "ok2", "boom")
        assert main(["dlq"]) == 0
        out = capsys.readouterr().out
        assert "ok1" in out and "ok2" in out and "'weird{id}'  (no task id" in out
        assert main(["dlq", "retry", "--all", "--yes"]) == 0
        out = capsys.readouterr().out
        assert "moved 2 task(s) back to ready" in out
        assert ("1 entry no task's (no task id, a record of another type, or none), left "
                "as it is: 'weird{id}'") in out
        assert queue.dead() == ["weird{id}"]

    def test_an_entry_whose_record_holds_another_type_stops_no_listing_or_bulk_retry(
        self, queue: Broker, client: redis.Redis, capsys: pytest.CaptureFixture[str]
    ) -> None:
        for task_id in ("ok1", "odd", "ok2"):
            make_dead(queue, task_id, "boom")
        client.delete(queue.keys.task("odd"))
        client.rpush(queue.keys.task("odd"), "not taskq's")
        assert main(["dlq"]) == 0
        out = capsys.readouterr().out
        assert "ok1" in out and "ok2" in out and "odd  (its record's key holds another" in out
        assert main(["dlq", "retry", "--all", "--yes"]) == 0
        out = capsys.readouterr().out
        assert "moved 2 task(s) back to ready" in out and "left as it is: 'odd'" in out
        assert queue.dead() == ["odd"]

    def test_a_block_of_entries_with_no_record_at_the_newest_end_is_stepped_past(
        self, queue: Broker, client: redis.Redis, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """Read again from the newest end, 1,000 of them would stop every bulk run."""
        for task_id in ("ok1", "ok2"):
            make_dead(queue, task_id, "boom")
        client.lpush(queue.keys.dlq, *(f"gone-{i}" for i in range(1500)))
        assert main(["dlq", "retry", "--all", "--yes"]) == 0
        out = capsys.readouterr().out
        assert "moved 2 task(s) back to ready" in out and "had left" not in out
        assert "1500 entries no task's (no task id, a record of another type, or none)" in out
        assert out.rstrip().endswith("'gone-1490' and 1490 more")
        assert len(queue.dead()) == 1500 and queue.counts().ready == 2

    def test_a_run_that_leaves_dead_tasks_says_how_many_the_next_takes_from_each_shard(
        self
    ) -> None:
        left = Bulk(done=[], missed=[], left=1500)
        assert left_note(left) == "; 1500 still dead (run it again for up to 1000)"
        assert left_note(left, shards=3) == (
            "; 1500 still dead (run it again for up to 1000 from each of 3 shards)")


class TestShardedQueue:
    """Operator commands on a sharded queue, from a shell that does not set TASKQ_SHARDS:
    the layout Redis holds says where each task is."""

    @pytest.fixture
    def shards(self, env: Settings, client: redis.Redis) -> dict[str, Broker]:
        layout = Layout.of("sq", 3)
        register(client, layout)
        brokers = {name: Broker(client, name) for name in layout.shards}
        for i in range(6):
            task_id = f"t{i}"
            make_dead(brokers[layout.shard_of(task_id)], task_id, f"boom {i}")
            time.sleep(0.002)  # each dies in a later millisecond of Redis time
        return brokers

    def test_the_dlq_lists_every_shards_dead_tasks_newest_first(
        self, shards: dict[str, Broker], capsys: pytest.CaptureFixture[str]
    ) -> None:
        assert len({b.queue for b in shards.values() if b.dead()}) > 1
        assert main(["dlq", "--queue", "sq"]) == 0
        out = capsys.readouterr().out
        assert "6 dead task(s) on queue 'sq' (3 shards), most recent first:" in out
        listed = re.findall(r"^  (t\d)  ", out, re.MULTILINE)
        assert listed == ["t5", "t4", "t3", "t2", "t1", "t0"]

    def test_a_task_is_shown_cancelled_and_retried_on_its_shard(
        self, shards: dict[str, Broker], capsys: pytest.CaptureFixture[str]
    ) -> None:
        assert main(["task", "t1", "--queue", "sq"]) == 0
        assert "state            dead" in capsys.readouterr().out
        assert main(["dlq", "retry", "t1", "t2", "--queue", "sq"]) == 0
        assert "moved 2 task(s) back to ready" in capsys.readouterr().out
        assert main(["cancel", "t1", "--queue", "sq"]) == 0
        assert "t1: cancelled (it was pending)" in capsys.readouterr().out
        assert main(["dlq", "cancel", "--all", "--yes", "--queue", "sq"]) == 0
        assert "cancelled 4 dead task(s)" in capsys.readouterr().out
        assert all(b.dead() == [] for b in shards.values())

    def test_workers_lists_the_workers_registered_on_the_shards(
        self, shards: dict[str, Broker], capsys: pytest.CaptureFixture[str]
    ) -> None:
        presence = registry.Presence(worker_id="box-42-0a1b2c3d", host="box", pid=42,
                                     concurrency=4, queues=("sq",), tasks=("t",),
                                     version="0.1.0")
        for broker in shards.values():
            registry.register(broker, presence, in_hand=1, ttl=30)
        assert main(["workers", "--queue", "sq"]) == 0
        assert "1 live worker(s) on queue 'sq':" in capsys.readouterr().out

    def test_a_layout_naming_no_queue_is_refused_naming_where_it_is(
        self, shards: dict[str, Broker], client: redis.Redis,
        capsys: pytest.CaptureFixture[str]
    ) -> None:
        client.hset(SHARDS_KEY, "sq", "sq~0,bad name,sq~2")
        assert main(["dlq", "--queue", "sq"]) == 2
        err = capsys.readouterr().err
        assert "the layout of queue 'sq' in Redis names a shard no queue name can be" in err
        assert "HDEL taskq:shards sq" in err

    def test_history_merges_every_shards_ended_tasks(
        self, shards: dict[str, Broker], capsys: pytest.CaptureFixture[str]
    ) -> None:
        assert main(["history", "--queue", "sq"]) == 0
        out = capsys.readouterr().out
        assert "6 ended task(s) on queue 'sq', newest first (every shard's whole log)" in out


class TestOptionPlacement:
    def test_version_prints_the_package_version(
        self, capsys: pytest.CaptureFixture[str]
    ) -> None:
        with pytest.raises(SystemExit) as done:
            main(["--version"])
        assert done.value.code == 0
        assert capsys.readouterr().out.strip() == f"taskq {taskq_package.__version__}"

    @pytest.mark.parametrize("argv", [
        ["--log-level", "DEBUG", "worker"], ["worker", "--log-level", "DEBUG"],
        ["--log-level", "ERROR", "dlq", "--log-level", "DEBUG"],
    ])
    def test_the_log_level_is_taken_before_or_after_the_command(self, argv: list[str]) -> None:
        assert parser().parse_args(argv).log_level == "DEBUG"
        assert parser().parse_args([argv[0] if argv[0] != "--log-level" else argv[2]]
                                   ).log_level == "INFO"

    @pytest.mark.parametrize("argv", [
        ["dlq", "retry", "--queue", "emails", "--all"],
        ["dlq", "--queue", "emails", "retry", "--all"],
        ["dlq", "--queue", "other", "retry", "--queue", "emails", "--all"],
    ])
    def test_the_queue_is_taken_before_or_after_the_dlq_action(
        self, env: Settings, client: redis.Redis, queue: Broker, argv: list[str],
        capsys: pytest.CaptureFixture[str],
    ) -> None:
        emails = Broker(client, "emails")
        make_dead(emails, "e1", "boom")
        make_dead(queue, "d1", "boom")
        assert main(argv) == 0
        assert "moved 1 task(s) back to ready" in capsys.readouterr().out
        assert (emails.counts().ready, emails.counts().dead) == (1, 0)
        assert queue.dead() == ["d1"]

    @pytest.mark.processes
    def test_an_app_is_imported_from_the_current_directory(
        self, settings: Settings, client: redis.Redis, tmp_path: Path
    ) -> None:
        """`taskq ... --app mytasks:app` run from mytasks.py's folder, no PYTHONPATH."""
        (tmp_path / "mytasks_cwd.py").write_text(
            "from datetime import timedelta\n"
            "from taskq import App\n"
            "app = App(queue='mine')\n"
            "@app.periodic(every=timedelta(minutes=5))\n"
            "def tidy() -> None: ...\n")
        env = command_env(REDIS_URL=settings.redis_url)
        env.pop("PYTHONPATH", None)
        # The installed command, as a user runs it: `python -m` would put the current
        # directory first on the path by itself.
        command = str(Path(sys.executable).parent / "taskq")
        done = subprocess.run([command, "schedules", "--app", "mytasks_cwd:app"],
                              cwd=tmp_path, env=env,
                              capture_output=True, text=True, timeout=30, check=False)
        assert done.returncode == 0, done.stderr
        assert "1 schedule(s) on queue 'mine'" in done.stdout
        assert "mytasks_cwd.tidy" in done.stdout


class TestCancel:
    def test_each_task_is_cancelled_or_told_why_not(
        self, queue: Broker, capsys: pytest.CaptureFixture[str]
    ) -> None:
        queue.enqueue("waiting", delay=60)
        queue.enqueue("held")
        assert queue.lease("w", 30) is not None
        assert main(["cancel", "waiting", "held", "nosuch"]) == 1
        out = capsys.readouterr().out
        assert "waiting: cancelled (it was delayed)" in out
        assert "held: cancel requested: it is running" in out
        assert "nosuch: unknown: no task with this id on queue 'default'" in out
        assert main(["cancel", "waiting", "held"]) == 0
        out = capsys.readouterr().out
        assert "waiting: unchanged: it has ended (cancelled)" in out
        assert "held: unchanged: its cancel was requested already" in out

    def test_the_tasks_cancelled_before_one_that_fails_are_said(
        self, queue: Broker, client: redis.Redis, capsys: pytest.CaptureFixture[str]
    ) -> None:
        for task_id in ("c-0", "c-1", "c-2"):
            queue.enqueue(task_id)
        # c-1 names a workflow whose key holds another type: its cancel is refused.
        client.hset(queue.keys.task("c-1"), "flow", "f1")
        client.set(queue.keys.flow("f1"), "not a workflow")
        assert main(["cancel", "c-0", "c-1", "c-2"]) == 2
        captured = capsys.readouterr()
        assert captured.out == "c-0: cancelled (it was pending)\n"
        assert "Redis could not cancel a task" in captured.err
        assert record_of(queue, "c-2").state == "pending"

    def test_a_task_not_where_its_state_says_is_told_so_not_called_ended(
        self, queue: Broker, client: redis.Redis, capsys: pytest.CaptureFixture[str]
    ) -> None:
        queue.enqueue("stray")
        client.delete(queue.keys.ready)  # its list lost, its record kept
        assert main(["cancel", "stray"]) == 0
        assert ("stray: unchanged: its record says pending, but it is not where a pending "
                "task waits") in capsys.readouterr().out

    @pytest.mark.parametrize("command", [["cancel"], ["dlq", "cancel"], ["dlq", "retry"]],
                             ids=" ".join)
    def test_a_malformed_id_among_several_stops_the_command_before_it_acts_on_any(
        self, command: list[str], queue: Broker, capsys: pytest.CaptureFixture[str]
    ) -> None:
        make_dead(queue, "d1", "boom")
        queue.enqueue("waiting")
        with pytest.raises(SystemExit) as stopped:
            main([*command, "d1", "waiting", "bad!id"])
        assert stopped.value.code == 2
        assert "argument ID: invalid task id 'bad!id': use 1-128 letters" in \
            capsys.readouterr().err
        assert [queue.handle(t).status() for t in ("d1", "waiting")] == ["dead", "pending"]

    def test_dlq_cancel_ends_dead_tasks_and_no_others(
        self, queue: Broker, capsys: pytest.CaptureFixture[str]
    ) -> None:
        make_dead(queue, "d1", "boom")
        make_dead(queue, "d2", "boom")
        queue.enqueue("waiting")
        assert main(["dlq", "cancel", "d1", "waiting"]) == 1
        out = capsys.readouterr().out
        assert "cancelled 1 dead task(s)" in out and "waiting: not in the DLQ" in out
        assert queue.dead() == ["d2"]
        assert [queue.handle(t).status() for t in ("d1", "waiting")] == ["cancelled", "pending"]
        assert main(["dlq", "cancel", "--all"]) == 0
        assert queue.dead() == []
        assert main(["dlq", "cancel"]) == 2


class TestTask:
    def test_a_completed_task_shows_its_record_result_and_events(
        self, queue: Broker, capsys: pytest.CaptureFixture[str]
    ) -> None:
        queue.enqueue("sum", name="jobs.add", payload={"args": [1, 2]})
        leased = queue.lease("w-1", 30)
        assert leased is not None
        assert queue.ack("sum", leased[1], '{"total":3,"who":"zoë"}')
        record = queue.task("sum")
        assert record is not None
        assert main(["task", "sum"]) == 0
        out = capsys.readouterr().out
        assert out.startswith("task sum on queue 'default'\n")
        for line in ("  state            completed", "  name             jobs.add",
                     "  priority         5 (default)",
                     "  attempts         1 (retries 0 of 3)", "  worker           w-1",
                     '  payload          {"args":[1,2]}',
                     "result (24 bytes):\n  {\n    \"total\": 3,\n    \"who\": \"zoë\"\n  }\n",
                     "events (3, oldest first):"):
            assert line in out, line
        completed = datetime.fromtimestamp(record.completed_at / 1000, UTC)
        assert f"  completed        {completed:%Y-%m-%dT%H:%M:%S.}" in out
        events = [line.split()[2] for line in out.splitlines() if line.startswith("  #")]
        assert events == ["enqueued", "leased", "completed"]
        assert "error" not in out

    def test_a_running_task_shows_its_runs_progress_and_its_event(
        self, queue: Broker, capsys: pytest.CaptureFixture[str]
    ) -> None:
        queue.enqueue("import")
        leased = queue.lease("w-1", 30)
        assert leased is not None
        assert main(["task", "import"]) == 0
        assert "progress" not in capsys.readouterr().out.split("events")[0]
        assert queue.progress("import", leased[1], 0.42, "42 of 100 rows")
        assert main(["task", "import"]) == 0
        out = capsys.readouterr().out
        assert "  progress         42% (42 of 100 rows)" in out
        events = [line.split()[2] for line in out.splitlines() if line.startswith("  #")]
        assert events == ["enqueued", "leased", "progress"]

    def test_a_priority_other_than_the_default_is_shown_with_its_enqueued_event(
        self, queue: Broker, capsys: pytest.CaptureFixture[str]
    ) -> None:
        queue.enqueue("urgent", priority=9)
        assert main(["task", "urgent"]) == 0
        lines = capsys.readouterr().out.splitlines()
        assert "  priority         9" in lines
        (enqueued,) = [line for line in lines if line.startswith("  #")]
        assert enqueued.split()[2] == "enqueued" and enqueued.endswith("  priority=9")

    def test_a_dead_task_shows_its_error_with_the_traceback(
        self, queue: Broker, capsys: pytest.CaptureFixture[str]
    ) -> None:
        queue.enqueue("doomed", max_retries=0)
        leased = queue.lease("w-1", 30)
        assert leased is not None
        trace = 'Traceback (most recent call last):\n  File "jobs.py", line 3\nKeyError: 7\n'
        queue.fail("doomed", leased[1], Failure("builtins.KeyError", "7", trace))
        assert main(["task", "doomed"]) == 0
        out = capsys.readouterr().out
        assert ("error of the last failed attempt: builtins.KeyError: 7\n"
                "  Traceback (most recent call last):\n    File \"jobs.py\", line 3\n"
                "  KeyError: 7\n") in out
        assert "  state            dead" in out and "result" not in out

    def test_json_prints_what_the_api_returns(
        self, queue: Broker, capsys: pytest.CaptureFixture[str]
    ) -> None:
        queue.enqueue("sum")
        leased = queue.lease("w-1", 30)
        assert leased is not None
        queue.ack("sum", leased[1], "[1, 2]")
        assert main(["task", "sum", "--json"]) == 0
        body = json.loads(capsys.readouterr().out)
        assert (body["task_id"], body["state"], body["result"]) == ("sum", "completed", [1, 2])
        assert [e["type"] for e in body["events"]] == ["enqueued", "leased", "completed"]
        assert body["priority"] == 5 and "priority" not in body["events"][0]

    def test_a_scan_that_stops_early_says_so(
        self, queue: Broker, capsys: pytest.CaptureFixture[str]
    ) -> None:
        queue.enqueue("old")
        for i in range(5):
            queue.enqueue(f"new-{i}")
        assert main(["task", "old", "--scan", "3"]) == 0
        out = capsys.readouterr().out
        assert "events: none found in the log" in out
        assert "the scan stopped after 3 log entries, before the task was enqueued" in out

    def test_control_characters_are_shown_escaped(
        self, queue: Broker, capsys: pytest.CaptureFixture[str]
    ) -> None:
        queue.enqueue("odd")
        assert queue.lease("w-\x1b[2J", 30) is not None
        assert main(["task", "odd"]) == 0
        out = capsys.readouterr().out
        assert "w-\\x1b[2J" in out and "\x1b" not in out

    def test_a_value_cannot_start_a_line_of_its_own(
        self, queue: Broker, capsys: pytest.CaptureFixture[str]
    ) -> None:
        # Any text is a valid idempotency key: read line by line, this one would say
        # the task waiting for its retry had completed.
        queue.enqueue("odd", idempotency_key="order-7\n  state            completed")
        leased = queue.lease("w-1", 30)
        assert leased is not None
        queue.fail("odd", leased[1], Failure("x.Boom", "no\n  state            dead"))
        assert main(["task", "odd"]) == 0
        lines = capsys.readouterr().out.splitlines()
        assert [line for line in lines if line.lstrip().startswith("state")] == [
            "  state            delayed"]
        assert "  idempotency key  order-7\\n  state            completed" in lines

    def test_a_result_keeps_to_its_lines_however_its_text_splits(
        self, queue: Broker, capsys: pytest.CaptureFixture[str]
    ) -> None:
        queue.enqueue("odd")
        leased = queue.lease("w-1", 30)
        assert leased is not None
        queue.ack("odd", leased[1], json.dumps(["a\u2028b \u202efdp.exe"], ensure_ascii=False))
        for argv in (["task", "odd"], ["task", "odd", "--json"]):
            assert main(argv) == 0
            out = capsys.readouterr().out
            assert "\u2028" not in out and "\u202e" not in out, argv
        assert json.loads(out)["result"] == ["a\u2028b \u202efdp.exe"]

    def test_a_deeply_nested_result_is_shown_as_stored_not_indented_past_it(
        self, queue: Broker, capsys: pytest.CaptureFixture[str]
    ) -> None:
        # Indented, each level adds two spaces to every line under it: 190 levels of
        # a list of 40 numbers would print about 200 times the stored text.
        value: Any = list(range(40))
        for _ in range(190):
            value = [value, list(range(40))]
        stored = json.dumps(value)
        queue.enqueue("deep")
        leased = queue.lease("w-1", 30)
        assert leased is not None
        queue.ack("deep", leased[1], stored)
        for argv in (["task", "deep"], ["task", "deep", "--json"]):
            assert main(argv) == 0
            assert len(capsys.readouterr().out) < 3 * len(stored), argv

    def test_a_missing_task_exits_1_with_one_line(
        self, queue: Broker, capsys: pytest.CaptureFixture[str]
    ) -> None:
        queue.register_queue()
        assert main(["task", "nosuch"]) == 1
        captured = capsys.readouterr()
        assert captured.out == ""
        assert captured.err.startswith("taskq task: no task 'nosuch' on queue 'default'")
        assert captured.err.count("\n") == 1

    def test_a_queue_redis_does_not_know_is_noted_beside_the_answer(
        self, queue: Broker, capsys: pytest.CaptureFixture[str]
    ) -> None:
        queue.register_queue()
        assert main(["task", "nosuch", "--queue", "emials"]) == 1
        note, answer = capsys.readouterr().err.splitlines()
        assert note == ("taskq: note: no task was ever sent to queue 'emials' and no worker "
                        "serves it (queues: default); check --queue or TASKQ_QUEUE")
        assert answer.startswith("taskq task: no task 'nosuch' on queue 'emials'")

    @pytest.mark.parametrize(
        ("argv", "message"),
        [
            (["bad id"], "taskq task: invalid task id 'bad id'"),
            (["x", "--scan", "-1"], "taskq task: --scan must be a whole number of events "
                                    "between 0 and 1000000, not -1"),
            (["x", "--queue", "no spaces"], "--queue: invalid queue name 'no spaces'"),
        ],
    )
    def test_bad_input_exits_2_with_a_clear_message(
        self, queue: Broker, capsys: pytest.CaptureFixture[str], argv: list[str], message: str
    ) -> None:
        assert main(["task", *argv]) == 2
        assert message in capsys.readouterr().err


class TestLedger:
    def test_a_clean_ledger_exits_0(
        self, env: Settings, ledger_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        Ledger(ledger_path).charge("t1", 1, "alice", 3)
        assert main(["ledger"]) == 0
        out = capsys.readouterr().out
        assert "1 charge(s) for 1 task(s), total 3" in out
        assert "no task was charged more than once" in out

    def test_a_mistyped_path_is_an_error_not_an_empty_ledger(
        self, env: Settings, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        assert main(["ledger", "--path", str(tmp_path / "typo.db")]) == 2
        assert f"no ledger at {tmp_path / 'typo.db'}" in capsys.readouterr().err
        assert not (tmp_path / "typo.db").exists()

    def test_double_charges_exit_1_and_are_listed(
        self, env: Settings, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        path = tmp_path / "other.db"
        ledger = Ledger(path, "none")
        for task_id, times in (("once", 1), ("twice", 2)):
            for token in range(times):
                ledger.charge(task_id, token, "alice", 1)
        assert main(["ledger", "--path", str(path)]) == 1
        out = capsys.readouterr().out
        assert "1 task(s) charged more than once" in out
        assert "twice: 2 times" in out
        assert "  once:" not in out


class TestWorkerOptions:
    @pytest.mark.parametrize(
        ("spec", "message"),
        [
            ("nosuch.module:app", "cannot import 'nosuch.module'"),
            ("json", "must look like 'package.module:app'"),
            ("json:dumps", "'dumps' is not a taskq.App"),
            ("json:nothing", "module 'json' has no attribute 'nothing'"),
            ("../first/mytasks:app", "is no module name: give the module's dotted name"),
            ("broken_syntax:app", "raised SyntaxError at "),
            ("raises_at_import:app", "raised RuntimeError at "),
            ("no_tasks:app", "declares no tasks"),
            # Its own command line run as it is imported: the worker exited 0, saying
            # nothing.
            ("exits_at_import:app", "importing 'exits_at_import' called sys.exit(0) at "),
            # A module's __getattr__ that fails: a traceback, and exit 1.
            ("lazy_app:app", "reading 'app' of 'lazy_app' raised ValueError at "),
        ],
    )
    def test_an_app_that_cannot_be_loaded_exits_2_with_a_clear_message(
        self, env: Settings, capsys: pytest.CaptureFixture[str], spec: str, message: str,
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        (tmp_path / "broken_syntax.py").write_text("import taskq\napp = taskq.App(\n")
        (tmp_path / "raises_at_import.py").write_text("raise RuntimeError('no config')\n")
        (tmp_path / "no_tasks.py").write_text("import taskq\napp = taskq.App()\n")
        (tmp_path / "exits_at_import.py").write_text("import sys\nsys.exit(0)\n")
        (tmp_path / "lazy_app.py").write_text(
            "def __getattr__(name):\n    raise ValueError('no settings for ' + name)\n")
        monkeypatch.chdir(tmp_path)
        assert main(["worker", "--app", spec]) == 2
        err = capsys.readouterr().err
        assert err.startswith("taskq worker: --app")
        assert message in err and len(err.splitlines()) == 1

    @pytest.mark.parametrize("queues", ["high,,low", "high:0,low", "high,low,high"])
    def test_a_queue_list_that_cannot_be_used_exits_2_with_a_clear_message(
        self, env: Settings, capsys: pytest.CaptureFixture[str], queues: str
    ) -> None:
        assert main(["worker", "--queue", queues]) == 2
        assert capsys.readouterr().err.startswith(f"taskq worker: --queue {queues!r}: ")


class TestDashboard:
    def test_once_prints_every_queue_with_its_counts_and_dlq_errors(
        self, queue: Broker, client: redis.Redis, capsys: pytest.CaptureFixture[str]
    ) -> None:
        make_dead(queue, "gone", "RuntimeError: out of luck")
        for i in range(3):
            queue.enqueue(f"r{i}")
        queue.enqueue("later", delay=60)
        Broker(client, "second").enqueue("s1")
        assert main(["dashboard", "--once"]) == 0
        out = capsys.readouterr().out
        assert "queue default   ready 3   leased 0   delayed 1   dead 1" in out
        assert "queue second   ready 1   leased 0   delayed 0   dead 0" in out
        assert "RuntimeError: out of luck" in out
        assert "later" in out

    def test_once_shows_each_schedule_fired_on_a_queue_and_a_dead_tasks_error_type(
        self, queue: Broker, capsys: pytest.CaptureFixture[str]
    ) -> None:
        queue.fire(make_schedule(name="nightly", task="jobs.report", cron="0 3 * * *",
                                 every=None, tz="UTC", args=(), kwargs={}, policy="skip",
                                 grace=timedelta(minutes=1), max_retries=0))
        queue.enqueue("slow", max_retries=0)
        leased = queue.lease("w", 30)
        assert leased is not None
        queue.fail("slow", leased[1], Failure("taskq.errors.TimeLimitExceeded", "too slow"))
        assert main(["dashboard", "--once"]) == 0
        out = capsys.readouterr().out
        # Seconds alone in the last minute before 03:00 UTC.
        assert re.search(r"\n    nightly +jobs\.report +in (\d+[hm] \d\d[ms]|\d+\.\ds)\n", out), out
        assert "cron '0 3 * * *' (UTC)  policy skip  last tick " in out
        assert "retries 0  taskq.simulate  taskq.errors.TimeLimitExceeded\n" in out

    def test_once_with_a_queue_shows_only_that_queue(
        self, queue: Broker, client: redis.Redis, capsys: pytest.CaptureFixture[str]
    ) -> None:
        queue.enqueue("r1")
        Broker(client, "second").enqueue("s1")
        assert main(["dashboard", "--once", "--queue", "second"]) == 0
        out = capsys.readouterr().out
        assert "queue second" in out and "queue default" not in out


@pytest.fixture
def worker_env(env: Settings, marker: str, ledger_path: Path) -> dict[str, str]:
    settings = Settings.from_env({}, redis_url=env.redis_url, lease_seconds=2.0,
                                 poll_seconds=0.2)
    return child_environment(settings, Simulation(work_seconds=0.0, ledger_path=str(ledger_path)),
                             TASKQ_TEST_MARKER=marker)


class TestRealProcesses:
    def test_output_cut_off_by_its_reader_ends_quietly(
        self, queue: Broker, worker_env: dict[str, str]
    ) -> None:
        for i in range(150):  # a listing well past what a pipe holds unread
            make_dead(queue, f"d{i}", "boom " * 400)
        with subprocess.Popen([sys.executable, "-m", "taskq", "dlq"], env=worker_env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE) as listing:
            assert listing.stdout is not None and listing.stderr is not None
            assert listing.stdout.readline().startswith(b"the 100 most recent of 150")
            listing.stdout.close()  # as `| head -1` does
            assert listing.wait(timeout=30) == 141
            assert listing.stderr.read() == b""


    def test_a_worker_process_runs_everything_the_enqueue_command_sent(
        self,
        queue: Broker,
        env: Settings,
        worker_env: dict[str, str],
        tmp_path: Path,
        started: list[subprocess.Popen[bytes]],
    ) -> None:
        sent = taskq("enqueue", "10", "--charge", "1", env=worker_env)
        assert sent.returncode == 0, sent.stderr
        assert "enqueued 10 new task(s)" in sent.stdout
        before = taskq("dashboard", "--once", env=worker_env)
        assert "queue default   ready 10   leased 0   delayed 0   dead 0" in before.stdout

        with open(tmp_path / "worker.log", "wb") as log:
            worker = subprocess.Popen(
                [sys.executable, "-m", "taskq", "worker", "--concurrency", "4"],
                env=worker_env, stdout=log, stderr=subprocess.STDOUT,
            )  # fmt: skip
        started.append(worker)
        wait_until(lambda: states(queue)["completed"] == 10, 30, "ten completed tasks")
        worker.send_signal(signal.SIGTERM)
        assert worker.wait(timeout=15) == 0, (tmp_path / "worker.log").read_text()

        after = taskq("dashboard", "--once", env=worker_env)
        assert "queue default   ready 0   leased 0   delayed 0   dead 0" in after.stdout
        ledger = taskq("ledger", env=worker_env)
        assert ledger.returncode == 0
        assert "10 charge(s) for 10 task(s), total 10" in ledger.stdout

    def test_the_redis_command_serves_until_sigterm(
        self, tmp_path: Path, marker: str, started: list[subprocess.Popen[bytes]]
    ) -> None:
        port = free_port()
        data = tmp_path / "r"
        server = subprocess.Popen(
            [sys.executable, "-m", "taskq", "redis", "--port", str(port), "--dir", str(data)],
            env=command_env(TASKQ_TEST_MARKER=marker), stdout=subprocess.PIPE,
        )  # fmt: skip
        started.append(server)
        assert server.stdout is not None
        assert b"listening on redis://127.0.0.1:" in server.stdout.readline()
        with redis.Redis(port=port) as client:
            assert client.ping()
        server.send_signal(signal.SIGTERM)
        server.communicate(timeout=15)
        assert server.returncode == 0
        assert (data / "redis.conf").exists()
        assert processes_of(data, marker) == []


    @pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP],
                             ids=lambda signum: signum.name)
    def test_a_socket_directory_of_its_own_goes_with_the_redis_command(
        self, tmp_path: Path, marker: str, started: list[subprocess.Popen[bytes]], signum: int
    ) -> None:
        """A --dir too long for a socket path gets its socket in a directory of its own,
        which must not be left behind, one more at every run, whichever stop signal
        ends it (SIGHUP: its terminal closed)."""
        data = tmp_path / ("d" * 110)
        server = subprocess.Popen(
            [sys.executable, "-m", "taskq", "redis", "--port", "0", "--dir", str(data)],
            env=command_env(TASKQ_TEST_MARKER=marker), stdout=subprocess.PIPE,
        )  # fmt: skip
        started.append(server)
        socket_dir = self.socket_dir_of(server)
        assert socket_dir.is_dir() and not socket_dir.is_relative_to(data)
        server.send_signal(signum)
        server.communicate(timeout=15)
        assert server.returncode == 0
        assert not socket_dir.exists()
        assert processes_of(data, marker) == []

    def test_stop_signals_the_program_ignores_stay_ignored_by_the_redis_command(
        self, tmp_path: Path, marker: str, started: list[subprocess.Popen[bytes]]
    ) -> None:
        """nohup ignores SIGHUP so that what it runs outlives its terminal, and a shell
        ignores SIGINT in a background job: the command took SIGINT over, and stopped
        its Redis at a Ctrl-C meant for the shell's foreground."""
        data = tmp_path / ("d" * 110)
        server = subprocess.Popen(
            ["nohup", sys.executable, "-m", "taskq", "redis", "--port", "0", "--dir", str(data)],
            env=command_env(TASKQ_TEST_MARKER=marker), stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN),  # noqa: PLW1509
        )  # fmt: skip
        started.append(server)
        socket_dir = self.socket_dir_of(server)
        server.send_signal(signal.SIGHUP)
        server.send_signal(signal.SIGINT)
        with pytest.raises(subprocess.TimeoutExpired):
            server.wait(timeout=1.5)
        url = f"unix://{socket_dir}/redis.sock"
        with redis.Redis.from_url(url) as client:
            assert client.ping()
        server.send_signal(signal.SIGTERM)
        server.communicate(timeout=15)
        assert server.returncode == 0
        assert not socket_dir.exists()

    @staticmethod
    def socket_dir_of(server: subprocess.Popen[bytes]) -> Path:
        """The directory of the socket the redis command says it listens on."""
        assert server.stdout is not None
        server.stdout.readline()
        url = server.stdout.readline().decode().split("REDIS_URL=")[1].strip()
        return Path(url.removeprefix("unix://")).parent


def test_help_lists_every_command(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as caught:
        main(["--help"])
    assert caught.value.code == 0
    out = capsys.readouterr().out
    for command in ("worker", "enqueue", "dlq", "task", "cancel", "flow", "ledger",
                    "schedules", "dashboard", "serve", "redis", "demo", "chaos"):
        assert command in out



class TestServeListening:
    def test_every_address_a_host_names_is_bound_on_one_port(self) -> None:
        named = {info[4][0] for info in socket.getaddrinfo(
            "localhost", 0, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)}
        sockets = listen("localhost", 0)
        try:
            assert {s.getsockname()[0] for s in sockets} == named
            assert len({s.getsockname()[1] for s in sockets}) == 1
        finally:
            for s in sockets:
                s.close()

    def test_a_host_with_no_address_is_refused_naming_it(self) -> None:
        with pytest.raises(ConfigError, match=r"--host 'nosuch\.invalid' names no address"):
            listen("nosuch.invalid", 0)
