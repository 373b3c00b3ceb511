"""Breadth-first explicit-state search that counts states the way TLC does."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Generic, Literal, NamedTuple

from .model import Model, S

ViolationKind = Literal["invariant", "property", "deadlock"]


@dataclass(frozen=True)
class Step(Generic[S]):
    """One state of a trace and the action that led to it (None for an initial state)."""

    action: str | None
    state: S


@dataclass(frozen=True)
class Violation(Generic[S]):
    """What failed, and a shortest behaviour from an initial state that shows it."""

    kind: ViolationKind
    name: str
    trace: tuple[Step[S], ...]

    @property
    def depth(self) -> int:
        """Length of the trace in states, TLC's numbering: the initial state is 1."""
        return len(self.trace)


@dataclass(frozen=True)
class Result(Generic[S]):
    """TLC's closing statistics, and the violation that stopped the search, if any.

    distinct:  states stored ("distinct states found"), including a violating one.
    generated: initial states plus every successor computed ("states generated").
    depth:     the highest level reached, initial states being level 1.
    queued:    states stored but not yet explored ("states left on queue").
    """

    model: str
    distinct: int
    generated: int
    depth: int
    queued: int
    violation: Violation[S] | None

    @property
    def ok(self) -> bool:
        return self.violation is None


class _Node(NamedTuple, Generic[S]):
    parent: S | None  # None for an initial state
    action: str | None
    level: int


def check(model: Model[S]) -> Result[S]:
    """Explore every reachable state breadth first; stop at the first violation.

    Invariants are checked on a state when it is first generated, as TLC does, so
    the first violation found is at the smallest depth at which one exists, and
    the counters are those TLC prints when it stops there.
    """
    return _Search(model).run()


class _Search(Generic[S]):
    def __init__(self, model: Model[S]) -> None:
        self.model = model
        self.seen: dict[S, _Node[S]] = {}
        self.queue: deque[S] = deque()
        self.generated = 0
        self.depth = 0
        self.step_props = model.step_properties()
        self.end_props = model.end_properties()

    def run(self) -> Result[S]:
        for state in self.model.init:
            self.generated += 1
            failure = self._admit(state, None, None, 1)
            if failure is not None:
                return self._result(failure)
        while self.queue:
            state = self.queue.popleft()
            failure = self._expand(state)
            if failure is not None:
                return self._result(failure)
        return self._result(None)

    def _expand(self, state: S) -> Violation[S] | None:
        level = self.seen[state].level
        successors = 0
        for action, succ in self.model.next(state):
            successors += 1
            self.generated += 1
            failure = self._admit(succ, state, action, level + 1)
            if failure is not None:
                return failure
        if successors == 0:
            return self._at_end(state)
        return None

    def _admit(
        self, state: S, parent: S | None, action: str | None, level: int
    ) -> Violation[S] | None:
        """Store a newly generated state and check it, in TLC's order."""
        constraint = self.model.constraint
        if constraint is not None and not constraint(state):
            return None
        new = state not in self.seen
        if new:
            self.seen[state] = _Node(parent, action, level)
            self.depth = max(self.depth, level)
            for inv in self.model.invariants:
                if not inv.holds(state):
                    return Violation("invariant", inv.name, self._trace(state))
        if parent is not None and action is not None:
            for prop in self.step_props:
                if not prop.holds(parent, action, state):
                    trace = (*self._trace(parent), Step(action, state))
                    return Violation("property", prop.name, trace)
        if new:
            self.queue.append(state)
        return None

    def _at_end(self, state: S) -> Violation[S] | None:
        """A state with no successor at all: a deadlock, or the end of a finite run."""
        if self.model.check_deadlock:
            return Violation("deadlock", "Deadlock", self._trace(state))
        for prop in self.end_props:
            if not prop.holds(state):
                return Violation("property", prop.name, self._trace(state))
        return None

    def _trace(self, state: S) -> tuple[Step[S], ...]:
        steps: list[Step[S]] = []
        current: S | None = state
        while current is not None:
            node = self.seen[current]
            steps.append(Step(node.action, current))
            current = node.parent
        return tuple(reversed(steps))

    def _result(self, violation: Violation[S] | None) -> Result[S]:
        return Result(
            model=self.model.name,
            distinct=len(self.seen),
            generated=self.generated,
            depth=self.depth,
            queued=len(self.queue),
            violation=violation,
        )
