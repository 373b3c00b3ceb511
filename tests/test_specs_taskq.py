"""taskq's own models, TaskQueue (the lease protocol) and TaskFeed (the change feed):
their figures, what they reach, and the shortest trace that catches each mutant."""

from __future__ import annotations

import functools
import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from specs.TaskFeed import task_feed as tf
from specs.TaskQueue import task_queue as tq
from specs.tlacheck import EndProperty, Result, StepProperty

from spec_runs import result, watch


def actions(found: Result[Any]) -> list[str | None]:
    assert found.violation is not None
    return [step.action for step in found.violation.trace][1:]


def figures(found: Result[Any]) -> tuple[int, int, int, int]:
    return found.distinct, found.generated, found.depth, found.queued


@functools.cache
def kind(label: str) -> str:
    """An action label without its arguments: `Fail(w=1)/dead` -> `Fail/dead`. Called on
    each of millions of steps, with a few hundred labels among them."""
    return re.sub(r"\(.*?\)", "", label)


@dataclass
class Exploration:
    """A whole search of a model, with every step's kind and every state where runs stop."""

    steps: Counter[str] = field(default_factory=Counter)
    gaps: Counter[str] = field(default_factory=Counter)
    ends: list[Any] = field(default_factory=list)

    def record_step(self, before: Any, label: str, _: Any) -> bool:
        self.steps[kind(label)] += 1
        if label == "Read/gap":
            self.gaps[gap_reason(before)] += 1
        return True

    def record_end(self, state: Any) -> bool:
        self.ends.append(state)
        return True


def watched(*checks: tuple[str, str]) -> dict[tuple[str, str], Exploration]:
    """An Exploration of each catalogued (spec, config), kept by its one search."""
    kept = {}
    for spec, config in checks:
        seen = kept[(spec, config)] = Exploration()
        watch(spec, config, StepProperty("Steps", seen.record_step),
              EndProperty("Ends", seen.record_end))
    return kept


EXPLORATIONS = watched(
    ("TaskQueue.tla", "TaskQueue.cfg"), ("TaskQueue.tla", "TaskQueue_FinalFails.cfg"),
    ("TaskQueue.tla", "TaskQueue_Graceful.cfg"), ("TaskQueue.tla", "TaskQueue_Cancel.cfg"),
    ("TaskFeed.tla", "TaskFeed.cfg"),
)


def explore(spec: str, config: str) -> Exploration:
    """What the catalogued check's one search saw, a check that holds."""
    found = result(spec, config)
    assert found.ok, found.violation
    return EXPLORATIONS[(spec, config)]


def gap_reason(s: tf.State) -> str:
    """Which of read_events.lua's checks the read failed, in the script's order."""
    if s.cEpoch not in (0, tf.log_epoch(s)):
        return "epoch"
    return "ahead" if s.cursor > s.head else "trimmed"


class TestTaskQueueAsBuilt:
    def test_t1_to_t6_and_r1_hold_in_all_45271_states_to_depth_30(self) -> None:
        found = result("TaskQueue.tla", "TaskQueue.cfg")
        assert found.ok
        assert figures(found) == (45271, 346337, 30, 0)

    def test_every_branch_of_every_script_is_reached(self) -> None:
        steps = explore("TaskQueue.tla", "TaskQueue.cfg").steps
        assert set(steps) == {
            "Enqueue/created", "Enqueue/duplicate", "Lease", "Heartbeat/extended",
            "Heartbeat/stale", "Confirm/renewed", "Confirm/stale", "Effect/applied",
            "Effect/duplicate", "Ack/acked", "Ack/stale", "Fail/delayed", "Fail/dead",
            "Fail/stale", "Shutdown/acked", "Shutdown/released", "Shutdown/stale", "Die",
            "Expire", "Reap/delayed", "Reap/dead", "Tick", "Promote", "RetryDead",
        }  # fmt: skip

    def test_every_run_that_stops_has_its_task_completed_or_dead(self) -> None:
        ends = explore("TaskQueue.tla", "TaskQueue.cfg").ends
        outcomes = {s.state[1] for s in ends}
        assert outcomes == {"completed", "dead"}
        assert all(not s.ready and not s.leased and not s.delayed for s in ends)
        assert all(h.task == 0 for s in ends for h in s.held.values())

    def test_a_completed_task_holds_its_acking_runs_value_or_no_result_after_shutdown(
        self,
    ) -> None:
        ends = explore("TaskQueue.tla", "TaskQueue.cfg").ends
        done = [s for s in ends if s.state[1] == "completed"]
        assert {s.result[1] == s.token[1] for s in done} == {True, False}
        assert all(s.result[1] in (s.token[1], tq.NO_RESULT) for s in done)
        assert all(s.result[1] == tq.NO_RESULT for s in ends if s.state[1] == "dead")

    def test_final_failures_keep_every_invariant_in_all_49189_states(self) -> None:
        found = result("TaskQueue.tla", "TaskQueue_FinalFails.cfg")
        assert found.ok
        assert figures(found) == (49189, 516091, 30, 0)

    def test_a_final_failure_reaches_the_dlq_with_retries_left_and_a_stale_one_nothing(
        self,
    ) -> None:
        seen = explore("TaskQueue.tla", "TaskQueue_FinalFails.cfg")
        assert {"Fail/final", "Fail/stale", "Fail/delayed", "Fail/dead"} <= set(seen.steps)
        assert any(s.state[1] == "dead" and s.retries[1] == 0 for s in seen.ends)
        assert "Fail/final" not in explore("TaskQueue.tla", "TaskQueue.cfg").steps

    def test_a_paused_holder_can_still_run_its_effect_which_dedupe_absorbs(self) -> None:
        # At-least-once execution is expected; only the effect is once.
        steps = explore("TaskQueue.tla", "TaskQueue.cfg").steps
        assert steps["Effect/duplicate"] > 0 and steps["Ack/stale"] > 0

    def test_a_run_taken_over_before_it_confirms_never_applies_its_effect(self) -> None:
        found = result("TaskQueue.tla", "TaskQueue_EffectWhileHeld.cfg")
        assert found.violation is not None
        assert (found.violation.kind, found.violation.name) == ("property", "EffectWhileHeld")
        # Only a pause after the confirmation gets an effect past a lost lease.
        assert actions(found) == [
            "Enqueue(k=0,d=FALSE)/created", "Lease(w=1,t=1)", "Confirm(w=1)/renewed",
            "Expire(t=1)", "Reap(t=1)/delayed", "Effect(w=1)/applied",
        ]  # fmt: skip
        assert figures(found) == (109, 317, 7, 46)

    def test_a_graceful_shutdown_never_causes_a_second_effect_even_unguarded(self) -> None:
        found = result("TaskQueue.tla", "TaskQueue_Graceful.cfg")
        assert found.ok
        assert figures(found) == (247, 709, 20, 0)
        assert explore("TaskQueue.tla", "TaskQueue_Graceful.cfg").steps["Shutdown/acked"] > 0

    def test_a_worker_killed_after_its_effect_has_it_applied_again_unguarded(self) -> None:
        found = result("TaskQueue.tla", "TaskQueue_GracefulKill.cfg")
        assert found.violation is not None
        assert (found.violation.name, found.violation.depth) == ("T4_EffectOnce", 13)
        assert actions(found)[3:7] == [
            "Effect(w=1)/applied", "Die(w=1)", "Expire(t=1)", "Reap(t=1)/delayed",
        ]  # fmt: skip


class TestTaskQueueCancellation:
    def test_cancellation_keeps_every_invariant_in_all_125770_states(self) -> None:
        found = result("TaskQueue.tla", "TaskQueue_Cancel.cfg")
        assert found.ok
        assert figures(found) == (125770, 977101, 32, 0)

    def test_every_way_a_task_ends_cancelled_is_reached(self) -> None:
        steps = explore("TaskQueue.tla", "TaskQueue_Cancel.cfg").steps
        assert {
            "Cancel/requested", "Cancel/cancelled", "Heartbeat/cancel", "Confirm/cancel",
            "AckCancelled/cancelled", "AckCancelled/stale", "Fail/cancelled",
            "Shutdown/cancelled", "Reap/cancelled",
        } <= set(steps)  # fmt: skip

    def test_without_the_switch_no_task_is_ever_cancelled(self) -> None:
        steps = explore("TaskQueue.tla", "TaskQueue.cfg").steps
        assert not [label for label in steps if "ancel" in label]

    def test_every_run_that_stops_ends_completed_or_cancelled(self) -> None:
        # A dead task can still be cancelled out of the DLQ, so no run stops there.
        ends = explore("TaskQueue.tla", "TaskQueue_Cancel.cfg").ends
        assert {s.state[1] for s in ends} == {"completed", "cancelled"}
        assert all(not s.ready and not s.leased and not s.delayed and not s.dlq
                   for s in ends if s.state[1] == "cancelled")  # fmt: skip
        assert all(s.result[1] == tq.NO_RESULT for s in ends if s.state[1] == "cancelled")

    def test_a_run_that_finishes_before_it_learns_of_the_cancel_completes_its_task(
        self,
    ) -> None:
        ends = explore("TaskQueue.tla", "TaskQueue_Cancel.cfg").ends
        raced = {s.state[1] for s in ends if s.cancelReq[1]}
        assert raced == {"completed", "cancelled"}

    def test_an_effect_let_in_before_the_cancel_was_seen_still_writes(self) -> None:
        found = result("TaskQueue.tla", "TaskQueue_CancelWindow.cfg")
        assert found.violation is not None
        assert (found.violation.kind, found.violation.name) == (
            "property", "NoChargeAfterCancelSeen",
        )
        assert actions(found) == [
            "Enqueue(k=0,d=FALSE)/created", "Lease(w=1,t=1)", "Confirm(w=1)/renewed",
            "Cancel(t=1)/requested", "Heartbeat(w=1)/cancel", "Effect(w=1)/applied",
        ]  # fmt: skip

    def test_a_worker_that_ignores_a_seen_cancel_lets_its_effect_in(self) -> None:
        found = result("TaskQueueCancelNoFence.tla", "TaskQueueCancelNoFence.cfg")
        assert found.violation is not None
        assert (found.violation.name, found.violation.depth) == ("NoEffectAfterCancelSeen", 6)
        assert actions(found) == [
            "Enqueue(k=0,d=FALSE)/created", "Lease(w=1,t=1)", "Cancel(t=1)/requested",
            "Heartbeat(w=1)/cancel", "ConfirmNoCancelFence(w=1)/renewed",
        ]  # fmt: skip

    def test_a_reap_that_ignores_the_cancel_retries_the_task(self) -> None:
        found = result("TaskQueueCancelRetried.tla", "TaskQueueCancelRetried.cfg")
        assert found.violation is not None
        assert (found.violation.name, found.violation.depth) == ("CancelSticks", 6)
        assert actions(found)[-2:] == ["Cancel(t=1)/requested", "ReapIgnoringCancel(t=1)/delayed"]
        last = found.violation.trace[-1].state
        assert last.cancelReq[1] and last.state[1] == "delayed"

    def test_a_reap_that_ignores_the_cancel_gets_the_task_leased_again(self) -> None:
        found = result("TaskQueueCancelRetried.tla", "TaskQueueCancelRetried_Leased.cfg")
        assert found.violation is not None
        assert (found.violation.name, found.violation.depth) == ("CancelledNeverLeased", 9)
        assert actions(found)[-4:] == [
            "ReapIgnoringCancel(t=1)/delayed", "Tick(t=1)", "Promote(t=1)", "Lease(w=2,t=1)",
        ]  # fmt: skip


def holding_one(held: tq.Holding) -> tuple[tq.Constants, tq.State]:
    """One worker with time limits, holding task 1 (token 1) as `held` says."""
    c = tq.Constants(
        workers=1, max_sends=1, n_keys=0, max_retries=1, max_restarts=0,
        max_revivals=0, guard="dedupe", pauses=False, kills=False, late_fails=False,
        final_fails=False, cancels=False, time_limits=True, rate_limits=False,
    )  # fmt: skip
    s = tq.initial(c)
    return c, s._replace(leased=frozenset({1}), token=s.token.except_(1, 1),
                         state=s.state.except_(1, "running"), due=s.due.except_(1, True),
                         held=s.held.except_(1, held))


class TestTaskQueueTimeLimits:
    def test_a_run_timed_out_inside_its_effect_keeps_every_promise_in_all_5043_states(
        self,
    ) -> None:
        found = result("TaskQueue.tla", "TaskQueue_TimeLimitHeld.cfg")
        assert found.ok
        assert figures(found) == (5043, 30667, 22, 0)

    def test_a_run_timed_out_inside_its_effect_keeps_its_lease_until_the_block_ends(
        self,
    ) -> None:
        # Leased, confirmed, past its limit, its effect not yet written.
        inside = tq.Holding(1, 1, False, False, True, False, True, False)
        c, s = holding_one(inside)
        assert [label for label, _ in tq.heartbeat(c, s)] == ["Heartbeat(w=1)/extended"]
        assert list(tq.expire(c, s)) == []
        # Out of its block, its lease may run out, or be renewed (a limited task's sync
        # run is kept to its end, its slot with it).
        written = s._replace(held=s.held.except_(1, inside._replace(ran=True)))
        assert [label for label, _ in tq.heartbeat(c, written)] == ["Heartbeat(w=1)/extended"]
        assert [label for label, _ in tq.expire(c, written)] == ["Expire(t=1)"]

    def test_the_older_heartbeat_renews_no_timed_out_run_even_in_its_block(self) -> None:
        inside = tq.Holding(1, 1, False, False, True, False, True, False)
        c, s = holding_one(inside)
        unrenewed = tq.heartbeat_while("Heartbeat", tq.holds, False)
        assert list(unrenewed(c, s)) == []

    def test_a_failure_reported_inside_the_block_leaves_a_current_token_unleased(
        self,
    ) -> None:
        found = result("TaskQueueTimeOutMidEffect.tla", "TaskQueueTimeOutMidEffect.cfg")
        assert found.violation is not None
        assert (found.violation.name, found.violation.depth) == ("T3_StaleAtOnce", 6)
        assert actions(found) == [
            "Enqueue(k=0,d=FALSE)/created", "Lease(w=1,t=1)", "Confirm(w=1)/renewed",
            "TimeOut(w=1)", "FailMidEffect(w=1)/delayed",
        ]  # fmt: skip

    def test_a_failure_reported_inside_the_block_lets_its_effect_land_unheld(self) -> None:
        found = result("TaskQueueTimeOutMidEffect.tla",
                       "TaskQueueTimeOutMidEffect_NoStaleAtOnce.cfg")
        assert found.violation is not None
        assert (found.violation.kind, found.violation.name, found.violation.depth) == (
            "property", "EffectWhileHeld", 7,
        )
        assert actions(found)[-2:] == ["FailMidEffect(w=1)/delayed", "Effect(w=1)/applied"]

    def test_a_block_not_renewed_past_the_limit_outlives_its_lease(self) -> None:
        found = result("TaskQueueTimeOutUnrenewed.tla", "TaskQueueTimeOutUnrenewed.cfg")
        assert found.violation is not None
        assert (found.violation.kind, found.violation.name, found.violation.depth) == (
            "property", "EffectWhileHeld", 8,
        )
        assert actions(found) == [
            "Enqueue(k=0,d=FALSE)/created", "Lease(w=1,t=1)", "Confirm(w=1)/renewed",
            "TimeOut(w=1)", "ExpireUnrenewed(t=1)", "Reap(t=1)/delayed", "Effect(w=1)/applied",
        ]  # fmt: skip

    def test_a_time_out_that_ignores_the_claim_fails_a_run_that_returned_in_time(
        self,
    ) -> None:
        found = result("TaskQueueTimeOutReturned.tla", "TaskQueueTimeOutReturned.cfg")
        assert found.violation is not None
        assert (found.violation.kind, found.violation.name, found.violation.depth) == (
            "property", "ReturnedNeverTimesOut", 7,
        )
        assert actions(found) == [
            "Enqueue(k=0,d=FALSE)/created", "Lease(w=1,t=1)", "Confirm(w=1)/renewed",
            "Effect(w=1)/applied", "Return(w=1)", "TimeOutUnclaimed(w=1)",
        ]  # fmt: skip

    def test_a_run_whose_handler_returned_is_not_timed_out_but_acked(self) -> None:
        returned = tq.Holding(1, 1, True, False, True, False, False, True)
        c, s = holding_one(returned)
        assert list(tq.time_out(c, s)) == []
        assert [label for label, _ in tq.ack(c, s)] == ["Ack(w=1)/acked"]
        unreturned = s._replace(held=s.held.except_(1, returned._replace(returned=False)))
        assert list(tq.ack(c, unreturned)) == []


class TestTaskQueueMutants:
    def test_ack_without_fencing_lets_a_reaped_holder_complete_the_new_lease(self) -> None:
        found = result("TaskQueueAckNoFence.tla", "TaskQueueAckNoFence.cfg")
        assert found.violation is not None
        assert (found.violation.name, found.violation.depth) == ("T3_StaleAtOnce", 11)
        assert actions(found) == [
            "Enqueue(k=0,d=FALSE)/created", "Lease(w=1,t=1)", "Confirm(w=1)/renewed",
            "Effect(w=1)/applied", "Expire(t=1)", "Reap(t=1)/delayed", "Tick(t=1)",
            "Promote(t=1)", "Lease(w=2,t=1)", "AckNoFence(w=1)/acked",
        ]  # fmt: skip
        last = found.violation.trace[-1].state
        assert last.state[1] == "completed" and last.held[2].token == last.token[1] == 3

    def test_ack_without_fencing_breaks_the_stepwise_t3_in_the_same_trace(self) -> None:
        found = result("TaskQueueAckNoFence.tla", "TaskQueueAckNoFence_NoStaleAtOnce.cfg")
        first = result("TaskQueueAckNoFence.tla", "TaskQueueAckNoFence.cfg")
        assert found.violation is not None
        assert found.violation.kind == "property"
        assert found.violation.name == "T3_StaleChangesNothing"
        assert actions(found) == actions(first)

    def test_a_result_written_outside_the_fence_shows_a_reaped_holders_value(self) -> None:
        found = result("TaskQueueResultNoFence.tla", "TaskQueueResultNoFence.cfg")
        assert found.violation is not None
        assert (found.violation.name, found.violation.depth) == ("R1_CurrentToken", 8)
        assert actions(found) == [
            "Enqueue(k=0,d=FALSE)/created", "Lease(w=1,t=1)", "Confirm(w=1)/renewed",
            "Effect(w=1)/applied", "Expire(t=1)", "Reap(t=1)/delayed",
            "AckResultNoFence(w=1)/stale",
        ]  # fmt: skip
        last = found.violation.trace[-1].state
        assert (last.result[1], last.token[1], last.state[1]) == (1, 2, "delayed")

    def test_reap_without_bump_leaves_the_lost_holder_a_current_token(self) -> None:
        found = result("TaskQueueReapNoBump.tla", "TaskQueueReapNoBump.cfg")
        assert found.violation is not None
        assert (found.violation.name, found.violation.depth) == ("T3_StaleAtOnce", 5)
        assert actions(found) == [
            "Enqueue(k=0,d=FALSE)/created", "Lease(w=1,t=1)", "Expire(t=1)",
            "ReapNoBump(t=1)/delayed",
        ]  # fmt: skip
        last = found.violation.trace[-1].state
        assert last.held[1].token == last.token[1] == 1 and 1 in last.delayed

    def test_reap_without_bump_changes_no_answer_of_the_scripts_as_built(self) -> None:
        # Every holder script checks `leased` first: the bump is a second fence.
        assert result("TaskQueueReapNoBump.tla", "TaskQueueReapNoBump_NoStaleAtOnce.cfg").ok

    def test_token_only_checks_have_the_same_state_graph_as_taskq(self) -> None:
        by_token = result("TaskQueueByToken.tla", "TaskQueueByToken.cfg")
        assert by_token.ok
        assert figures(by_token) == figures(result("TaskQueue.tla", "TaskQueue.cfg"))

    def test_token_only_checks_without_the_bump_let_a_reaped_holder_move_its_task(
        self,
    ) -> None:
        found = result("TaskQueueByToken.tla", "TaskQueueByToken_NoBump.cfg")
        assert found.violation is not None
        assert (found.violation.name, found.violation.depth) == ("T1_OnePlace", 6)
        assert actions(found)[-2:] == ["ReapNoBump(t=1)/delayed", "FailByToken(w=1)/dead"]
        last = found.violation.trace[-1].state
        assert 1 in last.delayed and 1 in last.dlq

    def test_no_ledger_guard_charges_a_task_that_failed_after_its_charge_twice(self) -> None:
        found = result("TaskQueue.tla", "TaskQueue_GuardNone.cfg")
        assert found.violation is not None
        assert (found.violation.name, found.violation.depth) == ("T4_EffectOnce", 11)
        assert actions(found) == [
            "Enqueue(k=0,d=FALSE)/created", "Lease(w=1,t=1)", "Confirm(w=1)/renewed",
            "Effect(w=1)/applied", "Fail(w=1)/delayed", "Tick(t=1)", "Promote(t=1)",
            "Lease(w=1,t=1)", "Confirm(w=1)/renewed", "Effect(w=1)/applied",
        ]  # fmt: skip
        assert found.violation.trace[-1].state.charges[1] == 2

    def test_the_fence_guard_lets_the_older_token_that_writes_first_through(self) -> None:
        found = result("TaskQueue.tla", "TaskQueue_GuardFence.cfg")
        assert found.violation is not None and found.violation.name == "T4_EffectOnce"
        assert actions(found) == actions(result("TaskQueue.tla", "TaskQueue_GuardNone.cfg"))
        assert found.violation.trace[-1].state.fenceTok[1] == 2

    def test_a_shutdown_that_always_releases_charges_an_unguarded_task_twice(self) -> None:
        found = result("TaskQueueShutdownRelease.tla", "TaskQueueShutdownRelease.cfg")
        assert found.violation is not None
        assert (found.violation.name, found.violation.depth) == ("T4_EffectOnce", 9)
        assert actions(found) == [
            "Enqueue(k=0,d=FALSE)/created", "Lease(w=1,t=1)", "Confirm(w=1)/renewed",
            "Effect(w=1)/applied", "ShutdownReleasing(w=1)/released", "Lease(w=1,t=1)",
            "Confirm(w=1)/renewed", "Effect(w=1)/applied",
        ]  # fmt: skip

    def test_with_no_window_every_effect_is_applied_while_its_run_holds_the_lease(
        self,
    ) -> None:
        found = result("TaskQueueConfirmAtomic.tla", "TaskQueueConfirmAtomic.cfg")
        assert found.ok
        assert figures(found) == (20923, 146805, 28, 0)

    def test_with_no_window_a_pause_after_the_effect_still_reruns_it(self) -> None:
        found = result("TaskQueueConfirmAtomic.tla", "TaskQueueConfirmAtomic_GuardNone.cfg")
        assert found.violation is not None
        assert (found.violation.name, found.violation.depth) == ("T4_EffectOnce", 10)
        assert actions(found) == [
            "Enqueue(k=0,d=FALSE)/created", "Lease(w=1,t=1)", "ConfirmAndApply(w=1)/applied",
            "Expire(t=1)", "Reap(t=1)/delayed", "Tick(t=1)", "Promote(t=1)",
            "Lease(w=2,t=1)", "ConfirmAndApply(w=2)/applied",
        ]  # fmt: skip


class TestTaskFeedAsBuilt:
    def test_f1_to_f5_hold_in_all_53527_states_to_depth_30(self) -> None:
        found = result("TaskFeed.tla", "TaskFeed.cfg")
        assert found.ok
        assert figures(found) == (53527, 151361, 30, 0)

    def test_resets_trims_drops_and_cut_off_reads_are_all_reached(self) -> None:
        seen = explore("TaskFeed.tla", "TaskFeed.cfg")
        assert set(seen.steps) == {
            "Append", "Trim", "Reset", "Connect", "Drop", "Read/gap", "Read/gap-lost",
            "Read/all", "Read/dropped",
        }  # fmt: skip
        assert set(seen.gaps) == {"epoch", "trimmed"}  # 'ahead' needs a rollback

    def test_a_resume_longer_than_a_batch_takes_several_atomic_reads(self) -> None:
        ends = explore("TaskFeed.tla", "TaskFeed.cfg").ends
        assert ends and all(tf.at_head(s) for s in ends)
        assert any(len(s.got) > 2 * 2 for s in ends)  # more rows than two batches of 2

    def test_the_split_attach_mutant_is_not_caught_up_when_it_attaches(self) -> None:
        found = result("TaskFeedSplitAttach.tla", "TaskFeedSplitAttach.cfg")
        assert found.violation is not None
        assert (found.violation.name, found.violation.depth) == ("CaughtUpAfterResume", 5)
        assert actions(found) == ["SplitConnect", "Replay/empty", "SplitAppend/closed", "Attach"]

    def test_the_split_attach_mutant_then_loses_row_one_silently(self) -> None:
        found = result("TaskFeedSplitAttach.tla", "TaskFeedSplitAttach_NoCaughtUpCheck.cfg")
        assert found.violation is not None
        assert (found.violation.name, found.violation.depth) == ("NoSilentGap", 6)
        last = found.violation.trace[-1].state
        assert (last.got, last.cursor, last.said) == ({(1, 2)}, 2, "")

    def test_a_log_created_and_lost_before_an_epochless_client_reads_goes_unnoticed(
        self,
    ) -> None:
        found = result("TaskFeed.tla", "TaskFeed_NoSilentLoss.cfg")
        assert found.violation is not None
        assert (found.violation.name, found.violation.depth) == ("NoSilentLoss", 6)
        assert actions(found) == ["Append", "Reset", "Append", "Connect", "Read(n=1)/all"]
        assert found.violation.trace[-1].state.owed == {(1, 1)}
