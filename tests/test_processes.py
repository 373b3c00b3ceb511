"""Child processes tied to the process that started them (taskq.processes): a child
whose parent is gone before the tie is made does not run on unseen."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

# A process that makes the tie for a child it forks, and (with "exit") exits before the
# child makes it: as a pool killed while it starts a copy.
FORKED = """
import os, sys, time
from taskq.processes import die_with_parent
tie = die_with_parent()
parent = os.getpid()
if os.fork() == 0:
    if sys.argv[2] == "exit":  # the parent exits: the child is another's before the tie
        deadline = time.monotonic() + 20
        while os.getppid() == parent and time.monotonic() < deadline:
            time.sleep(0.01)
    else:
        time.sleep(0.5)
    tie()
    open(sys.argv[1], "w").write("ran")
    os._exit(0)
if sys.argv[2] == "exit":
    os._exit(0)
time.sleep(1.5)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
@pytest.mark.parametrize(("parent", "runs"), [("exit", False), ("stay", True)])
def test_a_child_whose_parent_died_before_the_tie_exits_instead_of_running(
    tmp_path: Path, parent: str, runs: bool
) -> None:
    ran = tmp_path / "ran"
    subprocess.run([sys.executable, "-c", FORKED, str(ran), parent], check=True, timeout=30)
    deadline = time.monotonic() + 3
    while not ran.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert ran.exists() == runs
