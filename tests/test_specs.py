"""The specs/ models reproduce TLC's figures, and the tlacheck engine behaves like TLC."""

from __future__ import annotations

import dataclasses
import io
import re
from collections import deque
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NamedTuple

import pytest
from specs import tlacheck
from specs.catalog import CHECKS, ROOT
from specs.tlacheck import (
    Config,
    ConfigError,
    EndProperty,
    Fn,
    Invariant,
    Model,
    Result,
    StepProperty,
    Transition,
    check,
    format_violation,
)
from specs.tlacheck import cfg as cfgs
from specs.tlacheck.cli import main
from specs.tlacheck.suite import Check, Expect

from spec_runs import outcome
from spec_runs import result as run

# The quick checks: everything but the six models that take seconds to exhaust.
BIG = {
    "TaskQueue.cfg", "TaskQueueByToken.cfg", "TaskQueueReapNoBump_NoStaleAtOnce.cfg",
    "TaskQueueConfirmAtomic.cfg", "TaskFeed.cfg", "TaskQueue_Cancel.cfg",
}  # fmt: skip
QUICK = [c for c in CHECKS if c.config_name not in BIG]


def actions(result: Result[Any]) -> list[str | None]:
    assert result.violation is not None
    return [step.action for step in result.violation.trace]


class TestCeleryETA:
    def test_faulty_model_is_caught_where_tlc_stops_after_53_states_generated(self) -> None:
        result = run("CeleryETA_faulty.tla", "CeleryETA.cfg")
        assert (result.generated, result.distinct, result.depth, result.queued) == (53, 33, 5, 17)
        assert result.violation is not None
        assert result.violation.name == "InvariantNoDoubleExecution"

    def test_shortest_double_execution_runs_a_held_copy_twice(self) -> None:
        result = run("CeleryETA_faulty.tla", "CeleryETA.cfg")
        assert actions(result) == [
            None,
            "PublishTask(id=0)",
            "PickupTask(id=0)",
            "ExecuteTask(id=0)",
            "ExecuteTask(id=0)",
        ]

    def test_idempotent_model_under_the_seed_cfg_stops_at_a_deadlock_after_240_generated(
        self,
    ) -> None:
        result = run("CeleryETA_idempotent.tla", "CeleryETA.cfg")
        assert (result.generated, result.distinct, result.depth, result.queued) == (240, 99, 8, 24)
        assert result.violation is not None
        assert (result.violation.kind, result.violation.depth) == ("deadlock", 7)

    def test_the_deadlock_is_both_tasks_acknowledged_without_ever_running(self) -> None:
        result = run("CeleryETA_idempotent.tla", "CeleryETA.cfg")
        assert result.violation is not None
        last = result.violation.trace[-1].state
        assert last.tasks == {0, 1} and not last.readySet and not last.activeSet
        assert dict(last.execCount) == {0: 0, 1: 0, 2: 0}

    def test_idempotent_model_holds_in_all_127_states_without_deadlock_checking(self) -> None:
        result = run("CeleryETA_idempotent.tla", "CeleryETA_NoDeadlock.cfg")
        assert result.ok
        assert (result.generated, result.distinct, result.depth, result.queued) == (352, 127, 9, 0)


class TestRoostPush:
    def test_roost_push_holds_in_tlcs_164_states_at_depth_12(self) -> None:
        result = run("RoostPush.tla", "RoostPush.cfg")
        assert result.ok
        assert (result.distinct, result.depth, result.generated) == (164, 12, 404)

    def test_split_attach_first_breaks_open_stream_is_current_in_three_steps(self) -> None:
        result = run("RoostPushSplitAttach.tla", "RoostPushSplitAttach.cfg")
        assert result.violation is not None
        assert result.violation.name == "OpenStreamIsCurrent"
        assert actions(result) == [None, "Replay/replay", "Append/closed", "Attach"]

    def test_split_attach_without_that_check_gives_the_seeds_four_step_silent_gap(self) -> None:
        result = run("RoostPushSplitAttach.tla", "RoostPushSplitAttach_NoOpenStreamCheck.cfg")
        assert result.violation is not None
        assert result.violation.name == "NoSilentGap"
        assert actions(result) == [None, "Replay/replay", "Append/closed", "Attach", "Append/live"]
        last = result.violation.trace[-1].state
        assert (last.received, last.cursor, last.gapSeen) == ({2}, 2, False)


class TestCatalogue:
    @pytest.mark.parametrize("c", CHECKS, ids=lambda c: f"{c.name}:{c.config_name}")
    def test_every_check_ends_as_expected_and_matches_tlc(self, c: Check) -> None:
        checked = outcome(c)
        assert checked.passed, checked.problems

    def test_every_faulty_model_and_mutant_is_expected_to_be_caught(self) -> None:
        caught = {c.name for c in CHECKS if c.expect.verdict in ("invariant", "property")}
        assert caught == {
            "CeleryETA_faulty", "RoostPushSplitAttach", "TaskQueue", "TaskQueueAckNoFence",
            "TaskQueueReapNoBump", "TaskQueueByToken", "TaskQueueShutdownRelease",
            "TaskQueueConfirmAtomic", "TaskQueueResultNoFence", "TaskQueueCancelNoFence",
            "TaskQueueCancelRetried", "TaskQueueTimeOutMidEffect", "TaskQueueEndMidEffect",
            "TaskQueueTimeOutUnrenewed",
            "TaskQueueTimeOutReturned", "TokenMintCounter", "TokenMintSameClock",
            "TokenMintStepBack", "TaskFeed",
            "TaskFeedSplitAttach",
            "ResultWait", "ResultWaitSplitWatch", "ResultWaitKeepDone", "PeriodicTick",
            "PeriodicTickCheckThenEnqueue",
            "PriorityLowestFirst", "PriorityRetryLosesPriority", "PriorityReleaseToBack",
            "RateLimitCheckThenTake", "RateLimitNoWait", "RateLimitKeptSlot",
            "RateLimitGhostSlot", "RateLimitReleaseKeepsNext", "QueueRateLimitRetake",
            "QueueRateLimitKeepLine", "RateDeclarationEveryLease", "RateDeclarationLastHolder",
            "ConcurrencyLimitStaleFree", "ConcurrencyLimitCheckThenTake",
            "ConcurrencyGroupsNoSweep", "ConcurrencyKeyModeByRecord",
            "ShardsRouteById", "ShardsFixedOrder", "ShardsKeyLeftUnbound", "ProgressNoFence",
            "ProgressTokenless",
            "ChordAnyAck", "ChordSeparateStep", "WorkflowAnyAck", "WorkflowSeparateStep",
            "WorkflowIgnoresCancel", "WorkflowEarlyStage", "Workflow",
        }  # fmt: skip

    def test_cli_exits_zero_when_everything_is_as_expected(self) -> None:
        # Every check's own verdict is the parametrized test above (and CI runs the CLI
        # on all of them with TLC): here the CLI's report of a pass and two violations.
        sample = [c for c in QUICK if c.name == "RoostPush"
                  or c.config_name in ("RoostPushSplitAttach_NoOpenStreamCheck.cfg",
                                       "TaskQueueAckNoFence_NoStaleAtOnce.cfg")]
        assert len(sample) >= 3
        out = io.StringIO()
        assert main([], sample, ROOT, out) == 0
        assert f"{len(sample)} of {len(sample)} checks as expected" in out.getvalue()
        assert "Error: Invariant NoSilentGap is violated." in out.getvalue()
        assert "Error: Property T3_StaleChangesNothing is violated." in out.getvalue()

    def test_cli_exits_nonzero_when_a_mutant_escapes(self) -> None:
        split = next(c for c in CHECKS if c.name == "RoostPushSplitAttach")
        lenient = dataclasses.replace(split, expect=Expect.holds())
        out = io.StringIO()
        assert main(["-q"], [lenient], ROOT, out) == 1
        assert "FAILED RoostPushSplitAttach" in out.getvalue()

    def test_cli_refuses_an_unknown_model_name(self) -> None:
        assert main(["NoSuchModel"], CHECKS, ROOT, io.StringIO()) == 2


class TestSourcesMatchTranscriptions:
    @pytest.mark.parametrize("c", CHECKS, ids=lambda c: f"{c.name}:{c.config_name}")
    def test_module_name_matches_file_name_as_tlc_requires(self, c: Check) -> None:
        text = (ROOT / c.spec).read_text()
        assert re.search(rf"^-{{4,}}\s*MODULE\s+{c.name}\s*-{{4,}}", text, re.MULTILINE)

    @pytest.mark.parametrize("c", CHECKS, ids=lambda c: f"{c.name}:{c.config_name}")
    def test_every_cfg_name_is_defined_in_the_tla(self, c: Check) -> None:
        config = cfgs.load(ROOT / c.config)
        defined = tla_definitions(ROOT / c.spec)
        for name in (config.specification, *config.invariants, *config.properties):
            assert name in defined, f"{name} from {c.config_name}"

    @pytest.mark.parametrize("c", CHECKS, ids=lambda c: f"{c.name}:{c.config_name}")
    def test_python_actions_are_the_disjuncts_of_next(self, c: Check) -> None:
        config = cfgs.load(ROOT / c.config)
        assert config.specification is not None
        spec = tla_definitions(ROOT / c.spec)[config.specification]
        next_name = re.search(r"\[\]\[(\w+)\]_", spec)
        assert next_name is not None
        body = tla_definitions(ROOT / c.spec)[next_name.group(1)]
        body = re.sub(r"\\E\s+\w+\s+\\in\s+[^:]+:", " ", body)  # drop the bindings
        disjuncts = set(re.findall(r"\b[A-Z][A-Za-z]+\b", body)) - {"UNCHANGED"}
        # TaskQueue's fault switches, cancellation, time limits and revivals,
        # ResultWait's slices and recreations, PeriodicTick's forgets and RateLimit's
        # cancels and releases turned on, so that every action can be taken.
        switches = ("PAUSES", "KILLS", "LATE_FAILS", "CANCELS", "TIME_LIMITS", "RATE_LIMITS",
                    "SLICE")
        faults: dict[str, object] = {k: True for k in switches if k in config.constants}
        if config.constants.get("MAX_REVIVALS") == 0:
            faults["MAX_REVIVALS"] = 1
        for bound in ("MAX_FORGETS", "MAX_RECREATES", "MAX_CANCELS", "MAX_RELEASES"):
            if config.constants.get(bound) == 0:
                faults[bound] = 1
        config = dataclasses.replace(config, constants={**config.constants, **faults})
        # QueueRateLimit's redeploy raises the name's rate or removes its limit: each
        # run does one, so both kinds are run.
        kinds = ("raise", "remove") if "REDEPLOY" in config.constants else (None,)
        labels = {
            re.split(r"[(/]", label)[0]
            for kind in kinds
            for label in labels_near_init(c.build(config if kind is None else dataclasses.replace(
                config, constants={**config.constants, "REDEPLOY": kind})))
        }  # fmt: skip
        assert labels == disjuncts


def tla_definitions(path: Path) -> dict[str, str]:
    """Operator name -> text of its definition, following EXTENDS within specs/."""
    text = path.read_text()
    found: dict[str, str] = {}
    extends = re.search(r"^EXTENDS\s+(.+)$", text, re.MULTILINE)
    if extends:
        for name in re.split(r"\s*,\s*", extends.group(1).strip()):
            if (path.parent / f"{name}.tla").exists():
                found.update(tla_definitions(path.parent / f"{name}.tla"))
    pattern = r"^(\w+)(?:\([^)]*\))?\s*==(.*?)(?=^\S|\Z)"
    for match in re.finditer(pattern, text, re.MULTILINE | re.DOTALL):
        found[match.group(1)] = match.group(2)
    return found


def labels_near_init(model: Model[Any], depth: int = 10) -> set[str]:
    """Action labels on every step within `depth` steps of an initial state."""
    labels: set[str] = set()
    frontier = deque((s, 0) for s in model.init)
    seen = set(model.init)
    while frontier:
        state, level = frontier.popleft()
        if level == depth:
            continue
        for label, succ in model.next(state):
            labels.add(label)
            if succ not in seen:
                seen.add(succ)
                frontier.append((succ, level + 1))
    return labels


class Counter(NamedTuple):
    n: int
    done: bool


def counter_next(s: Counter) -> Iterator[Transition[Counter]]:
    """Count up to 3 or finish early; a finished counter does nothing more."""
    if s.done:
        return
    if s.n < 3:
        yield "Inc", s._replace(n=s.n + 1)
    yield "Finish", s._replace(done=True)


def counter(**kwargs: Any) -> Model[Counter]:
    return Model(name="Counter", init=(Counter(0, False),), next=counter_next, **kwargs)


class TestEngine:
    def test_counts_states_generated_distinct_and_depth_like_tlc(self) -> None:
        result = check(counter(check_deadlock=False))
        # 8 states; 1 initial + 7 successors; levels 1 (init) .. 5 (n=3, done).
        assert (result.distinct, result.generated, result.depth) == (8, 8, 5)

    def test_an_initial_state_alone_is_depth_one(self) -> None:
        result = check(
            Model(name="Still", init=(Counter(0, True),), next=counter_next, check_deadlock=False)
        )
        assert (result.distinct, result.generated, result.depth) == (1, 1, 1)

    def test_invariants_are_checked_in_initial_states(self) -> None:
        result = check(counter(invariants=[Invariant("Positive", lambda s: s.n > 0)]))
        assert result.violation is not None
        assert (result.violation.depth, result.generated, result.distinct) == (1, 1, 1)

    def test_the_counterexample_is_a_shortest_one(self) -> None:
        result = check(counter(invariants=[Invariant("NotTwo", lambda s: s.n != 2)]))
        assert actions(result) == [None, "Inc", "Inc"]

    def test_a_state_without_successors_is_a_deadlock_unless_disabled(self) -> None:
        result = check(counter())
        assert result.violation is not None
        assert (result.violation.kind, actions(result)) == ("deadlock", [None, "Finish"])
        assert check(counter(check_deadlock=False)).ok

    def test_end_properties_are_checked_where_runs_stop(self) -> None:
        reached_three = EndProperty[Counter]("ReachesThree", lambda s: s.n == 3)
        result = check(counter(check_deadlock=False, properties=[reached_three]))
        assert result.violation is not None
        assert (result.violation.name, actions(result)) == ("ReachesThree", [None, "Finish"])

    def test_step_properties_are_checked_on_every_step(self) -> None:
        no_finish_at_two = StepProperty[Counter](
            "NoFinishAtTwo", lambda s, a, t: not (a == "Finish" and s.n == 2)
        )
        result = check(counter(check_deadlock=False, properties=[no_finish_at_two]))
        assert result.violation is not None
        assert actions(result) == [None, "Inc", "Inc", "Finish"]

    def test_constrained_out_states_are_generated_but_not_kept(self) -> None:
        result = check(counter(check_deadlock=False, constraint=lambda s: s.n < 2))
        assert (result.distinct, result.generated) == (4, 5)

    def test_a_trace_prints_the_initial_state_then_what_each_step_changed(self) -> None:
        result = check(counter(invariants=[Invariant("NotOne", lambda s: s.n != 1)]))
        assert result.violation is not None
        assert format_violation(result.violation).splitlines() == [
            "Error: Invariant NotOne is violated.",
            "Error: The behavior up to this point is:",
            "State 1: <Initial predicate>",
            "/\\ n = 0",
            "/\\ done = FALSE",
            "State 2: <Inc>",
            "   n: 0 -> 1",
        ]

    def test_the_public_surface_is_pinned(self) -> None:
        assert sorted(tlacheck.__all__) == [
            "Config", "ConfigError", "EndProperty", "Fn", "Invariant", "Model", "Property",
            "Result", "State", "Step", "StepProperty", "Transition", "Violation", "check",
            "format_violation", "tla",
        ]  # fmt: skip


class TestValuesAndConfig:
    def test_functions_compare_by_mapping_whatever_the_domain_order(self) -> None:
        f = Fn([(0, 1), (1, 0)])
        assert f == Fn([(1, 0), (0, 1)]) and hash(f) == hash(Fn([(1, 0), (0, 1)]))
        assert f.except_(1, 5) == Fn({0: 1, 1: 5})
        assert tlacheck.tla(f) == "(0 :> 1 @@ 1 :> 0)"

    def test_a_record_inside_a_state_prints_as_a_tla_record(self) -> None:
        record = Counter(2, True)
        assert tlacheck.tla(Fn({1: record})) == "(1 :> [n |-> 2, done |-> TRUE])"
        assert tlacheck.tla((1, 2)) == "<<1, 2>>"

    def test_except_outside_the_domain_is_an_error(self) -> None:
        with pytest.raises(KeyError):
            Fn({0: 0}).except_(1, 1)

    def test_cfg_reads_constants_invariants_and_deadlock_flag(self) -> None:
        config = cfgs.parse(
            "\\* comment\nCONSTANTS\n  N = 3\n  Mode = fast\n(* block *)\nSPECIFICATION Spec\n"
            "INVARIANT A\nINVARIANTS B C\nCHECK_DEADLOCK FALSE\n"
        )
        assert config == Config(
            source="<cfg>",
            constants={"N": 3, "Mode": "fast"},
            specification="Spec",
            invariants=("A", "B", "C"),
            check_deadlock=False,
        )

    def test_cfg_naming_an_untranscribed_invariant_is_refused(self) -> None:
        config = cfgs.parse("INVARIANT Missing")
        with pytest.raises(ConfigError, match="Missing"):
            cfgs.invariants(config, {"Present": lambda s: True})

    def test_cfg_settings_that_would_change_the_search_are_refused(self) -> None:
        with pytest.raises(ConfigError, match="SYMMETRY"):
            cfgs.parse("SYMMETRY Perms")
