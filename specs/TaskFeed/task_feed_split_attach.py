r"""Python transcription of TaskFeedSplitAttach.tla, the two-stage resume mutant.

TLA+                                 Python
-----------------------------------  -------------------------------------------------
SplitInit                            initial()
SplitAppend                          split_append(c, s): SplitAppend/live, /dropped,
                                     /closed
Trim, Reset, Drop /\ UNCHANGED phase task_feed.trim, .reset, .drop (on this state)
SplitConnect                         split_connect(s)
Replay                               replay(c, s): ReadStep("") while replaying, and
                                     Replay/empty when there is nothing left to read
Attach                               attach(s)
SplitNext                            next_states(c, s)
SplitTypeOK                          split_type_ok(c, s)
other properties                     task_feed's, unchanged
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import NamedTuple

from specs.tlacheck import EndProperty, Model, StepProperty, Transition
from specs.tlacheck import cfg as cfgs
from specs.tlacheck.model import Property

from . import task_feed as tf

PHASES = ("idle", "replay", "replayed", "live")


class State(NamedTuple):
    # Field names are the TLA+ variable names, so that traces read like TLC's.
    epochs: int
    hasEpoch: bool
    head: int
    first: int
    resets: int
    open: bool
    cEpoch: int
    cursor: int
    mark: tf.Row
    got: frozenset[tf.Row]
    owed: frozenset[tf.Row]
    dupes: int
    lost: bool
    said: str
    drops: int
    phase: str


def initial() -> State:
    return State(*tf.initial(), phase="idle")


def split_append(c: tf.Constants, s: State) -> Iterator[Transition[State]]:
    for _, appended in tf.append(c, s):
        if not (s.open and s.phase == "live"):
            yield "SplitAppend/closed", appended
            continue
        row = (appended.epochs, appended.head)
        yield (
            "SplitAppend/live",
            appended._replace(
                got=s.got | {row},
                owed=appended.owed - {row},
                dupes=s.dupes + int(row in s.got),
                cursor=row[1],
                cEpoch=row[0],
                lost=False if s.cEpoch == 0 else s.lost,
            ),
        )
        if s.drops < c.max_drops:
            yield "SplitAppend/dropped", appended._replace(open=False, drops=s.drops + 1)


def split_connect(s: State) -> Iterator[Transition[State]]:
    if not s.open:
        yield "SplitConnect", s._replace(open=True, phase="replay", said="")


def replay(c: tf.Constants, s: State) -> Iterator[Transition[State]]:
    if not (s.open and s.phase == "replay"):
        return
    if not tf.is_gap(s) and tf.to_read(c, s) == 0:
        yield "Replay/empty", s._replace(phase="replayed", said="")
        return
    for branch, succ in tf.read_step(c, s, reached=""):
        caught_up = succ.open and not branch.startswith("gap") and tf.to_read(c, s) < c.batch
        label = ("Replay/" if branch.startswith("gap") else "Replay") + branch
        yield label, succ._replace(phase="replayed") if caught_up else succ


def attach(s: State) -> Iterator[Transition[State]]:
    if s.open and s.phase == "replayed":
        yield "Attach", s._replace(phase="live", said="current")


def next_states(c: tf.Constants, s: State) -> Iterator[Transition[State]]:
    yield from split_append(c, s)
    yield from tf.trim(c, s)
    yield from tf.reset(c, s)
    yield from split_connect(s)
    yield from tf.drop(c, s)
    yield from replay(c, s)
    yield from attach(s)


def split_type_ok(c: tf.Constants, s: State) -> bool:
    return tf.type_ok(c, s) and s.phase in PHASES


def invariants(c: tf.Constants) -> dict[str, Callable[[State], bool]]:
    table: dict[str, Callable[[State], bool]] = dict(tf.invariants(c))
    table["SplitTypeOK"] = lambda s: split_type_ok(c, s)
    return table


def properties() -> dict[str, Property[State]]:
    return {
        "GapOnlyWhenLost": StepProperty(
            "GapOnlyWhenLost", lambda s, _, t: tf.gap_only_when_lost(s, t)
        ),
        "SplitReachesHead": EndProperty("SplitReachesHead", tf.at_head),
    }


def model(cfg: cfgs.Config) -> Model[State]:
    c = tf.Constants.from_cfg(cfg)
    return Model(
        name="TaskFeedSplitAttach",
        init=(initial(),),
        next=lambda s: next_states(c, s),
        invariants=cfgs.invariants(cfg, invariants(c)),
        properties=cfgs.properties(cfg, properties()),
        check_deadlock=cfg.check_deadlock,
    )
