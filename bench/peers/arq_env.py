"""The venv arq runs from: arq pins redis<6, and installing it beside taskq would
downgrade taskq's own client, so the bench makes it a venv of its own, once."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from bench.harness import BenchError

REQUIREMENT = "arq"


def venv_dir() -> Path:
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache) / "taskq-bench" / "arq-venv"


def ensure() -> Path:
    """The venv's bin directory, made (from PyPI) if it does not work yet."""
    bin_dir = venv_dir() / "bin"
    if _works(bin_dir):
        return bin_dir
    steps = [[sys.executable, "-m", "venv", "--clear", str(venv_dir())],
             [str(bin_dir / "pip"), "install", "-q", REQUIREMENT]]
    for step in steps:
        try:
            done = subprocess.run(step, capture_output=True, text=True, timeout=300,
                                  check=False)
        except (OSError, subprocess.TimeoutExpired) as e:
            raise BenchError(f"cannot make arq's venv: {e}") from e
        if done.returncode != 0:
            tail = " ".join(done.stderr.strip().splitlines()[-2:])
            raise BenchError(f"cannot make arq's venv ({' '.join(step[:3])}): {tail}")
    if not _works(bin_dir):
        raise BenchError(f"arq's venv at {venv_dir()} does not import arq")
    return bin_dir


def _works(bin_dir: Path) -> bool:
    if not (bin_dir / "arq").exists():
        return False
    probe = subprocess.run([str(bin_dir / "python"), "-c", "import arq"],
                           capture_output=True, timeout=60, check=False)
    return probe.returncode == 0


def version(bin_dir: Path) -> str:
    done = subprocess.run(
        [str(bin_dir / "python"), "-c",
         "from importlib.metadata import version as v; print(v('arq'), v('redis'))"],
        capture_output=True, text=True, timeout=60, check=False)
    arq, _, redis = done.stdout.strip().partition(" ")
    return f"{arq} (own venv, redis-py {redis})" if arq else "unknown"
