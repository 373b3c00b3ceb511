r"""Python transcription of TokenMint.tla and its mutants.

TLA+                              taskq                                 Python
--------------------------------  ------------------------------------  ---------------------
Init                              a task never leased, Redis's clock    initial(c)
                                  at its first tick
Floor, Counter                    lease.lua's and reap.lua's            floor(c, s), counter
                                  mint_token; the mutant's one more
LeaseBy(w, mint), Lease(w)        lease.lua                             lease_by, lease
ReapBy(mint), Reap                reap.lua                              reap_by, reap
End(w)                            the run's ack, accepted only if it    end(c, s)
                                  still holds the current token
Sync                              the append-only file's fsync          sync(c, s)
Tick                              Redis's clock moves on                tick(c, s)
CrashWith(later), Crash           a crash and restart from the file     crash_with, crash
Next                              NEXT, tried in that order
TypeOK, AtMostOneCurrent          the INVARIANTS table, under the TLA+ names
NeverReissued                     StepProperties

TokenMintCounter.tla              one more than the record's token      counter, COUNTER_NEXT
TokenMintSameClock.tla            a restart within the lost writes'     same_clock_crash,
                                  tick                                  SAME_CLOCK_NEXT
TokenMintStepBack.tla             the clock stepped back a tick         step_back,
                                  while Redis runs                      STEP_BACK_NEXT

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
    token: int
    holder: int
    saved: tuple[int, int]
    now: int
    minted: int
    held: Fn[int, int]
    issued: frozenset[int]
    crashes: int


@dataclass(frozen=True)
class Constants:
    workers: int
    max_time: int
    per_tick: int
    crashes: int

    @classmethod
    def from_cfg(cls, cfg: cfgs.Config) -> Constants:
        return cls(workers=cfg.int_constant("WORKERS"), max_time=cfg.int_constant("MAX_TIME"),
                   per_tick=cfg.int_constant("PER_TICK"), crashes=cfg.int_constant("CRASHES"))

    @property
    def worker_ids(self) -> range:
        """Workers == 1..WORKERS."""
        return range(1, self.workers + 1)


def initial(c: Constants) -> State:
    return State(token=0, holder=NONE, saved=(0, NONE), now=1, minted=0,
                 held=Fn.const(c.worker_ids, 0), issued=frozenset(), crashes=0)


Mint = Callable[[Constants, State], int]


def floor(c: Constants, s: State) -> int:
    """Floor: one more than the record's token, or the clock scaled, whichever is larger."""
    return max(s.token + 1, s.now * c.per_tick)


def counter(c: Constants, s: State) -> int:
    """Counter: one more than the record's token (the mutant)."""
    return s.token + 1


Action = Callable[[Constants, State], Iterator[Transition[State]]]


def lease_by(name: str, mint: Mint) -> Action:
    """LeaseBy(w, mint): w leases the ready task."""

    def action(c: Constants, s: State) -> Iterator[Transition[State]]:
        if s.holder != NONE or s.minted >= c.per_tick:
            return
        token = mint(c, s)
        for w in c.worker_ids:
            if s.held[w] == 0:
                yield f"{name}(w={w})", s._replace(
                    token=token, holder=w, held=s.held.except_(w, token),
                    issued=s.issued | {token}, minted=s.minted + 1)

    return action


def reap_by(name: str, mint: Mint) -> Action:
    """ReapBy(mint): the lease expired; a new token, the task ready again."""

    def action(c: Constants, s: State) -> Iterator[Transition[State]]:
        if s.holder == NONE or s.minted >= c.per_tick:
            return
        token = mint(c, s)
        yield name, s._replace(token=token, holder=NONE, issued=s.issued | {token},
                               minted=s.minted + 1)

    return action


lease = lease_by("Lease", floor)
reap = reap_by("Reap", floor)
counter_lease = lease_by("CounterLease", counter)
counter_reap = reap_by("CounterReap", counter)


def end(c: Constants, s: State) -> Iterator[Transition[State]]:
    """End(w): w's run ends; the task is freed if w still holds its current token."""
    for w in c.worker_ids:
        if s.held[w] != 0:
            current = s.holder == w and s.token == s.held[w]
            yield f"End(w={w})", s._replace(held=s.held.except_(w, 0),
                                            holder=NONE if current else s.holder)


def sync(c: Constants, s: State) -> Iterator[Transition[State]]:
    """Sync: the append-only file catches up with Redis."""
    if s.saved != (s.token, s.holder):
        yield "Sync", s._replace(saved=(s.token, s.holder))


def tick(c: Constants, s: State) -> Iterator[Transition[State]]:
    """Tick: the clock moves on."""
    if s.now < c.max_time:
        yield "Tick", s._replace(now=s.now + 1, minted=0)


def crash_with(name: str, later: bool) -> Action:
    """CrashWith(later): Redis restarts from its file; `later`, the clock moved on."""

    def action(c: Constants, s: State) -> Iterator[Transition[State]]:
        if s.crashes >= c.crashes or (later and s.now >= c.max_time):
            return
        yield name, s._replace(token=s.saved[0], holder=s.saved[1],
                               now=s.now + 1 if later else s.now,
                               minted=0 if later else s.minted, crashes=s.crashes + 1)

    return action


crash = crash_with("Crash", later=True)
same_clock_crash = crash_with("SameClockCrash", later=False)


def step_back(c: Constants, s: State) -> Iterator[Transition[State]]:
    """StepBack (the mutant's): before any crash, the clock steps back a tick."""
    if s.crashes == 0 and s.now > 1:
        yield "StepBack", s._replace(now=s.now - 1)


NEXT: tuple[Action, ...] = (lease, reap, end, sync, tick, crash)
COUNTER_NEXT: tuple[Action, ...] = (counter_lease, counter_reap, end, sync, tick, crash)
SAME_CLOCK_NEXT: tuple[Action, ...] = (lease, reap, end, sync, tick, same_clock_crash)
STEP_BACK_NEXT: tuple[Action, ...] = (*NEXT, step_back)


def type_ok(c: Constants, s: State) -> bool:
    holders = {NONE, *c.worker_ids}
    return (
        s.token >= 0 and s.holder in holders
        and s.saved[0] >= 0 and s.saved[1] in holders
        and 1 <= s.now <= c.max_time and 0 <= s.minted <= c.per_tick
        and set(s.held) == set(c.worker_ids) and all(t >= 0 for t in s.held.values())
        and all(t >= 0 for t in s.issued) and 0 <= s.crashes <= c.crashes
    )  # fmt: skip


def at_most_one_current(c: Constants, s: State) -> bool:
    """AtMostOneCurrent: no two workers hold the record's current token."""
    return sum(1 for w in c.worker_ids if s.held[w] != 0 and s.held[w] == s.token) <= 1


def never_reissued(c: Constants) -> Callable[[State, str, State], bool]:
    """NeverReissued: a lease hands out no token minted before."""

    def holds_on(s: State, _: str, t: State) -> bool:
        return all(t.held[w] not in s.issued for w in c.worker_ids
                   if s.held[w] == 0 and t.held[w] != 0)

    return holds_on


def invariants(c: Constants) -> dict[str, Callable[[State], bool]]:
    return {
        "TypeOK": lambda s: type_ok(c, s),
        "AtMostOneCurrent": lambda s: at_most_one_current(c, s),
    }


def properties(c: Constants) -> dict[str, Property[State]]:
    return {"NeverReissued": StepProperty("NeverReissued", never_reissued(c))}


def model(cfg: cfgs.Config) -> Model[State]:
    return _model("TokenMint", NEXT, cfg)


def counter_model(cfg: cfgs.Config) -> Model[State]:
    return _model("TokenMintCounter", COUNTER_NEXT, cfg)


def same_clock_model(cfg: cfgs.Config) -> Model[State]:
    return _model("TokenMintSameClock", SAME_CLOCK_NEXT, cfg)


def step_back_model(cfg: cfgs.Config) -> Model[State]:
    return _model("TokenMintStepBack", STEP_BACK_NEXT, cfg)


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
