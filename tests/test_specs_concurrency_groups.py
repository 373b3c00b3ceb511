"""ConcurrencyGroups, how a lease finds a limit's groups with tasks to send back when it
looks at the marked groups and a sweep's window, never at all of them: its figures, the
two ways a waiting group's slot comes free (a run's end, which marks it, and a raised
limit, which only the sweep finds), and the mutant with no sweep."""

from __future__ import annotations

from collections.abc import Set as AbstractSet
from typing import Any

from specs.ConcurrencyLimit import concurrency_groups as cg
from specs.tlacheck import Result

import spec_runs
from spec_runs import result, walk

Step = tuple[cg.State, str, cg.State]
C = cg.Constants(tasks=5, groups=3, workers=2, sweep=2)

walk("ConcurrencyGroups.tla", "ConcurrencyGroups.cfg")


def steps() -> AbstractSet[Step]:
    return spec_runs.steps("ConcurrencyGroups.tla", "ConcurrencyGroups.cfg")


def kind(label: str) -> str:
    return label.partition("(")[0]


def actions(found: Result[Any]) -> list[str]:
    assert found.violation is not None
    return [kind(step.action or "") for step in found.violation.trace][1:]


def sent_back(s: cg.State, t: cg.State, g: int) -> bool:
    return any(C.group(u) == g and s.place[u] == "parked" and t.place[u] == "back"
               for u in C.all_tasks)


class TestConcurrencyGroups:
    def test_every_check_holds_in_all_4382_states(self) -> None:
        found = result("ConcurrencyGroups.tla", "ConcurrencyGroups.cfg")
        assert found.ok
        assert (found.distinct, found.generated, found.depth, found.queued) == (
            4382, 13495, 13, 0)

    def test_the_constants_are_the_cfgs(self) -> None:
        assert C.reach == 2 and [C.group(t) for t in C.all_tasks] == [1, 2, 3, 1, 2]

    def test_a_run_that_ends_marks_its_waiting_group(self) -> None:
        marking = [(s, t) for s, label, t in steps() if kind(label) == "Ack"
                   and any(s.line[g] and g not in s.freed and g in t.freed
                           for g in C.all_groups)]
        assert marking

    def test_only_a_raised_limit_leaves_a_waiting_group_with_a_free_slot_unmarked(
        self,
    ) -> None:
        unmarked = {t for _, _, t in steps() for g in C.all_groups
                    if cg.starved(C, t, g) and g not in t.freed}
        assert unmarked
        assert all(t.most == 2 for t in unmarked)

    def test_the_sweep_sends_back_the_task_of_a_group_nothing_marked(self) -> None:
        swept = [(s, t) for s, label, t in steps() if kind(label) == "Lease"
                 and any(sent_back(s, t, g) and g not in s.freed for g in C.all_groups)]
        assert swept

    def test_a_lease_with_no_group_waiting_moves_no_cursor(self) -> None:
        for s, label, t in steps():
            if kind(label) == "Lease" and not s.waiting:
                assert t.cursor == s.cursor and t.freed == s.freed


class TestMutant:
    def test_with_no_sweep_a_group_freed_by_a_raise_is_never_looked_at(self) -> None:
        found = result("ConcurrencyGroupsNoSweep.tla", "ConcurrencyGroupsNoSweep.cfg")
        assert found.violation is not None and found.violation.name == "LookedAtInTime"
        assert actions(found) == [
            "NoSweepLease", "NoSweepLease", "Raise", "NoSweepLease", "Ack", "NoSweepLease"]
