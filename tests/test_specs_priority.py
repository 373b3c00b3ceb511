"""Priority, strict priority across levels and FIFO within one: its figures, that its
checks bite in the model as built, what strict priority allows, and the shortest trace
that catches each mutant."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Set as AbstractSet
from typing import Any

from specs.catalog import ROOT
from specs.Priority import priority as pr
from specs.tlacheck import Model, Result, check
from specs.tlacheck import cfg as cfgs

import spec_runs
from spec_runs import catalogued, result, walk

Step = tuple[pr.State, str, pr.State]


def actions(found: Result[Any]) -> list[str | None]:
    assert found.violation is not None
    return [step.action for step in found.violation.trace][1:]


def figures(found: Result[Any]) -> tuple[int, int, int, int]:
    return found.distinct, found.generated, found.depth, found.queued


def build(spec: str, config: str, **changes: Any) -> Model[pr.State]:
    """The catalogued check's model, its .cfg changed by `changes` (Config fields)."""
    c = catalogued(spec, config)
    return c.build(dataclasses.replace(cfgs.load(ROOT / c.config), **changes))


walk("Priority.tla", "Priority.cfg")


def steps() -> AbstractSet[Step]:
    """Every step of Priority's state graph under Priority.cfg."""
    return spec_runs.steps("Priority.tla", "Priority.cfg")


def states() -> set[pr.State]:
    return {s for s, _, _ in steps()} | {t for _, _, t in steps()}


def leases() -> list[tuple[pr.State, int]]:
    """Each lease step's state before it, and the task it leased."""
    return [(s, *(t.leased - s.leased)) for s, label, t in steps() if label.startswith("Lease")]


def constants() -> pr.Constants:
    return pr.Constants.from_cfg(cfgs.load(ROOT / "Priority" / "Priority.cfg"))


def after(state: pr.State, actions: tuple[pr.Action, ...], *labels: str) -> pr.State:
    """The state that the steps named by `labels` reach from `state`, one after another."""
    for label in labels:
        state = next(t for a in actions for name, t in a(constants(), state) if name == label)
    return state


class TestPriorityAsBuilt:
    def test_every_check_holds_in_all_12637_states(self) -> None:
        found = result("Priority.tla", "Priority.cfg")
        assert found.ok
        assert figures(found) == (12637, 49195, 13, 0)

    def test_every_script_and_branch_is_reached(self) -> None:
        kinds = {re.sub(r"\(.*?\)", "", label) for _, label, _ in steps()}
        assert kinds == {
            "Enqueue", "Lease", "Release", "Fail/delayed", "Fail/dead", "Ack", "Promote",
            "RetryDead", "Cancel",
        }  # fmt: skip
        levels = {label for _, label, _ in steps() if label.startswith("Lease")}
        assert levels == {"Lease(p=0)", "Lease(p=1)", "Lease(p=2)"}

    def test_the_ghost_is_each_lists_order_so_it_adds_no_state(self) -> None:
        # As built, "entered first" is "nearer the front": the ghost is a function of
        # the lists, and FifoWithinLevel judges the lists against it.
        for s in states():
            in_order = {
                (queue[i], queue[j])
                for queue in s.ready.values()
                for i in range(len(queue))
                for j in range(i + 1, len(queue))
            }
            assert s.earlier == in_order

    def test_leases_happen_with_lower_tasks_and_with_later_peers_waiting(self) -> None:
        # P1 and FIFO are not vacuous: a task is leased while a lower one waits, and
        # while a task of its own level that entered after it waits.
        lower = [s for s, t in leases() if any(s.prio[r] < s.prio[t] for r in pr.waiting(s))]
        later = [s for s, t in leases() if any(a == t for a, _ in s.earlier)]
        assert lower and later

    def test_a_release_goes_ahead_of_its_levels_tasks_that_were_waiting(self) -> None:
        releases = [(s, t) for s, label, t in steps() if label.startswith("Release")]
        for s, t in releases:
            (task,) = s.leased - t.leased
            assert t.ready[s.prio[task]][0] == task
        assert any(
            len(t.ready[s.prio[task]]) > 1 for s, t in releases for task in s.leased - t.leased
        )

    def test_runs_that_stop_end_completed_dead_and_cancelled(self) -> None:
        ends = states() - {s for s, _, _ in steps()}
        assert all(pr.settled(s) for s in ends)
        assert any(s.done for s in ends) and any(s.dlq for s in ends)
        assert any(s.cancelled for s in ends)

    def test_strict_priority_lets_a_low_task_wait_for_ever(self) -> None:
        # No aging: a cycle of the graph in which a level-0 task waits at every step,
        # while the tasks leased along it are all of higher levels.
        def starves(r: int) -> bool:
            graph: dict[pr.State, set[pr.State]] = {}
            for s, _, t in steps():
                waits = all(x.prio[r] == 0 and r in pr.waiting(x) for x in (s, t))
                if waits and all(s.prio[n] > 0 for n in t.leased - s.leased):
                    graph.setdefault(s, set()).add(t)
            return any(s in reachable(graph, t) for s, ts in graph.items() for t in ts)

        assert any(starves(r) for r in constants().ids)


def reachable(graph: dict[pr.State, set[pr.State]], start: pr.State) -> set[pr.State]:
    seen, stack = {start}, [start]
    while stack:
        for t in graph.get(stack.pop(), ()):
            if t not in seen:
                seen.add(t)
                stack.append(t)
    return seen


class TestPriorityMutants:
    def test_a_scan_from_the_lowest_level_leases_the_low_task_first(self) -> None:
        found = result("PriorityLowestFirst.tla", "PriorityLowestFirst.cfg")
        assert actions(found) == [
            "Enqueue(p=0,d=FALSE)", "Enqueue(p=1,d=FALSE)", "LowestFirstLease(p=0)",
        ]  # fmt: skip
        assert figures(found) == (73, 77, 4, 62)
        assert found.violation is not None and found.violation.name == "LeasedWasHighest"

    def test_a_promote_to_the_default_list_misplaces_the_task(self) -> None:
        found = result("PriorityRetryLosesPriority.tla", "PriorityRetryLosesPriority.cfg")
        assert actions(found) == ["Enqueue(p=0,d=TRUE)", "LosingPromote(t=1)"]
        assert figures(found) == (22, 22, 3, 18)
        assert found.violation is not None and found.violation.name == "PriorityKept"

    def test_a_retried_task_is_misplaced_the_same_way(self) -> None:
        retried = after(
            pr.initial(constants()), pr.LOSING_NEXT,
            "Enqueue(p=2,d=FALSE)", "Lease(p=2)", "Fail(t=1)/delayed", "LosingPromote(t=1)",
        )  # fmt: skip
        assert dict(retried.ready) == {0: (), 1: (1,), 2: ()}
        assert retried.prio[1] == 2 and not pr.priority_kept(retried)

    def test_the_misplaced_task_is_leased_ahead_of_a_higher_one(self) -> None:
        found = result("PriorityRetryLosesPriority.tla", "PriorityRetryLosesPriority_Highest.cfg")
        assert actions(found) == [
            "Enqueue(p=0,d=TRUE)", "LosingPromote(t=1)", "Enqueue(p=1,d=FALSE)", "Lease(p=1)",
        ]  # fmt: skip
        assert figures(found) == (743, 1045, 5, 583)
        assert found.violation is not None and found.violation.name == "LeasedWasHighest"

    def test_fifo_catches_the_misplaced_task_at_the_same_depth(self) -> None:
        model = build(
            "PriorityRetryLosesPriority.tla", "PriorityRetryLosesPriority.cfg",
            invariants=("TypeOK",), properties=("FifoWithinLevel", "LosingNothingLost"),
        )  # fmt: skip
        found = check(model)
        assert found.violation is not None and found.violation.name == "FifoWithinLevel"
        assert actions(found) == [
            "Enqueue(p=0,d=FALSE)", "Enqueue(p=0,d=TRUE)", "LosingPromote(t=2)", "Lease(p=1)",
        ]  # fmt: skip

    def test_a_cancel_then_misses_the_misplaced_task(self) -> None:
        # cancel.lua removes the task from its own level's list: it is cancelled and
        # still waiting in the default list, where a lease would find it.
        model = build(
            "PriorityRetryLosesPriority.tla", "PriorityRetryLosesPriority.cfg",
            invariants=("TypeOK", "OnePlace"),
        )  # fmt: skip
        found = check(model)
        assert found.violation is not None and found.violation.name == "OnePlace"
        assert actions(found) == ["Enqueue(p=0,d=TRUE)", "LosingPromote(t=1)", "Cancel(t=1)"]
        last = found.violation.trace[-1].state
        assert last.cancelled == {1} and last.ready[1] == (1,)

    def test_a_release_to_the_back_lets_a_later_task_of_its_level_go_first(self) -> None:
        found = result("PriorityReleaseToBack.tla", "PriorityReleaseToBack.cfg")
        assert actions(found) == [
            "Enqueue(p=0,d=FALSE)", "Enqueue(p=0,d=FALSE)", "Lease(p=0)",
            "ToBackRelease(t=1)", "Lease(p=0)",
        ]  # fmt: skip
        assert figures(found) == (1120, 2052, 6, 755)
        assert found.violation is not None and found.violation.name == "FifoWithinLevel"
        last = found.violation.trace[-1].state
        assert (last.leased, last.ready[0]) == ({2}, (1,))
