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
from taskq.worker.lifecycle import Lifecycle
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


@pytest.mark.parametrize("kind", ["worker", "copy"])
def test_a_process_a_handler_forks_ends_on_sigterm_as_in_plain_python(kind: str) -> None:
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
