"""The worker's shutdown state machine (taskq.worker.lifecycle) as signals reach it: a
stop signal that lands while another is being handled, a process a handler forks, and
a program that ran a worker getting its own handlers back."""

from __future__ import annotations

import signal
import subprocess
import sys

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
# handler, on that thread between two bytecodes, must only ask for the report.
REPORT_UNDER_LOCK = """
import os, signal
from taskq.worker.inbox import Inbox
from taskq.worker.lifecycle import Lifecycle
from taskq.worker.slots import Slots
slots = Slots(4)
life = Lifecycle(5.0, Inbox())
life.install_signal_handlers()
with slots._lock:
    os.kill(os.getpid(), signal.SIGUSR1)
    for _ in range(1000):
        pass
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
    assert done.stdout.split() == ["True", "False", "running"]
    assert "Current thread 0x" in done.stderr  # the stacks came at once, from C


# After a worker stopped, SIGUSR1 and SIGQUIT do what they did before it: here their
# defaults, which end the process (no stack dump left registered).
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
    assert "survived" not in done.stdout and "Thread 0x" not in done.stderr


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
    assert "Thread 0x" not in done.stderr


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


# A program whose stderr has no file descriptor (a notebook's stream, None under
# pythonw) still runs a worker: the report comes without the stack dump.
NO_STDERR_FILE = """
import io, os, signal, sys
from taskq.worker.inbox import Inbox
from taskq.worker.lifecycle import Lifecycle
sys.stderr = io.StringIO() if sys.argv[1] == "stream" else None
life = Lifecycle(5.0, Inbox())
life.install_signal_handlers()
os.kill(os.getpid(), signal.SIGUSR1)
for _ in range(1000):
    pass
print(life.report_asked(), life.stacks_dumped)
"""


@pytest.mark.parametrize("stderr", ["stream", "none"])
def test_a_worker_whose_stderr_is_no_file_still_reports_without_the_stacks(
    stderr: str,
) -> None:
    done = subprocess.run([sys.executable, "-c", NO_STDERR_FILE, stderr],
                          capture_output=True, text=True, timeout=20, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["True", "False"]


# A program with handlers of its own on the signals a worker would take at their
# defaults (log rotation on SIGUSR1, a bench's counters) keeps them.
OWN_HANDLERS = """
import os, signal, time
from taskq.worker.inbox import Inbox
from taskq.worker.lifecycle import EarlyStop, Lifecycle
got = []
for signum in (signal.SIGUSR1, signal.SIGQUIT, signal.SIGUSR2):
    signal.signal(signum, lambda n, f: got.append(n))
EarlyStop()
life = Lifecycle(5.0, Inbox())
life.install_signal_handlers()
for signum in (signal.SIGUSR1, signal.SIGQUIT, signal.SIGUSR2):
    os.kill(os.getpid(), signum)
    time.sleep(0.05)
print(got == [signal.SIGUSR1, signal.SIGQUIT, signal.SIGUSR2], life.report_asked(),
      life.stacks_dumped)
"""


def test_a_programs_own_handlers_of_sigusr1_sigquit_and_sigusr2_are_left_alone() -> None:
    """The worker took them over: a bench's counting worker, which writes its counts on
    SIGUSR1, wrote none."""
    done = subprocess.run([sys.executable, "-c", OWN_HANDLERS], capture_output=True,
                          text=True, timeout=20, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["True", "False", "False"]
    assert "Thread 0x" not in done.stderr
