"""Commands that act on many tasks, cut short: each says what it had done before it
stopped, so that running it again does not do it twice unknowingly."""

from __future__ import annotations

import re
import signal
import subprocess
import sys

import pytest

from cli_support import command_env
from taskq.broker import Broker
from taskq.bulk import Bulk, retry_all
from taskq.cli.dlq import each_shard
from taskq.settings import Settings
from waiting import wait_until


@pytest.mark.processes
def test_an_enqueue_cut_short_says_how_many_it_had_sent(
    settings: Settings, queue: Broker
) -> None:
    env = command_env(REDIS_URL=settings.redis_url, TASKQ_QUEUE=queue.queue,
                      TASKQ_REDIS_CLUSTER="1" if settings.redis_cluster else "0")
    enqueue = subprocess.Popen([sys.executable, "-m", "taskq", "enqueue", "200000"], env=env,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_until(lambda: queue.counts().ready >= 10_000, 60, "10,000 to be sent")
        enqueue.send_signal(signal.SIGINT)
        _, err = enqueue.communicate(timeout=30)
    finally:
        enqueue.kill()
    assert enqueue.returncode == 130, err
    said = re.search(r"stopped after (\d+) of 200000 task\(s\) were sent \(and maybe some "
                     r"of the 1,000 under way\); sending them again makes new tasks: give "
                     r"--idempotency-prefix to resend safely", err)
    assert said is not None, err
    # The batch under way when it stopped may be in Redis, its reply not yet read.
    sent = int(said[1])
    assert 10_000 - 1000 <= sent <= queue.counts().ready <= sent + 1000


def test_a_bulk_retry_cut_short_says_how_many_it_had_moved(
    queue: Broker, capsys: pytest.CaptureFixture[str]
) -> None:
    for n in range(3):
        queue.enqueue(f"d{n}", max_retries=0)
        (task,) = queue.lease_many("w", 30, 1).tasks
        queue.fail(task.task_id, task.token, "broke")

    def two_then_interrupted(broker: Broker, limit: int, done: list[str]) -> Bulk:
        retry_all(broker, 2, done)
        raise KeyboardInterrupt  # as a Ctrl-C between two tasks' scripts

    with pytest.raises(KeyboardInterrupt):
        each_shard([queue], two_then_interrupted, "moved {} task(s) back to ready")
    assert capsys.readouterr().err == (
        "stopped part way: moved 2 task(s) back to ready before it stopped\n")
    assert queue.counts().ready == 2
