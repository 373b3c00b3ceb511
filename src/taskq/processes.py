"""Child processes that cannot outlive the taskq command that started them."""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import functools
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence

PR_SET_PDEATHSIG = 1
# The signals that stop a long-running taskq command (a worker, by draining it; a Redis
# it runs). SIGHUP is a closed terminal or an ssh session gone: left to its default, it
# would end the command at once, a worker's tasks in hand waiting for their leases to
# run out, a Redis's files left behind.
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
# Stop signals the program may have set to be ignored, and which then stay ignored, as
# Python leaves SIGINT: nohup ignores SIGHUP, so that `nohup taskq worker &` outlives
# its terminal; a non-interactive shell's background job ignores SIGINT. SIGTERM, what a
# supervisor (and a pool, its copies) stops with, is always taken.
MAY_BE_IGNORED = (signal.SIGHUP, signal.SIGINT)
# What a worker pool's copy exits with when it refuses what every copy would refuse (its
# settings, its app, the server's safety settings, the queue's layout in Redis): its
# pool then stops, where it starts again a copy that met a passing fault (a Redis out of
# reach, still loading). EX_CONFIG of sysexits.h.
REFUSED_STATUS = 78


@functools.cache
def _libc() -> ctypes.CDLL | None:
    """The C library, found once, in the parent, the first time a child is started:
    finding it runs `ldconfig -p`, which in a forked child would widen the moment in
    which the parent can die unseen."""
    if not sys.platform.startswith("linux"):
        return None
    name = ctypes.util.find_library("c")
    return None if name is None else ctypes.CDLL(name, use_errno=True)


def die_with_parent() -> Callable[[], None]:
    """A `preexec_fn` for a child that cannot outlive this process: Linux sends it
    SIGTERM when we die, so a killed demo, test or worker pool leaves no worker or
    server behind. Elsewhere it does nothing.

    Linux ties this to the thread that forked, so spawn from a long-lived thread. The
    flag is set in the child after the fork, so a parent that died before it was set
    sends nothing: the child checks its parent is still this one, and exits if not."""
    parent = os.getpid()
    libc = _libc()

    def set_flag() -> None:
        if libc is None:
            return
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
        if os.getppid() != parent:
            os._exit(1)

    return set_flag


def stop_signals() -> list[signal.Signals]:
    """STOP_SIGNALS but those of MAY_BE_IGNORED the program ignores (SIG_IGN)."""
    return [signum for signum in STOP_SIGNALS
            if not (signum in MAY_BE_IGNORED and signal.getsignal(signum) == signal.SIG_IGN)]


def spawn(
    argv: Sequence[str],
    env: dict[str, str],
    log_path: str | None = None,
) -> subprocess.Popen[bytes]:
    """Start `argv` in its own session (a Ctrl-C reaches only us; we stop it in order)."""
    out = open(log_path, "ab") if log_path else subprocess.DEVNULL  # noqa: SIM115
    dies_with_us = die_with_parent()

    def prepare() -> None:
        dies_with_us()
        # Its stop signals its own, whatever this process ignores (run under nohup, or
        # as a shell's background job): a worker leaves an ignored SIGHUP or SIGINT
        # ignored, and we stop it with them. In its own session, no terminal sends it any.
        for signum in MAY_BE_IGNORED:
            signal.signal(signum, signal.SIG_DFL)

    try:
        return subprocess.Popen(
            list(argv),
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT if log_path else subprocess.DEVNULL,
            start_new_session=True,
            preexec_fn=prepare,  # noqa: PLW1509  (a prctl flag, a getppid, two signals)
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
