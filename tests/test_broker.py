"""The broker's operations against a real Redis: one class per Lua script, plus reads."""

from __future__ import annotations

import math
import re
import time
from collections.abc import Callable
from typing import Any

import pytest
import redis

import taskq.keys
from conftest import ON_CLUSTER
from helpers import (
    assert_refused_unchanged,
    dump,
    events,
    lease_one,
    leased,
    leased_token,
    overwrite,
    reaped_token,
    record_of,
    state,
    wait_past,
    where,
)
from taskq.broker import Broker, NewTask
from taskq.errors import (
    BrokerError,
    InvalidTaskError,
    PayloadError,
    PayloadTooLargeError,
    TaskqError,
)
from taskq.keys import QUEUES_KEY
from taskq.results import Released

LOOP: dict[str, Any] = {}
LOOP["self"] = LOOP

# fmt: off
BAD_OPTIONS = [
    ({"delay": -1}, "delay must be"), ({"delay": math.nan}, "delay must be"),
    ({"delay": math.inf}, "delay must be"), ({"delay": "5"}, "delay must be"),
    ({"delay": 1e308}, "delay"),
    ({"max_retries": -1}, "max_retries must be a whole number between 0 and 1000, not -1"),
    ({"max_retries": 1001}, "between 0 and 1000, not 1001"),
    ({"max_retries": 1.5}, "not 1.5"), ({"max_retries": True}, "not True"),
    ({"idempotency_key": ""}, "invalid idempotency key"),
    ({"idempotency_key": "k" * 513}, "invalid idempotency key"),
    ({"idempotency_key": "k", "idempotency_ttl": 0}, "idempotency_ttl must be"),
    ({"idempotency_key": "k", "idempotency_ttl": 10**16}, "idempotency_ttl must be"),
    ({"name": ""}, "invalid task name"),
]
BAD_PAYLOADS = [
    ({"s": {1, 2}}, "not JSON serializable"), ({"n": math.nan}, "NaN and infinity"),
    ([1, 2], "must be a JSON object"), ("text", "must be a JSON object"),
    ({1j: 1}, "keys must be"), (LOOP, "Circular reference"),
]
# fmt: on


class TestEnqueue:
    def test_new_task_is_pending_on_ready_with_its_record(self, broker: Broker) -> None:
        before = broker.server_time_ms()
        assert broker.enqueue("t1", max_retries=2, payload={"a": 1}).created
        record = record_of(broker, "t1")
        assert (record.state, record.retries, record.max_retries) == ("pending", 0, 2)
        assert (record.fencing_token, record.payload) == (0, '{"a":1}')
        assert before <= record.created_at == record.run_at <= broker.server_time_ms()
        assert where(broker.client, broker.keys, "t1") == ["ready"]

    def test_delayed_task_waits_on_delayed_until_its_run_at(self, broker: Broker) -> None:
        before = broker.server_time_ms()
        broker.enqueue("t1", delay=5)
        record = record_of(broker, "t1")
        assert record.state == "delayed"
        assert record.run_at - record.created_at == 5000 and record.created_at >= before
        assert broker.client.zscore(broker.keys.delayed, "t1") == record.run_at
        assert where(broker.client, broker.keys, "t1") == ["delayed"]

    def test_reused_idempotency_key_returns_the_original_task(
        self, broker: Broker, client: redis.Redis
    ) -> None:
        assert broker.enqueue("first", payload={"v": 1}, idempotency_key="k").created
        before = dump(client)
        again = broker.enqueue("second", payload={"v": 2}, idempotency_key="k")
        assert (again.task_id, again.created) == ("first", False)
        assert dump(client) == before

    def test_idempotency_key_names_the_task_for_its_ttl(
        self, broker: Broker, client: redis.Redis
    ) -> None:
        broker.enqueue("first", idempotency_key="k", idempotency_ttl=1)
        assert 0 < client.pttl(broker.keys.idem("k")) <= 1000
        wait_past(1.0)
        assert broker.enqueue("second", idempotency_key="k").created

    def test_a_key_first_sent_with_an_existing_id_names_that_task_from_then_on(
        self, broker: Broker, client: redis.Redis
    ) -> None:
        """The send was answered with the task its id named, so every later send with
        the key gets that answer too, whatever id it carries (T5)."""
        broker.enqueue("sum-1")
        answered = broker.enqueue("sum-1", idempotency_key="k")
        assert (answered.task_id, answered.created) == ("sum-1", False)
        for again in (broker.enqueue("other", idempotency_key="k"),
                      broker.enqueue_many([NewTask("third", idempotency_key="k")])[0]):
            assert (again.task_id, again.created) == ("sum-1", False)
        assert broker.task("sum-1").idempotency_key == "k"  # purge and expiry keep it
        assert client.exists(broker.keys.task("other"), broker.keys.task("third")) == 0
        assert [f["task"] for _, f in client.xrange(broker.keys.events)] == ["sum-1"]

    def test_a_task_keeps_the_longer_lived_of_the_keys_that_name_it(
        self, broker: Broker, client: redis.Redis
    ) -> None:
        broker.enqueue("a", idempotency_key="short", idempotency_ttl=60)
        broker.enqueue("a", idempotency_key="long", idempotency_ttl=3600)
        assert broker.task("a").idempotency_key == "long"
        broker.enqueue("a", idempotency_key="shorter", idempotency_ttl=10)
        assert broker.task("a").idempotency_key == "long"
        assert {client.get(broker.keys.idem(k)) for k in ("short", "long", "shorter")} == {"a"}

    def test_a_key_whose_ttl_rounds_up_to_the_new_ones_is_not_taken_to_outlive_it(
        self, broker: Broker
    ) -> None:
        """TTL rounds to the second: 1.7 s left read as 2, as long as the new key's."""
        broker.enqueue("a", idempotency_key="k1", idempotency_ttl=2)
        time.sleep(0.3)
        broker.enqueue("a", idempotency_key="k2", idempotency_ttl=2)
        assert broker.task("a").idempotency_key == "k2"

    def test_an_ended_record_is_kept_as_long_as_a_key_bound_to_it_later(
        self, broker: Broker, client: redis.Redis
    ) -> None:
        broker.enqueue("t1")
        assert broker.ack("t1", lease_one(broker)[1])
        kept = client.pttl(broker.keys.task("t1"))
        assert 0 < kept <= 86_400_000
        broker.enqueue("t1", idempotency_key="k", idempotency_ttl=10 * 86_400)
        assert client.pttl(broker.keys.task("t1")) > 9 * 86_400_000

    def test_reused_task_id_creates_nothing_and_keeps_the_original(
        self, broker: Broker, client: redis.Redis
    ) -> None:
        broker.enqueue("t1", payload={"v": 1})
        before = dump(client)
        assert not broker.enqueue("t1", delay=9, payload={"v": 2}).created
        assert dump(client) == before

    def test_enqueue_registers_the_queue_and_wakes_idle_workers(
        self, broker: Broker, client: redis.Redis
    ) -> None:
        broker.enqueue("t1")
        assert client.smembers(QUEUES_KEY) == {"test"}
        assert client.llen(broker.keys.wake) >= 1

    def test_a_producer_names_its_queue_again_once_its_registration_is_old(
        self, broker: Broker, client: redis.Redis, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """So a queue comes back to the dashboards after Redis lost its data."""
        broker.enqueue("t1")
        client.delete(QUEUES_KEY)  # as a restart with no data, or a FLUSHALL, leaves it
        broker.enqueue("t2")
        assert client.smembers(QUEUES_KEY) == set()  # once per REGISTER_AGAIN_SECONDS
        monkeypatch.setattr(taskq.keys, "REGISTER_AGAIN_SECONDS", 0.0)
        broker.enqueue("t3")
        assert client.smembers(QUEUES_KEY) == {"test"}

    @pytest.mark.parametrize("task_id", ["", "a b", "x" * 129, "caf\u00e9", "a/b", "a{b}", 7,
                                         ".", ".."])
    def test_invalid_task_id_is_rejected_and_creates_nothing(
        self, broker: Broker, client: redis.Redis, task_id: Any
    ) -> None:
        with pytest.raises(InvalidTaskError, match="invalid task id"):
            broker.enqueue(task_id)
        assert dump(client) == {}

    @pytest.mark.parametrize(("options", "message"), BAD_OPTIONS)
    def test_bad_option_is_rejected_and_creates_nothing(
        self, broker: Broker, client: redis.Redis, options: dict[str, Any], message: str
    ) -> None:
        with pytest.raises(InvalidTaskError, match=message):
            broker.enqueue("t1", **options)
        assert dump(client) == {}

    @pytest.mark.parametrize(("payload", "message"), BAD_PAYLOADS)
    def test_unencodable_payload_is_rejected_and_creates_nothing(
        self, broker: Broker, client: redis.Redis, payload: Any, message: str
    ) -> None:
        with pytest.raises(PayloadError, match=message):
            broker.enqueue("t1", payload=payload)
        assert dump(client) == {}

    def test_payload_limit_counts_utf8_bytes(self, client: redis.Redis) -> None:
        small = Broker(client, "test", max_payload_bytes=64)
        # '{"x":"' + 28 two-byte characters + '"}' is exactly 64 bytes.
        assert small.enqueue("fits", payload={"x": "\u00e9" * 28}).created
        with pytest.raises(PayloadTooLargeError, match="66 bytes as JSON, over the limit of 64"):
            small.enqueue("big", payload={"x": "\u00e9" * 29})
        assert small.task("big") is None
        assert issubclass(PayloadTooLargeError, TaskqError)

    def test_enqueue_many_keeps_order_and_dedupes_within_a_batch(self, broker: Broker) -> None:
        tasks = [NewTask(f"t{i}", idempotency_key=f"k{i % 3}") for i in range(5)]
        results = broker.enqueue_many(tasks, batch_size=2)
        assert [(r.task_id, r.created) for r in results] == [
            ("t0", True), ("t1", True), ("t2", True), ("t0", False), ("t1", False),
        ]  # fmt: skip
        assert broker.counts().ready == 3

    def test_enqueue_many_with_one_bad_task_creates_nothing_and_names_it(
        self, broker: Broker
    ) -> None:
        """In a batch of thousands, an error that named no item left the caller to hunt."""
        tasks = [NewTask(f"t{i}") for i in range(500)]
        tasks[317] = NewTask("t317", delay=math.nan)
        with pytest.raises(InvalidTaskError, match=r"^item 317 of 500, counted from 0 \(task "
                                                   r"id 't317'\): delay must be"):
            broker.enqueue_many(tasks)
        with pytest.raises(PayloadError, match=r"^item 1 of 2, counted from 0 .* JSON"):
            broker.enqueue_many([NewTask("good"), NewTask("bad", payload={"at": math.inf})])
        with pytest.raises(InvalidTaskError, match=r"^invalid task id 'bad id'"):
            broker.enqueue_many([NewTask("bad id")])  # one alone is named by the call
        assert dump(broker.client) == {}


class TestHeartbeat:
    def test_heartbeat_extends_the_lease_past_its_first_expiry(self, broker: Broker) -> None:
        broker.enqueue("t1")
        got = lease_one(broker, "w", 0.1)
        assert broker.heartbeat("t1", got[1], 1.0)
        wait_past(0.1)
        assert broker.reap() == []
        assert broker.ack("t1", got[1])

    def test_stale_token_cannot_heartbeat(self, broker: Broker, client: redis.Redis) -> None:
        token = leased(broker)
        before = dump(client)
        assert not broker.heartbeat("t1", token + 1, 10)
        assert not broker.heartbeat("t1", token - 1, 10)
        assert dump(client) == before


class TestAck:
    def test_ack_completes_the_task_and_ends_its_lease(self, broker: Broker) -> None:
        token = leased(broker)
        assert broker.ack("t1", token)
        record = record_of(broker, "t1")
        assert record.state == "completed" and record.completed_at > 0
        assert where(broker.client, broker.keys, "t1") == []

    def test_stale_token_cannot_ack(self, broker: Broker) -> None:
        broker.enqueue("t1")
        old = lease_one(broker, "w1", 0.05)
        wait_past(0.05)
        broker.reap(backoff_base=0, backoff_max=0)
        broker.promote()
        new = lease_one(broker, "w2", 10)
        assert new[1] > old[1]
        assert not broker.ack("t1", old[1])
        assert state(broker.client, broker.keys, "t1") == "running"
        assert broker.ack("t1", new[1])

    def test_task_not_held_cannot_be_acked(self, broker: Broker, client: redis.Redis) -> None:
        assert broker.ack("done", leased(broker, "done"))
        broker.enqueue("t1")
        before = dump(client)
        for task_id, token in (("done", 1), ("t1", 0), ("nobody", 1)):
            assert not broker.ack(task_id, token)
        assert dump(client) == before


    def test_a_batch_acks_each_held_task_once_and_refuses_the_rest(
        self, broker: Broker
    ) -> None:
        # Acked ids leave leased together at the end of the call: a second copy of an id
        # in the same batch must still be refused, with no second completed event.
        for n in range(3):
            broker.enqueue(f"t{n}")
        (t0, t1, t2) = [(t.task_id, t.token) for t in broker.lease_many("w", 10, 3).tasks]
        stale_t2 = (t2[0], t2[1] + 1)
        assert broker.ack_many([t0, t1, t0, stale_t2]) == [True, True, False, False]
        completed = [e.task for e in events(broker.client, broker.keys) if e.type == "completed"]
        assert completed == ["t0", "t1"]
        assert where(broker.client, broker.keys, "t0") == []
        assert state(broker.client, broker.keys, "t2") == "running"


class TestFail:
    def test_failed_task_with_retries_left_waits_on_delayed(self, broker: Broker) -> None:
        token = leased(broker, max_retries=2)
        before = broker.server_time_ms()
        result = broker.fail("t1", token, "boom", backoff_base=1.0)
        assert (result.status, result.retries) == ("retry", 1)
        record = record_of(broker, "t1")
        assert (record.state, record.retries, record.last_error) == ("delayed", 1, "boom")
        assert before + result.delay * 1000 <= record.run_at <= broker.server_time_ms() + 1000
        assert where(broker.client, broker.keys, "t1") == ["delayed"]

    def test_fail_backoff_is_equal_jitter_between_half_and_full(self, broker: Broker) -> None:
        delays = []
        for i in range(30):
            token = leased(broker, f"t{i}")
            delays.append(broker.fail(f"t{i}", token, "x", backoff_base=1.0).delay)
        assert all(0.5 <= d <= 1.0 for d in delays)
        assert len(set(delays)) > 10

    def test_fail_backoff_doubles_per_retry_up_to_the_cap(self, broker: Broker) -> None:
        token = leased(broker, max_retries=4)
        for full in (0.02, 0.04, 0.08, 0.08):
            result = broker.fail("t1", token, "x", backoff_base=0.02, backoff_max=0.08)
            assert result.status == "retry" and full / 2 <= result.delay <= full
            wait_past(result.delay)
            assert broker.promote() == ["t1"]
            got = lease_one(broker, "w", 10)
            token = got[1]

    def test_task_out_of_retries_goes_to_dlq_with_its_error(self, broker: Broker) -> None:
        token = leased(broker, max_retries=0)
        result = broker.fail("t1", token, "ValueError: bad input")
        assert (result.status, result.retries, result.delay) == ("dead", 0, 0)
        record = record_of(broker, "t1")
        assert record.last_error == "ValueError: bad input"
        assert record.state == "dead" and record.dead_at > 0 and broker.dead() == ["t1"]

    def test_stale_token_cannot_fail(self, broker: Broker, client: redis.Redis) -> None:
        token = leased(broker)
        before = dump(client)
        assert broker.fail("t1", token + 1, "x").status == "stale"
        assert dump(client) == before

    def test_fail_with_a_delay_retries_after_that_delay_not_the_backoff(
        self, broker: Broker
    ) -> None:
        token = leased(broker, max_retries=2)
        before = broker.server_time_ms()
        result = broker.fail("t1", token, "x", backoff_base=0.01, delay=30)
        assert (result.status, result.retries, result.delay) == ("retry", 1, 30)
        run_at = record_of(broker, "t1").run_at
        assert before + 30_000 <= run_at <= broker.server_time_ms() + 30_000

    def test_fail_with_a_delay_still_goes_dead_when_no_retries_are_left(
        self, broker: Broker
    ) -> None:
        token = leased(broker, max_retries=0)
        assert broker.fail("t1", token, "x", delay=5).status == "dead"
        assert broker.dead() == ["t1"]

    def test_fail_dead_goes_to_the_dlq_at_once_with_retries_left(self, broker: Broker) -> None:
        token = leased(broker, max_retries=5)
        result = broker.fail("t1", token, "UnknownTaskError: no such task", dead=True)
        assert (result.status, result.retries) == ("dead", 0)
        record = record_of(broker, "t1")
        assert (record.state, record.last_error) == ("dead", "UnknownTaskError: no such task")
        assert broker.dead() == ["t1"] and where(broker.client, broker.keys, "t1") == ["dlq"]
        dead = [e for e in events(broker.client, broker.keys) if e.type == "failed"]
        assert [e.fields["state"] for e in dead] == ["dead"]

    def test_stale_token_cannot_fail_dead(self, broker: Broker, client: redis.Redis) -> None:
        token = leased(broker)
        before = dump(client)
        assert broker.fail("t1", token + 1, "x", dead=True).status == "stale"
        assert dump(client) == before

    @pytest.mark.parametrize("options", [{"delay": -1}, {"delay": math.nan},
                                         {"delay": 1, "dead": True}])
    def test_fail_refuses_a_bad_delay_or_both_options_and_writes_nothing(
        self, broker: Broker, client: redis.Redis, options: dict[str, Any]
    ) -> None:
        token = leased(broker)
        before = dump(client)
        with pytest.raises(InvalidTaskError, match="delay"):
            broker.fail("t1", token, "x", **options)
        assert dump(client) == before


class TestRelease:
    def test_release_puts_the_task_at_the_front_without_using_a_retry(self, broker: Broker) -> None:
        token = leased(broker, "first")
        broker.enqueue("second")
        assert broker.release("first", token)
        record = record_of(broker, "first")
        assert (record.state, record.retries) == ("pending", 0)
        got = lease_one(broker, "w", 10)
        assert got[0] == "first"
        leased_token(token, got[1])

    def test_release_says_so_when_the_task_ended_cancelled_instead(
        self, broker: Broker
    ) -> None:
        token = leased(broker)
        assert broker.cancel("t1").outcome == "requested"
        assert broker.release("t1", token) == Released.CANCELLED
        assert record_of(broker, "t1").state == "cancelled"

    def test_stale_token_cannot_release(self, broker: Broker, client: redis.Redis) -> None:
        token = leased(broker)
        assert broker.release("t1", token) == Released.RELEASED
        before = dump(client)
        assert not broker.release("t1", token)
        assert dump(client) == before


class TestReap:
    def test_unexpired_lease_is_not_reaped(self, broker: Broker) -> None:
        leased(broker)
        assert broker.reap() == []
        assert state(broker.client, broker.keys, "t1") == "running"

    def test_reap_bumps_the_token_so_the_lost_holder_is_stale(self, broker: Broker) -> None:
        broker.enqueue("t1")
        got = lease_one(broker, "w1", 0.05)
        wait_past(0.05)
        assert broker.reap() == [("t1", "delayed")]
        reaped_token(broker, "t1", got[1])
        assert not broker.heartbeat("t1", got[1], 10)
        assert not broker.ack("t1", got[1])
        assert broker.fail("t1", got[1], "late").status == "stale"
        assert not broker.release("t1", got[1])

    def test_reaped_task_waits_its_backoff_on_delayed(self, broker: Broker) -> None:
        broker.enqueue("t1")
        broker.lease("w1", 0.05)
        wait_past(0.05)
        before = broker.server_time_ms()
        broker.reap(backoff_base=0.4, backoff_max=1)
        record = record_of(broker, "t1")
        assert (record.state, record.retries) == ("delayed", 1)
        assert before + 200 <= record.run_at <= broker.server_time_ms() + 400
        assert "worker w1" in record.last_error and "attempt 1" in record.last_error
        assert broker.promote() == [] and broker.lease("w2", 10) is None
        wait_past((record.run_at - before) / 1000)
        assert broker.promote() == ["t1"]

    def test_reaped_task_out_of_retries_goes_to_dlq(self, broker: Broker) -> None:
        broker.enqueue("t1", max_retries=0)
        broker.lease("w1", 0.05)
        wait_past(0.05)
        assert broker.reap() == [("t1", "dead")]
        record = record_of(broker, "t1")
        assert record.state == "dead" and broker.dead() == ["t1"]
        assert "no retries left" in record.last_error

    @pytest.mark.parametrize("max_retries", [0, 1])
    def test_the_reaped_event_names_the_error_type_the_record_holds(
        self, broker: Broker, max_retries: int
    ) -> None:
        # So a live dead-letter row shows what the snapshot would, without a reload.
        broker.enqueue("t1", max_retries=max_retries)
        broker.lease("w1", 0.05)
        wait_past(0.05)
        broker.reap()
        reaped = [e for e in events(broker.client, broker.keys) if e.type == "reaped"]
        assert [e.fields.get("error_type") for e in reaped] == ["taskq.LeaseExpired"]
        assert record_of(broker, "t1").error_type == "taskq.LeaseExpired"

    def test_leases_reaped_together_retry_at_spread_out_times(self, broker: Broker) -> None:
        for i in range(10):
            broker.enqueue(f"t{i}")
        broker.lease_many("w", 0.05, 10)
        wait_past(0.05)
        assert len(broker.reap(limit=4)) == 4
        assert len(broker.reap()) == 6
        run_at = {r.run_at for i in range(10) if (r := broker.task(f"t{i}"))}
        assert len(run_at) > 5


class TestPromote:
    def test_due_tasks_go_to_the_back_of_ready_earliest_first(self, broker: Broker) -> None:
        broker.enqueue("later", delay=0.06)
        broker.enqueue("sooner", delay=0.03)
        broker.enqueue("ready")
        wait_past(0.06)
        assert broker.promote(limit=1) == ["sooner"]
        assert broker.promote() == ["later"]
        # Each task's first lease: its token is the first minted for it, above none.
        got = [lease_one(broker, "w", 10) for _ in range(3)]
        assert [task_id for task_id, _ in got] == ["ready", "sooner", "later"]
        assert all(leased_token(0, token) for _, token in got)
        assert state(broker.client, broker.keys, "later") == "running"


class TestRetryDead:
    def test_dead_task_returns_to_ready_with_retries_reset(self, broker: Broker) -> None:
        token = leased(broker, max_retries=1)
        broker.fail("t1", token, "x", backoff_base=0)
        broker.promote()
        got = lease_one(broker, "w", 10)
        assert broker.fail("t1", got[1], "x").status == "dead"
        assert broker.retry_dead("t1")
        record = record_of(broker, "t1")
        assert (record.state, record.retries) == ("pending", 0)
        assert where(broker.client, broker.keys, "t1") == ["ready"] and broker.dead() == []
        again = lease_one(broker, "w", 10)
        assert broker.ack("t1", again[1])

    def test_task_not_in_dlq_cannot_be_retried(self, broker: Broker, client: redis.Redis) -> None:
        token = leased(broker, "done")
        broker.ack("done", token)
        broker.enqueue("pending")
        before = dump(client)
        for task_id in ("done", "pending", "nobody"):
            assert not broker.retry_dead(task_id)
        assert dump(client) == before


class TestHandChangedState:
    """State an operator or another tool changed by hand loses no task."""

    def dead(self, broker: Broker, task_id: str = "t1") -> None:
        broker.enqueue(task_id, max_retries=0)
        assert broker.fail(task_id, lease_one(broker, "w", 10)[1], "x").status == "dead"

    @pytest.mark.parametrize("priority", ["nan", "12", "2.5", "-1", "inf"])
    def test_a_dead_task_whose_priority_no_script_wrote_is_retried_at_the_default(
        self, broker: Broker, client: redis.Redis, priority: str
    ) -> None:
        self.dead(broker)
        client.hset(broker.keys.task("t1"), "priority", priority)
        assert broker.retry_dead("t1")
        assert where(client, broker.keys, "t1") == ["ready"]
        assert lease_one(broker, "w", 10)[0] == "t1"

    @pytest.mark.parametrize("priority", ["nan", "12", "2.5", "-1", "inf", "x", ""])
    def test_a_priority_no_script_wrote_reads_as_the_default_the_lease_takes_it_for(
        self, broker: Broker, client: redis.Redis, priority: str
    ) -> None:
        """The dashboards and `taskq task` show the priority the task is leased at."""
        broker.enqueue("t1", priority=8)
        client.hset(broker.keys.task("t1"), "priority", priority)
        assert record_of(broker, "t1").priority == 5
        client.hset(broker.keys.task("t1"), "priority", "8")
        assert record_of(broker, "t1").priority == 8

    def test_a_dead_task_whose_record_names_no_task_stays_dead(
        self, broker: Broker, client: redis.Redis
    ) -> None:
        """No worker could run it, and a lease drops an id whose record names no task:
        revived, it would be left pending in no list, its waiters waiting for ever."""
        self.dead(broker)
        client.hdel(broker.keys.task("t1"), "name")
        before = dump(client)
        assert not broker.retry_dead("t1")
        assert dump(client) == before
        assert where(client, broker.keys, "t1") == ["dlq"]

    def test_a_retry_redis_refuses_leaves_the_task_in_the_dlq(
        self, broker: Broker, client: redis.Redis
    ) -> None:
        self.dead(broker)
        key = overwrite(client, broker.keys, "ready")
        assert_refused_unchanged(client, key, lambda: broker.retry_dead("t1"))
        client.delete(key)
        assert broker.retry_dead("t1")

    @pytest.mark.parametrize(("written", "delay", "priority"), [
        ("ready", 0, 5), ("delayed", 5, 5), ("events", 0, 5), ("ready:levels", 0, 9),
        ("ready:9", 0, 9)])
    def test_an_enqueue_a_key_of_another_type_would_refuse_part_way_writes_nothing(
        self, broker: Broker, client: redis.Redis, written: str, delay: float, priority: int
    ) -> None:
        broker.enqueue("before")  # the log and its counter exist: only `key` is at fault
        key = overwrite(client, broker.keys, written)
        assert_refused_unchanged(client, key, lambda: broker.enqueue(
            "t1", delay=delay, priority=priority, idempotency_key="k"))
        client.delete(key)
        assert broker.enqueue("t1", delay=delay, priority=priority, idempotency_key="k").created

    def test_an_enqueue_whose_key_or_record_holds_another_type_writes_nothing(
        self, broker: Broker, client: redis.Redis
    ) -> None:
        """Checked before the first write: the tasks before it in the batch are not left
        created without their events."""
        broker.enqueue("before")
        batch = [NewTask("t1", idempotency_key="k1"), NewTask("t2", idempotency_key="k2")]
        for key in (broker.keys.idem("k2"), broker.keys.task("t2")):
            client.rpush(key, "not taskq's")
            snapshot = dump(client)
            with pytest.raises(BrokerError, match=f"WRONGTYPE {re.escape(key)} holds a list"):
                broker.enqueue_many(batch)
            assert dump(client) == snapshot
            client.delete(key)
        client.set(broker.keys.idem("k2"), "not a/task id")
        snapshot = dump(client)
        with pytest.raises(BrokerError, match=r"holds \"not a/task id\", not a task id"):
            broker.enqueue_many(batch)
        assert dump(client) == snapshot
        client.delete(broker.keys.idem("k2"))
        assert [handle.created for handle in broker.enqueue_many(batch)] == [True, True]

    @pytest.mark.parametrize(("written", "dead"), [
        ("delayed", False), ("dlq", True), ("events", False), ("events", True)])
    def test_a_failure_a_key_of_another_type_would_refuse_part_way_writes_nothing(
        self, broker: Broker, client: redis.Redis, written: str, dead: bool
    ) -> None:
        broker.enqueue("t1")
        token = lease_one(broker, "w", 10)[1]
        key = overwrite(client, broker.keys, written)
        assert_refused_unchanged(client, key, lambda: broker.fail("t1", token, "boom", dead=dead))
        client.delete(key)
        assert broker.fail("t1", token, "boom", dead=dead).status == ("dead" if dead else "retry")
        assert where(client, broker.keys, "t1") == ["dlq" if dead else "delayed"]

    @pytest.mark.parametrize(("operation", "written", "priority"), [
        ("lease", "leased", 5), ("lease", "events", 5),
        ("release", "ready", 5), ("release", "ready:9", 9), ("release", "ready:levels", 9),
        ("release", "events", 5),
        ("reap", "delayed", 5), ("reap", "dlq", 5), ("reap", "events", 5),
        ("promote", "ready", 5), ("promote", "ready:9", 9), ("promote", "events", 5)])
    def test_a_move_a_key_of_another_type_would_refuse_part_way_writes_nothing(
        self, broker: Broker, client: redis.Redis, operation: str, written: str, priority: int
    ) -> None:
        dies = written == "dlq"
        broker.enqueue("t1", priority=priority, max_retries=0 if dies else 3,
                       delay=0.01 if operation == "promote" else 0)
        token = 0
        if operation in ("release", "reap"):
            token = lease_one(broker, "w", 0.01 if operation == "reap" else 10)[1]
        wait_past(0.02)
        moves: dict[str, Callable[[], object]] = {
            "lease": lambda: broker.lease("w", 10), "release": lambda: broker.release("t1", token),
            "reap": broker.reap, "promote": broker.promote}
        key = overwrite(client, broker.keys, written)
        assert_refused_unchanged(client, key, moves[operation])
        client.delete(key)
        assert moves[operation]()
        places = {"lease": "leased", "release": "ready", "reap": "dlq" if dies else "delayed",
                  "promote": "ready"}
        assert where(client, broker.keys, "t1") == [places[operation]]

    @pytest.mark.parametrize("written", ["ready:9", "ready:levels", "events"])
    def test_a_dead_task_retried_into_a_key_of_another_type_stays_in_the_dlq_alone(
        self, broker: Broker, client: redis.Redis, written: str
    ) -> None:
        broker.enqueue("t1", max_retries=0, priority=9)
        assert broker.fail("t1", lease_one(broker, "w", 10)[1], "x").status == "dead"
        key = overwrite(client, broker.keys, written)
        assert_refused_unchanged(client, key, lambda: broker.retry_dead("t1"))

    def test_a_cancel_with_a_log_of_another_type_writes_nothing(
        self, broker: Broker, client: redis.Redis
    ) -> None:
        broker.enqueue("t1", priority=9)
        key = overwrite(client, broker.keys, "events")
        assert_refused_unchanged(client, key, lambda: broker.cancel("t1"))

    def test_a_cancel_with_a_levels_set_of_another_type_still_takes_the_task_out(
        self, broker: Broker, client: redis.Redis
    ) -> None:
        broker.enqueue("t1", priority=9)
        overwrite(client, broker.keys, "ready:levels")
        assert broker.cancel("t1")
        assert client.lrange(broker.keys.ready + ":9", 0, -1) == []
        assert state(client, broker.keys, "t1") == "cancelled"

    def test_an_ack_batch_a_key_of_another_type_would_refuse_part_way_writes_nothing(
        self, broker: Broker, client: redis.Redis
    ) -> None:
        """Acks leave leased together, last: refused half way, completed tasks would
        stay leased, to be reaped and run again."""
        broker.enqueue("t1")
        broker.enqueue("t2")
        tokens = [lease_one(broker, "w", 10), lease_one(broker, "w", 10)]
        key = overwrite(client, broker.keys, "events")
        assert_refused_unchanged(client, key, lambda: broker.ack_many(tokens))
        client.delete(key)
        assert broker.ack_many(tokens) == [True, True]
        assert where(client, broker.keys, "t1") == where(client, broker.keys, "t2") == []

    @pytest.mark.parametrize("end", ["ack", "ack_cancelled", "fail", "reap", "cancel"])
    def test_a_watched_task_whose_done_list_is_of_another_type_still_ends_with_its_event(
        self, broker: Broker, client: redis.Redis, end: str
    ) -> None:
        """The done list only wakes producers: one written by hand must not leave the
        task half ended, out of leased with no event and its workflow never moved on."""
        broker.enqueue("t1", max_retries=0)
        token = 0 if end == "cancel" else lease_one(broker, "w", 0.05 if end == "reap" else 10)[1]
        broker.watch("t1")
        client.set(broker.keys.done("t1"), "not taskq's")
        if end == "ack":
            assert broker.ack("t1", token)
        elif end == "ack_cancelled":
            assert broker.cancel("t1").outcome == "requested"
            assert broker.ack_cancelled("t1", token)
        elif end == "fail":
            assert broker.fail("t1", token, "boom").status == "dead"
        elif end == "reap":
            wait_past(0.05)
            assert broker.reap() == [("t1", "dead")]
        else:
            assert broker.cancel("t1").outcome == "cancelled"
        ended = {"ack": "completed", "fail": "dead", "reap": "dead"}.get(end, "cancelled")
        assert state(client, broker.keys, "t1") == ended
        last = client.xrevrange(broker.keys.events, count=1)[0][1]
        assert last["task"] == "t1" and last["state"] == ended
        assert client.get(broker.keys.done("t1")) == "not taskq's"

    def test_a_due_task_whose_record_is_of_another_type_is_dropped_and_the_rest_promoted(
        self, broker: Broker, client: redis.Redis
    ) -> None:
        broker.enqueue("bad", delay=0.01)
        broker.enqueue("good", delay=0.01)
        client.delete(broker.keys.task("bad"))
        client.set(broker.keys.task("bad"), "not a record")
        wait_past(0.02)
        assert broker.promote() == ["good"]
        assert client.lrange(broker.keys.ready, 0, -1) == ["good"]
        assert client.zcard(broker.keys.delayed) == 0

    def test_a_ready_task_whose_record_is_of_another_type_is_dropped_and_the_rest_leased(
        self, broker: Broker, client: redis.Redis
    ) -> None:
        for task_id in ("before", "bad", "after"):
            broker.enqueue(task_id)
        client.delete(broker.keys.task("bad"))
        client.set(broker.keys.task("bad"), "not a record")
        leased = broker.lease_many("w", 30, 10).tasks
        assert [t.task_id for t in leased] == ["before", "after"]
        assert client.llen(broker.keys.ready) == 0
        assert client.get(broker.keys.task("bad")) == "not a record"

    def test_an_expired_lease_whose_record_is_of_another_type_is_dropped_and_the_rest_reaped(
        self, broker: Broker, client: redis.Redis
    ) -> None:
        broker.enqueue("bad")
        broker.enqueue("good")
        lease_one(broker, seconds=0.01)
        lease_one(broker, seconds=0.01)
        client.delete(broker.keys.task("bad"))
        client.set(broker.keys.task("bad"), "not a record")
        wait_past(0.02)
        assert sorted(broker.reap()) == [("bad", "gone"), ("good", "delayed")]
        assert client.zcard(broker.keys.leased) == 0
        assert client.get(broker.keys.task("bad")) == "not a record"

    @pytest.mark.parametrize("hint", ["wake", "stats"])
    def test_a_wake_list_or_totals_of_another_type_are_skipped_and_nothing_else(
        self, broker: Broker, client: redis.Redis, hint: str
    ) -> None:
        key = overwrite(client, broker.keys, hint)
        assert broker.enqueue("t1").created
        assert broker.fail("t1", lease_one(broker, "w", 10)[1], "x", dead=True).status == "dead"
        assert where(client, broker.keys, "t1") == ["dlq"]
        assert [(e.type, e.state) for e in events(client, broker.keys)] == [
            ("enqueued", "pending"), ("leased", "running"), ("failed", "dead")]
        assert client.get(key) == "not taskq's"

    @pytest.mark.skipif(ON_CLUSTER, reason="command stats are per node")
    def test_a_purge_looks_at_each_task_kept_for_its_key_once(
        self, broker: Broker, client: redis.Redis
    ) -> None:
        """Kept tasks went to the left end and came round again until the call's budget
        (ten times its limit) was spent: 2,000 kept cost 98,000 moves and half a second
        of Redis for nothing."""
        for n in range(3):
            broker.enqueue(f"kept{n}", max_retries=0, idempotency_key=f"k{n}")
            assert broker.fail(f"kept{n}", lease_one(broker, "w", 10)[1], "x").status == "dead"
        self.dead(broker, "old1")
        wait_past(0.01)
        client.config_resetstat()
        assert broker.purge(0.001, 10) == ["old1"]
        moves = client.info("commandstats").get("cmdstat_lmove", {}).get("calls", 0)
        assert moves == 3
        assert client.lrange(broker.keys.dlq, 0, -1) == ["kept2", "kept1", "kept0"]

    def test_an_idempotency_key_of_another_type_stops_no_purge(
        self, broker: Broker, client: redis.Redis
    ) -> None:
        self.dead(broker, "old1")
        broker.enqueue("old2", max_retries=0, idempotency_key="k2")
        assert broker.fail("old2", lease_one(broker, "w", 10)[1], "x").status == "dead"
        client.delete(broker.keys.idem("k2"))
        client.hset(broker.keys.idem("k2"), "not", "a string")
        wait_past(0.01)
        assert sorted(broker.purge(0.001, 10)) == ["old1", "old2"]
        purged = [e.task for e in events(client, broker.keys) if e.type == "purged"]
        assert sorted(purged) == ["old1", "old2"]

    def test_a_dlq_entry_whose_record_holds_another_type_is_purged_not_failed_on(
        self, broker: Broker, client: redis.Redis
    ) -> None:
        """HMGET of it failed every purge for good (and, in a worker, looked like Redis
        being away at each maintenance turn)."""
        for task_id in ("old1", "odd", "old2"):
            self.dead(broker, task_id)
        client.delete(broker.keys.task("odd"))
        client.rpush(broker.keys.task("odd"), "not taskq's")
        wait_past(0.01)
        assert broker.purge(0.001, 10) == ["old1", "odd", "old2"]
        assert client.lrange(broker.keys.task("odd"), 0, -1) == ["not taskq's"]  # not ours
        purged = [e.task for e in events(client, broker.keys) if e.type == "purged"]
        assert purged == ["old1", "odd", "old2"]

    def test_a_purge_with_a_log_of_another_type_deletes_nothing(
        self, broker: Broker, client: redis.Redis
    ) -> None:
        self.dead(broker, "old1")
        self.dead(broker, "old2")
        wait_past(0.01)
        key = overwrite(client, broker.keys, "events")
        assert_refused_unchanged(client, key, lambda: broker.purge(0.001, 10))
        client.delete(key)
        assert sorted(broker.purge(0.001, 10)) == ["old1", "old2"]


class TestReads:
    def test_payload_round_trips(self, broker: Broker) -> None:
        payload = {"text": "caf\u00e9 \u2603", "nested": {"list": [1, 2.5, None, True]}}
        broker.enqueue("t1", payload=payload)
        assert broker.payload("t1") == payload

    def test_reads_of_an_unknown_task_are_empty(self, broker: Broker) -> None:
        assert (broker.payload("nobody"), broker.task("nobody")) == ({}, None)

    def test_dead_lists_most_recently_dead_first(self, broker: Broker) -> None:
        for task_id in ("a", "b"):
            broker.enqueue(task_id, max_retries=0)
            got = lease_one(broker, "w", 10)
            broker.fail(task_id, got[1], "x")
        assert broker.dead() == ["b", "a"]
        assert broker.dead(1) == ["b"]

    def test_rate_limited_names_leave_out_fields_no_task_could_be_named_by(
        self, broker: Broker, client: redis.Redis
    ) -> None:
        """A worker lifts the limits of these names: one it would refuse stops it."""
        client.hset(broker.keys.rates, mapping={"slow": "1", "slow|next": "1", "*": "1",
                                                "not a name|next": "1", "|burst": "1"})
        assert broker.rate_limited_names() == ["slow"]
        assert broker.lift_rate_limits(broker.rate_limited_names()).lifted == 1

    @pytest.mark.parametrize("limit", [0, -1, 1.5, True, 100_001])
    def test_a_dead_listing_limit_out_of_range_is_refused_not_read_as_all(
        self, broker: Broker, limit: object
    ) -> None:
        with pytest.raises(InvalidTaskError, match="limit must be"):
            broker.dead(limit)  # type: ignore[arg-type]  # the hostile case itself

    def test_counts_reflect_each_structure(self, broker: Broker) -> None:
        broker.enqueue("dies", max_retries=0)
        for i in range(3):
            broker.enqueue(f"r{i}")
        broker.enqueue("later", delay=10)
        batch = broker.lease_many("w", 10, 2)
        assert broker.fail("dies", batch.tasks[0].token, "x").status == "dead"
        counts = broker.counts()
        assert (counts.ready, counts.leased, counts.delayed, counts.dead) == (2, 1, 1, 1)

    def test_counts_read_no_task_of_any_structure_however_many_it_holds(
        self, broker: Broker, client: redis.Redis
    ) -> None:
        """A count costs the same whatever the queue holds: its script reads no record.
        Here every record is of another type, which any read of one would fail on."""
        broker.enqueue("dies", max_retries=0)
        broker.enqueue("runs")
        broker.enqueue("waits", delay=10)
        assert broker.fail("dies", lease_one(broker, "w", 10)[1], "x").status == "dead"
        lease_one(broker, "w", 10)
        for task_id in ("dies", "runs", "waits"):
            client.delete(broker.keys.task(task_id))
            client.set(broker.keys.task(task_id), "not a record")
        counts = broker.counts()
        assert (counts.leased, counts.delayed, counts.dead) == (1, 1, 1)
