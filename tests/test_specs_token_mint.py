"""TokenMint, a task's fencing token minted across a Redis crash that loses its last
writes: its figures, that it reaches the lost lease it is about, and the shortest trace
that catches each mutant (the counter taskq minted before, a restart within the lost
writes' tick, and a clock stepped back before the crash)."""

from __future__ import annotations

from collections.abc import Set as AbstractSet
from typing import Any

from specs.TaskQueue import token_mint as tm
from specs.tlacheck import Result

import spec_runs
from spec_runs import result, walk

walk("TokenMint.tla", "TokenMint.cfg")

Step = tuple[tm.State, str, tm.State]


def figures(found: Result[Any]) -> tuple[int, int, int, int]:
    return found.distinct, found.generated, found.depth, found.queued


def actions(found: Result[Any]) -> list[str | None]:
    assert found.violation is not None
    return [step.action for step in found.violation.trace][1:]


def steps() -> AbstractSet[Step]:
    return spec_runs.steps("TokenMint.tla", "TokenMint.cfg")


def test_its_figures_match_tlcs() -> None:
    found = result("TokenMint.tla", "TokenMint.cfg")
    assert found.ok
    assert figures(found) == (8209, 21747, 14, 0)


def test_a_crash_loses_a_lease_whose_worker_runs_on_and_the_task_is_leased_again() -> None:
    # The case the floor is for: a worker holds a token the record no longer has, the
    # task ready, and the next lease gives the other worker a token above the lost one.
    relet = [(s, t) for s, label, t in steps()
             if label.startswith("Lease") and s.held[1] > s.token and s.holder == tm.NONE]
    assert relet
    assert all(t.held[2] > s.held[1] for s, t in relet if t.held[2] != s.held[2])


def test_a_token_is_minted_at_the_clocks_floor_and_above_it_within_a_tick() -> None:
    minted = [(s, t) for s, label, t in steps() if label.startswith(("Lease", "Reap"))]
    at_floor = {t.token == s.now * 2 for s, t in minted}  # PER_TICK = 2 in TokenMint.cfg
    assert at_floor == {True, False}
    assert all(t.token > s.token for s, t in minted)


def test_a_crash_rolls_the_record_back_to_its_last_fsync() -> None:
    crashed = [(s, t) for s, label, t in steps() if label == "Crash"]
    assert any(s.token != s.saved[0] for s, _ in crashed)
    assert all((t.token, t.holder) == s.saved and t.now == s.now + 1 for s, t in crashed)


def test_the_counter_mints_a_lost_lease_token_again() -> None:
    found = result("TokenMintCounter.tla", "TokenMintCounter.cfg")
    assert found.violation is not None
    assert found.violation.name == "AtMostOneCurrent"
    assert figures(found) == (38, 42, 4, 27)
    assert actions(found) == ["CounterLease(w=1)", "Crash", "CounterLease(w=2)"]
    last = found.violation.trace[-1].state
    assert (last.token, dict(last.held)) == (1, {1: 1, 2: 1})


def test_a_restart_within_the_lost_leases_tick_mints_its_token_again() -> None:
    found = result("TokenMintSameClock.tla", "TokenMintSameClock.cfg")
    assert found.violation is not None
    assert found.violation.name == "AtMostOneCurrent"
    assert figures(found) == (38, 42, 4, 27)
    assert actions(found) == ["Lease(w=1)", "SameClockCrash", "Lease(w=2)"]
    last = found.violation.trace[-1].state
    assert (last.token, dict(last.held)) == (2, {1: 2, 2: 2})


def test_a_clock_stepped_back_before_a_crash_mints_a_lost_token_again() -> None:
    # On one server too: the restart moves the clock on, but not past the lost lease.
    found = result("TokenMintStepBack.tla", "TokenMintStepBack.cfg")
    assert found.violation is not None
    assert found.violation.name == "AtMostOneCurrent"
    assert figures(found) == (560, 809, 6, 366)
    assert actions(found) == ["Tick", "Lease(w=1)", "StepBack", "Crash", "Lease(w=2)"]
    last = found.violation.trace[-1].state
    assert (last.now, last.token, dict(last.held)) == (2, 4, {1: 4, 2: 4})
