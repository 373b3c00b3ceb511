"""What the command draws on a real terminal (a pseudo-terminal here) and what it prints
when its output is not one: rich tables and a live progress bar, or plain lines."""

from __future__ import annotations

import os
import pty
import re
import select
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from cli_support import command_env
from taskq.broker import Broker
from taskq.flows import Flows, StageSpec
from taskq.settings import Settings

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def on_a_terminal(argv: list[str], env: dict[str, str], timeout: float = 60,
                  interrupt_when: Callable[[str], bool] | None = None, status: int = 0) -> str:
    """Run `argv` with a pseudo-terminal as its stdout and stderr; everything it wrote.
    With `interrupt_when`, Ctrl-C (SIGINT) it once what it wrote meets that: after a
    time instead, a loaded machine might still be importing it."""
    main, child = pty.openpty()
    process = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=child, stderr=child,
                               env={**env, "TERM": "xterm-256color", "COLUMNS": "160"})
    os.close(child)
    output = bytearray()
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            if interrupt_when is not None and interrupt_when(output.decode(errors="replace")):
                process.send_signal(signal.SIGINT)
                interrupt_when = None
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
        assert process.wait(timeout=10) == status, output.decode(errors="replace")[-2000:]
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


def test_the_dashboard_draws_panels_and_a_running_tasks_progress(
    queue: Broker, settings: Settings
) -> None:
    ended(queue, 1)
    queue.enqueue("busy", name="shop.import")
    (task,) = queue.lease_many("w", 30, 1).tasks
    assert queue.progress("busy", task.token, 0.42, "42 of 100 rows")
    env = command_env(REDIS_URL=settings.redis_url)
    argv = [sys.executable, "-m", "taskq", "dashboard", "--queue", queue.queue]
    drawn = on_a_terminal([*argv, "--once"], env)
    assert f"queue {queue.queue}" in drawn and "╭" in drawn, drawn
    assert "42% 42 of 100 rows" in drawn and "leased" in drawn
    piped = subprocess.run([*argv, "--once"], env=env, capture_output=True, text=True,
                           check=True).stdout
    assert "╭" not in piped and "attempt 1 token 1  42% 42 of 100 rows" in piped
    # Live: redrawn in place until Ctrl-C, which ends it at once and without a traceback.
    header = f"queue {queue.queue}"
    live = on_a_terminal(argv, env, timeout=20, status=130,
                         interrupt_when=lambda shown: shown.count(header) >= 2)
    assert live.count(header) >= 2 and "Traceback" not in live


def test_flow_show_is_a_table_of_the_steps_on_a_terminal(
    queue: Broker, settings: Settings
) -> None:
    assert Flows(queue).start("nightly", [
        StageSpec((("fetch", '{"args":[],"kwargs":{}}', 0, "", 5, ""),), group=False,
                  policy="fail"),
        StageSpec((("store", '{"args":[],"kwargs":{}}', 0, "", 5, ""),), group=False,
                  policy="fail")])
    env = command_env(REDIS_URL=settings.redis_url)
    drawn = on_a_terminal([sys.executable, "-m", "taskq", "flow", "show", "nightly",
                           "--queue", queue.queue], env)
    assert "┏" in drawn and "┃ stage" in drawn, drawn
    assert "workflow nightly on queue" in drawn
    lines = [line for line in drawn.splitlines() if "nightly." in line]
    assert [line.split("│")[3:6] for line in lines] == [
        [" nightly.1.1 ", " fetch ", " pending "], [" nightly.2.1 ", " store ", " waiting "]]


def test_what_a_handler_wrote_is_printed_as_text_not_run_by_the_terminal(
    queue: Broker, settings: Settings
) -> None:
    # Markup rich would read ("[/]" alone raised MarkupError), a title change, a clear
    # screen, a carriage return and a newline that would forge a line, an RTL override.
    error = "bad [/] [bold]x\x1b]0;owned\x07\x1b[2J\rover\nforged line \u202efdp.exe"
    escaped = "bad [/] [bold]x\\x1b]0;owned\\x07\\x1b[2J\\x0dover"
    queue.enqueue("hostile", name="shop.pack", max_retries=0)
    (task,) = queue.lease_many("w", 30, 1).tasks
    assert queue.fail("hostile", task.token, f"ValueError: {error}").status == "dead"
    env = command_env(REDIS_URL=settings.redis_url)

    def run(*argv: str) -> str:
        return subprocess.run([sys.executable, "-m", "taskq", *argv, "--queue", queue.queue],
                              env=env, capture_output=True, text=True, check=True).stdout

    for piped in (run("history"), run("dlq"), run("dashboard", "--once")):
        assert escaped in piped and "\\nforged line \\u202efdp.exe" in piped, piped
        assert "\x1b" not in piped and "\r" not in piped and "\u202e" not in piped
        assert not any(line.startswith("forged") for line in piped.splitlines())
    for argv in (["history"], ["dashboard", "--once"]):
        drawn = on_a_terminal([sys.executable, "-m", "taskq", *argv, "--queue", queue.queue],
                              env)
        assert "Traceback" not in drawn and "bad [/] [bold]x" in drawn, drawn
        assert "\\x1b]0;owned" in drawn and "\x1b]0;" not in drawn and "\u202e" not in drawn
