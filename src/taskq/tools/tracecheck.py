"""Trace validation: does each task's run of events form a legal path of the lease
protocol, cancellation included, did every lease take the task the ready lists
put first (P1, `taskq.tools.readyorder`), and did every workflow stage start only once
every step of the stage before it had ended (W1)? Used after test suites and at the end of the
chaos run."""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from taskq.tools.readyorder import PriorityReport, check_order
from taskq.transport import Client

# event type -> states the task may be in before it; None = the task has no record yet.
ALLOWED_FROM: dict[str, tuple[str | None, ...]] = {
    "enqueued": (None,),
    "leased": ("pending",),
    "heartbeat": ("running",),
    "progress": ("running",),
    "completed": ("running",),
    "failed": ("running",),
    "released": ("running",),
    "reaped": ("running",),
    "promoted": ("delayed",),
    "throttled": ("pending",),
    "rescheduled": ("delayed",),
    "parked": ("pending",),
    "unparked": ("pending",),
    "revived": ("dead",),
    "purged": ("dead",),
    "triggered": ("waiting",),
    "cancelled": ("pending", "delayed", "dead", "running", "waiting"),
    "cancel_requested": ("running",),
}
# event type -> states it may leave the task in.
ALLOWED_TO: dict[str, tuple[str, ...]] = {
    "enqueued": ("pending", "delayed", "waiting"),
    "leased": ("running",),
    "heartbeat": ("running",),
    "progress": ("running",),
    "completed": ("completed",),
    "failed": ("delayed", "dead", "cancelled"),
    "released": ("pending", "cancelled"),
    "reaped": ("delayed", "dead", "cancelled"),
    "promoted": ("pending",),
    "throttled": ("delayed",),
    "rescheduled": ("delayed",),
    "parked": ("pending",),
    "unparked": ("pending",),
    "revived": ("pending",),
    "purged": ("purged",),
    "triggered": ("pending",),
    "cancelled": ("cancelled",),
    "cancel_requested": ("running",),
}
TERMINAL = ("completed", "dead", "purged", "cancelled")
# What may follow a task's cancel_requested: its holder's heartbeats, and one settle
# (an ack that came first completes it; anything else ends it cancelled).
AFTER_CANCEL_REQUESTED = ("heartbeat", "progress", "completed", "cancelled", "failed",
                          "released", "reaped")
# The events by which the holder of the current token acts.
HOLDER_EVENTS = ("heartbeat", "progress", "completed", "failed", "released",
                 "cancel_requested")


@dataclass
class TaskTrace:
    """What the checker knows of one task while it replays the log."""

    state: str | None = None
    token: int = 0
    run_at: int = 0
    events: int = 0
    completions: int = 0
    # A cancel_requested event came while the task ran (cancel.lua flagged its record).
    cancel_requested: bool = False
    # Parked for a concurrency slot, and not yet unparked.
    parked: bool = False


@dataclass
class TraceReport:
    """Violations found (task id, seq, message), P1's among them, and what was checked."""

    tasks: int = 0
    events: int = 0
    violations: list[tuple[str, int, str]] = field(default_factory=list)
    unfinished: list[str] = field(default_factory=list)
    priority: PriorityReport = field(default_factory=PriorityReport)

    @property
    def ok(self) -> bool:
        return not self.violations and not self.unfinished


def _int(fields: Mapping[str, str], name: str) -> int:
    try:
        return int(fields.get(name, "0") or 0)
    except ValueError:
        return -1


def check_event(task: TaskTrace, seq: int, fields: Mapping[str, str]) -> list[str]:
    """The rules one event breaks, given the task's state before it; updates `task`."""
    kind, state = fields.get("type", ""), fields.get("state", "")
    if kind not in ALLOWED_FROM:
        return [f"unknown event type {kind!r}"]
    problems: list[str] = []
    if task.state not in ALLOWED_FROM[kind]:
        problems.append(f"{kind} from state {task.state!r}")
    if state not in ALLOWED_TO[kind]:
        problems.append(f"{kind} into state {state!r}")
    problems += _check_cancel(task, kind, state, fields)
    problems += _check_token(task, kind, _int(fields, "token"), fields.get("from", ""))
    problems += _check_timing(task, kind, _int(fields, "ts"))
    problems += _check_parking(task, kind)
    if state == "delayed" or kind == "enqueued":
        task.run_at = _int(fields, "at")
    if kind == "completed":
        task.completions += 1
        if task.completions > 1:
            problems.append("completed more than once")
    task.cancel_requested = task.cancel_requested or kind == "cancel_requested"
    task.state = state
    task.events += 1
    return problems


def _check_cancel(task: TaskTrace, kind: str, state: str, fields: Mapping[str, str]) -> list[str]:
    """C1 as the log shows it: a cancelled task never changes again (ALLOWED_FROM has no
    event from `cancelled`); once its cancel was requested, a running task only beats
    and then settles, completed or cancelled, never retried, released, reaped back or
    buried; and only a requested cancel ends a running task cancelled."""
    problems = []
    if kind == "cancelled" and fields.get("from", "") != (task.state or ""):
        problems.append(f"cancelled from {fields.get('from', '')!r} while the task was "
                        f"{task.state!r}")
    if task.cancel_requested:
        if kind not in AFTER_CANCEL_REQUESTED:
            problems.append(f"{kind} after its cancel was requested")
        elif kind in ("failed", "released", "reaped") and state != "cancelled":
            problems.append(f"{kind} into state {state!r} after its cancel was requested")
    else:
        settles_running = task.state == "running" and state == "cancelled"
        if settles_running and kind in ("cancelled", "failed", "released", "reaped"):
            problems.append(f"{kind} into state 'cancelled' with no cancel requested")
    return problems


def _check_parking(task: TaskTrace, kind: str) -> list[str]:
    """A parked task waits off ready: nothing but its unpark or a cancel may follow."""
    problems = []
    if task.parked and kind not in ("unparked", "cancelled"):
        problems.append(f"{kind} while parked for a concurrency slot")
    if kind == "unparked" and not task.parked:
        problems.append("unparked but not parked")
    task.parked = kind == "parked"
    return problems


def _check_token(task: TaskTrace, kind: str, token: int, source: str = "") -> list[str]:
    """Leases and reaps raise the token (by one, or to the server clock's floor: see
    lua/_common.lua's mint_token), and the holder acts only with it (a cancel of a
    running task names it; ack_cancelled settles with it)."""
    problems = []
    holder = kind in HOLDER_EVENTS or (kind == "cancelled" and source == "running")
    if kind == "leased" and token <= task.token:
        problems.append(f"lease token {token} not above the previous {task.token}")
    elif kind == "reaped" and token <= task.token:
        problems.append(f"reap token {token} not above the previous {task.token}")
    elif holder and token != task.token:
        problems.append(f"{kind} with token {token} while the lease's token is {task.token}")
    if kind in ("leased", "reaped"):
        task.token = token
    return problems


def _check_timing(task: TaskTrace, kind: str, ts: int) -> list[str]:
    """T6: nothing delayed runs, or becomes ready, before its run-at."""
    if kind in ("leased", "promoted") and ts < task.run_at:
        return [f"{kind} at {ts} before its run-at {task.run_at}"]
    return []


def check_stages(events: Iterable[tuple[int, Mapping[str, str]]]) -> list[tuple[str, int, str]]:
    """W1 as the log shows it: a workflow step (`<flow>.<stage>.<index>`, its events
    naming their `flow`) is triggered only when every step of the stage before it,
    as its flow's enqueued events list them, has already ended."""
    stage_steps: dict[tuple[str, int], set[str]] = {}
    ended: set[str] = set()
    problems = []
    for seq, fields in events:
        task_id, flow = fields.get("task", ""), fields.get("flow", "")
        kind, state = fields.get("type", ""), fields.get("state", "")
        if flow and kind == "enqueued":
            stage = int(task_id.rsplit(".", 2)[1])
            stage_steps.setdefault((flow, stage), set()).add(task_id)
        if kind == "triggered":
            stage = int(task_id.rsplit(".", 2)[1])
            before = stage_steps.get((flow, stage - 1), set())
            if not before or not before <= ended:
                problems.append((task_id, seq, f"triggered before every step of stage "
                                               f"{stage - 1} ended"))
        if state in TERMINAL:
            ended.add(task_id)
    return problems


def validate(
    events: Iterable[tuple[int, Mapping[str, str]]], *, require_terminal: bool = True
) -> TraceReport:
    """Replay `(seq, fields)` events in order, each task's path and the order of leases;
    with `require_terminal`, every task must end completed, dead or cancelled (the run
    is over)."""
    rows = list(events)
    tasks: dict[str, TaskTrace] = {}
    report = TraceReport()
    for seq, fields in rows:
        report.events += 1
        task_id = fields.get("task", "")
        task = tasks.setdefault(task_id, TaskTrace())
        report.violations.extend((task_id, seq, p) for p in check_event(task, seq, fields))
    report.tasks = len(tasks)
    report.violations.extend(check_sequence(rows))
    report.violations.extend(check_stages(rows))
    report.priority = check_order(rows)
    report.violations.extend(report.priority.violations)
    if require_terminal:
        report.unfinished = sorted(t for t, trace in tasks.items() if trace.state not in TERMINAL)
    return report


def check_sequence(rows: list[tuple[int, Mapping[str, str]]]) -> list[tuple[str, int, str]]:
    """E1's evidence in the log itself: each event's number is the last one's plus one
    (trimming takes the oldest, so a log may start past 1, never skip). A hole is an
    event lost, a repeat one appended twice; either can leave each task's path whole
    (a heartbeat, a progress report), so the numbers are what shows it."""
    found: list[tuple[str, int, str]] = []
    for (before, _), (seq, fields) in itertools.pairwise(rows):
        if seq != before + 1:
            found.append((fields.get("task", ""), seq, f"E1: event {seq} follows event "
                          f"{before}: {'a hole' if seq > before + 1 else 'out of order'}"))
    return found


def validate_each(logs: Iterable[Iterable[tuple[int, Mapping[str, str]]]]) -> TraceReport:
    """`validate` on each of several queues' logs (a sharded queue's shards: each has its
    own sequence, and a task never leaves its shard), the reports added up."""
    whole = TraceReport()
    reports = [validate(rows) for rows in logs]
    for r in reports:
        whole.tasks += r.tasks
        whole.events += r.events
        whole.violations += r.violations
        whole.unfinished += r.unfinished
    whole.priority = PriorityReport.merged(r.priority for r in reports)
    return whole


def read_log(
    client: Client, events_key: str, batch: int = 10_000
) -> list[tuple[int, dict[str, str]]]:
    """Every retained event of a stream, in order, as (seq, fields)."""
    rows: list[tuple[int, dict[str, str]]] = []
    start = "-"
    while True:
        chunk = client.xrange(events_key, min=start, max="+", count=batch)
        if not chunk:
            return rows
        for row_id, fields in chunk:
            number, _, part = str(row_id).partition("-")
            # taskq numbers its entries <seq>-0; any other id was written by something
            # else, and reads as -1, out of order wherever it stands (check_sequence).
            seq = int(number) if part == "0" else -1
            rows.append((seq, {str(k): str(v) for k, v in (fields or {}).items()}))
        start = "(" + str(chunk[-1][0])
