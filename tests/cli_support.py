"""What the command-line tests share: a clean environment for `taskq` subprocesses,
and a way to see which of the processes a test started are still alive."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from taskq.broker import Broker

# Variables a developer's shell might carry that would change what the commands do.
CONFIG_VARIABLES = ("REDIS_URL", "TASKQ_QUEUE", "LEDGER_PATH", "LEDGER_GUARD", "FAIL_RATE",
                    "TASKQ_SHARDS")


def states(broker: Broker) -> Counter[str]:
    """How many of the queue's task records are in each state."""
    keys = list(broker.client.scan_iter(match=broker.keys.task("*"), count=1000))
    return Counter(str(broker.client.hget(key, "state")) for key in keys)


def processes_of(tmp_dir: Path, marker: str) -> list[str]:
    """Live processes started for one test: the directory in their command line, or the
    marker in their environment (which every child inherits)."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == os.getpid():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ")
            environ = (proc / "environ").read_bytes()
        except OSError:
            continue
        if str(tmp_dir).encode() in cmdline or marker.encode() in environ:
            found.append(f"{proc.name}: {cmdline.decode(errors='replace')}")
    return found


def command_env(**variables: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in CONFIG_VARIABLES}
    env.update(variables)
    return env


def taskq(*args: str, env: dict[str, str], timeout: float = 30) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "taskq", *args],
        env=env, capture_output=True, text=True, timeout=timeout, check=False,
    )  # fmt: skip


@pytest.fixture
def marker() -> str:
    return f"taskq-test-{uuid.uuid4().hex}"


@pytest.fixture
def started() -> Iterator[list[subprocess.Popen[bytes]]]:
    """Processes a test starts; killed at teardown if the test left any running."""
    processes: list[subprocess.Popen[bytes]] = []
    yield processes
    for process in processes:
        if process.poll() is None:
            process.kill()
            process.wait()
