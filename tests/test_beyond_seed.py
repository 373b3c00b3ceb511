"""What taskq guarantees past the taskQ seed's known limitations (the others live in
test_lost_replies.py, test_broker.py's TestReap and test_worker.py's grace tests)."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest
import redis

from taskq.broker import Broker, NewTask
from taskq.processes import spawn, stop_all, taskq_command
from taskq.tools.embedded import EmbeddedRedis
from waiting import wait_until, worker_env

SUICIDAL_APP = '''
import os, signal
import taskq

app = taskq.App()

@app.task("suicidal")
def suicidal() -> None:
    os.kill(os.getpid(), signal.SIGKILL)
'''


@pytest.mark.processes
def test_a_handler_that_keeps_killing_its_worker_ends_dead_saying_so(
    redis_server: EmbeddedRedis, broker: Broker, tmp_path: Path
) -> None:
    (tmp_path / "suicide_app.py").write_text(SUICIDAL_APP)
    env = worker_env(redis_server.url, "test", tmp_path / "ledger.db", LEASE_SECONDS="0.5",
                     BACKOFF_BASE_SECONDS="0.01", BACKOFF_MAX_SECONDS="0.02",
                     PYTHONPATH=str(tmp_path))
    broker.enqueue("doomed", max_retries=2, name="suicidal")
    workers: list[subprocess.Popen[bytes]] = []

    def start() -> None:
        log = str(tmp_path / f"worker-{len(workers)}.log")
        workers.append(spawn(taskq_command("worker", "--app", "suicide_app:app"), env, log))

    def dead_or_restart() -> bool:
        if sum(p.poll() is None for p in workers) < 2:
            start()  # a worker died with the task: keep one alive to reap its lease
        return broker.dead() == ["doomed"]

    try:
        wait_until(dead_or_restart, timeout=30, what="the task to die")
    finally:
        stop_all(workers)
    record = broker.task("doomed")
    assert record is not None
    assert record.retries == 2
    assert "lease expired" in record.last_error
    assert "no retries left" in record.last_error
    assert "may be what kills it" in record.last_error


class TestRecordsExpire:
    def test_a_completed_record_expires_after_its_retention(self, client: redis.Redis) -> None:
        broker = Broker(client, "test", completed_ttl=0.2)
        broker.enqueue("t1")
        task = broker.lease_many("w", 30, 1).tasks[0]
        assert broker.ack(task.task_id, task.token)
        assert 0 < client.pttl(broker.keys.task("t1")) <= 200
        wait_until(lambda: broker.task("t1") is None, timeout=5, what="the record to expire")

    def test_a_record_outlives_the_idempotency_key_that_names_it(
        self, client: redis.Redis
    ) -> None:
        broker = Broker(client, "test", completed_ttl=0.2)
        broker.enqueue("t1", idempotency_key="k1", idempotency_ttl=60)
        task = broker.lease_many("w", 30, 1).tasks[0]
        broker.ack(task.task_id, task.token)
        record_ttl = client.pttl(broker.keys.task("t1"))
        assert record_ttl >= client.pttl(broker.keys.idem("k1")) > 50_000

    def test_dead_tasks_are_purged_with_their_dlq_entry(self, broker: Broker) -> None:
        for task_id in ("old", "new"):
            broker.enqueue(task_id, max_retries=0)
            task = broker.lease_many("w", 30, 1).tasks[0]
            broker.fail(task.task_id, task.token, "boom")
            if task_id == "old":
                time.sleep(0.3)
        assert broker.purge(dead_ttl=0.2) == ["old"]
        assert broker.dead() == ["new"]
        assert broker.task("old") is None
        assert broker.task("new") is not None

    def test_a_dead_task_is_purged_only_once_no_idempotency_key_names_it(
        self, broker: Broker
    ) -> None:
        broker.enqueue("keyed", max_retries=0, idempotency_key="k1", idempotency_ttl=1)
        task = broker.lease_many("w", 30, 1).tasks[0]
        broker.fail(task.task_id, task.token, "boom")
        time.sleep(0.3)
        assert broker.purge(dead_ttl=0.2) == []
        again = broker.enqueue("other", idempotency_key="k1")
        assert (again.task_id, again.created) == ("keyed", False)
        assert broker.task("keyed") is not None  # the key names a record
        broker.enqueue("plain", max_retries=0)  # dead after it, with no key
        task = broker.lease_many("w", 30, 1).tasks[0]
        broker.fail(task.task_id, task.token, "boom")
        time.sleep(0.3)
        assert broker.purge(dead_ttl=0.2) == ["plain"]  # the kept one holds up no other
        assert broker.dead() == ["keyed"]
        wait_until(lambda: not broker.client.exists(broker.keys.idem("k1")), timeout=5,
                   what="the idempotency key to expire")
        assert broker.purge(dead_ttl=0.2) == ["keyed"]
        assert broker.dead() == [] and broker.task("keyed") is None

    def test_more_kept_dead_tasks_than_a_purge_looks_at_hold_up_no_other(
        self, broker: Broker
    ) -> None:
        """Each call looks at ten times its limit. It began at the oldest end every
        time, so 1,000 tasks kept for their keys there stopped every later purge."""
        kept = [NewTask(f"kept{n}", max_retries=0, idempotency_key=f"k{n}")
                for n in range(1005)]
        broker.enqueue_many(kept)
        broker.enqueue_many([NewTask(f"plain{n}", max_retries=0) for n in range(50)])
        batch = broker.lease_many("w", 30, 2000).tasks
        for task in batch:
            assert broker.fail(task.task_id, task.token, "boom").status == "dead"
        time.sleep(0.01)
        purged = [broker.purge(dead_ttl=0.001, limit=100) for _ in range(3)]
        assert sorted(task_id for call in purged for task_id in call) == sorted(
            f"plain{n}" for n in range(50))
        assert purged[0] == []  # the first call's budget went on 1,000 kept ones
        assert sorted(broker.dead(limit=2000)) == sorted(task.task_id for task in kept)

    def test_redis_memory_stays_flat_over_many_tasks(self, client: redis.Redis) -> None:
        broker = Broker(client, "test", events_retention=2000, completed_ttl=0.3)

        def run_round(n: int) -> int:
            broker.enqueue_many([NewTask(f"r{n}-{i}") for i in range(2000)])
            while batch := broker.lease_many("w", 30, 500).tasks:
                for task in batch:
                    broker.ack(task.task_id, task.token)
            time.sleep(0.4)
            wait_until(lambda: not client.keys(broker.keys.task("*")), timeout=10,
                       what="records to expire")
            return int(client.info("memory")["used_memory"])

        first = run_round(0)
        later = [run_round(n) for n in range(1, 4)]
        assert max(later) < first * 1.1 + 256 * 1024, (first, later)
