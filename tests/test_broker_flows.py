"""The workflow scripts on a real Redis, driven one broker call at a time: a stage
starts exactly once, by the call that accepts its last step's end, whatever stale
holders, reaps, revivals and cancels do (W1); and bad arguments write nothing."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
import redis

from conftest import ON_CLUSTER
from helpers import (
    assert_refused_unchanged,
    events,
    lease_one,
    overwrite,
    ready_ids,
    view,
    wait_past,
)
from taskq.aio import AsyncBroker
from taskq.broker import Broker
from taskq.connection import async_client
from taskq.errors import BrokerError, InvalidTaskError, TaskNotFoundError
from taskq.flows import (
    STEP_FIELDS,
    AsyncFlows,
    Flows,
    FlowStatus,
    StageSpec,
    later_reads,
    status_call,
    with_later_reads,
)
from taskq.history import read_task
from taskq.results import Failure, NewTask
from taskq.settings import Settings
from taskq.tools.tracecheck import read_log, validate

EMPTY = '{"args":[],"kwargs":{}}'


def step(name: str = "job", payload: str = EMPTY, max_retries: int = 0,
         priority: int = 5) -> tuple[object, ...]:
    return (name, payload, max_retries, "", priority, "")


def chord(flows: Flows, members: int, flow_id: str = "f", **options: object) -> None:
    """`members` steps in a group, then one callback."""
    assert flows.start(flow_id, [
        StageSpec(tuple(step(**options) for _ in range(members)), group=True,  # type: ignore[arg-type]
                  policy="fail"),
        StageSpec((step("callback"),), group=False, policy="fail")])


def triggered(client: redis.Redis, broker: Broker) -> list[str]:
    return [e.task for e in events(client, broker.keys) if e.type == "triggered"]


def ack_result(broker: Broker, task_id: str, token: int, value: object) -> bool:
    return broker.ack(task_id, token, json.dumps(value))


class TestStages:
    def test_a_stale_holders_ack_counts_nothing_and_the_rerun_starts_the_callback_once(
        self, queue: Broker, client: redis.Redis
    ) -> None:
        flows = Flows(queue)
        chord(flows, 2, max_retries=1)
        first, stale = lease_one(queue, seconds=0.05)
        wait_past(0.05)
        assert queue.reap(backoff_base=0, backoff_max=0) == [(first, "delayed")]
        assert queue.promote() == [first]
        second = lease_one(queue, "w2")
        other = second if second[0] != first else lease_one(queue, "w2")
        rerun = lease_one(queue, "w3") if second[0] != first else second
        assert not ack_result(queue, first, stale, "stale")
        assert ack_result(queue, *other, "b")
        assert triggered(client, queue) == []
        assert ack_result(queue, *rerun, "a")
        assert not ack_result(queue, first, stale, "stale again")
        assert triggered(client, queue) == ["f.2.1"]
        assert queue.payload("f.2.1")["args"] == [["a", "b"]]
        assert view(client, queue.keys).violations() == []
        report = validate(read_log(client, queue.keys.events), require_terminal=False)
        assert report.ok, report.violations

    def test_a_member_reaped_dead_fails_the_flow_and_its_revival_starts_nothing(
        self, queue: Broker, client: redis.Redis
    ) -> None:
        flows = Flows(queue)
        chord(flows, 2)
        held = [lease_one(queue, seconds=0.05), lease_one(queue, "w2")]
        wait_past(0.05)
        dead = held[0][0]
        assert queue.reap() == [(dead, "dead")]
        assert ack_result(queue, *held[1], 1)
        status = flows.status("f")
        assert status is not None and status.state == "failed" and status.upstream == dead
        assert "taskq.LeaseExpired" in status.error_message
        assert [s.state for s in status.steps][2] == "cancelled"
        assert queue.retry_dead(dead)
        assert ack_result(queue, *lease_one(queue), 1)
        assert queue.cancel(dead).outcome == "unchanged"
        assert triggered(client, queue) == []
        status = flows.status("f")
        assert status is not None and status.state == "failed"
        assert view(client, queue.keys).violations() == []

    def test_a_member_cut_off_after_its_effect_fails_the_flow_and_hands_on_nothing(
        self, queue: Broker, client: redis.Redis
    ) -> None:
        flows = Flows(queue)
        chord(flows, 2)
        held = [lease_one(queue), lease_one(queue, "w2")]
        cut = held[0][0]
        assert queue.ack_cut(*held[0])
        assert not queue.ack_cut(*held[0])  # its token is spent: stale, nothing changes
        assert ack_result(queue, *held[1], 1)
        status = flows.status("f")
        assert status is not None and (status.state, status.upstream) == ("failed", cut)
        assert status.error_type == "taskq.errors.NoResultError"
        assert [s.state for s in status.steps] == ["completed", "completed", "cancelled"]
        assert triggered(client, queue) == []
        record = queue.task(cut)
        assert record is not None and record.state == "completed" and record.result is None
        ended = [e for e in events(client, queue.keys) if e.task == cut][-1]
        assert (ended.type, ended.fields.get("cut")) == ("completed", "1")
        assert view(client, queue.keys).violations() == []
        report = validate(read_log(client, queue.keys.events), require_terminal=False)
        assert report.ok, report.violations

    def test_under_partial_a_cut_member_is_handed_on_as_a_failed_place(
        self, queue: Broker
    ) -> None:
        flows = Flows(queue)
        assert flows.start("p", [
            StageSpec((step(), step()), group=True, policy="partial"),
            StageSpec((step("callback"),), group=False, policy="fail")])
        held = [lease_one(queue), lease_one(queue, "w2")]
        by_id = dict(held)
        assert queue.ack_cut("p.1.1", by_id["p.1.1"])
        assert ack_result(queue, "p.1.2", by_id["p.1.2"], 7)
        places = queue.payload("p.2.1")["args"][0]
        assert places[1] == 7
        assert places[0]["taskq_failed"]["state"] == "cut"
        assert places[0]["taskq_failed"]["error_type"] == "taskq.errors.NoResultError"

    def test_a_revived_member_that_completes_is_not_counted_a_second_time(
        self, queue: Broker, client: redis.Redis
    ) -> None:
        flows = Flows(queue)
        assert flows.start("r", [
            StageSpec((step(), step()), group=True, policy="partial"),
            StageSpec((step("callback"),), group=False, policy="fail")])
        (dead, token), running = lease_one(queue), lease_one(queue, "w2")
        assert queue.fail(dead, token, "boom", dead=True).status == "dead"
        assert queue.retry_dead(dead)
        assert ack_result(queue, *lease_one(queue, "w3"), "revived")
        assert triggered(client, queue) == []
        assert ack_result(queue, *running, "b")
        assert triggered(client, queue) == ["r.2.1"]
        handed = queue.payload("r.2.1")["args"][0]
        assert handed[0]["taskq_failed"]["state"] == "dead" and handed[1] == "b"

    def test_a_triggered_step_keeps_its_priority_and_an_ended_flow_expires(
        self, queue: Broker, client: redis.Redis
    ) -> None:
        flows = Flows(queue)
        assert flows.start("p", [StageSpec((step(),), group=False, policy="fail"),
                                 StageSpec((step(priority=8),), group=False, policy="fail")])
        assert client.pttl(queue.keys.flow("p")) == -1
        assert ack_result(queue, *lease_one(queue), None)
        assert client.lrange(queue.keys.ready_at(8), 0, -1) == ["p.2.1"]
        assert queue.payload("p.2.1")["args"] == [None]
        assert ack_result(queue, *lease_one(queue), "done")
        assert 0 < client.pttl(queue.keys.flow("p")) <= queue.completed_ttl_ms
        assert flows.output("p", 2, 1, group=False) == "done"

    def test_every_step_is_enqueued_with_its_flow_and_later_ones_wait(
        self, queue: Broker, client: redis.Redis
    ) -> None:
        chord(Flows(queue), 2)
        log = events(client, queue.keys)
        assert [(e.task, e.state, e.fields["flow"]) for e in log] == [
            ("f.1.1", "pending", "f"), ("f.1.2", "pending", "f"), ("f.2.1", "waiting", "f")]
        assert queue.counts().ready == 2


class TestInputCopies:
    """A stage's input is copied into each of its waiting steps by the one script that
    starts it: those copies are held to sixteen payload limits in all."""

    @staticmethod
    def fan_out(queue: Broker, steps: int) -> Flows:
        """A step, then a group of `steps` whose input takes each one's payload to 983
        bytes, within a payload limit of 1000."""
        small = Flows(Broker(queue.client, queue.queue, max_payload_bytes=1000))
        assert small.start("f", [
            StageSpec((step(),), group=False, policy="fail"),
            StageSpec(tuple(step("use") for _ in range(steps)), group=True, policy="fail")])
        assert ack_result(small.broker, *lease_one(small.broker), "x" * 958)  # 960 as JSON
        return small

    def test_a_stage_whose_copies_come_to_more_fails_the_flow_and_none_of_it_runs(
        self, queue: Broker, client: redis.Redis
    ) -> None:
        flows = self.fan_out(queue, 17)
        status = flows.status("f")
        assert status is not None
        assert (status.state, status.upstream, status.error_type) == (
            "failed", "f.2.1", "taskq.errors.PayloadTooLargeError")
        assert status.error_message == (
            "the input of stage 2, what stage 1 handed on (960 bytes), copied into each of "
            "its 17 waiting steps, would come to 16320 bytes, over the limit of 16000 "
            "bytes for one stage (16 times TASKQ_MAX_PAYLOAD_BYTES); no step of stage 2 "
            "ran")
        assert [s.state for s in status.steps] == ["completed"] + ["cancelled"] * 17
        assert triggered(client, queue) == []
        assert queue.counts().ready == 0
        assert view(client, queue.keys).violations() == []

    def test_a_stage_of_sixteen_steps_is_held_to_the_limit_per_step_alone(
        self, queue: Broker, client: redis.Redis
    ) -> None:
        self.fan_out(queue, 16)
        assert triggered(client, queue) == [f"f.2.{i}" for i in range(1, 17)]
        assert queue.payload("f.2.16")["args"] == ["x" * 958]


def lrem_calls(broker: Broker) -> int:
    """LREM commands run so far by the Redis node holding the queue."""
    client: Any = broker.client
    where = {"target_nodes": client.get_node_from_key(broker.keys.ready)} if ON_CLUSTER else {}
    return int(client.info("commandstats", **where).get("cmdstat_lrem", {}).get("calls", 0))


class TestCancelAmongOtherTasks:
    """A cancel takes many of a workflow's steps out of one list in one walk of it, each
    other task left where it was: an LREM per step walks every task pushed after it."""

    def test_every_pending_step_leaves_ready_and_every_other_task_keeps_its_place(
        self, queue: Broker, client: redis.Redis
    ) -> None:
        queue.enqueue_many([NewTask(f"a{n}", priority=(5, 9, 5)[n % 3]) for n in range(30)])
        members = tuple(step(priority=(5, 9, 7)[i % 3]) for i in range(60))
        assert Flows(queue).start("f", [
            StageSpec(members, group=True, policy="fail"),
            StageSpec((step("callback"),), group=False, policy="fail")])
        # Past the 1000 a walk reads at a time, with a priority's list in between.
        queue.enqueue_many([NewTask(f"b{n}", priority=9 if n % 7 == 0 else 5)
                            for n in range(1500)])
        others = [t for t in ready_ids(client, queue.keys) if not t.startswith("f.")]
        cancelled = Flows(queue).cancel("f")
        assert (cancelled.outcome, cancelled.ended, cancelled.told) == ("cancelled", 61, 0)
        assert ready_ids(client, queue.keys) == others
        assert client.exists(queue.keys.ready_at(7)) == 0
        assert client.zrange(queue.keys.ready_levels, 0, -1) == ["9"]
        assert [e.task for e in events(client, queue.keys) if e.type == "cancelled"] == [
            *(f"f.1.{i}" for i in range(60, 0, -1)), "f.2.1"]
        assert view(client, queue.keys).violations() == []
        report = validate(read_log(client, queue.keys.events), require_terminal=False)
        assert report.ok, report.violations

    def test_its_dead_steps_leave_the_dlq_and_every_other_dead_task_keeps_its_place(
        self, queue: Broker, client: redis.Redis
    ) -> None:
        assert Flows(queue).start("f", [
            StageSpec(tuple(step() for _ in range(12)), group=True, policy="partial"),
            StageSpec((step("callback"),), group=False, policy="fail")])
        for n in range(11):
            assert queue.fail(*lease_one(queue), "boom", dead=True).status == "dead"
            queue.enqueue(f"other{n}", priority=9)
            assert queue.fail(*lease_one(queue), "boom", dead=True).status == "dead"
        others = [t for t in client.lrange(queue.keys.dlq, 0, -1) if not t.startswith("f.")]
        cancelled = Flows(queue).cancel("f")
        assert (cancelled.outcome, cancelled.ended) == ("cancelled", 13)
        assert client.lrange(queue.keys.dlq, 0, -1) == others
        assert queue.counts().ready == 0
        assert view(client, queue.keys).violations() == []

    def test_a_big_group_is_taken_out_of_ready_by_one_removal_not_one_per_step(
        self, queue: Broker
    ) -> None:
        chord(Flows(queue), 100)
        queue.enqueue_many([NewTask(f"t{n}") for n in range(2000)])
        before = lrem_calls(queue)
        assert Flows(queue).cancel("f").ended == 101
        assert lrem_calls(queue) - before == 1
        assert queue.counts().ready == 2000


class TestKeys:
    def test_a_waiting_step_a_key_was_bound_to_outlives_the_key_once_cancelled(
        self, queue: Broker, client: redis.Redis
    ) -> None:
        """skip_waiting expired a cancelled step by its result TTL alone, so a key bound
        to it (a send with the step's id) named a missing record: the next send with
        the key was answered with a task that no longer existed."""
        flows = Flows(queue)
        kept_briefly = ("b", EMPTY, 0, 100, 5, "")  # its result kept 100 ms
        assert flows.start("f", [StageSpec((step("a"),), group=False, policy="fail"),
                                 StageSpec((kept_briefly,), group=False, policy="fail")])
        bound = queue.enqueue("f.2.1", idempotency_key="K", idempotency_ttl=3600)
        assert (bound.task_id, bound.created) == ("f.2.1", False)
        task_id, token = lease_one(queue)
        assert queue.fail(task_id, token, "boom", dead=True).status == "dead"
        assert queue.task("f.2.1").state == "cancelled"
        assert client.pttl(queue.keys.task("f.2.1")) >= client.pttl(queue.keys.idem("K"))


class TestRefused:
    @pytest.mark.parametrize(("stages", "error"), [
        ([StageSpec((step(),), group=False, policy="ignore")], "policy must be"),
        ([StageSpec((step(),), group=False, policy="fail"),
          StageSpec((step(payload='{"kwargs":{}}'),), group=False, policy="fail")],
         "must begin"),
        ([StageSpec((step(max_retries=1001),), group=False, policy="fail")], "max_retries"),
        ([StageSpec((step(priority=10),), group=False, policy="fail")], "priority"),
    ])
    def test_an_argument_out_of_its_range_writes_nothing(
        self, queue: Broker, client: redis.Redis, stages: list[StageSpec], error: str
    ) -> None:
        with pytest.raises(BrokerError, match=error):
            Flows(queue).start("bad", stages)
        assert client.keys(queue.keys.prefix + "*") == []

    def test_a_taken_step_id_starts_nothing_and_says_which(
        self, queue: Broker, client: redis.Redis
    ) -> None:
        queue.enqueue("t.1.1")
        # A completed step kept for a longer result_ttl than its workflow's record was
        # told to be retried or cancelled, which a completed task cannot be.
        with pytest.raises(InvalidTaskError, match=r"its step id 't\.1\.1' names a task .*"
                           r"wait for a completed one's record to expire"):
            Flows(queue).start("t", [StageSpec((step(),), group=False, policy="fail")])
        assert client.exists(queue.keys.flow("t")) == 0

    @pytest.mark.parametrize(("written", "priority"), [
        ("ready", 5), ("ready:9", 9), ("ready:levels", 9), ("events", 5)])
    def test_a_place_of_another_type_starts_nothing_and_names_the_key(
        self, queue: Broker, client: redis.Redis, written: str, priority: int
    ) -> None:
        key = overwrite(client, queue.keys, written)
        stages = [StageSpec((step(priority=priority),), group=False, policy="fail"),
                  StageSpec((step("callback"),), group=False, policy="fail")]
        assert_refused_unchanged(client, key, lambda: Flows(queue).start("t", stages))
        client.delete(key)
        assert Flows(queue).start("t", stages)

    def test_a_cancel_with_a_log_of_another_type_changes_nothing(
        self, queue: Broker, client: redis.Redis
    ) -> None:
        stages = [StageSpec((step(),), group=False, policy="fail"),
                  StageSpec((step("callback"),), group=False, policy="fail")]
        assert Flows(queue).start("t", stages)
        key = overwrite(client, queue.keys, "events")
        assert_refused_unchanged(client, key, lambda: Flows(queue).cancel("t"))
        client.delete(key)
        assert Flows(queue).cancel("t").outcome == "cancelled"

    def test_a_cancel_passes_over_a_step_whose_record_is_of_another_type(
        self, queue: Broker, client: redis.Redis
    ) -> None:
        chord(Flows(queue), 2, flow_id="t")
        client.delete(queue.keys.task("t.2.1"))
        client.set(queue.keys.task("t.2.1"), "not taskq's")
        cancelled = Flows(queue).cancel("t")
        assert (cancelled.outcome, cancelled.ended) == ("cancelled", 2)
        assert [e.task for e in events(client, queue.keys) if e.type == "cancelled"] == [
            "t.1.2", "t.1.1"]
        assert client.get(queue.keys.task("t.2.1")) == "not taskq's"
        assert Flows(queue).status("t").state == "cancelled"

    def test_a_cancel_takes_a_groups_steps_newest_first_each_from_the_head_of_ready(
        self, queue: Broker, client: redis.Redis
    ) -> None:
        """Each LREM then stops at the list's first element: oldest first, cancelling
        a group of 10,000 walked 50 million list elements in one script."""
        chord(Flows(queue), 5, flow_id="t")
        assert client.lrange(queue.keys.ready, 0, 0) == ["t.1.5"]
        Flows(queue).cancel("t")
        assert [e.task for e in events(client, queue.keys) if e.type == "cancelled"] == [
            "t.1.5", "t.1.4", "t.1.3", "t.1.2", "t.1.1", "t.2.1"]

    def test_a_result_read_after_the_record_expired_is_not_found_rather_than_none(
        self, queue: Broker, client: redis.Redis
    ) -> None:
        """The handle reads the workflow's state, then its result: the record may expire
        in between, and every result would read as None."""
        chord(Flows(queue), 1, flow_id="t")
        client.delete(queue.keys.flow("t"))
        with pytest.raises(TaskNotFoundError, match=r"no workflow 't' on queue .*expired"):
            Flows(queue).output("t", 2, 1, False)

    def test_a_step_failed_with_plain_text_fails_its_flow_as_failed_with_that_text(
        self, queue: Broker
    ) -> None:
        """Broker.fail takes a str: no error type is stored, and the flow must not be
        said cancelled nor lose the text."""
        flows = Flows(queue)
        assert flows.start("t", [StageSpec((step(),), group=False, policy="fail"),
                                 StageSpec((step("callback"),), group=False, policy="fail")])
        assert queue.fail(*lease_one(queue), "disk full").status == "dead"
        status = flows.status("t")
        assert status is not None
        assert (status.state, status.error_type) == ("failed", "taskq.TaskFailed")
        assert status.error_message.endswith("t.1.1 (dead: disk full)")

    def test_a_step_that_failed_with_no_message_is_named_by_its_type_once(
        self, queue: Broker
    ) -> None:
        """The empty message fell back to last_error, the summary that names the type
        again: "t.1.1 (dead: app.Boom: Boom:  (at app.py:3 in f))"."""
        flows = Flows(queue)
        assert flows.start("t", [StageSpec((step(),), group=False, policy="fail"),
                                 StageSpec((step("callback"),), group=False, policy="fail")])
        failure = Failure("app.Boom", "", "Traceback ...", "Boom:  (at app.py:3 in f)")
        assert queue.fail(*lease_one(queue), failure).status == "dead"
        status = flows.status("t")
        assert status is not None
        assert status.error_message.endswith("t.1.1 (dead: app.Boom)")
        view = read_task(queue, "t.1.1")
        assert view is not None and view.failure == Failure(
            "app.Boom", "", "Traceback ...", "Boom:  (at app.py:3 in f)")

    @pytest.mark.parametrize(("written", "priority"), [
        ("ready", 5), ("ready:9", 9), ("ready:levels", 9)])
    def test_the_last_ack_of_a_stage_whose_next_place_is_of_another_type_writes_nothing(
        self, queue: Broker, client: redis.Redis, written: str, priority: int
    ) -> None:
        assert Flows(queue).start("f", [
            StageSpec((step(), step()), group=True, policy="fail"),
            StageSpec((step("callback", priority=priority),), group=False, policy="fail")])
        first, second = lease_one(queue), lease_one(queue)
        assert ack_result(queue, *first, "a")  # not the last: its stage goes on
        key = overwrite(client, queue.keys, written)
        assert_refused_unchanged(client, key, lambda: ack_result(queue, *second, "b"))
        client.delete(key)
        assert ack_result(queue, *second, "b")
        assert triggered(client, queue) == ["f.2.1"]

    @pytest.mark.parametrize("ending", ["fail", "reap", "cancel", "release", "ack_cancelled"])
    def test_an_end_that_fails_the_flow_with_a_later_step_of_another_type_writes_nothing(
        self, queue: Broker, client: redis.Redis, ending: str
    ) -> None:
        assert Flows(queue).start("f", [
            StageSpec((step(),), group=False, policy="fail"),
            StageSpec((step("callback"),), group=False, policy="fail")])
        step_id = "f.1.1"
        if ending != "cancel":
            task_id, token = lease_one(queue, seconds=0.05)
            assert task_id == step_id
        if ending in ("release", "ack_cancelled"):
            assert queue.cancel(step_id).outcome == "requested"
        key = queue.keys.task("f.2.1")
        client.delete(key)
        client.set(key, "not taskq's")
        calls = {"fail": lambda: queue.fail(step_id, token, "boom"),
                 "reap": lambda: queue.reap(backoff_base=0, backoff_max=0),
                 "cancel": lambda: queue.cancel(step_id),
                 "release": lambda: queue.release(step_id, token),
                 "ack_cancelled": lambda: queue.ack_cancelled(step_id, token)}
        wait_past(0.05)
        assert_refused_unchanged(client, key, calls[ending])
        client.delete(key)
        assert calls[ending]()
        assert client.hget(queue.keys.flow("f"), "state") == "failed"

    def test_a_failed_stage_passes_over_a_later_record_of_another_type_and_skips_the_rest(
        self, queue: Broker, client: redis.Redis
    ) -> None:
        assert Flows(queue).start("f", [
            StageSpec((step(),), group=False, policy="fail"),
            StageSpec((step("second"),), group=False, policy="fail"),
            StageSpec((step("third"), step("third")), group=True, policy="fail")])
        task_id, token = lease_one(queue)
        client.delete(queue.keys.task("f.3.1"))
        client.set(queue.keys.task("f.3.1"), "not taskq's")
        assert queue.fail(task_id, token, "boom").status == "dead"
        assert client.hget(queue.keys.flow("f"), "state") == "failed"
        assert [client.hget(queue.keys.task(t), "state") for t in ("f.2.1", "f.3.2")] == [
            "cancelled", "cancelled"]
        assert client.get(queue.keys.task("f.3.1")) == "not taskq's"

    def test_a_taken_flow_id_starts_nothing_and_is_no_error(self, queue: Broker) -> None:
        stages = [StageSpec((step(),), group=False, policy="fail")]
        assert Flows(queue).start("t", stages)
        assert not Flows(queue).start("t", stages)


class TestDamagedRecords:
    @pytest.mark.parametrize(("field", "value"), [
        ("size:1", "500000"), ("stages", "1e9"), ("size:1", "nan"), ("stages", "-1"),
    ])
    def test_stage_counts_no_script_wrote_are_an_error_not_a_long_read(
        self, queue: Broker, client: redis.Redis, field: str, value: str
    ) -> None:
        chord(Flows(queue), 2)
        client.hset(queue.keys.flow("f"), field, value)
        with pytest.raises(BrokerError, match=f"flow f has a damaged record: {field} is"):
            Flows(queue).status("f")


def status_reply(queue: Broker, most: int) -> list[Any]:
    """flow_status.lua's reply for workflow "f", its first `most` steps read."""
    keys, args = status_call(queue.keys, "f")
    reply: list[Any] = queue.scripts.flow_status(keys=keys, args=[*args[:2], most])
    return reply


class TestStatusInStretches:
    """A status read takes the record, the shape and the first STATUS_STEPS steps in
    one script call, and a bigger workflow's other steps after it."""

    def test_no_call_reads_more_than_the_steps_asked_for(
        self, queue: Broker, client: redis.Redis
    ) -> None:
        chord(Flows(queue), 5)
        reply = status_reply(queue, most=2)
        stages = int(reply[7])
        assert len(reply) == 8 + 3 * stages + 2 * len(STEP_FIELDS)

    def test_a_workflow_read_in_stretches_reads_as_it_does_in_one(
        self, queue: Broker, client: redis.Redis, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        flows = Flows(queue)
        chord(flows, 7)
        held = queue.lease_many("w", 30, 3).tasks
        assert queue.ack(held[0].task_id, held[0].token)
        client.delete(queue.keys.task("f.1.6"))
        client.delete(queue.keys.task("f.1.7"))
        client.set(queue.keys.task("f.1.7"), "not taskq's")
        whole = flows.status("f")
        monkeypatch.setattr("taskq.flows.STATUS_STEPS", 3)
        assert flows.status("f") == whole
        assert whole is not None and [s.state for s in whole.steps] == [
            "completed", "running", "running", "pending", "pending", "", "", "waiting"]

    def test_the_state_read_after_the_last_steps_is_the_one_given(
        self, queue: Broker, client: redis.Redis
    ) -> None:
        chord(Flows(queue), 3)
        reply = status_reply(queue, most=1)
        later = [r for stretch in later_reads(queue.keys, "f", reply) for r in stretch]
        assert [r[1] for r in later] == [queue.keys.task(f"f.{i}") for i in
                                         ("1.2", "1.3", "2.1")] + [queue.keys.flow("f")]
        header = ["completed", "2", "1", "9", "", "", ""]
        status = FlowStatus.from_reply("f", with_later_reads(
            reply, [["completed", "job", "0", ""]] * 3 + [header]))
        assert status is not None and (status.state, status.stage, status.ended_at_ms) == (
            "completed", 2, 9)
        assert FlowStatus.from_reply("f", with_later_reads(
            reply, [["completed", "job", "0", ""]] * 3 + [[None] * 7])) is None

    def test_a_coroutine_reads_it_in_stretches_alike(
        self, queue: Broker, settings: Settings, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        chord(Flows(queue), 5)
        monkeypatch.setattr("taskq.flows.STATUS_STEPS", 2)

        async def main() -> FlowStatus | None:
            broker = AsyncBroker(async_client(settings), queue.queue)
            try:
                return await AsyncFlows(broker).status("f")
            finally:
                await broker.aclose()

        read = asyncio.run(main())
        assert read is not None and len(read.steps) == 6 and read == Flows(queue).status("f")

    @pytest.mark.skipif(ON_CLUSTER, reason="an ACL user is each node's own")
    def test_an_error_a_later_read_meets_is_a_broker_error(
        self, queue: Broker, client: redis.Redis, settings: Settings,
        monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """Raised after the pipeline's block, it escaped as redis-py's own error: a 500
        from GET /api/flows where a BrokerError is a 503."""
        chord(Flows(queue), 3)
        monkeypatch.setattr("taskq.flows.STATUS_STEPS", 2)
        keys = [queue.keys.flow("f"), queue.keys.task("f.1.1"), queue.keys.task("f.1.2")]
        client.acl_setuser("flow-reader", enabled=True, passwords=["+pw"],
                           keys=keys, commands=["+@all"])
        try:
            reader = redis.Redis.from_url(settings.redis_url, username="flow-reader",
                                          password="pw", decode_responses=True)
            with pytest.raises(BrokerError, match="could not read a workflow: "
                                                  "NoPermissionError"):
                Flows(Broker(reader, queue.queue)).status("f")
        finally:
            client.acl_deluser("flow-reader")
