r"""Python transcription of RateLimit.tla and its mutants.

TLA+                              taskq                                 Python
--------------------------------  ------------------------------------  ---------------------
Init                              the name's tasks ready, cursors at 0  initial(c)
Start(t), Gcra(t, sa, sr, to)     a start; the GCRA step                start, gcra
FreeFrom(t), GiveBack(t)          S_r once t gives back its slot        free_from, give_back
LeaseTo(t, to), Lease(t)          lease.lua popping t                   lease_to, lease:
                                                                        /started, /throttled
Promote(t)                        a due delayed task back to ready      promote(c, s)
CancelWith(t, sr), Cancel(t)      cancel.lua on a task not yet started  cancel_with, cancel
ReleaseWith(sr), Release          lease.lua releasing the line after a  release_with, release
                                  redeploy changed the rate
Tick                              Redis time passes a tick              tick(c, s)
Next                              NEXT, tried in that order
TypeOK, NeverOverRate,            the INVARIANTS table, under the TLA+ names
NeverAheadOfRate
NoGhostSlot                       the INVARIANTS table too
NoEarlyStart, EveryTaskStarts     a StepProperty and an EndProperty

RateLimitCheckThenTake.tla        the cursors read (Check), then taken  check, take,
                                  (Take), in two calls                  CHECK_THEN_TAKE_NEXT
RateLimitGhostSlot.tla            a throttled task leased again or      ghost_lease,
                                  cancelled gives back no slot          ghost_cancel,
                                                                        GHOST_SLOT_NEXT
RateLimitReleaseKeepsNext.tla     a released line leaves S_r where it   release_keeps_next,
                                  was                                   RELEASE_KEEPS_NEXT_NEXT
RateLimitNoWait.tla               a throttled task left on ready        no_wait_lease,
                                                                        NO_WAIT_NEXT
RateLimitKeptSlot.tla             the first design: one cursor, a       kept_slot_lease,
                                  throttled task starts on its slot     KEPT_SLOT_NEXT

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

PLACES = ("ready", "delayed", "started", "cancelled")
NO_RUN_AT = 0
Seen = tuple[int, ...]  # <<S_a, S_r>> once read, <<>> before


class State(NamedTuple):
    # Field names are the TLA+ variable names, so that traces read like TLC's.
    now: int
    startAt: int
    nextSlot: int
    place: Fn[int, str]
    runAt: Fn[int, int]
    starts: tuple[int, ...]
    releases: int = 0
    seen: Fn[int, Seen] | None = None  # RateLimitCheckThenTake's variable only


@dataclass(frozen=True)
class Constants:
    tasks: int
    interval: int
    burst: int
    max_time: int
    late: bool
    max_cancels: int
    max_releases: int
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
            max_cancels=cfg.int_constant("MAX_CANCELS"),
            max_releases=cfg.int_constant("MAX_RELEASES"),
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
        """Horizon == MAX_TIME + (TASKS + 1) * TASKS * INTERVAL."""
        return self.max_time + (self.tasks + 1) * self.tasks * self.interval

    @property
    def ahead(self) -> int:
        """Ahead == (BURST - 1) * INTERVAL."""
        return (self.burst - 1) * self.interval


def initial(c: Constants, split: bool = False) -> State:
    return State(
        now=0,
        startAt=0,
        nextSlot=0,
        place=Fn.const(c.all_tasks, "ready"),
        runAt=Fn.const(c.all_tasks, NO_RUN_AT),
        starts=(),
        seen=Fn.const(c.all_workers, ()) if split else None,
    )


def throttled(s: State, t: int) -> bool:
    """Throttled(t): t was throttled and has not started."""
    return s.runAt[t] != NO_RUN_AT


def deadline(c: Constants, s: State, t: int) -> int:
    """Deadline(t): a throttled task's slot, the latest time it starts on time."""
    return s.runAt[t] + c.ahead


def after_slots(c: Constants, s: State, but: frozenset[int] = frozenset()) -> int:
    """After(SlotsBut(U)): one spacing after the last slot a throttled task not in U
    waits for, or S_a if that is later."""
    slots = [deadline(c, s, u) for u in c.all_tasks if u not in but and throttled(s, u)]
    return max(s.startAt, max(slots) + c.interval) if slots else s.startAt


def free_from(c: Constants, s: State, t: int) -> int:
    """FreeFrom(t): the next slot to hand a throttled task once t has left the line."""
    return after_slots(c, s, frozenset({t}))


def give_back(c: Constants, s: State, t: int) -> int:
    """GiveBack(t): S_r once t, if throttled, has given back its slot."""
    return min(s.nextSlot, free_from(c, s, t)) if throttled(s, t) else s.nextSlot


def start(s: State, t: int) -> State:
    """Start(t): t starts now."""
    return s._replace(place=s.place.except_(t, "started"), runAt=s.runAt.except_(t, NO_RUN_AT),
                      starts=(*s.starts, s.now))


def gcra(
    c: Constants, s: State, t: int, sa: int, sr: int, to: str, label: str
) -> Transition[State]:
    """Gcra(t, sa, sr, to): t starts now if S_a (read as `sa`) is at most B-1 spacings
    ahead, moving S_a on; else it is throttled onto the next slot and waits in `to`."""
    first = max(sa, s.now)
    if first - c.ahead <= s.now:
        started = start(s, t)
        return f"{label}/started", started._replace(
            startAt=first + c.interval, nextSlot=max(sr, first + c.interval))
    slot = max(sr, first)
    return f"{label}/throttled", s._replace(
        place=s.place.except_(t, to), runAt=s.runAt.except_(t, slot - c.ahead),
        nextSlot=slot + c.interval)  # fmt: skip


Action = Callable[[Constants, State], Iterator[Transition[State]]]


def lease_to(name: str, to: str, gives_back: bool = True) -> Action:
    """LeaseTo(t, to): lease.lua popping t; `to`: where a throttled task waits. Without
    `gives_back`, GhostLease(t): a throttled task keeps S_r where it was."""

    def action(c: Constants, s: State) -> Iterator[Transition[State]]:
        for t in c.all_tasks:
            if s.place[t] == "ready":
                sr = give_back(c, s, t) if gives_back else s.nextSlot
                yield gcra(c, s, t, s.startAt, sr, to, f"{name}(t={t})")

    return action


lease = lease_to("Lease", "delayed")
no_wait_lease = lease_to("NoWaitLease", "ready")
ghost_lease = lease_to("GhostLease", "delayed", gives_back=False)


def cancel_with(name: str, gives_back: bool) -> Action:
    """Cancel(t), or GhostCancel(t) without `gives_back`: cancel.lua on a task not yet
    started, S_r given back (or left) as CancelWith's `sr`."""

    def action(c: Constants, s: State) -> Iterator[Transition[State]]:
        cancelled = sum(p == "cancelled" for p in s.place.values())
        for t in c.all_tasks:
            if s.place[t] in ("ready", "delayed") and cancelled < c.max_cancels:
                sr = give_back(c, s, t) if gives_back else s.nextSlot
                yield f"{name}(t={t})", s._replace(
                    place=s.place.except_(t, "cancelled"),
                    runAt=s.runAt.except_(t, NO_RUN_AT), nextSlot=sr)

    return action


cancel = cancel_with("Cancel", gives_back=True)
ghost_cancel = cancel_with("GhostCancel", gives_back=False)


def release_with(name: str, resets: bool) -> Action:
    """Release, or ReleaseKeepsNext without `resets`: every throttled task due now,
    holding no slot, and S_r back to S_a (or left where it was)."""

    def action(c: Constants, s: State) -> Iterator[Transition[State]]:
        if s.releases < c.max_releases and any(throttled(s, t) for t in c.all_tasks):
            yield name, s._replace(runAt=Fn.const(c.all_tasks, NO_RUN_AT),
                                   nextSlot=s.startAt if resets else s.nextSlot,
                                   releases=s.releases + 1)

    return action


release = release_with("Release", resets=True)
release_keeps_next = release_with("ReleaseKeepsNext", resets=False)


def kept_slot_lease(c: Constants, s: State) -> Iterator[Transition[State]]:
    """KeptSlotLease(t): one cursor; a throttled task starts on its kept slot unchecked."""
    for t in c.all_tasks:
        if s.place[t] != "ready":
            continue
        label = f"KeptSlotLease(t={t})"
        if throttled(s, t):
            yield f"{label}/slot", start(s, t)
            continue
        first = max(s.startAt, s.now)
        taken = s._replace(startAt=first + c.interval, nextSlot=first + c.interval)
        if first - c.ahead <= s.now:
            yield f"{label}/started", start(taken, t)
        else:
            yield f"{label}/throttled", taken._replace(
                place=taken.place.except_(t, "delayed"),
                runAt=taken.runAt.except_(t, first - c.ahead))


def promote(c: Constants, s: State) -> Iterator[Transition[State]]:
    for t in c.all_tasks:
        if s.place[t] == "delayed" and s.runAt[t] <= s.now:
            yield f"Promote(t={t})", s._replace(place=s.place.except_(t, "ready"))


def tick(c: Constants, s: State) -> Iterator[Transition[State]]:
    waiting = any(s.place[t] == "delayed" and s.now < s.runAt[t] for t in c.all_tasks)
    overdue = any(throttled(s, t) and deadline(c, s, t) <= s.now for t in c.all_tasks)
    if (s.now < c.max_time or waiting) and (c.late or not overdue):
        yield "Tick", s._replace(now=s.now + 1)


def check(c: Constants, s: State) -> Iterator[Transition[State]]:
    """Check(w): the split client reads the name's cursors."""
    assert s.seen is not None
    ready = any(s.place[t] == "ready" for t in c.all_tasks)
    for w in c.all_workers:
        if s.seen[w] == () and ready:
            yield f"Check(w={w})", s._replace(seen=s.seen.except_(w, (s.startAt, s.nextSlot)))


def take(c: Constants, s: State) -> Iterator[Transition[State]]:
    """Take(w, t): the GCRA step with the cursors w read, whatever was written since."""
    assert s.seen is not None
    for w in c.all_workers:
        seen = s.seen[w]
        if seen == ():
            continue
        for t in c.all_tasks:
            if s.place[t] == "ready":
                label, succ = gcra(c, s, t, seen[0], seen[1], "delayed", f"Take(w={w},t={t})")
                assert succ.seen is not None
                yield label, succ._replace(seen=succ.seen.except_(w, ()))


NEXT: tuple[Action, ...] = (lease, promote, cancel, release, tick)
RELEASE_KEEPS_NEXT_NEXT: tuple[Action, ...] = (lease, promote, cancel, release_keeps_next,
                                               tick)
GHOST_SLOT_NEXT: tuple[Action, ...] = (ghost_lease, promote, ghost_cancel, tick)
NO_WAIT_NEXT: tuple[Action, ...] = (no_wait_lease, tick)
KEPT_SLOT_NEXT: tuple[Action, ...] = (kept_slot_lease, promote, tick)
CHECK_THEN_TAKE_NEXT: tuple[Action, ...] = (check, take, promote, tick)


def type_ok(c: Constants, s: State) -> bool:
    times = range(c.horizon + 1)
    return (
        s.now in times and s.startAt in times and s.nextSlot in times
        and set(s.place) == set(c.all_tasks) and all(p in PLACES for p in s.place.values())
        and set(s.runAt) == set(c.all_tasks) and all(v in times for v in s.runAt.values())
        and all(v in times for v in s.starts) and 0 <= s.releases <= c.max_releases
    )  # fmt: skip


def check_then_take_type_ok(c: Constants, s: State) -> bool:
    assert s.seen is not None
    times = range(c.horizon + 1)
    return (type_ok(c, s) and set(s.seen) == set(c.all_workers)
            and all(v == () or (len(v) == 2 and all(x in times for x in v))
                    for v in s.seen.values()))


def never_over_rate(c: Constants, s: State) -> bool:
    starts = s.starts
    return all(
        j - i + 1 <= (starts[j] - starts[i]) // c.interval + c.burst
        for i in range(len(starts)) for j in range(i, len(starts))
    )  # fmt: skip


def never_ahead_of_rate(c: Constants, s: State) -> bool:
    return all(at >= (k - c.burst) * c.interval for k, at in enumerate(s.starts, start=1)
               if k > c.burst)


def no_early_start(s: State, _: str, t: State) -> bool:
    """NoEarlyStart: a lease of u (it starts, or gets a new run_at) comes at its run_at."""
    return all(
        s.now >= s.runAt[u]
        for u in s.place
        if s.place[u] == "ready" and (t.place[u], t.runAt[u]) != (s.place[u], s.runAt[u])
    )


def all_started(s: State) -> bool:
    """AllStarted: every task started or was cancelled."""
    return all(p in ("started", "cancelled") for p in s.place.values())


def invariants(c: Constants) -> dict[str, Callable[[State], bool]]:
    return {
        "TypeOK": lambda s: type_ok(c, s),
        "CheckThenTakeTypeOK": lambda s: check_then_take_type_ok(c, s),
        "NeverOverRate": lambda s: never_over_rate(c, s),
        "NeverAheadOfRate": lambda s: never_ahead_of_rate(c, s),
        "NoGhostSlot": lambda s: s.nextSlot <= after_slots(c, s),
    }


PROPERTIES: dict[str, Property[State]] = {
    "NoEarlyStart": StepProperty("NoEarlyStart", no_early_start),
    **{name: EndProperty(name, all_started)
       for name in ("EveryTaskStarts", "NoWaitEveryTaskStarts", "KeptSlotEveryTaskStarts",
                    "CheckThenTakeEveryTaskStarts", "GhostSlotEveryTaskStarts",
                    "ReleaseKeepsNextEveryTaskStarts")},
}


def model(cfg: cfgs.Config) -> Model[State]:
    return _model("RateLimit", NEXT, cfg)


def check_then_take_model(cfg: cfgs.Config) -> Model[State]:
    return _model("RateLimitCheckThenTake", CHECK_THEN_TAKE_NEXT, cfg, split=True)


def no_wait_model(cfg: cfgs.Config) -> Model[State]:
    return _model("RateLimitNoWait", NO_WAIT_NEXT, cfg)


def kept_slot_model(cfg: cfgs.Config) -> Model[State]:
    return _model("RateLimitKeptSlot", KEPT_SLOT_NEXT, cfg)


def ghost_slot_model(cfg: cfgs.Config) -> Model[State]:
    return _model("RateLimitGhostSlot", GHOST_SLOT_NEXT, cfg)


def release_keeps_next_model(cfg: cfgs.Config) -> Model[State]:
    return _model("RateLimitReleaseKeepsNext", RELEASE_KEEPS_NEXT_NEXT, cfg)


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
