r"""TaskQueue.tla's invariants and properties, and the Model that tlacheck explores.

TLA+                      Python
------------------------  ---------------------------------------------------------
queueVars                 queue_vars(s)
TypeOK                    type_ok(c, s)
T1_OnePlace               one_place(c, s)
T3_StaleAtOnce            stale_at_once(c, s)
T4_EffectOnce             effect_once(c, s)
T5_IdempotentEnqueue      idempotent_enqueue(c, s)
T6_DueOnly                due_only(s)
T3_StaleChangesNothing    stale_changes_nothing(c, s, t), a StepProperty
EffectWhileHeld           effect_while_held(c, s, t), a StepProperty
R1_CurrentToken           result_current_token(c, s)
R1_OnlyCompleted          result_only_completed(c, s)
R1_AtMostOne              result_at_most_one(c, s, t), a StepProperty
CancelSticks              cancel_sticks(c, s)
CancelledIsFinal          cancelled_is_final(c, s, t), a StepProperty
CancelledNeverLeased      cancelled_never_leased(c, s, t), a StepProperty
NoEffectAfterCancelSeen   no_effect_after_cancel_seen(c, s, t), a StepProperty
NoChargeAfterCancelSeen   no_charge_after_cancel_seen(c, s, t), a StepProperty
NoEffectPastTimeLimit     no_effect_past_time_limit(c, s, t), a StepProperty
TimedOutNeverAcks         timed_out_never_acks(c, s, t), a StepProperty
ReturnedNeverTimesOut     returned_never_times_out(c, s, t), a StepProperty
Settled, T2_NothingLost   settled(c, s), an EndProperty under the name the module
                          gives T2 for its own Next (NoFenceNothingLost, ...)
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from specs.tlacheck import EndProperty, Model, StepProperty, Transition
from specs.tlacheck import cfg as cfgs
from specs.tlacheck.model import Property

from .task_queue import (
    NEXT,
    NO_RESULT,
    PLACE_OF,
    STATES,
    Action,
    Constants,
    State,
    current,
    holds,
    initial,
)


def queue_vars(s: State) -> tuple[object, ...]:
    return (
        s.ready, s.leased, s.delayed, s.dlq, s.state, s.retries, s.token, s.due, s.expired,
        s.cancelReq,
    )  # fmt: skip


def type_ok(c: Constants, s: State) -> bool:
    ids = frozenset(c.ids)
    return (
        0 <= s.sent <= c.max_sends
        and all(0 <= s.keyOf[i] <= c.n_keys and 0 <= s.answer[i] <= c.max_sends for i in ids)
        and all(0 <= s.idem[k] <= c.max_sends for k in s.idem)
        and s.ready | s.leased | s.delayed | s.dlq | s.applied <= ids
        and all(s.state[t] in STATES and 0 <= s.retries[t] <= c.max_retries for t in ids)
        and all(min(s.token[t], s.charges[t], s.fenceTok[t], s.result[t]) >= 0 for t in ids)
        and all(isinstance(s.due[t], bool) and isinstance(s.expired[t], bool) for t in ids)
        and all(isinstance(s.cancelReq[t], bool) for t in ids)
        and all(s.held[w].task in ids | {0} for w in c.worker_ids)
        and 0 <= s.restarts <= c.max_restarts
        and 0 <= s.revivals <= c.max_revivals
    )


def one_place(c: Constants, s: State) -> bool:
    places = {"ready": s.ready, "leased": s.leased, "delayed": s.delayed, "dlq": s.dlq}
    for t in c.ids:
        where = {p for p, ids in places.items() if t in ids}
        if where != ({PLACE_OF[s.state[t]]} if s.state[t] in PLACE_OF else set()):
            return False
    return True


def stale_at_once(c: Constants, s: State) -> bool:
    return all(s.held[w].task in s.leased for w in c.worker_ids if current(s, w))


def effect_once(c: Constants, s: State) -> bool:
    return all(s.charges[t] <= 1 for t in c.ids)


def idempotent_enqueue(c: Constants, s: State) -> bool:
    created = [t for t in c.ids if s.state[t] != "none"]
    keys = [s.keyOf[t] for t in created if s.keyOf[t] != 0]
    sends = range(1, s.sent + 1)
    return (
        len(keys) == len(set(keys))
        and all(s.answer[i] == s.idem[s.keyOf[i]] for i in sends if s.keyOf[i] != 0)
        and all(s.state[i] == "none" for i in sends if s.answer[i] != i)
    )


def due_only(s: State) -> bool:
    return all(s.due[t] for t in s.ready | s.leased)


def result_current_token(c: Constants, s: State) -> bool:
    return all(s.result[t] == s.token[t] for t in c.ids if s.result[t] != NO_RESULT)


def result_only_completed(c: Constants, s: State) -> bool:
    return all(s.state[t] == "completed" for t in c.ids if s.result[t] != NO_RESULT)


def cancel_sticks(c: Constants, s: State) -> bool:
    return all(
        s.state[t] in ("running", "completed", "cancelled") for t in c.ids if s.cancelReq[t]
    )


def invariants(c: Constants) -> dict[str, Callable[[State], bool]]:
    return {
        "TypeOK": lambda s: type_ok(c, s),
        "T1_OnePlace": lambda s: one_place(c, s),
        "T3_StaleAtOnce": lambda s: stale_at_once(c, s),
        "T4_EffectOnce": lambda s: effect_once(c, s),
        "T5_IdempotentEnqueue": lambda s: idempotent_enqueue(c, s),
        "T6_DueOnly": due_only,
        "R1_CurrentToken": lambda s: result_current_token(c, s),
        "R1_OnlyCompleted": lambda s: result_only_completed(c, s),
        "CancelSticks": lambda s: cancel_sticks(c, s),
    }


def stale_changes_nothing(c: Constants, s: State, t: State) -> bool:
    return all(
        queue_vars(s) == queue_vars(t)
        for w in c.worker_ids
        if s.held[w].task != 0 and not holds(s, w) and t.held[w] != s.held[w]
    )


def effect_while_held(c: Constants, s: State, t: State) -> bool:
    return all(holds(s, w) for w in c.worker_ids if t.held[w].ran and not s.held[w].ran)


def result_at_most_one(c: Constants, s: State, t: State) -> bool:
    return all(t.result[i] == s.result[i] for i in c.ids if s.result[i] != NO_RESULT)


def cancelled_is_final(c: Constants, s: State, t: State) -> bool:
    return all(t.state[i] == "cancelled" for i in c.ids if s.state[i] == "cancelled")


def cancelled_never_leased(c: Constants, s: State, t: State) -> bool:
    return all(
        i not in t.leased
        for i in c.ids
        if s.state[i] == "cancelled" or (s.cancelReq[i] and i not in s.leased)
    )


def no_effect_after_cancel_seen(c: Constants, s: State, t: State) -> bool:
    return all(
        not s.held[w].cancelSeen
        for w in c.worker_ids
        if t.held[w].confirmed and not s.held[w].confirmed
    )


def no_effect_past_time_limit(c: Constants, s: State, t: State) -> bool:
    return all(
        not s.held[w].timedOut
        for w in c.worker_ids
        if t.held[w].confirmed and not s.held[w].confirmed
    )


def timed_out_never_acks(c: Constants, s: State, t: State) -> bool:
    for w in c.worker_ids:
        h = s.held[w]
        if h.task != 0 and h.timedOut and s.state[h.task] != "completed" \
                and t.state[h.task] == "completed" and t.held[w] != h:
            return False
    return True


def returned_never_times_out(c: Constants, s: State, t: State) -> bool:
    return all(not t.held[w].timedOut for w in c.worker_ids if s.held[w].returned)


def no_charge_after_cancel_seen(c: Constants, s: State, t: State) -> bool:
    return all(
        not s.held[w].cancelSeen for w in c.worker_ids if t.held[w].ran and not s.held[w].ran
    )


def settled(c: Constants, s: State) -> bool:
    return all(s.state[t] in ("none", "completed", "dead", "cancelled") for t in c.ids)


def properties(c: Constants, nothing_lost: str) -> dict[str, Property[State]]:
    """The temporal properties; `nothing_lost` is what the module calls T2 for its Next."""
    return {
        "T3_StaleChangesNothing": StepProperty(
            "T3_StaleChangesNothing", lambda s, _, t: stale_changes_nothing(c, s, t)
        ),
        "EffectWhileHeld": StepProperty(
            "EffectWhileHeld", lambda s, _, t: effect_while_held(c, s, t)
        ),
        "R1_AtMostOne": StepProperty("R1_AtMostOne", lambda s, _, t: result_at_most_one(c, s, t)),
        "CancelledIsFinal": StepProperty(
            "CancelledIsFinal", lambda s, _, t: cancelled_is_final(c, s, t)
        ),
        "CancelledNeverLeased": StepProperty(
            "CancelledNeverLeased", lambda s, _, t: cancelled_never_leased(c, s, t)
        ),
        "NoEffectAfterCancelSeen": StepProperty(
            "NoEffectAfterCancelSeen", lambda s, _, t: no_effect_after_cancel_seen(c, s, t)
        ),
        "NoChargeAfterCancelSeen": StepProperty(
            "NoChargeAfterCancelSeen", lambda s, _, t: no_charge_after_cancel_seen(c, s, t)
        ),
        "NoEffectPastTimeLimit": StepProperty(
            "NoEffectPastTimeLimit", lambda s, _, t: no_effect_past_time_limit(c, s, t)
        ),
        "TimedOutNeverAcks": StepProperty(
            "TimedOutNeverAcks", lambda s, _, t: timed_out_never_acks(c, s, t)
        ),
        "ReturnedNeverTimesOut": StepProperty(
            "ReturnedNeverTimesOut", lambda s, _, t: returned_never_times_out(c, s, t)
        ),
        nothing_lost: EndProperty(nothing_lost, lambda s: settled(c, s)),
    }


def build(
    name: str, actions: tuple[Action, ...], cfg: cfgs.Config, nothing_lost: str = "T2_NothingLost"
) -> Model[State]:
    c = Constants.from_cfg(cfg)

    def next_states(s: State) -> Iterator[Transition[State]]:
        for action in actions:
            yield from action(c, s)

    return Model(
        name=name,
        init=(initial(c),),
        next=next_states,
        invariants=cfgs.invariants(cfg, invariants(c)),
        properties=cfgs.properties(cfg, properties(c, nothing_lost)),
        check_deadlock=cfg.check_deadlock,
    )


def model(cfg: cfgs.Config) -> Model[State]:
    """TaskQueue as built, under `cfg`."""
    return build("TaskQueue", NEXT, cfg)
