r"""Python transcription of TaskFeed.tla: taskq's change feed as built.

TLA+                     taskq                                    Python
-----------------------  ---------------------------------------  ----------------------
Init                     a new queue: no log, no epoch yet        initial()
LogEpoch, Ahead          helpers                                  log_epoch, ahead
Append                   emit() in lua/_common.lua                append(c, s)
Trim(o)                  XADD ... MAXLEN (retention)              trim(c, s)
Reset                    the log's keys lost (FLUSHALL, crash)    reset(c, s)
Connect                  GET /events with Last-Event-ID = cursor  connect(c, s)
Drop                     the connection breaks                    drop(c, s)
IsGap, ToRead            read_events.lua's checks, its COUNT      is_gap, to_read
ReadGap, ReadGapLost,    the reply, then the frames of            read_step(c, s, reached)
ReadRows(n, reached),    feed/stream.py as they arrive or not:    labelled gap, gap-lost,
ReadStep(reached)        all, a prefix, or nothing                (n=..)/all, (n=..)/dropped
Read                     open /\ ReadStep("current")              read(c, s)
Next                     next_states(c, s)
TypeOK, NoSilentGap ..   the INVARIANTS table, under the TLA+ names
GapOnlyWhenLost          a StepProperty ([][said' = "gap" => lost]_vars)
OpenStreamReachesHead    an EndProperty ([](~ENABLED Next => ...))

Rows are <<epoch, seq>> pairs (Python tuples). Each \E is a loop in ascending order
and Next's disjuncts are tried in the order written. The read-path actions are typed
against the Feed protocol, so that the split-attach mutant reuses them on its state.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import NamedTuple, Protocol, Self, TypeVar

from specs.tlacheck import EndProperty, Model, StepProperty, Transition
from specs.tlacheck import cfg as cfgs
from specs.tlacheck.model import Property
from specs.tlacheck.model import State as StateLike

Row = tuple[int, int]
SAID = ("", "gap", "current")


class Feed(StateLike, Protocol):
    """TaskFeed's variables, as every state of this family has them."""

    @property
    def epochs(self) -> int: ...
    @property
    def hasEpoch(self) -> bool: ...
    @property
    def head(self) -> int: ...
    @property
    def first(self) -> int: ...
    @property
    def resets(self) -> int: ...
    @property
    def open(self) -> bool: ...
    @property
    def cEpoch(self) -> int: ...
    @property
    def cursor(self) -> int: ...
    @property
    def mark(self) -> Row: ...
    @property
    def got(self) -> frozenset[Row]: ...
    @property
    def owed(self) -> frozenset[Row]: ...
    @property
    def dupes(self) -> int: ...
    @property
    def lost(self) -> bool: ...
    @property
    def said(self) -> str: ...
    @property
    def drops(self) -> int: ...

    def _replace(
        self,
        *,
        epochs: int = ...,
        hasEpoch: bool = ...,
        head: int = ...,
        first: int = ...,
        resets: int = ...,
        open: bool = ...,
        cEpoch: int = ...,
        cursor: int = ...,
        mark: Row = ...,
        got: frozenset[Row] = ...,
        owed: frozenset[Row] = ...,
        dupes: int = ...,
        lost: bool = ...,
        said: str = ...,
        drops: int = ...,
    ) -> Self: ...


F = TypeVar("F", bound=Feed)


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
    mark: Row
    got: frozenset[Row]
    owed: frozenset[Row]
    dupes: int
    lost: bool
    said: str
    drops: int


@dataclass(frozen=True)
class Constants:
    max_id: int
    keep: int
    batch: int
    max_resets: int
    max_drops: int

    @classmethod
    def from_cfg(cls, cfg: cfgs.Config) -> Constants:
        return cls(
            max_id=cfg.int_constant("MAX_ID"),
            keep=cfg.int_constant("KEEP"),
            batch=cfg.int_constant("BATCH"),
            max_resets=cfg.int_constant("MAX_RESETS"),
            max_drops=cfg.int_constant("MAX_DROPS"),
        )


def initial() -> State:
    none: frozenset[Row] = frozenset()
    return State(0, False, 0, 1, 0, False, 0, 0, (0, 0), none, none, 0, False, "", 0)


def log_epoch(s: Feed) -> int:
    """LogEpoch: the log's epoch, 0 while it has none (no row since it was created)."""
    return s.epochs if s.hasEpoch else 0


def ahead(s: Feed, row: Row) -> bool:
    """Ahead(r): row r is after the client's position."""
    e, x = row
    return s.cEpoch == 0 or e > s.cEpoch or (e == s.cEpoch and x > s.cursor)


# ------------------------------------------------------------------ steps


def append(c: Constants, s: F) -> Iterator[Transition[F]]:
    if s.head >= c.max_id:
        return
    epochs = s.epochs if s.hasEpoch else s.epochs + 1
    row = (epochs, s.head + 1)
    yield (
        "Append",
        s._replace(epochs=epochs, hasEpoch=True, head=s.head + 1, owed=s.owed | {row}, said=""),
    )


def trim(c: Constants, s: F) -> Iterator[Transition[F]]:
    follows = s.cEpoch in (0, log_epoch(s))
    for o in range(s.first + 1, s.head - c.keep + 2):
        lost = s.lost or (follows and o - 1 > s.cursor)
        yield f"Trim(o={o})", s._replace(first=o, lost=lost, said="")


def reset(c: Constants, s: F) -> Iterator[Transition[F]]:
    if s.resets < c.max_resets and s.hasEpoch:
        lost = s.lost or (s.cEpoch != 0 and s.cEpoch == s.epochs)
        yield (
            "Reset",
            s._replace(hasEpoch=False, head=0, first=1, resets=s.resets + 1, lost=lost, said=""),
        )


def connect(_: Constants, s: State) -> Iterator[Transition[State]]:
    if not s.open:
        yield "Connect", s._replace(open=True, said="")


def drop(c: Constants, s: F) -> Iterator[Transition[F]]:
    if s.open and s.drops < c.max_drops:
        yield "Drop", s._replace(open=False, drops=s.drops + 1, said="")


def is_gap(s: Feed) -> bool:
    """read_events.lua's three checks that the model can reach, in its order."""
    e = log_epoch(s)
    return s.cEpoch not in (0, e) or s.cursor > s.head or s.cursor < s.first - 1


def to_read(c: Constants, s: Feed) -> int:
    """How many rows the read returns when it is not a gap: up to BATCH after the cursor."""
    return min(s.head - s.cursor, c.batch)


def read_step(c: Constants, s: F, reached: str = "current") -> Iterator[tuple[str, F]]:
    """ReadStep(reached): Read without its guard, the atomic gap check and read and what
    arrives of it; `said` becomes `reached` when all of a read that reached the head
    arrived."""
    e = log_epoch(s)
    if is_gap(s):
        yield (
            "gap",
            s._replace(
                cEpoch=e, cursor=s.head, mark=(e, s.head), owed=frozenset(), lost=False, said="gap"
            ),
        )
        if s.drops < c.max_drops:
            yield "gap-lost", s._replace(open=False, drops=s.drops + 1, said="")
        return
    m = to_read(c, s)
    if m == 0:
        return
    for n in range(m + 1):
        # ReadRows' guard `n = ToRead \/ drops < MAX_DROPS` is a disjunction, and TLC
        # explores each disjunct that holds: the full read is generated twice while a
        # drop is still allowed (one distinct state, two in "states generated").
        ways = (n == m) + (s.drops < c.max_drops)
        if not ways:
            continue
        rows = frozenset((e, x) for x in range(s.cursor + 1, s.cursor + n + 1))
        delivered = s._replace(
            got=s.got | rows,
            owed=s.owed - rows,
            dupes=s.dupes + len(s.got & rows),
            cursor=s.cursor + n,
            cEpoch=e if n > 0 else s.cEpoch,
            lost=False if n > 0 and s.cEpoch == 0 else s.lost,
        )
        if n == m:
            full = delivered._replace(said=reached if m < c.batch else "")
            for _ in range(ways):
                yield f"(n={n})/all", full
        else:
            yield f"(n={n})/dropped", delivered._replace(open=False, drops=s.drops + 1, said="")


def read(c: Constants, s: State) -> Iterator[Transition[State]]:
    if s.open:
        for branch, succ in read_step(c, s):
            yield ("Read/" if branch.startswith("gap") else "Read") + branch, succ


def next_states(c: Constants, s: State) -> Iterator[Transition[State]]:
    yield from append(c, s)
    yield from trim(c, s)
    yield from reset(c, s)
    yield from connect(c, s)
    yield from drop(c, s)
    yield from read(c, s)


# ------------------------------------------------------------- invariants


def type_ok(c: Constants, s: Feed) -> bool:
    epochs = range(0, c.max_resets + 2)
    rows = {(e, x) for e in epochs for x in range(1, c.max_id + 1)}
    return (
        s.epochs in epochs
        and 0 <= s.head <= c.max_id
        and 1 <= s.first <= s.head + 1
        and 0 <= s.resets <= c.max_resets
        and s.cEpoch in epochs
        and 0 <= s.cursor <= c.max_id
        and s.mark[0] in epochs
        and s.got <= rows
        and s.owed <= rows
        and s.dupes >= 0
        and s.said in SAID
        and 0 <= s.drops <= c.max_drops
    )


def no_silent_gap(s: Feed) -> bool:
    """F1: since its last gap the client left no log but through a gap, and holds every
    row of its log from where it resynced up to its cursor."""
    since = s.mark[1] if s.cEpoch == s.mark[0] else 0
    return (s.mark[0] == 0 or s.cEpoch == s.mark[0]) and all(
        (s.cEpoch, x) in s.got for x in range(since + 1, s.cursor + 1)
    )


def no_duplicates(s: Feed) -> bool:
    return s.dupes == 0


def caught_up_after_resume(s: Feed) -> bool:
    return s.said != "current" or (s.cEpoch == log_epoch(s) and s.cursor == s.head)


def no_silent_loss(s: Feed) -> bool:
    """Every row appended since the client's last gap (or its start) that it has not
    received is still ahead of it."""
    return all(ahead(s, row) for row in s.owed)


def invariants(c: Constants) -> dict[str, Callable[[Feed], bool]]:
    return {
        "TypeOK": lambda s: type_ok(c, s),
        "NoSilentGap": no_silent_gap,
        "NoDuplicates": no_duplicates,
        "CaughtUpAfterResume": caught_up_after_resume,
        "NoSilentLoss": no_silent_loss,
    }


def gap_only_when_lost(s: Feed, t: Feed) -> bool:
    """F4, on a step: a gap is signalled only if rows owed to the client were removed
    since its last gap, or its log was reset (the server cannot tell then)."""
    return t.said != "gap" or s.lost


def at_head(s: Feed) -> bool:
    """F5, where a run stops: the stream is open and the client is at the log's head."""
    return s.open and s.cEpoch == log_epoch(s) and s.cursor == s.head


def properties() -> dict[str, Property[State]]:
    return {
        "GapOnlyWhenLost": StepProperty(
            "GapOnlyWhenLost", lambda s, _, t: gap_only_when_lost(s, t)
        ),
        "OpenStreamReachesHead": EndProperty("OpenStreamReachesHead", at_head),
    }


def model(cfg: cfgs.Config) -> Model[State]:
    c = Constants.from_cfg(cfg)
    return Model(
        name="TaskFeed",
        init=(initial(),),
        next=lambda s: next_states(c, s),
        invariants=cfgs.invariants(cfg, invariants(c)),
        properties=cfgs.properties(cfg, properties()),
        check_deadlock=cfg.check_deadlock,
    )
