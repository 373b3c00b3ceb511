"""`taskq worker --processes N`: one command, N worker processes, kept running.

Python runs one handler at a time per process (the GIL), so a busy worker tops out at
one core. The pool starts N copies of the single-process worker and starts a copy
again when one dies while the pool is running; the dead copy's tasks are reaped when
their leases expire, like any crashed worker's. A stop signal to the pool drains every
copy; a second ends them at once, as for one worker. The copies' own stop signals only
drain them (a supervisor may signal them too), so the pool says "at once" with
EXIT_NOW_SIGNAL, and kills a copy that has not ended KILL_AFTER_SECONDS later. Each
signal it sends comes with SIGCONT, so a stopped copy cannot hold the pool up.
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

from taskq.processes import REFUSED_STATUS, die_with_parent, stop_signals
from taskq.worker.lifecycle import (
    EXIT_NOW_SIGNAL,
    EXIT_NOW_SIGNALS,
    REPORT_SIGNAL,
    EarlyStop,
    taken_at_will,
)

log = logging.getLogger("taskq.worker")

POLL_SECONDS = 0.2
# A copy that dies sooner than this after it started counts as crashing: the next
# start waits, doubling each time, so a broken app cannot fork in a tight loop.
STEADY_SECONDS = 10.0
FIRST_RESTART_DELAY = 0.5
MAX_RESTART_DELAY = 30.0
# What the pool exits with when a copy refused to run, or could not be started, as one
# `taskq worker` refusing exits.
REFUSED_EXIT = 2
# How long a copy told to exit at once has before it is killed.
KILL_AFTER_SECONDS = 5.0


def signal_name(signum: int) -> str:
    """SIGKILL, or "signal 40" for one with no name in Python (a real-time signal)."""
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


class _Copy:
    """One worker process of the pool and when it may be started again."""

    def __init__(self, index: int) -> None:
        self.index = index
        self.process: subprocess.Popen[bytes] | None = None
        self.started_at = 0.0
        self.restart_delay = FIRST_RESTART_DELAY
        self.restart_at = 0.0
        self.signalled = 0
        self.starts = 0
        # How its last process exited, kept while it waits to be started again.
        self.last_status = 0

    def send(self, signum: int) -> None:
        """Send `signum` to this copy if it runs, with SIGCONT so that a stopped one acts
        on it; SIGTERMs are counted (a process started again counts from zero)."""
        if self.process is not None and self.process.poll() is None:
            try:
                os.kill(self.process.pid, signum)
                os.kill(self.process.pid, signal.SIGCONT)
            except ProcessLookupError:
                return
            if signum == signal.SIGTERM:
                self.signalled += 1


class WorkerPool:
    """Runs `processes` copies of `argv` (a single-process `taskq worker` command)."""

    def __init__(self, argv: Sequence[str], processes: int,
                 env: dict[str, str] | None = None) -> None:
        self.argv = list(argv)
        self.env = env
        self.copies = [_Copy(i) for i in range(processes)]
        self.signals_received = 0
        # The stop signal that came second, once one has: the pool exits as one worker
        # told so twice would (128 + its number).
        self.second_signal = 0
        self.exit_now_at = float("inf")
        self._wake = threading.Event()

    def run(self, install_signal_handlers: bool = True, early: EarlyStop | None = None) -> int:
        """Run until asked to stop and every copy has exited; returns the exit status:
        0 when every copy exited cleanly at the end, else the first failing status.
        `early`: the stop signals that came before the pool's own handlers took over,
        one of which stops it before it starts a copy."""
        if install_signal_handlers:
            for signum in stop_signals():
                signal.signal(signum, self._on_signal)
            for signum in taken_at_will(pool_copy=False):
                signal.signal(signum, self._on_report_signal if signum == REPORT_SIGNAL
                              else self._on_exit_now_signal)
        if early is not None and early.reason is not None:
            log.info("worker pool: stopped (%s): no process was started", early.reason)
            return 0
        log.info("worker pool: %d processes", len(self.copies))
        for copy in self.copies:
            if self.signals_received:
                break  # the rest would only be told to stop as they start
            if not self._start(copy):
                # Every copy would fail the same (the interpreter gone, no memory to
                # fork): started again for ever, the pool would run nothing.
                log.error("worker pool: the pool stops: it cannot start its processes")
                self.stop()
                copy.last_status = REFUSED_EXIT
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
        if self.signals_received == 1:
            for copy in self.copies:
                copy.send(signal.SIGTERM)
        else:
            if not self.second_signal:
                name = signal.Signals(signum).name
                log.warning("worker pool: %s: every process exits now; leases in hand "
                            "will be reaped",
                            name if signum in EXIT_NOW_SIGNALS else f"second {name}")
                self.second_signal = signum
                self.exit_now_at = time.monotonic()
            for copy in self.copies:
                copy.send(EXIT_NOW_SIGNAL)
        self._wake.set()

    def _on_exit_now_signal(self, signum: int, frame: FrameType | None) -> None:
        """SIGQUIT or SIGUSR2: every copy exits at once, as after a second stop."""
        self.signals_received = max(self.signals_received, 1)
        self._on_signal(signum, frame)

    def _on_report_signal(self, signum: int, frame: FrameType | None) -> None:
        """Say which copies run, and pass the signal on: each reports for itself."""
        now = time.monotonic()
        running = [(c, c.process) for c in self.copies
                   if c.process is not None and c.process.returncode is None]
        log.info("worker pool: %d of %d processes running: %s", len(running),
                 len(self.copies), ", ".join(
                     f"{c.index} (pid {p.pid}, up {now - c.started_at:.0f}s, started "
                     f"{c.starts} times)" for c, p in running) or "none")
        for copy, _ in running:
            copy.send(REPORT_SIGNAL)

    def _start(self, copy: _Copy) -> bool:
        """Start `copy`'s process; False, said in the log, when the system would not."""
        copy.signalled = 0
        copy.starts += 1
        # A session of its own: a Ctrl-C reaches only the pool, which stops its copies
        # in order.
        dies_with_us = die_with_parent()

        def prepare() -> None:
            dies_with_us()
            # Blocked until the copy's own handler is set (EarlyStop unblocks it): the
            # pool passes SIGUSR1 on to a copy that may be starting, whose default
            # action would end it.
            signal.pthread_sigmask(signal.SIG_BLOCK, {REPORT_SIGNAL})

        try:
            copy.process = subprocess.Popen(
                self.argv, env=self.env, stdin=subprocess.DEVNULL, start_new_session=True,
                preexec_fn=prepare,  # noqa: PLW1509 (a prctl flag, a getppid, a mask)
            )
        except OSError as e:  # a fork or exec refused: no memory, no interpreter there
            copy.started_at = time.monotonic()
            log.error("worker pool: process %d could not be started: %s", copy.index, e)
            return False
        copy.started_at = time.monotonic()
        log.info("worker pool: process %d started (pid %d)", copy.index, copy.process.pid)
        return True

    def _watch(self, copy: _Copy) -> None:
        """Start again a copy that died while the pool runs, after its restart delay."""
        if self.signals_received:
            return  # a copy that ends now was told to by the pool: _wait_all judges it
        process = copy.process
        if process is not None:
            status = process.poll()
            if status is None:
                return
            lived = time.monotonic() - copy.started_at
            # At its first start, however long that took (an app slow to import), every
            # copy would refuse the same: started again, for ever. A copy started again
            # may meet a passing refusal (a failover's replica, a deploy half done): it
            # waits its doubling delay, which a refusal never resets.
            if status == REFUSED_STATUS and copy.starts == 1:
                copy.process, copy.last_status = None, status
                log.error("worker pool: process %d (pid %d) refused to run (its reason is "
                          "in its lines above): the pool stops", copy.index, process.pid)
                self.stop()
                return
            copy.process = None
            self._restart_later(copy, status, 0.0 if status == REFUSED_STATUS else lived,
                                f"(pid {process.pid}) exited with status {status} after "
                                f"{lived:.1f}s")
        if time.monotonic() >= copy.restart_at and not self._start(copy):
            self._restart_later(copy, REFUSED_EXIT, 0.0, "was not started")

    def _restart_later(self, copy: _Copy, status: int, lived: float, what: str) -> None:
        """Have `copy` started again after its restart delay, which doubles while it
        does not stay up STEADY_SECONDS."""
        if lived >= STEADY_SECONDS:
            copy.restart_delay = FIRST_RESTART_DELAY
        delay = copy.restart_delay
        copy.restart_delay = min(delay * 2, MAX_RESTART_DELAY)  # if it crashes again
        copy.restart_at = time.monotonic() + delay
        copy.last_status = status
        log.warning("worker pool: process %d %s; starting it again in %.1fs (its tasks are "
                    "reaped when their leases expire)", copy.index, what, delay)

    def _wait_all(self) -> int:
        # A signal handled while a copy was being started did not see that copy.
        for copy in self.copies:
            if copy.signalled == 0:
                copy.send(signal.SIGTERM)
                if self.second_signal:
                    copy.send(EXIT_NOW_SIGNAL)
        status = 0
        told_to_exit = (128 + EXIT_NOW_SIGNAL, -EXIT_NOW_SIGNAL, -signal.SIGKILL)
        for copy in self.copies:
            # One waiting to start again is as its last process exited: a pool stopped
            # while its copies crash exits failing, not 0.
            code = copy.last_status if copy.process is None else self._wait(copy)
            if code == REFUSED_STATUS:
                code = REFUSED_EXIT  # as one worker refusing exits; any copy may have
            elif code == -signal.SIGTERM and copy.signalled:
                code = 0  # ended by the pool's SIGTERM before it set its handlers
            elif code in told_to_exit and self.second_signal:
                code = 128 + self.second_signal  # as one worker told twice exits
            if code != 0:
                log.warning("worker pool: process %d ended %s", copy.index,
                            f"with status {code}" if code > 0 else f"by {signal_name(-code)}")
            if code != 0 and status == 0:
                status = code if code > 0 else 128 - code
        log.info("worker pool: all %d processes stopped", len(self.copies))
        return status

    def _wait(self, copy: _Copy) -> int:
        """How `copy`'s process exits; killed once it was told to exit at once and has
        not, KILL_AFTER_SECONDS later (a handler stuck in C code never returns to
        Python, where the signal is acted on)."""
        assert copy.process is not None
        while True:
            try:
                return copy.process.wait(POLL_SECONDS)
            except subprocess.TimeoutExpired:
                if time.monotonic() >= self.exit_now_at + KILL_AFTER_SECONDS:
                    log.warning("worker pool: process %d (pid %d) did not exit when told; "
                                "killing it", copy.index, copy.process.pid)
                    copy.send(signal.SIGKILL)
