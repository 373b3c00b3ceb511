r"""Python transcription of QueueRateLimit.tla and its mutant.

TLA+                              taskq                                 Python
--------------------------------  ------------------------------------  ---------------------
Init                              the name's tasks ready, cursors at 0  initial(c)
First(l), Refuses(l)              a limit's GCRA check at now           first, refuses
GiveBack(t, l), StillAhead(t, l)  S_r once t's slot is given back; a    give_back,
                                  slot no start has taken               still_ahead
Start(t), Throttle(t, r, k)       a start; a task throttled again       start, throttle
LeaseKeeping(t, keeps), Lease(t)  lease.lua popping t                   lease_keeping, lease:
                                                                        /started, /throttled
Promote(t)                        a due delayed task back to ready      promote(c, s)
InForce                           the limits leases apply               in_force(c, s)
Raise                             a redeploy raising the name's rate    do_raise(c, s)
RemoveReleasing(releasing),       a redeploy removing the name's limit  remove_releasing,
Remove                            (lift_rate_limits.lua)                remove
Tick                              Redis time passes a tick              tick(c, s)
Next                              NEXT, tried in that order
TypeOK, NeverOverRate,            the INVARIANTS table, under the TLA+ names
NoGhostSlot,
NothingWaitsForARemovedLimit
NoEarlyStart, NoPlaceLost,        StepProperties and an EndProperty
EveryTaskStarts

QueueRateLimitRetake.tla          a refused task gives back every slot  retake_lease,
                                  and takes the next                    RETAKE_NEXT
QueueRateLimitKeepLine.tla        a removed limit's line kept           keep_line_remove,
                                                                        KEEP_LINE_NEXT

Each \E t is a loop in ascending order and Next's disjuncts are tried in the order
written, which is TLC's order.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import NamedTuple

from specs.tlacheck import EndProperty, Fn, Model, StepProperty, Transition
from specs.tlacheck import cfg as cfgs
from specs.tlacheck.model import Property

LIMITS = ("name", "queue")
PLACES = ("ready", "delayed", "started")
REDEPLOYS = ("raise", "remove")
NONE = 0
NO_RUN_AT = 0


class State(NamedTuple):
    # Field names are the TLA+ variable names, so that traces read like TLC's.
    now: int
    spacing: Fn[str, int]
    startAt: Fn[str, int]
    nextSlot: Fn[str, int]
    place: Fn[int, str]
    slot: Fn[int, Fn[str, int]]
    runAt: Fn[int, int]
    starts: tuple[int, ...]
    releases: int
    raisedAt: int


@dataclass(frozen=True)
class Constants:
    tasks: int
    interval: int
    raised: int
    queue_interval: int
    burst: int
    max_time: int
    max_releases: int
    redeploy: str

    @classmethod
    def from_cfg(cls, cfg: cfgs.Config) -> Constants:
        redeploy = cfg.constants.get("REDEPLOY")
        if redeploy not in REDEPLOYS:
            raise cfgs.ConfigError(f"{cfg.source}: REDEPLOY must be one of {REDEPLOYS}, "
                                   f"got {redeploy!r}")
        return cls(
            tasks=cfg.int_constant("TASKS"),
            interval=cfg.int_constant("INTERVAL"),
            raised=cfg.int_constant("RAISED"),
            queue_interval=cfg.int_constant("QUEUE_INTERVAL"),
            burst=cfg.int_constant("BURST"),
            max_time=cfg.int_constant("MAX_TIME"),
            max_releases=cfg.int_constant("MAX_RELEASES"),
            redeploy=str(redeploy),
        )

    @property
    def all_tasks(self) -> range:
        """Tasks == 1..TASKS."""
        return range(1, self.tasks + 1)

    @property
    def horizon(self) -> int:
        """Horizon == MAX_TIME + (TASKS + 1) * TASKS * (INTERVAL + QUEUE_INTERVAL)."""
        return self.max_time + (self.tasks + 1) * self.tasks * (
            self.interval + self.queue_interval)


def initial(c: Constants) -> State:
    return State(
        now=0,
        spacing=Fn({"name": c.interval, "queue": c.queue_interval}),
        startAt=Fn.const(LIMITS, 0),
        nextSlot=Fn.const(LIMITS, 0),
        place=Fn.const(c.all_tasks, "ready"),
        slot=Fn.const(c.all_tasks, Fn.const(LIMITS, NONE)),
        runAt=Fn.const(c.all_tasks, NO_RUN_AT),
        starts=(),
        releases=0,
        raisedAt=0,
    )


def ahead(c: Constants, s: State, limit: str) -> int:
    return (c.burst - 1) * s.spacing[limit]


def first(s: State, limit: str) -> int:
    return max(s.startAt[limit], s.now)


def refuses(c: Constants, s: State, limit: str) -> bool:
    return first(s, limit) - ahead(c, s, limit) > s.now


def in_force(c: Constants, s: State) -> tuple[str, ...]:
    """InForce: both limits, until a redeploy removes the name's."""
    return ("queue",) if c.redeploy == "remove" and s.releases > 0 else LIMITS


def after(s: State, limit: str, but: frozenset[int] = frozenset()) -> int:
    """After(l, SlotsBut(l, U)): one spacing after the last slot of l's line held by a
    task not in U, or S_a if that is later."""
    slots = [s.slot[u][limit] for u in s.slot if u not in but and s.slot[u][limit] != NONE]
    at = s.startAt[limit]
    return max(at, max(slots) + s.spacing[limit]) if slots else at


def give_back(s: State, t: int, limit: str) -> int:
    """GiveBack(t, l): l's S_r once t has given back the slot it holds there, if any."""
    if s.slot[t][limit] == NONE:
        return s.nextSlot[limit]
    return min(s.nextSlot[limit], after(s, limit, frozenset({t})))


def still_ahead(s: State, t: int, limit: str) -> bool:
    """StillAhead(t, l): t holds a slot of l that no start has taken."""
    return s.slot[t][limit] != NONE and s.slot[t][limit] >= first(s, limit)


def start(c: Constants, s: State, t: int) -> State:
    """Start(t): t starts now; each limit in force's S_a moves on, and t's slots are
    given back."""
    forced = in_force(c, s)
    return s._replace(
        place=s.place.except_(t, "started"),
        slot=s.slot.except_(t, Fn.const(LIMITS, NONE)),
        runAt=s.runAt.except_(t, NO_RUN_AT),
        starts=(*s.starts, s.now),
        startAt=Fn({lim: first(s, lim) + s.spacing[lim] if lim in forced else s.startAt[lim]
                    for lim in LIMITS}),
        nextSlot=Fn({lim: max(give_back(s, t, lim), first(s, lim) + s.spacing[lim])
                     if lim in forced else give_back(s, t, lim) for lim in LIMITS}),
    )


def throttle(
    c: Constants, s: State, t: int, refusing: frozenset[str], kept: frozenset[str]
) -> State:
    """Throttle(t, refusing, kept): t waits for the later of the refusing limits'
    slots, keeping its slots in those of `kept`."""

    def given(limit: str) -> int:
        if limit in kept:
            return s.slot[t][limit]
        if limit in refusing:
            return max(give_back(s, t, limit), first(s, limit))
        return NONE

    slots = Fn({lim: given(lim) for lim in LIMITS})
    due = [slots[lim] - ahead(c, s, lim) if lim in refusing else NO_RUN_AT for lim in LIMITS]

    def next_slot(limit: str) -> int:
        if limit in kept:
            return s.nextSlot[limit]
        if limit in refusing:
            return slots[limit] + s.spacing[limit]
        return give_back(s, t, limit)

    return s._replace(
        place=s.place.except_(t, "delayed"),
        slot=s.slot.except_(t, slots),
        runAt=s.runAt.except_(t, max(due)),
        nextSlot=Fn({lim: next_slot(lim) for lim in LIMITS}),
    )


Action = Callable[[Constants, State], Iterator[Transition[State]]]


def lease_keeping(name: str, keeps: bool) -> Action:
    """LeaseKeeping(t, keeps): lease.lua popping t; Lease (keeps) or RetakeLease."""

    def action(c: Constants, s: State) -> Iterator[Transition[State]]:
        refusing = frozenset(lim for lim in in_force(c, s) if refuses(c, s, lim))
        for t in c.all_tasks:
            if s.place[t] != "ready":
                continue
            if not refusing:
                yield f"{name}(t={t})/started", start(c, s, t)
                continue
            kept = frozenset(lim for lim in refusing if keeps and still_ahead(s, t, lim))
            yield f"{name}(t={t})/throttled", throttle(c, s, t, refusing, kept)

    return action


lease = lease_keeping("Lease", keeps=True)
retake_lease = lease_keeping("RetakeLease", keeps=False)


def promote(c: Constants, s: State) -> Iterator[Transition[State]]:
    for t in c.all_tasks:
        if s.place[t] == "delayed" and s.runAt[t] <= s.now:
            yield f"Promote(t={t})", s._replace(place=s.place.except_(t, "ready"))


def rescaled(c: Constants, s: State) -> int:
    """Rescaled: the name's S_a put as far ahead of now at RAISED as it was at INTERVAL."""
    at = s.startAt["name"]
    return s.now + (at - s.now) * c.raised // c.interval if at > s.now else at


def do_raise(c: Constants, s: State) -> Iterator[Transition[State]]:
    """Raise: the redeploy; the name's line released, its tasks due now."""
    if c.redeploy != "raise" or s.releases >= c.max_releases:
        return
    at = rescaled(c, s)
    yield "Raise", s._replace(
        spacing=s.spacing.except_("name", c.raised),
        startAt=s.startAt.except_("name", at),
        nextSlot=s.nextSlot.except_("name", at),
        slot=Fn({t: s.slot[t].except_("name", NONE) for t in c.all_tasks}),
        runAt=Fn({t: NO_RUN_AT if s.slot[t]["name"] != NONE else s.runAt[t]
                  for t in c.all_tasks}),
        releases=s.releases + 1,
        raisedAt=len(s.starts),
    )


def remove_releasing(name: str, releasing: bool) -> Action:
    """RemoveReleasing(releasing): the name's limit no longer applied, and (as built)
    its line released and its cursors forgotten; Remove or KeepLineRemove."""

    def action(c: Constants, s: State) -> Iterator[Transition[State]]:
        if c.redeploy != "remove" or s.releases >= c.max_releases:
            return
        done = s._replace(releases=s.releases + 1, raisedAt=len(s.starts))
        if releasing:
            done = done._replace(
                startAt=s.startAt.except_("name", 0),
                nextSlot=s.nextSlot.except_("name", 0),
                slot=Fn({t: s.slot[t].except_("name", NONE) for t in c.all_tasks}),
                runAt=Fn({t: NO_RUN_AT if s.slot[t]["name"] != NONE else s.runAt[t]
                          for t in c.all_tasks}),
            )
        yield name, done

    return action


remove = remove_releasing("Remove", releasing=True)
keep_line_remove = remove_releasing("KeepLineRemove", releasing=False)


def tick(c: Constants, s: State) -> Iterator[Transition[State]]:
    waiting = any(s.place[t] == "delayed" and s.now < s.runAt[t] for t in c.all_tasks)
    if s.now < c.max_time or waiting:
        yield "Tick", s._replace(now=s.now + 1)


NEXT: tuple[Action, ...] = (lease, promote, do_raise, remove, tick)
RETAKE_NEXT: tuple[Action, ...] = (retake_lease, promote, do_raise, remove, tick)
KEEP_LINE_NEXT: tuple[Action, ...] = (lease, promote, do_raise, keep_line_remove, tick)


def type_ok(c: Constants, s: State) -> bool:
    times = range(c.horizon + 1)
    per_limit = (s.startAt, s.nextSlot, *s.slot.values())
    return (
        s.now in times
        and set(s.spacing) == set(LIMITS)
        and all(v in (c.interval, c.raised, c.queue_interval) for v in s.spacing.values())
        and all(set(f) == set(LIMITS) and all(v in times for v in f.values())
                for f in per_limit)
        and set(s.place) == set(c.all_tasks) and all(p in PLACES for p in s.place.values())
        and set(s.slot) == set(c.all_tasks)
        and set(s.runAt) == set(c.all_tasks) and all(v in times for v in s.runAt.values())
        and all(v in times for v in s.starts)
        and 0 <= s.releases <= c.max_releases and 0 <= s.raisedAt <= c.tasks
    )  # fmt: skip


def bounded(c: Constants, starts: tuple[int, ...], interval: int) -> bool:
    """Bounded(S, T): every window of length W holds at most floor(W / T) + B starts."""
    return all(
        j - i + 1 <= (starts[j] - starts[i]) // interval + c.burst
        for i in range(len(starts)) for j in range(i, len(starts))
    )  # fmt: skip


def never_over_rate(c: Constants, s: State) -> bool:
    before = s.starts if s.releases == 0 else s.starts[: s.raisedAt]
    return (bounded(c, s.starts, c.queue_interval)
            and (c.redeploy != "raise" or bounded(c, s.starts, c.raised))
            and bounded(c, before, c.interval))


def no_ghost_slot(s: State) -> bool:
    return all(s.nextSlot[lim] <= after(s, lim) for lim in LIMITS)


def nothing_waits_for_a_removed_limit(c: Constants, s: State) -> bool:
    """NothingWaitsForARemovedLimit: once the name's limit is removed, a delayed task
    is due by its queue slot, or now if it holds none."""
    if "name" in in_force(c, s):
        return True
    return all(
        s.runAt[t] <= (s.slot[t]["queue"] - ahead(c, s, "queue")
                       if s.slot[t]["queue"] != NONE else s.now)
        for t in c.all_tasks if s.place[t] == "delayed"
    )  # fmt: skip


def no_early_start(s: State, _: str, t: State) -> bool:
    """NoEarlyStart: a ready task leased (started or throttled) is at its run_at."""
    return all(s.now >= s.runAt[u] for u in s.place
               if s.place[u] == "ready" and t.place[u] != "ready")


def no_place_lost(s: State, _: str, t: State) -> bool:
    """NoPlaceLost: a slot no start has taken is never traded for a later one."""
    return all(
        t.slot[u][lim] <= s.slot[u][lim]
        for u in s.slot for lim in LIMITS
        if still_ahead(s, u, lim) and t.slot[u][lim] != NONE
    )  # fmt: skip


def all_started(s: State) -> bool:
    """AllStarted: every task started."""
    return all(p == "started" for p in s.place.values())


def invariants(c: Constants) -> dict[str, Callable[[State], bool]]:
    return {
        "TypeOK": lambda s: type_ok(c, s),
        "NeverOverRate": lambda s: never_over_rate(c, s),
        "NoGhostSlot": no_ghost_slot,
        "NothingWaitsForARemovedLimit": lambda s: nothing_waits_for_a_removed_limit(c, s),
    }


PROPERTIES: dict[str, Property[State]] = {
    "NoEarlyStart": StepProperty("NoEarlyStart", no_early_start),
    "NoPlaceLost": StepProperty("NoPlaceLost", no_place_lost),
    **{name: EndProperty(name, all_started)
       for name in ("EveryTaskStarts", "RetakeEveryTaskStarts", "KeepLineEveryTaskStarts")},
}


def model(cfg: cfgs.Config) -> Model[State]:
    return _model("QueueRateLimit", NEXT, cfg)


def retake_model(cfg: cfgs.Config) -> Model[State]:
    return _model("QueueRateLimitRetake", RETAKE_NEXT, cfg)


def keep_line_model(cfg: cfgs.Config) -> Model[State]:
    return _model("QueueRateLimitKeepLine", KEEP_LINE_NEXT, cfg)


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
