"""Python transcription of RoostPush.tla.

TLA+                  Python
--------------------  ------------------------------------------------------
Init                  initial()
Deliver, Repeats      deliver(), repeats()
Append                append(c, s)   the three disjuncts, in order, labelled
                                     Append/live, Append/dropped, Append/closed
Trim                  trim(c, s)     one successor per o, ascending
Drop                  drop(c, s)
Resume                resume(c, s)   labelled Resume/gap or Resume/replay
Next                  next_states(c, s)
TypeOK ..             the INVARIANTS table, under the TLA+ names

The actions are written against the Feed protocol, not State, so that the
mutant (roost_push_split_attach.py) reuses Append, Trim and Drop unchanged on
its own state, which has one more variable, just as its .tla EXTENDS this one.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import NamedTuple, Protocol, Self, TypeVar

from specs.tlacheck import Model, Transition
from specs.tlacheck import cfg as cfgs
from specs.tlacheck.model import State as StateLike


class Feed(StateLike, Protocol):
    """The variables of RoostPush, as every state of this family has them."""

    # Read-only properties, so that a NamedTuple's fields satisfy them.
    @property
    def latest(self) -> int: ...
    @property
    def oldest(self) -> int: ...
    @property
    def open(self) -> bool: ...
    @property
    def cursor(self) -> int: ...
    @property
    def received(self) -> frozenset[int]: ...
    @property
    def dupes(self) -> int: ...
    @property
    def gapSeen(self) -> bool: ...
    @property
    def lost(self) -> bool: ...
    @property
    def resumed(self) -> bool: ...

    # Keyword-only, like NamedTuple._replace, so mypy checks every primed variable.
    def _replace(
        self,
        *,
        latest: int = ...,
        oldest: int = ...,
        open: bool = ...,
        cursor: int = ...,
        received: frozenset[int] = ...,
        dupes: int = ...,
        gapSeen: bool = ...,
        lost: bool = ...,
        resumed: bool = ...,
    ) -> Self: ...


F = TypeVar("F", bound=Feed)


class State(NamedTuple):
    # Field names are the TLA+ variable names, so that traces read like TLC's.
    latest: int
    oldest: int
    open: bool
    cursor: int
    received: frozenset[int]
    dupes: int
    gapSeen: bool
    lost: bool
    resumed: bool


@dataclass(frozen=True)
class Constants:
    max_id: int
    keep: int

    @property
    def ids(self) -> frozenset[int]:
        return frozenset(range(1, self.max_id + 1))

    @classmethod
    def from_cfg(cls, cfg: cfgs.Config) -> Constants:
        return cls(max_id=cfg.int_constant("MAX_ID"), keep=cfg.int_constant("KEEP"))


def initial() -> State:
    return State(0, 1, False, 0, frozenset(), 0, False, False, False)


def deliver(received: frozenset[int], ids: Iterable[int]) -> frozenset[int]:
    return received | frozenset(ids)


def repeats(received: frozenset[int], ids: Iterable[int]) -> int:
    return len(received & frozenset(ids))


def append(c: Constants, s: F) -> Iterator[Transition[F]]:
    if s.latest >= c.max_id:
        return
    row = s.latest + 1
    if s.open:
        yield (
            "Append/live",
            s._replace(
                latest=row,
                received=deliver(s.received, {row}),
                dupes=s.dupes + repeats(s.received, {row}),
                cursor=row,
                resumed=False,
            ),
        )
        yield "Append/dropped", s._replace(latest=row, open=False, resumed=False)
    else:
        yield "Append/closed", s._replace(latest=row, resumed=False)


def trim(c: Constants, s: F) -> Iterator[Transition[F]]:
    for o in range(s.oldest + 1, s.latest - c.keep + 2):
        yield f"Trim(o={o})", s._replace(oldest=o, lost=s.lost or o > s.cursor + 1, resumed=False)


def drop(_: Constants, s: F) -> Iterator[Transition[F]]:
    if s.open:
        yield "Drop", s._replace(open=False, resumed=False)


def gap_check_and_replay(s: F) -> tuple[str, F]:
    """Resume's IF: signal a gap or replay the missing rows. `open` is left alone."""
    if s.cursor < s.oldest - 1:
        return "gap", s._replace(gapSeen=True, cursor=s.latest, resumed=False)
    replay = range(s.cursor + 1, s.latest + 1)
    return "replay", s._replace(
        received=deliver(s.received, replay),
        dupes=s.dupes + repeats(s.received, replay),
        cursor=s.latest,
        resumed=True,
    )


def resume(_: Constants, s: State) -> Iterator[Transition[State]]:
    if not s.open:
        branch, succ = gap_check_and_replay(s)
        yield f"Resume/{branch}", succ._replace(open=True)


def next_states(c: Constants, s: State) -> Iterator[Transition[State]]:
    yield from append(c, s)
    yield from trim(c, s)
    yield from drop(c, s)
    yield from resume(c, s)


def type_ok(c: Constants, s: Feed) -> bool:
    return (
        0 <= s.latest <= c.max_id
        and 1 <= s.oldest <= c.max_id + 1
        and s.oldest <= s.latest + 1
        and isinstance(s.open, bool)
        and 0 <= s.cursor <= c.max_id
        and s.received <= c.ids
        and s.dupes >= 0
        and isinstance(s.gapSeen, bool)
        and isinstance(s.lost, bool)
        and isinstance(s.resumed, bool)
    )


def no_silent_gap(s: Feed) -> bool:
    return s.gapSeen or s.received == frozenset(range(1, s.cursor + 1))


def no_duplicates(s: Feed) -> bool:
    return s.dupes == 0


def caught_up_after_resume(s: Feed) -> bool:
    return not s.resumed or s.cursor == s.latest


def gap_only_when_trimmed(s: Feed) -> bool:
    return not s.gapSeen or s.lost


def open_stream_is_current(s: Feed) -> bool:
    return not s.open or s.cursor == s.latest


def invariants(c: Constants) -> dict[str, Callable[[Feed], bool]]:
    """RoostPush's invariants by their TLA+ names; they hold the mutant to the same rules."""
    return {
        "TypeOK": lambda s: type_ok(c, s),
        "NoSilentGap": no_silent_gap,
        "NoDuplicates": no_duplicates,
        "CaughtUpAfterResume": caught_up_after_resume,
        "GapOnlyWhenTrimmed": gap_only_when_trimmed,
        "OpenStreamIsCurrent": open_stream_is_current,
    }


def model(cfg: cfgs.Config) -> Model[State]:
    c = Constants.from_cfg(cfg)
    return Model(
        name="RoostPush",
        init=(initial(),),
        next=lambda s: next_states(c, s),
        invariants=cfgs.invariants(cfg, invariants(c)),
        check_deadlock=cfg.check_deadlock,
    )
