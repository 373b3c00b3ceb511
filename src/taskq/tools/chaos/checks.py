"""The checks at the end of a chaos run; their conjunction is its exit status."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from taskq.boundary import text
from taskq.broker import Broker
from taskq.keys import SCHEDULE_TASK_PREFIX, schedule_task_id
from taskq.limits import PRIORITY
from taskq.tools.chaos.cancel_checks import CancelCount, cancel_checks, count_cancels
from taskq.tools.chaos.canceller import Cancels
from taskq.tools.chaos.flows import (
    CHAIN_LENGTH,
    CHORD_SIZE,
    FlowCount,
    FlowsSent,
    count_flows,
    is_flow_step,
)
from taskq.tools.chaos.ledger_checks import (
    LOSS_WINDOW_SECONDS,
    ledger_verdict,
    lost_to_a_crash,
)
from taskq.tools.chaos.producer import Produced
from taskq.tools.chaos.queue import ChaosQueue
from taskq.tools.chaos.rate_checks import RATE_CHECK, rate_verdict
from taskq.tools.chaos.schedules import (
    LIMITED_MOST,
    LIMITED_TASK,
    PERIODS,
    THROTTLED_TASK,
    period_ms,
    tick_of,
)
from taskq.tools.chaos.waiters import Waited
from taskq.tools.ledger import Ledger
from taskq.tools.readyorder import PriorityReport
from taskq.tools.tracecheck import read_log, validate_each
from taskq.transport import Client


@dataclass
class Check:
    name: str
    ok: bool
    detail: str


@dataclass
class TickCount:
    """One schedule's ticks as the event log and the ledger tell them: the ticks from the
    first fired to the last by its period, or to the last tick Redis records as handled
    if that is later (every tick up to it must have its task: NoLostTick), the tasks
    made for them (each tick's task id is `sched:<schedule>:<tick ms>`), their
    `enqueued` events, and their charges."""

    schedule: str
    period_ms: int
    ticks: int = 0
    tasks: int = 0
    enqueued: int = 0
    completed: int = 0
    effects: int = 0
    missing: list[int] = field(default_factory=list)
    doubled: list[int] = field(default_factory=list)
    off_period: list[int] = field(default_factory=list)
    unfinished: list[str] = field(default_factory=list)
    not_once: list[tuple[str, int]] = field(default_factory=list)
    without_task: list[str] = field(default_factory=list)


@dataclass
class Findings:
    """Everything the report states about the end of the run."""

    checks: list[Check] = field(default_factory=list)
    final_states: dict[str, str] = field(default_factory=dict)
    lost_enqueues: list[str] = field(default_factory=list)
    charged_twice: list[tuple[str, int]] = field(default_factory=list)
    ticks: list[TickCount] = field(default_factory=list)
    cancels: CancelCount = field(default_factory=CancelCount)
    flows: FlowCount = field(default_factory=FlowCount)
    priority: PriorityReport = field(default_factory=PriorityReport)
    events: int = 0
    used_memory: int = 0
    log_memory: int = 0

    @property
    def passed(self) -> bool:
        return all(c.ok for c in self.checks)


def final_states(rows: list[tuple[int, dict[str, str]]]) -> dict[str, str]:
    """Each task's last state according to the event log."""
    states: dict[str, str] = {}
    for _, fields in rows:
        states[fields.get("task", "")] = fields.get("state", "")
    return states


def read_logs(client: Client, queue: ChaosQueue) -> list[list[tuple[int, dict[str, str]]]]:
    """Each shard's event log (one in all when the queue is not sharded)."""
    return [read_log(client, broker.keys.events) for broker in queue.brokers]


def run_checks(
    client: Client, queue: ChaosQueue, produced: Produced, ledger: Ledger, guard: str,
    appendfsync: str, crashes: Sequence[float], waited: Waited | None = None,
    cancels: Cancels | None = None, same_clock: bool = False, flows: FlowsSent | None = None,
) -> Findings:
    """Every check of the run; `crashes` are the times (monotonic) Redis was killed,
    `same_clock` when Redis runs on this host's clock (the run's own embedded server),
    so the ledger's times and the log's compare. On a
    sharded queue each check covers every shard: a task never leaves its shard, so the
    shards' logs, one after the other, hold each task's whole history in order."""
    found = Findings()
    cancels = cancels or Cancels()
    logs = read_logs(client, queue)
    rows = [row for log in logs for row in log]
    final = found.final_states = final_states(rows)
    found.events = len(rows)
    acknowledged = produced.acknowledged
    found.lost_enqueues = sorted(t for t in acknowledged if t not in final)
    # A task the canceller asked about may end cancelled; the C1 checks say which may.
    unfinished = sorted(t for t in acknowledged if t in final and final[t] != "completed"
                        and not (t in cancels.asked and final[t] == "cancelled"))
    cancelled = sum(1 for t in acknowledged if final.get(t) == "cancelled")
    may_lose = appendfsync != "always" and bool(crashes)
    # A crash loses only what Redis acknowledged in its last moments, never older.
    too_old = [t for t in found.lost_enqueues if not may_lose
               or not lost_to_a_crash(produced.acknowledged_at.get(t, -1.0), crashes)]
    found.checks.append(Check(
        "every acknowledged task completed, or ended cancelled", not unfinished and not too_old,
        f"{len(acknowledged) - len(unfinished) - len(found.lost_enqueues) - cancelled} of "
        f"{len(acknowledged)} completed, {cancelled} cancelled; {len(unfinished)} unfinished; "
        f"{len(found.lost_enqueues)} acknowledged enqueues lost, "
        f"{len(found.lost_enqueues) - len(too_old)} of them in the last "
        f"{LOSS_WINDOW_SECONDS:g}s before a Redis crash (appendfsync {appendfsync})"
        + (f"; first lost otherwise: {too_old[0]}" if too_old else "")))

    summary = ledger.summary()
    found.charged_twice = summary.charged_twice
    found.checks.append(Check(
        f"no task charged twice (guard {guard})", not summary.charged_twice,
        f"{summary.charges} charges for {summary.tasks} tasks; "
        f"{len(summary.charged_twice)} charged more than once"))

    charges = ledger.charges_of(ledger.charges_by_task(""))
    found.checks.append(Check(
        "every completed task charged, and only by a run the log shows",
        *ledger_verdict(rows, final, charges, acknowledged - cancels.asked.keys(), may_lose)))

    recreated = [t for t in produced.resends_created if t not in found.lost_enqueues]
    found.checks.append(Check(
        "duplicate sends created no task", not recreated,
        f"{produced.resends} resends; {len(produced.resends_created)} created a task"
        + (f", all {len(produced.resends_created)} because the original enqueue was lost"
           if produced.resends_created and not recreated else "")))

    handled = {name: state[0] for name in PERIODS
               if (state := queue.first.schedule_state(name)) is not None}
    found.ticks = count_ticks(rows, {name: period_ms(name) for name in PERIODS},
                              found.final_states,
                              ledger.charges_by_task(SCHEDULE_TASK_PREFIX), handled)
    found.checks.append(ticks_check(found.ticks, lost_ok=may_lose))

    counts = queue.counts()
    strays = [problem for b in queue.brokers for problem in stray_states(client, b, final)]
    # Every priority's list, each read itself: counts() finds the lists other than the
    # default's through their index, which a fault in its upkeep would leave out.
    listed = sum(int(client.llen(b.keys.ready_at(p))) for b in queue.brokers
                 for p in range(PRIORITY.low, PRIORITY.high + 1))
    found.checks.append(Check(
        "T1: every task in exactly one place, and all done",
        counts.ready == counts.leased == counts.delayed == listed == 0 and not strays,
        f"ready {counts.ready} ({listed} in the lists of every priority), leased "
        f"{counts.leased}, delayed {counts.delayed}, dead {counts.dead}; {len(strays)} "
        "records out of place" + (f", first: {strays[0]}" if strays else "")))

    found.checks.append(_results_check(queue, rows, final, waited or Waited()))

    found.cancels = count_cancels(rows, final, cancels, ledger.charges_of(cancels.asked),
                                  same_clock, may_lose)
    verdicts = cancel_checks(found.cancels)
    found.checks.append(Check("C1: every cancelled task ended cancelled, or completed by "
                              "an ack that came first", *verdicts.none_lost))
    found.checks.append(Check("C1: no effect by a run after it could know of its cancel",
                              *verdicts.none_after))

    report = validate_each(logs)
    found.checks.append(Check(
        "trace validation of the event log", report.ok,
        f"{report.events} events of {report.tasks} tasks; {len(report.violations)} violations"
        + (f", first: {report.violations[0]}" if report.violations else "")
        + (f"; {len(report.unfinished)} tasks not finished" if report.unfinished else "")))
    found.priority = report.priority
    found.checks.append(priority_check(report.priority))
    if queue.layout is None:
        # A sharded queue refuses rate and concurrency limits (they cannot hold across
        # shards), so the run sends no limited task to count.
        found.checks.append(concurrency_check(rows))
        reserved = sum(int(client.zcard(b.keys.reserved(THROTTLED_TASK)))
                       for b in queue.brokers)
        # A run too short to send a throttled task has no rate to judge: no check, not
        # a pass.
        if any(f.get("name") == THROTTLED_TASK for _, f in rows):
            found.checks.append(Check(RATE_CHECK, *rate_verdict(rows, reserved)))

    if flows is not None:
        found.flows = count_flows(rows, flows, ledger.charges_by_task(""))
        found.checks.append(flows_check(found.flows, may_lose))

    found.checks.append(memory_check(client, queue, found))
    return found


def flows_check(c: FlowCount, may_lose: bool) -> Check:
    """W1 on the real run: every workflow started completed with the value its shape
    implies, each of its later stages triggered exactly once (so a chord's callback was
    enqueued once), and its last step's charge applied once. A workflow the log lacks is
    allowed only where a Redis crash could lose acknowledged writes."""
    wrong = c.unfinished or c.wrong_value or c.triggered_not_once or \
        c.callbacks_not_charged_once or (c.lost and not may_lose)
    problems = [f"{label} {items[:3]}" for label, items in (
        ("unfinished", c.unfinished), ("wrong value", c.wrong_value),
        ("not triggered once per stage", c.triggered_not_once),
        ("last step not charged once", c.callbacks_not_charged_once),
        ("lost by a Redis crash", c.lost)) if items]
    return Check(
        f"W1: every workflow completed, each stage started once ({CHAIN_LENGTH}-step chains, "
        f"{CHORD_SIZE}-member chords)", not wrong and c.started > 0,
        f"{c.started} started ({c.chains} chains, {c.chords} chords), {c.completed} completed "
        f"with the right value; {c.triggers} stages started; {c.callbacks_charged} last-step "
        f"charges" + (f" ({'; '.join(problems)})" if problems else ""))


def priority_check(p: PriorityReport) -> Check:
    """P1 on the real run, from the trace validation's replay of the ready lists: every
    lease took the front of the highest priority that held a task. A run in which no
    lease could be checked has shown nothing, and fails."""
    levels = ", ".join(f"{n} at {level}" for level, n in sorted(p.by_priority.items(),
                                                                 reverse=True))
    skipped = "; ".join(f"{n} {reason}" for reason, n in p.unchecked.items())
    return Check(
        "P1: every lease took the front of the highest priority ready",
        p.ok and p.checked > 0,
        f"{p.checked} of {p.leases} leases checked ({levels or 'none'})"
        + (f"; not checked: {skipped}" if skipped else "")
        + (f"; {len(p.passed_over)} tasks passed over and never seen again"
           if p.passed_over else "")
        + f"; {len(p.violations)} violations"
        + (f", first: {p.violations[0]}" if p.violations else ""))


# Events that end a lease, giving back its concurrency slot (a cancel from running is
# ack_cancelled's; one from any other state ends no lease).
LEASE_ENDS = ("completed", "failed", "released", "reaped")


def runs_at_once(rows: list[tuple[int, dict[str, str]]], name: str) -> tuple[int, int, int]:
    """(most leases of task `name` held at once for one key of its limit, leases, parked
    events), replaying the log in sequence order: each script's events are in the order
    it ran, so this is exactly what Redis held. A task's key (its `limit_key`, '' for
    none) comes with its `enqueued` event."""
    keys: dict[str, str] = {}
    held: dict[str, set[str]] = {}
    most = leases = parked = 0
    for _, fields in rows:
        task, kind = fields.get("task", ""), fields.get("type", "")
        if kind == "enqueued" and fields.get("name", "") == name:
            keys[task] = fields.get("limit_key", "")
        if task not in keys:
            continue
        running = held.setdefault(keys[task], set())
        if kind == "leased":
            running.add(task)
            leases += 1
            most = max(most, len(running))
        elif kind in LEASE_ENDS or (kind == "cancelled" and fields.get("from") == "running"):
            running.discard(task)
        elif kind == "parked":
            parked += 1
    return most, leases, parked


def concurrency_check(rows: list[tuple[int, dict[str, str]]]) -> Check:
    """L1 for the run's concurrency-limited task, by the log."""
    most, leases, parked = runs_at_once(rows, LIMITED_TASK)
    return Check(
        f"L1: never more than {LIMITED_MOST} runs of {LIMITED_TASK} held leases at once "
        "per account",
        most <= LIMITED_MOST and leases > 0,
        f"at most {most} at once over {leases} leases; {parked} times a task waited "
        "parked for a slot")


def count_ticks(rows: list[tuple[int, dict[str, str]]], periods: Mapping[str, int],
                final: Mapping[str, str], charges: Mapping[str, int],
                handled: Mapping[str, int] | None = None) -> list[TickCount]:
    """Each schedule's `TickCount`, from the log's rows, each task's final state, the
    ledger's charges per task id and each schedule's last handled tick as Redis keeps
    it (`handled`, read once no worker fires any more)."""
    found = []
    for schedule, period in periods.items():
        count = TickCount(schedule, period)
        enqueued: Counter[int] = Counter()
        for _, fields in rows:
            tick = tick_of(schedule, fields.get("task", ""))
            if tick is not None and fields.get("type") == "enqueued":
                enqueued[tick] += 1
        if enqueued:
            first = min(enqueued)
            last = max(*enqueued, (handled or {}).get(schedule, 0))
            expected = range(first, last + 1, period)
            count.ticks = len(expected)
            count.missing = [t for t in expected if t not in enqueued]
            count.off_period = sorted(t for t in enqueued if (t - first) % period)
        count.tasks, count.enqueued = len(enqueued), sum(enqueued.values())
        count.doubled = sorted(t for t, n in enqueued.items() if n > 1)
        ids = [schedule_task_id(schedule, t) for t in sorted(enqueued)]
        count.completed = sum(1 for task_id in ids if final.get(task_id) == "completed")
        count.unfinished = [task_id for task_id in ids if final.get(task_id) != "completed"]
        mine = {task_id: n for task_id, n in charges.items()
                if tick_of(schedule, task_id) is not None}
        count.effects = sum(mine.values())
        count.not_once = [(task_id, mine.get(task_id, 0)) for task_id in ids
                          if mine.get(task_id, 0) != 1]
        known = set(ids)
        count.without_task = sorted(task_id for task_id in mine if task_id not in known)
        found.append(count)
    return found


def ticks_check(counts: list[TickCount], lost_ok: bool) -> Check:
    """S1 on the real run: every schedule fired, each tick from its first to its last
    became exactly one task (one `enqueued` event, on the period, none missing), and each
    completed with its charge applied exactly once. A charge whose task the log lacks
    is allowed only where a Redis crash could lose acknowledged writes (`lost_ok`)."""
    ok, parts = True, []
    for c in counts:
        wrong = bool(not c.tasks or c.missing or c.doubled or c.off_period or c.unfinished
                     or c.not_once or (c.without_task and not lost_ok))
        ok = ok and not wrong
        part = (f"{c.schedule} (every {c.period_ms} ms): {c.ticks} ticks, {c.tasks} tasks, "
                f"{c.enqueued} enqueued events, {c.completed} completed, {c.effects} effects")
        problems = [f"{label} {items[:3]}" for label, items in (
            ("missing", c.missing), ("enqueued twice", c.doubled),
            ("off the period", c.off_period), ("unfinished", c.unfinished),
            ("not charged once", c.not_once),
            ("charged without a task in the log", c.without_task)) if items]
        if not c.tasks:
            problems.append("no tick fired")
        parts.append(part + (f" ({'; '.join(problems)})" if problems else ""))
    return Check("S1: one task per schedule tick, each run once", ok, "; ".join(parts))


def _results_check(queue: ChaosQueue, rows: list[tuple[int, dict[str, str]]],
                   final: Mapping[str, str], waited: Waited) -> Check:
    """R1 on the real run: every result kept is the accepted run's. The simulated task
    returns its own token, so the result of each completed event (written by the ack
    Redis accepted) must carry that event's token, each record still kept must hold
    the result of its current token, each result a waiting producer got must be the
    completed event's, and each wait that ended "cancelled" must be on a task that
    ended so."""
    in_events: dict[str, Any] = {}
    wrong, without, flow_results = [], 0, 0
    for _, fields in rows:
        if fields.get("type") != "completed":
            continue
        task_id = fields.get("task", "")
        if "result" not in fields:
            without += 1  # acked at shutdown after its effect: no result is kept
            continue
        value = json.loads(fields["result"])
        if is_flow_step(task_id):
            flow_results += 1  # a number, not a token: W1 checks what a workflow made
            continue
        in_events[task_id] = value
        if value.get("token") != int(fields.get("token", -1)):
            wrong.append(task_id)
    records = 0
    for task_id in list(in_events)[:: max(1, len(in_events) // 2000)]:
        record = queue.task(task_id)
        if record is None or record.result is None:
            continue  # expired since (completed_ttl)
        records += 1
        if json.loads(record.result).get("token") != record.fencing_token:
            wrong.append(task_id)
    mismatched = [t for t, v in waited.results.items() if in_events.get(t, v) != v]
    # A producer's wait on a task that ended cancelled ends in TaskCancelledError.
    miscancelled = [t for t in waited.cancelled if final.get(t) != "cancelled"]
    return Check(
        "R1: every result kept is the accepted run's",
        not wrong and not mismatched and not waited.errors and not miscancelled,
        f"{len(in_events)} results on completed events, each with its event's token; "
        f"{without} acked at shutdown with none; {flow_results} of workflow steps (checked "
        f"by W1); {records} records read back; "
        f"{len(waited.results)} results waited for by a producer through "
        f"{waited.outages} outages, {len(mismatched)} differing, {len(waited.errors)} errors, "
        f"{len(waited.cancelled)} told cancelled ({len(miscancelled)} not cancelled)"
        + (f"; wrong: {wrong[:5]}" if wrong else "")
        + (f"; errors: {list(waited.errors.items())[:2]}" if waited.errors else ""))


def fixed_keys(broker: Broker) -> set[str]:
    """One key per queue, or per task name with a limit (each name's slots and parked
    tasks included, and the workers that hold its rate limit): bounded by the app, not
    by the number of tasks. The workers registry holds one entry per worker, and keeps
    a SIGKILLed worker's until the next registration after it has expired; a rate
    limit's holders keep a dead worker's until a lease drops it (see lua/lease.lua)."""
    k = broker.keys
    return {k.ready, k.leased, k.delayed, k.dlq, k.events, k.seq, k.epoch, k.stats, k.wake,
            k.workers,
            k.schedules, k.ready_levels, k.rates, k.limits, k.parked_names, k.parked_line,
            k.holding(LIMITED_TASK), k.parked(LIMITED_TASK), k.unparked(LIMITED_TASK),
            k.holders(THROTTLED_TASK),
            *(k.ready_at(p) for p in range(PRIORITY.low, PRIORITY.high + 1))}


def memory_check(client: Client, queue: ChaosQueue, found: Findings) -> Check:
    """Memory is bounded when each log is capped by its retention and every other key
    that grows with the number of tasks (records, idempotency keys) expires."""
    growing = []
    for broker in queue.brokers:
        fixed = fixed_keys(broker)
        growing += [name for n in client.scan_iter(match=broker.keys.prefix + "*", count=5000)
                    if (name := str(n)) not in fixed]
    never_expire = 0
    for start in range(0, len(growing), 2000):
        pipe = client.pipeline(transaction=False)
        for name in growing[start : start + 2000]:
            pipe.pttl(name)
        # -1: no expiry; -2: expired since the scan found it (records do, by the thousand).
        never_expire += sum(1 for ttl in pipe.execute() if int(ttl) == -1)
    length = max(int(client.xlen(b.keys.events)) for b in queue.brokers)
    retention = queue.first.events_retention
    found.used_memory = int(client.info("memory")["used_memory"])
    found.log_memory = sum(int(client.memory_usage(b.keys.events) or 0) for b in queue.brokers)
    logs = "event log" if len(queue.brokers) == 1 else f"longest of {len(queue.brokers)} logs"
    return Check(
        "Redis memory bounded by the retention settings",
        never_expire == 0 and length <= retention,
        f"{logs} {length} of at most {retention} events ({found.log_memory / 2**20:.1f} MiB); "
        f"{len(growing)} task records and idempotency keys, {never_expire} without an expiry; "
        f"{found.used_memory / 2**20:.1f} MiB in all",
    )


def _states(client: Client, broker: Broker) -> dict[str, str]:
    """Each task record's state, read in pipelined batches (a record that expired since
    the scan found it is left out)."""
    prefix = broker.keys.task("")
    ids = [text(key)[len(prefix):]
           for key in client.scan_iter(match=broker.keys.task("*"), count=5000)]
    states: dict[str, str] = {}
    for start in range(0, len(ids), 2000):
        pipe = client.pipeline(transaction=False)
        for task_id in ids[start : start + 2000]:
            pipe.hget(broker.keys.task(task_id), "state")
        for task_id, state in zip(ids[start : start + 2000], pipe.execute(), strict=True):
            if state is not None:
                states[task_id] = text(state)
    return states


def stray_states(client: Client, broker: Broker, final: Mapping[str, str]) -> list[str]:
    """Once ready, leased and delayed are empty, what breaks T1 (and E1) in the rest:
    a record in a state that is not final, or in another state than its last event
    says (the log's final state, where the log still holds its task's events); the
    DLQ holding an id whose record is not dead, or an id twice; a dead record not in
    the DLQ."""
    problems = []
    dlq = [text(task_id) for task_id in client.lrange(broker.keys.dlq, 0, -1)]
    problems += [f"{task_id} is in the DLQ twice" for task_id, n in Counter(dlq).items()
                 if n > 1]
    in_dlq = set(dlq)
    states = _states(client, broker)
    for task_id, state in states.items():
        if state not in ("completed", "dead", "cancelled"):
            problems.append(f"{task_id} is {state} in no structure")
        elif task_id in final and final[task_id] != state:
            problems.append(f"{task_id} is {state}, its last event says {final[task_id]}")
        elif (state == "dead") != (task_id in in_dlq):
            problems.append(f"{task_id} is {state} and {'' if task_id in in_dlq else 'not '}"
                            "in the DLQ")
    problems += [f"{task_id} is in the DLQ with no record" for task_id in in_dlq
                 if task_id not in states]
    return problems
