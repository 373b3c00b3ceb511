"""Leasing against a real Redis: `lease_many`; `wait_and_lease`, which waits for work
and leases it in the same round trip; and `ack_and_lease`, which settles finished tasks
and refills their slots in one."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
import redis

from conftest import ON_CLUSTER
from helpers import dump, events, lease_one, leased_token, record_of, wait_past
from taskq.broker import Broker, LeasedTask
from taskq.errors import BrokerError, InvalidTaskError
from taskq.results import Renewal
from taskq.scripts import source
from taskq.tools.ledger import Ledger
from taskq.transport import SingleNode


class TestLease:
    def test_lease_takes_the_oldest_ready_task_first(self, broker: Broker) -> None:
        for task_id in ("a", "b", "c"):
            broker.enqueue(task_id)
        got = [lease_one(broker, "w", 10) for _ in range(3)]
        assert [task_id for task_id, _ in got] == ["a", "b", "c"]
        assert all(leased_token(0, token) for _, token in got)  # each one's first run
        assert broker.lease("w", 10) is None

    def test_lease_bumps_the_token_and_records_the_worker(self, broker: Broker) -> None:
        broker.enqueue("t1", max_retries=5, payload={"p": True}, name="mod.fn")
        before = broker.server_time_ms()
        batch = broker.lease_many("w7", 2.5, 1)
        (task,) = batch.tasks
        token = leased_token(0, task.token)
        assert task == LeasedTask("t1", token, "mod.fn", '{"p":true}', retries=0, max_retries=5)
        assert task.attempt == 1
        record = record_of(broker, "t1")
        assert (record.state, record.worker, record.fencing_token) == ("running", "w7", token)
        expiry = broker.client.zscore(broker.keys.leased, "t1")
        assert expiry is not None and before + 2500 <= expiry <= broker.server_time_ms() + 2500

    def test_delayed_task_is_not_leased_before_its_time(self, broker: Broker) -> None:
        broker.enqueue("t1", delay=0.3)
        assert broker.promote() == [] and broker.lease("w", 10) is None
        wait_past(0.3)
        assert broker.promote() == ["t1"]
        got = lease_one(broker, "w", 10)
        assert got[0] == "t1"
        leased_token(0, got[1])

    def test_lease_many_takes_at_most_count(self, broker: Broker) -> None:
        for i in range(5):
            broker.enqueue(f"t{i}")
        batch = broker.lease_many("w", 10, 3)
        assert [t.task_id for t in batch.tasks] == ["t0", "t1", "t2"]
        assert batch.wait_seconds is None and broker.counts().ready == 2

    def test_short_batch_says_how_long_until_something_is_due(self, broker: Broker) -> None:
        broker.enqueue("later", delay=5)
        batch = broker.lease_many("w", 10, 1)
        assert batch.tasks == [] and batch.wait_seconds is not None
        assert 4.9 <= batch.wait_seconds <= 5.0

    def test_retried_lease_request_returns_the_same_tasks(
        self, broker: Broker, client: redis.Redis
    ) -> None:
        for i in range(3):
            broker.enqueue(f"t{i}")
        first = broker.lease_many("w", 10, 2, request_id="r1")
        before = dump(client)
        assert broker.lease_many("w", 10, 2, request_id="r1") == first
        assert dump(client) == before
        assert broker.ack("t0", first.tasks[0].token)
        assert [t.task_id for t in broker.lease_many("w", 10, 2, request_id="r1").tasks] == ["t1"]

    def test_a_request_id_replays_only_to_the_worker_that_made_it(
        self, broker: Broker, client: redis.Redis
    ) -> None:
        broker.enqueue("t0")
        broker.enqueue("t1")
        first = broker.lease_many("w1", 10, 1, request_id="r1").tasks
        assert [t.task_id for t in first] == ["t0"]
        before = dump(client)
        # Another worker naming the same request is handed nothing of w1's, and its
        # token stays w1's alone.
        assert broker.lease_many("w2", 10, 1, request_id="r1").tasks == []
        assert dump(client) == before
        assert broker.heartbeat("t0", first[0].token, 10)

    def test_count_below_one_is_rejected(self, broker: Broker) -> None:
        with pytest.raises(InvalidTaskError,
                           match="count must be a whole number of tasks between 1 and 10000"):
            broker.lease_many("w", 10, 0)


@pytest.mark.skipif(ON_CLUSTER, reason="a cluster pipeline cannot carry a script: "
                    "wait_and_lease answers None there, tested below")
class TestWaitAndLease:
    def test_work_enqueued_while_waiting_is_leased_at_once(self, broker: Broker) -> None:
        later = threading.Timer(0.2, lambda: broker.enqueue("t1", name="mod.fn"))
        later.start()
        began = time.monotonic()
        batch = broker.wait_and_lease("w", 10, 4, timeout=5)
        waited = time.monotonic() - began
        later.join()
        assert batch is not None and [t.task_id for t in batch.tasks] == ["t1"]
        token = leased_token(0, batch.tasks[0].token)
        assert batch.tasks[0] == LeasedTask("t1", token, "mod.fn", "{}", retries=0,
                                            max_retries=3)
        assert 0.15 < waited < 2.0
        assert record_of(broker, "t1").state == "running"
        assert [e.type for e in events(broker.client, broker.keys)] == ["enqueued", "leased"]

    def test_work_already_ready_is_leased_without_waiting(self, broker: Broker) -> None:
        for i in range(3):
            broker.enqueue(f"t{i}")
        began = time.monotonic()
        batch = broker.wait_and_lease("w", 10, 2, timeout=5)
        assert time.monotonic() - began < 1.0
        assert batch is not None and [t.task_id for t in batch.tasks] == ["t0", "t1"]
        assert broker.counts().ready == 1

    def test_nothing_arriving_leases_nothing_after_the_timeout(self, broker: Broker) -> None:
        began = time.monotonic()
        batch = broker.wait_and_lease("w", 10, 2, timeout=0.3)
        assert time.monotonic() - began >= 0.25
        assert batch is not None and batch.tasks == [] and broker.counts().leased == 0

    def test_a_flushed_script_cache_still_leases_each_task_once(
        self, broker: Broker, client: redis.Redis
    ) -> None:
        broker.enqueue("t1")
        broker.enqueue("t2")
        client.script_flush()
        batch = broker.wait_and_lease("w", 10, 1, timeout=1)
        assert batch is not None and [t.task_id for t in batch.tasks] == ["t1"]
        # Leased once: the record still holds the token handed out, none minted over it.
        assert record_of(broker, "t1").fencing_token == leased_token(0, batch.tasks[0].token)
        assert broker.counts().ready == 1 and broker.counts().leased == 1


class TestAckAndLease:
    def test_acks_the_finished_and_leases_the_next(self, broker: Broker) -> None:
        for n in range(4):
            broker.enqueue(f"t{n}")
        first = broker.lease_many("w", 10, 2).tasks
        before = len(events(broker.client, broker.keys))
        acks, batch = broker.ack_and_lease([(t.task_id, t.token) for t in first], "w", 10, 3)
        assert acks == [True, True]
        assert [t.task_id for t in batch.tasks] == ["t2", "t3"]
        assert all(leased_token(0, t.token) for t in batch.tasks)
        logged = [(e.fields["type"], e.fields["task"])
                  for e in events(broker.client, broker.keys, after=before)]
        # Two steps: a script the server had to load again runs after the other.
        assert sorted(logged) == [("completed", "t0"), ("completed", "t1"),
                                  ("leased", "t2"), ("leased", "t3")]
        assert record_of(broker, "t0").state == "completed"

    def test_a_stale_ack_is_refused_and_the_lease_still_made(self, broker: Broker) -> None:
        broker.enqueue("t1")
        broker.enqueue("t2")
        (held,) = broker.lease_many("w", 10, 1).tasks
        acks, batch = broker.ack_and_lease([(held.task_id, held.token + 1)], "w", 10, 1)
        assert acks == [False] and [t.task_id for t in batch.tasks] == ["t2"]
        assert record_of(broker, "t1").state == "running"

    @pytest.mark.skipif(ON_CLUSTER, reason="a cluster sends the two steps one after the other")
    def test_both_steps_go_in_one_round_trip(
        self, broker: Broker, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        broker.enqueue("t1")
        broker.enqueue("t2")
        (held,) = broker.lease_many("w", 10, 1).tasks
        assert isinstance(broker.transport, SingleNode)
        for name in ("ack", "lease"):  # an earlier test may have flushed the scripts
            broker.client.script_load(source(name))
        direct = broker.transport.direct
        writes: list[int] = []
        send = direct.call_many
        monkeypatch.setattr(direct, "call_many", lambda commands: writes.append(len(commands))
                            or send(commands))
        acks, batch = broker.ack_and_lease([(held.task_id, held.token)], "w", 10, 1)
        assert writes == [2] and acks == [True] and len(batch.tasks) == 1

    @pytest.mark.skipif(ON_CLUSTER, reason="CONFIG SET reaches one node of a cluster")
    def test_out_of_memory_neither_the_ack_nor_the_lease_runs(
        self, broker: Broker, client: redis.Redis
    ) -> None:
        # Redis refuses the ack's first write (HSET); the lease's first (a pop) would
        # free memory, so it checks for room itself: a task it handed out now could not
        # be acked, and would run again.
        for n in range(3):
            broker.enqueue(f"t{n}")
        (held,) = broker.lease_many("w", 10, 1).tasks
        before = dump(client)
        client.config_set("maxmemory", 1)
        try:
            with pytest.raises(BrokerError, match="maxmemory"):
                broker.ack_and_lease([(held.task_id, held.token)], "w", 10, 1)
            with pytest.raises(BrokerError, match="maxmemory"):
                broker.lease_many("w", 10, 2)
        finally:
            client.config_set("maxmemory", 0)
        assert dump(client) == before
        assert [t.task_id for t in broker.lease_many("w", 10, 2).tasks] == ["t1", "t2"]

    def test_a_flushed_script_cache_runs_each_step_once(
        self, broker: Broker, client: redis.Redis
    ) -> None:
        for n in range(3):
            broker.enqueue(f"t{n}")
        (held,) = broker.lease_many("w", 10, 1).tasks
        client.script_flush()
        before = len(events(client, broker.keys))
        acks, batch = broker.ack_and_lease([(held.task_id, held.token)], "w", 10, 1)
        assert acks == [True] and [t.task_id for t in batch.tasks] == ["t1"]
        assert [e.fields["type"] for e in events(client, broker.keys, after=before)] == [
            "completed", "leased"]
        assert (broker.counts().ready, broker.counts().leased) == (1, 1)


@pytest.mark.skipif(not ON_CLUSTER, reason="only a cluster declines the one-trip wait")
def test_on_a_cluster_wait_and_lease_declines_and_leases_nothing(broker: Broker) -> None:
    broker.enqueue("t1")
    assert broker.wait_and_lease("w", 10, 1, timeout=0.1) is None
    assert broker.counts().ready == 1


def saved(client: redis.Redis) -> dict[bytes, tuple[bytes, int]]:
    """Every key as DUMP writes it, with its expiry: what the append-only file holds at
    an fsync."""
    return {key: (client.dump(key), client.pttl(key)) for key in client.scan_iter("*")}


def crash_back_to(client: redis.Redis, fsynced: dict[bytes, tuple[bytes, int]]) -> None:
    """What a crash leaves: every write since the fsync `fsynced` is gone."""
    client.flushall()
    for key, (data, pttl) in fsynced.items():
        client.restore(key, max(pttl, 0), data, replace=True)


class TestTokensAcrossLostWrites:
    """A crash with `appendfsync everysec`, or a failover, can lose a lease's writes
    while its worker runs on (specs/TaskQueue/TokenMint.tla)."""

    def test_a_token_is_at_least_the_servers_milliseconds_times_1000(
        self, broker: Broker
    ) -> None:
        broker.enqueue("t")
        before = broker.server_time_ms()
        (task,) = broker.lease_many("w", 10, 1).tasks
        assert before * 1000 <= task.token <= broker.server_time_ms() * 1000

    def test_a_lease_lost_in_a_crash_is_never_minted_again(
        self, broker: Broker, client: redis.Redis, tmp_path: Path
    ) -> None:
        broker.enqueue("t")
        fsynced = saved(client)
        lost = broker.lease("w-a", 10)
        crash_back_to(client, fsynced)
        wait_past(0.001)  # Redis answers again after its clock has moved on
        kept = broker.lease("w-b", 10)
        assert lost is not None and kept is not None and lost[0] == kept[0] == "t"
        assert kept[1] > lost[1]
        # The worker whose lease was lost runs on with its token, and is refused
        # everywhere: effect()'s check (a renewal), its ack, and the fence guard.
        assert broker.heartbeat("t", lost[1], 10) is Renewal.LOST
        assert not broker.ack("t", lost[1])
        ledger = Ledger(tmp_path / "ledger.db", guard="fence")
        assert ledger.charge("t", kept[1], "acct", 1) == "applied"
        assert ledger.charge("t", lost[1], "acct", 1) == "fenced"
        assert broker.heartbeat("t", kept[1], 10) is Renewal.HELD
        assert broker.ack("t", kept[1])

    def test_a_reap_lost_in_a_crash_is_never_minted_again(
        self, broker: Broker, client: redis.Redis
    ) -> None:
        broker.enqueue("t", max_retries=3)
        first = broker.lease("w-a", 0.05)
        assert first is not None
        wait_past(0.05)
        fsynced = saved(client)
        assert [task for task, _ in broker.reap(backoff_base=0, backoff_max=0)] == ["t"]
        bumped = broker.task("t")
        assert bumped is not None
        crash_back_to(client, fsynced)
        wait_past(0.001)
        assert [task for task, _ in broker.reap(backoff_base=0, backoff_max=0)] == ["t"]
        reaped = broker.task("t")
        assert reaped is not None and reaped.fencing_token > bumped.fencing_token
