r"""Python transcription of RateDeclaration.tla and its mutant.

TLA+                              taskq                                 Python
--------------------------------  ------------------------------------  ---------------------
Init                              no limit stored, every worker up      initial(c)
Holds(w)                          another worker that applied the       holds(s, w)
                                  stored limit (`holders:<name>`) is up
LeaseWith(w, defers), Lease(w)    lease.lua's cursor() looking at the   lease_with, lease:
                                  limit                                 /own, /defers,
                                                                        /releases
Stop(w)                           a worker's record deleted or expired  stop(c, s)
Next                              NEXT, tried in that order
TypeOK, NoThrash                  the INVARIANTS table, under the TLA+ names
KeepsARunningDeploysLimit,        StepProperties
TakesOverFromTheStopped

RateDeclarationEveryLease.tla     every lease with another declaration  every_lease,
                                  stores its own and releases the line  EVERY_LEASE_NEXT
RateDeclarationLastHolder.tla     a lease defers to the last holder     last_holder_lease,
                                  only                                  LAST_HOLDER_NEXT

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
    holders: frozenset[int]
    last: int
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
    return State(stored=NONE, holders=frozenset(), last=NONE, up=Fn.const(c.workers, True),
                 leases=Fn.const(c.workers, 0), releases=0, stops=0)


def holds(s: State, w: int) -> bool:
    """Holds(w): a worker other than w that applied the stored declaration is up."""
    return any(h != w and s.up[h] for h in s.holders)


def last_holds(s: State, w: int) -> bool:
    """The LastHolder mutant's deferral: the last worker to apply it is up."""
    return s.last not in (NONE, w) and s.up[s.last]


def all_down(s: State) -> bool:
    r"""\A h \in holders : ~up[h]."""
    return all(not s.up[h] for h in s.holders)


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
                yield f"{label}/own", leased._replace(
                    stored=c.declared(w), holders=s.holders | {w}, last=w)
            elif defers(s, w):
                yield f"{label}/defers", leased
            else:
                yield f"{label}/releases", leased._replace(
                    stored=c.declared(w), holders=frozenset({w}), last=w,
                    releases=s.releases + 1)

    return action


lease = lease_with("Lease", holds)
every_lease = lease_with("EveryLease", lambda s, w: False)
last_holder_lease = lease_with("LastHolderLease", last_holds)


def stop(c: Constants, s: State) -> Iterator[Transition[State]]:
    """Stop(w): w stops."""
    for w in c.workers:
        if s.up[w]:
            yield f"Stop(w={w})", s._replace(up=s.up.except_(w, False), stops=s.stops + 1)


NEXT: tuple[Action, ...] = (lease, stop)
EVERY_LEASE_NEXT: tuple[Action, ...] = (every_lease, stop)
LAST_HOLDER_NEXT: tuple[Action, ...] = (last_holder_lease, stop)


def type_ok(c: Constants, s: State) -> bool:
    return (
        s.stored in (NONE, 1, 2) and s.holders <= set(c.workers)
        and (s.last == NONE or s.last in c.workers)
        and set(s.up) == set(c.workers) and set(s.leases) == set(c.workers)
        and all(0 <= n <= c.leases for n in s.leases.values())
        and s.releases >= 0 and s.stops >= 0
    )  # fmt: skip


def keeps_a_running_deploys_limit(s: State, _: str, t: State) -> bool:
    """KeepsARunningDeploysLimit: no release while a holder is up."""
    return t.releases <= s.releases or all_down(s)


def takes_over_from_the_stopped(c: Constants) -> Callable[[State, str, State], bool]:
    """TakesOverFromTheStopped: a lease by a worker whose declaration is not stored,
    every holder down, stores its own."""

    def holds_on(s: State, _: str, t: State) -> bool:
        return all(
            t.stored == c.declared(w)
            for w in c.workers
            if t.leases[w] == s.leases[w] + 1 and s.stored not in (NONE, c.declared(w))
            and all_down(s)
        )  # fmt: skip

    return holds_on


def invariants(c: Constants) -> dict[str, Callable[[State], bool]]:
    return {
        "TypeOK": lambda s: type_ok(c, s),
        "NoThrash": lambda s: s.releases <= s.stops,
    }


def properties(c: Constants) -> dict[str, Property[State]]:
    return {
        "KeepsARunningDeploysLimit": StepProperty("KeepsARunningDeploysLimit",
                                                  keeps_a_running_deploys_limit),
        "TakesOverFromTheStopped": StepProperty("TakesOverFromTheStopped",
                                                takes_over_from_the_stopped(c)),
    }


def model(cfg: cfgs.Config) -> Model[State]:
    return _model("RateDeclaration", NEXT, cfg)


def every_lease_model(cfg: cfgs.Config) -> Model[State]:
    return _model("RateDeclarationEveryLease", EVERY_LEASE_NEXT, cfg)


def last_holder_model(cfg: cfgs.Config) -> Model[State]:
    return _model("RateDeclarationLastHolder", LAST_HOLDER_NEXT, cfg)


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
