"""The README as a user follows it: "Your first task" run as written (its module, a real
`taskq worker` started from the module's folder, its prompt lines), and every Python
example free of names it never defines."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from cli_support import command_env
from taskq.processes import stop_all
from taskq.settings import Settings
from waiting import wait_until

README = Path(__file__).resolve().parent.parent / "README.md"
BLOCK = re.compile(r"```python\n(.*?)```", re.DOTALL)


def first_task_section() -> str:
    text = README.read_text()
    return text[text.index("## Your first task"):text.index("## Using it from Python")]


def python_blocks(text: str) -> list[str]:
    return BLOCK.findall(text)


@pytest.mark.processes
def test_your_first_task_runs_as_written(settings: Settings, tmp_path: Path) -> None:
    module, prompt = python_blocks(first_task_section())
    (tmp_path / "mytasks.py").write_text(module)
    command = re.search(r"\.venv/bin/taskq (worker --app mytasks:app[^\n]*)",
                        first_task_section())
    assert command is not None
    env = command_env(REDIS_URL=settings.redis_url)
    env.pop("PYTHONPATH", None)
    log = tmp_path / "worker.log"
    # The installed command, from the module's folder, as the section says to run it.
    with open(log, "wb") as out:
        worker = subprocess.Popen([str(Path(sys.executable).parent / "taskq"),
                                   *command.group(1).split()], cwd=tmp_path, env=env,
                                  stdout=out, stderr=subprocess.STDOUT,
                                  start_new_session=True)
    try:
        lines = [line[4:] for line in prompt.splitlines() if line.startswith(">>> ")]
        expected = [line for line in prompt.splitlines()
                    if line and not line.startswith(">>> ")]
        script = "\n".join([*lines[:-1], f"print(repr({lines[-1]}))"])
        done = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, env=env,
                              capture_output=True, text=True, timeout=30, check=False)
        assert done.returncode == 0, done.stderr
        assert done.stdout.strip() == expected[-1]
        # Its task log line (stderr, unbuffered) says it finished.
        wait_until(lambda: "mytasks.send_welcome" in log.read_text(), 10)
    finally:
        stop_all([worker])
    # The handler's print reaches the log when the worker's stdout is flushed, at exit.
    assert "welcome mail to user 42" in log.read_text()


def test_no_python_example_uses_a_name_it_never_defines() -> None:
    """Read in order, as a reader carries names from one example to the next: every
    name an example uses is defined by it, an earlier one, or an import."""
    ruff = [sys.executable, "-m", "ruff", "check", "--select", "F821", "--no-cache",
            "--output-format", "concise", "--stdin-filename", "readme.py", "-"]
    blocks = [b for b in python_blocks(README.read_text()) if not b.lstrip().startswith(">>>")]
    found = subprocess.run(ruff, input="\n".join(blocks), capture_output=True, text=True,
                           check=False)
    assert found.returncode == 0, found.stdout
