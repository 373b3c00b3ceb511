r"""Python transcription of RateLimit.tla and its mutants.

TLA+                              taskq                                 Python
--------------------------------  ------------------------------------  ---------------------
Init                              the name's tasks ready, no slot taken  initial(c)
Start(t), Gcra(t, read, to)       a start; the GCRA step                 start, gcra
LeaseWith(t, keep, to), Lease(t)  lease.lua popping t (`admitted`)       lease_with, lease:
                                                                         /slot, /started,
                                                                         /throttled
Promote(t)                        a due delayed task back to ready       promote(c, s)
Tick                              Redis time passes a tick               tick(c, s)
Next                              NEXT, tried in that order
TypeOK, NeverOverRate,            the INVARIANTS table, under the TLA+ names
NeverAheadOfRate
SlotKept, EveryTaskStarts         a StepProperty and an EndProperty

RateLimitCheckThenTake.tla        the slot read (Check), then taken     take_kept, check, take,
                                  (Take), in two calls                  CHECK_THEN_TAKE_NEXT
RateLimitTakesAgain.tla           a kept slot ignored: a new one taken  takes_again_lease,
                                                                        TAKES_AGAIN_NEXT
RateLimitNoWait.tla               a throttled task left on ready        no_wait_lease,
                                                                        NO_WAIT_NEXT

Each \E t (and \E w) is a loop in ascending order and Next's disjuncts are tried in
the order written, which is TLC's order.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import NamedTuple

from specs.tlacheck import EndProperty, Fn, Model, StepProperty, Transition
from specs.tlacheck import cfg as cfgs
from specs.tlacheck.model import Property

PLACES = ("ready", "delayed", "started")
NO_SLOT = 0
Seen = tuple[int, ...]  # <<S>> once read, <<>> before


class State(NamedTuple):
    # Field names are the TLA+ variable names, so that traces read like TLC's.
    now: int
    nextSlot: int
    place: Fn[int, str]
    slot: Fn[int, int]
    starts: tuple[int, ...]
    seen: Fn[int, Seen] | None = None  # RateLimitCheckThenTake's variable only


@dataclass(frozen=True)
class Constants:
    tasks: int
    interval: int
    burst: int
    max_time: int
    late: bool
    workers: int = 0  # the check-then-take mutant's constant only

    @classmethod
    def from_cfg(cls, cfg: cfgs.Config) -> Constants:
        late = cfg.constants.get("LATE")
        if not isinstance(late, bool):
            raise cfgs.ConfigError(f"{cfg.source}: LATE must be TRUE or FALSE, not {late!r}")
        workers = cfg.int_constant("WORKERS") if "WORKERS" in cfg.constants else 0
        return cls(
            tasks=cfg.int_constant("TASKS"),
            interval=cfg.int_constant("INTERVAL"),
            burst=cfg.int_constant("BURST"),
            max_time=cfg.int_constant("MAX_TIME"),
            late=late,
            workers=workers,
        )

    @property
    def all_tasks(self) -> range:
        """Tasks == 1..TASKS."""
        return range(1, self.tasks + 1)

    @property
    def all_workers(self) -> range:
        """Workers == 1..WORKERS."""
        return range(1, self.workers + 1)

    @property
    def horizon(self) -> int:
        """Horizon == MAX_TIME + TASKS * INTERVAL."""
        return self.max_time + self.tasks * self.interval

    @property
    def ahead(self) -> int:
        """Ahead == (BURST - 1) * INTERVAL."""
        return (self.burst - 1) * self.interval


def initial(c: Constants, split: bool = False) -> State:
    return State(
        now=0,
        nextSlot=0,
        place=Fn.const(c.all_tasks, "ready"),
        slot=Fn.const(c.all_tasks, NO_SLOT),
        starts=(),
        seen=Fn.const(c.all_workers, ()) if split else None,
    )


def kept(s: State, t: int) -> bool:
    """Kept(t): t holds a slot it was throttled for, and has not started."""
    return s.slot[t] != NO_SLOT


def deadline(c: Constants, s: State, t: int) -> int:
    """Deadline(t): the kept slot's theoretical start, the latest GCRA's bound allows."""
    return s.slot[t] + c.ahead


def start(s: State, t: int) -> State:
    """Start(t): t starts now; its kept slot, if any, is spent (HDEL rate_slot)."""
    return s._replace(place=s.place.except_(t, "started"), slot=s.slot.except_(t, NO_SLOT),
                      starts=(*s.starts, s.now))


def gcra(c: Constants, s: State, t: int, read: int, to: str, label: str) -> Transition[State]:
    """Gcra(t, read, to): t takes the slot `first` and starts now if it is at most B-1
    spacings ahead, else waits in `to` until B-1 spacings before it, keeping it."""
    first = max(read, s.now)
    taken = s._replace(nextSlot=first + c.interval)
    if first <= s.now + c.ahead:
        return f"{label}/started", start(taken, t)
    at = first - c.ahead
    return f"{label}/throttled", taken._replace(place=taken.place.except_(t, to),
                                                slot=taken.slot.except_(t, at))


Action = Callable[[Constants, State], Iterator[Transition[State]]]


def lease_with(name: str, keep: bool, to: str) -> Action:
    """LeaseWith(t, keep, to): lease.lua popping t. `keep`: a kept slot is honoured;
    `to`: where a throttled task waits."""

    def action(c: Constants, s: State) -> Iterator[Transition[State]]:
        for t in c.all_tasks:
            if s.place[t] != "ready":
                continue
            if keep and kept(s, t):
                yield f"{name}(t={t})/slot", start(s, t)
            else:
                yield gcra(c, s, t, s.nextSlot, to, f"{name}(t={t})")

    return action


lease = lease_with("Lease", keep=True, to="delayed")
takes_again_lease = lease_with("TakesAgainLease", keep=False, to="delayed")
no_wait_lease = lease_with("NoWaitLease", keep=True, to="ready")


def promote(c: Constants, s: State) -> Iterator[Transition[State]]:
    for t in c.all_tasks:
        if s.place[t] == "delayed" and s.slot[t] <= s.now:
            yield f"Promote(t={t})", s._replace(place=s.place.except_(t, "ready"))


def tick(c: Constants, s: State) -> Iterator[Transition[State]]:
    waiting = any(s.place[t] == "delayed" and s.now < s.slot[t] for t in c.all_tasks)
    overdue = any(kept(s, t) and deadline(c, s, t) <= s.now for t in c.all_tasks)
    if (s.now < c.max_time or waiting) and (c.late or not overdue):
        yield "Tick", s._replace(now=s.now + 1)


def take_kept(c: Constants, s: State) -> Iterator[Transition[State]]:
    """TakeKept(t): the split client starts a task with a kept slot, reading nothing."""
    for t in c.all_tasks:
        if s.place[t] == "ready" and kept(s, t):
            yield f"TakeKept(t={t})", start(s, t)


def fresh_ready(c: Constants, s: State) -> bool:
    return any(s.place[t] == "ready" and not kept(s, t) for t in c.all_tasks)


def check(c: Constants, s: State) -> Iterator[Transition[State]]:
    """Check(w): the split client reads the name's next slot."""
    assert s.seen is not None
    for w in c.all_workers:
        if s.seen[w] == () and fresh_ready(c, s):
            yield f"Check(w={w})", s._replace(seen=s.seen.except_(w, (s.nextSlot,)))


def take(c: Constants, s: State) -> Iterator[Transition[State]]:
    """Take(w, t): the GCRA step with the slot w read, whatever was written since."""
    assert s.seen is not None
    for w in c.all_workers:
        seen = s.seen[w]
        if seen == ():
            continue
        for t in c.all_tasks:
            if s.place[t] == "ready" and not kept(s, t):
                label, succ = gcra(c, s, t, seen[0], "delayed", f"Take(w={w},t={t})")
                assert succ.seen is not None
                yield label, succ._replace(seen=succ.seen.except_(w, ()))


NEXT: tuple[Action, ...] = (lease, promote, tick)
TAKES_AGAIN_NEXT: tuple[Action, ...] = (takes_again_lease, promote, tick)
NO_WAIT_NEXT: tuple[Action, ...] = (no_wait_lease, tick)
CHECK_THEN_TAKE_NEXT: tuple[Action, ...] = (take_kept, check, take, promote, tick)


def type_ok(c: Constants, s: State) -> bool:
    times = range(c.horizon + 1)
    return (
        s.now in times and s.nextSlot in times
        and set(s.place) == set(c.all_tasks) and all(p in PLACES for p in s.place.values())
        and set(s.slot) == set(c.all_tasks) and all(v in times for v in s.slot.values())
        and all(v in times for v in s.starts)
    )  # fmt: skip


def check_then_take_type_ok(c: Constants, s: State) -> bool:
    assert s.seen is not None
    return (type_ok(c, s) and set(s.seen) == set(c.all_workers)
            and all(v == () or (len(v) == 1 and 0 <= v[0] <= c.horizon) for v in s.seen.values()))


def never_over_rate(c: Constants, s: State) -> bool:
    starts = s.starts
    return all(
        j - i + 1 <= (starts[j] - starts[i]) // c.interval + c.burst
        for i in range(len(starts)) for j in range(i, len(starts))
    )  # fmt: skip


def never_ahead_of_rate(c: Constants, s: State) -> bool:
    return all(at >= (k - c.burst) * c.interval for k, at in enumerate(s.starts, start=1)
               if k > c.burst)


def slot_kept(s: State, _: str, t: State) -> bool:
    return all(
        t.place[u] == "started" and s.now >= s.slot[u] and t.nextSlot == s.nextSlot
        for u in s.place
        if s.place[u] == "ready" and kept(s, u) and t.place[u] != "ready"
    )


def all_started(s: State) -> bool:
    return all(p == "started" for p in s.place.values())


def invariants(c: Constants) -> dict[str, Callable[[State], bool]]:
    return {
        "TypeOK": lambda s: type_ok(c, s),
        "CheckThenTakeTypeOK": lambda s: check_then_take_type_ok(c, s),
        "NeverOverRate": lambda s: never_over_rate(c, s),
        "NeverAheadOfRate": lambda s: never_ahead_of_rate(c, s),
    }


PROPERTIES: dict[str, Property[State]] = {
    "SlotKept": StepProperty("SlotKept", slot_kept),
    **{name: EndProperty(name, all_started)
       for name in ("EveryTaskStarts", "TakesAgainEveryTaskStarts", "NoWaitEveryTaskStarts",
                    "CheckThenTakeEveryTaskStarts")},
}


def model(cfg: cfgs.Config) -> Model[State]:
    return _model("RateLimit", NEXT, cfg)


def check_then_take_model(cfg: cfgs.Config) -> Model[State]:
    return _model("RateLimitCheckThenTake", CHECK_THEN_TAKE_NEXT, cfg, split=True)


def takes_again_model(cfg: cfgs.Config) -> Model[State]:
    return _model("RateLimitTakesAgain", TAKES_AGAIN_NEXT, cfg)


def no_wait_model(cfg: cfgs.Config) -> Model[State]:
    return _model("RateLimitNoWait", NO_WAIT_NEXT, cfg)


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
