"""What a model hands the checker: initial states, next-state relation, properties."""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar


class State(Hashable, Protocol):
    """A frozen record of a model's variables; a typing.NamedTuple fits."""

    def _asdict(self) -> dict[str, Any]: ...


S = TypeVar("S", bound=State)

# An action label (the TLA+ action's name, with its \E bindings) and a successor.
Transition = tuple[str, S]


@dataclass(frozen=True)
class Invariant(Generic[S]):
    """A state predicate that must hold in every reachable state (TLC INVARIANT)."""

    name: str
    holds: Callable[[S], bool]


@dataclass(frozen=True)
class StepProperty(Generic[S]):
    """A predicate on every step s -[action]-> t, like TLC's [][A]_vars PROPERTY."""

    name: str
    holds: Callable[[S, str, S], bool]


@dataclass(frozen=True)
class EndProperty(Generic[S]):
    """A predicate on every state where a run stops because no action is enabled.

    For a model whose runs are finite (every task ends completed or dead, say) this
    is what <>[]P asks of TLC under weak fairness, checked without a liveness pass.
    """

    name: str
    holds: Callable[[S], bool]


Property = StepProperty[S] | EndProperty[S]


@dataclass(frozen=True)
class Model(Generic[S]):
    """A finite-state system: the unit the checker explores.

    `constraint` plays TLC's CONSTRAINT: a successor that fails it is counted as
    generated but neither stored, checked nor explored.
    """

    name: str
    init: Sequence[S]
    next: Callable[[S], Iterable[Transition[S]]]
    invariants: Sequence[Invariant[S]] = ()
    properties: Sequence[Property[S]] = ()
    constraint: Callable[[S], bool] | None = None
    check_deadlock: bool = True

    def step_properties(self) -> list[StepProperty[S]]:
        return [p for p in self.properties if isinstance(p, StepProperty)]

    def end_properties(self) -> list[EndProperty[S]]:
        return [p for p in self.properties if isinstance(p, EndProperty)]
