"""A handler's effect() block: confirmed with Redis first, refused once the lease is gone."""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import sys
import threading
import time
from collections.abc import Callable

import pytest
import redis

import taskq.context
from conftest import ON_CLUSTER
from helpers import events, stalling
from taskq.broker import Broker
from taskq.context import MOST_FIELDS, LeaseLostError, TaskContext
from taskq.worker.heartbeat import LeaseCheck
from test_broker_heartbeat import hold
from waiting import wait_until

LEASE = 2.0


def context_on(broker: Broker, task_id: str, token: int, lease: float = LEASE) -> TaskContext:
    return TaskContext(task_id=task_id, name="n", queue=broker.queue, worker_id="w1",
                       token=token, attempt=1, max_retries=3, lease=LeaseCheck(broker, lease))


def unreachable() -> Broker:
    return Broker(redis.Redis(unix_socket_path="/nonexistent/redis.sock",
                              socket_connect_timeout=0.2), "test")


def test_an_effect_confirms_and_renews_the_lease_before_it_runs(
    broker: Broker, client: redis.Redis
) -> None:
    (task_id, token), = hold(broker, "a", seconds=LEASE)
    context = context_on(broker, task_id, token)
    seen = len(events(client, broker.keys))
    ran = []
    with context.effect():
        ran.append(True)
    assert ran and context.effect_applied
    assert [e.type for e in events(client, broker.keys, seen)] == ["heartbeat"]


def test_an_effect_is_refused_when_redis_says_the_lease_was_taken_over(
    broker: Broker, client: redis.Redis
) -> None:
    """As a worker paused past its lease finds on waking: its handler reaches effect()
    before its heartbeat thread has noticed anything."""
    (task_id, token), = hold(broker, "a", seconds=LEASE)
    context = context_on(broker, task_id, token)
    client.hincrby(broker.keys.task(task_id), "fencing_token", 2)  # reaped, leased again
    with pytest.raises(LeaseLostError, match=f"lost its lease \\(token {token}\\)"), \
            context.effect():
        pytest.fail("the effect ran")
    assert context.lease_lost and not context.effect_applied


def test_an_effect_runs_on_the_last_renewal_while_redis_cannot_be_asked() -> None:
    context = context_on(unreachable(), "a", 1, lease=60)  # the client retries for seconds
    with context.effect():
        pass
    assert context.effect_applied


def test_an_effect_is_refused_a_lease_after_the_last_renewal_redis_accepted() -> None:
    context = context_on(unreachable(), "a", 1, lease=60)
    context.confirmed_at = time.monotonic() - 60.1
    with pytest.raises(LeaseLostError, match="longer than the lease"), context.effect():
        pytest.fail("the effect ran")


def test_an_effect_after_its_run_was_settled_is_refused_while_redis_cannot_be_asked(
) -> None:
    """A thread the handler left behind: the worker failed or acked the run and gave its
    lease up, so the last renewal vouches for nothing (a retry may be running)."""
    context = context_on(unreachable(), "a", 1, lease=60)
    context.finished = True
    with pytest.raises(LeaseLostError, match="its run was settled"), context.effect():
        pytest.fail("the effect ran")


def test_a_lease_a_lease_past_its_last_renewal_has_lapsed_unless_redis_holds_it(
    broker: Broker, client: redis.Redis
) -> None:
    """A grant that came back late (Redis stalled) is dated from its sending: one
    renewal tells it from a lease another worker has taken."""
    (task_id, token), = hold(broker, "a", seconds=LEASE)
    context = context_on(broker, task_id, token)
    assert not context.lease_lapsed()
    context.confirmed_at = time.monotonic() - LEASE - 0.1
    assert not context.lease_lapsed()  # renewed: Redis still held it
    assert time.monotonic() - context.confirmed_at < 1
    context.confirmed_at = time.monotonic() - LEASE - 0.1
    client.hincrby(broker.keys.task(task_id), "fencing_token", 2)  # reaped, leased again
    assert context.lease_lapsed() and context.lease_lost
    out_of_reach = context_on(unreachable(), "b", 1, lease=60)
    out_of_reach.confirmed_at = time.monotonic() - 60.1
    assert out_of_reach.lease_lapsed()  # no renewal to vouch for it


@pytest.mark.skipif(ON_CLUSTER, reason="the stalling script runs on one node of a cluster")
def test_an_effect_runs_when_redis_held_the_lease_through_a_stall_longer_than_it(
    broker: Broker, client: redis.Redis
) -> None:
    """Redis stalled past the lease, then renewed it: the renewal cannot say since when,
    so it is asked once more rather than the run counted as failed."""
    (task_id, token), = hold(broker, "a", seconds=1)
    context = context_on(broker, task_id, token, lease=1)
    stall = stalling(client, 1.2)
    time.sleep(0.1)  # the confirmation waits behind the stall
    try:
        with context.effect():
            pass
    finally:
        stall.join(5)
    assert context.effect_applied and not context.lease_lost


@pytest.mark.skipif(ON_CLUSTER, reason="the stalling script runs on one node of a cluster")
def test_a_shutdown_does_not_wait_out_a_confirmation_and_the_block_is_refused_after(
    broker: Broker, client: redis.Redis
) -> None:
    """The renewal was made holding the effect lock: a release at a stop's grace waited
    for a renewal that hung on a silent Redis (the client's timeouts, 45 s past a 2 s
    grace), saying a block was under way when none was."""
    (task_id, token), = hold(broker, "a", seconds=LEASE)
    context = context_on(broker, task_id, token)
    refused: list[str] = []

    def handler() -> None:
        try:
            with context.effect():
                refused.append("applied")
        except LeaseLostError as e:
            refused.append(str(e))

    stall = stalling(client, 1.5)
    time.sleep(0.1)
    thread = threading.Thread(target=handler)
    thread.start()
    time.sleep(0.2)  # its confirmation waits behind the stall
    try:
        began = time.monotonic()
        assert context.abandon() is False  # at once: no block is under way
        assert time.monotonic() - began < 0.5
    finally:
        stall.join(5)
        thread.join(5)
    assert refused == [f"task {task_id} was released at shutdown; its effect is skipped"]


def blocked_behind_another_block(context: TaskContext, outcome: list[str],
                                  then: Callable[[], object]) -> threading.Thread:
    """A thread whose effect() block waits for another thread's block of the run, which
    calls `then` as it ends; `outcome` gets "applied" or the refusal's message."""
    inside, waiting = threading.Event(), threading.Event()

    def first() -> None:
        with context.effect():
            inside.set()
            waiting.wait(5)
            time.sleep(0.2)  # the second thread waits on the lock by now
            then()

    def second() -> None:
        inside.wait(5)
        waiting.set()
        try:
            with context.effect():
                outcome.append("applied")
        except LeaseLostError as e:
            outcome.append(str(e))

    threads = [threading.Thread(target=first), threading.Thread(target=second)]
    for thread in threads:
        thread.start()
    threads[0].join(5)
    return threads[1]


@pytest.mark.skipif(ON_CLUSTER, reason="the stalling script runs on one node of a cluster")
@pytest.mark.parametrize("renewed_meanwhile", [True, False], ids=["renewed", "unrenewed"])
def test_a_block_that_waited_for_another_never_holds_the_lock_through_a_renewal(
    broker: Broker, client: redis.Redis, renewed_meanwhile: bool
) -> None:
    """A block that waited for another thread's block confirmed its lease again holding
    the lock, so a stop's release waited out a renewal that hung on a silent Redis. It
    is let in on the renewals made while it waited, and where none was accepted for a
    lease it confirms again with the lock let go."""
    (task_id, token), = hold(broker, "a", seconds=LEASE)
    context = context_on(broker, task_id, token)
    outcome: list[str] = []
    stalls: list[threading.Thread] = []

    def first_block_ends() -> None:
        # The second block's renewal made before it waits (its heartbeat event): the
        # stall must hold up only what comes after it.
        wait_until(lambda: [e.type for e in events(client, broker.keys)].count("heartbeat")
                   >= 2, 5, "the second block's renewal")
        if not renewed_meanwhile:
            context.confirmed_at = time.monotonic() - LEASE - 0.1
        stalls.append(stalling(client, 1.5))
        time.sleep(0.1)

    second = blocked_behind_another_block(context, outcome, first_block_ends)
    try:
        time.sleep(0.1)
        began = time.monotonic()
        context.abandon()
        assert time.monotonic() - began < 0.5
    finally:
        for stall in stalls:
            stall.join(5)
        second.join(5)
    assert outcome == (["applied"] if renewed_meanwhile else
                       [f"task {task_id} was released at shutdown; its effect is skipped"])


@pytest.mark.skipif(ON_CLUSTER, reason="the stalling script runs on one node of a cluster")
def test_an_effect_whose_confirmation_came_back_past_the_time_limit_is_refused(
    broker: Broker, client: redis.Redis
) -> None:
    """The run has been failed for its limit meanwhile, and its retry may apply the
    effect: a lease Redis says is still held does not let the block in."""
    (task_id, token), = hold(broker, "a", seconds=LEASE)
    context = context_on(broker, task_id, token)
    context.limit(0.3)
    context.begin()
    stall = stalling(client, 0.8)
    time.sleep(0.1)  # asked well inside the limit; answered past it
    try:
        with pytest.raises(LeaseLostError, match="ran past its time limit"), context.effect():
            pytest.fail("the effect ran")
    finally:
        stall.join(5)
    assert not context.effect_applied


def test_an_effect_that_raises_is_not_counted_as_applied(broker: Broker) -> None:
    (task_id, token), = hold(broker, "a", seconds=LEASE)
    context = context_on(broker, task_id, token)
    with pytest.raises(ValueError), context.effect():
        raise ValueError("the downstream refused")
    assert not context.effect_applied
    assert context.abandon() is False


def test_after_abandon_no_effect_starts_and_abandon_tells_whether_one_was_applied(
    broker: Broker,
) -> None:
    (task_id, token), = hold(broker, "a", seconds=LEASE)
    context = context_on(broker, task_id, token)
    with context.effect():
        pass
    assert context.abandon() is True
    with pytest.raises(LeaseLostError, match="released at shutdown"), context.effect():
        pytest.fail("the effect ran")


def test_fence_now_never_waits_for_a_block_under_way_and_fences_the_blocks_after_it(
    broker: Broker,
) -> None:
    (task_id, token), = hold(broker, "a", seconds=LEASE)
    context = context_on(broker, task_id, token)
    inside, leave = threading.Event(), threading.Event()
    ran: list[str] = []

    def block() -> None:
        with context.effect():
            inside.set()
            leave.wait(5)
        ran.append("first")
        with contextlib.suppress(LeaseLostError), context.effect():
            ran.append("second")

    thread = threading.Thread(target=block)
    thread.start()
    assert inside.wait(5)
    assert context.fence_now() is False and context.abandoned
    leave.set()
    thread.join(5)
    assert ran == ["first"]
    assert context.fence_now() is True
    assert context.abandon() is True  # the block under way was applied


def test_fence_now_stops_a_handler_that_runs_blocks_back_to_back(broker: Broker) -> None:
    """Such a handler holds the lock nearly always: a fence that had to take it first
    found it taken at every try, and the blocks went on past a stop's grace."""
    (task_id, token), = hold(broker, "a", seconds=LEASE)
    context = context_on(broker, task_id, token)
    applied: list[float] = []
    stopped: list[BaseException] = []

    def steps() -> None:
        try:
            for _ in range(1000):
                with context.effect():
                    time.sleep(0.005)
                    applied.append(time.monotonic())
        except LeaseLostError as e:
            stopped.append(e)

    thread = threading.Thread(target=steps)
    thread.start()
    wait_until(lambda: len(applied) >= 3, 5, "the blocks to run")
    context.fence_now()
    fenced_at = time.monotonic()
    thread.join(5)
    assert stopped and "released at shutdown" in str(stopped[0])
    # The block under way when the fence came, at most.
    assert sum(at > fenced_at for at in applied) <= 1, len(applied)


def test_a_block_held_by_the_callers_own_thread_is_under_way() -> None:
    """An async handler's coroutine may hold a block across an await while the loop's
    thread, which holds the re-entrant lock, asks whether the run is in one."""
    context = TaskContext(task_id="t", name="n", queue="q", worker_id="w", token=1,
                          attempt=1, max_retries=3)
    assert context.effect_idle()
    with context.effect():
        assert not context.effect_idle()
        assert context.fence_now() is False
    assert context.effect_idle()


def test_a_closed_run_refuses_effects_after_the_one_under_way() -> None:
    context = TaskContext(task_id="t", name="n", queue="q", worker_id="w", token=1,
                          attempt=1, max_retries=3)
    with context.effect():
        context.close()
    assert context.effect_applied
    with pytest.raises(LeaseLostError, match="handler ended"), context.effect():
        pytest.fail("the effect ran")


def test_a_block_on_another_thread_waits_for_the_one_under_way_and_says_so(
    broker: Broker, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Blocks nest on one thread only: a block that hands its writes to a pool and waits
    for them waits for ever. The wait is loud, not silent."""
    monkeypatch.setattr(taskq.context, "ABANDON_WARN_SECONDS", 0.05)
    (task_id, token), = hold(broker, "a", seconds=LEASE)
    context = context_on(broker, task_id, token)
    done: list[str] = []

    def helper() -> None:
        with context.effect():
            done.append("helper")

    caplog.set_level(logging.WARNING, logger="taskq")
    with context.effect():
        thread = threading.Thread(target=helper)
        thread.start()
        thread.join(0.5)
        assert done == []  # still waiting for this block
        assert "blocks nest on one thread only" in caplog.text
    thread.join(5)
    assert done == ["helper"]


def test_an_effect_in_a_process_the_handler_forked_is_refused_there_alone(
    broker: Broker,
) -> None:
    """The child shares the run's token, so its lease check passed beside the worker's
    own; the worker, which alone settles the task, never knew of its effect. Forked
    inside a block, as a handler may: the child's one thread is the block's, so the
    lock alone would let it in."""
    (task_id, token), = hold(broker, "a", seconds=LEASE)
    context = context_on(broker, task_id, token)
    read, write = os.pipe()
    with context._lock:
        pid = os.fork()
        if pid == 0:  # the child: report what effect() did, and end
            try:
                with context.effect():
                    said = "applied"
            except LeaseLostError as e:
                said = str(e)
            os.write(write, said.encode())
            os._exit(0)
    os.close(write)
    assert os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == 0
    with os.fdopen(read) as reply:
        said = reply.read()
    assert "effect() in a process its handler forked" in said
    with context.effect():  # the worker's own process applies it
        pass
    assert context.effect_applied


def test_a_context_has_no_more_fields_than_its_instances_can_share_keys_for() -> None:
    """One field past it, each run's context got a dict of its own, and a worker ran 3%
    more instructions a task."""
    assert len(dataclasses.fields(TaskContext)) <= MOST_FIELDS
    context = TaskContext(task_id="a", name="n", queue="q", worker_id="w", token=1,
                          attempt=1, max_retries=3)
    plain = TaskContext(task_id="b", name="n", queue="q", worker_id="w", token=1,
                        attempt=1, max_retries=3)
    # Instances that share their keys hold far smaller dicts than one that does not.
    assert sys.getsizeof(context.__dict__) == sys.getsizeof(plain.__dict__) < 1000
