r"""Python transcription of Workflow.tla and its mutants.

TLA+                              taskq (issue 20's design)             Python
--------------------------------  ------------------------------------  ------------------
Init                              stage 1 pending, later stages waiting  initial(c)
Settle(k, st, tr, cnt, fl)        the stage's end: flow ended, later     settle, with
                                  steps cancelled, or the next stage     cancel_later and
                                  triggered (and settled if it ended)    trigger
EndIf(s, to, settles), End        a script ending a step, recording it   end_if, end
                                  and settling its stage after the last
Lease(w, s)                       lease.lua                              lease(c, s)
Ack(w), AckWith(w, to, E)         ack.lua                                ack(c, s)
AckCut(w)                         ack.lua for a run cut off at shutdown  ack_cut(c, s)
                                  after its effect (no result)
AckCancelled(w)                   ack_cancelled.lua                      ack_cancelled(c, s)
StaleAck(w)                       ack.lua refusing a stale token         stale_ack(c, s)
Expire(s)                         reap.lua: cancelled, retried, or dead  expire(c, s)
Crash(w)                          a worker dies                          crash(c, s)
CancelFlow                        cancel_flow.lua                        cancel_flow(c, s)
CancelStep(s)                     cancel.lua on a step not running       cancel_step(c, s)
CancelWaitingStep(s)              cancel.lua on a waiting step (the      cancel_waiting_step
                                  mutants of other scripts)
TriggeredOnce, ...                the INVARIANTS table, TLA+ names
CancelStops                       a StepProperty
FlowEnds                          an EndProperty

WorkflowAnyAck.tla                a stale ack counted too                any_ack_stale
WorkflowSeparateStep.tla          the stage settled after the ack        separate_ack, settle_later
WorkflowIgnoresCancel.tla         ack.lua not reading the flow's state   ignoring_ack
WorkflowEarlyStage.tla            a waiting step's cancel settling its   early_cancel_step
                                  stage before it is reached
WorkflowUncheckedInput.cfg        SIZE_CHECK FALSE: a stage triggered    size_check=False
                                  whatever its input's size
WorkflowCutHandedOn.cfg           CUT_FAILS FALSE: a cut step counted    cut_fails=False
                                  completed, null handed on

A step s is the pair (k, i): stage k, member i. Each \E is a loop in ascending order
(the first bound variable outermost; CancelStep's as TLC enumerates it, the first
varying fastest, which a violation's figures show) and Next's disjuncts are tried in the order
written, which is TLC's order. The mutants' own Next leaves AckCut out, as their
modules do.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import NamedTuple

from specs.tlacheck import EndProperty, Fn, Model, StepProperty, Transition
from specs.tlacheck import cfg as cfgs
from specs.tlacheck.model import Property

Step = tuple[int, int]
IDLE: tuple[Step, int] = ((0, 0), 0)
ENDED = ("completed", "cut", "dead", "cancelled")
FLOWS = ("running", "completed", "failed", "cancelled")


class State(NamedTuple):
    # Field names are the TLA+ variable names, so that traces read like TLC's.
    state: Fn[Step, str]
    token: Fn[Step, int]
    tries: Fn[Step, int]
    held: Fn[int, tuple[Step, int]]
    ended: frozenset[Step]
    counted: Fn[int, int]
    failed: Fn[int, int]
    triggered: Fn[int, int]
    flow: str
    intent: Fn[int, int]


@dataclass(frozen=True)
class Constants:
    stages: int
    members: int
    workers: int
    retries: int
    policy: str
    cancels: bool
    oversized: int = 0
    size_check: bool = True
    cut_fails: bool = True

    @classmethod
    def from_cfg(cls, cfg: cfgs.Config) -> Constants:
        policy, cancels = cfg.constants["POLICY"], cfg.constants["CANCELS"]
        size_check, cut_fails = cfg.constants["SIZE_CHECK"], cfg.constants["CUT_FAILS"]
        if policy not in ("fail", "partial") or not isinstance(cancels, bool) \
                or not isinstance(size_check, bool) or not isinstance(cut_fails, bool):
            raise cfgs.ConfigError(f"{cfg.source}: POLICY {policy!r}, CANCELS {cancels!r}, "
                                   f"SIZE_CHECK {size_check!r}, CUT_FAILS {cut_fails!r}")
        return cls(stages=cfg.int_constant("STAGES"), members=cfg.int_constant("MEMBERS"),
                   workers=cfg.int_constant("WORKERS"), retries=cfg.int_constant("RETRIES"),
                   policy=str(policy), cancels=cancels,
                   oversized=cfg.int_constant("OVERSIZED"), size_check=size_check,
                   cut_fails=cut_fails)

    @property
    def all_stages(self) -> range:
        return range(1, self.stages + 1)

    @property
    def all_steps(self) -> list[Step]:
        return [(k, i) for k in self.all_stages for i in range(1, self.members + 1)]

    @property
    def all_workers(self) -> range:
        return range(1, self.workers + 1)

    @property
    def max_token(self) -> int:
        return self.retries + 1


def initial(c: Constants) -> State:
    return State(
        state=Fn((s, "pending" if s[0] == 1 else "waiting") for s in c.all_steps),
        token=Fn.const(c.all_steps, 0), tries=Fn.const(c.all_steps, 0),
        held=Fn.const(c.all_workers, IDLE), ended=frozenset(),
        counted=Fn.const(c.all_stages, 0), failed=Fn.const(c.all_stages, 0),
        triggered=Fn((k, 1 if k == 1 else 0) for k in c.all_stages), flow="running",
        intent=Fn.const(c.all_workers, 0))


Action = Callable[[Constants, State], Iterator[Transition[State]]]
# EndIf's shape: the state after the script ends step s as `to`.
Ending = Callable[[Constants, State, Step, str], State]


def cancel_later(k: int, st: Fn[Step, str]) -> Fn[Step, str]:
    """CancelLater(k, st): every waiting step of a stage after k, cancelled."""
    return Fn((s, "cancelled" if s[0] > k and v == "waiting" else v) for s, v in st.items())


def trigger(k: int, st: Fn[Step, str]) -> Fn[Step, str]:
    """Trigger(k, st): stage k's waiting steps made pending."""
    return Fn((s, "pending" if s[0] == k and v == "waiting" else v) for s, v in st.items())


class Settled(NamedTuple):
    state: Fn[Step, str]
    triggered: Fn[int, int]
    flow: str


def settle(c: Constants, s: State, k: int, st: Fn[Step, str], tr: Fn[int, int],
           cnt: Fn[int, int], fl: Fn[int, int]) -> Settled:
    """Settle(k, st, tr, cnt, fl) in state s: stage k has every member's end."""
    while True:
        if k == c.stages:
            return Settled(st, tr, "failed" if fl[k] > 0 and c.policy == "fail"
                           else "completed")
        if fl[k] > 0 and c.policy == "fail":
            return Settled(cancel_later(k, st), tr, "failed")
        if c.size_check and k + 1 == c.oversized and any(
                st[(k + 1, i)] == "waiting" for i in range(1, c.members + 1)):
            return Settled(cancel_later(k, st), tr, "failed")
        st, tr = trigger(k + 1, st), tr.except_(k + 1, tr[k + 1] + 1)
        if cnt[k + 1] != c.members:
            return Settled(st, tr, s.flow)
        k += 1


def handles(s: State, k: int) -> bool:
    return s.triggered[k] > 0 and s.flow == "running"


def end_if(c: Constants, s: State, step: Step, to: str, settles: bool) -> State:
    """EndIf(s, to, settles): the step recorded once, its stage settled after the last."""
    k = step[0]
    st = s.state.except_(step, to)
    fresh = step not in s.ended
    cnt = s.counted.except_(k, s.counted[k] + 1) if fresh else s.counted
    fails = to != "completed" and (c.cut_fails or to != "cut")
    fl = s.failed.except_(k, s.failed[k] + 1) if fresh and fails else s.failed
    t = s._replace(ended=s.ended | {step}, counted=cnt, failed=fl)
    if fresh and cnt[k] == c.members and settles:
        r = settle(c, s, k, st, s.triggered, cnt, fl)
        return t._replace(state=r.state, triggered=r.triggered, flow=r.flow)
    return t._replace(state=st)


def end(c: Constants, s: State, step: Step, to: str) -> State:
    return end_if(c, s, step, to, handles(s, step[0]))


def lease(c: Constants, s: State) -> Iterator[Transition[State]]:
    for w in c.all_workers:
        for step in c.all_steps:
            if s.state[step] == "pending" and s.held[w] == IDLE and s.token[step] < c.max_token:
                k, i = step
                yield f"Lease(w={w},k={k},i={i})", s._replace(
                    state=s.state.except_(step, "running"),
                    token=s.token.except_(step, s.token[step] + 1),
                    held=s.held.except_(w, (step, s.token[step] + 1)))


def current(s: State, w: int) -> bool:
    step, t = s.held[w]
    return s.held[w] != IDLE and t == s.token[step] and s.state[step] == "running"


def ack_with(name: str, to: str, ending: Ending) -> Action:
    """AckWith(w, to, E): ack.lua with the current token, ending the step through E."""

    def action(c: Constants, s: State) -> Iterator[Transition[State]]:
        for w in c.all_workers:
            if s.held[w] != IDLE and current(s, w):
                t = ending(c, s, s.held[w][0], to)
                yield f"{name}(w={w})", t._replace(held=s.held.except_(w, IDLE))

    return action


ack = ack_with("Ack", "completed", end)
ack_cut = ack_with("AckCut", "cut", end)
_ack_cancelled = ack_with("AckCancelled", "cancelled", end)


def ack_cancelled(c: Constants, s: State) -> Iterator[Transition[State]]:
    if s.flow == "cancelled":
        yield from _ack_cancelled(c, s)


def stale_ack(c: Constants, s: State) -> Iterator[Transition[State]]:
    for w in c.all_workers:
        if s.held[w] != IDLE and not current(s, w):
            yield f"StaleAck(w={w})", s._replace(held=s.held.except_(w, IDLE))


def expire(c: Constants, s: State) -> Iterator[Transition[State]]:
    for step in c.all_steps:
        if s.state[step] != "running":
            continue
        k, i = step
        label = f"Expire(k={k},i={i})"
        if s.flow == "cancelled":
            yield label, end(c, s, step, "cancelled")
        elif s.tries[step] < c.retries and s.token[step] < c.max_token:
            yield label, s._replace(state=s.state.except_(step, "pending"),
                                    tries=s.tries.except_(step, s.tries[step] + 1))
        else:
            yield label, end(c, s, step, "dead")


def crash(c: Constants, s: State) -> Iterator[Transition[State]]:
    for w in c.all_workers:
        if s.held[w] != IDLE or s.intent[w] != 0:
            yield f"Crash(w={w})", s._replace(held=s.held.except_(w, IDLE),
                                              intent=s.intent.except_(w, 0))


def cancel_flow(c: Constants, s: State) -> Iterator[Transition[State]]:
    if c.cancels and s.flow == "running":
        yield "CancelFlow", s._replace(flow="cancelled", state=Fn(
            (step, "cancelled" if v in ("waiting", "pending", "dead") else v)
            for step, v in s.state.items()))


def cancel_step_with(name: str, settles: Callable[[State, int], bool],
                     states: tuple[str, ...]) -> Action:
    """CancelStep(s) with the script's test for settling the stage it ends, on a step
    in one of `states`."""

    def action(c: Constants, s: State) -> Iterator[Transition[State]]:
        # TLC enumerates `\E k \in Stages, i \in Members` with k varying fastest.
        for step in sorted(c.all_steps, key=lambda step: (step[1], step[0])):
            if c.cancels and s.state[step] in states:
                k, i = step
                yield f"{name}(k={k},i={i})", end_if(c, s, step, "cancelled",
                                                      settles(s, k))

    return action


cancel_step = cancel_step_with("CancelStep", handles, ("waiting", "pending", "dead"))
cancel_waiting_step = cancel_step_with("CancelWaitingStep", handles, ("waiting",))


def any_ack_stale(c: Constants, s: State) -> Iterator[Transition[State]]:
    """AnyAckStale(w): the stale ack refused, but counted as its step's end."""
    for w in c.all_workers:
        if s.held[w] != IDLE and not current(s, w):
            k = s.held[w][0][0]
            cnt = s.counted.except_(k, s.counted[k] + 1)
            t = s._replace(held=s.held.except_(w, IDLE), counted=cnt)
            if cnt[k] == c.members and handles(s, k):
                r = settle(c, s, k, s.state, s.triggered, cnt, s.failed)
                t = t._replace(state=r.state, triggered=r.triggered, flow=r.flow)
            yield f"AnyAckStale(w={w})", t


def separate_ack(c: Constants, s: State) -> Iterator[Transition[State]]:
    """SeparateAck(w): the step recorded, its stage left to a later step."""
    for w in c.all_workers:
        if s.held[w] != IDLE and current(s, w):
            step = s.held[w][0]
            k = step[0]
            t = end_if(c, s, step, "completed", False)
            last = step not in s.ended and t.counted[k] == c.members and handles(s, k)
            yield f"SeparateAck(w={w})", t._replace(
                held=s.held.except_(w, IDLE), intent=s.intent.except_(w, k if last else 0))


def settle_later(c: Constants, s: State) -> Iterator[Transition[State]]:
    """SettleLater(w): the separate step, settling the stage the worker noted."""
    for w in c.all_workers:
        k = s.intent[w]
        if k != 0:
            t = s._replace(intent=s.intent.except_(w, 0))
            if s.flow == "running":
                r = settle(c, s, k, s.state, s.triggered, s.counted, s.failed)
                t = t._replace(state=r.state, triggered=r.triggered, flow=r.flow)
            yield f"SettleLater(w={w})", t


def end_ignoring_cancel(c: Constants, s: State, step: Step, to: str) -> State:
    return end_if(c, s, step, to, s.triggered[step[0]] > 0)


ignoring_ack = ack_with("IgnoringAck", "completed", end_ignoring_cancel)
early_cancel_step = cancel_step_with("EarlyCancelStep", lambda s, k: s.flow == "running",
                                     ("waiting",))

NEXT: tuple[Action, ...] = (lease, ack, ack_cut, ack_cancelled, stale_ack, expire, crash,
                            cancel_flow, cancel_step)


def swap(*pairs: Action) -> tuple[Action, ...]:
    """NEXT without AckCut, each old action of `pairs` (old, new, old, new...) replaced
    by its new one."""
    swaps = dict(zip(pairs[::2], pairs[1::2], strict=True))
    return tuple(swaps.get(a, a) for a in NEXT if a is not ack_cut)


ANY_ACK_NEXT = swap(cancel_step, cancel_waiting_step, stale_ack, any_ack_stale)
SEPARATE_NEXT = (*swap(cancel_step, cancel_waiting_step, ack, separate_ack), settle_later)
IGNORES_CANCEL_NEXT = swap(cancel_step, cancel_waiting_step, ack, ignoring_ack)
EARLY_STAGE_NEXT = swap(cancel_step, early_cancel_step)


def type_ok(c: Constants, s: State) -> bool:
    held_ok = all(h == IDLE or (h[0] in c.all_steps and 1 <= h[1] <= c.max_token)
                  for h in s.held.values())
    return (all(v in ("waiting", "pending", "running", *ENDED) for v in s.state.values())
            and all(0 <= v <= c.max_token for v in s.token.values())
            and all(0 <= v <= c.retries for v in s.tries.values()) and held_ok
            and s.ended <= set(c.all_steps)
            and all(0 <= v <= 2 * c.members for v in s.counted.values())
            and all(0 <= v <= c.members for v in s.failed.values())
            and all(0 <= v <= 2 for v in s.triggered.values()) and s.flow in FLOWS
            and all(0 <= v <= c.stages for v in s.intent.values()))


def flow_done(s: State) -> bool:
    return s.flow != "running" and all(v != "waiting" for v in s.state.values())


def invariants(c: Constants) -> dict[str, Callable[[State], bool]]:
    def after_all(s: State) -> bool:
        return all(s.triggered[k] == 0 or all(
            s.state[x] in ENDED for x in c.all_steps if x[0] < k) for k in c.all_stages)

    def no_early_run(s: State) -> bool:
        return all(s.triggered[x[0]] > 0 for x in c.all_steps
                   if s.state[x] in ("pending", "running") or s.token[x] > 0)

    def outcome_right(s: State) -> bool:
        judged = c.all_steps if c.policy == "fail" else []
        return ((s.flow != "completed" or all(s.state[x] == "completed" for x in judged))
                and (s.flow != "failed"
                     or any(v in ("cut", "dead", "cancelled") for v in s.state.values())))

    def ends_last(s: State) -> bool:
        return s.flow not in ("completed", "failed") or all(
            v in ENDED for v in s.state.values())

    def stopped(s: State) -> bool:
        return all(v not in ("pending", "running") for v in s.state.values()) and all(
            s.held[w] == IDLE and s.intent[w] == 0 for w in c.all_workers)

    def oversized_never_runs(s: State) -> bool:
        return c.oversized not in c.all_stages or all(
            s.state[(c.oversized, i)] not in ("pending", "running")
            and s.token[(c.oversized, i)] == 0 for i in range(1, c.members + 1))

    return {
        "TypeOK": lambda s: type_ok(c, s),
        "TriggeredOnce": lambda s: all(v <= 1 for v in s.triggered.values()),
        "TriggerAfterAll": after_all,
        "NoEarlyRun": no_early_run,
        "OutcomeRight": outcome_right,
        "FlowEndsLast": ends_last,
        "FlowNotLost": lambda s: not stopped(s) or flow_done(s),
        "OversizedNeverRuns": oversized_never_runs,
    }


def cancel_stops(s: State, _action: str, t: State) -> bool:
    return s.flow != "cancelled" or (t.flow == "cancelled" and t.triggered == s.triggered)


PROPERTIES: dict[str, Property[State]] = {
    "CancelStops": StepProperty("CancelStops", cancel_stops),
    "FlowEnds": EndProperty("FlowEnds", flow_done),
}


def model(cfg: cfgs.Config) -> Model[State]:
    return _model("Workflow", NEXT, cfg)


def any_ack_model(cfg: cfgs.Config) -> Model[State]:
    return _model("WorkflowAnyAck", ANY_ACK_NEXT, cfg)


def separate_step_model(cfg: cfgs.Config) -> Model[State]:
    return _model("WorkflowSeparateStep", SEPARATE_NEXT, cfg)


def ignores_cancel_model(cfg: cfgs.Config) -> Model[State]:
    return _model("WorkflowIgnoresCancel", IGNORES_CANCEL_NEXT, cfg)


def early_stage_model(cfg: cfgs.Config) -> Model[State]:
    return _model("WorkflowEarlyStage", EARLY_STAGE_NEXT, cfg)


def _model(name: str, actions: tuple[Action, ...], cfg: cfgs.Config) -> Model[State]:
    c = Constants.from_cfg(cfg)
    return cfgs.action_model(name, cfg, c, initial(c), actions, invariants(c), PROPERTIES)
