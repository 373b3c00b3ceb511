"""The bench harness runs end to end and writes its report (a smoke run, tiny N)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def run_bench(*args: str, out: Path) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "bench", "--quick", "--repeats", "1", "--out", str(out), *args],
        cwd=ROOT, capture_output=True, text=True, timeout=120, check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return out.read_text()


class TestBench:
    def test_enqueue_writes_its_table_and_the_machine(self, tmp_path: Path) -> None:
        report = run_bench("--only", "enqueue", out=tmp_path / "bench.md")
        assert "## Enqueue rate" in report
        assert "| how | tasks | tasks/s (median) | spread |" in report
        assert "| `enqueue_many`, batches of 1000 (default) | 400 |" in report
        for fact in ("- Date:", "- Machine:", "- Python", "- Redis server", "- Packages:"):
            assert fact in report
        assert "## Targets of issue 7" in report

    @pytest.mark.processes
    def test_a_tiny_drain_counts_every_task(self, tmp_path: Path) -> None:
        report = run_bench("--only", "drain", "--n", "600", out=tmp_path / "bench.md")
        assert "## Drain rate" in report
        assert "`async def` no-op, best** | 1 x 8 | 600 |" in report
        assert "FAILED" not in report
