"""Records in Redis that taskq did not write (edited or deleted by hand, or evicted): the
scripts and readers go on, no task runs that should not, and one bad record fails
nothing but itself."""

from __future__ import annotations

import pytest
import redis

from helpers import lease_one, leased, leased_token, record_of, state, text, wait_past, where
from taskq.app import App
from taskq.broker import Broker
from waiting import wait_for_state
from worker_support import StartWorker

NOT_NUMBERS = {"retries": "abc", "max_retries": "", "fencing_token": "x",
               "run_at": "1e400", "created_at": "nan", "priority": "high"}


class TestScripts:
    def test_a_completed_task_pushed_back_onto_ready_is_not_run_again(
        self, broker: Broker, client: redis.Redis
    ) -> None:
        token = leased(broker, "done")
        assert broker.ack("done", token)
        client.lpush(broker.keys.ready, "done")
        assert broker.lease("w2", 10) is None
        assert state(client, broker.keys, "done") == "completed"
        assert record_of(broker, "done").fencing_token == token

    def test_a_delayed_id_whose_record_is_gone_is_dropped_not_made_up(
        self, broker: Broker, client: redis.Redis
    ) -> None:
        broker.enqueue("gone", delay=0.01)
        broker.enqueue("kept", delay=0.01)
        client.delete(broker.keys.task("gone"))
        wait_past(0.01)
        assert broker.promote() == ["kept"]
        assert client.exists(broker.keys.task("gone")) == 0
        assert client.zcard(broker.keys.delayed) == 0

    def test_a_leased_id_whose_record_is_gone_is_dropped_and_the_rest_reaped(
        self, broker: Broker, client: redis.Redis
    ) -> None:
        for task_id in ("gone", "kept"):
            broker.enqueue(task_id)
            lease_one(broker, "w1", 0.05)
        client.delete(broker.keys.task("gone"))
        wait_past(0.05)
        assert sorted(broker.reap()) == [("gone", "gone"), ("kept", "delayed")]
        assert client.exists(broker.keys.task("gone")) == 0

    def test_counts_that_are_not_numbers_read_as_zero_and_fail_no_other_reap(
        self, broker: Broker, client: redis.Redis
    ) -> None:
        for task_id in ("bad", "good"):
            broker.enqueue(task_id, max_retries=3)
            lease_one(broker, "w1", 0.05)
        client.hset(broker.keys.task("bad"), mapping={
            "retries": "abc", "max_retries": "zz", "fencing_token": "x"})
        wait_past(0.05)
        before = broker.server_time_ms()
        assert sorted(broker.reap()) == [("bad", "dead"), ("good", "delayed")]
        # The junk token reads as 0: the reap mints one above it, the clock's floor
        # (the server's milliseconds times 1000 when it ran).
        token = record_of(broker, "bad").fencing_token
        assert before * 1000 <= token <= broker.server_time_ms() * 1000

    @pytest.mark.parametrize("written", ["nan", "inf", "1e400", "-3", "2.5"])
    def test_counts_tonumber_would_read_as_numbers_read_as_zero_too(
        self, broker: Broker, client: redis.Redis, written: str
    ) -> None:
        """Lua's tonumber reads 'nan' and 'inf' as numbers: a NaN run-at then failed the
        ZADD after the task had left leased, so it was in no place and had no event."""
        for task_id, how in (("failed", "fail"), ("reaped", "reap")):
            broker.enqueue(task_id, max_retries=3)
            token = lease_one(broker, "w1", 0.05)[1]
            client.hset(broker.keys.task(task_id), mapping={
                "retries": written, "result_ttl": written, "fencing_token": str(token)})
            if how == "fail":
                assert broker.fail(task_id, token, "boom", backoff_base=0,
                                   backoff_max=0).status == "retry"
            else:
                wait_past(0.05)
                assert broker.reap(backoff_base=0, backoff_max=0) == [(task_id, "delayed")]
            assert where(client, broker.keys, task_id) == ["delayed"]
            assert record_of(broker, task_id).retries == 1
        client.hset(broker.keys.task("failed"), "max_retries", written)
        wait_past(0.01)
        broker.promote()
        token = lease_one(broker, "w1", 10)[1]
        assert broker.fail("failed", token, "boom").status == "dead"  # no retries: 0
        events = [f["type"] for _, f in client.xrange(broker.keys.events)]
        assert events.count("failed") == 2 and events.count("reaped") == 1

    def test_a_failure_is_recorded_though_the_counts_are_not_numbers(
        self, broker: Broker, client: redis.Redis
    ) -> None:
        token = leased(broker, "bad")
        client.hset(broker.keys.task("bad"), mapping={"retries": "abc", "max_retries": "?"})
        result = broker.fail("bad", token, "boom")
        assert result.status == "dead"



class TestFeed:
    def test_an_entry_added_to_the_log_by_hand_is_followed_not_failed_on(
        self, broker: Broker, client: redis.Redis
    ) -> None:
        broker.enqueue("before")
        epoch = client.get(broker.keys.epoch)
        added = client.xadd(broker.keys.events, {"note": "hello"})  # id: now in ms
        broker.enqueue("after")
        got = lease_one(broker, "w1", 10)
        assert got[0] == "before"
        leased_token(0, got[1])
        rows = client.xrange(broker.keys.events)
        assert [text(r[0]) for r in rows[:2]] == ["1-0", text(added)]
        after = [dict(r[1]) for r in rows[2:]]
        assert [(f["type"], f["task"]) for f in after] == [("enqueued", "after"),
                                                           ("leased", "before")]
        assert client.get(broker.keys.epoch) != epoch  # the ids jumped: a new epoch

    def test_a_deleted_last_entry_and_a_counter_set_back_are_numbered_past(
        self, broker: Broker, client: redis.Redis
    ) -> None:
        broker.enqueue("first")
        broker.enqueue("second")
        client.xdel(broker.keys.events, "2-0")  # the stream's top id stays 2-0
        client.set(broker.keys.seq, 1)
        broker.enqueue("third")
        assert [text(r[0]) for r in client.xrange(broker.keys.events)] == ["1-0", "3-0"]

    def test_a_counter_holding_text_is_started_again(
        self, broker: Broker, client: redis.Redis
    ) -> None:
        broker.enqueue("first")
        client.set(broker.keys.seq, "abc")
        client.hset(broker.keys.stats, "enqueued:pending", "x")
        broker.enqueue("second")
        assert client.get(broker.keys.seq) == "2"
        assert client.hget(broker.keys.stats, "enqueued:pending") == "1"
        assert [r[1]["task"] for r in client.xrange(broker.keys.events)] == [
            "first", "second"]

class TestReaders:
    def test_a_record_read_back_holds_zero_where_it_holds_no_number(
        self, broker: Broker, client: redis.Redis
    ) -> None:
        broker.enqueue("bad")
        client.hset(broker.keys.task("bad"), mapping=NOT_NUMBERS)
        record = record_of(broker, "bad")
        assert (record.retries, record.max_retries, record.fencing_token, record.run_at,
                record.created_at) == (0, 0, 0, 0, 0)

    def test_a_state_taskq_never_writes_reads_as_unknown(
        self, broker: Broker, client: redis.Redis
    ) -> None:
        handle = broker.enqueue("odd")
        client.hset(broker.keys.task("odd"), "state", "bogus")
        assert handle.status() == "unknown"


class TestWorker:
    def test_a_batch_with_a_record_whose_counts_are_not_numbers_runs_the_rest(
        self, app: App, start_worker: StartWorker
    ) -> None:
        @app.task("echo")
        def echo(n: int) -> int:
            return n

        bad = echo.enqueue(0).task_id
        app.broker.client.hset(app.broker.keys.task(bad),  # type: ignore[union-attr]
                               mapping={"retries": "abc", "max_retries": "zz"})
        good = [echo.enqueue(n).task_id for n in range(1, 4)]
        running = start_worker(concurrency=4)
        for task_id in good:
            wait_for_state(app.broker, task_id, "completed")
        wait_for_state(app.broker, bad, "completed")
        assert running.thread.is_alive()
