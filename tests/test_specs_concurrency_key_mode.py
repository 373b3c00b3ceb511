"""ConcurrencyKeyMode, a concurrency limit whose declaration a redeploy flips between
kept per key and not while its tasks wait and run: its figures, where a popped task is
counted and waits under each declaration, the lists a lease sends back, and the mutant
that counts and parks every task by its record's key (the defect: after the key was
dropped, a limit of one ran one task per key)."""

from __future__ import annotations

from collections.abc import Set as AbstractSet
from typing import Any

from specs.catalog import ROOT
from specs.ConcurrencyLimit import concurrency_key_mode as ckm
from specs.tlacheck import Result
from specs.tlacheck import cfg as cfgs

import spec_runs
from spec_runs import result, walk

Step = tuple[ckm.State, str, ckm.State]
C = ckm.Constants(tasks=4, keys=2, workers=2, most=1, flips=2, max_cancels=1)

walk("ConcurrencyKeyMode.tla", "ConcurrencyKeyMode.cfg")


def steps() -> AbstractSet[Step]:
    return spec_runs.steps("ConcurrencyKeyMode.tla", "ConcurrencyKeyMode.cfg")


def kind(label: str) -> str:
    return label.partition("(")[0]


def leases(keyed: bool) -> list[tuple[ckm.State, ckm.State]]:
    """Every lease step taken while the limit is (or is not) kept per key."""
    return [(s, t) for s, label, t in steps() if kind(label) == "Lease" and s.keyed == keyed]


def where(s: ckm.State, u: int) -> int | None:
    """The group whose parked list holds u, if any."""
    return next((g for g in C.all_groups if u in s.line[g]), None)


def parked_by(s: ckm.State, t: ckm.State) -> list[int]:
    """The task a lease parked, if any: one that was not parked before it, or one it
    sent back from a list, popped and parked in another."""
    return [u for u in C.all_tasks if t.place[u] == "parked"
            and (s.place[u] != "parked" or where(s, u) != where(t, u))]


def started(s: ckm.State, t: ckm.State) -> list[int]:
    return [u for u in C.all_tasks if s.place[u] != "leased" and t.place[u] == "leased"]


def actions(found: Result[Any]) -> list[str]:
    assert found.violation is not None
    return [kind(step.action or "") for step in found.violation.trace][1:]


class TestConcurrencyKeyMode:
    def test_every_check_holds_in_all_4630_states(self) -> None:
        found = result("ConcurrencyKeyMode.tla", "ConcurrencyKeyMode.cfg")
        assert found.ok
        assert (found.distinct, found.generated, found.depth, found.queued) == (
            4630, 15997, 11, 0)

    def test_the_constants_are_the_cfgs(self) -> None:
        cfg = cfgs.load(ROOT / "ConcurrencyLimit" / "ConcurrencyKeyMode.cfg")
        assert ckm.Constants.from_cfg(cfg) == C
        assert [C.key(t) for t in C.all_tasks] == [1, 2, 0, 1]

    def test_a_task_parked_while_the_limit_is_not_kept_per_key_waits_in_the_names_list(
        self,
    ) -> None:
        parked = [(t, u) for s, t in leases(keyed=False) for u in parked_by(s, t)]
        assert any(C.key(u) != ckm.NAME for _, u in parked)
        for t, u in parked:
            assert u in t.line[ckm.NAME]

    def test_a_task_parked_while_the_limit_is_kept_per_key_waits_in_its_keys_list(
        self,
    ) -> None:
        parked = [(t, u) for s, t in leases(keyed=True) for u in parked_by(s, t)]
        assert parked
        for t, u in parked:
            assert u in t.line[C.key(u)]

    def test_a_keyed_list_is_sent_back_whole_while_the_limit_is_not_kept_per_key(
        self,
    ) -> None:
        waiting = [(s, t, g) for s, t in leases(keyed=False) for g in C.all_groups
                   if g != ckm.NAME and s.line[g]]
        # With no slot free, too: its tasks are regrouped into the name's list.
        assert any(ckm.counted(C, s, ckm.NAME) >= C.most for s, _, _ in waiting)
        for _, t, g in waiting:
            assert t.line[g] == ()

    def test_a_keyed_run_left_from_before_the_key_was_dropped_holds_the_names_slot(
        self,
    ) -> None:
        left = [(s, t) for s, t in leases(keyed=False)
                if any(s.place[u] == "leased" and u not in s.fresh and C.key(u) != ckm.NAME
                       for u in C.all_tasks)]
        assert left
        for s, t in left:
            assert started(s, t) == []

    def test_a_popped_tasks_promise_is_dropped_from_every_group(self) -> None:
        popped_back = [(t, u) for s, t in leases(keyed=True) + leases(keyed=False)
                       for u in C.all_tasks
                       if s.place[u] == "back" and t.place[u] in ("parked", "leased")]
        assert {t.keyed for t, _ in popped_back} == {True, False}
        for t, u in popped_back:
            assert all(u not in promised for promised in t.promised.values())

    def test_a_keyed_task_left_in_the_names_list_is_regrouped_by_its_key_once_popped(
        self,
    ) -> None:
        regrouped = [(t, u) for s, t in leases(keyed=True) for u in C.all_tasks
                     if C.key(u) != ckm.NAME and u in s.promised[ckm.NAME]
                     and t.place[u] == "parked"]
        assert regrouped
        for t, u in regrouped:
            assert u in t.line[C.key(u)]

    def test_a_cancel_finds_a_keyed_task_in_the_names_list(self) -> None:
        found = [(s, t, u) for s, label, t in steps() if kind(label) == "Cancel"
                 for u in C.all_tasks
                 if C.key(u) != ckm.NAME and u in s.line[ckm.NAME]
                 and t.place[u] == "cancelled"]
        assert found
        for _, t, u in found:
            assert all(u not in line for line in t.line.values())


class TestMutant:
    def test_counted_by_its_records_key_a_limit_of_one_runs_two_tasks_once_the_key_is_dropped(
        self,
    ) -> None:
        found = result("ConcurrencyKeyModeByRecord.tla", "ConcurrencyKeyModeByRecord.cfg")
        assert found.violation is not None
        assert found.violation.name == "UnkeyedNeverOverLimit"
        assert actions(found) == ["Redeploy", "ByRecordLease", "ByRecordLease"]
        last = found.violation.trace[-1].state
        running = [u for u in C.all_tasks if last.place[u] == "leased"]
        assert not last.keyed and C.most == 1
        assert len(running) == 2 and len({C.key(u) for u in running}) == 2
