r"""Python transcription of PeriodicTick.tla and its mutant PeriodicTickCheckThenEnqueue.

TLA+                     taskq                                   Python
-----------------------  --------------------------------------  -----------------------
Init                     no tick yet, nothing fired              initial(c)
Tick                     the server's clock passes a tick        tick(c, s)
Fire(w)                  fire.lua, one atomic step               fire(c, s): /learn, /fired,
                                                                 /new
Crash(w)                 a worker restarts with no view          crash(c, s)
Forget                   forget_schedule.lua                     forget(c, s)
Sync                     the replica copies the primary          sync(c, s)
Failover                 the replica takes over                  failover(c, s)
Next                     NEXT, tried in that order
TypeOK, OneTaskPerTick,  the INVARIANTS table, under the TLA+ names
NoLostTick

PeriodicTickCheckThenEnqueue.tla  check, then enqueue, in two     check(c, s), enqueue(c, s),
                                  steps                           crash_checked, SPLIT_NEXT

Each \E w is a loop over the workers in ascending order and Next's disjuncts are
tried in the order written, which is TLC's order.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import NamedTuple

from specs.tlacheck import Fn, Model, Transition
from specs.tlacheck import cfg as cfgs

NONE = (0, 0)
RESTARTS = ("now", "caller")


class State(NamedTuple):
    # Field names are the TLA+ variable names, so that traces read like TLC's.
    clock: int
    last: int
    tasks: Fn[int, int]
    rlast: int
    rtasks: Fn[int, int]
    failovers: int
    view: Fn[int, int]
    # PeriodicTick.tla's only (the CheckThenEnqueue mutant has no Forget): as at Init.
    present: bool = True
    since: int = 0
    rpresent: bool = True
    rsince: int = 0
    forgets: int = 0
    checked: Fn[int, tuple[int, int]] | None = None  # the mutant's variable only


@dataclass(frozen=True)
class Constants:
    workers: int
    max_tick: int
    max_failovers: int
    max_forgets: int = 0
    restart: str = "now"

    @classmethod
    def from_cfg(cls, cfg: cfgs.Config, split: bool = False) -> Constants:
        counts = (cfg.int_constant("WORKERS"), cfg.int_constant("MAX_TICK"),
                  cfg.int_constant("MAX_FAILOVERS"))
        if split:  # the mutant module declares neither of the others
            return cls(*counts)
        restart = cfg.constants.get("RESTART")
        if restart not in RESTARTS:
            raise cfgs.ConfigError(f"{cfg.source}: RESTART must be one of {RESTARTS}, "
                                   f"not {restart!r}")
        return cls(*counts, cfg.int_constant("MAX_FORGETS"), str(restart))

    @property
    def all_workers(self) -> range:
        """Workers == 1..WORKERS."""
        return range(1, self.workers + 1)

    @property
    def ticks(self) -> range:
        """Ticks == 1..MAX_TICK."""
        return range(1, self.max_tick + 1)


def initial(c: Constants, split: bool = False) -> State:
    zero = Fn.const(c.ticks, 0)
    return State(0, 0, zero, 0, zero, 0, Fn.const(c.all_workers, 0),
                 checked=Fn.const(c.all_workers, NONE) if split else None)


def made(s: State, low: int, high: int) -> Fn[int, int]:
    r"""[t \in Ticks |-> IF low < t /\ t <= high THEN tasks[t] + 1 ELSE tasks[t]]."""
    return Fn((t, n + 1 if low < t <= high else n) for t, n in s.tasks.items())


Action = Callable[[Constants, State], Iterator[Transition[State]]]


def tick(c: Constants, s: State) -> Iterator[Transition[State]]:
    if s.clock < c.max_tick:
        yield "Tick", s._replace(clock=s.clock + 1)


def fire(c: Constants, s: State) -> Iterator[Transition[State]]:
    for w in c.all_workers:
        if not s.present:
            started = s._replace(present=True, last=s.clock,
                                 view=s.view.except_(w, s.clock))
            if c.restart == "now":
                yield f"Fire(w={w})/new", started._replace(since=s.clock)
            else:
                yield f"Fire(w={w})/new", started._replace(since=s.view[w],
                                                          tasks=made(s, s.view[w], s.clock))
            continue
        if s.view[w] == s.last and s.last == s.clock:
            continue
        if s.view[w] > s.last or s.last == s.clock:
            yield f"Fire(w={w})/learn", s._replace(view=s.view.except_(w, s.last))
        else:
            yield f"Fire(w={w})/fired", s._replace(tasks=made(s, s.last, s.clock),
                                                   last=s.clock,
                                                   view=s.view.except_(w, s.clock))


def crash(c: Constants, s: State) -> Iterator[Transition[State]]:
    for w in c.all_workers:
        if s.view[w] != 0:
            yield f"Crash(w={w})", s._replace(view=s.view.except_(w, 0))


def forget(c: Constants, s: State) -> Iterator[Transition[State]]:
    if s.present and s.forgets < c.max_forgets:
        yield "Forget", s._replace(present=False, last=0, since=0, forgets=s.forgets + 1)


def _copied(s: State) -> bool:
    return (s.rlast, s.rtasks, s.rpresent, s.rsince) == (s.last, s.tasks, s.present, s.since)


def sync(_: Constants, s: State) -> Iterator[Transition[State]]:
    if not _copied(s):
        yield "Sync", s._replace(rlast=s.last, rtasks=s.tasks, rpresent=s.present,
                                 rsince=s.since)


def failover(c: Constants, s: State) -> Iterator[Transition[State]]:
    if s.failovers < c.max_failovers and not _copied(s):
        yield "Failover", s._replace(last=s.rlast, tasks=s.rtasks, present=s.rpresent,
                                     since=s.rsince, failovers=s.failovers + 1)


def check(c: Constants, s: State) -> Iterator[Transition[State]]:
    """Check(w), the mutant's first step: read the last tick and the clock."""
    assert s.checked is not None
    for w in c.all_workers:
        if s.checked[w] == NONE and s.view[w] <= s.last < s.clock:
            yield f"Check(w={w})", s._replace(checked=s.checked.except_(w, (s.last, s.clock)))


def enqueue(c: Constants, s: State) -> Iterator[Transition[State]]:
    """Enqueue(w), the mutant's second step: what it checked, whatever happened since."""
    assert s.checked is not None
    for w in c.all_workers:
        low, high = s.checked[w]
        if (low, high) != NONE:
            yield f"Enqueue(w={w})", s._replace(tasks=made(s, low, high), last=high,
                                                view=s.view.except_(w, high),
                                                checked=s.checked.except_(w, NONE))


def crash_checked(c: Constants, s: State) -> Iterator[Transition[State]]:
    """Crash(w) in the mutant: the worker's view and its checked range go."""
    assert s.checked is not None
    for w in c.all_workers:
        if (s.view[w], s.checked[w]) != (0, NONE):
            yield f"Crash(w={w})", s._replace(view=s.view.except_(w, 0),
                                              checked=s.checked.except_(w, NONE))


NEXT: tuple[Action, ...] = (tick, fire, crash, forget, sync, failover)
SPLIT_NEXT: tuple[Action, ...] = (tick, check, enqueue, crash_checked, sync, failover)


def type_ok(c: Constants, s: State) -> bool:
    counts = range(c.workers + 1)
    return (
        0 <= s.clock <= c.max_tick and 0 <= s.last <= c.max_tick
        and 0 <= s.rlast <= c.max_tick and 0 <= s.failovers <= c.max_failovers
        and all(s.tasks[t] in counts and s.rtasks[t] in counts for t in c.ticks)
        and all(0 <= s.view[w] <= c.max_tick for w in c.all_workers)
        and 0 <= s.since <= c.max_tick and 0 <= s.rsince <= c.max_tick
        and 0 <= s.forgets <= c.max_forgets
    )


def one_task_per_tick(s: State) -> bool:
    return all(n <= 1 for n in s.tasks.values())


def no_lost_tick(s: State) -> bool:
    return all(n == 1 for t, n in s.tasks.items() if s.since < t <= s.last)


def invariants(c: Constants) -> dict[str, Callable[[State], bool]]:
    return {"TypeOK": lambda s: type_ok(c, s), "OneTaskPerTick": one_task_per_tick,
            "NoLostTick": no_lost_tick}


def model(cfg: cfgs.Config) -> Model[State]:
    return _model("PeriodicTick", NEXT, cfg, split=False)


def check_then_enqueue_model(cfg: cfgs.Config) -> Model[State]:
    return _model("PeriodicTickCheckThenEnqueue", SPLIT_NEXT, cfg, split=True)


def _model(name: str, actions: tuple[Action, ...], cfg: cfgs.Config, split: bool) -> Model[State]:
    c = Constants.from_cfg(cfg, split)

    def next_states(s: State) -> Iterator[Transition[State]]:
        for action in actions:
            yield from action(c, s)

    return Model(
        name=name,
        init=(initial(c, split),),
        next=next_states,
        invariants=cfgs.invariants(cfg, invariants(c)),
        check_deadlock=cfg.check_deadlock,
    )
