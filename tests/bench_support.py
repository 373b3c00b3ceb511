"""Running the bench as a user would, for its tests: `python -m bench`, quick and tiny."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def run_bench(*args: str, out: Path) -> str:
    """A quick run of `python -m bench` with `args`, one repeat, written to `out`; its
    report, once the run has exited cleanly."""
    done = subprocess.run(
        [sys.executable, "-m", "bench", "--quick", "--repeats", "1", "--out", str(out), *args],
        cwd=ROOT, capture_output=True, text=True, timeout=120, check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return out.read_text()
