"""RateLimit, GCRA in the lease script: its figures, what it reaches, where the limit
holds and where a late lease breaks it, and the shortest trace that catches each mutant."""

from __future__ import annotations

import dataclasses
import functools
import re
from typing import Any

from specs.catalog import ROOT
from specs.RateLimit import rate_limit as rl
from specs.tlacheck import Model, Result, StepProperty, check
from specs.tlacheck import cfg as cfgs

from spec_runs import catalogued, result

ON_TIME = rl.Constants(tasks=5, interval=2, burst=2, max_time=6, late=False)


def actions(found: Result[Any]) -> list[str | None]:
    assert found.violation is not None
    return [step.action for step in found.violation.trace][1:]


def figures(found: Result[Any]) -> tuple[int, int, int, int]:
    return found.distinct, found.generated, found.depth, found.queued


def build(spec: str, config: str, **constants: object) -> Model[rl.State]:
    """The catalogued check's model, with `constants` changed in its .cfg."""
    c = catalogued(spec, config)
    loaded = cfgs.load(ROOT / c.config)
    changed = dataclasses.replace(loaded, constants={**loaded.constants, **constants})
    return c.build(changed)


@functools.cache
def steps(config: str) -> frozenset[tuple[rl.State, str, rl.State]]:
    """Every step of RateLimit's state graph under `config` (one where the checks hold)."""
    seen: set[tuple[rl.State, str, rl.State]] = set()

    def record(s: rl.State, label: str, t: rl.State) -> bool:
        seen.add((s, label, t))
        return True

    model = build("RateLimit.tla", config)
    recorder = StepProperty[rl.State]("Steps", record)
    assert check(dataclasses.replace(model, properties=[*model.properties, recorder])).ok
    return frozenset(seen)


def to_go(s: rl.State) -> int:
    """Steps each task has left at most: lease, promote, lease again once throttled."""
    left = {"ready": 3, "delayed": 2, "started": 0}
    return sum(1 if p == "ready" and s.slot[t] else left[p] for t, p in s.place.items())


class TestRateLimitAsBuilt:
    def test_the_limit_and_kept_slots_hold_in_all_42477_states_with_workers_on_time(
        self,
    ) -> None:
        found = result("RateLimit.tla", "RateLimit.cfg")
        assert found.ok
        assert figures(found) == (42477, 89632, 24, 0)

    def test_every_step_moves_time_on_or_a_task_forward_so_every_run_stops(self) -> None:
        # Then EveryTaskStarts, checked where runs stop, is "every task eventually starts".
        for s, label, t in steps("RateLimit.cfg"):
            assert t.now > s.now if label == "Tick" else to_go(t) < to_go(s), label

    def test_every_branch_of_the_lease_is_reached(self) -> None:
        kinds = {re.sub(r"\(.*?\)", "", label) for _, label, _ in steps("RateLimit.cfg")}
        assert kinds == {"Lease/started", "Lease/throttled", "Lease/slot", "Promote", "Tick"}

    def test_the_bound_is_reached_a_burst_at_once_then_one_a_spacing_later(self) -> None:
        b, t = ON_TIME.burst, ON_TIME.interval
        reached = {s.starts for _, _, s in steps("RateLimit.cfg")}
        assert any(len(x) > b and x[b] - x[0] == t and x[b - 1] == x[0] for x in reached)

    def test_a_throttled_task_starts_between_its_slot_and_its_deadline_both_reached(
        self,
    ) -> None:
        lateness = {
            t.now - s.slot[next(u for u in s.place if s.place[u] != t.place[u])]
            for s, label, t in steps("RateLimit.cfg") if label.endswith("/slot")
        }  # fmt: skip
        assert lateness == set(range(ON_TIME.ahead + 1))

    def test_a_throttled_task_waits_for_the_slot_the_next_task_would_take(self) -> None:
        throttled = [(s, t) for s, label, t in steps("RateLimit.cfg") if "throttled" in label]
        assert throttled
        assert all(t.nextSlot == s.nextSlot + ON_TIME.interval for s, t in throttled)


class TestRateLimitLate:
    def test_a_task_leased_past_its_deadline_starts_with_the_next_slots_tasks(self) -> None:
        found = result("RateLimit.tla", "RateLimit_Late.cfg")
        assert found.violation is not None and found.violation.name == "NeverOverRate"
        assert figures(found) == (30987, 61543, 14, 6352)
        assert actions(found) == [
            "Lease(t=1)/started", "Lease(t=2)/started", "Lease(t=3)/throttled", "Tick",
            "Tick", "Promote(t=3)", "Tick", "Tick", "Tick", "Lease(t=3)/slot",
            "Lease(t=4)/started", "Tick", "Lease(t=5)/started",
        ]  # fmt: skip
        # Task 3's slot is 2, its deadline 4: started at 5, within a spacing of two more.
        assert found.violation.trace[-1].state.starts == (0, 0, 5, 5, 6)

    def test_late_starts_only_catch_up_every_other_check_holds(self) -> None:
        found = result("RateLimit.tla", "RateLimit_Late_NoOverRateCheck.cfg")
        assert found.ok
        assert figures(found) == (63591, 147657, 24, 0)

    def test_one_task_too_few_hides_the_bunching(self) -> None:
        # With B = 2 it takes B + 3 tasks: two at once, one late, two on the later slots.
        assert check(build("RateLimit.tla", "RateLimit_Late.cfg", TASKS=4)).ok


class TestRateLimitMutants:
    def test_two_workers_reading_the_same_slot_both_take_it(self) -> None:
        found = result("RateLimitCheckThenTake.tla", "RateLimitCheckThenTake.cfg")
        assert found.violation is not None and found.violation.name == "NeverOverRate"
        assert figures(found) == (397, 752, 7, 254)
        assert actions(found) == [
            "Check(w=1)", "Check(w=2)", "Take(w=1,t=1)/started", "Check(w=1)",
            "Take(w=1,t=2)/started", "Take(w=2,t=3)/started",
        ]  # fmt: skip
        last = found.violation.trace[-1].state
        # Worker 2's stale write moved the slot back.
        assert (last.starts, last.nextSlot) == ((0, 0, 0), 2)

    def test_one_worker_reading_then_writing_keeps_the_limit(self) -> None:
        # The fault is the race between workers, not the two calls themselves.
        one = build("RateLimitCheckThenTake.tla", "RateLimitCheckThenTake.cfg", WORKERS=1)
        assert check(one).ok

    def test_a_promoted_task_that_takes_a_new_slot_is_throttled_again(self) -> None:
        found = result("RateLimitTakesAgain.tla", "RateLimitTakesAgain.cfg")
        assert found.violation is not None and found.violation.name == "SlotKept"
        assert figures(found) == (1979, 2721, 8, 1092)
        assert actions(found)[-2:] == ["Promote(t=3)", "TakesAgainLease(t=3)/throttled"]
        before, after = (step.state for step in found.violation.trace[-2:])
        assert (before.slot[3], after.slot[3]) == (2, 4)

    def test_a_throttled_task_left_on_ready_is_let_through_before_its_slot(self) -> None:
        found = result("RateLimitNoWait.tla", "RateLimitNoWait.cfg")
        assert found.violation is not None and found.violation.name == "NeverOverRate"
        assert figures(found) == (105, 135, 5, 75)
        assert actions(found) == [
            "NoWaitLease(t=1)/started", "NoWaitLease(t=2)/started",
            "NoWaitLease(t=3)/throttled", "NoWaitLease(t=3)/slot",
        ]  # fmt: skip
        assert found.violation.trace[-1].state.starts == (0, 0, 0)

    def test_without_the_limit_check_the_early_lease_breaks_slot_kept(self) -> None:
        model = build("RateLimitNoWait.tla", "RateLimitNoWait.cfg")
        found = check(dataclasses.replace(model, invariants=()))
        assert found.violation is not None and found.violation.name == "SlotKept"
        assert found.violation.depth == 5
