"""RateLimit, GCRA in the lease script with two cursors: its figures, what it reaches,
the limit holding however late a throttled task is leased, and the shortest trace that
catches each mutant, the first design's kept slot among them. QueueRateLimit, the name's
and the queue's limits together with the name's rate raised or its limit removed: what
it reaches, and the trace that catches each mutant. RateDeclaration, two deploys that
declare different limits for one task: each lease applies one of them, and the line is
released only once the holder's worker stops."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Set as AbstractSet
from typing import Any

from specs.catalog import ROOT
from specs.RateLimit import queue_rate_limit as qrl
from specs.RateLimit import rate_declaration as rd
from specs.RateLimit import rate_limit as rl
from specs.tlacheck import Model, Result, check
from specs.tlacheck import cfg as cfgs

import spec_runs
from spec_runs import catalogued, result, walk

ON_TIME = rl.Constants(tasks=5, interval=2, burst=2, max_time=6, late=False, max_cancels=0,
                       max_releases=0)

Step = tuple[rl.State, str, rl.State]
QueueStep = tuple[qrl.State, str, qrl.State]


def actions(found: Result[Any]) -> list[str | None]:
    assert found.violation is not None
    return [step.action for step in found.violation.trace][1:]


def figures(found: Result[Any]) -> tuple[int, int, int, int]:
    return found.distinct, found.generated, found.depth, found.queued


def build(spec: str, config: str, **constants: object) -> Model[Any]:
    """The catalogued check's model, with `constants` changed in its .cfg."""
    c = catalogued(spec, config)
    loaded = cfgs.load(ROOT / c.config)
    changed = dataclasses.replace(loaded, constants={**loaded.constants, **constants})
    return c.build(changed)


for walked in ("RateLimit.cfg", "RateLimit_Late.cfg", "RateLimit_Cancel.cfg",
               "RateLimit_Release.cfg"):
    walk("RateLimit.tla", walked)
for walked in ("QueueRateLimit.cfg", "QueueRateLimit_Remove.cfg"):
    walk("QueueRateLimit.tla", walked)
walk("RateDeclaration.tla", "RateDeclaration.cfg")


def steps(config: str) -> AbstractSet[Step]:
    """Every step of RateLimit's state graph under `config`."""
    return spec_runs.steps("RateLimit.tla", config)


def leased(s: rl.State, t: rl.State) -> int:
    """The task a lease step popped."""
    return next(u for u in s.place if (s.place[u], s.runAt[u]) != (t.place[u], t.runAt[u]))


def progress(s: rl.State) -> tuple[int, int, int, int, int, int]:
    cancelled = sum(p == "cancelled" for p in s.place.values())
    return (s.now, len(s.starts), cancelled, s.releases, s.nextSlot,
            sum(p == "ready" for p in s.place.values()))


def lateness(config: str) -> set[int]:
    """How long after its slot each throttled task started (negative: before it)."""
    return {
        s.now - (s.runAt[u] + ON_TIME.ahead)
        for s, label, t in steps(config) if label.endswith("/started")
        for u in [leased(s, t)] if s.runAt[u] != rl.NO_RUN_AT
    }  # fmt: skip


class TestRateLimitOnTime:
    def test_the_limit_holds_in_all_50347_states_with_workers_on_time(self) -> None:
        found = result("RateLimit.tla", "RateLimit.cfg")
        assert found.ok
        assert figures(found) == (50347, 104962, 24, 0)

    def test_every_step_moves_time_starts_slots_or_a_promotion_on_so_every_run_stops(
        self,
    ) -> None:
        # No cycle in a finite graph: EveryTaskStarts, checked where runs stop, is then
        # "every task eventually starts".
        for config in ("RateLimit.cfg", "RateLimit_Late.cfg", "RateLimit_Cancel.cfg",
                       "RateLimit_Release.cfg"):
            for s, label, t in steps(config):
                assert progress(t) > progress(s), label

    def test_every_branch_of_the_lease_is_reached(self) -> None:
        kinds = {re.sub(r"\(.*?\)", "", label) for _, label, _ in steps("RateLimit.cfg")}
        assert kinds == {"Lease/started", "Lease/throttled", "Promote", "Tick"}

    def test_the_bound_is_reached_a_burst_at_once_then_one_a_spacing_later(self) -> None:
        b, t = ON_TIME.burst, ON_TIME.interval
        reached = {s.starts for _, _, s in steps("RateLimit.cfg")}
        assert any(len(x) > b and x[b] - x[0] == t and x[b - 1] == x[0] for x in reached)

    def test_a_throttled_task_starts_between_its_run_at_and_its_slot_both_reached(
        self,
    ) -> None:
        assert lateness("RateLimit.cfg") == set(range(-ON_TIME.ahead, 1))

    def test_the_start_cursor_never_passes_the_next_slot(self) -> None:
        assert all(t.startAt <= t.nextSlot for _, _, t in steps("RateLimit.cfg"))


class TestRateLimitLate:
    def test_the_limit_holds_in_all_74763_states_however_late_a_lease(self) -> None:
        found = result("RateLimit.tla", "RateLimit_Late.cfg")
        assert found.ok
        assert figures(found) == (74763, 170947, 28, 0)

    def test_throttled_tasks_start_past_their_slot(self) -> None:
        assert max(lateness("RateLimit_Late.cfg")) > 0

    def test_a_task_leased_after_later_starts_is_throttled_again(self) -> None:
        again = [
            (s, t) for s, label, t in steps("RateLimit_Late.cfg")
            if label.endswith("/throttled") and s.runAt[leased(s, t)] != rl.NO_RUN_AT
        ]  # fmt: skip
        assert again
        # Its new run_at is later: the starts that came first moved S_a on.
        assert all(t.runAt[leased(s, t)] > s.runAt[leased(s, t)] for s, t in again)


class TestRateLimitCancel:
    def test_the_limit_holds_in_all_172693_states_with_two_cancels_and_late_leases(
        self,
    ) -> None:
        found = result("RateLimit.tla", "RateLimit_Cancel.cfg")
        assert found.ok
        assert figures(found) == (172693, 619112, 28, 0)

    def test_a_cancelled_throttled_task_gives_back_the_last_slot(self) -> None:
        given_back = [
            (s, t) for s, label, t in steps("RateLimit_Cancel.cfg")
            if label.startswith("Cancel") and t.nextSlot < s.nextSlot
        ]  # fmt: skip
        assert given_back
        # Back to one spacing after the last slot still held, or S_a.
        assert all(t.nextSlot == rl.after_slots(ON_TIME, t) for _, t in given_back)

    def test_a_slot_in_the_middle_of_the_line_stays_empty(self) -> None:
        def kept(s: rl.State, t: rl.State) -> bool:
            gone = next(u for u in s.place if s.place[u] != t.place[u])
            later = [u for u in s.place if rl.throttled(t, u) and t.runAt[u] > s.runAt[gone]]
            return rl.throttled(s, gone) and bool(later) and t.nextSlot == s.nextSlot

        cancels = [(s, t) for s, label, t in steps("RateLimit_Cancel.cfg")
                   if label.startswith("Cancel")]
        assert any(kept(s, t) for s, t in cancels)

    def test_a_task_throttled_again_gives_back_its_old_slot_first(self) -> None:
        again = [
            (s, t) for s, label, t in steps("RateLimit_Late.cfg")
            if label.endswith("/throttled") and rl.throttled(s, leased(s, t))
        ]  # fmt: skip
        assert any(t.nextSlot - ON_TIME.interval < s.nextSlot for s, t in again)


class TestRateLimitRelease:
    def test_the_limit_holds_in_all_196158_states_with_the_line_released(self) -> None:
        found = result("RateLimit.tla", "RateLimit_Release.cfg")
        assert found.ok
        assert figures(found) == (196158, 535262, 29, 0)

    def test_a_release_makes_every_waiting_task_due_and_the_next_slot_the_start(
        self,
    ) -> None:
        released = [(s, t) for s, label, t in steps("RateLimit_Release.cfg")
                    if label == "Release"]
        assert released
        assert all(t.nextSlot == t.startAt and not any(rl.throttled(t, u) for u in t.place)
                   for _, t in released)
        # Some released task is throttled again later, at a later slot than it had.
        assert any(label.endswith("/throttled") and s.releases == 1
                   for s, label, _ in steps("RateLimit_Release.cfg"))


class TestRateLimitMutants:
    def test_two_workers_reading_the_same_cursors_both_start_on_them(self) -> None:
        found = result("RateLimitCheckThenTake.tla", "RateLimitCheckThenTake.cfg")
        assert found.violation is not None and found.violation.name == "NeverOverRate"
        assert figures(found) == (397, 752, 7, 254)
        assert actions(found) == [
            "Check(w=1)", "Check(w=2)", "Take(w=1,t=1)/started", "Check(w=1)",
            "Take(w=1,t=2)/started", "Take(w=2,t=3)/started",
        ]  # fmt: skip
        last = found.violation.trace[-1].state
        # Worker 2's stale write moved S_a back.
        assert (last.starts, last.startAt) == ((0, 0, 0), 2)

    def test_one_worker_reading_then_writing_keeps_the_limit(self) -> None:
        # The fault is the race between workers, not the two calls themselves.
        one = build("RateLimitCheckThenTake.tla", "RateLimitCheckThenTake.cfg", WORKERS=1)
        assert check(one).ok

    def test_a_throttled_task_left_on_ready_is_leased_again_before_its_run_at(self) -> None:
        found = result("RateLimitNoWait.tla", "RateLimitNoWait.cfg")
        assert found.violation is not None and found.violation.name == "NoEarlyStart"
        assert figures(found) == (336, 456, 6, 230)
        assert actions(found) == [
            "NoWaitLease(t=1)/started", "NoWaitLease(t=2)/started",
            "NoWaitLease(t=3)/throttled", "NoWaitLease(t=4)/throttled",
            "NoWaitLease(t=3)/throttled",
        ]  # fmt: skip
        before, after = (step.state for step in found.violation.trace[-2:])
        # Task 3 gives back a slot behind task 4's and is handed the next: a busy loop.
        assert (before.runAt[3], after.runAt[3]) == (2, 6)
        assert after.starts == (0, 0)

    def test_the_first_designs_kept_slot_leased_late_starts_with_the_next_slots_tasks(
        self,
    ) -> None:
        found = result("RateLimitKeptSlot.tla", "RateLimitKeptSlot.cfg")
        assert found.violation is not None and found.violation.name == "NeverOverRate"
        assert figures(found) == (30987, 61543, 14, 6352)
        assert actions(found) == [
            "KeptSlotLease(t=1)/started", "KeptSlotLease(t=2)/started",
            "KeptSlotLease(t=3)/throttled", "Tick", "Tick", "Promote(t=3)", "Tick", "Tick",
            "Tick", "KeptSlotLease(t=3)/slot", "KeptSlotLease(t=4)/started", "Tick",
            "KeptSlotLease(t=5)/started",
        ]  # fmt: skip
        # Task 3's slot is 4: started at 5, within a spacing of two more.
        assert found.violation.trace[-1].state.starts == (0, 0, 5, 5, 6)

    def test_a_cancel_that_gives_back_no_slot_leaves_the_next_slot_behind_it(
        self,
    ) -> None:
        found = result("RateLimitGhostSlot.tla", "RateLimitGhostSlot.cfg")
        assert found.violation is not None and found.violation.name == "NoGhostSlot"
        assert figures(found) == (262, 512, 5, 192)
        assert actions(found) == [
            "GhostLease(t=1)/started", "GhostLease(t=2)/started",
            "GhostLease(t=3)/throttled", "GhostCancel(t=3)",
        ]  # fmt: skip
        last = found.violation.trace[-1].state
        # Task 3 held slot 4 and no one waits now: the next task would be handed 6.
        assert (last.startAt, last.nextSlot) == (4, 6)

    def test_a_release_that_keeps_the_next_slot_leaves_it_behind_no_one(self) -> None:
        found = result("RateLimitReleaseKeepsNext.tla", "RateLimitReleaseKeepsNext.cfg")
        assert found.violation is not None and found.violation.name == "NoGhostSlot"
        assert figures(found) == (107, 137, 5, 77)
        assert actions(found) == [
            "Lease(t=1)/started", "Lease(t=2)/started", "Lease(t=3)/throttled",
            "ReleaseKeepsNext",
        ]  # fmt: skip
        last = found.violation.trace[-1].state
        assert (last.startAt, last.nextSlot, last.runAt[3]) == (4, 6, rl.NO_RUN_AT)

    def test_without_cancels_the_old_design_still_loses_a_late_tasks_slot(self) -> None:
        late = build("RateLimitGhostSlot.tla", "RateLimitGhostSlot.cfg", LATE=True,
                     MAX_CANCELS=0)
        found = check(late)
        assert found.violation is not None and found.violation.name == "NoGhostSlot"

    def test_the_first_design_holds_with_workers_on_time(self) -> None:
        assert check(build("RateLimitKeptSlot.tla", "RateLimitKeptSlot.cfg", LATE=False)).ok

    def test_one_task_too_few_hides_the_first_designs_bunching(self) -> None:
        # With B = 2 it takes B + 3 tasks: two at once, one late, two on the later slots.
        assert check(build("RateLimitKeptSlot.tla", "RateLimitKeptSlot.cfg", TASKS=4)).ok


def queue_steps(config: str = "QueueRateLimit.cfg") -> AbstractSet[QueueStep]:
    """Every step of QueueRateLimit's state graph under `config` (the raise's, or the
    removal's)."""
    return spec_runs.steps("QueueRateLimit.tla", config)


class TestQueueRateLimit:
    def test_both_limits_and_the_raise_hold_in_all_36963_states(self) -> None:
        found = result("QueueRateLimit.tla", "QueueRateLimit.cfg")
        assert found.ok
        assert figures(found) == (36963, 73674, 20, 0)

    def test_every_action_is_reached_and_each_limit_refuses_alone_and_with_the_other(
        self,
    ) -> None:
        kinds = {re.sub(r"\(.*?\)", "", label) for _, label, _ in queue_steps()}
        assert kinds == {"Lease/started", "Lease/throttled", "Promote", "Raise", "Tick"}
        removal = {re.sub(r"\(.*?\)", "", label)
                   for _, label, _ in queue_steps("QueueRateLimit_Remove.cfg")}
        assert removal == {"Lease/started", "Lease/throttled", "Promote", "Remove", "Tick"}
        refusing = {
            frozenset(lim for lim in qrl.LIMITS if t.slot[u][lim] != qrl.NONE)
            for s, label, t in queue_steps() if label.endswith("/throttled")
            for u in s.place if s.place[u] == "ready" and t.place[u] == "delayed"
        }  # fmt: skip
        assert refusing == {frozenset({"name"}), frozenset({"queue"}),
                            frozenset({"name", "queue"})}

    def test_a_released_task_refused_by_the_queue_keeps_its_queue_slot(self) -> None:
        kept = [
            (s, t) for s, label, t in queue_steps() if label.endswith("/throttled")
            for u in s.place
            if s.place[u] == "ready" and t.place[u] == "delayed"
            and s.slot[u]["queue"] != qrl.NONE and t.slot[u] == s.slot[u]
        ]  # fmt: skip
        assert kept
        # Only a task the raise made due early: its queue slot is still to come.
        assert all(s.releases == 1 for s, _ in kept)

    def test_the_name_runs_faster_after_the_raise_than_its_first_rate_allows(self) -> None:
        # Starts after the raise come closer than the first spacing: the raise takes effect.
        c = qrl.Constants.from_cfg(cfgs.load(ROOT / "RateLimit/QueueRateLimit.cfg"))
        ends = {t.starts for _, _, t in queue_steps() if t.releases == 1}
        assert any(not qrl.bounded(c, x, c.interval) for x in ends)

    def test_the_limits_and_the_removal_hold_in_all_27208_states(self) -> None:
        found = result("QueueRateLimit.tla", "QueueRateLimit_Remove.cfg")
        assert found.ok
        assert figures(found) == (27208, 55318, 20, 0)

    def test_after_the_removal_a_task_waits_only_for_a_queue_slot_and_some_wait(
        self,
    ) -> None:
        after = [t for _, _, t in queue_steps("QueueRateLimit_Remove.cfg")
                 if t.releases == 1]
        # The removal released tasks the name's limit held back, and none holds its slot.
        assert all(t.slot[u]["name"] == qrl.NONE for t in after for u in t.slot)
        assert any(t.place[u] == "delayed" and t.slot[u]["queue"] != qrl.NONE
                   for t in after for u in t.place)
        # Starts after it come closer than the name's spacing allows: it no longer holds.
        c = qrl.Constants.from_cfg(cfgs.load(ROOT / "RateLimit/QueueRateLimit_Remove.cfg"))
        assert any(not qrl.bounded(c, t.starts, c.interval) for t in after)

    def test_keeping_a_removed_limits_line_holds_its_tasks_back_for_nothing(self) -> None:
        found = result("QueueRateLimitKeepLine.tla", "QueueRateLimitKeepLine.cfg")
        assert found.violation is not None
        assert found.violation.name == "NothingWaitsForARemovedLimit"
        assert figures(found) == (111, 147, 5, 78)
        assert actions(found) == ["Lease(t=1)/started", "Lease(t=2)/started",
                                  "Lease(t=3)/throttled", "KeepLineRemove"]
        last = found.violation.trace[-1].state
        # Task 3 waits until 3 for the name's slot 6, though its queue slot 4 is due at 2.
        assert (last.runAt[3], last.slot[3]["name"], last.slot[3]["queue"]) == (3, 6, 4)

    def test_retaking_a_slot_sends_a_released_task_to_the_back_of_the_queues_line(
        self,
    ) -> None:
        found = result("QueueRateLimitRetake.tla", "QueueRateLimitRetake.cfg")
        assert found.violation is not None and found.violation.name == "NoPlaceLost"
        assert figures(found) == (2387, 2939, 8, 1415)
        assert actions(found) == [
            "RetakeLease(t=1)/started", "RetakeLease(t=2)/started",
            "RetakeLease(t=3)/throttled", "RetakeLease(t=4)/throttled", "Raise",
            "Promote(t=3)", "RetakeLease(t=3)/throttled",
        ]  # fmt: skip
        before, last = (step.state for step in found.violation.trace[-2:])
        # Task 3 held queue slot 4, ahead of task 4's 6; it now waits behind it, for 8.
        assert (before.slot[3]["queue"], last.slot[3]["queue"]) == (4, 8)
        assert (before.runAt[3], last.runAt[3]) == (0, 6)


DeclarationStep = tuple[rd.State, str, rd.State]


class TestRateDeclaration:
    def steps(self) -> AbstractSet[DeclarationStep]:
        return spec_runs.steps("RateDeclaration.tla", "RateDeclaration.cfg")

    def test_its_figures_match_tlcs(self) -> None:
        found = result("RateDeclaration.tla", "RateDeclaration.cfg")
        assert found.ok
        assert figures(found) == (7440, 20673, 13, 0)

    def test_a_lease_defers_only_while_a_holder_is_up(self) -> None:
        kinds = {label.rsplit("/", 1)[-1] for _, label, _ in self.steps() if "/" in label}
        assert kinds == {"own", "defers", "releases"}
        for s, label, _ in self.steps():
            if label.endswith("/defers"):
                assert any(s.up[h] for h in s.holders) and s.stored != rd.NONE

    def test_a_line_is_released_only_once_every_holder_stopped(self) -> None:
        releasing = [(s, t) for s, label, t in self.steps() if label.endswith("/releases")]
        assert releasing
        assert all(not any(s.up[h] for h in s.holders) for s, _ in releasing)
        # Some release follows two holders' stops: the holders of a deploy, not its last.
        assert any(len(s.holders) == 2 for s, _ in releasing)
        # At most one release per stop: three, the last worker never releasing.
        assert max(t.releases for _, t in releasing) == 3

    def test_the_mutant_without_holders_releases_at_the_second_deploys_first_lease(
        self,
    ) -> None:
        found = result("RateDeclarationEveryLease.tla", "RateDeclarationEveryLease.cfg")
        assert found.violation is not None
        assert found.violation.name == "NoThrash"
        assert figures(found) == (12, 12, 3, 9)
        assert actions(found) == ["EveryLease(w=1)/own", "EveryLease(w=3)/releases"]
        last = found.violation.trace[-1].state
        assert (last.stored, last.holders, last.releases, last.stops) == (2, {3}, 1, 0)

    def test_the_last_holder_mutant_switches_while_an_older_worker_runs(self) -> None:
        found = result("RateDeclarationLastHolder.tla", "RateDeclarationLastHolder.cfg")
        assert found.violation is not None
        assert found.violation.name == "KeepsARunningDeploysLimit"
        assert figures(found) == (237, 389, 5, 176)
        assert actions(found) == ["LastHolderLease(w=1)/own", "LastHolderLease(w=2)/own",
                                  "Stop(w=2)", "LastHolderLease(w=3)/releases"]
        before = found.violation.trace[-2].state
        assert before.up[1] and before.holders == {1, 2}  # worker 1 of the old deploy runs
