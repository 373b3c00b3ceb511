"""`taskq worker --processes N`: one command, N worker processes, kept running.

Python runs one handler at a time per process (the GIL), so a busy worker tops out at
one core. The pool starts N copies of the single-process worker, forwards every stop
signal to all of them (the first drains, a second ends them at once, as for one
worker), and starts a copy again when one dies while the pool is running; the dead
copy's tasks are reaped when their leases expire, like any crashed worker's.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import threading
import time
from collections.abc import Sequence
from types import FrameType

from taskq.processes import die_with_parent
from taskq.worker.lifecycle import STOP_SIGNALS

log = logging.getLogger("taskq.worker")

POLL_SECONDS = 0.2
# A copy that dies sooner than this after it started counts as crashing: the next
# start waits, doubling each time, so a broken app cannot fork in a tight loop.
STEADY_SECONDS = 10.0
FIRST_RESTART_DELAY = 0.5
MAX_RESTART_DELAY = 30.0


class _Copy:
    """One worker process of the pool and when it may be started again."""

    def __init__(self, index: int) -> None:
        self.index = index
        self.process: subprocess.Popen[bytes] | None = None
        self.started_at = 0.0
        self.restart_delay = FIRST_RESTART_DELAY
        self.restart_at = 0.0
        self.signalled = 0
        # How its last process exited, kept while it waits to be started again.
        self.last_status = 0

    def send_stop(self) -> None:
        """SIGTERM this copy if it runs; a process started again counts from zero."""
        if self.process is not None and self.process.poll() is None:
            try:
                os.kill(self.process.pid, signal.SIGTERM)
            except ProcessLookupError:
                return
            self.signalled += 1


class WorkerPool:
    """Runs `processes` copies of `argv` (a single-process `taskq worker` command)."""

    def __init__(self, argv: Sequence[str], processes: int,
                 env: dict[str, str] | None = None) -> None:
        self.argv = list(argv)
        self.env = env
        self.copies = [_Copy(i) for i in range(processes)]
        self.signals_received = 0
        self._wake = threading.Event()

    def run(self, install_signal_handlers: bool = True) -> int:
        """Run until asked to stop and every copy has exited; returns the exit status:
        0 when every copy exited cleanly at the end, else the first failing status."""
        if install_signal_handlers:
            for signum in STOP_SIGNALS:
                signal.signal(signum, self._on_signal)
        log.info("worker pool: %d processes", len(self.copies))
        for copy in self.copies:
            self._start(copy)
        while not self.signals_received:
            for copy in self.copies:
                self._watch(copy)
            self._wake.wait(POLL_SECONDS)
        return self._wait_all()

    def stop(self) -> None:
        """Ask every copy to drain and stop, as a first SIGTERM would."""
        self._on_signal(signal.SIGTERM, None)

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        self.signals_received += 1
        for copy in self.copies:
            copy.send_stop()
        self._wake.set()

    def _start(self, copy: _Copy) -> None:
        copy.signalled = 0
        # A session of its own: a Ctrl-C reaches only the pool, which forwards exactly
        # one SIGTERM per signal (a copy that got both would take it as a second one).
        copy.process = subprocess.Popen(
            self.argv, env=self.env, stdin=subprocess.DEVNULL, start_new_session=True,
            preexec_fn=die_with_parent,  # noqa: PLW1509 (only sets a prctl flag)
        )
        copy.started_at = time.monotonic()
        log.info("worker pool: process %d started (pid %d)", copy.index, copy.process.pid)

    def _watch(self, copy: _Copy) -> None:
        """Start again a copy that died while the pool runs, after its restart delay."""
        process = copy.process
        if process is not None:
            status = process.poll()
            if status is None:
                return
            lived = time.monotonic() - copy.started_at
            if lived >= STEADY_SECONDS:
                copy.restart_delay = FIRST_RESTART_DELAY
            delay = copy.restart_delay
            copy.restart_delay = min(delay * 2, MAX_RESTART_DELAY)  # if it crashes again
            copy.restart_at = time.monotonic() + delay
            copy.process = None
            copy.last_status = status
            log.warning("worker pool: process %d (pid %d) exited with status %d after "
                        "%.1fs; starting it again in %.1fs (its tasks are reaped when "
                        "their leases expire)", copy.index, process.pid, status, lived, delay)
        if time.monotonic() >= copy.restart_at:
            self._start(copy)

    def _wait_all(self) -> int:
        # A signal handled while a copy was being started did not see that copy.
        for copy in self.copies:
            if copy.signalled == 0:
                copy.send_stop()
        status = 0
        for copy in self.copies:
            # One waiting to start again is as its last process exited: a pool stopped
            # while its copies crash exits failing, not 0.
            code = copy.last_status if copy.process is None else copy.process.wait()
            if code != 0 and status == 0:
                status = code if code > 0 else 128 - code
        log.info("worker pool: all %d processes stopped", len(self.copies))
        return status
