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
import redis

from cli_support import command_env
from helpers import record_of
from taskq.broker import Broker
from taskq.cli.task import BLOCK_LINES, block
from taskq.flows import Flows, StageSpec
from taskq.registry import Presence, register
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
    token = record_of(queue, "busy").fencing_token  # the lease's, shown whole
    assert token == task.token
    env = command_env(REDIS_URL=settings.redis_url)
    argv = [sys.executable, "-m", "taskq", "dashboard", "--queue", queue.queue]
    drawn = on_a_terminal([*argv, "--once"], env)
    assert f"queue {queue.queue}" in drawn and "╭" in drawn, drawn
    assert "42% 42 of 100 rows" in drawn and "leased" in drawn
    piped = subprocess.run([*argv, "--once"], env=env, capture_output=True, text=True,
                           check=True).stdout
    assert "╭" not in piped and f"attempt 1 token {token}  42% 42 of 100 rows" in piped
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


# A producer with a client of its own writes what it likes: a window title, a cleared
# screen, a link, a carriage return and an RTL override in every field shown.
EVIL = "\x1b]0;PWNED\x07\x1b[2J\x1b]8;;http://evil.example/\x07link\x1b]8;;\x07\r\u202e"


FETCH = ("fetch", '{"args":[],"kwargs":{}}', 0, "", 5, "")


def hostile_store(queue: Broker, client: redis.Redis) -> None:
    """A dead task whose record and events carry EVIL (its name, its error, an event
    whose type and field name are EVIL), one in an EVIL state for `taskq cancel`, a
    workflow whose state and failed step are EVIL, and one whose record is damaged."""
    k = queue.keys
    queue.enqueue("h-1", name="shop.pack", max_retries=0)
    (task,) = queue.lease_many("w", 30, 1).tasks
    queue.fail("h-1", task.token, f"ValueError: {EVIL}")
    client.hset(k.task("h-1"), "name", f"shop.pack{EVIL}")
    (last,) = client.xrevrange(k.events, count=1)
    client.xadd(k.events, {"type": EVIL, "task": "h-1", "state": EVIL, "ts": "1",
                           EVIL: EVIL}, id=f"{last[0].split('-')[0]}-1")
    queue.enqueue("h-2", name="shop.pack")
    client.hset(k.task("h-2"), "state", EVIL)
    client.lrem(k.ready, 0, "h-2")
    Flows(queue).start("hflow", [StageSpec((FETCH,), group=False, policy="fail")])
    client.hset(k.flow("hflow"), mapping={"state": f"failed{EVIL}", "upstream": EVIL,
                                          "error_message": EVIL})
    Flows(queue).start("hdamaged", [StageSpec((FETCH,), group=False, policy="fail")])
    client.hset(k.flow("hdamaged"), "stages", EVIL)


@pytest.mark.parametrize(("argv", "status"), [
    (("task", "h-1"), 0), (("cancel", "h-2"), 0), (("flow", "show", "hflow"), 0),
    (("flow", "cancel", "hflow"), 0), (("flow", "show", "hdamaged"), 2), (("history",), 0),
    (("dlq",), 0), (("dashboard", "--once"), 0),
], ids=["task", "cancel", "flow-show", "flow-cancel", "error-line", "history", "dlq",
        "dashboard"])
def test_every_command_showing_stored_text_prints_a_hostile_producers_as_escapes(
    queue: Broker, client: redis.Redis, settings: Settings, argv: tuple[str, ...],
    status: int
) -> None:
    """`flow show` and `flow cancel` (the state, the failed step), `task` (an event's type
    and field names), `cancel` (the state) and every command's error line printed them
    as they were: the terminal retitled, cleared and linked."""
    hostile_store(queue, client)
    env = command_env(REDIS_URL=settings.redis_url)
    command = [sys.executable, "-m", "taskq", *argv, "--queue", queue.queue]
    piped = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
    assert piped.returncode == status, piped.stderr[-2000:]
    drawn = on_a_terminal(command, env, status=status)
    for shown in (piped.stdout + piped.stderr, drawn):
        assert "PWNED" in shown, shown[-2000:]
        assert shown.count("PWNED") == shown.count("\\x1b]0;PWNED"), shown[-3000:]
        assert "\x1b]" not in shown and "\u202e" not in shown and "\x07" not in shown


@pytest.mark.parametrize("argv", [("task", "big-1"), ("history",), ("dlq",),
                                  ("dashboard", "--once")],
                         ids=["task", "history", "dlq", "dashboard"])
def test_a_megabyte_stored_value_is_shown_cut(
    queue: Broker, client: redis.Redis, settings: Settings, argv: tuple[str, ...]
) -> None:
    """Shown whole: `taskq task` printed a 2 MB result and a 1 MB message with its
    200,000-line traceback, the listings 1 MB lines, a dashboard frame tens of
    thousands of lines."""
    queue.enqueue("big-1", name="shop.pack", max_retries=0)
    (task,) = queue.lease_many("w", 30, 1).tasks
    queue.fail("big-1", task.token, "ValueError: boom")
    huge = "x" * 1_000_000
    client.hset(queue.keys.task("big-1"), mapping={
        "name": f"shop.{huge}", "result": f'"{"r" * 2_000_000}"', "error_type": huge,
        "error_message": huge, "last_error": huge, "traceback": "line\n" * 200_000})
    env = command_env(REDIS_URL=settings.redis_url, COLUMNS="160")
    command = [sys.executable, "-m", "taskq", *argv, "--queue", queue.queue]
    piped = subprocess.run(command, env=env, capture_output=True, text=True, check=True,
                           timeout=60)
    assert len(piped.stdout) < 100_000, piped.stdout[:2000]
    # A dashboard's columns are cut to their widths; the other commands say so.
    assert argv[0] == "dashboard" or "more characters" in piped.stdout, piped.stdout[:2000]
    drawn = on_a_terminal(command, env)
    assert len(drawn) < 200_000 and drawn.count("\n") < 1_000, drawn[:2000]


def test_a_worker_running_twenty_thousand_tasks_is_listed_with_twenty_names_and_a_count(
    queue: Broker, settings: Settings
) -> None:
    """Every name was listed: 360 KB from `taskq workers`, and from the warning of an
    enqueue of a name none of them runs."""
    register(queue, Presence(worker_id="w-many", host="h", pid=2, queues=[queue.queue],
                             concurrency=1, tasks=[f"jobs.n{i:05d}" for i in range(20000)],
                             version="0"), 0, 60)
    env = command_env(REDIS_URL=settings.redis_url)
    taskq = [sys.executable, "-m", "taskq"]
    listed = subprocess.run([*taskq, "workers", "--queue", queue.queue], env=env,
                            capture_output=True, text=True, check=True).stdout
    assert "jobs.n00019 and 19,980 more" in listed and len(listed) < 2_000, listed[:2000]
    warned = subprocess.run([*taskq, "enqueue", "1", "--name", "jobs.typo", "--queue",
                             queue.queue], env=env, capture_output=True, text=True,
                            check=True).stderr
    assert "jobs.n00019 and 19,980 more" in warned and len(warned) < 2_000, warned[:2000]


def test_a_long_traceback_is_shown_in_its_first_lines_saying_how_many_more() -> None:
    """The lines hidden were counted after the character cut: 1,367 said for 9,700."""
    text = "\n".join(f"f{i:05d}" for i in range(10_000))
    shown = block(text).split("\n")
    assert len(shown) == BLOCK_LINES + 1 and shown[-2] == f"  f{BLOCK_LINES - 1:05d}"
    hidden = text.split("\n", BLOCK_LINES)[BLOCK_LINES]
    assert shown[-1] == (f"  … [{10_000 - BLOCK_LINES:,} more lines, {len(hidden) + 1:,} more "
                         "characters] (--json shows it whole)")
    assert block("two\nlines") == "  two\n  lines"
