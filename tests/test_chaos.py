"""The chaos command itself: it must see the bug it guards against, and replay by seed;
its tick check must see a tick missing, doubled or charged other than once; its cancel
checks must see a cancelled task lost or run after its cancel; its P1 check must see a
lease out of priority order; its memory check must take the ready lists of every
priority for the fixed keys they are."""

from __future__ import annotations

import random
import re
import subprocess
import sys
from pathlib import Path

import pytest

from taskq.broker import Broker, NewTask
from taskq.cli import main
from taskq.keys import SCHEDULE_TASK_PREFIX, schedule_task_id
from taskq.results import Cancellation
from taskq.tools.chaos.cancel_checks import CancelChecks, cancel_checks, count_cancels
from taskq.tools.chaos.canceller import CANCEL_EVERY, Cancels
from taskq.tools.chaos.checks import (
    Check,
    Findings,
    concurrency_check,
    count_ticks,
    final_states,
    flows_check,
    memory_check,
    priority_check,
    stray_states,
    ticks_check,
)
from taskq.tools.chaos.flows import (
    FlowsSent,
    count_flows,
    expected,
    flow_ids,
    triggers_expected,
)
from taskq.tools.chaos.producer import priorities, task_names
from taskq.tools.chaos.queue import ChaosQueue
from taskq.tools.chaos.rate_checks import over_rate, rate_verdict
from taskq.tools.chaos.run import MIN_TICKS
from taskq.tools.chaos.schedules import (
    LIMITED_TASK,
    PERIODS,
    THROTTLED_BURST,
    THROTTLED_PER_SECOND,
    THROTTLED_TASK,
    period_ms,
)
from taskq.tools.ledger import Charge, Ledger
from taskq.tools.tlatrace import read_log
from taskq.tools.tracecheck import read_log as read_events
from taskq.tools.tracecheck import validate

Rows = list[tuple[int, dict[str, str]]]


def chaos(tmp_path: Path, *options: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "taskq", "chaos", "--dir", str(tmp_path / "run"), *options],
        capture_output=True, text=True, timeout=240, check=False,
    )


def tick_check_of(rows: Rows, charges: dict[str, int], lost_ok: bool = False,
                  handled: dict[str, int] | None = None) -> tuple[bool, str]:
    """The tick check's verdict and detail on `rows` and `charges`, for the run's PERIODS."""
    periods = {name: period_ms(name) for name in PERIODS}
    check = ticks_check(count_ticks(rows, periods, final_states(rows), charges, handled),
                        lost_ok)
    return check.ok, check.detail


def ticked_log(ticks: dict[str, list[int]]) -> tuple[Rows, dict[str, int]]:
    """A log in which each listed tick's task was enqueued, leased and completed, and a
    ledger in which each charged once."""
    rows: Rows = []
    charges: dict[str, int] = {}
    for schedule, times in ticks.items():
        for tick in times:
            task = schedule_task_id(schedule, tick)
            for kind, state in (("enqueued", "pending"), ("leased", "running"),
                                ("completed", "completed")):
                rows.append((len(rows) + 1, {"type": kind, "task": task, "state": state}))
            charges[task] = 1
    return rows, charges


def every_tick(first_period: int, count: int) -> dict[str, list[int]]:
    """`count` consecutive ticks of each schedule, from its `first_period`-th period."""
    return {name: [(first_period + i) * period_ms(name) for i in range(count)]
            for name in PERIODS}


class TestTickCheck:
    def test_each_tick_once_and_charged_once_passes(self) -> None:
        ok, detail = tick_check_of(*ticked_log(every_tick(2_000_000_000, 5)))
        assert ok, detail
        assert "chaos-1s (every 1000 ms): 5 ticks, 5 tasks, 5 enqueued events, 5 completed, " \
               "5 effects" in detail

    def test_a_skipped_tick_fails(self) -> None:
        ticks = every_tick(2_000_000_000, 5)
        skipped = ticks["chaos-700ms"].pop(2)
        ok, detail = tick_check_of(*ticked_log(ticks))
        assert not ok
        assert "5 ticks, 4 tasks" in detail and f"missing [{skipped}]" in detail

    def test_a_tick_enqueued_twice_fails(self) -> None:
        rows, charges = ticked_log(every_tick(2_000_000_000, 5))
        again = next(f for _, f in rows if f["type"] == "enqueued")
        ok, detail = tick_check_of([*rows, (len(rows) + 1, dict(again))], charges)
        assert not ok
        assert "6 enqueued events" in detail and "enqueued twice" in detail

    def test_a_tick_off_its_period_fails(self) -> None:
        ticks = every_tick(2_000_000_000, 5)
        ticks["chaos-1s"][-1] += 1
        ok, detail = tick_check_of(*ticked_log(ticks))
        assert not ok
        assert "off the period" in detail

    def test_a_tick_charged_twice_or_never_fails(self) -> None:
        rows, charges = ticked_log(every_tick(2_000_000_000, 5))
        twice, never = sorted(charges)[:2]
        charges[twice], charges[never] = 2, 0
        ok, detail = tick_check_of(rows, charges)
        assert not ok
        assert "not charged once" in detail
        assert f"('{twice}', 2)" in detail and f"('{never}', 0)" in detail

    def test_an_unfinished_tick_task_fails(self) -> None:
        rows, charges = ticked_log(every_tick(2_000_000_000, 5))
        del rows[-1]
        ok, detail = tick_check_of(rows, charges)
        assert not ok
        assert "unfinished" in detail

    def test_a_schedule_that_never_fired_fails(self) -> None:
        ticks = every_tick(2_000_000_000, 5)
        ticks["chaos-1s"] = []
        ok, detail = tick_check_of(*ticked_log(ticks))
        assert not ok
        assert "chaos-1s (every 1000 ms): 0 ticks, 0 tasks" in detail and "no tick fired" in detail

    def test_a_tick_redis_handled_after_the_last_task_fails(self) -> None:
        ticks = every_tick(2_000_000_000, 5)
        last = ticks["chaos-1s"][-1]
        rows, charges = ticked_log(ticks)
        assert tick_check_of(rows, charges, handled={"chaos-1s": last})[0]
        ok, detail = tick_check_of(rows, charges, handled={"chaos-1s": last + 2000})
        assert not ok
        assert "7 ticks, 5 tasks" in detail and f"missing [{last + 1000}, {last + 2000}]" in detail

    def test_a_charge_without_its_task_passes_only_where_redis_may_lose_writes(self) -> None:
        rows, charges = ticked_log(every_tick(2_000_000_000, 5))
        charges[schedule_task_id("chaos-1s", 3_000_000_000_000)] = 1
        assert not tick_check_of(rows, charges)[0]
        assert tick_check_of(rows, charges, lost_ok=True)[0]


def history(task: str, *events: tuple[str, str, int, int], source: str = "") -> Rows:
    """`task`'s events as (type, state, token, ts); a cancelled one says it left `source`."""
    rows: Rows = []
    for kind, state, token, ts in events:
        fields = {"type": kind, "task": task, "state": state, "token": str(token), "ts": str(ts)}
        if kind == "cancelled":
            fields["from"] = source
        rows.append((0, fields))
    return rows


ENQUEUED = ("enqueued", "pending", 0, 100)
LEASED = ("leased", "running", 1, 200)
REQUESTED = ("cancel_requested", "running", 1, 300)
TOLD = ("heartbeat", "running", 1, 400)
ACK_CANCELLED = ("cancelled", "cancelled", 1, 500)


def cancel_verdicts(rows: Rows, charges: list[Charge], asked: dict[str, str],
                    doomed: tuple[str, ...] = (), same_clock: bool = True) -> CancelChecks:
    """The C1 checks on `rows` and `charges`, the canceller having asked about each task
    in `asked` and been answered with its outcome ('outcome state')."""
    cancels = Cancels(doomed=list(doomed))
    for task, answer in asked.items():
        outcome, state = answer.split()
        cancels.asked[task] = Cancellation(task, outcome, state)  # type: ignore[arg-type]
    count = count_cancels(rows, final_states(rows), cancels, charges, same_clock, False)
    return cancel_checks(count)


RUNNING_CANCEL = history("r", ENQUEUED, LEASED, REQUESTED, TOLD, ACK_CANCELLED, source="running")
PENDING_CANCEL = history("p", ENQUEUED, ("cancelled", "cancelled", 0, 300), source="pending")
ACKED_FIRST = history("a", ENQUEUED, LEASED, REQUESTED, ("completed", "completed", 1, 350))
CLEAN = [*RUNNING_CANCEL, *PENDING_CANCEL, *ACKED_FIRST]
ASKED = {"r": "requested running", "p": "cancelled pending", "a": "requested running"}


class TestCancelChecks:
    def test_cancels_that_ended_as_their_answers_allow_with_effects_before_them_pass(
        self,
    ) -> None:
        verdicts = cancel_verdicts(CLEAN, [Charge("a", 1, 250), Charge("r", 1, 290)], ASKED)
        assert verdicts.none_lost[0], verdicts.none_lost[1]
        assert verdicts.none_after[0], verdicts.none_after[1]
        assert "2 ended cancelled (1 cancelled from pending, 1 cancelled from running); " \
               "1 completed, their ack first" in verdicts.none_lost[1]
        assert "1 effects of tasks ended cancelled, 1 of tasks whose ack came first: " \
               "2 written before the cancel" in verdicts.none_after[1]

    def test_a_task_answered_cancelled_that_completed_fails(self) -> None:
        rows = [*CLEAN, *history("c", ENQUEUED, LEASED, ("completed", "completed", 1, 300))]
        verdicts = cancel_verdicts(rows, [], {**ASKED, "c": "cancelled pending"})
        assert not verdicts.none_lost[0]
        assert "ended otherwise: [('c', 'completed')]" in verdicts.none_lost[1]

    def test_a_cancel_nobody_asked_for_fails(self) -> None:
        verdicts = cancel_verdicts(CLEAN, [], {"r": "requested running", "a": "requested running"})
        assert not verdicts.none_lost[0]
        assert "cancelled but never asked: ['p']" in verdicts.none_lost[1]

    def test_a_doomed_task_left_in_the_dlq_fails(self) -> None:
        rows = [*CLEAN, *history("x", ENQUEUED, LEASED, ("failed", "dead", 1, 300))]
        verdicts = cancel_verdicts(rows, [], {**ASKED, "x": "unchanged dead"}, doomed=("x",))
        assert not verdicts.none_lost[0]
        assert "('x', 'dead')" in verdicts.none_lost[1]

    def test_an_effect_by_a_run_leased_after_the_cancel_fails(self) -> None:
        verdicts = cancel_verdicts(CLEAN, [Charge("p", 1, 400)], ASKED, same_clock=False)
        assert not verdicts.none_after[0]
        assert "1 effects by a run begun after one" in verdicts.none_after[1]

    def test_a_lease_after_a_cancel_fails(self) -> None:
        rows = [*CLEAN, (0, {"type": "leased", "task": "p", "state": "running", "token": "1",
                             "ts": "400"})]
        verdicts = cancel_verdicts(rows, [], ASKED)
        assert not verdicts.none_after[0]
        assert "1 leases after a cancel" in verdicts.none_after[1]

    def test_an_effect_written_after_its_run_was_told_with_no_renewal_before_fails(
        self,
    ) -> None:
        verdicts = cancel_verdicts(CLEAN, [Charge("r", 1, 450)], ASKED)
        assert not verdicts.none_after[0]
        assert "told first: [('r', 1)]" in verdicts.none_after[1]

    def test_an_effect_written_after_the_cancel_but_before_its_run_was_told_passes(
        self,
    ) -> None:
        verdicts = cancel_verdicts(CLEAN, [Charge("r", 1, 350)], ASKED)
        assert verdicts.none_after[0], verdicts.none_after[1]
        assert "1 after it but before a renewal told their run" in verdicts.none_after[1]

    def test_an_effect_let_in_by_a_renewal_before_the_cancel_may_be_written_after(
        self,
    ) -> None:
        renewed = history("r", ENQUEUED, LEASED, ("heartbeat", "running", 1, 250), REQUESTED,
                          TOLD, ACK_CANCELLED, source="running")
        rows = [*renewed, *PENDING_CANCEL, *ACKED_FIRST]
        verdicts = cancel_verdicts(rows, [Charge("r", 1, 450)], ASKED)
        assert verdicts.none_after[0], verdicts.none_after[1]
        assert "1 after that but let in by a renewal before the cancel" in verdicts.none_after[1]

    def test_without_one_clock_the_times_are_not_judged(self) -> None:
        verdicts = cancel_verdicts(CLEAN, [Charge("r", 1, 450)], ASKED, same_clock=False)
        assert verdicts.none_after[0]
        assert "times not compared" in verdicts.none_after[1]


def priority_log(*order: str) -> Rows:
    """`a` (priority 9) and `b` (the default) enqueued, then each leased and completed in
    `order`."""
    rows: Rows = [(1, {"type": "enqueued", "task": "a", "state": "pending", "priority": "9"}),
                  (2, {"type": "enqueued", "task": "b", "state": "pending"})]
    for task in order:
        for kind, state in (("leased", "running"), ("completed", "completed")):
            rows.append((len(rows) + 1, {"type": kind, "task": task, "state": state,
                                         "token": "1"}))
    return rows


def limited_log(*steps: tuple[str, str, dict[str, str]]) -> list[tuple[int, dict[str, str]]]:
    """Rows of (task, event type, more fields); every task enqueued first as the
    limited task, x as another."""
    tasks = sorted({task for task, _, _ in steps})
    rows = [{"task": t, "type": "enqueued", "state": "pending",
             "name": "other" if t == "x" else LIMITED_TASK} for t in tasks]
    rows += [{"task": t, "type": kind, **more} for t, kind, more in steps]
    return list(enumerate(rows, start=1))


class TestConcurrencyLimit:
    def test_the_producer_sends_about_a_tenth_as_the_limited_task(self) -> None:
        drawn = task_names(7, 4000)
        assert drawn == task_names(7, 4000) != task_names(8, 4000)
        assert 0.08 < drawn.count(LIMITED_TASK) / len(drawn) < 0.12
        # The rate-limited task ten at once in the middle of every thousand.
        assert [i for i, n in enumerate(drawn) if n == THROTTLED_TASK] == [
            i for k in range(0, 4000, 1000) for i in range(k + 500, k + 510)]
        assert set(task_names(7, 4000, shards=3)) == {"taskq.simulate"}

    def test_leases_within_the_limit_pass_counting_every_way_a_lease_ends(self) -> None:
        steps = [(t, "leased", {}) for t in "abcd"] + [("x", "leased", {})]
        steps += [("a", "completed", {}), ("b", "failed", {}), ("c", "released", {}),
                  ("d", "cancelled", {"from": "running"}), ("e", "parked", {}),
                  ("e", "unparked", {}), ("e", "leased", {}), ("f", "leased", {}),
                  ("g", "leased", {}), ("h", "leased", {})]
        check = concurrency_check(limited_log(*steps))
        assert check.ok, check.detail
        assert check.detail == ("at most 4 at once over 8 leases; 1 times a task waited "
                                "parked for a slot")

    def test_each_account_is_counted_on_its_own(self) -> None:
        rows = limited_log(*[(t, "leased", {}) for t in "abcdefgh"])
        keyed = [(seq, {**f, "limit_key": "acct-1" if f["task"] in "abcd" else "acct-2"})
                 for seq, f in rows]
        check = concurrency_check(keyed)
        assert check.ok and check.detail.startswith("at most 4 at once over 8 leases")
        assert not concurrency_check(rows).ok  # one account: eight at once

    def test_a_fifth_run_at_once_fails(self) -> None:
        steps = [(t, "leased", {}) for t in "abcd"]
        steps += [("a", "cancelled", {"from": "pending"}), ("e", "leased", {})]
        check = concurrency_check(limited_log(*steps))
        assert not check.ok
        assert check.detail.startswith("at most 5 at once over 5 leases")


def throttled_log(*starts: int, throttled: int = 0) -> Rows:
    """The rate-limited task's leases at the Redis times (ms) `starts`, one task each,
    `throttled` of them throttled first; and another task's lease between each."""
    rows: list[dict[str, str]] = []
    for i, at in enumerate(starts):
        rows.append({"task": f"r{i}", "type": "enqueued", "name": THROTTLED_TASK})
        rows.append({"task": f"o{i}", "type": "enqueued", "name": "other"})
        if i < throttled:
            rows.append({"task": f"r{i}", "type": "throttled", "ts": str(at - 5)})
        rows.append({"task": f"r{i}", "type": "leased", "ts": str(at)})
        rows.append({"task": f"o{i}", "type": "leased", "ts": str(at)})
    return list(enumerate(rows, start=1))


class TestRateLimit:
    SPACING = 1000 // THROTTLED_PER_SECOND

    def test_a_burst_then_one_a_spacing_passes(self) -> None:
        starts = [0] * THROTTLED_BURST + [self.SPACING * k for k in range(1, 20)]
        ok, detail = rate_verdict(throttled_log(*starts, throttled=3), 0)
        assert ok, detail
        assert detail == (f"{len(starts)} starts, 3 times throttled; no window over the "
                          "limit; 0 slot(s) still reserved after the drain")

    def test_one_start_too_many_in_any_window_fails_counting_the_excess(self) -> None:
        # The burst at once, one a spacing later, then two more where one fits.
        starts = [0] * THROTTLED_BURST + [self.SPACING, self.SPACING * 2, self.SPACING * 2]
        assert over_rate(starts, self.SPACING, THROTTLED_BURST) == 1
        ok, detail = rate_verdict(throttled_log(*starts), 0)
        assert not ok and "1 start(s) over the limit in the busiest window" in detail
        assert over_rate([0] * (THROTTLED_BURST + 3), self.SPACING, THROTTLED_BURST) == 3

    def test_a_slot_left_reserved_after_the_drain_fails(self) -> None:
        ok, detail = rate_verdict(throttled_log(0), 2)
        assert not ok and detail.endswith("2 slot(s) still reserved after the drain")

    def test_the_bound_matches_the_models_for_every_pair_of_starts(self) -> None:
        # over_rate's one pass against NeverOverRate's every pair, on random starts.
        rng = random.Random(3)
        for _ in range(300):
            starts = sorted(rng.randrange(0, 200) for _ in range(rng.randrange(1, 15)))
            worst = max(j - i + 1 - ((starts[j] - starts[i]) // 10 + 3)
                        for i in range(len(starts)) for j in range(i, len(starts)))
            assert over_rate(starts, 10, 3) == max(worst, 0), starts


def flow_log(*flows: str, triggers: int | None = None,
             results: dict[str, int] | None = None) -> list[tuple[int, dict[str, str]]]:
    """A log in which each of `flows` started, had its later stages triggered (each
    `triggers` times, by default its shape's count) and its last step completed with the
    value its shape implies (or `results`)."""
    rows: list[dict[str, str]] = []
    for flow_id in flows:
        last, value = expected(flow_id)
        rows.append({"task": f"{flow_id}.1.1", "type": "enqueued", "flow": flow_id})
        rows += [{"task": last, "type": "triggered", "flow": flow_id}] * (
            triggers_expected(flow_id) if triggers is None else triggers)
        rows.append({"task": last, "type": "completed",
                     "result": str((results or {}).get(flow_id, value))})
    return list(enumerate(rows, start=1))


class TestWorkflows:
    def test_the_run_starts_chains_and_chords_in_turn_one_per_200_tasks(self) -> None:
        assert flow_ids(1000) == ["chain-00000", "chord-00001", "chain-00002",
                                  "chord-00003", "chain-00004"]
        assert len(flow_ids(100)) == 2

    def test_workflows_that_completed_right_with_each_stage_started_once_pass(self) -> None:
        sent = FlowsSent(["chain-00000", "chord-00001"])
        charges = {expected(f)[0]: 1 for f in sent.acknowledged}
        check = flows_check(count_flows(flow_log(*sent.acknowledged), sent, charges), False)
        assert check.ok, check.detail
        assert check.detail == ("2 started (1 chains, 1 chords), 2 completed with the right "
                                "value; 5 stages started; 2 last-step charges")

    @pytest.mark.parametrize(("log", "charge", "problem"), [
        (flow_log("chord-00001", triggers=2), 1, "not triggered once per stage"),
        (flow_log("chord-00001", triggers=0), 1, "not triggered once per stage"),
        (flow_log("chord-00001", results={"chord-00001": 209}), 1, "wrong value"),
        (flow_log("chord-00001")[:-1], 1, "unfinished"),
        (flow_log("chord-00001"), 2, "last step not charged once"),
        ([], 0, "lost by a Redis crash"),
    ])
    def test_a_stage_started_twice_or_never_a_wrong_value_or_a_double_charge_fails(
        self, log: list[tuple[int, dict[str, str]]], charge: int, problem: str
    ) -> None:
        sent = FlowsSent(["chord-00001"])
        check = flows_check(count_flows(log, sent, {expected("chord-00001")[0]: charge}),
                            False)
        assert not check.ok and problem in check.detail, check.detail


class TestPriorities:
    def test_the_producer_leaves_about_half_at_the_default_and_uses_every_priority(
        self,
    ) -> None:
        drawn = priorities(7, 4000)
        assert drawn == priorities(7, 4000) != priorities(8, 4000)
        assert set(drawn) == set(range(10))
        assert 0.5 < drawn.count(5) / len(drawn) < 0.6

    def test_leases_in_priority_order_pass_and_say_how_many_were_checked(self) -> None:
        check = priority_check(validate(priority_log("a", "b")).priority)
        assert check.ok, check.detail
        assert check.detail == "2 of 2 leases checked (1 at 9, 1 at 5); 0 violations"

    def test_a_lease_out_of_priority_order_fails(self) -> None:
        check = priority_check(validate(priority_log("b", "a")).priority)
        assert not check.ok
        assert check.detail.startswith("2 of 2 leases checked (1 at 9, 1 at 5); 1 violations, "
                                       "first: ('b', 3, \"P1: leased at priority 5 while 'a'")

    def test_leases_the_log_cannot_check_are_counted_and_none_checked_is_no_pass(
        self,
    ) -> None:
        trimmed = priority_log("a", "b")[2:]
        check = priority_check(validate(trimmed, require_terminal=False).priority)
        assert not check.ok
        assert check.detail == ("0 of 2 leases checked (none); not checked: 2 its enqueued "
                                "event is not in the log; 0 violations")

    def test_the_memory_check_takes_every_priority_s_ready_list_as_fixed(
        self, broker: Broker
    ) -> None:
        # A lease that takes the last task of a level and no more leaves the level named
        # in ready:levels, until a later lease finds the level empty: a run may end so.
        broker.enqueue("urgent", priority=9)
        (leased,) = broker.lease_many("w", 30, 1).tasks
        assert broker.ack(leased.task_id, leased.token)
        assert broker.client.exists(broker.keys.ready_levels)
        check = memory_check(broker.client, ChaosQueue([broker]), Findings())
        assert check.ok, check.detail
        assert "0 without an expiry" in check.detail
        # A SIGKILLed worker's entry stays in the registry until a later registration
        # drops it: one key per queue, however many tasks ran.
        broker.client.zadd(broker.keys.workers, {"killed-worker": 1})
        assert memory_check(broker.client, ChaosQueue([broker]), Findings()).ok
        broker.client.set(broker.keys.prefix + "stray", "1")
        stray = memory_check(broker.client, ChaosQueue([broker]), Findings())
        assert not stray.ok and "1 without an expiry" in stray.detail


def test_a_run_fails_when_any_one_of_its_checks_fails_the_first_or_the_last() -> None:
    for failing in range(4):
        found = Findings(checks=[Check(f"check {i}", i != failing, "") for i in range(4)])
        assert not found.passed, f"check {failing} of 4 failed, yet the run passed"
    assert Findings(checks=[Check(f"check {i}", True, "") for i in range(4)]).passed


@pytest.mark.processes
def test_without_a_ledger_guard_the_run_reports_double_charges_and_fails(tmp_path: Path) -> None:
    run = chaos(tmp_path, "--tasks", "1500", "--workers", "3", "--guard", "none",
                "--fault-interval", "0.3", "--max-seconds", "25", "--seed", "3",
                "--work-seconds", "0.03", "--report", str(tmp_path / "report.md"))
    assert run.returncode == 1, run.stdout[-2000:]
    report = (tmp_path / "report.md").read_text()
    assert "# taskq chaos report: FAILED" in report
    line = next(x for x in report.splitlines() if x.startswith("| no task charged twice"))
    assert "**FAIL**" in line
    twice = int(line.split("; ")[1].split()[0])
    assert twice > 0
    assert "[FAILED] no task charged twice" in run.stdout


@pytest.mark.processes
def test_a_sharded_run_passes_every_check_on_every_shard(tmp_path: Path) -> None:
    run = chaos(tmp_path, "--tasks", "1000", "--workers", "2", "--fault-interval", "1",
                "--max-seconds", "10", "--seed", "6", "--redis-faults",
                "--appendfsync", "always", "--shards", "3")
    assert run.returncode == 0, run.stdout[-2000:]
    assert "1000 tasks on 3 shards" in run.stdout
    report = (tmp_path / "run" / "report.md").read_text()
    assert "# taskq chaos report: PASSED" in report
    assert "| shards | 3: each task on the shard of its key, each shard checked |" in report
    assert "longest of 3 logs" in report and "| L1: " not in report
    p1 = next(x for x in report.splitlines() if x.startswith("| P1: "))
    checked, leases = (int(n) for n in p1.split(" | ")[2].split(" leases")[0].split(" of "))
    # Each task is leased at least once unless a cancel took it first, and the canceller
    # takes at most one in CANCEL_EVERY; kills add leases, cancels can outnumber them.
    assert "| pass |" in p1 and checked == leases >= 1000 - 1000 // CANCEL_EVERY, p1
    events = read_log(tmp_path / "run" / "events.jsonl")
    assert {f["type"] for _, f in events} >= {"enqueued", "leased", "completed", "cancelled"}
    assert all(f.get("name") != LIMITED_TASK for _, f in events)


@pytest.mark.processes
def test_workers_holding_prefetched_tasks_and_outcomes_pass_every_check(
    tmp_path: Path
) -> None:
    """With --prefetch, a killed worker also loses the tasks it held unstarted and the
    outcomes it held unsettled; each comes back by its lease and is charged once."""
    run = chaos(tmp_path, "--tasks", "1000", "--workers", "2", "--fault-interval", "1",
                "--max-seconds", "10", "--seed", "9", "--redis-faults",
                "--appendfsync", "always", "--concurrency", "2", "--prefetch", "16")
    assert run.returncode == 0, run.stdout[-2000:]
    assert "2 workers x 2 (+16 prefetched)" in run.stdout
    report = (tmp_path / "run" / "report.md").read_text()
    assert "# taskq chaos report: PASSED" in report
    assert "| prefetch per worker | 16 |" in report
    events = read_log(tmp_path / "run" / "events.jsonl")
    assert validate(events).ok


@pytest.mark.processes
def test_a_clean_run_passes_every_check_and_writes_its_report(tmp_path: Path) -> None:
    run = chaos(tmp_path, "--tasks", "1000", "--workers", "2", "--fault-interval", "1",
                "--max-seconds", "10", "--seed", "5", "--redis-faults",
                "--appendfsync", "always")
    assert run.returncode == 0, run.stdout[-2000:]
    report = (tmp_path / "run" / "report.md").read_text()
    assert "# taskq chaos report: PASSED" in report
    assert "Nothing acknowledged was lost." in report
    assert "| seed | 5 |" in report
    assert "| S1: one task per schedule tick, each run once | pass |" in report
    assert "| C1: every cancelled task ended cancelled, or completed by an ack that came " \
           "first | pass |" in report
    assert "| C1: no effect by a run after it could know of its cancel | pass |" in report
    rate = next(x for x in report.splitlines() if x.startswith(f"| L1: {THROTTLED_TASK}"))
    starts, throttled = (int(n) for n in re.findall(r"(\d+) (?:starts|times throttled)",
                                                    rate))
    # Throttled tasks wait on delayed, where the canceller picks some: their slots given
    # back, the others' starts still within the limit.
    assert "| pass |" in rate and starts > 0 and throttled > 0, rate
    w1 = next(x for x in report.splitlines() if x.startswith("| W1: "))
    assert "| pass | 5 started (3 chains, 2 chords), 5 completed with the right value; " \
           "14 stages started; 5 last-step charges |" in w1, w1
    assert "- Workflows: 5 started (3 chains of 5, 2 chords of 20 and a callback)" in report
    p1 = next(x for x in report.splitlines() if x.startswith("| P1: "))
    checked, leases = (int(n) for n in p1.split(" | ")[2].split(" leases")[0].split(" of "))
    # Each task is leased at least once unless a cancel took it first, and the canceller
    # takes at most one in CANCEL_EVERY; kills add leases, cancels can outnumber them.
    assert "| pass |" in p1 and checked == leases >= 1000 - 1000 // CANCEL_EVERY, p1
    assert "Priorities of the acknowledged tasks: " in report
    # The whole event log stays behind for TLC's trace validation, cancels included.
    events = read_log(tmp_path / "run" / "events.jsonl")
    assert {f["type"] for _, f in events} >= {"enqueued", "leased", "completed",
                                              "cancel_requested", "cancelled"}
    given = {f.get("priority", "5") for _, f in events if f["type"] == "enqueued"}
    assert given == {str(p) for p in range(10)}, given
    left = {f.get("from") for _, f in events if f["type"] == "cancelled"}
    assert {"pending", "dead"} <= left, left
    # Every schedule fired through the faults, each tick once, each charged once.
    periods = {name: period_ms(name) for name in PERIODS}
    charges = Ledger(tmp_path / "run" / "ledger.db").charges_by_task(SCHEDULE_TASK_PREFIX)
    counts = count_ticks(events, periods, final_states(events), charges)
    assert all(c.tasks >= MIN_TICKS and c.tasks == c.ticks == c.enqueued == c.effects
               for c in counts), counts
    assert tick_check_of(events, charges)[0]
    # The same log with one tick's enqueue moved onto the next tick's task: that one is
    # now enqueued twice, and the first is missing.
    enqueues = [f for _, f in events
                if f["type"] == "enqueued" and f["task"].startswith("sched:chaos-1s:")]
    enqueues[1]["task"] = enqueues[2]["task"]
    ok, detail = tick_check_of(events, charges)
    assert not ok
    assert "missing" in detail and "enqueued twice" in detail


class TestStrayStates:
    """T1 at the end of a run: with ready, leased and delayed empty, every record is in
    a final state, the one its last event says, and dead exactly when in the DLQ."""

    def settled(self, broker: Broker) -> dict[str, str]:
        broker.enqueue_many([NewTask(t) for t in ("done", "doomed")])
        for task_id, token in [(t.task_id, t.token) for t in broker.lease_many("w", 30, 2).tasks]:
            if task_id == "done":
                assert broker.ack(task_id, token)
            else:
                assert broker.fail(task_id, token, "boom", dead=True).status == "dead"
        return final_states(read_events(broker.client, broker.keys.events))

    def test_a_settled_queue_has_none(self, broker: Broker) -> None:
        assert stray_states(broker.client, broker, self.settled(broker)) == []

    def test_a_record_other_than_its_last_event_or_the_dlq_says_is_named(
        self, broker: Broker
    ) -> None:
        final = self.settled(broker)
        broker.client.lpush(broker.keys.dlq, "done")
        broker.client.hset(broker.keys.task("done"), "state", "dead")
        assert stray_states(broker.client, broker, final) == [
            "done is dead, its last event says completed"]
        broker.client.hset(broker.keys.task("done"), "state", "completed")
        assert stray_states(broker.client, broker, final) == [
            "done is completed and in the DLQ"]
        broker.client.lrem(broker.keys.dlq, 0, "done")
        broker.client.lpush(broker.keys.dlq, "doomed")
        assert stray_states(broker.client, broker, final) == ["doomed is in the DLQ twice"]

    def test_a_record_left_running_or_a_dlq_entry_with_no_record_is_named(
        self, broker: Broker
    ) -> None:
        final = self.settled(broker)
        broker.client.hset(broker.keys.task("done"), "state", "running")
        broker.client.delete(broker.keys.task("doomed"))
        assert sorted(stray_states(broker.client, broker, final)) == [
            "done is running in no structure", "doomed is in the DLQ with no record"]


@pytest.mark.parametrize(("option", "said"), [
    (["--fault-interval", "0"], "--fault-interval must be a number of seconds above 0"),
    (["--fault-interval", "nan"], "--fault-interval must be a number of seconds above 0"),
    (["--drain-timeout", "nan"], "--drain-timeout must be a number of seconds above 0"),
    (["--max-seconds", "-1"], "--max-seconds must be a number of seconds above 0"),
    (["--lease-seconds", "0"], "--lease-seconds must be a number of seconds between 0.25 and"),
    (["--work-seconds", "inf"], "--work-seconds must be a number of seconds between 0"),
    (["--resend-every", "-1"], "--resend-every must be a whole number of tasks between 0"),
    (["--shards", "0"], "--shards must be a whole number between 1 and 64, not 0"),
    (["--shards", "65"], "--shards must be a whole number between 1 and 64, not 65"),
    (["--tasks", "10000000000"], "--tasks must be a whole number of tasks between 1 and"),
    (["--workers", "0"], "--workers must be a whole number of processes between 1 and 64"),
    (["--workers", "1000"], "--workers must be a whole number of processes between 1 and 64"),
    (["--concurrency", "100000"], "--concurrency must be a whole number of handlers between"),
])  # fmt: skip
def test_a_timing_or_count_a_run_cannot_take_is_refused_before_it_starts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], option: list[str], said: str
) -> None:
    assert main(["chaos", "--tasks", "10", "--dir", str(tmp_path / "run"), *option]) == 2
    assert said in capsys.readouterr().err
    assert not (tmp_path / "run").exists()
