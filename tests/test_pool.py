"""The worker pool (`taskq worker --processes N`) supervising its copies: a copy that
dies is started again after a delay that doubles while it keeps crashing, and a pool
stopped while its copies crash says so in its exit status."""

from __future__ import annotations

import logging
import re
import sys
import threading
from pathlib import Path

import pytest

import taskq.worker.pool
from taskq.processes import REFUSED_STATUS
from taskq.worker.pool import FIRST_RESTART_DELAY, WorkerPool
from waiting import wait_until

# A copy that fails at once, as one whose app cannot be imported does.
CRASHING = [sys.executable, "-c", "import sys; sys.exit(3)"]


def delays_said(caplog: pytest.LogCaptureFixture) -> list[float]:
    return [float(m.group(1)) for r in caplog.records
            if (m := re.search(r"starting it again in ([\d.]+)s", r.getMessage()))]


def restarted(pool: WorkerPool, caplog: pytest.LogCaptureFixture, times: int) -> list[int]:
    """Run `pool` until it has said `times` times that it starts a copy again, then stop
    it; its exit status, in a list (empty if it did not end)."""
    caplog.set_level(logging.INFO, logger="taskq.worker")
    ended: list[int] = []
    runner = threading.Thread(target=lambda: ended.append(pool.run(False)))
    runner.start()
    try:
        wait_until(lambda: len(delays_said(caplog)) >= times, 20, f"{times} restarts")
    finally:
        pool.stop()
        runner.join(20)
    return ended


def test_a_pool_stopped_while_its_copy_crashes_exits_with_the_copy_s_status(
    caplog: pytest.LogCaptureFixture,
) -> None:
    assert restarted(WorkerPool(CRASHING, processes=1), caplog, 3) == [3]
    # The first crash waits the first delay, and each quick one after it twice as long.
    first, second, third = delays_said(caplog)[:3]
    assert (first, second, third) == (FIRST_RESTART_DELAY, 2 * FIRST_RESTART_DELAY,
                                      4 * FIRST_RESTART_DELAY)


def test_a_pool_whose_copies_drain_and_end_cleanly_exits_zero(tmp_path: Path) -> None:
    # Each copy takes SIGTERM as a worker does (drain, exit 0).
    assert stopped_once_ready(tmp_path, "sys.exit(0)") == [0]


def stopped_once_ready(tmp_path: Path, on_sigterm: str) -> list[int]:
    """Run a pool of two copies that each do `on_sigterm` at SIGTERM, stop it once both
    say they are ready, and return its exit status, in a list (empty if it did not end)."""
    ready = tmp_path / "ready"
    argv = [sys.executable, "-c", "import os, signal, sys, time\n"
            f"signal.signal(signal.SIGTERM, lambda *_: {on_sigterm})\n"
            f"open({str(ready)!r} + str(os.getpid()), 'w').close(); time.sleep(30)"]
    pool = WorkerPool(argv, processes=2)
    ended: list[int] = []
    runner = threading.Thread(target=lambda: ended.append(pool.run(False)))
    runner.start()
    wait_until(lambda: len(list(tmp_path.iterdir())) == 2, 20, "both copies to be ready")
    pool.stop()
    runner.join(20)
    return ended


def test_a_pool_whose_copy_refuses_its_settings_at_its_first_start_stops_with_status_2(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Every copy would refuse the same settings: started again for ever, the pool would
    look healthy to its supervisor and run nothing."""
    caplog.set_level(logging.INFO, logger="taskq.worker")
    refusing = [sys.executable, "-c", f"import sys; sys.exit({REFUSED_STATUS})"]
    pool = WorkerPool(refusing, processes=2)
    ended: list[int] = []
    runner = threading.Thread(target=lambda: ended.append(pool.run(False)))
    runner.start()
    runner.join(20)
    assert ended == [2]  # as one `taskq worker` refusing its settings exits
    assert "refused to run" in caplog.text and delays_said(caplog) == []


def test_a_copy_that_meets_a_passing_fault_at_its_first_start_is_started_again(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Exit 2 is also a Redis out of reach or still loading: a restart or failover as the
    pool starts must not stop it for good."""
    failing = WorkerPool([sys.executable, "-c", "import sys; sys.exit(2)"], processes=1)
    assert restarted(failing, caplog, 2) == [2]
    assert "refused to run" not in caplog.text


def run_to_end(pool: WorkerPool, caplog: pytest.LogCaptureFixture) -> list[int]:
    """Run `pool` until it stops by itself; its exit status, in a list (empty if it did
    not end within 20 s, when it is stopped)."""
    caplog.set_level(logging.INFO, logger="taskq.worker")
    ended: list[int] = []
    runner = threading.Thread(target=lambda: ended.append(pool.run(False)))
    runner.start()
    runner.join(20)
    if runner.is_alive():
        pool.stop()
        runner.join(20)
        return []
    return ended


def test_a_copy_that_refuses_after_a_long_start_up_stops_the_pool_too(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An app slow to import (a model to load) refused past STEADY_SECONDS: it was
    started again every half second, for ever, its delay reset each time."""
    monkeypatch.setattr(taskq.worker.pool, "STEADY_SECONDS", 0.5)
    slow = [sys.executable, "-c", f"import sys, time; time.sleep(1); sys.exit({REFUSED_STATUS})"]
    assert run_to_end(WorkerPool(slow, processes=1), caplog) == [2]
    assert "refused to run" in caplog.text and delays_said(caplog) == []


def test_a_pool_that_cannot_start_its_copies_stops_with_status_2_saying_so(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Popen's error went up through the pool as a traceback."""
    missing = [str(tmp_path / "no-python"), "-c", "pass"]
    assert run_to_end(WorkerPool(missing, processes=2), caplog) == [2]
    assert "process 0 could not be started: [Errno 2] No such file or directory" in caplog.text
    assert "the pool stops: it cannot start its processes" in caplog.text


def test_a_copy_that_cannot_be_started_again_is_tried_again_and_the_others_run_on(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A redeploy replaced the interpreter the pool was started with, and a copy died:
    its restart's error ended the pool, and with it the copy still running."""
    python, first = tmp_path / "python", tmp_path / "first"
    python.symlink_to(sys.executable)
    # The first copy to start removes the interpreter once both run, and dies.
    argv = [str(python), "-c", "import os, sys, time\n"
            f"try: os.close(os.open({str(first)!r}, os.O_CREAT | os.O_EXCL))\n"
            "except FileExistsError: time.sleep(60)\n"
            f"time.sleep(1); os.unlink({str(python)!r}); sys.exit(3)"]
    pool = WorkerPool(argv, processes=2)
    running: list[int] = []

    def restarts_said() -> bool:
        running[:] = [c.index for c in pool.copies
                      if c.process is not None and c.process.poll() is None]
        return "was not started" in caplog.text

    caplog.set_level(logging.INFO, logger="taskq.worker")
    runner = threading.Thread(target=lambda: ended.append(pool.run(False)))
    ended: list[int] = []
    runner.start()
    try:
        wait_until(restarts_said, 20, "a copy's restart to fail")
        wait_until(lambda: len(delays_said(caplog)) >= 3, 20, "three restart delays")
    finally:
        pool.stop()
        runner.join(20)
    assert len(running) == 1  # the other copy ran on
    assert ended == [2]
    assert "could not be started: [Errno 2] No such file or directory" in caplog.text


def test_a_refusal_when_a_copy_is_started_again_waits_its_delay_and_stops_no_pool(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A copy that died and, started again, meets a passing refusal (a failover leaving
    the endpoint on a replica for a while) must not stop the copies that run; its
    delay doubles, never reset by the refusal however long it took."""
    crashed = tmp_path / "crashed"
    argv = [sys.executable, "-c", "import os, sys\n"
            f"if not os.path.exists({str(crashed)!r}):\n"
            f"    open({str(crashed)!r}, 'w').close(); sys.exit(3)\n"
            f"sys.exit({REFUSED_STATUS})"]
    assert restarted(WorkerPool(argv, processes=1), caplog, 3) == [2]
    assert "refused to run" not in caplog.text
    assert delays_said(caplog)[:3] == [FIRST_RESTART_DELAY, 2 * FIRST_RESTART_DELAY,
                                       4 * FIRST_RESTART_DELAY]


def test_a_copy_ended_by_a_signal_python_has_no_name_for_is_said_by_its_number(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """signal.Signals(40) raised in the pool's last lines: no status, the other copies
    never waited for."""
    caplog.set_level(logging.INFO, logger="taskq.worker")
    assert stopped_once_ready(tmp_path, "os.kill(os.getpid(), 40)") == [128 + 40]
    assert caplog.text.count("ended by signal 40") == 2
