r"""Python transcription of Priority.tla and its three mutants.

TLA+                          taskq                                  Python
----------------------------  -------------------------------------  ----------------------
Init                          no task sent yet                       initial(c)
Enqueue(p, d)                 enqueue.lua, priority p, delay d       enqueue(c, s)
LeaseIf(p, scannedFirst),     lease.lua: the scan from the highest   lease_if, lease
Lease(p)                      level stops at p, front of its list
ReleaseTo(t, front),          release.lua: to the front of its       release_to, release
Release(t)                    level's list
Fail(t)                       fail.lua or reap.lua                   fail(c, s): /delayed,
                                                                     /dead
Ack(t)                        ack.lua                                ack(c, s)
PromoteTo(t, p), Promote(t)   promote.lua: to the back of its        promote_to, promote
                              level's list
RetryDead(t)                  retry_dead.lua                         retry_dead(c, s)
Cancel(t)                     cancel.lua on a pending task           cancel(c, s)
Next                          NEXT, tried in that order
TypeOK, OnePlace,             the invariants table, under the TLA+ names
PriorityKept
LeasedWasHighest,             StepPropertys ([][P]_vars)
FifoWithinLevel
NothingLost                   an EndProperty ([](~ENABLED Next => Settled))

PriorityLowestFirst.tla       lease.lua scanning from the lowest     lowest_first_lease,
                              level up                               LOWEST_FIRST_NEXT
PriorityRetryLosesPriority    promote.lua pushing to the default     losing_promote,
.tla                          level's list                           LOSING_NEXT
PriorityReleaseToBack.tla     release.lua pushing to the back        to_back_release,
                                                                     TO_BACK_NEXT

Each \E is a loop in ascending order (BOOLEAN is FALSE, TRUE), nested as written,
and Next's disjuncts are tried in the order written, which is TLC's order.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import NamedTuple

from specs.tlacheck import EndProperty, Fn, Model, StepProperty, Transition
from specs.tlacheck import cfg as cfgs
from specs.tlacheck.model import Property

Tasks = frozenset[int]
Pairs = frozenset[tuple[int, int]]


class State(NamedTuple):
    # Field names are the TLA+ variable names, so that traces read like TLC's.
    sent: int
    prio: Fn[int, int]
    ready: Fn[int, tuple[int, ...]]
    leased: Tasks
    delayed: Tasks
    dlq: Tasks
    done: Tasks
    cancelled: Tasks
    revivals: int
    earlier: Pairs


@dataclass(frozen=True)
class Constants:
    tasks: int
    workers: int
    max_priority: int
    default: int
    max_revivals: int

    @classmethod
    def from_cfg(cls, cfg: cfgs.Config) -> Constants:
        return cls(
            tasks=cfg.int_constant("TASKS"),
            workers=cfg.int_constant("WORKERS"),
            max_priority=cfg.int_constant("MAX_PRIORITY"),
            default=cfg.int_constant("DEFAULT"),
            max_revivals=cfg.int_constant("MAX_REVIVALS"),
        )

    @property
    def ids(self) -> range:
        """Tasks == 1..TASKS."""
        return range(1, self.tasks + 1)

    @property
    def levels(self) -> range:
        """Levels == 0..MAX_PRIORITY."""
        return range(self.max_priority + 1)


def initial(c: Constants) -> State:
    none: Tasks = frozenset()
    return State(
        0, Fn.const(c.ids, c.default), Fn.const(c.levels, ()), none, none, none, none, none,
        0, frozenset(),
    )  # fmt: skip


def waiting(s: State) -> Tasks:
    """Waiting: the tasks in any level's list."""
    return frozenset(t for queue in s.ready.values() for t in queue)


def peers(s: State, p: int) -> Tasks:
    """Peers(p): the waiting tasks of priority p."""
    return frozenset(r for r in waiting(s) if s.prio[r] == p)


def behind(s: State, t: int, p: int) -> Pairs:
    r"""earlier \cup {<<r, t>> : r \in Peers(p)}: t entered after every peer."""
    return s.earlier | {(r, t) for r in peers(s, p)}


def forget(s: State, t: int) -> Pairs:
    """Forget(t): the ghost once t has left ready."""
    return frozenset(e for e in s.earlier if t not in e)


def pushed(s: State, p: int, t: int, front: bool = False) -> Fn[int, tuple[int, ...]]:
    r"""[ready EXCEPT ![p] = Append(@, t)], or <<t>> \o @ at the front."""
    queue = s.ready[p]
    return s.ready.except_(p, (t, *queue) if front else (*queue, t))


Action = Callable[[Constants, State], Iterator[Transition[State]]]


def enqueue(c: Constants, s: State) -> Iterator[Transition[State]]:
    if s.sent >= c.tasks:
        return
    t = s.sent + 1
    for p in c.levels:
        for d in (False, True):
            label = f"Enqueue(p={p},d={'TRUE' if d else 'FALSE'})"
            new = s._replace(sent=t, prio=s.prio.except_(t, p))
            if d:
                yield label, new._replace(delayed=s.delayed | {t})
            else:
                yield label, new._replace(ready=pushed(s, p, t), earlier=behind(s, t, p))


def lease_if(name: str, scanned_first: Callable[[State, int], bool]) -> Action:
    """LeaseIf(p, scannedFirst): the front of level p, where the scan stops."""

    def action(c: Constants, s: State) -> Iterator[Transition[State]]:
        if len(s.leased) >= c.workers:
            return
        for p in c.levels:
            if s.ready[p] and scanned_first(s, p):
                t = s.ready[p][0]
                yield (
                    f"{name}(p={p})",
                    s._replace(
                        ready=s.ready.except_(p, s.ready[p][1:]),
                        leased=s.leased | {t},
                        earlier=forget(s, t),
                    ),
                )

    return action


def nothing_above(s: State, p: int) -> bool:
    r"""\A q \in Levels : q > p => ready[q] = <<>>."""
    return not any(queue for q, queue in s.ready.items() if q > p)


def nothing_below(s: State, p: int) -> bool:
    r"""\A q \in Levels : q < p => ready[q] = <<>>."""
    return not any(queue for q, queue in s.ready.items() if q < p)


lease = lease_if("Lease", nothing_above)
lowest_first_lease = lease_if("LowestFirstLease", nothing_below)


def release_to(name: str, front: bool) -> Action:
    """ReleaseTo(t, front): back to its own level's list; it counts as entering first."""

    def action(c: Constants, s: State) -> Iterator[Transition[State]]:
        for t in c.ids:
            if t in s.leased:
                p = s.prio[t]
                yield (
                    f"{name}(t={t})",
                    s._replace(
                        leased=s.leased - {t},
                        ready=pushed(s, p, t, front),
                        earlier=s.earlier | {(t, r) for r in peers(s, p)},
                    ),
                )

    return action


release = release_to("Release", front=True)
to_back_release = release_to("ToBackRelease", front=False)


def fail(c: Constants, s: State) -> Iterator[Transition[State]]:
    for t in c.ids:
        if t in s.leased:
            left = s._replace(leased=s.leased - {t})
            yield f"Fail(t={t})/delayed", left._replace(delayed=s.delayed | {t})
            yield f"Fail(t={t})/dead", left._replace(dlq=s.dlq | {t})


def ack(c: Constants, s: State) -> Iterator[Transition[State]]:
    for t in c.ids:
        if t in s.leased:
            yield f"Ack(t={t})", s._replace(leased=s.leased - {t}, done=s.done | {t})


def promote_to(name: str, level: Callable[[Constants, State, int], int]) -> Action:
    """PromoteTo(t, p): a delayed task to the back of level p's list."""

    def action(c: Constants, s: State) -> Iterator[Transition[State]]:
        for t in c.ids:
            if t in s.delayed:
                yield (
                    f"{name}(t={t})",
                    s._replace(
                        delayed=s.delayed - {t},
                        ready=pushed(s, level(c, s, t), t),
                        earlier=behind(s, t, s.prio[t]),
                    ),
                )

    return action


promote = promote_to("Promote", lambda _, s, t: s.prio[t])
losing_promote = promote_to("LosingPromote", lambda c, _, __: c.default)


def retry_dead(c: Constants, s: State) -> Iterator[Transition[State]]:
    for t in c.ids:
        if t in s.dlq and s.revivals < c.max_revivals:
            p = s.prio[t]
            yield f"RetryDead(t={t})", s._replace(
                dlq=s.dlq - {t}, ready=pushed(s, p, t), revivals=s.revivals + 1,
                earlier=behind(s, t, p),
            )  # fmt: skip


def cancel(c: Constants, s: State) -> Iterator[Transition[State]]:
    for t in c.ids:
        if t in waiting(s):
            p = s.prio[t]
            yield (
                f"Cancel(t={t})",
                s._replace(
                    ready=s.ready.except_(p, tuple(x for x in s.ready[p] if x != t)),
                    cancelled=s.cancelled | {t},
                    earlier=forget(s, t),
                ),
            )


NEXT: tuple[Action, ...] = (enqueue, lease, release, fail, ack, promote, retry_dead, cancel)
LOWEST_FIRST_NEXT: tuple[Action, ...] = (
    enqueue, lowest_first_lease, release, fail, ack, promote, retry_dead, cancel,
)  # fmt: skip
LOSING_NEXT: tuple[Action, ...] = (
    enqueue, lease, release, fail, ack, losing_promote, retry_dead, cancel,
)  # fmt: skip
TO_BACK_NEXT: tuple[Action, ...] = (
    enqueue, lease, to_back_release, fail, ack, promote, retry_dead, cancel,
)  # fmt: skip


def type_ok(c: Constants, s: State) -> bool:
    ids, levels = set(c.ids), set(c.levels)
    sets: Iterable[Tasks] = (s.leased, s.delayed, s.dlq, s.done, s.cancelled)
    return (
        0 <= s.sent <= c.tasks
        and set(s.prio) == ids and set(s.prio.values()) <= levels
        and set(s.ready) == levels and all(set(q) <= ids for q in s.ready.values())
        and all(xs <= ids for xs in sets) and len(s.leased) <= c.workers
        and 0 <= s.revivals <= c.max_revivals
        and all(a in ids and b in ids for a, b in s.earlier)
    )  # fmt: skip


def count(s: State, t: int) -> int:
    """Count(t): how many times t appears in the lists and the sets."""
    in_lists = sum(queue.count(t) for queue in s.ready.values())
    return in_lists + sum(t in xs for xs in (s.leased, s.delayed, s.dlq, s.done, s.cancelled))


def one_place(c: Constants, s: State) -> bool:
    return all(count(s, t) == (1 if t <= s.sent else 0) for t in c.ids)


def priority_kept(s: State) -> bool:
    return all(s.prio[t] == p for p, queue in s.ready.items() for t in queue)


def leased_was_highest(s: State, _: str, t: State) -> bool:
    return all(s.prio[r] <= s.prio[n] for n in t.leased - s.leased for r in waiting(s))


def fifo_within_level(s: State, _: str, t: State) -> bool:
    return not any(later in t.leased - s.leased for _first, later in s.earlier)


def settled(s: State) -> bool:
    return all(t in s.done | s.dlq | s.cancelled for t in s.prio)


def invariants(c: Constants) -> dict[str, Callable[[State], bool]]:
    return {
        "TypeOK": lambda s: type_ok(c, s),
        "OnePlace": lambda s: one_place(c, s),
        "PriorityKept": priority_kept,
    }


PROPERTIES: dict[str, Property[State]] = {
    "LeasedWasHighest": StepProperty("LeasedWasHighest", leased_was_highest),
    "FifoWithinLevel": StepProperty("FifoWithinLevel", fifo_within_level),
    **{
        name: EndProperty(name, settled)
        for name in ("NothingLost", "LowestFirstNothingLost", "LosingNothingLost",
                     "ToBackNothingLost")
    },
}  # fmt: skip


def model(cfg: cfgs.Config) -> Model[State]:
    return _model("Priority", NEXT, cfg)


def lowest_first_model(cfg: cfgs.Config) -> Model[State]:
    return _model("PriorityLowestFirst", LOWEST_FIRST_NEXT, cfg)


def retry_loses_priority_model(cfg: cfgs.Config) -> Model[State]:
    return _model("PriorityRetryLosesPriority", LOSING_NEXT, cfg)


def release_to_back_model(cfg: cfgs.Config) -> Model[State]:
    return _model("PriorityReleaseToBack", TO_BACK_NEXT, cfg)


def _model(name: str, actions: tuple[Action, ...], cfg: cfgs.Config) -> Model[State]:
    c = Constants.from_cfg(cfg)
    return cfgs.action_model(name, cfg, c, initial(c), actions, invariants(c), PROPERTIES)
