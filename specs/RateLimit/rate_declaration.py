r"""Python transcription of RateDeclaration.tla and its mutant.

TLA+                              taskq                                 Python
--------------------------------  ------------------------------------  ---------------------
Init                              no limit stored, every worker up      initial(c)
Holds(w)                          the stored limit's holder (`<name>|   holds(s, w)
                                  by`) is another worker, up
LeaseWith(w, defers), Lease(w)    lease.lua's cursor() looking at the   lease_with, lease:
                                  limit                                 /own, /defers,
                                                                        /releases
Stop(w)                           a worker's record deleted or expired  stop(c, s)
Next                              NEXT, tried in that order
TypeOK, NoThrash                  the INVARIANTS table, under the TLA+ names
TakesOverFromTheStopped           a StepProperty

RateDeclarationEveryLease.tla     every lease with another declaration  every_lease,
                                  stores its own and releases the line  EVERY_LEASE_NEXT

Each \E w is a loop in ascending order and Next's disjuncts are tried in the order
written, which is TLC's order.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import NamedTuple

from specs.tlacheck import Fn, Model, StepProperty, Transition
from specs.tlacheck import cfg as cfgs
from specs.tlacheck.model import Property

NONE = 0


class State(NamedTuple):
    # Field names are the TLA+ variable names, so that traces read like TLC's.
    stored: int
    holder: int
    up: Fn[int, bool]
    leases: Fn[int, int]
    releases: int
    stops: int


@dataclass(frozen=True)
class Constants:
    older: int
    newer: int
    leases: int

    @classmethod
    def from_cfg(cls, cfg: cfgs.Config) -> Constants:
        return cls(older=cfg.int_constant("OLDER"), newer=cfg.int_constant("NEWER"),
                   leases=cfg.int_constant("LEASES"))

    @property
    def workers(self) -> range:
        """Workers == 1..(OLDER + NEWER)."""
        return range(1, self.older + self.newer + 1)

    def declared(self, w: int) -> int:
        """Declared(w): 1, the old limit, for the older deploy's workers; else 2."""
        return 1 if w <= self.older else 2


def initial(c: Constants) -> State:
    return State(stored=NONE, holder=NONE, up=Fn.const(c.workers, True),
                 leases=Fn.const(c.workers, 0), releases=0, stops=0)


def holds(s: State, w: int) -> bool:
    """Holds(w): another worker's declaration is stored and that worker is up."""
    return s.holder not in (NONE, w) and s.up[s.holder]


Action = Callable[[Constants, State], Iterator[Transition[State]]]


def lease_with(name: str, defers: Callable[[State, int], bool]) -> Action:
    """LeaseWith(w, defers(s, w)): a lease by w that applies the limit."""

    def action(c: Constants, s: State) -> Iterator[Transition[State]]:
        for w in c.workers:
            if not s.up[w] or s.leases[w] >= c.leases:
                continue
            leased = s._replace(leases=s.leases.except_(w, s.leases[w] + 1))
            label = f"{name}(w={w})"
            if s.stored in (NONE, c.declared(w)):
                yield f"{label}/own", leased._replace(stored=c.declared(w), holder=w)
            elif defers(s, w):
                yield f"{label}/defers", leased
            else:
                yield f"{label}/releases", leased._replace(
                    stored=c.declared(w), holder=w, releases=s.releases + 1)

    return action


lease = lease_with("Lease", holds)
every_lease = lease_with("EveryLease", lambda s, w: False)


def stop(c: Constants, s: State) -> Iterator[Transition[State]]:
    """Stop(w): w stops."""
    for w in c.workers:
        if s.up[w]:
            yield f"Stop(w={w})", s._replace(up=s.up.except_(w, False), stops=s.stops + 1)


NEXT: tuple[Action, ...] = (lease, stop)
EVERY_LEASE_NEXT: tuple[Action, ...] = (every_lease, stop)


def type_ok(c: Constants, s: State) -> bool:
    return (
        s.stored in (NONE, 1, 2) and (s.holder == NONE or s.holder in c.workers)
        and set(s.up) == set(c.workers) and set(s.leases) == set(c.workers)
        and all(0 <= n <= c.leases for n in s.leases.values())
        and s.releases >= 0 and s.stops >= 0
    )  # fmt: skip


def takes_over_from_the_stopped(c: Constants) -> Callable[[State, str, State], bool]:
    """TakesOverFromTheStopped: a lease by a worker whose declaration is not stored, the
    holder down, stores its own."""

    def holds_on(s: State, _: str, t: State) -> bool:
        return all(
            t.stored == c.declared(w)
            for w in c.workers
            if t.leases[w] == s.leases[w] + 1 and s.stored not in (NONE, c.declared(w))
            and not s.up[s.holder]
        )  # fmt: skip

    return holds_on


def invariants(c: Constants) -> dict[str, Callable[[State], bool]]:
    return {
        "TypeOK": lambda s: type_ok(c, s),
        "NoThrash": lambda s: s.releases <= s.stops,
    }


def properties(c: Constants) -> dict[str, Property[State]]:
    return {"TakesOverFromTheStopped": StepProperty(
        "TakesOverFromTheStopped", takes_over_from_the_stopped(c))}


def model(cfg: cfgs.Config) -> Model[State]:
    return _model("RateDeclaration", NEXT, cfg)


def every_lease_model(cfg: cfgs.Config) -> Model[State]:
    return _model("RateDeclarationEveryLease", EVERY_LEASE_NEXT, cfg)


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
        properties=cfgs.properties(cfg, properties(c)),
        check_deadlock=cfg.check_deadlock,
    )
