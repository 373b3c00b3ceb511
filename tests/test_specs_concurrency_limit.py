"""ConcurrencyLimit, the slots of a task name taken in the lease script and given back
by the fenced end of a lease: its figures, what it reaches (parked tasks sent back by
every way a slot comes free, stale settles refused), every run ending, and the
shortest trace that catches each mutant."""

from __future__ import annotations

import re
from collections.abc import Set as AbstractSet
from typing import Any

from specs.ConcurrencyLimit import concurrency_limit as cl
from specs.tlacheck import Result

import spec_runs
from spec_runs import result, walk

Step = tuple[cl.State, str, cl.State]


def actions(found: Result[Any]) -> list[str | None]:
    assert found.violation is not None
    return [step.action for step in found.violation.trace][1:]


walk("ConcurrencyLimit.tla", "ConcurrencyLimit.cfg")


def steps() -> AbstractSet[Step]:
    """Every step of ConcurrencyLimit's state graph under ConcurrencyLimit.cfg."""
    return spec_runs.steps("ConcurrencyLimit.tla", "ConcurrencyLimit.cfg")


def kind(label: str) -> str:
    return re.sub(r"\(.*?\)", "", label)


def progress(s: cl.State) -> tuple[int, int, int, int]:
    """Tokens and tries only grow; then ended tasks, parked tasks, idle workers."""
    return (sum(s.token.values()) + sum(s.tries.values()),
            sum(p in cl.ENDED for p in s.place.values()),
            sum(p == "parked" for p in s.place.values()),
            sum(h == cl.NONE for h in s.held.values()))


def unparked(s: cl.State, t: cl.State) -> bool:
    return any(s.place[u] == "parked" and t.place[u] != "parked" for u in s.place)


class TestConcurrencyLimit:
    def test_the_limit_holds_in_all_20223_states(self) -> None:
        found = result("ConcurrencyLimit.tla", "ConcurrencyLimit.cfg")
        assert found.ok
        assert (found.distinct, found.generated, found.depth, found.queued) == (
            20223, 104842, 19, 0)

    def test_every_step_moves_on_so_every_run_stops_and_every_task_ends(self) -> None:
        # No cycle in a finite graph: EveryTaskEnds, checked where runs stop, is then
        # "every task eventually ends", parked ones included.
        for s, label, t in steps():
            assert progress(t) > progress(s), label

    def test_every_slot_is_taken_and_tasks_wait_parked(self) -> None:
        assert any(len(t.holding) == 2 and "parked" in t.place.values() for _, _, t in steps())

    def test_a_parked_task_comes_back_after_each_way_a_slot_frees(self) -> None:
        # A step that frees a slot into a state where a lease sends a parked task back.
        unparking = {s for s, label, t in steps() if kind(label) == "Lease" and unparked(s, t)}
        freed_by = {kind(label) for s, label, t in steps()
                    if len(t.holding) < len(s.holding) and t in unparking}
        assert freed_by == {"Ack", "Fail", "Reap"}

    def test_a_stale_settle_changes_nothing_but_its_worker(self) -> None:
        stale = [(s, t) for s, label, t in steps() if kind(label) in ("Ack", "Fail")
                 and not cl.current(s, int(label.split("=")[1].rstrip(")")))]
        assert stale
        for s, t in stale:
            assert (t.place, t.holding, t.token, t.tries) == (s.place, s.holding, s.token,
                                                              s.tries)


class TestMutants:
    def test_a_stale_ack_that_frees_a_slot_lets_a_third_run_in(self) -> None:
        found = result("ConcurrencyLimitStaleFree.tla", "ConcurrencyLimitStaleFree.cfg")
        assert found.violation is not None and found.violation.name == "NeverOverLimit"
        assert [kind(a or "") for a in actions(found)] == [
            "Lease", "Lease", "Crash", "Reap", "Lease", "StaleFreeAck", "Lease"]

    def test_counting_the_slots_apart_from_taking_them_lets_two_workers_share_one(
        self,
    ) -> None:
        found = result("ConcurrencyLimitCheckThenTake.tla",
                       "ConcurrencyLimitCheckThenTake.cfg")
        assert found.violation is not None and found.violation.name == "NeverOverLimit"
        assert [kind(a or "") for a in actions(found)] == [
            "Count", "Count", "CountedLease", "Crash", "Count", "CountedLease", "CountedLease"]
