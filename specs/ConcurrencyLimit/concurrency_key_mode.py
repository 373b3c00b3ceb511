r"""Python transcription of ConcurrencyKeyMode.tla and its mutant.

TLA+                              taskq                                 Python
--------------------------------  ------------------------------------  ---------------------
Init                              tasks sent with their keys, the       initial(c)
                                  limit kept per key
Runs(g), KeyedRuns                holding:<group>, keyed:<name>         runs_in, keyed_runs
Counted(g), Declared(t)           _slots.lua's runs_counted and         counted, declared
                                  declared_group
FreeBy, SentBy, Sent(g)           lease.lua's unpark: free slots, a     free_by, sent_by, sent
                                  keyed list sent back whole while the
                                  limit is not kept per key
LeaseWith(w, Home, Count, Send),  lease.lua: unpark, then pop, drop     lease_with, pop
Pop                               the promise, start (hold_slot) or
                                  park (parked) in the declared group
Lease(w)                          the lease as fixed                    lease
Ack(w)                            _slots.lua's free_slot: holding by    ack
                                  the record's key, keyed:<name> too
Redeploy                          a deploy flipping concurrency_key=    redeploy
Looked(t), Cancel(t)              _cancel.lua: the record's group's     looked, cancel
                                  list, then the name's; the promise
                                  dropped from both
Next                              NEXT, tried in that order
TypeOK, PerKeyNeverOverLimit,     the INVARIANTS table, under the TLA+ names
UnkeyedNeverOverLimit,
WaitsWhereCancelLooks,
NoneStranded (Work)
EveryTaskEnds                     an EndProperty

ConcurrencyKeyModeByRecord.tla    counted and parked by the record's    by_record_lease,
                                  key whatever the declaration          BY_RECORD_NEXT

Each \E w, \E t is a loop in ascending order and Next's disjuncts are tried in the
order written, which is TLC's order; a lease's unpark has no choice in it (each group
sends back its oldest parked tasks), so its successors are TLC's, one per pop.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import NamedTuple

from specs.tlacheck import EndProperty, Fn, Model, Transition
from specs.tlacheck import cfg as cfgs
from specs.tlacheck.model import Property

PLACES = ("ready", "back", "parked", "leased", "done", "cancelled")
READY = ("ready", "back")
WAITING = ("parked", "back")
ENDED = ("done", "cancelled")
# The name's own group: its tasks sent with no key, or all of them while the limit is
# not kept per key.
NAME = 0


class State(NamedTuple):
    # Field names are the TLA+ variable names, so that traces read like TLC's.
    place: Fn[int, str]
    line: Fn[int, tuple[int, ...]]
    promised: Fn[int, frozenset[int]]
    keyed: bool
    flips: int
    held: Fn[int, int]
    fresh: frozenset[int]


@dataclass(frozen=True)
class Constants:
    tasks: int
    keys: int
    workers: int
    most: int
    flips: int
    max_cancels: int

    @classmethod
    def from_cfg(cls, cfg: cfgs.Config) -> Constants:
        return cls(tasks=cfg.int_constant("TASKS"), keys=cfg.int_constant("KEYS"),
                   workers=cfg.int_constant("WORKERS"), most=cfg.int_constant("MOST"),
                   flips=cfg.int_constant("FLIPS"),
                   max_cancels=cfg.int_constant("MAX_CANCELS"))

    @property
    def all_tasks(self) -> range:
        return range(1, self.tasks + 1)

    @property
    def all_groups(self) -> range:
        return range(NAME, self.keys + 1)

    @property
    def all_workers(self) -> range:
        return range(1, self.workers + 1)

    def key(self, t: int) -> int:
        """Key(t): the key task t was sent with, 0 for none."""
        return t % (self.keys + 1)


# Home(t), Count(g) and Send(g), the operators LeaseWith takes.
Grouping = Callable[[Constants, State, int], int]


def initial(c: Constants) -> State:
    return State(
        place=Fn.const(c.all_tasks, "ready"),
        line=Fn.const(c.all_groups, ()),
        promised=Fn.const(c.all_groups, frozenset()),
        keyed=True,
        flips=0,
        held=Fn.const(c.all_workers, 0),
        fresh=frozenset(),
    )


def runs_in(c: Constants, s: State, g: int) -> int:
    """RunsIn(g): the runs holding a slot of group g."""
    return sum(1 for t in c.all_tasks if s.place[t] == "leased" and c.key(t) == g)


def keyed_runs(c: Constants, s: State) -> int:
    """Cardinality(KeyedRuns): `keyed:<name>`."""
    return sum(1 for t in c.all_tasks if s.place[t] == "leased" and c.key(t) != NAME)


def counted(c: Constants, s: State, g: int) -> int:
    """Counted(g): the runs a task waiting in group g is judged against."""
    return runs_in(c, s, g) if s.keyed else runs_in(c, s, NAME) + keyed_runs(c, s)


def declared(c: Constants, s: State, t: int) -> int:
    """Declared(t): the group t is judged and waits in."""
    return c.key(t) if s.keyed else NAME


def free_by(c: Constants, s: State, g: int, count: Grouping) -> int:
    """FreeBy(g, Count): g's slots neither counted nor promised."""
    return c.most - count(c, s, g) - len(s.promised[g])


def sent_by(c: Constants, s: State, g: int, count: Grouping) -> int:
    free = free_by(c, s, g, count)
    return min(free, len(s.line[g])) if free > 0 else 0


def sent(c: Constants, s: State, g: int) -> int:
    """Sent(g): how many of g's parked tasks a lease sends back."""
    if not s.keyed and g != NAME:
        return len(s.line[g])
    return sent_by(c, s, g, counted)


def by_record_sent(c: Constants, s: State, g: int) -> int:
    """ByRecordSent(g): the mutant's unpark, by each group's own runs."""
    return sent_by(c, s, g, runs_in)


def pop(
    c: Constants, s: State, w: int, t: int, p: Fn[int, str],
    lines: Fn[int, tuple[int, ...]], promised: Fn[int, frozenset[int]],
    home: Grouping, count: Grouping,
) -> State:
    """Pop(w, t, p, l, pr, Home, Count): t's promise dropped, then it starts or parks."""
    g = home(c, s, t)
    kept = Fn((h, promised[h] - {t} if h in (c.key(t), NAME) else promised[h])
              for h in c.all_groups)
    if count(c, s, g) >= c.most:
        line = (t, *lines[g]) if p[t] == "back" else (*lines[g], t)
        return s._replace(place=p.except_(t, "parked"), line=lines.except_(g, line),
                          promised=kept)
    return s._replace(place=p.except_(t, "leased"), line=lines, promised=kept,
                      held=s.held.except_(w, t), fresh=s.fresh | {t})


Action = Callable[[Constants, State], Iterator[Transition[State]]]


def lease_with(name: str, home: Grouping, count: Grouping, send: Grouping) -> Action:
    """LeaseWith(w, Home, Count, Send), for every idle worker w."""

    def lease(c: Constants, s: State) -> Iterator[Transition[State]]:
        n = {g: send(c, s, g) for g in c.all_groups}
        sent_back = {g: frozenset(s.line[g][: n[g]]) for g in c.all_groups}
        back = frozenset().union(*sent_back.values())
        p = Fn((t, "back" if t in back else s.place[t]) for t in c.all_tasks)
        lines = Fn((g, s.line[g][n[g]:]) for g in c.all_groups)
        promised = Fn((g, s.promised[g] | sent_back[g]) for g in c.all_groups)
        ready = [t for t in c.all_tasks if p[t] in READY]
        for w in c.all_workers:
            if s.held[w] == 0:
                for t in ready:
                    yield f"{name}(w={w})", pop(c, s, w, t, p, lines, promised, home, count)

    return lease


lease = lease_with("Lease", declared, counted, sent)


def by_record(c: Constants, s: State, t: int) -> int:
    """Key, as the mutant's Home: the record's key whatever the declaration."""
    return c.key(t)


by_record_lease = lease_with("ByRecordLease", by_record, runs_in, by_record_sent)


def ack(c: Constants, s: State) -> Iterator[Transition[State]]:
    for w in c.all_workers:
        t = s.held[w]
        if t != 0:
            yield f"Ack(w={w})", s._replace(
                place=s.place.except_(t, "done"), held=s.held.except_(w, 0),
                fresh=s.fresh - {t})


def redeploy(c: Constants, s: State) -> Iterator[Transition[State]]:
    if s.flips < c.flips:
        yield "Redeploy", s._replace(keyed=not s.keyed, flips=s.flips + 1,
                                     fresh=frozenset())


def looked(c: Constants, s: State, t: int) -> int:
    """Looked(t): the list of t's record's group if it holds t, else the name's."""
    return c.key(t) if t in s.line[c.key(t)] else NAME


def cancel(c: Constants, s: State) -> Iterator[Transition[State]]:
    cancelled = sum(1 for u in c.all_tasks if s.place[u] == "cancelled")
    for t in c.all_tasks:
        if s.place[t] in WAITING and cancelled < c.max_cancels:
            g = looked(c, s, t)
            yield f"Cancel(t={t})", s._replace(
                place=s.place.except_(t, "cancelled"),
                line=s.line.except_(g, tuple(u for u in s.line[g] if u != t)),
                promised=Fn((h, s.promised[h] - {t} if h in (c.key(t), NAME)
                             else s.promised[h]) for h in c.all_groups))


NEXT: tuple[Action, ...] = (lease, ack, redeploy, cancel)
BY_RECORD_NEXT: tuple[Action, ...] = (by_record_lease, ack, redeploy, cancel)


def type_ok(c: Constants, s: State) -> bool:
    groups, tasks = set(c.all_groups), set(c.all_tasks)
    return (
        set(s.place) == tasks and all(p in PLACES for p in s.place.values())
        and set(s.line) == groups and all(set(q) <= tasks for q in s.line.values())
        and set(s.promised) == groups and all(q <= tasks for q in s.promised.values())
        and 0 <= s.flips <= c.flips
        and all(0 <= h <= c.tasks for h in s.held.values())
        and s.fresh <= tasks
    )  # fmt: skip


def copies(c: Constants, s: State, t: int) -> int:
    """Copies(t): how many times t is in the parked lists."""
    return sum(q.count(t) for q in s.line.values())


def waits_where_cancel_looks(c: Constants, s: State, t: int) -> bool:
    place, home = s.place[t], c.key(t)
    return (
        copies(c, s, t) == (1 if place == "parked" else 0)
        and (place != "parked" or t in s.line[home] or t in s.line[NAME])
        and all(place == "back" for g in c.all_groups if t in s.promised[g])
        and (place != "back" or t in s.promised[home] | s.promised[NAME])
    )  # fmt: skip


def all_ended(s: State) -> bool:
    return all(p in ENDED for p in s.place.values())


def work(c: Constants, s: State) -> bool:
    """ENABLED Work: a lease or a run's end can happen."""
    return any(True for _ in lease(c, s)) or any(True for _ in ack(c, s))


def invariants(c: Constants) -> dict[str, Callable[[State], bool]]:
    return {
        "TypeOK": lambda s: type_ok(c, s),
        "PerKeyNeverOverLimit": lambda s: all(runs_in(c, s, g) <= c.most
                                              for g in c.all_groups),
        "UnkeyedNeverOverLimit": lambda s: s.keyed or len(s.fresh) <= c.most,
        "WaitsWhereCancelLooks": lambda s: all(waits_where_cancel_looks(c, s, t)
                                               for t in c.all_tasks),
        "NoneStranded": lambda s: work(c, s) or all_ended(s),
    }


PROPERTIES: dict[str, Property[State]] = {
    "EveryTaskEnds": EndProperty("EveryTaskEnds", all_ended),
}


def model(cfg: cfgs.Config) -> Model[State]:
    return _model("ConcurrencyKeyMode", NEXT, cfg)


def by_record_model(cfg: cfgs.Config) -> Model[State]:
    return _model("ConcurrencyKeyModeByRecord", BY_RECORD_NEXT, cfg)


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
