"""The chaos command itself: it must see the bug it guards against, and replay by seed."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from taskq.tools.tlatrace import read_log

pytestmark = pytest.mark.processes


def chaos(tmp_path: Path, *options: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "taskq", "chaos", "--dir", str(tmp_path / "run"), *options],
        capture_output=True, text=True, timeout=240, check=False,
    )


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


def test_a_clean_run_passes_every_check_and_writes_its_report(tmp_path: Path) -> None:
    run = chaos(tmp_path, "--tasks", "1000", "--workers", "2", "--fault-interval", "1",
                "--max-seconds", "10", "--seed", "5", "--redis-faults",
                "--appendfsync", "always")
    assert run.returncode == 0, run.stdout[-2000:]
    report = (tmp_path / "run" / "report.md").read_text()
    assert "# taskq chaos report: PASSED" in report
    assert "Nothing acknowledged was lost." in report
    assert "| seed | 5 |" in report
    # The whole event log stays behind for TLC's trace validation.
    events = read_log(tmp_path / "run" / "events.jsonl")
    assert {f["type"] for _, f in events} >= {"enqueued", "leased", "completed"}
