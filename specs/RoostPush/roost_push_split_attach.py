r"""Python transcription of RoostPushSplitAttach.tla, the two-stage resume mutant.

TLA+                          Python
----------------------------  ------------------------------------------------
SplitInit                     initial()
Append /\ UNCHANGED replayed  roost_push.append   (the original, on this state)
Trim /\ UNCHANGED replayed    roost_push.trim
Drop /\ UNCHANGED replayed    roost_push.drop
Replay                        replay(s)   labelled Replay/gap or Replay/replay
Attach                        attach(s)
SplitNext                     next_states(c, s)
SplitTypeOK                   split_type_ok(c, s)
other invariants              roost_push.invariants(c), unchanged
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import NamedTuple

from specs.tlacheck import Model, Transition
from specs.tlacheck import cfg as cfgs

from . import roost_push as rp


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
    replayed: bool


def initial() -> State:
    return State(*rp.initial(), replayed=False)


def replay(s: State) -> Iterator[Transition[State]]:
    if not s.open and not s.replayed:
        branch, succ = rp.gap_check_and_replay(s)
        yield f"Replay/{branch}", succ._replace(replayed=True)


def attach(s: State) -> Iterator[Transition[State]]:
    if s.replayed:
        yield "Attach", s._replace(open=True, replayed=False, resumed=False)


def next_states(c: rp.Constants, s: State) -> Iterator[Transition[State]]:
    yield from rp.append(c, s)
    yield from rp.trim(c, s)
    yield from rp.drop(c, s)
    yield from replay(s)
    yield from attach(s)


def split_type_ok(c: rp.Constants, s: State) -> bool:
    return rp.type_ok(c, s) and isinstance(s.replayed, bool)


def invariants(c: rp.Constants) -> dict[str, Callable[[State], bool]]:
    table: dict[str, Callable[[State], bool]] = dict(rp.invariants(c))
    table["SplitTypeOK"] = lambda s: split_type_ok(c, s)
    return table


def model(cfg: cfgs.Config) -> Model[State]:
    c = rp.Constants.from_cfg(cfg)
    return Model(
        name="RoostPushSplitAttach",
        init=(initial(),),
        next=lambda s: next_states(c, s),
        invariants=cfgs.invariants(cfg, invariants(c)),
        check_deadlock=cfg.check_deadlock,
    )
