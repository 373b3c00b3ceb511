"""taskq.tools.tracecheck: hand-made illegal event logs are each reported, the log of every
cancel path on real broker calls passes, and the whole log of real worker processes
(failures, delays, a SIGKILL mid-run) passes. P1: the log of real broker calls with
priorities passes and leases out of order are reported, while what the log cannot tell
(a trimmed start, a gap, a task a lease may have dropped) is counted, never reported."""

from __future__ import annotations

import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from helpers import CANCEL_PATHS, cancel_scenario, wait_past
from taskq.broker import Broker, NewTask
from taskq.tools.embedded import EmbeddedRedis
from taskq.tools.ledger import Ledger
from taskq.tools.readyorder import ACROSS_GAP, NOT_IN_LOG, check_order
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

    def test_a_parked_task_waits_for_its_unpark_and_only_a_parked_one_is_unparked(
        self,
    ) -> None:
        parked = (enqueued(), event("parked", "pending"))
        legal = log(*parked, event("unparked", "pending"), event("leased", "running", 1),
                    event("completed", "completed", 1))
        assert validate(legal).ok
        jumped = log(*parked, event("leased", "running", 1))
        assert problems(validate(jumped, require_terminal=False)) == [
            "leased while parked for a concurrency slot"]
        never = log(enqueued(), event("unparked", "pending"))
        assert problems(validate(never, require_terminal=False)) == [
            "unparked but not parked"]
        cancelled_there = log(*parked, event("cancelled", "cancelled", **{"from": "pending"}))
        assert validate(cancelled_there).ok

    def test_a_hole_or_a_repeat_in_the_event_numbers_is_reported(self) -> None:
        """A lost heartbeat leaves every task's path whole: only its number shows it."""
        whole = log(enqueued(), event("leased", "running", 1), event("heartbeat", "running", 1),
                    event("completed", "completed", 1))
        assert validate(whole).ok
        holed = whole[:2] + whole[3:]
        assert problems(validate(holed)) == ["E1: event 4 follows event 2: a hole"]
        repeated = [*whole[:3], (3, whole[2][1]), whole[3]]
        assert "E1: event 3 follows event 3: out of order" in problems(validate(repeated))
        trimmed = validate(whole[1:], require_terminal=False).violations
        assert not any("E1" in message for _, _, message in trimmed)  # its start, no hole

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
        assert problems(report) == ["reap token 1 not above the previous 1"]

    def test_a_reap_may_raise_the_token_to_the_clocks_floor(self) -> None:
        minted = 1_765_000_000_000_000  # a server time in ms, times 1000
        report = validate(
            log(enqueued(), event("leased", "running", 1),
                event("reaped", "delayed", minted), event("promoted", "pending"),
                event("leased", "running", minted + 1)),
            require_terminal=False,
        )
        assert problems(report) == []

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

    def test_an_entry_taskq_did_not_number_is_reported_where_it_stands(
        self, queue: Broker
    ) -> None:
        queue.enqueue("t1")
        (seq, _), = read_log(queue.client, queue.keys.events)
        queue.client.xadd(queue.keys.events, {"type": "enqueued", "task": "t2",
                                              "state": "pending"}, id=f"{seq}-1")
        queue.enqueue("t3")  # numbered past the hand-made entry
        report = validate(read_log(queue.client, queue.keys.events), require_terminal=False)
        assert "E1: event -1 follows event 1: out of order" in problems(report)


# -- P1: the order of leases ---------------------------------------------------------------


def tasks_log(*events: tuple[str, Event], first: int = 1) -> list[tuple[int, Event]]:
    """Events of several tasks as (task, event), numbered from `first`."""
    return [(seq, {"task": task, **e}) for seq, (task, e) in enumerate(events, start=first)]


def enqueued_at(priority: int | None = None, state: str = "pending") -> Event:
    """An `enqueued` event; like enqueue.lua's, it names the priority unless the default."""
    more = {} if priority is None else {"priority": str(priority)}
    return {**enqueued(state, at=1000 if state == "pending" else 1500), **more}


def leased(token: int = 1) -> Event:
    return event("leased", "running", token)


def done(token: int = 1) -> Event:
    return event("completed", "completed", token)


def run(task: str, token: int = 1) -> tuple[tuple[str, Event], tuple[str, Event]]:
    """`task` leased, then completed."""
    return (task, leased(token)), (task, done(token))


def out_of_order(priority: int, first: str, first_priority: int) -> str:
    return (f"P1: leased at priority {priority} while {first!r} (priority {first_priority}) "
            "was ahead of it in ready")


def priority_scenario(broker: Broker) -> None:
    """Tasks of four priorities into ready every way there is (enqueue, a delay's
    promotion, a retry's backoff, a release, a revival), one cancelled out of its level,
    leased one at a time and in batches, each batch across levels."""
    broker.enqueue_many([NewTask("low", priority=0), NewTask("plain-1"),
                         NewTask("urgent", priority=9), NewTask("plain-2"),
                         NewTask("high", priority=7), NewTask("later", delay=0.01, priority=9),
                         NewTask("dropped", priority=7)])
    assert broker.cancel("dropped").outcome == "cancelled"
    wait_past(0.01)
    assert broker.promote() == ["later"]

    def lease(n: int) -> list[tuple[str, int]]:
        return [(t.task_id, t.token) for t in broker.lease_many("w", 30, n).tasks]

    (urgent, u1), (later, l1) = lease(2)
    assert (urgent, later) == ("urgent", "later")
    broker.enqueue("urgent-2", priority=9)
    assert broker.release(later, l1)  # ahead of urgent-2
    assert broker.fail(urgent, u1, "boom", backoff_base=0.001, backoff_max=0.001).status \
        == "retry"
    wait_past(0.01)
    assert broker.promote() == ["urgent"]
    batch = lease(4)
    assert [t for t, _ in batch] == ["later", "urgent-2", "urgent", "high"]
    for task_id, token in batch[:3]:
        assert broker.ack(task_id, token)
    assert broker.fail("high", batch[3][1], "boom", dead=True).status == "dead"
    broker.enqueue("plain-3")
    assert broker.retry_dead("high")
    rest = lease(10)
    assert [t for t, _ in rest] == ["high", "plain-1", "plain-2", "plain-3", "low"]
    for task_id, token in rest:
        assert broker.ack(task_id, token)


class TestPriorityOrder:
    def test_the_log_of_real_broker_calls_with_priorities_passes(self, queue: Broker) -> None:
        priority_scenario(queue)
        report = validate(read_log(queue.client, queue.keys.events))
        assert report.ok, (report.violations, report.unfinished)
        p = report.priority
        assert (p.leases, p.checked, p.unchecked, p.passed_over) == (11, 11, {}, [])
        assert p.by_priority == {9: 5, 7: 2, 5: 3, 0: 1}

    def test_the_same_log_with_two_leases_of_one_batch_swapped_fails(
        self, queue: Broker
    ) -> None:
        priority_scenario(queue)
        log = read_log(queue.client, queue.keys.events)
        first = next(n for n, (_, f) in enumerate(log) if f["type"] == "leased")
        assert [log[n][1]["task"] for n in (first, first + 1)] == ["urgent", "later"]
        (seq1, urgent), (seq2, later) = log[first], log[first + 1]
        log[first], log[first + 1] = (seq1, later), (seq2, urgent)
        assert problems(validate(log)) == [out_of_order(9, "urgent", 9)]

    def test_a_legal_order_through_every_way_into_ready_passes(self) -> None:
        log = tasks_log(
            ("a", enqueued_at()), ("b", enqueued_at(9)), ("c", enqueued_at(9)),
            ("d", enqueued_at(2, state="delayed")),
            *run("b"),
            ("c", leased()), ("c", event("released", "pending", 1)),  # back to the front
            ("e", enqueued_at(9)),
            *run("c", 2), *run("e"), *run("a"),
            ("d", event("promoted", "pending", ts=1500)), *run("d"),
        )
        report = validate(log)
        assert report.ok, report.violations
        assert report.priority.by_priority == {9: 4, 5: 1, 2: 1}

    def test_a_lease_of_a_lower_priority_first_is_reported(self) -> None:
        log = tasks_log(("a", enqueued_at()), ("b", enqueued_at(9)), *run("a"), *run("b"))
        assert problems(validate(log)) == [out_of_order(5, "b", 9)]

    def test_a_lease_out_of_fifo_order_within_a_priority_is_reported(self) -> None:
        log = tasks_log(("a", enqueued_at(3)), ("b", enqueued_at(3)), *run("b"), *run("a"))
        assert problems(validate(log)) == [out_of_order(3, "a", 3)]

    def test_a_release_that_did_not_go_to_the_front_is_reported(self) -> None:
        released = (("a", enqueued_at()), ("b", enqueued_at()), ("a", leased()),
                    ("a", event("released", "pending", 1)))
        assert validate(tasks_log(*released, *run("a", 2), *run("b"))).ok
        behind = validate(tasks_log(*released, *run("b"), *run("a", 2)))
        assert problems(behind) == [out_of_order(5, "a", 5)]

    def test_a_promoted_or_revived_task_that_jumped_the_queue_is_reported(self) -> None:
        promoted = (("a", enqueued_at(state="delayed")), ("b", enqueued_at()),
                    ("a", event("promoted", "pending", ts=1500)))
        revived = (("a", enqueued_at()), ("a", leased()), ("a", event("failed", "dead", 1)),
                   ("b", enqueued_at()), ("a", event("revived", "pending")))
        for joined in (promoted, revived):
            token = 2 if joined is revived else 1
            assert validate(tasks_log(*joined, *run("b"), *run("a", token))).ok
            jumped = validate(tasks_log(*joined, *run("a", token), *run("b")))
            assert problems(jumped) == [out_of_order(5, "b", 5)]

    def test_a_triggered_workflow_step_joins_the_back_and_its_lease_is_checked(
        self,
    ) -> None:
        flow = {"flow": "f"}
        triggered = (("f.1.1", {**enqueued_at(), **flow}),
                     ("f.2.1", {**enqueued_at(state="waiting"), **flow}),
                     *run("f.1.1"), ("b", enqueued_at()),
                     ("f.2.1", event("triggered", "pending", **flow)))
        report = validate(tasks_log(*triggered, *run("b"), *run("f.2.1")))
        assert report.ok, report.violations
        assert (report.priority.leases, report.priority.checked) == (3, 3)
        jumped = validate(tasks_log(*triggered, *run("f.2.1"), *run("b")))
        assert problems(jumped) == [out_of_order(5, "b", 5)]

    def test_a_task_cancelled_out_of_ready_is_no_longer_ahead(self) -> None:
        log = tasks_log(("a", enqueued_at(9)), ("b", enqueued_at()),
                        ("a", {"type": "cancelled", "state": "cancelled", "from": "pending",
                               "ts": "2000"}),
                        *run("b"))
        assert validate(log).ok

    def test_a_priority_outside_0_to_9_is_reported(self) -> None:
        log = tasks_log(("a", {**enqueued_at(), "priority": "10"}), *run("a"))
        assert problems(validate(log)) == ["P1: enqueued with priority '10', not 0 to 9"]


class TestWhatTheLogCannotTell:
    def test_leases_of_tasks_enqueued_before_a_trimmed_start_are_counted_not_checked(
        self,
    ) -> None:
        # u and v were enqueued before the log's first row: their priorities are unknown.
        start = (("u", event("released", "pending", 1)), ("a", enqueued_at(1)),
                 ("u", leased(2)), ("v", leased(4)))
        report = check_order(tasks_log(*start, ("a", leased()), first=40))
        assert (report.violations, report.checked, report.unchecked) == (
            [], 1, {NOT_IN_LOG: 2})
        # The tasks whose whole history the log holds are still checked exactly.
        ahead = check_order(tasks_log(*start, ("b", enqueued_at(9)), ("a", leased()),
                                      ("b", leased()), first=40))
        assert [m for _, _, m in ahead.violations] == [out_of_order(1, "b", 9)]

    def test_a_gap_in_the_log_makes_what_came_before_unknown(self) -> None:
        before = tasks_log(("a", enqueued_at(9)), ("b", enqueued_at(1)))
        after = (("b", leased()), ("a", leased()))
        whole = check_order([*before, *tasks_log(*after, first=3)])
        assert [m for _, _, m in whole.violations] == [out_of_order(1, "a", 9)]
        gapped = check_order([*before, *tasks_log(*after, first=10)])
        assert (gapped.violations, gapped.checked, gapped.unchecked) == ([], 0, {ACROSS_GAP: 2})

    def test_a_task_passed_over_and_never_seen_again_may_have_been_dropped(self) -> None:
        # lease.lua drops an id whose record is gone, with no event: the log cannot tell
        # that from a lease out of order, unless the task shows up again.
        dropped = tasks_log(("a", enqueued_at(9)), ("b", enqueued_at()), *run("b"))
        report = validate(dropped)
        assert (report.priority.violations, report.priority.passed_over) == ([], ["a"])
        assert report.unfinished == ["a"]  # a run that must end still fails
        seen_again = tasks_log(("a", enqueued_at(9)), ("b", enqueued_at()), *run("b"),
                               *run("a"))
        assert problems(validate(seen_again)) == [out_of_order(5, "a", 9)]


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
