"""The chaos command itself: it must see the bug it guards against, and replay by seed;
its tick check must see a tick missing, doubled or charged other than once."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from taskq.keys import SCHEDULE_TASK_PREFIX, schedule_task_id
from taskq.tools.chaos.checks import count_ticks, final_states, ticks_check
from taskq.tools.chaos.run import MIN_TICKS
from taskq.tools.chaos.schedules import PERIODS, period_ms
from taskq.tools.ledger import Ledger
from taskq.tools.tlatrace import read_log

Rows = list[tuple[int, dict[str, str]]]


def chaos(tmp_path: Path, *options: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "taskq", "chaos", "--dir", str(tmp_path / "run"), *options],
        capture_output=True, text=True, timeout=240, check=False,
    )


def tick_check_of(rows: Rows, charges: dict[str, int], lost_ok: bool = False) -> tuple[bool, str]:
    """The tick check's verdict and detail on `rows` and `charges`, for the run's PERIODS."""
    periods = {name: period_ms(name) for name in PERIODS}
    check = ticks_check(count_ticks(rows, periods, final_states(rows), charges), lost_ok)
    return check.ok, check.detail


def ticked_log(ticks: dict[str, list[int]]) -> tuple[Rows, dict[str, int]]:
    """A log in which each listed tick's task was enqueued, leased and completed, and a
    ledger in which each charged once."""
    rows: Rows = []
    charges: dict[str, int] = {}
    for schedule, times in ticks.items():
        for tick in times:
            task = schedule_task_id(schedule, tick)
            for kind, state in (("enqueued", "pending"), ("leased", "running"),
                                ("completed", "completed")):
                rows.append((len(rows) + 1, {"type": kind, "task": task, "state": state}))
            charges[task] = 1
    return rows, charges


def every_tick(first_period: int, count: int) -> dict[str, list[int]]:
    """`count` consecutive ticks of each schedule, from its `first_period`-th period."""
    return {name: [(first_period + i) * period_ms(name) for i in range(count)]
            for name in PERIODS}


class TestTickCheck:
    def test_each_tick_once_and_charged_once_passes(self) -> None:
        ok, detail = tick_check_of(*ticked_log(every_tick(2_000_000_000, 5)))
        assert ok, detail
        assert "chaos-1s (every 1000 ms): 5 ticks, 5 tasks, 5 enqueued events, 5 completed, " \
               "5 effects" in detail

    def test_a_skipped_tick_fails(self) -> None:
        ticks = every_tick(2_000_000_000, 5)
        skipped = ticks["chaos-700ms"].pop(2)
        ok, detail = tick_check_of(*ticked_log(ticks))
        assert not ok
        assert "5 ticks, 4 tasks" in detail and f"missing [{skipped}]" in detail

    def test_a_tick_enqueued_twice_fails(self) -> None:
        rows, charges = ticked_log(every_tick(2_000_000_000, 5))
        again = next(f for _, f in rows if f["type"] == "enqueued")
        ok, detail = tick_check_of([*rows, (len(rows) + 1, dict(again))], charges)
        assert not ok
        assert "6 enqueued events" in detail and "enqueued twice" in detail

    def test_a_tick_off_its_period_fails(self) -> None:
        ticks = every_tick(2_000_000_000, 5)
        ticks["chaos-1s"][-1] += 1
        ok, detail = tick_check_of(*ticked_log(ticks))
        assert not ok
        assert "off the period" in detail

    def test_a_tick_charged_twice_or_never_fails(self) -> None:
        rows, charges = ticked_log(every_tick(2_000_000_000, 5))
        twice, never = sorted(charges)[:2]
        charges[twice], charges[never] = 2, 0
        ok, detail = tick_check_of(rows, charges)
        assert not ok
        assert "not charged once" in detail
        assert f"('{twice}', 2)" in detail and f"('{never}', 0)" in detail

    def test_an_unfinished_tick_task_fails(self) -> None:
        rows, charges = ticked_log(every_tick(2_000_000_000, 5))
        del rows[-1]
        ok, detail = tick_check_of(rows, charges)
        assert not ok
        assert "unfinished" in detail

    def test_a_schedule_that_never_fired_fails(self) -> None:
        ticks = every_tick(2_000_000_000, 5)
        ticks["chaos-1s"] = []
        ok, detail = tick_check_of(*ticked_log(ticks))
        assert not ok
        assert "chaos-1s (every 1000 ms): 0 ticks, 0 tasks" in detail and "no tick fired" in detail

    def test_a_charge_without_its_task_passes_only_where_redis_may_lose_writes(self) -> None:
        rows, charges = ticked_log(every_tick(2_000_000_000, 5))
        charges[schedule_task_id("chaos-1s", 3_000_000_000_000)] = 1
        assert not tick_check_of(rows, charges)[0]
        assert tick_check_of(rows, charges, lost_ok=True)[0]


@pytest.mark.processes
def test_without_a_ledger_guard_the_run_reports_double_charges_and_fails(tmp_path: Path) -> None:
    run = chaos(tmp_path, "--tasks", "1500", "--workers", "3", "--guard", "none",
                "--fault-interval", "0.3", "--max-seconds", "25", "--seed", "3",
                "--work-seconds", "0.03", "--report", str(tmp_path / "report.md"))
    assert run.returncode == 1, run.stdout[-2000:]
    report = (tmp_path / "report.md").read_text()
    assert "# taskq chaos report: FAILED" in report
    line = next(x for x in report.splitlines() if x.startswith("| no task charged twice"))
    assert "**FAIL**" in line
    twice = int(line.split("; ")[1].split()[0])
    assert twice > 0
    assert "[FAILED] no task charged twice" in run.stdout


@pytest.mark.processes
def test_a_clean_run_passes_every_check_and_writes_its_report(tmp_path: Path) -> None:
    run = chaos(tmp_path, "--tasks", "1000", "--workers", "2", "--fault-interval", "1",
                "--max-seconds", "10", "--seed", "5", "--redis-faults",
                "--appendfsync", "always")
    assert run.returncode == 0, run.stdout[-2000:]
    report = (tmp_path / "run" / "report.md").read_text()
    assert "# taskq chaos report: PASSED" in report
    assert "Nothing acknowledged was lost." in report
    assert "| seed | 5 |" in report
    assert "| S1: one task per schedule tick, each run once | pass |" in report
    # The whole event log stays behind for TLC's trace validation.
    events = read_log(tmp_path / "run" / "events.jsonl")
    assert {f["type"] for _, f in events} >= {"enqueued", "leased", "completed"}
    # Every schedule fired through the faults, each tick once, each charged once.
    periods = {name: period_ms(name) for name in PERIODS}
    charges = Ledger(tmp_path / "run" / "ledger.db").charges_by_task(SCHEDULE_TASK_PREFIX)
    counts = count_ticks(events, periods, final_states(events), charges)
    assert all(c.tasks >= MIN_TICKS and c.tasks == c.ticks == c.enqueued == c.effects
               for c in counts), counts
    assert tick_check_of(events, charges)[0]
    # The same log with one tick's enqueue moved onto the next tick's task: that one is
    # now enqueued twice, and the first is missing.
    enqueues = [f for _, f in events
                if f["type"] == "enqueued" and f["task"].startswith("sched:chaos-1s:")]
    enqueues[1]["task"] = enqueues[2]["task"]
    ok, detail = tick_check_of(events, charges)
    assert not ok
    assert "missing" in detail and "enqueued twice" in detail
