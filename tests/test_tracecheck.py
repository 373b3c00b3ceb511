"""taskq.tools.tracecheck: hand-made illegal event logs are each reported, the log of every
cancel path on real broker calls passes, and the whole log of real worker processes
(failures, delays, a SIGKILL mid-run) passes."""

from __future__ import annotations

import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from helpers import CANCEL_PATHS, cancel_scenario
from taskq.broker import Broker, NewTask
from taskq.tools.embedded import EmbeddedRedis
from taskq.tools.ledger import Ledger
from taskq.tools.tracecheck import TraceReport, read_log, validate
from waiting import WorkerProcesses, event_types, wait_until, worker_env

Event = dict[str, str]


def log(*events: Event) -> list[tuple[int, Event]]:
    """Events of one task `t`, numbered as the stream would number them."""
    return [(seq, {"task": "t", **e}) for seq, e in enumerate(events, start=1)]


def enqueued(state: str = "pending", at: int = 1000, ts: int = 1000) -> Event:
    return {"type": "enqueued", "state": state, "at": str(at), "ts": str(ts)}


def event(kind: str, state: str, token: int = 0, ts: int = 2000, **more: str) -> Event:
    return {"type": kind, "state": state, "token": str(token), "ts": str(ts), **more}


def problems(report: TraceReport) -> list[str]:
    return [message for _, _, message in report.violations]


LEGAL = (
    enqueued("delayed", at=1500),
    event("promoted", "pending", ts=1500),
    event("leased", "running", 1, ts=1600),
    event("heartbeat", "running", 1),
    event("reaped", "delayed", 2, at="2500"),
    event("promoted", "pending", ts=2500),
    event("leased", "running", 3, ts=2600),
    event("failed", "delayed", 3, at="2700"),
    event("promoted", "pending", ts=2700),
    event("leased", "running", 4, ts=2800),
    event("released", "pending", 4),
    event("leased", "running", 5, ts=2900),
    event("completed", "completed", 5, ts=3000),
)


class TestIllegalTracesAreReported:
    def test_a_legal_run_with_a_reap_a_retry_and_a_release_passes(self) -> None:
        report = validate(log(*LEGAL))
        assert report.ok and (report.tasks, report.events) == (1, len(LEGAL))

    def test_a_throttled_task_waits_for_its_slot_and_only_a_pending_one_is_throttled(
        self,
    ) -> None:
        throttled = (enqueued(), event("throttled", "delayed", ts=1000, at="1200"))
        on_time = log(*throttled, event("promoted", "pending", ts=1200),
                      event("leased", "running", 1, ts=1200),
                      event("completed", "completed", 1, ts=1300))
        assert validate(on_time).ok
        early = log(*throttled, event("promoted", "pending", ts=1199))
        assert problems(validate(early, require_terminal=False)) == [
            "promoted at 1199 before its run-at 1200"]
        running = log(enqueued(), event("leased", "running", 1),
                      event("throttled", "delayed", 1, at="3000"))
        assert problems(validate(running, require_terminal=False)) == [
            "throttled from state 'running'"]

    def test_an_ack_without_a_lease_is_reported(self) -> None:
        report = validate(log(enqueued(), event("completed", "completed", 0)))
        assert problems(report) == ["completed from state 'pending'"]

    def test_a_lease_of_a_delayed_task_before_its_run_at_is_reported(self) -> None:
        report = validate(log(enqueued("delayed", at=5000), event("leased", "running", 1)))
        assert problems(report) == [
            "leased from state 'delayed'",
            "leased at 2000 before its run-at 5000",
        ]

    def test_a_promotion_before_the_run_at_is_reported(self) -> None:
        early = log(enqueued("delayed", at=5000), event("promoted", "pending", ts=4999))
        assert problems(validate(early, require_terminal=False)) == [
            "promoted at 4999 before its run-at 5000"
        ]

    def test_a_lease_token_that_does_not_increase_is_reported(self) -> None:
        report = validate(
            log(
                enqueued(),
                event("leased", "running", 1),
                event("released", "pending", 1),
                event("leased", "running", 1),
                event("completed", "completed", 1),
            )
        )
        assert problems(report) == ["lease token 1 not above the previous 1"]

    def test_two_terminal_events_for_one_task_are_reported(self) -> None:
        report = validate(
            log(
                enqueued(),
                event("leased", "running", 1),
                event("completed", "completed", 1),
                event("completed", "completed", 1),
            )
        )
        assert problems(report) == ["completed from state 'completed'", "completed more than once"]

    def test_a_failure_after_completion_is_reported(self) -> None:
        report = validate(
            log(
                enqueued(),
                event("leased", "running", 1),
                event("completed", "completed", 1),
                event("failed", "dead", 1),
            )
        )
        assert problems(report) == ["failed from state 'completed'"]

    def test_a_reap_that_does_not_bump_the_token_is_reported(self) -> None:
        report = validate(
            log(enqueued(), event("leased", "running", 1), event("reaped", "delayed", 1)),
            require_terminal=False,
        )
        assert problems(report) == ["reap did not bump the token 1 (got 1)"]

    def test_a_stale_holder_acting_after_a_reap_is_reported(self) -> None:
        report = validate(
            log(
                enqueued(),
                event("leased", "running", 1),
                event("reaped", "delayed", 2),
                event("completed", "completed", 1),
            )
        )
        assert problems(report) == [
            "completed from state 'delayed'",
            "completed with token 1 while the lease's token is 2",
        ]

    def test_a_task_left_running_is_unfinished_when_the_run_is_over(self) -> None:
        report = validate(log(enqueued(), event("leased", "running", 1)))
        assert (report.violations, report.unfinished) == ([], ["t"])
        assert validate(log(enqueued(), event("leased", "running", 1)), require_terminal=False).ok


def cancelled(source: str, token: int | None = None) -> Event:
    more = {} if token is None else {"token": str(token)}
    return {"type": "cancelled", "state": "cancelled", "from": source, "ts": "2000", **more}


REQUESTED = (enqueued(), event("leased", "running", 1), event("cancel_requested", "running", 1))


class TestCancellation:
    def test_each_way_a_cancel_ends_passes(self) -> None:
        ends = [
            (enqueued(), cancelled("pending")),
            (enqueued("delayed", at=5000), cancelled("delayed")),
            (enqueued(), event("leased", "running", 1), event("failed", "dead", 1),
             cancelled("dead")),
            (*REQUESTED, event("heartbeat", "running", 1), cancelled("running", 1)),
            (*REQUESTED, event("failed", "cancelled", 1)),
            (*REQUESTED, event("released", "cancelled", 1)),
            (*REQUESTED, event("reaped", "cancelled", 2)),
            (*REQUESTED, event("completed", "completed", 1)),
        ]
        for events in ends:
            report = validate(log(*events))
            assert report.ok, (events, report.violations, report.unfinished)

    def test_a_lease_after_a_cancel_is_reported(self) -> None:
        report = validate(log(enqueued(), cancelled("pending"), event("leased", "running", 1)),
                          require_terminal=False)
        assert problems(report) == ["leased from state 'cancelled'"]

    def test_a_completion_after_a_cancel_is_reported(self) -> None:
        ended_while_pending = (enqueued(), event("leased", "running", 1),
                               event("released", "pending", 1), cancelled("pending"))
        for ended in (ended_while_pending, (*REQUESTED, cancelled("running", 1))):
            report = validate(log(*ended, event("completed", "completed", 1)))
            assert problems(report) == ["completed from state 'cancelled'"]

    def test_a_cancel_with_a_stale_token_is_reported(self) -> None:
        report = validate(log(enqueued(), event("leased", "running", 1),
                              event("released", "pending", 1), event("leased", "running", 2),
                              event("cancel_requested", "running", 2), cancelled("running", 1)))
        assert problems(report) == ["cancelled with token 1 while the lease's token is 2"]

    def test_a_retry_of_a_cancel_requested_task_is_reported(self) -> None:
        report = validate(log(*REQUESTED, event("failed", "delayed", 1, at="2500")),
                          require_terminal=False)
        assert problems(report) == ["failed into state 'delayed' after its cancel was requested"]

    def test_a_release_or_reap_back_to_a_list_after_a_cancel_request_is_reported(self) -> None:
        released = validate(log(*REQUESTED, event("released", "pending", 1)),
                            require_terminal=False)
        reaped = validate(log(*REQUESTED, event("reaped", "dead", 2)))
        assert problems(released) == ["released into state 'pending' after its cancel was "
                                      "requested"]
        assert problems(reaped) == ["reaped into state 'dead' after its cancel was requested"]

    def test_a_running_task_ended_cancelled_with_no_cancel_requested_is_reported(self) -> None:
        for end in (cancelled("running", 1), event("failed", "cancelled", 1),
                    event("reaped", "cancelled", 2)):
            report = validate(log(enqueued(), event("leased", "running", 1), end))
            assert problems(report) == [f"{end['type']} into state 'cancelled' with no cancel "
                                        "requested"]

    def test_a_cancel_requested_of_a_task_not_running_or_twice_is_reported(self) -> None:
        pending = validate(log(enqueued(), event("cancel_requested", "running", 0)),
                           require_terminal=False)
        twice = validate(log(*REQUESTED, event("cancel_requested", "running", 1)),
                         require_terminal=False)
        assert problems(pending) == ["cancel_requested from state 'pending'"]
        assert problems(twice) == ["cancel_requested after its cancel was requested"]

    def test_a_cancel_that_misstates_the_state_it_left_is_reported(self) -> None:
        report = validate(log(enqueued(), cancelled("delayed")))
        assert problems(report) == ["cancelled from 'delayed' while the task was 'pending'"]

    def test_every_cancel_path_of_real_broker_calls_is_a_legal_trace(self, queue: Broker) -> None:
        cancel_scenario(queue)
        report = validate(read_log(queue.client, queue.keys.events))
        assert report.ok, (report.violations, report.unfinished)
        assert report.tasks == len(CANCEL_PATHS)


# -- real worker processes ----------------------------------------------------------------

TASKS = 200


@pytest.fixture
def workers(
    redis_server: EmbeddedRedis, queue: Broker, tmp_path: Path
) -> Iterator[WorkerProcesses]:
    ledger = tmp_path / "ledger.db"
    Ledger(ledger).close()
    env = worker_env(redis_server.url, queue.queue, ledger, WORK_SECONDS="0.1",
                     FAIL_RATE="0.3", BACKOFF_MAX_SECONDS="0.2", TASKQ_CONCURRENCY="4")
    processes = WorkerProcesses(tmp_path, env)
    yield processes
    processes.stop_all()


@pytest.mark.processes
def test_the_event_log_of_two_workers_one_killed_mid_run_is_a_legal_trace(
    workers: WorkerProcesses, queue: Broker
) -> None:
    victim, survivor = workers.start(), workers.start()
    ids = [f"t{i}" for i in range(TASKS)]

    def held_by(process: object) -> list[str]:
        records = [queue.task(t) for t in ids]
        return [
            r.task_id
            for r in records
            if r and r.state == "running" and workers.holding(r.worker) is process
        ]

    queue.enqueue_many(
        [NewTask(t, delay=0.3 if i % 5 == 0 else 0, max_retries=i % 3) for i, t in enumerate(ids)]
    )
    wait_until(lambda: len(held_by(victim)) >= 2, 15, "the first worker to hold tasks")
    victim.send_signal(signal.SIGKILL)
    victim.wait()
    stranded = held_by(victim)  # leased to a dead process: only the reaper can free them
    assert stranded
    wait_until(
        lambda: all((r := queue.task(t)) and r.state in ("completed", "dead") for t in ids),
        30, "every task to end",
    )  # fmt: skip
    assert survivor.poll() is None
    report = validate(read_log(queue.client, queue.keys.events))
    assert report.ok, (report.violations[:5], report.unfinished[:5])
    assert (report.tasks, report.unfinished) == (TASKS, [])
    # The run really had each kind of path: reaps of the killed worker's leases,
    # retries, deaths, and delays.
    assert all("reaped" in event_types(queue.client, queue.keys, t) for t in stranded)
    kinds = {e for t in ids for e in event_types(queue.client, queue.keys, t)}
    assert {"promoted", "failed", "reaped", "completed"} <= kinds
    assert queue.dead(), "FAIL_RATE 0.3 with max_retries 0 leaves some tasks dead"
