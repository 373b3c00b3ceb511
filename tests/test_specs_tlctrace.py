"""TLC's trace validation: the event log of real broker calls, cancels included, is a
behaviour of TaskQueue, and the same log doctored (a stale ack, a lease of a task not yet
due, a second completion, a reap without a bump; a lease or a completion after a cancel,
a cancel with a stale token or that its holder never heard of, a retry of a
cancel-requested task) is rejected at the doctored entry."""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import pytest
import redis
from specs import tlctrace

from helpers import CANCEL_PATHS, cancel_scenario
from taskq.broker import Broker, NewTask
from taskq.rates import RateLimit
from taskq.tools import tlatrace
from taskq.tools.tracecheck import read_log
from waiting import wait_until

pytestmark = pytest.mark.skipif(
    shutil.which("java") is None,
    reason="TLC needs Java 17 on PATH (Debian: apt-get install default-jre-headless)",
)

Log = list[tuple[int, dict[str, str]]]
MAX_RETRIES = 1


def leased(broker: Broker, task_id: str, worker: str, seconds: float) -> int:
    """Lease `task_id`, which must be at the front of ready: its token."""
    got = broker.lease(worker, seconds)
    assert got is not None and got[0] == task_id, got
    return got[1]


def run_scenario(broker: Broker) -> None:
    """Four tasks, three of them of priorities other than the default, through every
    logged operation; ids are leased one at a time."""
    broker.enqueue("a", max_retries=MAX_RETRIES, priority=9)
    a = leased(broker, "a", "w1", 10)
    assert broker.heartbeat("a", a, 10)
    assert broker.ack("a", a)

    # b: the lease runs out and is reaped (a new token), then leased again (another);
    # the first holder's late ack is refused and writes no event.
    broker.enqueue("b", max_retries=MAX_RETRIES)
    b1 = leased(broker, "b", "w1", 0.05)
    time.sleep(0.1)
    assert broker.reap(backoff_base=0.01, backoff_max=0.02)
    wait_until(lambda: broker.promote() == ["b"], what="b promoted")
    b2 = leased(broker, "b", "w2", 10)
    assert not broker.ack("b", b1)
    assert broker.ack("b", b2)

    # c: delayed, failed into delayed, released, failed into the DLQ, revived, acked.
    broker.enqueue("c", delay=0.05, max_retries=MAX_RETRIES, priority=0)
    wait_until(lambda: broker.promote() == ["c"], what="c promoted")
    c = leased(broker, "c", "w1", 10)
    broker.fail("c", c, "boom", backoff_base=0.01, backoff_max=0.02)
    wait_until(lambda: broker.promote() == ["c"], what="c promoted again")
    c = leased(broker, "c", "w1", 10)
    assert broker.release("c", c)
    c = leased(broker, "c", "w2", 10)
    broker.fail("c", c, "boom again")
    assert broker.retry_dead("c")
    c = leased(broker, "c", "w2", 10)
    assert broker.ack("c", c)

    # d: a final failure, straight to the DLQ with its retry unused.
    broker.enqueue("d", max_retries=MAX_RETRIES, priority=7)
    d = leased(broker, "d", "w1", 10)
    assert broker.fail("d", d, "UnknownTaskError: nobody", dead=True).status == "dead"


@pytest.fixture
def real_log(broker: Broker, client: redis.Redis) -> Log:
    run_scenario(broker)
    return read_log(client, broker.keys.events)


@pytest.fixture
def cancel_log(broker: Broker, client: redis.Redis) -> Log:
    cancel_scenario(broker)
    return read_log(client, broker.keys.events)


def validate(events: Log, tmp_path: Path) -> tlctrace.Verdict:
    return tlctrace.check(tlatrace.per_task(events), MAX_RETRIES, tmp_path)


def index(events: Log, task: str, kind: str, nth: int = 0) -> int:
    return [n for n, (_, f) in enumerate(events) if (f["task"], f["type"]) == (task, kind)][nth]


def test_the_log_of_real_broker_calls_is_a_behaviour_of_task_queue(
    real_log: Log, tmp_path: Path
) -> None:
    # The priority an enqueued event carries is not the model's business: no step.
    assert {f.get("priority") for _, f in real_log if f["type"] == "enqueued"} == {
        "9", None, "0", "7"}
    verdict = validate(real_log, tmp_path)
    assert verdict.accepted, str(verdict)
    assert verdict.traces == 4


def token_of(events: Log, task: str, kind: str, nth: int = 0) -> str:
    return events[index(events, task, kind, nth)][1]["token"]


def test_an_ack_with_a_stale_token_is_rejected(real_log: Log, tmp_path: Path) -> None:
    at = index(real_log, "b", "completed")
    real_log[at][1]["token"] = token_of(real_log, "b", "leased")  # the reaped run's
    verdict = validate(real_log, tmp_path)
    assert not verdict.accepted and verdict.task == "b"
    assert 'type |-> "completed"' in verdict.reason


def test_a_lease_of_a_delayed_task_never_promoted_is_rejected(
    real_log: Log, tmp_path: Path
) -> None:
    del real_log[index(real_log, "c", "promoted")]
    verdict = validate(real_log, tmp_path)
    assert (verdict.accepted, verdict.task, verdict.entry) == (False, "c", 2)
    assert 'type |-> "leased"' in verdict.reason


def test_a_promotion_before_the_run_at_is_rejected(real_log: Log, tmp_path: Path) -> None:
    enqueued = real_log[index(real_log, "c", "enqueued")][1]
    real_log[index(real_log, "c", "promoted")][1]["ts"] = str(int(enqueued["at"]) - 1)
    verdict = validate(real_log, tmp_path)
    assert (verdict.accepted, verdict.task) == (False, "c")
    assert 'type |-> "tick"' in verdict.reason


def test_a_task_completed_twice_is_rejected(real_log: Log, tmp_path: Path) -> None:
    at = index(real_log, "a", "completed")
    real_log.insert(at + 1, real_log[at])
    verdict = validate(real_log, tmp_path)
    assert (verdict.accepted, verdict.task) == (False, "a")


def test_a_reap_that_does_not_bump_the_token_is_rejected(
    real_log: Log, tmp_path: Path
) -> None:
    real_log[index(real_log, "b", "reaped")][1]["token"] = token_of(real_log, "b", "leased")
    verdict = validate(real_log, tmp_path)
    assert (verdict.accepted, verdict.task) == (False, "b")
    assert 'type |-> "reaped"' in verdict.reason


def test_a_lease_that_mints_a_token_given_before_is_rejected(
    real_log: Log, tmp_path: Path
) -> None:
    # What a lease lost with Redis's last writes would look like had its token been
    # minted again (specs/TaskQueue/TokenMint.tla): a second lease with the first's.
    again = token_of(real_log, "b", "leased")
    real_log[index(real_log, "b", "leased", 1)][1]["token"] = again
    for n, (_, fields) in enumerate(real_log):
        if fields["task"] == "b" and n > index(real_log, "b", "leased", 1):
            fields["token"] = again
    verdict = validate(real_log, tmp_path)
    assert (verdict.accepted, verdict.task) == (False, "b")
    assert 'type |-> "leased"' in verdict.reason


def test_traces_checked_in_batches_add_up_and_a_late_rejection_still_ends_it(
    real_log: Log,
) -> None:
    verdict = tlctrace.check_in_batches(tlatrace.per_task(real_log), MAX_RETRIES, batch=1)
    assert verdict.accepted and verdict.traces == 4
    real_log[index(real_log, "c", "completed")][1]["token"] = token_of(real_log, "c", "leased")
    verdict = tlctrace.check_in_batches(tlatrace.per_task(real_log), MAX_RETRIES, batch=1)
    assert (verdict.accepted, verdict.task) == (False, "c")


class TestCancellation:
    def test_every_cancel_path_of_real_broker_calls_is_a_behaviour_of_task_queue(
        self, cancel_log: Log, tmp_path: Path
    ) -> None:
        verdict = validate(cancel_log, tmp_path)
        assert verdict.accepted, str(verdict)
        assert verdict.traces == len(CANCEL_PATHS)

    def test_a_lease_after_a_cancel_is_rejected(self, cancel_log: Log, tmp_path: Path) -> None:
        at = index(cancel_log, "p", "cancelled")
        cancel_log.insert(at + 1, (0, {"type": "leased", "task": "p", "state": "running",
                                       "token": "1", "retries": "0"}))
        verdict = validate(cancel_log, tmp_path)
        assert (verdict.accepted, verdict.task, verdict.entry) == (False, "p", 3)
        assert 'type |-> "leased"' in verdict.reason

    def test_a_completion_after_a_cancel_is_rejected(self, cancel_log: Log, tmp_path: Path) -> None:
        at = index(cancel_log, "r", "cancelled")
        token = cancel_log[at][1]["token"]
        cancel_log.insert(at + 1, (0, {"type": "completed", "task": "r", "state": "completed",
                                       "token": token}))
        verdict = validate(cancel_log, tmp_path)
        assert (verdict.accepted, verdict.task) == (False, "r")

    def test_a_cancel_with_a_stale_token_is_rejected(self, cancel_log: Log, tmp_path: Path) -> None:
        cancel_log[index(cancel_log, "r", "cancelled")][1]["token"] = "0"
        verdict = validate(cancel_log, tmp_path)
        assert (verdict.accepted, verdict.task) == (False, "r")
        assert 'type |-> "cancelled"' in verdict.reason

    def test_a_cancel_its_holder_never_heard_of_is_rejected(
        self, cancel_log: Log, tmp_path: Path
    ) -> None:
        """ack_cancelled needs a renewal that answered "cancel" after the request."""
        del cancel_log[index(cancel_log, "r", "heartbeat", nth=1)]
        verdict = validate(cancel_log, tmp_path)
        assert (verdict.accepted, verdict.task) == (False, "r")
        assert 'type |-> "cancelled"' in verdict.reason

    def test_a_retry_of_a_cancel_requested_task_is_rejected(
        self, cancel_log: Log, tmp_path: Path
    ) -> None:
        failed = cancel_log[index(cancel_log, "f", "failed")][1]
        failed.update(state="delayed", retries="1", at=failed["ts"])
        verdict = validate(cancel_log, tmp_path)
        assert (verdict.accepted, verdict.task) == (False, "f")
        assert 'type |-> "failed"' in verdict.reason

    def test_a_cancel_that_misstates_the_state_it_left_is_rejected(
        self, cancel_log: Log, tmp_path: Path
    ) -> None:
        cancel_log[index(cancel_log, "d", "cancelled")][1]["from"] = "pending"
        verdict = validate(cancel_log, tmp_path)
        assert (verdict.accepted, verdict.task) == (False, "d")


def test_a_task_throttled_by_a_rate_limit_is_a_behaviour_and_an_early_lease_is_not(
    broker: Broker, client: redis.Redis, tmp_path: Path
) -> None:
    broker.rate_limits = (RateLimit("slow", 20.0),)
    broker.enqueue_many([NewTask(t, name="slow", max_retries=MAX_RETRIES) for t in ("r1", "r2")])
    first = broker.lease_many("w1", 10, 2).tasks
    assert [t.task_id for t in first] == ["r1"]  # r2 throttled to delayed
    wait_until(lambda: broker.promote() == ["r2"], what="r2's slot")
    (second,) = broker.lease_many("w1", 10, 2).tasks
    assert broker.ack_many([("r1", first[0].token), ("r2", second.token)]) == [True, True]
    log = read_log(client, broker.keys.events)
    assert [f["type"] for _, f in log if f["task"] == "r2"][:2] == ["enqueued", "throttled"]
    verdict = validate(log, tmp_path)
    assert verdict.accepted and verdict.traces == 2, str(verdict)
    del log[index(log, "r2", "promoted")]  # leased straight from delayed
    verdict = validate(log, tmp_path)
    assert (verdict.accepted, verdict.task) == (False, "r2")


def test_a_throttled_task_a_lifted_limit_made_due_sooner_is_a_behaviour(
    broker: Broker, client: redis.Redis, tmp_path: Path
) -> None:
    broker.rate_limits = (RateLimit("slow", 1 / 3600),)
    broker.enqueue_many([NewTask(t, name="slow", max_retries=MAX_RETRIES) for t in ("r1", "r2")])
    (first,) = broker.lease_many("w1", 10, 2).tasks  # r2 throttled, an hour out
    broker.rate_limits = ()
    assert broker.lift_rate_limits(["slow"]).left == 0
    assert broker.promote() == ["r2"]
    (second,) = broker.lease_many("w1", 10, 2).tasks
    assert broker.ack_many([("r1", first.token), ("r2", second.token)]) == [True, True]
    log = read_log(client, broker.keys.events)
    assert [f["type"] for _, f in log if f["task"] == "r2"][:4] == [
        "enqueued", "throttled", "rescheduled", "promoted"]
    verdict = validate(log, tmp_path)
    assert verdict.accepted and verdict.traces == 2, str(verdict)
    # Without it, the log promotes r2 an hour before the run-at it last stated.
    del log[index(log, "r2", "rescheduled")]
    verdict = validate(log, tmp_path)
    assert (verdict.accepted, verdict.task) == (False, "r2")
