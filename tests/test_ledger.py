"""The ledger's guards decide what a second charge for the same task does."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import pytest

from taskq.errors import LedgerError
from taskq.settings import LedgerGuard
from taskq.tools.ledger import MAX_AMOUNT, ChargeOutcome, Ledger

TASKS = 25


@pytest.fixture
def path(tmp_path: Path) -> Path:
    return tmp_path / "ledger.db"


def charge_concurrently(ledger: Ledger, threads: int) -> Counter[ChargeOutcome]:
    """Every thread charges every task once, all starting together."""
    outcomes: Counter[ChargeOutcome] = Counter()
    lock = threading.Lock()
    start = threading.Barrier(threads)

    def charge_all() -> None:
        start.wait()
        for i in range(TASKS):
            outcome = ledger.charge(f"t{i}", 1, "alice", 1)
            with lock:
                outcomes[outcome] += 1

    workers = [threading.Thread(target=charge_all) for _ in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(timeout=60)
    assert not any(worker.is_alive() for worker in workers)
    return outcomes


class TestGuardNone:
    def test_a_task_that_runs_twice_charges_twice(self, path: Path) -> None:
        ledger = Ledger(path, "none")
        assert ledger.charge("t1", 1, "alice", 5) == "applied"
        assert ledger.charge("t1", 2, "alice", 5) == "applied"
        assert ledger.charges_for("t1") == 2

    def test_concurrent_charges_all_land(self, path: Path) -> None:
        ledger = Ledger(path, "none")
        outcomes = charge_concurrently(ledger, threads=4)
        assert outcomes == Counter({"applied": 4 * TASKS})
        assert ledger.summary().charges == 4 * TASKS


class TestGuardDedupe:
    def test_the_second_charge_for_a_task_is_a_duplicate(self, path: Path) -> None:
        ledger = Ledger(path, "dedupe")
        assert ledger.charge("t1", 1, "alice", 5) == "applied"
        assert ledger.charge("t1", 2, "alice", 5) == "duplicate"
        assert ledger.charge("t1", 1, "alice", 5) == "duplicate"
        assert ledger.charges_for("t1") == 1

    def test_different_tasks_are_each_charged(self, path: Path) -> None:
        ledger = Ledger(path, "dedupe")
        assert [ledger.charge(f"t{i}", 1, "alice", 1) for i in range(3)] == ["applied"] * 3

    def test_the_guard_survives_reopening_the_ledger(self, path: Path) -> None:
        Ledger(path, "dedupe").charge("t1", 1, "alice", 5)
        assert Ledger(path, "dedupe").charge("t1", 1, "alice", 5) == "duplicate"

    def test_threads_charging_the_same_tasks_charge_each_exactly_once(self, path: Path) -> None:
        ledger = Ledger(path, "dedupe")
        outcomes = charge_concurrently(ledger, threads=6)
        assert outcomes == Counter({"applied": TASKS, "duplicate": 5 * TASKS})
        assert ledger.summary().charged_twice == []
        assert all(ledger.charges_for(f"t{i}") == 1 for i in range(TASKS))

    def test_two_processes_charging_the_same_tasks_charge_each_exactly_once(
        self, path: Path
    ) -> None:
        Ledger(path, "dedupe")
        # Each process opens the ledger, then waits for a line on stdin, so both charge at once.
        snippet = (
            "import sys\n"
            "from taskq.tools.ledger import Ledger\n"
            f"ledger = Ledger({str(path)!r}, 'dedupe')\n"
            "print('ready', flush=True)\n"
            "sys.stdin.readline()\n"
            f"outcomes = [ledger.charge(f't{{i}}', 1, 'alice', 1) for i in range({TASKS * 4})]\n"
            "print(outcomes.count('applied'), outcomes.count('duplicate'))\n"
        )
        processes = [
            subprocess.Popen(
                [sys.executable, "-c", snippet],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
            )
            for _ in range(2)
        ]
        for process in processes:
            assert process.stdout is not None
            assert process.stdout.readline().strip() == "ready"
        for process in processes:
            assert process.stdin is not None
            process.stdin.write("go\n")
            process.stdin.flush()
        replies = [process.communicate(timeout=60)[0].split() for process in processes]
        assert [process.returncode for process in processes] == [0, 0]
        applied = sum(int(reply[0]) for reply in replies)
        duplicates = sum(int(reply[1]) for reply in replies)
        assert (applied, duplicates) == (TASKS * 4, TASKS * 4)
        summary = Ledger(path, "dedupe").summary()
        assert (summary.charges, summary.tasks, summary.charged_twice) == (
            TASKS * 4,
            TASKS * 4,
            [],
        )


class TestGuardFence:
    def test_an_older_token_after_a_newer_one_is_fenced(self, path: Path) -> None:
        ledger = Ledger(path, "fence")
        assert ledger.charge("t1", 2, "alice", 5) == "applied"
        assert ledger.charge("t1", 1, "alice", 5) == "fenced"
        assert ledger.charges_for("t1") == 1

    def test_an_older_token_that_writes_first_gets_through_and_so_does_the_newer(
        self, path: Path
    ) -> None:
        ledger = Ledger(path, "fence")
        assert ledger.charge("t1", 1, "alice", 5) == "applied"
        assert ledger.charge("t1", 2, "alice", 5) == "applied"
        assert ledger.charges_for("t1") == 2
        assert ledger.summary().charged_twice == [("t1", 2)]

    def test_fences_are_kept_per_task(self, path: Path) -> None:
        ledger = Ledger(path, "fence")
        ledger.charge("t1", 9, "alice", 5)
        assert ledger.charge("t2", 1, "alice", 5) == "applied"


class TestSummary:
    def test_an_empty_ledger_sums_to_nothing(self, path: Path) -> None:
        summary = Ledger(path).summary()
        assert (summary.charges, summary.tasks, summary.amount, summary.charged_twice) == (
            0,
            0,
            0,
            [],
        )

    def test_summary_lists_tasks_charged_more_than_once_most_first(self, path: Path) -> None:
        ledger = Ledger(path, "none")
        for task_id, times in (("once", 1), ("twice", 2), ("thrice", 3)):
            for token in range(times):
                ledger.charge(task_id, token, "alice", 10)
        summary = ledger.summary()
        assert summary.charged_twice == [("thrice", 3), ("twice", 2)]
        assert (summary.charges, summary.tasks, summary.amount) == (6, 3, 60)

    def test_charges_by_task_counts_only_ids_with_the_prefix_taken_literally(
        self, path: Path,
    ) -> None:
        ledger = Ledger(path, "none")
        for task_id in ("sched:a_b:1", "sched:a_b:1", "sched:a_b:2", "sched:aXb:1", "t1"):
            ledger.charge(task_id, 1, "alice", 1)
        assert ledger.charges_by_task("sched:a_b:") == {"sched:a_b:1": 2, "sched:a_b:2": 1}


class TestErrors:
    def test_an_unknown_guard_is_refused(self, path: Path) -> None:
        bogus: LedgerGuard = "bogus"  # type: ignore[assignment]
        with pytest.raises(LedgerError, match="unknown ledger guard 'bogus'"):
            Ledger(path, bogus)

    def test_a_ledger_in_a_missing_directory_raises_ledger_error(self, tmp_path: Path) -> None:
        with pytest.raises(LedgerError, match="cannot open ledger"):
            Ledger(tmp_path / "missing" / "ledger.db")

    @pytest.mark.parametrize("where", [":memory:", " "])
    def test_a_path_no_other_process_can_open_is_refused(self, where: str) -> None:
        with pytest.raises(LedgerError, match="give the path of a file every worker process "
                                              "opens"):
            Ledger(where)

    def test_a_reader_refuses_a_missing_file_and_creates_none(self, tmp_path: Path) -> None:
        typo = tmp_path / "ledgr.db"
        with pytest.raises(LedgerError, match=f"no ledger at {typo}: check --path"):
            Ledger(typo, create=False)
        assert not typo.exists()

    def test_a_reader_refuses_a_database_that_is_no_ledger(self, tmp_path: Path) -> None:
        other = tmp_path / "other.db"
        sqlite3.connect(other).execute("CREATE TABLE t (x)").connection.close()
        with pytest.raises(LedgerError, match="is no taskq ledger: it has no charges table"):
            Ledger(other, create=False)

    def test_a_reader_reads_a_ledger_as_it_is(self, path: Path) -> None:
        Ledger(path).charge("t1", 1, "alice", 5)
        assert Ledger(path, create=False).summary().charges == 1

    def test_charges_that_add_up_past_64_bits_are_summed_not_an_error(
        self, path: Path
    ) -> None:
        ledger = Ledger(path, "none")
        ledger.charge("t1", 1, "alice", MAX_AMOUNT)
        ledger.charge("t2", 1, "alice", MAX_AMOUNT)
        assert ledger.summary().amount == 2 * MAX_AMOUNT

    def test_a_damaged_ledger_is_a_ledger_error_and_exit_2_not_a_double_charge(
        self, path: Path
    ) -> None:
        ledger = Ledger(path, "none")
        for n in range(2000):
            ledger.charge(f"t{n}", 1, "alice", 1)
        ledger.close()
        data = bytearray(path.read_bytes())
        data[8192:16384] = b"\xff" * 8192  # pages in the middle garbled
        path.write_bytes(bytes(data))
        with pytest.raises(LedgerError, match="cannot read the ledger"):
            Ledger(path, create=False).summary()
        done = subprocess.run([sys.executable, "-m", "taskq", "ledger", "--path", str(path)],
                              capture_output=True, text=True, timeout=60, check=False)
        assert done.returncode == 2, done.stdout + done.stderr
        assert "cannot read the ledger" in done.stderr

    @pytest.mark.parametrize(("task_id", "token", "amount", "said"), [
        ("\ud800", 1, 1, "task id cannot be stored"),
        ("t1", 2**63, 1, "token must be a whole number"),
        ("t1", "10", 1, "token must be a whole number"),
        ("t1", 1, 10**19, "amount must be a whole number"),
        ("t1", True, 1, "token must be a whole number"),
    ])
    def test_a_charge_the_ledger_cannot_keep_is_a_ledger_error_writing_nothing(
        self, path: Path, task_id: str, token: int, amount: int, said: str
    ) -> None:
        ledger = Ledger(path, "fence")
        with pytest.raises(LedgerError, match=said):
            ledger.charge(task_id, token, "alice", amount)
        assert ledger.summary().charges == 0

    def test_a_reader_writes_nothing_so_a_read_only_copy_can_be_audited(
        self, path: Path
    ) -> None:
        Ledger(path).charge("t1", 1, "alice", 5)
        copy = path.with_name("copy.db")
        with sqlite3.connect(path) as source, sqlite3.connect(copy) as target:
            source.backup(target)
            target.execute("PRAGMA journal_mode=DELETE")  # as an archived copy would be
        source.close()
        target.close()
        before = copy.read_bytes()
        assert Ledger(copy, create=False).summary().charges == 1
        assert copy.read_bytes() == before  # not switched to WAL, as a writer's open does

    def test_the_default_guard_is_dedupe(self, path: Path) -> None:
        assert Ledger(path).guard == "dedupe"


def test_charges_of_tasks_carry_their_token_and_the_time_they_were_written(path: Path) -> None:
    ledger = Ledger(path, "none")
    before = time.time() * 1000
    for task_id, token in (("a", 1), ("b", 2), ("a", 3), ("c", 1)):
        ledger.charge(task_id, token, "alice", 1)
    after = time.time() * 1000
    charges = ledger.charges_of(["a", "b", "nosuch"])
    assert sorted((c.task_id, c.token) for c in charges) == [("a", 1), ("a", 3), ("b", 2)]
    assert all(before - 1 <= c.at_ms <= after + 1 for c in charges)
    assert ledger.charges_of([]) == []
