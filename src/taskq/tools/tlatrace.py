"""Export a queue's event log as TLA+ traces, one per task, for TLC to check against
TaskQueue with cancellation (specs/TaskQueue/TaskQueueTrace.tla).

Each task's events are its own trace, checked as a behaviour of a one-task instance
of the model, as `taskq.tools.tracecheck` checks them per task. An event becomes the one
model action that writes it: enqueued -> Enqueue, leased -> Lease, heartbeat ->
Heartbeat, completed -> Ack, failed -> Fail, released -> Release, reaped -> Reap,
promoted -> Promote, throttled -> Throttle (a lease under a rate limit sending the task
to delayed until its slot), rescheduled -> Reschedule (a released rate-limit line making
it due sooner; the trace's clock takes its new run-at), revived -> RetryDead,
cancel_requested -> Cancel (of a running
task), cancelled -> Cancel (from pending, delayed or dead) or AckCancelled (from
running); parked and unparked (a task waiting for a concurrency slot, still pending)
are left out. Three model actions write no event and are inserted where the next event
implies them: "effect" (the handler's charge) before each completed, "expire" (the clock
passing the lease's expiry) before each reaped, and "tick" (the clock reaching the
run-at) before each promoted; the last two carry the time of the event that follows,
which the model checks against the expiry or the run-at it last recorded. A completed
that follows its run's cancel_requested is an ack that came first: the run applied its
effect before it could hear of the cancel, so its "effect" goes before the
cancel_requested. A purge is not modelled: a task's trace ends before it. A workflow's
step that waits for its stage (enqueued as `waiting`) enters the model's queue when its
stage starts: its `triggered` event is the Enqueue; one cancelled while it waited never
entered, and has no trace (tracecheck checks it; the Workflow model checks the stages).

A heartbeat after a cancel_requested answered "cancel" (heartbeat.lua answers so to
every renewal of a flagged task), but the log does not say whether its holder heard it;
the holder's settle does. One that settles as if untold (completed, failed or released:
a holder that heard ends the task with ack_cancelled) had decided before the answer
reached it (a beat in flight while it settled, or a reply lost with its connection), so
its heartbeats after the cancel_requested become "unheard" entries: Redis renewed the
lease, the holder learned nothing.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

# Event types the model has an action for.
MODELLED = ("enqueued", "leased", "heartbeat", "completed", "failed", "released", "reaped",
            "promoted", "revived", "cancel_requested", "cancelled", "throttled",
            "rescheduled")
# Events that change nothing the model holds: a task parked for a concurrency slot, or
# unparked, stays pending (the ConcurrencyLimit model checks the slots); a run's
# progress changes no place, state or token (the Progress model checks its fencing).
STUTTERS = ("parked", "unparked", "progress")
# Model steps that write no event, inserted before the event that implies them.
IMPLIED = {"completed": "effect", "reaped": "expire", "promoted": "tick"}
# A holder's settles that mean it had not heard of its task's cancel (one that had would
# settle with ack_cancelled: a `cancelled` event from running).
UNTOLD = ("completed", "failed", "released")
# Integer fields an event may lack; -1 in the trace means "not given".
NUMBERS = ("token", "retries", "ts", "at")

Event = tuple[int, Mapping[str, str]]


@dataclass(frozen=True)
class Step:
    """One entry of a task's TLA+ trace: a model action and what the log says of it;
    `prior` is the state a cancel says it left (its `from`), '' for other events."""

    type: str
    state: str
    token: int = -1
    retries: int = -1
    ts: int = -1
    at: int = -1
    prior: str = ""

    def tla(self) -> str:
        return (
            f'[type |-> "{self.type}", state |-> "{self.state}", token |-> {self.token}, '
            f"retries |-> {self.retries}, ts |-> {self.ts}, at |-> {self.at}, "
            f'prior |-> "{self.prior}"]'
        )


def _number(fields: Mapping[str, str], name: str) -> int:
    text = fields.get(name, "")
    try:
        return int(text) if text != "" else -1
    except ValueError:
        return -1


def steps(events: Iterable[Mapping[str, str]], epoch_ms: int = 0) -> list[Step]:
    """One task's events, in order, as trace entries with the implied steps inserted;
    times are counted from `epoch_ms`, as TLC's integers are 32-bit."""
    out: list[Step] = []
    for fields in _queued(events):
        kind = fields.get("type", "")
        if kind == "purged":
            break
        if kind in STUTTERS:
            continue
        numbers = {name: _number(fields, name) for name in NUMBERS}
        for name in ("ts", "at"):
            if numbers[name] >= 0:
                numbers[name] = max(numbers[name] - epoch_ms, 0)
        requested = _requested_at(out, numbers["token"])
        if kind in UNTOLD and requested is not None:
            out[requested:] = [replace(s, type="unheard")
                               if s.type == "heartbeat" and s.token == numbers["token"] else s
                               for s in out[requested:]]
        implied = IMPLIED.get(kind)
        if implied == "effect" and requested is not None:
            # Applied before the run could hear of the cancel: before the cancel came.
            effect = Step("effect", "running", numbers["token"], ts=out[requested].ts)
            out.insert(requested, effect)
        elif implied is not None:
            before = out[-1].state if out else ""
            token = numbers["token"] if implied == "effect" else -1
            out.append(Step(implied, before, token=token, ts=numbers["ts"]))
        # An unknown type stays in the trace: no action matches it, so TLC rejects it.
        out.append(Step(kind, fields.get("state", ""), prior=fields.get("from", ""), **numbers))
    return _ranked(out)


def _ranked(out: list[Step]) -> list[Step]:
    """The trace with each token a lease or a reap minted as its rank among them (1 for
    the lowest): the model counts tokens up by one, and lease.lua mints one more than
    the last or the server clock's floor, far beyond TLC's 32-bit integers (see
    lua/_common.lua's mint_token). A log whose mints do not rise one after another
    ranks out of the model's order, or twice at one rank, and TLC rejects it as
    before. 0 (never leased) and -1 (not given) stay; a token no lease or reap minted
    becomes -2, which no holder and no record holds."""
    minted = sorted({s.token for s in out if s.type in ("leased", "reaped") and s.token > 0})
    rank = {token: n for n, token in enumerate(minted, start=1)}
    return [s if s.token <= 0 else replace(s, token=rank.get(s.token, -2)) for s in out]


def _queued(events: Iterable[Mapping[str, str]]) -> Iterator[Mapping[str, str]]:
    """A task's events from when it entered the queue: a workflow step's wait for its
    stage is left out, and its trigger is its enqueue."""
    for fields in events:
        if fields.get("type") == "enqueued" and fields.get("state") == "waiting":
            continue
        if fields.get("type") == "cancelled" and fields.get("from") == "waiting":
            return
        yield {**fields, "type": "enqueued"} if fields.get("type") == "triggered" else fields


def _requested_at(out: Sequence[Step], token: int) -> int | None:
    """Where in `out` the cancel of the run holding `token` was requested, if it was."""
    found = [n for n, s in enumerate(out) if s.type == "cancel_requested" and s.token == token]
    return found[-1] if found and token >= 0 else None


def per_task(events: Iterable[Event]) -> dict[str, list[Step]]:
    """The log split by task, in first-appearance order, each as its trace."""
    grouped: dict[str, list[Mapping[str, str]]] = {}
    times = []
    for _, fields in events:
        grouped.setdefault(fields.get("task", ""), []).append(fields)
        if (ts := _number(fields, "ts")) >= 0:
            times.append(ts)
    epoch_ms = min(times, default=0)
    traces = {task: steps(rows, epoch_ms) for task, rows in grouped.items()}
    return {task: trace for task, trace in traces.items() if trace}


def module(traces: Mapping[str, Sequence[Step]], max_retries: int, name: str = "TraceData") -> str:
    """A TLA+ module defining the traces and the bounds TaskQueueTrace.cfg reads."""
    if not traces:
        raise ValueError("no task in the log: nothing to validate")
    ids = ", ".join(json.dumps(task) for task in traces)
    bodies = ",\n".join(
        "  <<" + ",\n    ".join(step.tla() for step in trace) + ">>" for trace in traces.values()
    )
    leases = max(sum(s.type == "leased" for s in t) for t in traces.values())
    releases = max(sum(s.type == "released" for s in t) for t in traces.values())
    revivals = max(sum(s.type == "revived" for s in t) for t in traces.values())
    return "\n".join([
        f"---- MODULE {name} ----",
        "EXTENDS Integers",
        "\\* Generated by taskq.tools.tlatrace from a queue's event log: one trace per task.",
        f"TraceTasks == <<{ids}>>",
        f"TraceMaxRetries == {max_retries}",
        "\\* Every lease is its own model worker: a holder whose lease ended keeps its",
        "\\* stale token, and may act on it later.",
        f"TraceWorkers == {max(leases, 1)}",
        f"TraceReleases == {releases}",
        f"TraceRevivals == {revivals}",
        f"Traces == <<\n{bodies}\n>>",
        "====",
        "",
    ])


def write_log(events: Iterable[Event], path: Path) -> int:
    """Save `(seq, fields)` events as JSON lines; returns how many."""
    count = 0
    with path.open("w", encoding="utf-8") as out:
        for seq, fields in events:
            out.write(json.dumps({"seq": seq, **fields}, sort_keys=True) + "\n")
            count += 1
    return count


def read_log(path: Path) -> list[Event]:
    """Events saved by `write_log`, in order."""
    events: list[Event] = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.strip():
            row = json.loads(line)
            seq = int(row.pop("seq"))
            events.append((seq, {str(k): str(v) for k, v in row.items()}))
    return events
