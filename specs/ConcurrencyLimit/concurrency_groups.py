r"""Python transcription of ConcurrencyGroups.tla and its mutant.

TLA+                              taskq                                 Python
--------------------------------  ------------------------------------  ---------------------
Init                              no task parked, no group marked       initial(c)
Lease(w), LeaseLooking, Pop       lease.lua: look at the marked groups  lease, lease_looking,
                                  and the sweep's window, unpark, pop   pop
Looked, Sent(g, looked)           slots_freed, parked_sweep, unpark     looked, sent
Ack(w)                            free_slot, marking a waiting group    ack
Raise                             a redeploy's larger max_concurrency   raise_
Next                              NEXT, tried in that order
TypeOK, NeverOverLimit,           the INVARIANTS table, under the TLA+ names
NoneWaitsUnnamed, LookedAtInTime
EveryTaskEnds                     an EndProperty

ConcurrencyGroupsNoSweep.tla      a lease looks at the marked groups    marked_only,
                                  only                                  NO_SWEEP_NEXT

Each \E w, \E t is a loop in ascending order and Next's disjuncts are tried in the
order written, which is TLC's order; a lease's unpark has no choice in it (each looked
group sends back its oldest parked tasks), so its successors are TLC's, one per pop.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import NamedTuple

from specs.tlacheck import EndProperty, Fn, Model, Transition
from specs.tlacheck import cfg as cfgs
from specs.tlacheck.model import Property

PLACES = ("ready", "back", "parked", "leased", "done")
READY = ("ready", "back")


class State(NamedTuple):
    # Field names are the TLA+ variable names, so that traces read like TLC's.
    place: Fn[int, str]
    line: Fn[int, tuple[int, ...]]
    waiting: frozenset[int]
    freed: frozenset[int]
    cursor: int
    most: int
    held: Fn[int, int]
    unseen: Fn[int, int]


@dataclass(frozen=True)
class Constants:
    tasks: int
    groups: int
    workers: int
    sweep: int

    @classmethod
    def from_cfg(cls, cfg: cfgs.Config) -> Constants:
        return cls(tasks=cfg.int_constant("TASKS"), groups=cfg.int_constant("GROUPS"),
                   workers=cfg.int_constant("WORKERS"), sweep=cfg.int_constant("SWEEP"))

    @property
    def all_tasks(self) -> range:
        return range(1, self.tasks + 1)

    @property
    def all_groups(self) -> range:
        return range(1, self.groups + 1)

    @property
    def all_workers(self) -> range:
        return range(1, self.workers + 1)

    @property
    def reach(self) -> int:
        """Reach == (GROUPS + SWEEP - 1) \\div SWEEP."""
        return (self.groups + self.sweep - 1) // self.sweep

    def group(self, t: int) -> int:
        return (t - 1) % self.groups + 1


def initial(c: Constants) -> State:
    return State(
        place=Fn.const(c.all_tasks, "ready"),
        line=Fn.const(c.all_groups, ()),
        waiting=frozenset(),
        freed=frozenset(),
        cursor=0,
        most=1,
        held=Fn.const(c.all_workers, 0),
        unseen=Fn.const(c.all_groups, 0),
    )


def of(c: Constants, s: State, g: int, place: str) -> int:
    """Cardinality(Of(g, place))."""
    return sum(1 for t in c.all_tasks if c.group(t) == g and s.place[t] == place)


def free(c: Constants, s: State, g: int) -> int:
    """Free(g): g's slots neither held nor promised."""
    return s.most - of(c, s, g, "leased") - of(c, s, g, "back")


def starved(c: Constants, s: State, g: int) -> bool:
    return bool(s.line[g]) and free(c, s, g) > 0


def looked(c: Constants, s: State) -> frozenset[int]:
    """Looked: the marked groups and the sweep's window of the waiting ones."""
    if not s.waiting:
        return frozenset()
    window = {(s.cursor + i) % c.groups + 1 for i in range(c.sweep)}
    return s.freed | (window & s.waiting)


def marked_only(c: Constants, s: State) -> frozenset[int]:
    """MarkedOnly: the mutant's look, with no sweep."""
    return s.freed if s.waiting else frozenset()


def sent(c: Constants, s: State, g: int, looking: frozenset[int]) -> int:
    """Sent(g, looked): how many of g's parked tasks go back."""
    if g in looking and free(c, s, g) > 0:
        return min(free(c, s, g), len(s.line[g]))
    return 0


def pop(
    c: Constants, s: State, w: int, looking: frozenset[int], t: int,
    p: Fn[int, str], lines: Fn[int, tuple[int, ...]], named: frozenset[int],
) -> State:
    """Pop(w, looked, t, p, l, named): t parks or starts (0: the lease popped none)."""
    held, waiting = s.held, named
    if t != 0:
        g = c.group(t)
        if of(c, s, g, "leased") >= s.most:
            lines = lines.except_(g, (t, *lines[g]) if p[t] == "back" else (*lines[g], t))
            p, waiting = p.except_(t, "parked"), named | {g}
        else:
            p, held = p.except_(t, "leased"), s.held.except_(w, t)
    return s._replace(
        place=p, line=lines, waiting=waiting, held=held, freed=s.freed - looking,
        cursor=s.cursor if not s.waiting else (s.cursor + c.sweep) % c.groups,
        unseen=Fn((g, s.unseen[g] + 1 if g not in looking and starved(c, s, g) else 0)
                  for g in c.all_groups),
    )


def lease_looking(
    c: Constants, s: State, w: int, looking: frozenset[int]
) -> Iterator[State]:
    """LeaseLooking(w, looked)."""
    if s.held[w] != 0:
        return
    counts = {g: sent(c, s, g, looking) for g in c.all_groups}
    back = {s.line[g][i] for g in c.all_groups for i in range(counts[g])}
    p = Fn((t, "back" if t in back else s.place[t]) for t in c.all_tasks)
    lines = Fn((g, s.line[g][counts[g]:]) for g in c.all_groups)
    named = s.waiting - {g for g in looking if not lines[g]}
    ready = [t for t in c.all_tasks if p[t] in READY]
    if not ready and not s.waiting:
        return
    for t in ready or [0]:
        yield pop(c, s, w, looking, t, p, lines, named)


Action = Callable[[Constants, State], Iterator[Transition[State]]]


def lease(c: Constants, s: State) -> Iterator[Transition[State]]:
    for w in c.all_workers:
        for t in lease_looking(c, s, w, looked(c, s)):
            yield f"Lease(w={w})", t


def no_sweep_lease(c: Constants, s: State) -> Iterator[Transition[State]]:
    for w in c.all_workers:
        for t in lease_looking(c, s, w, marked_only(c, s)):
            yield f"NoSweepLease(w={w})", t


def ack(c: Constants, s: State) -> Iterator[Transition[State]]:
    for w in c.all_workers:
        t = s.held[w]
        if t != 0:
            g = c.group(t)
            yield f"Ack(w={w})", s._replace(
                place=s.place.except_(t, "done"), held=s.held.except_(w, 0),
                freed=s.freed | {g} if s.line[g] else s.freed)


def raise_(c: Constants, s: State) -> Iterator[Transition[State]]:
    if s.most == 1:
        yield "Raise", s._replace(most=2)


NEXT: tuple[Action, ...] = (lease, ack, raise_)
NO_SWEEP_NEXT: tuple[Action, ...] = (no_sweep_lease, ack, raise_)


def type_ok(c: Constants, s: State) -> bool:
    groups, tasks = set(c.all_groups), set(c.all_tasks)
    return (
        set(s.place) == tasks and all(p in PLACES for p in s.place.values())
        and set(s.line) == groups and all(set(q) <= tasks for q in s.line.values())
        and s.waiting <= groups and s.freed <= groups
        and 0 <= s.cursor < c.groups and s.most in (1, 2)
        and all(0 <= h <= c.tasks for h in s.held.values())
        and all(0 <= u <= c.reach for u in s.unseen.values())
    )  # fmt: skip


def invariants(c: Constants) -> dict[str, Callable[[State], bool]]:
    return {
        "TypeOK": lambda s: type_ok(c, s),
        "NeverOverLimit": lambda s: all(of(c, s, g, "leased") <= s.most
                                        for g in c.all_groups),
        "NoneWaitsUnnamed": lambda s: all(g in s.waiting for g in c.all_groups
                                          if s.line[g]),
        "LookedAtInTime": lambda s: all(u < c.reach for u in s.unseen.values()),
    }


PROPERTIES: dict[str, Property[State]] = {
    "EveryTaskEnds": EndProperty(
        "EveryTaskEnds", lambda s: all(p == "done" for p in s.place.values())),
}


def model(cfg: cfgs.Config) -> Model[State]:
    return _model("ConcurrencyGroups", NEXT, cfg)


def no_sweep_model(cfg: cfgs.Config) -> Model[State]:
    return _model("ConcurrencyGroupsNoSweep", NO_SWEEP_NEXT, cfg)


def _model(name: str, actions: tuple[Action, ...], cfg: cfgs.Config) -> Model[State]:
    c = Constants.from_cfg(cfg)

    def next_states(s: State) -> Iterator[Transition[State]]:
        for action in actions:
            yield from action(c, s)

    return Model(
        name=name,
        init=(initial(c),),
        next=next_states,
        invariants=cfgs.invariants(cfg, invariants(c)),
        properties=cfgs.properties(cfg, PROPERTIES),
        check_deadlock=cfg.check_deadlock,
    )
