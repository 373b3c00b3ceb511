"""Workflow, issue 20's chains of stages modelled before their code: its figures, the
shortest trace that catches each mutant (a stale ack counted; the next stage
triggered in a step after the ack; an ack settling its stage in a cancelled flow; a
stage settled before it is reached; a step cut off after its effect counted
completed), a stage cancelled while waiting settled in the step that reaches it, and
a cut step failing its flow."""

from __future__ import annotations

from typing import Any

from specs.tlacheck import Result
from specs.Workflow import workflow
from specs.Workflow.workflow import Constants, State

from spec_runs import result


def actions(found: Result[Any]) -> list[str | None]:
    assert found.violation is not None
    return [step.action for step in found.violation.trace][1:]


def take(c: Constants, s: State, label: str, moves: tuple[workflow.Action, ...]) -> State:
    """The successor of `s` that the step named `label` gives."""
    for action in moves:
        for name, t in action(c, s):
            if name == label:
                return t
    raise AssertionError(f"{label} is not enabled")


def run(c: Constants, *labels: str) -> State:
    s = workflow.initial(c)
    for label in labels:
        s = take(c, s, label, workflow.NEXT)
    return s


class TestWorkflow:
    def test_stages_trigger_once_in_order_and_the_flow_ends_in_all_19424_states(
        self,
    ) -> None:
        found = result("Workflow.tla", "Workflow.cfg")
        assert found.ok
        assert (found.distinct, found.generated, found.depth, found.queued) == (
            19424, 80265, 25, 0)

    def test_the_same_holds_when_a_failed_member_passes_its_stage_on(self) -> None:
        found = result("Workflow.tla", "Workflow_Partial.cfg")
        assert found.ok
        assert (found.distinct, found.generated, found.depth, found.queued) == (
            216062, 958399, 29, 0)

    def test_without_cancels_every_run_ends_with_the_flow_done(self) -> None:
        found = result("Workflow.tla", "Workflow_NoCancel.cfg")
        assert found.ok
        assert (found.distinct, found.generated, found.depth, found.queued) == (
            3897, 14525, 23, 0)


class TestAnInputOverThePayloadLimit:
    def test_its_stage_never_runs_and_the_flow_ends_failed_in_all_7496_states(self) -> None:
        found = result("Workflow.tla", "Workflow_Oversized.cfg")
        assert found.ok
        assert (found.distinct, found.generated, found.depth, found.queued) == (
            7496, 31601, 17, 0)

    def test_the_ack_that_ends_stage_1_fails_the_flow_and_cancels_stage_2(self) -> None:
        c = Constants(stages=2, members=2, workers=2, retries=1, policy="partial",
                      cancels=True, oversized=2)
        s = run(c, "Lease(w=1,k=1,i=1)", "Lease(w=2,k=1,i=2)", "Ack(w=1)", "Ack(w=2)")
        assert s.flow == "failed" and s.triggered[2] == 0
        assert [s.state[(2, i)] for i in (1, 2)] == ["cancelled", "cancelled"]

    def test_unchecked_the_stage_runs_with_it(self) -> None:
        found = result("Workflow.tla", "WorkflowUncheckedInput.cfg")
        assert found.violation is not None
        assert found.violation.name == "OversizedNeverRuns"
        # Stage 1's members cancelled, handed on as failed members under partial.
        assert actions(found) == ["CancelStep(k=1,i=1)", "CancelStep(k=1,i=2)"]
        assert found.violation.trace[-1].state.state[(2, 1)] == "pending"


class TestAStepCutOffAfterItsEffect:
    def test_it_fails_its_flow_and_stage_2_never_runs(self) -> None:
        c = Constants(stages=2, members=2, workers=2, retries=1, policy="fail", cancels=True)
        s = run(c, "Lease(w=1,k=1,i=1)", "Lease(w=2,k=1,i=2)", "AckCut(w=1)", "Ack(w=2)")
        assert (s.state[(1, 1)], s.failed[1], s.flow, s.triggered[2]) == (
            "cut", 1, "failed", 0)
        assert [s.state[(2, i)] for i in (1, 2)] == ["cancelled", "cancelled"]

    def test_under_partial_it_is_handed_on_as_a_failed_member(self) -> None:
        c = Constants(stages=2, members=1, workers=1, retries=0, policy="partial",
                      cancels=True)
        s = run(c, "Lease(w=1,k=1,i=1)", "AckCut(w=1)")
        assert (s.failed[1], s.triggered[2], s.state[(2, 1)]) == (1, 1, "pending")

    def test_counted_completed_the_flow_completes_on_its_null(self) -> None:
        found = result("Workflow.tla", "WorkflowCutHandedOn.cfg")
        assert found.violation is not None and found.violation.name == "OutcomeRight"
        assert actions(found) == ["Lease(w=1,k=1,i=1)", "Lease(w=2,k=1,i=2)", "Ack(w=1)",
                                  "Ack(w=2)", "Lease(w=1,k=2,i=1)", "Lease(w=2,k=2,i=2)",
                                  "Ack(w=1)", "AckCut(w=2)"]
        last = found.violation.trace[-1].state
        assert last.flow == "completed" and last.state[(2, 2)] == "cut"


class TestStageCancelledWhileWaiting:
    def test_its_cancels_settle_nothing_before_the_stage_is_reached(self) -> None:
        c = Constants(stages=2, members=2, workers=2, retries=1, policy="fail", cancels=True)
        s = run(c, "CancelStep(k=2,i=1)", "CancelStep(k=2,i=2)")
        assert s.counted[2] == 2 and s.triggered[2] == 0 and s.flow == "running"

    def test_the_ack_that_ends_the_stage_before_ends_the_flow_failed(self) -> None:
        c = Constants(stages=2, members=2, workers=2, retries=1, policy="fail", cancels=True)
        s = run(c, "CancelStep(k=2,i=1)", "CancelStep(k=2,i=2)", "Lease(w=1,k=1,i=1)",
                "Lease(w=2,k=1,i=2)", "Ack(w=1)", "Ack(w=2)")
        assert s.triggered[2] == 1 and s.flow == "failed"

    def test_under_partial_it_is_passed_and_the_stage_after_it_runs(self) -> None:
        c = Constants(stages=3, members=1, workers=1, retries=0, policy="partial",
                      cancels=True)
        s = run(c, "CancelStep(k=2,i=1)", "Lease(w=1,k=1,i=1)", "Ack(w=1)")
        assert dict(s.triggered) == {1: 1, 2: 1, 3: 1} and s.flow == "running"
        assert s.state[(3, 1)] == "pending"


class TestAStepCancelledOnItsOwn:
    def test_a_pending_one_ends_as_a_failed_member_and_settles_its_stage(self) -> None:
        c = Constants(stages=2, members=2, workers=2, retries=1, policy="fail", cancels=True)
        s = run(c, "Lease(w=1,k=1,i=1)", "CancelStep(k=1,i=2)", "Ack(w=1)")
        assert (s.state[(1, 2)], s.failed[1], s.flow, s.triggered[2]) == (
            "cancelled", 1, "failed", 0)
        assert [s.state[(2, i)] for i in (1, 2)] == ["cancelled", "cancelled"]

    def test_a_dead_one_changes_only_its_state_counted_once(self) -> None:
        c = Constants(stages=2, members=2, workers=2, retries=0, policy="partial",
                      cancels=True)
        s = run(c, "Lease(w=1,k=1,i=1)", "Expire(k=1,i=1)", "CancelStep(k=1,i=1)")
        assert (s.state[(1, 1)], s.counted[1], s.failed[1]) == ("cancelled", 1, 1)

    def test_a_flow_cancelled_ends_its_dead_steps_cancelled_too(self) -> None:
        c = Constants(stages=2, members=2, workers=2, retries=0, policy="partial",
                      cancels=True)
        s = run(c, "Lease(w=1,k=1,i=1)", "Expire(k=1,i=1)", "CancelFlow")
        assert s.flow == "cancelled"
        assert {s.state[step] for step in s.state} == {"cancelled"}


class TestWorkflowMutants:
    def test_a_stale_ack_counted_triggers_stage_2_while_a_member_waits_to_rerun(
        self,
    ) -> None:
        found = result("WorkflowAnyAck.tla", "WorkflowAnyAck.cfg")
        assert found.violation is not None and found.violation.name == "TriggerAfterAll"
        assert actions(found) == ["Lease(w=1,k=1,i=1)", "Lease(w=2,k=1,i=2)", "Ack(w=1)",
                                  "Expire(k=1,i=2)", "AnyAckStale(w=2)"]
        last = found.violation.trace[-1].state
        assert last.triggered[2] == 1 and last.state[(1, 2)] == "pending"

    def test_a_crash_between_the_ack_and_a_separate_trigger_strands_stage_2(self) -> None:
        found = result("WorkflowSeparateStep.tla", "WorkflowSeparateStep.cfg")
        assert found.violation is not None and found.violation.name == "FlowNotLost"
        assert actions(found) == ["Lease(w=1,k=1,i=1)", "Lease(w=2,k=1,i=2)",
                                  "SeparateAck(w=1)", "SeparateAck(w=2)", "Crash(w=2)"]
        last = found.violation.trace[-1].state
        assert last.flow == "running" and last.state[(2, 1)] == "waiting"

    def test_an_ack_that_ignores_the_cancel_triggers_stage_2_after_it(self) -> None:
        found = result("WorkflowIgnoresCancel.tla", "WorkflowIgnoresCancel.cfg")
        assert found.violation is not None
        assert (found.violation.kind, found.violation.name) == ("property", "CancelStops")
        assert actions(found) == ["Lease(w=1,k=1,i=1)", "Lease(w=2,k=1,i=2)",
                                  "IgnoringAck(w=1)", "CancelFlow", "IgnoringAck(w=2)"]
        last = found.violation.trace[-1].state
        assert last.flow == "cancelled" and last.triggered[2] == 1

    def test_settling_an_unreached_stage_on_a_cancel_ends_the_flow_before_stage_1(
        self,
    ) -> None:
        found = result("WorkflowEarlyStage.tla", "WorkflowEarlyStage.cfg")
        assert found.violation is not None and found.violation.name == "FlowEndsLast"
        assert actions(found) == ["EarlyCancelStep(k=2,i=1)", "EarlyCancelStep(k=2,i=2)"]
        last = found.violation.trace[-1].state
        assert last.flow == "failed" and last.state[(1, 1)] == "pending"
