"""Periodic schedules on real worker processes: one task per tick through a SIGKILLed
worker and a Redis restart."""

from __future__ import annotations

import os
import signal
import time
from collections import Counter
from pathlib import Path

import pytest

from helpers import events
from taskq.broker import Broker
from taskq.connection import connect
from taskq.keys import schedule_task_id
from taskq.settings import Settings
from taskq.tools.embedded import EmbeddedRedis
from waiting import WorkerProcesses, wait_until, worker_env

pytestmark = pytest.mark.processes

QUEUE = "periodic"
BEAT_APP = '''
from datetime import timedelta
import taskq

app = taskq.App()

@app.periodic(every=timedelta(seconds=1), policy="all")
@app.task("beat")
def beat() -> None:
    pass
'''


def beat_ticks(broker: Broker) -> list[int]:
    """The tick of every task the schedule made, from the task records."""
    pattern = broker.keys.task(schedule_task_id("beat", 0))[:-1] + "*"
    keys = [key.decode() if isinstance(key, bytes) else key
            for key in broker.client.scan_iter(match=pattern)]
    return sorted(int(key.rsplit(":", 1)[1]) for key in keys)


def test_three_workers_make_one_task_per_tick_through_a_kill_and_a_redis_restart(
    tmp_path: Path,
) -> None:
    server = EmbeddedRedis(binary=os.environ.get("REDIS_SERVER", ""),
                           data_dir=tmp_path / "redis", appendfsync="always").start()
    broker = Broker(connect(Settings.from_env({}, redis_url=server.url,
                                              redis_timeout_seconds=1.0)), QUEUE)
    (tmp_path / "beat_app.py").write_text(BEAT_APP)
    workers = WorkerProcesses(tmp_path, worker_env(
        server.url, QUEUE, tmp_path / "ledger.db", PYTHONPATH=str(tmp_path),
        REDIS_TIMEOUT_SECONDS="1"))
    try:
        started = [workers.start("--app", "beat_app:app") for _ in range(3)]
        wait_until(lambda: len(beat_ticks(broker)) >= 2, 20, "the first two ticks")
        started[0].send_signal(signal.SIGKILL)
        time.sleep(1.5)
        server.stop()
        server.start()
        time.sleep(3.5)
        assert all(p.poll() is None for p in started[1:]), workers.logs()
        wait_until(lambda: len(beat_ticks(broker)) >= 7, 20, "seven ticks in all")
        workers.stop_all()
        ticks = beat_ticks(broker)
        # Every tick from the first to the last made its task, each exactly once.
        assert ticks == list(range(ticks[0], ticks[-1] + 1000, 1000)), ticks
        enqueued = Counter(e.task for e in events(broker.client, broker.keys)
                           if e.type == "enqueued")
        assert set(enqueued) == {schedule_task_id("beat", t) for t in ticks}
        assert set(enqueued.values()) == {1}
    finally:
        workers.stop_all()
        broker.client.close()
        server.stop()
