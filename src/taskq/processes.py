"""Child processes that cannot outlive the taskq command that started them."""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence

PR_SET_PDEATHSIG = 1


def die_with_parent() -> None:
    """In a child, before exec: have Linux send SIGTERM when the parent dies, so a
    killed demo or test leaves no worker or server behind. Elsewhere, do nothing.

    Linux ties this to the thread that forked, so spawn from a long-lived thread."""
    if not sys.platform.startswith("linux"):
        return
    libc_name = ctypes.util.find_library("c")
    if libc_name is None:
        return
    libc = ctypes.CDLL(libc_name, use_errno=True)
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)


def spawn(
    argv: Sequence[str],
    env: dict[str, str],
    log_path: str | None = None,
) -> subprocess.Popen[bytes]:
    """Start `argv` in its own session (a Ctrl-C reaches only us; we stop it in order)."""
    out = open(log_path, "ab") if log_path else subprocess.DEVNULL  # noqa: SIM115
    try:
        return subprocess.Popen(
            list(argv),
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT if log_path else subprocess.DEVNULL,
            start_new_session=True,
            preexec_fn=die_with_parent,  # noqa: PLW1509  (only sets a prctl flag)
        )
    finally:
        if log_path and not isinstance(out, int):
            out.close()


def stop_all(processes: Sequence[subprocess.Popen[bytes]], timeout: float = 15.0) -> None:
    """SIGTERM every live process (continuing stopped ones), then SIGKILL stragglers."""
    for process in processes:
        if process.poll() is None:
            for signum in (signal.SIGCONT, signal.SIGTERM):
                _signal(process, signum)
    deadline = time.monotonic() + timeout
    for process in processes:
        try:
            process.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            _signal(process, signal.SIGKILL)
            process.wait()


def _signal(process: subprocess.Popen[bytes], signum: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(process.pid, signum)


def taskq_command(*args: str) -> list[str]:
    """The argv that runs this taskq's CLI with this Python."""
    return [sys.executable, "-m", "taskq", *args]
