r"""Python transcription of Chord.tla and its two mutants.

TLA+                              taskq (issue 20's design)             Python
--------------------------------  ------------------------------------  ------------------
Init                              the members enqueued, none run         initial(c)
Lease(w, m)                       lease.lua                              lease(c, s)
Ack(w), Record(m, to)             ack.lua: the member completes and the  ack(c, s), record
                                  group records it, enqueueing the
                                  callback after the last one
StaleAck(w)                       ack.lua refusing a stale token         stale_ack(c, s)
Expire(m)                         reap.lua: retried, or dead (recorded)  expire(c, s)
Crash(w)                          a worker dies                          crash(c, s)
CallbackAtMostOnce, ...           the INVARIANTS table, TLA+ names
CallbackFires                     an EndProperty

ChordAnyAck.tla                   a stale ack counted too                any_ack_stale
ChordSeparateStep.tla             the callback enqueued after the ack    separate_ack, fire

Each \E is a loop in ascending order (the first bound variable outermost) and Next's
disjuncts are tried in the order written, which is TLC's order.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import NamedTuple

from specs.tlacheck import EndProperty, Fn, Model, Transition
from specs.tlacheck import cfg as cfgs
from specs.tlacheck.model import Property

IDLE = (0, 0)
ENDED = ("completed", "dead")


class State(NamedTuple):
    # Field names are the TLA+ variable names, so that traces read like TLC's.
    state: Fn[int, str]
    token: Fn[int, int]
    tries: Fn[int, int]
    held: Fn[int, tuple[int, int]]
    ended: frozenset[int]
    counted: int
    callback: int
    outcome: str
    intent: Fn[int, bool]


@dataclass(frozen=True)
class Constants:
    members: int
    workers: int
    retries: int

    @classmethod
    def from_cfg(cls, cfg: cfgs.Config) -> Constants:
        return cls(members=cfg.int_constant("MEMBERS"), workers=cfg.int_constant("WORKERS"),
                   retries=cfg.int_constant("RETRIES"))

    @property
    def all_members(self) -> range:
        return range(1, self.members + 1)

    @property
    def all_workers(self) -> range:
        return range(1, self.workers + 1)

    @property
    def max_token(self) -> int:
        return self.retries + 1


def initial(c: Constants) -> State:
    return State(Fn.const(c.all_members, "pending"), Fn.const(c.all_members, 0),
                 Fn.const(c.all_members, 0), Fn.const(c.all_workers, IDLE), frozenset(), 0,
                 0, "none", Fn.const(c.all_workers, False))


Action = Callable[[Constants, State], Iterator[Transition[State]]]


def record(c: Constants, s: State, m: int, to: str, states: Fn[int, str]) -> State:
    """Record(m, to): the group records m once, and enqueues the callback after the
    last member (ok only when every member completed)."""
    fresh = m not in s.ended
    t = s._replace(ended=s.ended | {m}, counted=s.counted + 1 if fresh else s.counted)
    if fresh and s.counted + 1 == c.members:
        ok = all(states[x] == "completed" for x in c.all_members)
        t = t._replace(callback=s.callback + 1, outcome="ok" if ok else "failed")
    return t


def lease(c: Constants, s: State) -> Iterator[Transition[State]]:
    for w in c.all_workers:
        for m in c.all_members:
            if s.state[m] == "pending" and s.held[w] == IDLE and s.token[m] < c.max_token:
                yield f"Lease(w={w},m={m})", s._replace(
                    state=s.state.except_(m, "running"), token=s.token.except_(m, s.token[m] + 1),
                    held=s.held.except_(w, (m, s.token[m] + 1)))


def current(s: State, w: int) -> bool:
    m, t = s.held[w]
    return s.held[w] != IDLE and t == s.token[m] and s.state[m] == "running"


def ack(c: Constants, s: State) -> Iterator[Transition[State]]:
    for w in c.all_workers:
        if s.held[w] != IDLE and current(s, w):
            m = s.held[w][0]
            states = s.state.except_(m, "completed")
            t = record(c, s, m, "completed", states)
            yield f"Ack(w={w})", t._replace(state=states, held=s.held.except_(w, IDLE))


def stale_ack(c: Constants, s: State) -> Iterator[Transition[State]]:
    for w in c.all_workers:
        if s.held[w] != IDLE and not current(s, w):
            yield f"StaleAck(w={w})", s._replace(held=s.held.except_(w, IDLE))


def any_ack_stale(c: Constants, s: State) -> Iterator[Transition[State]]:
    """AnyAckStale(w): the stale ack refused, but its result counted."""
    for w in c.all_workers:
        if s.held[w] != IDLE and not current(s, w):
            t = s._replace(held=s.held.except_(w, IDLE), counted=s.counted + 1)
            if s.counted + 1 == c.members:
                t = t._replace(callback=s.callback + 1, outcome="ok")
            yield f"AnyAckStale(w={w})", t


def expire(c: Constants, s: State) -> Iterator[Transition[State]]:
    for m in c.all_members:
        if s.state[m] != "running":
            continue
        if s.tries[m] < c.retries and s.token[m] < c.max_token:
            yield f"Expire(m={m})", s._replace(state=s.state.except_(m, "pending"),
                                               tries=s.tries.except_(m, s.tries[m] + 1))
        else:
            states = s.state.except_(m, "dead")
            yield f"Expire(m={m})", record(c, s, m, "dead", states)._replace(state=states)


def crash(c: Constants, s: State) -> Iterator[Transition[State]]:
    for w in c.all_workers:
        if s.held[w] != IDLE or s.intent[w]:
            yield f"Crash(w={w})", s._replace(held=s.held.except_(w, IDLE),
                                              intent=s.intent.except_(w, False))


def separate_ack(c: Constants, s: State) -> Iterator[Transition[State]]:
    """SeparateAck(w): the member recorded, the callback left to a later step."""
    for w in c.all_workers:
        if s.held[w] != IDLE and current(s, w):
            m = s.held[w][0]
            fresh = m not in s.ended
            yield f"SeparateAck(w={w})", s._replace(
                state=s.state.except_(m, "completed"), held=s.held.except_(w, IDLE),
                ended=s.ended | {m}, counted=s.counted + 1 if fresh else s.counted,
                intent=s.intent.except_(w, fresh and s.counted + 1 == c.members))


def fire(c: Constants, s: State) -> Iterator[Transition[State]]:
    for w in c.all_workers:
        if s.intent[w]:
            ok = all(s.state[x] == "completed" for x in c.all_members)
            yield f"Fire(w={w})", s._replace(intent=s.intent.except_(w, False),
                                             callback=s.callback + 1,
                                             outcome="ok" if ok else "failed")


NEXT: tuple[Action, ...] = (lease, ack, stale_ack, expire, crash)
ANY_ACK_NEXT: tuple[Action, ...] = (lease, ack, any_ack_stale, expire, crash)
SEPARATE_NEXT: tuple[Action, ...] = (lease, separate_ack, stale_ack, expire, crash, fire)


def type_ok(c: Constants, s: State) -> bool:
    return (all(v in ("pending", "running", *ENDED) for v in s.state.values())
            and all(0 <= v <= c.max_token for v in s.token.values())
            and all(0 <= v <= c.retries for v in s.tries.values())
            and s.ended <= set(c.all_members) and 0 <= s.counted <= 2 * c.members
            and 0 <= s.callback <= 2 and s.outcome in ("none", "ok", "failed"))


def invariants(c: Constants) -> dict[str, Callable[[State], bool]]:
    def after_all(s: State) -> bool:
        return s.callback == 0 or all(v in ENDED for v in s.state.values())

    def outcome_right(s: State) -> bool:
        every = all(v == "completed" for v in s.state.values())
        return s.callback == 0 or (s.outcome == "ok") == every

    def stopped(s: State) -> bool:
        return all(v in ENDED for v in s.state.values()) and all(
            s.held[w] == IDLE and not s.intent[w] for w in c.all_workers)

    return {
        "TypeOK": lambda s: type_ok(c, s),
        "CallbackNotLost": lambda s: not stopped(s) or s.callback == 1,
        "CallbackAtMostOnce": lambda s: s.callback <= 1,
        "CallbackAfterAll": after_all,
        "OutcomeRight": outcome_right,
    }


PROPERTIES: dict[str, Property[State]] = {
    name: EndProperty(name, lambda s: s.callback == 1)
    for name in ("CallbackFires", "SeparateCallbackFires")
}


def model(cfg: cfgs.Config) -> Model[State]:
    return _model("Chord", NEXT, cfg)


def any_ack_model(cfg: cfgs.Config) -> Model[State]:
    return _model("ChordAnyAck", ANY_ACK_NEXT, cfg)


def separate_step_model(cfg: cfgs.Config) -> Model[State]:
    return _model("ChordSeparateStep", SEPARATE_NEXT, cfg)


def _model(name: str, actions: tuple[Action, ...], cfg: cfgs.Config) -> Model[State]:
    c = Constants.from_cfg(cfg)
    return cfgs.action_model(name, cfg, c, initial(c), actions, invariants(c), PROPERTIES)
