"""The worker's shutdown state machine (taskq.worker.lifecycle) as signals reach it: a
stop signal that lands while another is being handled."""

from __future__ import annotations

import subprocess
import sys

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
