"""The worker's shutdown state machine: running -> draining -> stopped, logged."""

from __future__ import annotations

import ctypes
import logging
import os
import signal
import threading
import time
from collections.abc import Callable
from enum import Enum
from types import FrameType
from typing import Any

from taskq.processes import STOP_SIGNALS, stop_signals
from taskq.worker.inbox import Inbox
from taskq.worker.report import STACKS

log = logging.getLogger("taskq.worker")

Handler = Callable[[int, FrameType | None], Any] | int | signal.Handlers

# How a worker pool tells its copies to exit at once (a second stop signal to the pool).
# A copy's own stop signals only drain it, however many come: a supervisor that stops
# a whole process group or cgroup (systemd's KillMode=control-group) sends each copy
# one besides the one the pool forwards, and two must not read as "exit now", which
# would leave a task whose effect was applied to be reaped and run again.
EXIT_NOW_SIGNAL = signal.SIGUSR2
# The signals that end a worker at once, as a second stop signal does, saying so
# (SIGQUIT is Ctrl-\ in a terminal); left to their defaults, they would end it without
# a word, as a SIGKILL would.
EXIT_NOW_SIGNALS = (signal.SIGQUIT, EXIT_NOW_SIGNAL)
# Asks a worker what it is doing: every thread's stack, then its tasks in hand (see
# report.py).
REPORT_SIGNAL = signal.SIGUSR1


# The handlers a worker replaced, by signal, for a process it forks to put back: a
# process a handler forks (multiprocessing's default start on Linux) would otherwise
# drain a worker it does not run on SIGTERM instead of ending, and a Pool's terminate()
# would wait for it for ever. Written by `EarlyStop` and `Lifecycle`, on the main thread
# alone.
_REPLACED: dict[int, Handler] = {}


# The forking thread's signal mask from before the fork. Those signals are blocked
# across it: one that reached the child before its handlers were put back would run
# none of them (Python drops a pending signal whose handler is now the default), and
# a SIGTERM sent right after a start would be lost.
_FORKING = threading.local()


def _block_before_fork() -> None:
    _FORKING.mask = (signal.pthread_sigmask(signal.SIG_BLOCK, _REPLACED) if _REPLACED
                     else None)


def _unblock_in_parent() -> None:
    if getattr(_FORKING, "mask", None) is not None:
        signal.pthread_sigmask(signal.SIG_SETMASK, _FORKING.mask)


def left_to_taskq(signum: int) -> bool:
    """Whether the program left `signum` at its default before taskq set any handler, so
    a worker may take it: SIGUSR1, SIGQUIT and SIGUSR2 stay a program's own where it set
    a handler (its log rotation, a bench's counters, faulthandler's dump), as the stop
    signals do not. One set by the start-up's `EarlyStop` was left to taskq."""
    current = signal.getsignal(signum)
    if isinstance(getattr(current, "__self__", None), EarlyStop):
        return True
    return (current == signal.SIG_DFL and _REPLACED.get(signum, current) == signal.SIG_DFL
            and not _held_outside_python(signum))


class _SigAction(ctypes.Structure):
    # The handler comes first in the C library's struct sigaction; the rest, whatever
    # its size, fits in what follows.
    _fields_ = (("handler", ctypes.c_void_p), ("rest", ctypes.c_char * 512))


def _held_outside_python(signum: int) -> bool:
    """Whether the C library runs a handler for `signum` that Python's table of them
    does not show (faulthandler.register, a C extension's); False where it cannot be
    asked."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        found = _SigAction()
        if libc.sigaction(signum, None, ctypes.byref(found)) != 0:
            return False
    except (OSError, AttributeError):
        return False
    return found.handler not in (None, 0)  # SIG_DFL is 0


def taken_at_will(pool_copy: bool) -> list[signal.Signals]:
    """Which of EXIT_NOW_SIGNALS and REPORT_SIGNAL a worker takes: those the program
    left to taskq, and in a copy of a pool its EXIT_NOW_SIGNAL, the pool's own."""
    return [signum for signum in (*EXIT_NOW_SIGNALS, REPORT_SIGNAL)
            if left_to_taskq(signum) or (pool_copy and signum == EXIT_NOW_SIGNAL)]


def _install(handlers: dict[signal.Signals, Handler]) -> None:
    """Set `handlers`, keeping the ones they replace for `_put_back` (the first taskq
    replaced, for a signal set twice: the program's own, which a process forked from
    here on gets back, not the start-up's, which a handler's child would keep, ignoring
    Process.terminate())."""
    for signum, handler in handlers.items():
        previous = signal.signal(signum, handler)
        # None: a handler not set from Python, which cannot be set back from it.
        _REPLACED.setdefault(signum, signal.SIG_DFL if previous is None else previous)


def _put_back() -> None:
    for signum, previous in _REPLACED.items():
        signal.signal(signum, previous)
    _REPLACED.clear()


def _put_back_in_child() -> None:
    _put_back()
    _unblock_in_parent()  # now a pending SIGTERM meets the default, and ends the child


os.register_at_fork(before=_block_before_fork, after_in_parent=_unblock_in_parent,
                    after_in_child=_put_back_in_child)


class Phase(Enum):
    RUNNING = "running"
    DRAINING = "draining"
    STOPPED = "stopped"


class EarlyStop:
    """The stop signals that come before a worker's own handlers take over (while its
    app is imported, its server checked, the worker made). Left to the default, one
    ended the process without a word (exit -15; -1 for SIGHUP). The first is kept for
    the worker to stop on at once, with nothing leased; a second ends the process as a
    second stop does (Ctrl-C's KeyboardInterrupt, or the signal's default), so an import
    that hangs can still be cut short; not in a copy of a worker pool (`pool_copy`),
    whose stop signals only drain it, however many come."""

    def __init__(self, pool_copy: bool = False) -> None:
        self.signum: int | None = None
        self.pool_copy = pool_copy
        if threading.current_thread() is threading.main_thread():
            handlers: dict[signal.Signals, Handler] = {
                signum: self._on_signal for signum in stop_signals()}
            for signum in taken_at_will(pool_copy):
                # SIGUSR1 shows where an import or a check that hangs is stuck: the
                # stacks alone, as nothing is in hand yet.
                handlers[signum] = self._on_report_signal if signum == REPORT_SIGNAL \
                    else self._on_exit_now
            if REPORT_SIGNAL in handlers:
                STACKS.start()
            _install(handlers)
            if pool_copy:
                # The pool starts its copies with it blocked, as one that came before
                # this handler would end the copy; one that came meanwhile comes now.
                signal.pthread_sigmask(signal.SIG_UNBLOCK, {REPORT_SIGNAL})

    def _on_report_signal(self, signum: int, frame: FrameType | None) -> None:
        STACKS.ask()

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        if self.signum is None or self.pool_copy:
            self.signum = self.signum or signum
            return
        if signum == signal.SIGINT:
            signal.signal(signum, signal.default_int_handler)
            raise KeyboardInterrupt
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)

    def _on_exit_now(self, signum: int, frame: FrameType | None) -> None:
        log.warning("%s before the worker started: exiting now",
                    signal.Signals(signum).name)
        os._exit(128 + signum)

    @property
    def reason(self) -> str | None:
        """What stopped the worker before it started ("SIGTERM before it started"), or
        None."""
        if self.signum is None:
            return None
        return f"{signal.Signals(self.signum).name} before it started"


class Lifecycle:
    """Tracks the phase. A signal handler only calls `request_stop`, which nudges the
    loop's inbox; the loop acts on it."""

    def __init__(self, grace_seconds: float, inbox: Inbox) -> None:
        self.grace_seconds = grace_seconds
        self.phase = Phase.RUNNING
        self.drain_deadline = float("inf")
        self._inbox = inbox
        self._signals = 0
        # Set by REPORT_SIGNAL's handler, taken by the loop (`report_asked`).
        self._report_asked = False
        # A copy of a worker pool: EXIT_NOW_SIGNAL is the pool's second stop signal.
        self._pool_copy = False
        # Re-entrant: a signal handler runs on the main thread between two bytecodes,
        # inside a request_stop that thread is making (two stop signals that land
        # together), and would wait for ever on a plain lock it holds itself.
        self._lock = threading.RLock()

    @property
    def running(self) -> bool:
        return self.phase is Phase.RUNNING

    @property
    def draining(self) -> bool:
        return self.phase is Phase.DRAINING

    def grace_expired(self) -> bool:
        return time.monotonic() >= self.drain_deadline

    def request_stop(self, reason: str) -> None:
        """Start draining: no new leases; tasks in hand get the grace period to finish."""
        with self._lock:
            if self.phase is not Phase.RUNNING:
                return
            self.phase = Phase.DRAINING
            self.drain_deadline = time.monotonic() + self.grace_seconds
        log.info("draining (%s): no new tasks; %.1fs grace for tasks in hand",
                 reason, self.grace_seconds)
        self._inbox.nudge()

    def report_asked(self) -> bool:
        """Whether REPORT_SIGNAL came since the last call (the loop's to ask)."""
        asked, self._report_asked = self._report_asked, False
        return asked

    def stopped(self) -> None:
        self.phase = Phase.STOPPED
        log.info("stopped")

    def install_signal_handlers(self, pool_copy: bool = False) -> None:
        """First SIGTERM/SIGINT/SIGHUP drains (SIGHUP and SIGINT stay ignored where the
        program ignores them); a second one exits at once (leases are reaped later). In
        a copy of a worker pool, every stop signal drains, and the pool's EXIT_NOW_SIGNAL
        exits at once. SIGQUIT and SIGUSR2 exit at once; REPORT_SIGNAL has the stacks
        logged and asks the loop for its report."""
        if threading.current_thread() is not threading.main_thread():
            return
        self._pool_copy = pool_copy
        handlers: dict[signal.Signals, Handler] = {
            signum: self._on_drain_signal if pool_copy else self._on_signal
            for signum in stop_signals()}
        taken = taken_at_will(pool_copy)
        for signum in (*EXIT_NOW_SIGNALS, REPORT_SIGNAL):
            if signum in taken:
                handlers[signum] = self._on_report_signal if signum == REPORT_SIGNAL \
                    else self._on_exit_now
            else:
                _REPLACED.pop(signum, None)  # the program's since the start-up: its own
        if REPORT_SIGNAL in handlers:
            STACKS.start()
        _install(handlers)

    def restore_signal_handlers(self) -> None:
        """Put back the handlers `install_signal_handlers` replaced: a program that ran a
        worker gets its own Ctrl-C back once the worker has stopped."""
        if threading.current_thread() is threading.main_thread():
            _put_back()

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        self._signals += 1
        if self._signals == 1:
            self.request_stop(signal.Signals(signum).name)
        else:
            self._on_exit_now(signum, frame)

    def _on_drain_signal(self, signum: int, frame: FrameType | None) -> None:
        self.request_stop(signal.Signals(signum).name)

    def _on_report_signal(self, signum: int, frame: FrameType | None) -> None:
        # Two puts on SimpleQueues, safe in a signal handler: the stack reporter logs
        # the stacks now, and the loop, the owner of the tasks in hand, reads the flag
        # (this thread may hold the locks of what it reports).
        STACKS.ask()
        self._report_asked = True
        self._inbox.nudge()

    def _on_exit_now(self, signum: int, frame: FrameType | None) -> None:
        name = signal.Signals(signum).name
        if signum in STOP_SIGNALS:
            why = f"second {name}"
        elif signum == EXIT_NOW_SIGNAL and (self._pool_copy or self._signals):
            why = "second stop signal"
        else:
            why = name
        log.warning("%s: exiting now; leases in hand will be reaped", why)
        os._exit(128 + signum)
