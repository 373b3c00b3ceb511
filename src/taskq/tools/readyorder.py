"""P1 on an event log: the ready lists the log implies, one per priority, and every lease
checked against them. Used by `taskq.tools.tracecheck.validate`.

Replaying the log in order, a task joins the back of its priority's list when it becomes
ready (`enqueued`, `promoted`, `revived` or, a workflow's step, `triggered` into
pending), the front when it is released
into pending or unparked, and leaves when it is leased, parked or cancelled. Each
`leased` event must take the front of the highest priority that holds any task. A
task's priority is the one its `enqueued` event carries (the default when it carries
none): it never changes.

Where the log does not hold a task's whole history the check says nothing of it, and
counts why, rather than guess:
- a task whose first event in the log is not its `enqueued` one (the log was trimmed
  past it, or started over) has no known priority or place: its leases are not checked,
  and it stands in no one's way;
- a gap in the sequence numbers (rows removed from the middle of what was read) makes
  every task seen before it unknown the same way;
- a lease drops an id whose record is gone, writing no event: a task a lease passed
  over that the log never shows again may have been dropped so, and is forgotten, not
  reported. (When every task must end, `validate` still finds it unfinished.)
A Redis restart that lost its last writes (`appendfsync everysec`) lost their events in
the same step: a script's writes reach the AOF as one transaction, so the log stays the
history of exactly what Redis kept, and needs no exception.
"""

from __future__ import annotations

from collections import Counter, OrderedDict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from taskq.limits import PRIORITY

# Events that make a task ready, at the back of its priority's list; a release, or a
# free concurrency slot that unparks a task, puts it at the front (it already waited its
# turn). A task parked for a slot (`parked`) has left ready.
JOIN_BACK = ("enqueued", "promoted", "revived", "triggered")
JOIN_FRONT = ("released", "unparked")

# Why a lease was not checked.
NOT_IN_LOG = "its enqueued event is not in the log"
ACROSS_GAP = "its history crosses a gap in the log"
UNREADABLE = "its priority is unreadable"
NOT_READY = "not ready as the log tells it (reported by the per-task check)"


@dataclass
class PriorityReport:
    """What the P1 replay found: leases seen and checked, checked leases by priority,
    why the others were not checked, tasks passed over that the log never shows again,
    and violations (task id, seq, message)."""

    leases: int = 0
    checked: int = 0
    by_priority: Counter[int] = field(default_factory=Counter)
    unchecked: Counter[str] = field(default_factory=Counter)
    passed_over: list[str] = field(default_factory=list)
    violations: list[tuple[str, int, str]] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.violations

    @classmethod
    def merged(cls, reports: Iterable[PriorityReport]) -> PriorityReport:
        """The reports of several queues (a sharded queue's shards, each replayed on its
        own, since each has its own ready lists) as one."""
        whole = cls()
        for r in reports:
            whole.leases += r.leases
            whole.checked += r.checked
            whole.by_priority.update(r.by_priority)
            whole.unchecked.update(r.unchecked)
            whole.passed_over += r.passed_over
            whole.violations += r.violations
        return whole


class ReadyOrder:
    """The ready lists as the log implies them while it is replayed, front first."""

    def __init__(self, last_seen: Mapping[str, int]) -> None:
        # Index of each task's last event in the log: a task passed over by a lease and
        # never seen after may have been dropped by it.
        self.last_seen = last_seen
        self.levels: dict[int, OrderedDict[str, None]] = {}
        self.level_of: dict[str, int] = {}
        self.priority: dict[str, int] = {}
        self.unknown: dict[str, str] = {}
        self.report = PriorityReport()

    def apply(self, index: int, seq: int, fields: Mapping[str, str]) -> None:
        """Replay the event at `index` of the log (sequence number `seq`)."""
        task, kind = fields.get("task", ""), fields.get("type", "")
        if task not in self.priority and task not in self.unknown:
            self._first_event(task, seq, kind, fields)
        if kind == "leased":
            self._lease(index, seq, task)
            return
        self._leave(task)
        if fields.get("state") == "pending" and task in self.priority:
            if kind in JOIN_BACK:
                self._join(task, front=False)
            elif kind in JOIN_FRONT:
                self._join(task, front=True)

    def forget_all(self) -> None:
        """A gap in the log: what happened to every task seen so far is unknown."""
        for task in self.priority:
            self.unknown[task] = ACROSS_GAP
        self.priority.clear()
        self.levels.clear()
        self.level_of.clear()

    def _first_event(self, task: str, seq: int, kind: str, fields: Mapping[str, str]) -> None:
        if kind != "enqueued":
            self.unknown[task] = NOT_IN_LOG
            return
        given = fields.get("priority", str(PRIORITY.default))
        priority = int(given) if given.isascii() and given.isdigit() else -1
        if not PRIORITY.low <= priority <= PRIORITY.high:
            self.unknown[task] = UNREADABLE
            self.report.violations.append(
                (task, seq, f"P1: enqueued with priority {given!r}, not {PRIORITY.low} to "
                            f"{PRIORITY.high}"))
            return
        self.priority[task] = priority

    def _join(self, task: str, front: bool) -> None:
        priority = self.priority[task]
        level = self.levels.setdefault(priority, OrderedDict())
        level[task] = None
        if front:
            level.move_to_end(task, last=False)
        self.level_of[task] = priority

    def _leave(self, task: str) -> None:
        priority = self.level_of.pop(task, None)
        if priority is None:
            return
        level = self.levels[priority]
        del level[task]
        if not level:
            del self.levels[priority]

    def _lease(self, index: int, seq: int, task: str) -> None:
        report = self.report
        report.leases += 1
        if task in self.unknown:
            report.unchecked[self.unknown[task]] += 1
            return
        priority = self.level_of.get(task)
        if priority is None:
            report.unchecked[NOT_READY] += 1
            return
        report.checked += 1
        report.by_priority[priority] += 1
        top = max(self.levels)
        if top != priority or next(iter(self.levels[top])) != task:
            self._passed_over(index, seq, task, priority)
        self._leave(task)

    def _passed_over(self, index: int, seq: int, task: str, priority: int) -> None:
        """The lease of `task` was not of the front: every task ahead of it either never
        appears in the log again (a lease may have dropped it) or makes this a violation."""
        ahead = [t for p in sorted(self.levels, reverse=True) if p > priority
                 for t in self.levels[p]]
        for t in self.levels[priority]:
            if t == task:
                break
            ahead.append(t)
        blocking = [t for t in ahead if self.last_seen[t] > index]
        for t in ahead:
            if self.last_seen[t] < index:
                self.report.passed_over.append(t)
                self._leave(t)
        if blocking:
            first = blocking[0]
            self.report.violations.append(
                (task, seq, f"P1: leased at priority {priority} while {first!r} (priority "
                            f"{self.priority[first]}) was ahead of it in ready"))


def check_order(events: Sequence[tuple[int, Mapping[str, str]]]) -> PriorityReport:
    """Replay `(seq, fields)` events in order; the P1 findings."""
    last_seen = {fields.get("task", ""): i for i, (_, fields) in enumerate(events)}
    order = ReadyOrder(last_seen)
    previous: int | None = None
    for index, (seq, fields) in enumerate(events):
        if previous is not None and seq > previous + 1:
            order.forget_all()
        previous = seq
        order.apply(index, seq, fields)
    return order.report
