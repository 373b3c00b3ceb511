"""The worker's shutdown state machine (taskq.worker.lifecycle) as signals reach it: a
stop signal that lands while another is being handled, a process a handler forks, and
a program that ran a worker getting its own handlers back."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest

# A pool copy's handlers, and a stop signal handled while the main thread is inside
# request_stop (as when the pool's SIGTERM and a supervisor's land together): Python
# runs the handler there, between two bytecodes, on the thread that holds the lock.
NESTED = """
import os, signal
from taskq.worker.inbox import Inbox
from taskq.worker.lifecycle import Lifecycle
life = Lifecycle(5.0, Inbox())
life.install_signal_handlers(pool_copy=True)
with life._lock:
    os.kill(os.getpid(), signal.SIGTERM)
    for _ in range(1000):
        pass
print(life.phase.value)
"""


def test_a_stop_signal_handled_inside_a_stop_request_drains_instead_of_hanging() -> None:
    try:
        done = subprocess.run([sys.executable, "-c", NESTED], capture_output=True,
                              text=True, timeout=20, check=False)
    except subprocess.TimeoutExpired:
        raise AssertionError("the handler waited for ever on a lock its thread held") \
            from None
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "draining"


# A handler that forks (multiprocessing's default start on Linux) and stops its child
# the usual way: the child must end on SIGTERM as in plain Python, not drain a worker it
# does not run. The child is killed for good afterwards whatever happened.
FORKED = """
import multiprocessing, os, signal, sys, time
from taskq.worker.inbox import Inbox
from taskq.worker.lifecycle import EarlyStop, Lifecycle
if sys.argv[1] == "command":  # `taskq worker`: its start-up handlers came first
    EarlyStop()
Lifecycle(5.0, Inbox()).install_signal_handlers(pool_copy=sys.argv[1] == "copy")
child = multiprocessing.get_context("fork").Process(target=time.sleep, args=(60,))
child.start()
child.terminate()
child.join(5)
code = child.exitcode
if code is None:
    os.kill(child.pid, signal.SIGKILL)
print(code)
"""


@pytest.mark.parametrize("kind", ["worker", "copy", "command"])
def test_a_process_a_handler_forks_ends_on_sigterm_as_in_plain_python(kind: str) -> None:
    """Under the command, the child got the start-up handler back, which swallowed the
    SIGTERM: Process.terminate() ended nothing, a Pool's terminate() waited for ever."""
    done = subprocess.run([sys.executable, "-c", FORKED, kind], capture_output=True,
                          text=True, timeout=30, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == str(-signal.SIGTERM), done.stderr[-2000:]


# Ctrl-C after a worker stopped reaches the program again as KeyboardInterrupt, and
# SIGTERM its own handler.
RESTORED = """
import signal
from taskq.worker.inbox import Inbox
from taskq.worker.lifecycle import Lifecycle
def own(signum, frame):
    print("own handler")
signal.signal(signal.SIGTERM, own)
life = Lifecycle(5.0, Inbox())
life.install_signal_handlers()
assert signal.getsignal(signal.SIGINT) != signal.default_int_handler
life.restore_signal_handlers()
print(signal.getsignal(signal.SIGTERM) is own,
      signal.getsignal(signal.SIGINT) is signal.default_int_handler,
      signal.getsignal(signal.SIGHUP) == signal.SIG_DFL)
"""


def test_a_worker_gives_back_the_signal_handlers_it_replaced() -> None:
    done = subprocess.run([sys.executable, "-c", RESTORED], capture_output=True,
                          text=True, timeout=20, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["True", "True", "True"]


# SIGUSR1 while the loop thread holds the lock of the state a report reads (Slots): the
# handler, on that thread between two bytecodes, must only ask for the report; the
# stacks come from the stack reporter's thread meanwhile.
REPORT_UNDER_LOCK = """
import logging, os, signal, sys, time
from taskq.worker.inbox import Inbox
from taskq.worker.lifecycle import Lifecycle
from taskq.worker.slots import Slots
logging.basicConfig(level=logging.INFO, stream=sys.stdout, format="%(message)s")
slots = Slots(4)
life = Lifecycle(5.0, Inbox())
life.install_signal_handlers()
with slots._lock:
    os.kill(os.getpid(), signal.SIGUSR1)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and not life._report_asked:
        pass
    time.sleep(0.5)  # the lock still held: the stacks must come all the same
print(life.report_asked(), life.report_asked(), life.phase.value)
"""


def test_a_report_asked_while_the_loop_holds_the_slots_lock_is_left_to_the_loop() -> None:
    try:
        done = subprocess.run([sys.executable, "-c", REPORT_UNDER_LOCK],
                              capture_output=True, text=True, timeout=20, check=False)
    except subprocess.TimeoutExpired:
        raise AssertionError("the handler waited for ever on a lock its thread held") \
            from None
    assert done.returncode == 0, done.stderr[-2000:]
    lines = done.stdout.splitlines()
    assert lines[-1].split() == ["True", "False", "running"]
    main = next(line for line in lines if line.startswith("thread MainThread (0x"))
    assert "<string>:" in main and "<module>" in main, main  # where the main thread was


# After a worker stopped, SIGUSR1, SIGQUIT and SIGUSR2 do what they did before it: here
# their defaults, which end the process.
AFTER_RESTORE = """
import os, signal, sys
from taskq.worker.inbox import Inbox
from taskq.worker.lifecycle import Lifecycle
life = Lifecycle(5.0, Inbox())
life.install_signal_handlers()
life.restore_signal_handlers()
os.kill(os.getpid(), getattr(signal, sys.argv[1]))
print("survived")
"""


@pytest.mark.parametrize("name", ["SIGUSR1", "SIGQUIT", "SIGUSR2"])
def test_signals_a_worker_took_over_do_their_defaults_again_once_it_stopped(
    name: str,
) -> None:
    done = subprocess.run([sys.executable, "-c", AFTER_RESTORE, name], capture_output=True,
                          text=True, timeout=20, check=False)
    assert done.returncode == -getattr(signal, name), done.stderr[-2000:]
    assert "survived" not in done.stdout


# A process a handler forks gets SIGUSR1's default too, as in plain Python.
FORKED_USR1 = """
import multiprocessing, os, signal, time
from taskq.worker.inbox import Inbox
from taskq.worker.lifecycle import Lifecycle
Lifecycle(5.0, Inbox()).install_signal_handlers()
child = multiprocessing.get_context("fork").Process(target=time.sleep, args=(60,))
child.start()
os.kill(child.pid, signal.SIGUSR1)
child.join(5)
code = child.exitcode
if code is None:
    os.kill(child.pid, signal.SIGKILL)
print(code)
"""


def test_a_process_a_handler_forks_ends_on_sigusr1_as_in_plain_python() -> None:
    done = subprocess.run([sys.executable, "-c", FORKED_USR1], capture_output=True,
                          text=True, timeout=30, check=False)
    assert done.stdout.strip() == str(-signal.SIGUSR1), done.stderr[-2000:]


# A program that registers its own stack dump on SIGUSR1 after running a worker gets it.
OWN_DUMP_AFTER = """
import faulthandler, os, signal
from taskq.worker.inbox import Inbox
from taskq.worker.lifecycle import Lifecycle
life = Lifecycle(5.0, Inbox())
life.install_signal_handlers()
life.restore_signal_handlers()
faulthandler.register(signal.SIGUSR1)
os.kill(os.getpid(), signal.SIGUSR1)
print("survived")
"""


def test_a_programs_own_stack_dump_registered_after_a_worker_stopped_works() -> None:
    done = subprocess.run([sys.executable, "-c", OWN_DUMP_AFTER], capture_output=True,
                          text=True, timeout=20, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "survived" and "Current thread 0x" in done.stderr


# A program with handlers of its own on the signals a worker would take at their
# defaults (log rotation on SIGUSR1, a bench's counters, faulthandler's dump) keeps them:
# set before the command's start-up, or by the app it imports after it.
OWN_HANDLERS = """
import faulthandler, os, signal, sys, time
from taskq.worker.inbox import Inbox
from taskq.worker.lifecycle import EarlyStop, Lifecycle
got = []
SIGNALS = (signal.SIGUSR1, signal.SIGQUIT, signal.SIGUSR2)
def own():
    for signum in SIGNALS:
        signal.signal(signum, lambda n, f: got.append(n))
dump = open(sys.argv[2], "w")
if sys.argv[1] == "before":
    own()
elif sys.argv[1] == "faulthandler":
    for signum in SIGNALS:
        faulthandler.register(signum, file=dump, chain=False)
EarlyStop()
if sys.argv[1] == "app":
    own()
life = Lifecycle(5.0, Inbox())
life.install_signal_handlers()
for signum in SIGNALS:
    os.kill(os.getpid(), signum)
    time.sleep(0.05)
life.restore_signal_handlers()
for signum in SIGNALS:  # and after the worker, too
    os.kill(os.getpid(), signum)
    time.sleep(0.05)
print(got == [*SIGNALS, *SIGNALS] or sys.argv[1] == "faulthandler", life.report_asked())
"""


@pytest.mark.parametrize("where", ["before", "app", "faulthandler"])
def test_a_programs_own_handlers_of_sigusr1_sigquit_and_sigusr2_are_left_alone(
    where: str, tmp_path: Path
) -> None:
    """The worker took them over: a bench's counting worker, which writes its counts on
    SIGUSR1, wrote none; an app's SIGUSR2 handler, set as it was imported, was replaced
    by an exit in the middle of a task; a faulthandler dump went, and SIGUSR1 killed
    the program once the worker had stopped."""
    dump = tmp_path / "dump.txt"
    done = subprocess.run([sys.executable, "-c", OWN_HANDLERS, where, str(dump)],
                          capture_output=True, text=True, timeout=20, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["True", "False"]
    if where == "faulthandler":
        assert dump.read_text().count("Current thread 0x") == 6
