"""ResultWait, how a producer waits for a task's result: its figures, what it reaches,
that its runs all stop, and the shortest trace that catches each mutant."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Set as AbstractSet
from typing import Any

from specs.catalog import ROOT
from specs.ResultWait import result_wait as rw
from specs.tlacheck import Model, Result, check
from specs.tlacheck import cfg as cfgs

import spec_runs
from spec_runs import catalogued, result, walk


def actions(found: Result[Any]) -> list[str | None]:
    assert found.violation is not None
    return [step.action for step in found.violation.trace][1:]


def figures(found: Result[Any]) -> tuple[int, int, int, int]:
    return found.distinct, found.generated, found.depth, found.queued


def build(spec: str, config: str, **changes: Any) -> Model[rw.State]:
    """The catalogued check's model, its .cfg changed by `changes` (Config fields)."""
    c = catalogued(spec, config)
    return c.build(dataclasses.replace(cfgs.load(ROOT / c.config), **changes))


walk("ResultWait.tla", "ResultWait.cfg")
walk("ResultWait.tla", "ResultWait_Slice.cfg")


def steps(config: str) -> AbstractSet[tuple[rw.State, str, rw.State]]:
    """Every step of ResultWait's state graph under `config`."""
    return spec_runs.steps("ResultWait.tla", config)


def has_cycle(edges: AbstractSet[tuple[rw.State, str, rw.State]]) -> bool:
    graph: dict[rw.State, list[rw.State]] = {}
    for s, _, t in edges:
        graph.setdefault(s, []).append(t)
    done: set[rw.State] = set()
    for root in graph:
        if root in done:
            continue
        path, stack = {root}, [(root, iter(graph.get(root, ())))]
        while stack:
            node, successors = stack[-1]
            succ = next(successors, None)
            if succ is None:
                stack.pop()
                path.discard(node)
                done.add(node)
            elif succ in path:
                return True
            elif succ not in done:
                path.add(succ)
                stack.append((succ, iter(graph.get(succ, ()))))
    return False


class TestResultWaitAsBuilt:
    def test_no_lost_wakeup_no_spin_and_all_return_hold_in_all_169_states(self) -> None:
        found = result("ResultWait.tla", "ResultWait.cfg")
        assert found.ok
        assert figures(found) == (169, 359, 10, 0)

    def test_the_checks_hold_as_well_when_wait_slices_run_out(self) -> None:
        found = result("ResultWait.tla", "ResultWait_Slice.cfg")
        assert found.ok
        assert figures(found) == (170, 385, 10, 0)

    def test_every_run_stops_so_all_return_says_every_producer_returns(self) -> None:
        # Without slices the graph has no cycle: each run is finite, and AllReturn,
        # checked where runs stop, is "eventually every producer returns".
        assert not has_cycle(steps("ResultWait.cfg"))

    def test_with_slices_a_producer_may_time_out_forever_while_the_task_runs(self) -> None:
        assert has_cycle(steps("ResultWait_Slice.cfg"))

    def test_every_branch_of_the_loop_and_the_scripts_is_reached(self) -> None:
        kinds = {re.sub(r"\(.*?\)", "", label) for _, label, _ in steps("ResultWait.cfg")}
        assert kinds == {
            "End", "Revive", "Watch/ended", "Watch/marked", "Block/returned",
            "Block/blocked", "Wake",
        }  # fmt: skip

    def test_one_element_wakes_both_blocked_producers(self) -> None:
        both = [
            (s, t) for s, label, t in steps("ResultWait.cfg")
            if label.startswith("Wake") and set(s.pc.values()) == {"blocked"}
        ]  # fmt: skip
        assert both and all(s.done == t.done == 1 for s, t in both)

    def test_a_producer_blocked_after_a_revival_is_woken_by_the_next_end(self) -> None:
        woken = [
            s for s, label, _ in steps("ResultWait.cfg")
            if label.startswith("Wake") and s.revivals > 0 and s.done == 1
        ]  # fmt: skip
        assert woken


class TestResultWaitMutants:
    def test_a_split_watch_lets_the_task_end_between_read_and_mark(self) -> None:
        found = result("ResultWaitSplitWatch.tla", "ResultWaitSplitWatch.cfg")
        assert actions(found) == ["Read(w=1)", "End(to=completed)", "Mark(w=1)"]
        assert figures(found) == (27, 30, 4, 15)
        assert found.violation is not None and found.violation.name == "NoLostWakeup"

    def test_the_lost_wakeup_leaves_the_producer_blocked_for_good_without_slices(self) -> None:
        model = build(
            "ResultWaitSplitWatch.tla", "ResultWaitSplitWatch.cfg", invariants=("SplitTypeOK",)
        )
        found = check(model)
        assert found.violation is not None and found.violation.name == "SplitAllReturn"
        last = found.violation.trace[-1].state
        assert last.state == "completed" and last.done == 0
        assert "blocked" in last.pc.values()

    def test_retry_dead_keeping_done_wakes_the_revived_tasks_producer_at_once(self) -> None:
        found = result("ResultWaitKeepDone.tla", "ResultWaitKeepDone.cfg")
        assert actions(found) == ["Watch(w=1)/marked", "End(to=dead)", "KeepDoneRevive"]
        assert figures(found) == (28, 31, 4, 15)
        assert found.violation is not None and found.violation.name == "NoSpuriousSpin"
        last = found.violation.trace[-1].state
        spin = [label for label, _ in rw.block(rw.Constants(2, 2, False), last)]
        assert (last.state, spin) == ("running", ["Block(w=1)/returned"])
