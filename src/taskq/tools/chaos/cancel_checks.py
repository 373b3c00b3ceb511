"""C1 on the chaos run: what its event log and ledger show of the canceller's cancels.

Two checks. "None lost": every task the canceller asked to cancel ended as its answer
allows (cancelled, or completed where its run's ack came before the cancel), every task
it enqueued to die ended cancelled, and no other task has a cancel in the log.

"None run after cancel", from the log's events and the ledger's charges (each with the
token of the run that made it, and the time it was written, read from a clock that is
the embedded Redis server's own): for each task with a cancel in the log, its token at
that event is the newest run's; the check fails on

- a lease in the log after the cancel, or a charge with a newer token: a run that began
  after the cancel applied an effect (even one the log missed);
- for a task cancelled while running: a charge of the run then holding it, written
  after a renewal of that run answered "cancel" (every renewal after the request does)
  when no renewal of that run came before the request. effect() renews the lease before
  it lets a block in, so such a block was let in by a renewal that told its run of the
  cancel, which effect() must refuse.

What it cannot see: which renewal let a block in. A block let in before the cancel and
written after it (a run paused inside effect()'s block, which no check can stop: the
model's NoChargeAfterCancelSeen does not hold) passes, and so would a block let in after
the cancel by a run that had also renewed before it. Nor can it tell the one legitimate
path to the failing case: effect() found Redis unreachable (its renewal never ran), let
the block in on the lease it still held, and a renewal of the run ran in Redis between
that moment and the charge's write. The time comparison needs both clocks to be one: it
is made only when the run's Redis is its own embedded server.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from taskq.results import Cancellation
from taskq.tools.chaos.canceller import Cancels
from taskq.tools.ledger import Charge

Rows = Sequence[tuple[int, Mapping[str, str]]]


@dataclass
class TaskCancel:
    """One task's cancel as its log shows it: the state it left (`source`: running for a
    cancel_requested), the task's token then, the event's time, whether the run then
    holding it had renewed before it, when a renewal of that run first answered
    "cancel" (None: never), whether a lease followed, and how the task ended."""

    source: str
    token: int
    at: int
    renewed_before: bool = False
    told_at: int | None = None
    leased_after: bool = False
    ended_by: str = ""

    def follow(self, fields: Mapping[str, str]) -> None:
        """Take one of the task's events after its cancel."""
        kind, state = fields.get("type", ""), fields.get("state", "")
        if kind == "leased":
            self.leased_after = True
        elif kind == "heartbeat" and self.told_at is None and self.source == "running" \
                and _int(fields, "token") == self.token:
            self.told_at = _int(fields, "ts")
        elif kind in ("failed", "released", "reaped") and state == "cancelled":
            self.ended_by = f"{kind} into cancelled"
        elif kind == "cancelled":
            self.ended_by = f"cancelled from {fields.get('from', '')}"
        elif kind == "completed":
            self.ended_by = "acked first"


def _int(fields: Mapping[str, str], name: str) -> int:
    try:
        return int(fields.get(name, "") or 0)
    except ValueError:
        return 0


def task_cancels(rows: Rows) -> dict[str, TaskCancel]:
    """Each task with a cancel event (cancelled or cancel_requested) in the log, by id."""
    tokens: dict[str, int] = {}
    renewed: dict[str, set[int]] = {}
    found: dict[str, TaskCancel] = {}
    for _, fields in rows:
        task, kind = fields.get("task", ""), fields.get("type", "")
        if task in found:
            found[task].follow(fields)
        elif kind in ("cancelled", "cancel_requested"):
            current = tokens.get(task, 0)
            cancel = found[task] = TaskCancel(
                fields.get("from", "") if kind == "cancelled" else "running", current,
                _int(fields, "ts"), renewed_before=current in renewed.get(task, ()))
            cancel.follow(fields)
        elif kind in ("leased", "reaped"):
            tokens[task] = _int(fields, "token")
        elif kind == "heartbeat":
            renewed.setdefault(task, set()).add(_int(fields, "token"))
    return found


@dataclass
class CancelCount:
    """The run's cancels in figures, and what breaks C1."""

    answers: Counter[str] = field(default_factory=Counter)
    unanswered: int = 0
    outages: int = 0
    ended: Counter[str] = field(default_factory=Counter)
    cancelled: int = 0
    acked_first: int = 0
    effects: int = 0
    acked_first_effects: int = 0
    before: int = 0
    untold: int = 0
    let_in_before: int = 0
    times_compared: bool = True
    lost: list[tuple[str, str]] = field(default_factory=list)
    stray: list[str] = field(default_factory=list)
    leased_after: list[str] = field(default_factory=list)
    later_runs: list[tuple[str, int]] = field(default_factory=list)
    told_first: list[tuple[str, int]] = field(default_factory=list)


def count_cancels(rows: Rows, final: Mapping[str, str], cancels: Cancels,
                  charges: Iterable[Charge], same_clock: bool, lost_ok: bool) -> CancelCount:
    """The figures and C1's breaches, from the log's rows, each task's final state, the
    canceller's record and the ledger's charges of the tasks it asked about."""
    count = CancelCount(outages=cancels.outages, times_compared=same_clock)
    _count_answers(count, final, cancels, lost_ok)
    found = task_cancels(rows)
    count.stray = sorted(t for t in found if t not in cancels.asked)
    for task_id, cancel in found.items():
        if final.get(task_id) == "cancelled":
            count.cancelled += 1
            count.ended[cancel.ended_by] += 1
        elif cancel.ended_by == "acked first":
            count.acked_first += 1
        if cancel.leased_after:
            count.leased_after.append(task_id)
    for charge in charges:
        if charge.task_id in found:
            _place(count, charge, found[charge.task_id], final.get(charge.task_id, ""),
                   same_clock)
    return count


def _count_answers(count: CancelCount, final: Mapping[str, str], cancels: Cancels,
                   lost_ok: bool) -> None:
    """The canceller's answers, and each task it asked about that ended otherwise than
    its answer allows."""
    for task_id, answer in cancels.asked.items():
        if answer is None:
            count.unanswered += 1
        else:
            count.answers[f"{answer.outcome} ({answer.state or 'no record'})"] += 1
        ended = final.get(task_id)
        if ended is None and lost_ok:
            continue  # its every event lost with a Redis crash
        if ended not in _allowed_ends(task_id, answer, cancels.doomed, lost_ok):
            count.lost.append((task_id, str(ended)))


def _allowed_ends(task_id: str, answer: Cancellation | None, doomed: Sequence[str],
                  lost_ok: bool) -> set[str]:
    """The final states a task the canceller asked about may have. Where a Redis crash
    may have lost acknowledged writes (`lost_ok`), a cancel may be among them."""
    if task_id in doomed:
        return {"cancelled", "dead"} if lost_ok else {"cancelled"}  # no worker runs it
    if lost_ok or answer is None:
        return {"cancelled", "completed"}
    if answer.outcome == "cancelled" or answer.state == "cancelled":
        return {"cancelled"}
    if answer.outcome == "unchanged" and answer.state == "completed":
        return {"completed"}
    return {"cancelled", "completed"}


def _place(count: CancelCount, charge: Charge, cancel: TaskCancel, final: str,
           same_clock: bool) -> None:
    """Count one charge of a task with a cancel, or record the breach it is."""
    if final == "cancelled":
        count.effects += 1
    elif final == "completed":
        count.acked_first_effects += 1
    if charge.token > cancel.token:
        count.later_runs.append((charge.task_id, charge.token))
        return
    if not same_clock:
        return
    holder = cancel.source == "running" and charge.token == cancel.token
    if charge.at_ms <= cancel.at:
        count.before += 1
    elif not holder:
        # Its run's lease had ended before the cancel: let in while it held the lease,
        # written after (paused inside its block).
        count.let_in_before += 1
    elif cancel.told_at is None or charge.at_ms <= cancel.told_at:
        count.untold += 1
    elif cancel.renewed_before:
        count.let_in_before += 1
    else:
        count.told_first.append((charge.task_id, charge.token))


@dataclass
class CancelChecks:
    """C1's two verdicts, with the figures they rest on."""

    none_lost: tuple[bool, str]
    none_after: tuple[bool, str]


def cancel_checks(count: CancelCount) -> CancelChecks:
    """The two C1 checks' verdicts and details, from `count`."""
    answers = ", ".join(f"{n} {a}" for a, n in sorted(count.answers.items()))
    ended = ", ".join(f"{n} {how}" for how, n in sorted(count.ended.items()))
    none_lost = not count.lost and not count.stray
    lost = (f"{count.cancelled} ended cancelled ({ended or 'none'}); {count.acked_first} "
            f"completed, their ack first; cancel calls: {answers or 'none'}; "
            f"{count.unanswered} unanswered; {count.outages} cut off by outages and made again"
            + (f"; ended otherwise: {count.lost[:5]}" if count.lost else "")
            + (f"; cancelled but never asked: {count.stray[:5]}" if count.stray else ""))
    after_ok = not (count.leased_after or count.later_runs or count.told_first)
    timing = (f"{count.before} written before the cancel, {count.untold} after it but before "
              f"a renewal told their run, {count.let_in_before} after that but let in by a "
              "renewal before the cancel"
              if count.times_compared else
              "their times not compared with the log's (Redis is not the run's own server)")
    after = (f"{count.effects} effects of tasks ended cancelled, {count.acked_first_effects} "
             f"of tasks whose ack came first: {timing}; {len(count.leased_after)} leases "
             f"after a cancel; {len(count.later_runs)} effects by a run begun after one; "
             f"{len(count.told_first)} let in after their run was told"
             + (f"; leased after: {count.leased_after[:5]}" if count.leased_after else "")
             + (f"; later runs: {count.later_runs[:5]}" if count.later_runs else "")
             + (f"; told first: {count.told_first[:5]}" if count.told_first else ""))
    return CancelChecks((none_lost, lost), (after_ok, after))
