"""taskq.tools.chaos.ledger_checks: the ledger set against the event log finds a completed
task with no charge and a charge by a run the log never shows, and takes a crash to lose
only what Redis acknowledged in its last moments."""

from __future__ import annotations

from taskq.tools.chaos.ledger_checks import (
    LOSS_WINDOW_SECONDS,
    leased_tokens,
    ledger_verdict,
    lost_to_a_crash,
)
from taskq.tools.ledger import Charge

Rows = list[tuple[int, dict[str, str]]]


def ran(*tasks: tuple[str, int]) -> Rows:
    """Each task enqueued, leased with its token and completed."""
    rows: Rows = []
    for task, token in tasks:
        for kind, state in (("enqueued", "pending"), ("leased", "running"),
                            ("completed", "completed")):
            rows.append((len(rows) + 1, {"type": kind, "task": task, "state": state,
                                         "token": str(token)}))
    return rows


FINAL = {"a": "completed", "b": "completed"}


def test_each_completed_task_charged_by_its_own_run_passes() -> None:
    ok, detail = ledger_verdict(ran(("a", 1), ("b", 2)), FINAL,
                                [Charge("a", 1, 0), Charge("b", 2, 0)], {"a", "b"}, False)
    assert ok, detail
    assert detail == "2 charges; 0 completed tasks with none; 0 by a run the log does not show"


def test_a_completed_task_with_no_charge_fails() -> None:
    ok, detail = ledger_verdict(ran(("a", 1), ("b", 2)), FINAL, [Charge("a", 1, 0)],
                                {"a", "b"}, True)
    assert not ok
    assert "1 completed tasks with none, first: b" in detail


def test_a_charge_by_a_token_or_a_task_the_log_never_shows_fails_unless_writes_were_lost(
) -> None:
    charges = [Charge("a", 1, 0), Charge("b", 2, 0), Charge("b", 999, 0), Charge("z", 1, 0)]
    ok, detail = ledger_verdict(ran(("a", 1), ("b", 2)), FINAL, charges, {"a", "b"}, False)
    assert not ok
    assert "2 by a run the log does not show, first: b token 999" in detail
    ok, detail = ledger_verdict(ran(("a", 1), ("b", 2)), FINAL, charges, {"a", "b"}, True)
    assert ok and detail.endswith("(Redis may have lost their leases)")


def test_a_task_not_charged_by_design_is_left_out() -> None:
    ok, _ = ledger_verdict(ran(("a", 1), ("b", 2)), FINAL, [Charge("a", 1, 0)], {"a"}, False)
    assert ok


def test_leased_tokens_are_read_per_task() -> None:
    rows = [*ran(("a", 1)), (7, {"type": "leased", "task": "a", "token": "3"}),
            (8, {"type": "leased", "task": "b", "token": "x"})]
    assert leased_tokens(rows) == {"a": {1, 3}}


def test_a_crash_loses_only_what_was_acknowledged_just_before_it() -> None:
    crashes = [100.0, 200.0]
    assert lost_to_a_crash(99.0, crashes)
    assert lost_to_a_crash(200.0 - LOSS_WINDOW_SECONDS, crashes)
    assert not lost_to_a_crash(150.0, crashes)  # long before the second, after the first
    assert lost_to_a_crash(100.3, crashes)  # answered before it, the clock read after
    assert not lost_to_a_crash(101.0, crashes)  # after it: nothing to lose
    assert not lost_to_a_crash(99.0, [])
