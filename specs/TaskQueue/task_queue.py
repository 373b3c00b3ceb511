r"""Python transcription of TaskQueue.tla: taskq's lease protocol as the Lua scripts build it.

TLA+                       taskq                               Python
-------------------------  ----------------------------------  ------------------------
Init                       an empty queue, idle workers        initial(c)
Current, Holds, InLease    the holder scripts' two checks      current, holds, in_lease
InEffect(w)                an effect() block under way         in_effect
EndLease, ToDLQ,           shared by ack/fail/release/reap     end_lease, to_dlq,
ToCancelled, RetryOrDie                                        to_cancelled, retry_or_die
Enqueue(k, d)              lua/enqueue.lua                     enqueue
Lease(w)                   lua/lease.lua (count 1)             lease
Cancel(t)                  lua/cancel.lua                      cancel
HeartbeatWhile(w, Check,   lua/heartbeat.lua, worker/heartbeat heartbeat_while(name,
  inEffect)                                                      check, in_effect)
HeartbeatIf(w, Check)      HeartbeatWhile(w, Check, TRUE)      heartbeat_if(name, check)
ConfirmFencing(w, Check,   context.py effect(): heartbeat.lua  confirm_fencing(name,
  fenced)                                                        check, fenced)
ConfirmIf(w, Check)        ConfirmFencing(w, Check, TRUE)      confirm_if(name, check)
Charge(w)                  builtin.py's charge via ledger.py   charge
Effect(w)                  the effect() block, once confirmed  effect
ConfirmAndApply(w)         (the two as one step: a variant)    confirm_and_apply
AckStoring(w, Check, f)    lua/ack.lua, storing the result     ack_storing(name, check, f)
AckIf(w, Check)            AckStoring(w, Check, TRUE)          ack_if(name, check)
AckCancelledIf(w, Check)   lua/ack_cancelled.lua               ack_cancelled_if(name, check)
FailIf(w, Check)           lua/fail.lua                        fail_if(name, check)
ShutdownIf(w, Check, ack)  worker/settle.py abandon: ack.lua   shutdown_if(name, check,
                           if the effect ran, else release.lua             ack_ran)
Heartbeat .. Shutdown      the six above with Holds            heartbeat, confirm, ack,
                                                               ack_cancelled, fail, shutdown
Die(w)                     SIGKILL of a worker                 die
ExpireWhile(t, inEffect)   time passes a lease's expiry        expire_while(name, in_effect)
Expire(t)                  ExpireWhile(t, TRUE)                expire
ReapWith(t, bump, honoured) lua/reap.lua                       reap_with(name, bump,
                                                                         honoured)
ReapBy(t, bump)            ReapWith(t, bump, TRUE)             reap_by(name, bump)
Reap(t) == ReapBy(t, 1)                                        reap
TimeOutIf(w, claimed)      worker/time_limits.py, runner.py    time_out_if(name, claimed)
TimeOut(w)                 TimeOutIf(w, TRUE)                  time_out
Return(w)                  runner.py _ended: the report claimed handler_return
Throttle(t)                lua/lease.lua under a rate limit    throttle
Tick(t)                    time passes a run_at                tick
Promote(t)                 lua/promote.lua                     promote
RetryDead(t)               lua/retry_dead.lua                  retry_dead
Next                       NEXT, tried in that order
TypeOK, T1 .. T6, EffectWhileHeld, R1_*, Cancel*, No*AfterCancelSeen,
NoEffectPastTimeLimit, TimedOutNeverAcks, ReturnedNeverTimesOut
                           task_queue_checks.py, under the TLA+ names

Each \E is a loop in ascending order, Next's disjuncts are tried in the order written,
and the branches of an IF are labelled Action(args)/branch. The mutants
(task_queue_mutants.py) swap actions for other instances of the same templates.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import NamedTuple

from specs.tlacheck import Fn, Transition
from specs.tlacheck import cfg as cfgs

GUARDS = ("none", "dedupe", "fence")
STATES = ("none", "pending", "running", "delayed", "completed", "dead", "cancelled")
PLACE_OF = {"pending": "ready", "running": "leased", "delayed": "delayed", "dead": "dlq"}


class Holding(NamedTuple):
    """A TLA+ record: what a worker holds; task 0 means nothing."""

    task: int
    token: int
    ran: bool  # its handler's effect has run
    lost: bool  # a renewal was refused: effect() refuses from now on
    confirmed: bool  # effect() renewed the lease for the effect
    cancelSeen: bool  # a renewal said the task's cancel was requested
    timedOut: bool  # the run passed its time limit
    returned: bool  # its handler returned and claimed the run's report (time limits only)


NO_TASK = Holding(0, 0, False, False, False, False, False, False)
# A run's return value is its token (tokens start at 1), so 0 means "no result".
NO_RESULT = 0


class State(NamedTuple):
    # Field names are the TLA+ variable names, so that traces read like TLC's.
    sent: int
    keyOf: Fn[int, int]
    answer: Fn[int, int]
    idem: Fn[int, int]
    ready: frozenset[int]
    leased: frozenset[int]
    delayed: frozenset[int]
    dlq: frozenset[int]
    state: Fn[int, str]
    retries: Fn[int, int]
    token: Fn[int, int]
    due: Fn[int, bool]
    expired: Fn[int, bool]
    held: Fn[int, Holding]
    restarts: int
    revivals: int
    charges: Fn[int, int]
    applied: frozenset[int]
    fenceTok: Fn[int, int]
    result: Fn[int, int]  # the stored return value per task, NO_RESULT = none
    cancelReq: Fn[int, bool]  # the record's cancel_requested, set while leased


@dataclass(frozen=True)
class Constants:
    workers: int
    max_sends: int
    n_keys: int
    max_retries: int
    max_restarts: int
    max_revivals: int
    guard: str
    pauses: bool
    kills: bool
    late_fails: bool
    final_fails: bool
    cancels: bool
    time_limits: bool
    rate_limits: bool

    # Cached: the checks ask for them on every step of the search.
    @functools.cached_property
    def ids(self) -> range:
        return range(1, self.max_sends + 1)

    @functools.cached_property
    def worker_ids(self) -> range:
        return range(1, self.workers + 1)

    @classmethod
    def from_cfg(cls, cfg: cfgs.Config) -> Constants:
        guard = cfg.constants.get("GUARD")
        if guard not in GUARDS:
            raise cfgs.ConfigError(f"{cfg.source}: GUARD must be one of {GUARDS}, not {guard!r}")
        return cls(
            workers=cfg.int_constant("WORKERS"),
            max_sends=cfg.int_constant("MAX_SENDS"),
            n_keys=cfg.int_constant("N_KEYS"),
            max_retries=cfg.int_constant("MAX_RETRIES"),
            max_restarts=cfg.int_constant("MAX_RESTARTS"),
            max_revivals=cfg.int_constant("MAX_REVIVALS"),
            guard=str(guard),
            pauses=_bool_constant(cfg, "PAUSES"),
            kills=_bool_constant(cfg, "KILLS"),
            late_fails=_bool_constant(cfg, "LATE_FAILS"),
            final_fails=_bool_constant(cfg, "FINAL_FAILS"),
            cancels=_bool_constant(cfg, "CANCELS"),
            time_limits=_bool_constant(cfg, "TIME_LIMITS"),
            rate_limits=_bool_constant(cfg, "RATE_LIMITS"),
        )


def _bool_constant(cfg: cfgs.Config, name: str) -> bool:
    value = cfg.constants.get(name)
    if not isinstance(value, bool):
        raise cfgs.ConfigError(f"{cfg.source}: {name} must be TRUE or FALSE, not {value!r}")
    return value


Action = Callable[[Constants, State], Iterator[Transition[State]]]
Check = Callable[[State, int], bool]


def initial(c: Constants) -> State:
    zero = Fn.const(c.ids, 0)
    no = Fn.const(c.ids, False)
    return State(
        sent=0, keyOf=zero, answer=zero, idem=Fn.const(range(1, c.n_keys + 1), 0),
        ready=frozenset(), leased=frozenset(), delayed=frozenset(), dlq=frozenset(),
        state=Fn.const(c.ids, "none"), retries=zero, token=zero, due=no, expired=no,
        held=Fn.const(c.worker_ids, NO_TASK), restarts=0, revivals=0,
        charges=zero, applied=frozenset(), fenceTok=zero, result=Fn.const(c.ids, NO_RESULT),
        cancelReq=no,
    )  # fmt: skip


# ---------------------------------------------------------------- helpers


def current(s: State, w: int) -> bool:
    h = s.held[w]
    return h.task != 0 and s.token[h.task] == h.token


def holds(s: State, w: int) -> bool:
    h = s.held[w]
    return h.task in s.leased and s.token[h.task] == h.token


def in_lease(s: State, w: int) -> bool:
    return s.held[w].task in s.leased


def in_effect(s: State, w: int) -> bool:
    h = s.held[w]
    return h.confirmed and not h.ran


def drop(s: State, w: int) -> Fn[int, Holding]:
    return s.held.except_(w, NO_TASK)


def end_lease(s: State, t: int) -> State:
    return s._replace(leased=s.leased - {t}, expired=s.expired.except_(t, False))


def to_dlq(s: State, t: int) -> State:
    return s._replace(state=s.state.except_(t, "dead"), dlq=s.dlq | {t})


def to_cancelled(s: State, t: int) -> State:
    return s._replace(state=s.state.except_(t, "cancelled"))


def retry_or_die(c: Constants, s: State, t: int) -> tuple[str, State]:
    if s.retries[t] >= c.max_retries:
        return "dead", to_dlq(s, t)
    return "delayed", s._replace(
        state=s.state.except_(t, "delayed"),
        retries=s.retries.except_(t, s.retries[t] + 1),
        delayed=s.delayed | {t},
        due=s.due.except_(t, False),
    )


# ------------------------------------------------------------------ steps


def enqueue(c: Constants, s: State) -> Iterator[Transition[State]]:
    if s.sent >= c.max_sends:
        return
    i = s.sent + 1
    for k in range(c.n_keys + 1):
        if s.sent != 0 and not (k != 0 and k == s.keyOf[1]):
            continue
        for d in (False, True):
            label = f"Enqueue(k={k},d={'TRUE' if d else 'FALSE'})"
            sent = s._replace(sent=i, keyOf=s.keyOf.except_(i, k))
            if k != 0 and s.idem[k] != 0:
                yield f"{label}/duplicate", sent._replace(answer=s.answer.except_(i, s.idem[k]))
                continue
            created = sent._replace(
                answer=s.answer.except_(i, i),
                idem=s.idem.except_(k, i) if k != 0 else s.idem,
                state=s.state.except_(i, "delayed" if d else "pending"),
                due=s.due.except_(i, not d),
            )
            if d:
                yield f"{label}/created", created._replace(delayed=s.delayed | {i})
            else:
                yield f"{label}/created", created._replace(ready=s.ready | {i})


def lease(c: Constants, s: State) -> Iterator[Transition[State]]:
    for w in c.worker_ids:
        if s.held[w].task != 0:
            continue
        for t in sorted(s.ready):
            token = s.token[t] + 1
            yield (
                f"Lease(w={w},t={t})",
                s._replace(
                    ready=s.ready - {t},
                    leased=s.leased | {t},
                    token=s.token.except_(t, token),
                    state=s.state.except_(t, "running"),
                    expired=s.expired.except_(t, False),
                    held=s.held.except_(w, Holding(t, token, False, False, False, False,
                                                   False, False)),
                ),
            )


def cancel(c: Constants, s: State) -> Iterator[Transition[State]]:
    if not c.cancels:
        return
    for t in c.ids:
        if s.state[t] == "running" and not s.cancelReq[t]:
            yield f"Cancel(t={t})/requested", s._replace(cancelReq=s.cancelReq.except_(t, True))
        elif s.state[t] in ("pending", "delayed", "dead"):
            yield (
                f"Cancel(t={t})/cancelled",
                to_cancelled(s, t)._replace(
                    ready=s.ready - {t}, delayed=s.delayed - {t}, dlq=s.dlq - {t}
                ),
            )


def heartbeat_while(name: str, check: Check, renews_in_effect: bool) -> Action:
    """`renews_in_effect`: a run past its time limit may be renewed, in its effect()
    block or (a limited task's sync run, kept to its end) out of it, as built; otherwise
    never."""

    def heartbeat(c: Constants, s: State) -> Iterator[Transition[State]]:
        for w in c.worker_ids:
            h = s.held[w]
            if h.task == 0 or h.lost or (h.timedOut and not renews_in_effect):
                continue
            if check(s, w):
                extended = s._replace(expired=s.expired.except_(h.task, False))
                if s.cancelReq[h.task]:
                    seen = s.held.except_(w, h._replace(cancelSeen=True))
                    yield f"{name}(w={w})/cancel", extended._replace(held=seen)
                else:
                    yield f"{name}(w={w})/extended", extended
            else:
                lost = s.held.except_(w, h._replace(lost=True))
                yield f"{name}(w={w})/stale", s._replace(held=lost)

    return heartbeat


def heartbeat_if(name: str, check: Check) -> Action:
    return heartbeat_while(name, check, True)


def confirm_fencing(name: str, check: Check, fenced: bool) -> Action:
    def confirm(c: Constants, s: State) -> Iterator[Transition[State]]:
        for w in c.worker_ids:
            h = s.held[w]
            if h.task == 0 or h.ran or h.lost or h.confirmed or (
                fenced and (h.cancelSeen or h.timedOut)
            ):
                continue
            if check(s, w):
                extended = s._replace(expired=s.expired.except_(h.task, False))
                if fenced and s.cancelReq[h.task]:
                    seen = s.held.except_(w, h._replace(cancelSeen=True))
                    yield f"{name}(w={w})/cancel", extended._replace(held=seen)
                else:
                    renewed = s.held.except_(w, h._replace(confirmed=True))
                    yield f"{name}(w={w})/renewed", extended._replace(held=renewed)
            else:
                lost = s.held.except_(w, h._replace(lost=True))
                yield f"{name}(w={w})/stale", s._replace(held=lost)

    return confirm


def confirm_if(name: str, check: Check) -> Action:
    return confirm_fencing(name, check, True)


def charge(c: Constants, s: State, w: int, ran: State) -> tuple[str, State]:
    """Charge(w): the ledger's branch and `ran` (the step's other changes) with its own."""
    h = s.held[w]
    t = h.task
    applied = ran._replace(charges=s.charges.except_(t, s.charges[t] + 1))
    if c.guard == "none":
        return "applied", applied
    if c.guard == "dedupe":
        if t in s.applied:
            return "duplicate", ran
        return "applied", applied._replace(applied=s.applied | {t})
    if h.token < s.fenceTok[t]:
        return "fenced", ran
    return "applied", applied._replace(fenceTok=s.fenceTok.except_(t, h.token))


def effect(c: Constants, s: State) -> Iterator[Transition[State]]:
    for w in c.worker_ids:
        h = s.held[w]
        if h.task == 0 or h.ran or h.lost or not h.confirmed:
            continue
        branch, after = charge(c, s, w, s._replace(held=s.held.except_(w, h._replace(ran=True))))
        yield f"Effect(w={w})/{branch}", after


def confirm_and_apply(c: Constants, s: State) -> Iterator[Transition[State]]:
    for w in c.worker_ids:
        h = s.held[w]
        if h.task == 0 or h.ran or h.lost or h.cancelSeen:
            continue
        if holds(s, w) and s.cancelReq[h.task]:
            seen = s._replace(
                expired=s.expired.except_(h.task, False),
                held=s.held.except_(w, h._replace(cancelSeen=True)),
            )
            yield f"ConfirmAndApply(w={w})/cancel", seen
        elif holds(s, w):
            ran = s._replace(
                expired=s.expired.except_(h.task, False),
                held=s.held.except_(w, h._replace(confirmed=True, ran=True)),
            )
            branch, after = charge(c, s, w, ran)
            yield f"ConfirmAndApply(w={w})/{branch}", after
        else:
            lost = s.held.except_(w, h._replace(lost=True))
            yield f"ConfirmAndApply(w={w})/stale", s._replace(held=lost)


def ack_storing(name: str, check: Check, fenced: bool) -> Action:
    def ack(c: Constants, s: State) -> Iterator[Transition[State]]:
        for w in c.worker_ids:
            h = s.held[w]
            if h.task == 0 or not h.ran or h.cancelSeen or h.timedOut or (
                c.time_limits and not h.returned
            ):
                continue
            stored = s.result.except_(h.task, h.token)
            if check(s, w):
                done = end_lease(s, h.task)._replace(
                    state=s.state.except_(h.task, "completed"), result=stored
                )
                yield f"{name}(w={w})/acked", done._replace(held=drop(s, w))
            else:
                refused = s._replace(held=drop(s, w))
                if not fenced:
                    refused = refused._replace(result=stored)
                yield f"{name}(w={w})/stale", refused

    return ack


def ack_if(name: str, check: Check) -> Action:
    return ack_storing(name, check, True)


def ack_cancelled_if(name: str, check: Check) -> Action:
    def ack_cancelled(c: Constants, s: State) -> Iterator[Transition[State]]:
        for w in c.worker_ids:
            h = s.held[w]
            if h.task == 0 or not h.cancelSeen:
                continue
            if check(s, w):
                done = to_cancelled(end_lease(s, h.task), h.task)
                yield f"{name}(w={w})/cancelled", done._replace(held=drop(s, w))
            else:
                yield f"{name}(w={w})/stale", s._replace(held=drop(s, w))

    return ack_cancelled


def fail_if(name: str, check: Check) -> Action:
    def fail(c: Constants, s: State) -> Iterator[Transition[State]]:
        for w in c.worker_ids:
            h = s.held[w]
            if h.task == 0 or h.cancelSeen:
                continue
            steps = []
            # `\E final \in IF FINAL_FAILS THEN BOOLEAN ELSE {FALSE}`, FALSE first.
            for final in (False, True) if c.final_fails else (False,):
                if not check(s, w):
                    steps.append((f"{name}(w={w})/stale", s._replace(held=drop(s, w))))
                    continue
                ended = end_lease(s, h.task)
                if s.cancelReq[h.task]:
                    branch, after = "cancelled", to_cancelled(ended, h.task)
                elif final:
                    branch, after = "final", to_dlq(ended, h.task)
                else:
                    branch, after = retry_or_die(c, ended, h.task)
                steps.append((f"{name}(w={w})/{branch}", after._replace(held=drop(s, w))))
            # `LATE_FAILS \/ ~held[w].ran \/ held[w].timedOut`: TLC takes each true
            # disjunct in turn.
            for _ in range(c.late_fails + (not h.ran) + h.timedOut):
                yield from steps

    return fail


def shutdown_if(name: str, check: Check, ack_ran: bool) -> Action:
    def shutdown(c: Constants, s: State) -> Iterator[Transition[State]]:
        for w in c.worker_ids:
            h = s.held[w]
            t = h.task
            if t == 0 or s.restarts >= c.max_restarts:
                continue
            exits = s._replace(held=drop(s, w), restarts=s.restarts + 1)
            if not check(s, w):
                yield f"{name}(w={w})/stale", exits
            elif ack_ran and h.ran and not h.cancelSeen and not h.timedOut:
                done = end_lease(exits, t)._replace(state=s.state.except_(t, "completed"))
                yield f"{name}(w={w})/acked", done
            elif s.cancelReq[t]:
                yield f"{name}(w={w})/cancelled", to_cancelled(end_lease(exits, t), t)
            else:
                back = end_lease(exits, t)._replace(
                    ready=s.ready | {t},
                    state=s.state.except_(t, "pending"),
                    due=s.due.except_(t, True),
                )
                yield f"{name}(w={w})/released", back

    return shutdown


heartbeat = heartbeat_if("Heartbeat", holds)
confirm = confirm_if("Confirm", holds)
ack = ack_if("Ack", holds)
ack_cancelled = ack_cancelled_if("AckCancelled", holds)
fail = fail_if("Fail", holds)
shutdown = shutdown_if("Shutdown", holds, True)


def die(c: Constants, s: State) -> Iterator[Transition[State]]:
    for w in c.worker_ids:
        if c.kills and s.held[w].task != 0 and s.restarts < c.max_restarts:
            yield f"Die(w={w})", s._replace(held=drop(s, w), restarts=s.restarts + 1)


def expire_while(name: str, renews_in_effect: bool) -> Action:
    def expire(c: Constants, s: State) -> Iterator[Transition[State]]:
        for t in c.ids:
            if t not in s.leased or s.expired[t]:
                continue
            # `PAUSES \/ \A w : held[w].task = t => held[w].timedOut /\ ~(inEffect /\
            # InEffect(w))`: TLC takes each true disjunct in turn.
            unheld = all(
                s.held[w].task != t
                or (s.held[w].timedOut and not (renews_in_effect and in_effect(s, w)))
                for w in c.worker_ids
            )
            for _ in range(c.pauses + unheld):
                yield f"{name}(t={t})", s._replace(expired=s.expired.except_(t, True))

    return expire


expire = expire_while("Expire", True)


def reap_with(name: str, bump: int, honoured: bool) -> Action:
    def reap(c: Constants, s: State) -> Iterator[Transition[State]]:
        for t in c.ids:
            if t in s.leased and s.expired[t]:
                bumped = end_lease(s._replace(token=s.token.except_(t, s.token[t] + bump)), t)
                if honoured and s.cancelReq[t]:
                    branch, after = "cancelled", to_cancelled(bumped, t)
                else:
                    branch, after = retry_or_die(c, bumped, t)
                yield f"{name}(t={t})/{branch}", after

    return reap


def reap_by(name: str, bump: int) -> Action:
    return reap_with(name, bump, True)


reap = reap_by("Reap", 1)


def time_out_if(name: str, claimed: bool) -> Action:
    """`claimed`: a run whose handler has returned is declined (as built)."""

    def time_out(c: Constants, s: State) -> Iterator[Transition[State]]:
        if not c.time_limits:
            return
        for w in c.worker_ids:
            h = s.held[w]
            if h.task != 0 and not h.timedOut and not (claimed and h.returned):
                timed_out = s.held.except_(w, h._replace(timedOut=True))
                yield f"{name}(w={w})", s._replace(held=timed_out)

    return time_out


time_out = time_out_if("TimeOut", True)


def handler_return(c: Constants, s: State) -> Iterator[Transition[State]]:
    if not c.time_limits:
        return
    for w in c.worker_ids:
        h = s.held[w]
        if h.task != 0 and h.ran and not h.returned and not h.timedOut and not h.cancelSeen:
            yield f"Return(w={w})", s._replace(held=s.held.except_(w, h._replace(returned=True)))


def throttle(c: Constants, s: State) -> Iterator[Transition[State]]:
    if not c.rate_limits:
        return
    for t in c.ids:
        if t in s.ready:
            yield f"Throttle(t={t})", s._replace(
                ready=s.ready - {t}, delayed=s.delayed | {t},
                state=s.state.except_(t, "delayed"), due=s.due.except_(t, False))


def tick(c: Constants, s: State) -> Iterator[Transition[State]]:
    for t in c.ids:
        if t in s.delayed and not s.due[t]:
            yield f"Tick(t={t})", s._replace(due=s.due.except_(t, True))


def promote(c: Constants, s: State) -> Iterator[Transition[State]]:
    for t in c.ids:
        if t in s.delayed and s.due[t]:
            yield (
                f"Promote(t={t})",
                s._replace(
                    delayed=s.delayed - {t},
                    ready=s.ready | {t},
                    state=s.state.except_(t, "pending"),
                ),
            )


def retry_dead(c: Constants, s: State) -> Iterator[Transition[State]]:
    for t in c.ids:
        if s.revivals < c.max_revivals and t in s.dlq and s.state[t] == "dead":
            yield (
                f"RetryDead(t={t})",
                s._replace(
                    revivals=s.revivals + 1,
                    dlq=s.dlq - {t},
                    ready=s.ready | {t},
                    state=s.state.except_(t, "pending"),
                    retries=s.retries.except_(t, 0),
                    due=s.due.except_(t, True),
                ),
            )


NEXT: tuple[Action, ...] = (
    enqueue, lease, heartbeat, confirm, effect, ack, fail, shutdown, die,
    expire, reap, tick, promote, retry_dead, cancel, ack_cancelled, time_out, handler_return,
    throttle,
)  # fmt: skip


def swap(actions: tuple[Action, ...], *pairs: tuple[Action, Action]) -> tuple[Action, ...]:
    """`actions` with each (old, new) pair's old action replaced in place by the new one."""
    for old, new in pairs:
        assert old in actions, f"{old} is not among the actions"
        actions = tuple(new if a is old else a for a in actions)
    return actions
