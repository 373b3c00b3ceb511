"""What the command draws on a real terminal (a pseudo-terminal here) and what it prints
when its output is not one: rich tables and a live progress bar, or plain lines."""

from __future__ import annotations

import os
import pty
import re
import select
import subprocess
import sys
import time
from pathlib import Path

import pytest

from cli_support import command_env
from taskq.broker import Broker
from taskq.settings import Settings

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def on_a_terminal(argv: list[str], env: dict[str, str], timeout: float = 60) -> str:
    """Run `argv` with a pseudo-terminal as its stdout and stderr; everything it wrote."""
    main, child = pty.openpty()
    process = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=child, stderr=child,
                               env={**env, "TERM": "xterm-256color", "COLUMNS": "160"})
    os.close(child)
    output = bytearray()
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([main], [], [], 0.2)
            if ready:
                try:
                    chunk = os.read(main, 65536)
                except OSError:  # the child closed its end
                    break
                if not chunk:
                    break
                output += chunk
            elif process.poll() is not None:
                break
        assert process.wait(timeout=10) == 0, output.decode(errors="replace")[-2000:]
    finally:
        if process.poll() is None:
            process.kill()
        os.close(main)
    # Colours and cursor moves out, so the text is what a person reads.
    return ANSI.sub("", output.decode(errors="replace"))


def ended(queue: Broker, n: int) -> None:
    for i in range(n):
        queue.enqueue(f"job-{i}", name="shop.pack")
        (task,) = queue.lease_many("w", 30, 1).tasks
        queue.ack(task.task_id, task.token)


def test_history_is_a_table_on_a_terminal_and_lines_elsewhere(
    queue: Broker, settings: Settings
) -> None:
    ended(queue, 2)
    env = command_env(REDIS_URL=settings.redis_url)
    argv = [sys.executable, "-m", "taskq", "history", "--queue", queue.queue]
    drawn = on_a_terminal(argv, env)
    assert "┏" in drawn and "┃ ended" in drawn and "job-1" in drawn, drawn
    piped = subprocess.run(argv, env=env, capture_output=True, text=True, check=True).stdout
    assert "┏" not in piped and "┃" not in piped
    assert piped.splitlines()[1].split()[2:5] == ["completed", "job-1", "shop.pack"]


@pytest.mark.processes
def test_the_demo_draws_a_progress_bar_on_a_terminal(tmp_path: Path) -> None:
    drawn = on_a_terminal([sys.executable, "-m", "taskq", "demo", "--tasks", "30",
                           "--workers", "1", "--dir", str(tmp_path / "demo")],
                          command_env(), timeout=120)
    assert "tasks ended" in drawn and "━" in drawn, drawn[-3000:]
    assert "40/40" in drawn  # 30 charged and 10 unknown tasks, all ended
    assert "the guarantees held" in drawn
