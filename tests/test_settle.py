"""Settling finished handlers: acks in one call, carrying the next lease when asked."""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

import pytest
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from conftest import ON_CLUSTER
from helpers import record_of
from proxy import ReplyDroppingProxy
from taskq.broker import Broker, NewTask
from taskq.connection import connect
from taskq.context import TaskContext
from taskq.results import Failure, LeasedTask
from taskq.settings import Settings
from taskq.worker.inbox import Outcome
from taskq.worker.queues import Queues
from taskq.worker.settle import Settler
from taskq.worker.slots import Slots
from waiting import wait_until


def outcome(broker: Broker, task: LeasedTask, error: str | None = None) -> Outcome:
    context = TaskContext(task_id=task.task_id, name=task.name, queue=broker.queue,
                          worker_id="w", token=task.token, attempt=task.attempt,
                          max_retries=task.max_retries)
    return Outcome(task, context, None if error is None else Failure("ValueError", error))


def no_give_up(context: TaskContext) -> Outcome | None:
    """A runner's give-up at a stop for runs with no time limit: none."""
    return None


class Settling:
    """A Settler on `broker`, with the Slots it lets settled tasks go from."""

    def __init__(self, broker: Broker, **settings: Any) -> None:
        self.slots = Slots(8)
        self.settler = Settler(Queues.of(broker), Settings.from_env({}, **settings),
                              self.slots, "w")

    def held(self, done: Outcome) -> Outcome:
        """`done`, with its task put in hand first, as the worker had it."""
        self.slots.hold(done.context)
        return done

    def in_hand(self) -> list[str]:
        return [c.task_id for c in self.slots.in_hand()]


class TestSettle:
    def test_acks_carry_the_next_lease_in_the_same_round_trip(self, broker: Broker) -> None:
        for n in range(3):
            broker.enqueue(f"t{n}")
        (task,) = broker.lease_many("w", 10, 1).tasks
        settling = Settling(broker)
        done = settling.held(outcome(broker, task))
        settled = settling.settler.settle([done], refill=2)
        assert settled.refill is not None
        assert [t.task_id for t in settled.refill.tasks] == ["t1", "t2"]
        assert (settled.acks, settled.ack_error) == ([True], None)
        assert settling.slots.stats().acked == 1 and settling.in_hand() == []
        assert done.context.finished
        assert record_of(broker, "t0").state == "completed"

    def test_without_a_lease_asked_for_it_only_acks(self, broker: Broker) -> None:
        broker.enqueue("t0")
        broker.enqueue("t1")
        (task,) = broker.lease_many("w", 10, 1).tasks
        settling = Settling(broker)
        assert settling.settler.settle([outcome(broker, task)]).refill is None
        assert settling.slots.stats().acked == 1 and broker.counts().ready == 1

    def test_failed_handlers_carry_no_lease(self, broker: Broker) -> None:
        broker.enqueue("t0")
        broker.enqueue("t1")
        (task,) = broker.lease_many("w", 10, 1).tasks
        settling = Settling(broker)
        done = settling.held(outcome(broker, task, "boom"))
        assert settling.settler.settle([done], refill=1).refill is None
        assert settling.slots.stats().retried == 1 and settling.in_hand() == []
        assert broker.counts().ready == 1 and broker.counts().leased == 0


@pytest.mark.skipif(ON_CLUSTER, reason="a cluster sends the acks and the lease one by one")
def test_out_of_memory_no_task_is_leased_beside_acks_that_cannot_be_written(
    broker: Broker, client: redis.Redis
) -> None:
    for n in range(3):
        broker.enqueue(f"t{n}")
    (task,) = broker.lease_many("w", 10, 1).tasks
    # A short lease: the acks sent alone give up after it, as after a long outage.
    settling = Settling(broker, lease_seconds=0.3)
    client.config_set("maxmemory", 1)
    try:
        settled = settling.settler.settle([outcome(broker, task)], refill=1)
    finally:
        client.config_set("maxmemory", 0)
    assert settled.refill is None
    assert settled.acks == [] and settled.ack_error is not None
    assert settling.slots.stats().acked == 0 and record_of(broker, "t0").state == "running"
    assert broker.counts().ready == 2


@pytest.mark.skipif(ON_CLUSTER, reason="the reply-dropping proxy fronts one node")
def test_a_lost_reply_to_the_acks_with_the_lease_sends_the_acks_again_alone(
    proxy: ReplyDroppingProxy, broker: Broker
) -> None:
    # A client without retries: the round trip fails outright, and the acks go again on
    # their own. The first ack went through, so the second is refused, and the record
    # shows the refusal was our own ack: counted as acked, not stale.
    unretried = redis.Redis.from_url(proxy.url, decode_responses=True, retry=Retry(NoBackoff(), 0))
    proxied = Broker(unretried, broker.queue)
    for n in range(3):
        broker.enqueue(f"t{n}")
    (task,) = broker.lease_many("w", 10, 1).tasks
    settling = Settling(proxied)
    proxied.counts()  # connected: the next reply is the ack's
    proxy.drop_next_reply()
    settled = settling.settler.settle([outcome(broker, task)], refill=1)
    assert settled.refill is None and settled.ack_error is not None and settled.acks == [True]
    assert proxy.dropped == 1
    stats = settling.slots.stats()
    assert (stats.acked, stats.stale) == (1, 0)
    types = [(f or {}).get("type") for _, f in broker.client.xrange(broker.keys.events)]
    assert types.count("completed") == 1
    unretried.close()


def test_one_queue_that_keeps_failing_holds_back_no_other_queues_acks(
    broker: Broker, client: redis.Redis
) -> None:
    """Calls to a queue meet only that queue's outage: one that has refused for a whole
    lease (here its leased set is another type, so every script on it fails before it
    writes) sends its own calls a probe a second, and the other queues' go out as ever."""
    broken = Broker(client, broker.queue + "-broken")
    broken.enqueue("lost")
    broker.enqueue("kept")
    (lost,) = broken.lease_many("w", 10, 1).tasks
    (kept,) = broker.lease_many("w", 10, 1).tasks
    client.delete(broken.keys.leased)
    client.set(broken.keys.leased, "not a sorted set")
    slots = Slots(8)
    settler = Settler(Queues([broken, broker]),
                      Settings.from_env({}, lease_seconds=0.3), slots, "w")
    assert settler.settle([outcome(broken, lost)]).acks == []  # a lease of refusals
    assert settler.settle([outcome(broker, kept)]).acks == [True]
    assert record_of(broker, "kept").state == "completed"


@pytest.mark.parametrize(("held_up", "refusing"), [("fail", "delayed"), ("ack", "leased")])
def test_a_queue_in_an_outage_keeps_no_other_queues_lease_from_its_heartbeats(
    broker: Broker, client: redis.Redis, held_up: str, refusing: str
) -> None:
    """A fail or an ack retried through its queue's outage (here a key of another type:
    every call refused before it writes) holds the calls of the other queues behind it
    up for as long as a lease: their leases must be renewed meanwhile, or another
    worker reaps a run that completed and runs it again or sends it to the DLQ."""
    broken = Broker(client, broker.queue + "-broken")
    broken.enqueue("held-up")
    broker.enqueue("waits")
    (first_task,) = broken.lease_many("w", 10, 1).tasks
    (waiting,) = broker.lease_many("w", 10, 1).tasks
    client.delete(getattr(broken.keys, refusing))
    client.set(getattr(broken.keys, refusing), "not taskq's")
    slots = Slots(8)
    settler = Settler(Queues([broken, broker]),
                      Settings.from_env({}, lease_seconds=1.0), slots, "w")
    first = outcome(broken, first_task, "boom" if held_up == "fail" else None)
    second = outcome(broker, waiting)
    for held in (first, second):
        slots.hold(held.context)
    settled: list[Any] = []
    settling = threading.Thread(target=lambda: settled.append(settler.settle([first, second])))
    settling.start()
    time.sleep(0.3)  # the first queue's call is being retried
    assert first.context.finished and not second.context.finished  # heartbeats go on
    settling.join(10)
    assert record_of(broker, "waits").state == "completed"


def test_a_handler_that_returns_while_a_shutdown_gives_tasks_back_keeps_its_result(
    broker: Broker, client: redis.Redis
) -> None:
    """Each give-back is a Redis call: a handler that returns during them is settled
    with what it returned, not acked as cut off (a workflow step would fail its flow
    for want of the result) or released to run again."""
    broker.enqueue("returned")
    (task,) = broker.lease_many("w", 10, 1).tasks
    settling = Settling(broker)
    done = settling.held(outcome(broker, task))
    done = Outcome(done.task, done.context, None, '"the value"')
    inbox: list[Outcome] = []

    def arrived() -> list[Outcome]:
        taken, inbox[:] = list(inbox), []
        return taken

    def handler_returns() -> None:
        done.context.ended_at = time.monotonic()
        time.sleep(0.05)  # its thread sends the outcome a moment after marking the end
        inbox.append(done)

    returning = threading.Thread(target=handler_returns)
    returning.start()
    wait_until(lambda: done.context.ended_at, 5, "the handler to return")
    settling.settler.abandon([done.context], arrived, no_give_up)
    returning.join(5)
    record = record_of(broker, "returned")
    assert (record.state, record.result) == ("completed", '"the value"')
    assert settling.in_hand() == []


def test_a_run_given_back_at_shutdown_whose_outcome_comes_later_is_not_settled_again(
    broker: Broker,
) -> None:
    """Its outcome arrives while another run's is waited for: the task was acked as cut
    off (its effect applied), and settling the outcome too counted it twice."""
    broker.enqueue_many([NewTask("cut"), NewTask("returned")])
    cut_task, returned_task = broker.lease_many("w", 10, 2).tasks
    settling = Settling(broker)
    cut, returned = (settling.held(outcome(broker, t)) for t in (cut_task, returned_task))
    with cut.context.effect():
        pass
    returned.context.ended_at = time.monotonic()
    late = [Outcome(cut.task, cut.context, None, '"late"'), returned]

    def arrived() -> list[Outcome]:
        taken, late[:] = list(late), []
        return taken

    # In hand newest last: the cut run, given back first, is the newer.
    settling.settler.abandon([returned.context, cut.context], arrived, no_give_up)
    assert settling.slots.stats().acked == 2
    assert record_of(broker, "cut").result is None  # acked as cut off, once
    assert record_of(broker, "returned").state == "completed"


def test_a_failure_redis_never_took_is_logged_as_such_not_as_a_stale_token(
    broker: Broker, client: redis.Redis, caplog: pytest.LogCaptureFixture
) -> None:
    """Refused for a whole lease (its leased set is another type, so every script on
    the queue fails), the failure is left for the reaper: the log says so, and counts
    no stale token, which would say another worker took the task over."""
    broker.enqueue("unlucky")
    (task,) = broker.lease_many("w", 10, 1).tasks
    client.delete(broker.keys.leased)
    client.set(broker.keys.leased, "not a sorted set")
    slots = Slots(8)
    settler = Settler(Queues.of(broker), Settings.from_env({}, lease_seconds=0.3), slots, "w")
    caplog.set_level(logging.WARNING, logger="taskq.worker")
    settler.settle([outcome(broker, task, "card declined")])
    lines = [r.getMessage() for r in caplog.records]
    assert any(line.startswith("fail of task unlucky not recorded: Redis stayed away")
               and "card declined" in line for line in lines), lines
    assert not any("is stale" in line for line in lines), lines
    assert slots.stats().stale == 0


@pytest.mark.skipif(ON_CLUSTER, reason="the reply-dropping proxy fronts one node")
@pytest.mark.parametrize("max_retries", [1, 0])
def test_a_fail_whose_reply_was_lost_counts_as_what_it_did_not_as_stale(
    proxy: ReplyDroppingProxy, broker: Broker, max_retries: int,
    caplog: pytest.LogCaptureFixture
) -> None:
    """The client's resend of the fail finds the task out of leased (the first send did
    that) and is refused; the record, still at our token, says it was our own fail."""
    proxied = Broker(connect(Settings.from_env({}, redis_url=proxy.url)), broker.queue)
    broker.enqueue("t0", max_retries=max_retries)
    (task,) = broker.lease_many("w", 10, 1).tasks
    settling = Settling(proxied)
    # Connected, and the server has the fail script: a first fail answered NOSCRIPT
    # would have run nothing. The next reply is the fail's.
    assert proxied.fail("t9", 1, "x").status == "stale"
    caplog.set_level(logging.WARNING, logger="taskq")
    proxy.drop_next_reply()
    settling.settler.settle([settling.held(outcome(broker, task, "card declined"))])
    assert proxy.dropped == 1
    stats = settling.slots.stats()
    assert (stats.retried, stats.dead, stats.stale) == (max_retries, 1 - max_retries, 0)
    assert not any("is stale" in r.getMessage() for r in caplog.records)
    assert record_of(broker, "t0").state == ("delayed" if max_retries else "dead")
    proxied.client.close()
