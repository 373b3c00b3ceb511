"""taskq.tools.tlatrace: each task's events become a TLA+ trace, with the model steps no event
writes inserted where the next event implies them, and a cancel's heartbeats its holder
settled without hearing marked unheard."""

from __future__ import annotations

from pathlib import Path

import pytest

from taskq.tools.tlatrace import Step, module, per_task, read_log, steps, write_log


def ev(kind: str, state: str, task: str = "t", **numbers: int) -> dict[str, str]:
    return {"type": kind, "task": task, "state": state, **{k: str(v) for k, v in numbers.items()}}


def requested(token: int) -> list[dict[str, str]]:
    """A task leased with `token`, beating, then asked to cancel and told so by a beat."""
    return [ev("leased", "running", token=token), ev("heartbeat", "running", token=token),
            ev("cancel_requested", "running", token=token, ts=50),
            ev("heartbeat", "running", token=token)]


def test_an_effect_is_inserted_before_each_completion_with_the_acking_token() -> None:
    trace = steps([ev("leased", "running", token=4, ts=10, at=20),
                   ev("completed", "completed", token=4, ts=15)])
    # Tokens are ranked among those the task's leases and reaps minted (see below).
    assert [(s.type, s.token) for s in trace] == [("leased", 1), ("effect", 1), ("completed", 1)]


def test_an_expiry_before_a_reap_and_a_tick_before_a_promotion_carry_that_events_time() -> None:
    trace = steps([ev("reaped", "delayed", token=2, ts=30, at=40),
                   ev("promoted", "pending", ts=45)])
    assert [(s.type, s.ts) for s in trace] == [
        ("expire", 30), ("reaped", 30), ("tick", 45), ("promoted", 45),
    ]


def test_fields_an_event_lacks_are_minus_one() -> None:
    assert steps([ev("promoted", "pending")])[-1] == Step("promoted", "pending")
    assert Step("promoted", "pending").tla() == (
        '[type |-> "promoted", state |-> "pending", token |-> -1, retries |-> -1, '
        'ts |-> -1, at |-> -1, prior |-> ""]'
    )


def test_a_cancel_keeps_the_state_it_says_it_left() -> None:
    cancel = {"type": "cancelled", "task": "t", "state": "cancelled", "from": "delayed"}
    assert steps([cancel]) == [Step("cancelled", "cancelled", prior="delayed")]


def test_an_ack_that_came_before_the_cancel_applied_its_effect_before_it() -> None:
    trace = steps([*requested(3), ev("completed", "completed", token=3)])
    assert [(s.type, s.token) for s in trace] == [
        ("leased", 1), ("heartbeat", 1), ("effect", 1), ("cancel_requested", 1),
        ("unheard", 1), ("completed", 1),
    ]


def test_a_holder_that_settles_untold_did_not_hear_the_beats_after_the_cancel() -> None:
    for settle in ("failed", "released"):
        trace = steps([*requested(2), ev(settle, "cancelled", token=2)])
        assert [s.type for s in trace] == ["leased", "heartbeat", "cancel_requested",
                                           "unheard", settle]


def test_a_holder_that_settles_cancelled_heard_the_beat_after_the_cancel() -> None:
    cancelled = {"type": "cancelled", "task": "t", "state": "cancelled", "from": "running",
                 "token": "2"}
    trace = steps([*requested(2), cancelled])
    assert [s.type for s in trace] == ["leased", "heartbeat", "cancel_requested",
                                       "heartbeat", "cancelled"]


def test_minted_tokens_become_their_ranks_so_the_models_count_and_tlcs_integers_fit() -> None:
    floor = 1_765_000_000_000_000  # a server time in ms, times 1000 (lua/_common.lua)
    trace = steps([ev("leased", "running", token=floor), ev("reaped", "delayed", token=floor + 1),
                   ev("promoted", "pending"), ev("leased", "running", token=floor + 9000),
                   ev("completed", "completed", token=floor + 9000)])
    assert [s.token for s in trace] == [1, -1, 2, -1, -1, 3, 3, 3]


def test_a_token_minted_twice_keeps_one_rank_for_the_model_to_reject() -> None:
    trace = steps([ev("leased", "running", token=7), ev("reaped", "delayed", token=8),
                   ev("promoted", "pending"), ev("leased", "running", token=8)])
    assert [(s.type, s.token) for s in trace if s.type in ("leased", "reaped")] == [
        ("leased", 1), ("reaped", 2), ("leased", 2)]


def test_a_token_no_lease_minted_matches_no_holder_and_never_leased_stays_zero() -> None:
    trace = steps([ev("cancel_requested", "pending", token=0),
                   ev("leased", "running", token=40), ev("completed", "completed", token=39)])
    assert [(s.type, s.token) for s in trace] == [
        ("cancel_requested", 0), ("leased", 1), ("effect", -2), ("completed", -2)]


def test_a_purge_ends_the_tasks_trace() -> None:
    trace = steps([ev("failed", "dead", token=1), ev("purged", "purged")])
    assert [s.type for s in trace] == ["failed"]


def test_times_count_from_the_logs_first_event_so_they_fit_tlcs_integers() -> None:
    traces = per_task([
        (1, ev("enqueued", "delayed", task="a", ts=1_700_000_000_000, at=1_700_000_000_500)),
        (2, ev("enqueued", "pending", task="b", ts=1_700_000_000_100, at=1_700_000_000_100)),
    ])
    assert [(s.ts, s.at) for s in traces["a"]] == [(0, 500)]
    assert [(s.ts, s.at) for s in traces["b"]] == [(100, 100)]


def test_the_module_gives_each_lease_a_worker_and_bounds_releases_and_revivals() -> None:
    trace = steps([ev("enqueued", "pending"), ev("leased", "running", token=1),
                   ev("released", "pending", token=1), ev("leased", "running", token=2),
                   ev("failed", "dead", token=2), ev("revived", "pending")])
    text = module({"t": trace, "u": steps([ev("enqueued", "pending")])}, max_retries=0)
    assert text.startswith("---- MODULE TraceData ----\nEXTENDS Integers\n")
    for line in ('TraceTasks == <<"t", "u">>', "TraceMaxRetries == 0", "TraceWorkers == 2",
                 "TraceReleases == 1", "TraceRevivals == 1"):
        assert line in text.splitlines()
    assert text.rstrip().endswith("====")


def test_an_empty_log_has_nothing_to_validate() -> None:
    with pytest.raises(ValueError, match="no task"):
        module({}, max_retries=3)


def test_a_saved_log_reads_back_as_it_was(tmp_path: Path) -> None:
    events = [(1, ev("enqueued", "pending", at=5)), (7, ev("leased", "running", token=1))]
    assert write_log(events, tmp_path / "events.jsonl") == 2
    assert read_log(tmp_path / "events.jsonl") == events
