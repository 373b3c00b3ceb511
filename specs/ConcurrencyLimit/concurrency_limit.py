r"""Python transcription of ConcurrencyLimit.tla and its mutants.

TLA+                              taskq                                 Python
--------------------------------  ------------------------------------  ---------------------
Init                              the name's tasks ready, no slot held  initial(c)
Lease(w), Take(w, t, p, inUse)    lease.lua: unpark, pop t, start or    lease, take
                                  park it
Ack(w), Fail(w), EndLease(t, to)  the settles, freeing the slot only    ack, fail, end_lease
                                  for the current token
Crash(w), Reap(t)                 a holder lost; an expired lease       crash, reap
Next                              NEXT, tried in that order
TypeOK, NeverOverLimit,           the INVARIANTS table, under the TLA+ names
SlotsAreLeases
EveryTaskEnds                     an EndProperty

ConcurrencyLimitStaleFree.tla     an ack frees the slot whatever its    stale_free_ack,
                                  token                                 STALE_FREE_NEXT
ConcurrencyLimitCheckThenTake.tla the slots counted (Count), then       count, counted_lease,
                                  taken (CountedLease), in two calls    CHECK_THEN_TAKE_NEXT

Each \E w, \E t is a loop in ascending order and Next's disjuncts are tried in the
order written, which is TLC's order. `\E U \in SUBSET Parked` with |U| fixed is a loop
over itertools.combinations of the parked tasks; under the .cfg constants at most
TASKS - MOST = 1 task is ever parked (one is parked only while MOST hold slots), so
there is one such U and TLC's order of SUBSET cannot differ from it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from itertools import combinations
from typing import NamedTuple

from specs.tlacheck import EndProperty, Fn, Model, Transition
from specs.tlacheck import cfg as cfgs
from specs.tlacheck.model import Property

PLACES = ("ready", "parked", "leased", "done", "dead")
ENDED = ("done", "dead")
NONE = (0, 0)


class State(NamedTuple):
    # Field names are the TLA+ variable names, so that traces read like TLC's.
    place: Fn[int, str]
    token: Fn[int, int]
    tries: Fn[int, int]
    holding: frozenset[int]
    held: Fn[int, tuple[int, int]]
    seen: Fn[int, int] | None = None  # ConcurrencyLimitCheckThenTake's variable only


@dataclass(frozen=True)
class Constants:
    tasks: int
    most: int
    workers: int
    retries: int

    @classmethod
    def from_cfg(cls, cfg: cfgs.Config) -> Constants:
        return cls(tasks=cfg.int_constant("TASKS"), most=cfg.int_constant("MOST"),
                   workers=cfg.int_constant("WORKERS"), retries=cfg.int_constant("RETRIES"))

    @property
    def all_tasks(self) -> range:
        return range(1, self.tasks + 1)

    @property
    def all_workers(self) -> range:
        return range(1, self.workers + 1)

    @property
    def max_token(self) -> int:
        """MaxToken == 2 * (RETRIES + 1): a lease and a reap per attempt."""
        return 2 * (self.retries + 1)

    @property
    def not_counted(self) -> int:
        """NotCounted == MOST + 1."""
        return self.most + 1


def initial(c: Constants, split: bool = False) -> State:
    return State(
        place=Fn.const(c.all_tasks, "ready"),
        token=Fn.const(c.all_tasks, 0),
        tries=Fn.const(c.all_tasks, 0),
        holding=frozenset(),
        held=Fn.const(c.all_workers, NONE),
        seen=Fn.const(c.all_workers, c.not_counted) if split else None,
    )


def parked(s: State) -> list[int]:
    return sorted(t for t in s.place if s.place[t] == "parked")


def unparking(c: Constants, s: State) -> int:
    """Unparking: one parked task per free slot."""
    free = c.most - len(s.holding)
    return min(free, len(parked(s))) if free > 0 else 0


def take(c: Constants, s: State, w: int, t: int, p: Fn[int, str], in_use: int) -> State:
    """Take(w, t, p, inUse): t parks with every slot counted in use, else starts."""
    if in_use >= c.most:
        return s._replace(place=p.except_(t, "parked"))
    token = s.token[t] + 1
    return s._replace(place=p.except_(t, "leased"), token=s.token.except_(t, token),
                      holding=s.holding | {t}, held=s.held.except_(w, (t, token)))


def pops(c: Constants, s: State) -> Iterator[tuple[int, Fn[int, str]]]:
    """Each (t, places after the unpark) a lease may pop: \\E U ..., \\E t ..."""
    for unparked in combinations(parked(s), unparking(c, s)):
        p = s.place
        for t in unparked:
            p = p.except_(t, "ready")
        for t in c.all_tasks:
            if p[t] == "ready":
                yield t, p


Action = Callable[[Constants, State], Iterator[Transition[State]]]


def lease(c: Constants, s: State) -> Iterator[Transition[State]]:
    for w in c.all_workers:
        if s.held[w] == NONE:
            for t, p in pops(c, s):
                yield f"Lease(w={w})", take(c, s, w, t, p, len(s.holding))


def current(s: State, w: int) -> bool:
    task, token = s.held[w]
    return s.place[task] == "leased" and s.token[task] == token


def end_lease(s: State, t: int, to: str) -> State:
    """EndLease(t, to): t's lease ends in `to`, its slot given back."""
    return s._replace(place=s.place.except_(t, to), holding=s.holding - {t})


def retry(c: Constants, s: State, t: int) -> str:
    return "ready" if s.tries[t] < c.retries else "dead"


def ack(c: Constants, s: State) -> Iterator[Transition[State]]:
    for w in c.all_workers:
        if s.held[w] != NONE:
            ended = end_lease(s, s.held[w][0], "done") if current(s, w) else s
            yield f"Ack(w={w})", ended._replace(held=s.held.except_(w, NONE))


def stale_free_ack(c: Constants, s: State) -> Iterator[Transition[State]]:
    """StaleFreeAck(w): the slot given back whatever the token."""
    for w in c.all_workers:
        if s.held[w] != NONE:
            t = s.held[w][0]
            ended = end_lease(s, t, "done") if current(s, w) else \
                s._replace(holding=s.holding - {t})
            yield f"StaleFreeAck(w={w})", ended._replace(held=s.held.except_(w, NONE))


def fail(c: Constants, s: State) -> Iterator[Transition[State]]:
    for w in c.all_workers:
        if s.held[w] == NONE:
            continue
        t = s.held[w][0]
        ended = s
        if current(s, w):
            ended = end_lease(s, t, retry(c, s, t))._replace(
                tries=s.tries.except_(t, s.tries[t] + 1))
        yield f"Fail(w={w})", ended._replace(held=s.held.except_(w, NONE))


def crash(c: Constants, s: State) -> Iterator[Transition[State]]:
    for w in c.all_workers:
        if s.held[w] != NONE:
            yield f"Crash(w={w})", s._replace(held=s.held.except_(w, NONE))


def reap(c: Constants, s: State) -> Iterator[Transition[State]]:
    for t in c.all_tasks:
        if s.place[t] == "leased":
            yield f"Reap(t={t})", end_lease(s, t, retry(c, s, t))._replace(
                token=s.token.except_(t, s.token[t] + 1),
                tries=s.tries.except_(t, s.tries[t] + 1))


def count(c: Constants, s: State) -> Iterator[Transition[State]]:
    """Count(w): the split client counts the slots in use."""
    assert s.seen is not None
    for w in c.all_workers:
        if s.held[w] == NONE and s.seen[w] == c.not_counted:
            yield f"Count(w={w})", s._replace(seen=s.seen.except_(w, len(s.holding)))


def counted_lease(c: Constants, s: State) -> Iterator[Transition[State]]:
    """CountedLease(w): lease.lua's pop, deciding by the count w made before."""
    assert s.seen is not None
    for w in c.all_workers:
        if s.seen[w] == c.not_counted or s.held[w] != NONE:
            continue
        for t, p in pops(c, s):
            taken = take(c, s, w, t, p, s.seen[w])
            assert taken.seen is not None
            yield f"CountedLease(w={w})", taken._replace(
                seen=taken.seen.except_(w, c.not_counted))


NEXT: tuple[Action, ...] = (lease, ack, fail, crash, reap)
STALE_FREE_NEXT: tuple[Action, ...] = (lease, stale_free_ack, fail, crash, reap)
CHECK_THEN_TAKE_NEXT: tuple[Action, ...] = (count, counted_lease, ack, fail, crash, reap)


def type_ok(c: Constants, s: State) -> bool:
    tokens = range(c.max_token + 1)
    return (
        set(s.place) == set(c.all_tasks) and all(p in PLACES for p in s.place.values())
        and all(v in tokens for v in s.token.values())
        and all(0 <= v <= c.retries + 1 for v in s.tries.values())
        and s.holding <= set(c.all_tasks)
        and all(h == NONE or (h[0] in c.all_tasks and 1 <= h[1] <= c.max_token)
                for h in s.held.values())
    )  # fmt: skip


def check_then_take_type_ok(c: Constants, s: State) -> bool:
    assert s.seen is not None
    return type_ok(c, s) and all(0 <= v <= c.not_counted for v in s.seen.values())


def leased(s: State) -> frozenset[int]:
    return frozenset(t for t in s.place if s.place[t] == "leased")


def invariants(c: Constants) -> dict[str, Callable[[State], bool]]:
    return {
        "TypeOK": lambda s: type_ok(c, s),
        "CheckThenTakeTypeOK": lambda s: check_then_take_type_ok(c, s),
        "NeverOverLimit": lambda s: len(leased(s)) <= c.most,
        "SlotsAreLeases": lambda s: s.holding == leased(s),
    }


PROPERTIES: dict[str, Property[State]] = {
    "EveryTaskEnds": EndProperty(
        "EveryTaskEnds", lambda s: all(p in ENDED for p in s.place.values())),
}


def model(cfg: cfgs.Config) -> Model[State]:
    return _model("ConcurrencyLimit", NEXT, cfg)


def stale_free_model(cfg: cfgs.Config) -> Model[State]:
    return _model("ConcurrencyLimitStaleFree", STALE_FREE_NEXT, cfg)


def check_then_take_model(cfg: cfgs.Config) -> Model[State]:
    return _model("ConcurrencyLimitCheckThenTake", CHECK_THEN_TAKE_NEXT, cfg, split=True)


def _model(
    name: str, actions: tuple[Action, ...], cfg: cfgs.Config, split: bool = False
) -> Model[State]:
    c = Constants.from_cfg(cfg)

    def next_states(s: State) -> Iterator[Transition[State]]:
        for action in actions:
            yield from action(c, s)

    return Model(
        name=name,
        init=(initial(c, split),),
        next=next_states,
        invariants=cfgs.invariants(cfg, invariants(c)),
        properties=cfgs.properties(cfg, PROPERTIES),
        check_deadlock=cfg.check_deadlock,
    )
