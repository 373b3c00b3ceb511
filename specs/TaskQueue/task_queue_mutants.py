r"""Python transcriptions of the TaskQueue mutants; each .tla EXTENDS the one above it.

TLA+                                     Python
---------------------------------------  ----------------------------------------------
TaskQueueAckNoFence.tla
  AckNoFence(w) == AckIf(w, InLease)     ack_no_fence
  NoFenceNext, NoFenceNothingLost        NO_FENCE_NEXT (tq.NEXT, Ack swapped), its T2
TaskQueueReapNoBump.tla
  ReapNoBump(t) == ReapBy(t, 0)          reap_no_bump
  NoBumpNext, NoBumpNothingLost          NO_BUMP_NEXT (tq.NEXT, Reap swapped), its T2
TaskQueueByToken.tla
  HeartbeatByToken(w) == HeartbeatIf(w, Current), and ConfirmByToken, AckByToken,
  AckCancelledByToken, FailByToken,
  ShutdownByToken alike                  heartbeat_by_token .. shutdown_by_token
  ByTokenNext, ByTokenNothingLost        BY_TOKEN_NEXT, its T2
  ByTokenNoBumpNext, ...NothingLost      BY_TOKEN_NO_BUMP_NEXT (and ReapNoBump), its T2
TaskQueueShutdownRelease.tla
  ShutdownReleasing(w) ==
      ShutdownIf(w, Holds, FALSE)        shutdown_releasing
  ReleasingNext, ReleasingNothingLost    RELEASING_NEXT (Shutdown swapped), its T2
TaskQueueConfirmAtomic.tla
  AtomicNext, AtomicNothingLost          ATOMIC_NEXT (Confirm and Effect replaced by
                                         tq.confirm_and_apply), its T2
TaskQueueResultNoFence.tla
  AckResultNoFence(w) ==
      AckStoring(w, Holds, FALSE)        ack_result_no_fence
  ResultNoFenceNext, ...NothingLost      RESULT_NO_FENCE_NEXT (Ack swapped), its T2
TaskQueueCancelNoFence.tla
  ConfirmNoCancelFence(w) ==
      ConfirmFencing(w, Holds, FALSE)    confirm_no_cancel_fence
  CancelNoFenceNext, ...NothingLost      CANCEL_NO_FENCE_NEXT (Confirm swapped), its T2
TaskQueueCancelRetried.tla
  ReapIgnoringCancel(t) ==
      ReapWith(t, 1, FALSE)              reap_ignoring_cancel
  CancelRetriedNext, ...NothingLost      CANCEL_RETRIED_NEXT (Reap swapped), its T2
TaskQueueTimeOutMidEffect.tla
  FailMidEffect(w)                       fail_mid_effect
  MidEffectNext, MidEffectNothingLost    MID_EFFECT_NEXT (FailMidEffect after Fail), its T2
TaskQueueEndMidEffect.tla
  EndMidEffect(w)                        end_mid_effect
  EndMidEffectNext, ...NothingLost       END_MID_EFFECT_NEXT (EndMidEffect after Fail), its T2
TaskQueueTimeOutUnrenewed.tla
  HeartbeatUnrenewed(w) ==
      HeartbeatWhile(w, Holds, FALSE)    heartbeat_unrenewed
  ExpireUnrenewed(t) ==
      ExpireWhile(t, FALSE)              expire_unrenewed
  UnrenewedNext, UnrenewedNothingLost    UNRENEWED_NEXT (Heartbeat, Expire swapped), its T2
TaskQueueTimeOutReturned.tla
  TimeOutUnclaimed(w) ==
      TimeOutIf(w, FALSE)                time_out_unclaimed
  ReturnedNext, ReturnedNothingLost      RETURNED_NEXT (TimeOut swapped), its T2
everything else                          task_queue.py, unchanged
"""

from __future__ import annotations

from collections.abc import Iterator

from specs.tlacheck import Model, Transition
from specs.tlacheck import cfg as cfgs

from . import task_queue as tq
from .task_queue_checks import build

ack_no_fence = tq.ack_if("AckNoFence", tq.in_lease)
reap_no_bump = tq.reap_by("ReapNoBump", 0)
heartbeat_by_token = tq.heartbeat_if("HeartbeatByToken", tq.current)
confirm_by_token = tq.confirm_if("ConfirmByToken", tq.current)
ack_by_token = tq.ack_if("AckByToken", tq.current)
ack_cancelled_by_token = tq.ack_cancelled_if("AckCancelledByToken", tq.current)
fail_by_token = tq.fail_if("FailByToken", tq.current)
shutdown_by_token = tq.shutdown_if("ShutdownByToken", tq.current, True)
shutdown_releasing = tq.shutdown_if("ShutdownReleasing", tq.holds, False)
ack_result_no_fence = tq.ack_storing("AckResultNoFence", tq.holds, False)
confirm_no_cancel_fence = tq.confirm_fencing("ConfirmNoCancelFence", tq.holds, False)
reap_ignoring_cancel = tq.reap_with("ReapIgnoringCancel", 1, False)
heartbeat_unrenewed = tq.heartbeat_while("HeartbeatUnrenewed", tq.holds, False)
expire_unrenewed = tq.expire_while("ExpireUnrenewed", False)
time_out_unclaimed = tq.time_out_if("TimeOutUnclaimed", False)


def fail_mid_effect(c: tq.Constants, s: tq.State) -> Iterator[Transition[tq.State]]:
    """fail.lua for a run timed out inside its effect() block, its holding kept."""
    for w in c.worker_ids:
        h = s.held[w]
        if h.task == 0 or not h.timedOut or not tq.in_effect(s, w) or h.cancelSeen \
                or not tq.holds(s, w):
            continue
        ended = tq.end_lease(s, h.task)
        if s.cancelReq[h.task]:
            branch, after = "cancelled", tq.to_cancelled(ended, h.task)
        else:
            branch, after = tq.retry_or_die(c, ended, h.task)
        yield f"FailMidEffect(w={w})/{branch}", after


def end_mid_effect(c: tq.Constants, s: tq.State) -> Iterator[Transition[tq.State]]:
    """fail.lua or ack_cancelled.lua for a run with a block under way on a thread its
    handler left behind, its holding kept."""
    for w in c.worker_ids:
        h = s.held[w]
        if h.task == 0 or not tq.in_effect(s, w) or not tq.holds(s, w):
            continue
        ended = tq.end_lease(s, h.task)
        if h.cancelSeen or s.cancelReq[h.task]:
            branch, after = "cancelled", tq.to_cancelled(ended, h.task)
        else:
            branch, after = tq.retry_or_die(c, ended, h.task)
        yield f"EndMidEffect(w={w})/{branch}", after


NO_FENCE_NEXT = tq.swap(tq.NEXT, (tq.ack, ack_no_fence))
NO_BUMP_NEXT = tq.swap(tq.NEXT, (tq.reap, reap_no_bump))
BY_TOKEN_NEXT = tq.swap(
    tq.NEXT,
    (tq.heartbeat, heartbeat_by_token),
    (tq.confirm, confirm_by_token),
    (tq.ack, ack_by_token),
    (tq.ack_cancelled, ack_cancelled_by_token),
    (tq.fail, fail_by_token),
    (tq.shutdown, shutdown_by_token),
)
BY_TOKEN_NO_BUMP_NEXT = tq.swap(BY_TOKEN_NEXT, (tq.reap, reap_no_bump))
RELEASING_NEXT = tq.swap(tq.NEXT, (tq.shutdown, shutdown_releasing))
RESULT_NO_FENCE_NEXT = tq.swap(tq.NEXT, (tq.ack, ack_result_no_fence))
CANCEL_NO_FENCE_NEXT = tq.swap(tq.NEXT, (tq.confirm, confirm_no_cancel_fence))
CANCEL_RETRIED_NEXT = tq.swap(tq.NEXT, (tq.reap, reap_ignoring_cancel))
MID_EFFECT_NEXT = tuple(
    b for a in tq.NEXT for b in ((a, fail_mid_effect) if a is tq.fail else (a,))
)
END_MID_EFFECT_NEXT = tuple(
    b for a in tq.NEXT for b in ((a, end_mid_effect) if a is tq.fail else (a,))
)
UNRENEWED_NEXT = tq.swap(
    tq.NEXT, (tq.heartbeat, heartbeat_unrenewed), (tq.expire, expire_unrenewed)
)
RETURNED_NEXT = tq.swap(tq.NEXT, (tq.time_out, time_out_unclaimed))
ATOMIC_NEXT = tuple(
    a for a in tq.swap(tq.NEXT, (tq.confirm, tq.confirm_and_apply)) if a is not tq.effect
)


def ack_no_fence_model(cfg: cfgs.Config) -> Model[tq.State]:
    return build("TaskQueueAckNoFence", NO_FENCE_NEXT, cfg, "NoFenceNothingLost")


def reap_no_bump_model(cfg: cfgs.Config) -> Model[tq.State]:
    return build("TaskQueueReapNoBump", NO_BUMP_NEXT, cfg, "NoBumpNothingLost")


def by_token_model(cfg: cfgs.Config) -> Model[tq.State]:
    """TaskQueueByToken under its cfg's SPECIFICATION: ByTokenSpec or ByTokenNoBumpSpec."""
    if cfg.specification == "ByTokenNoBumpSpec":
        return build("TaskQueueByToken", BY_TOKEN_NO_BUMP_NEXT, cfg, "ByTokenNoBumpNothingLost")
    return build("TaskQueueByToken", BY_TOKEN_NEXT, cfg, "ByTokenNothingLost")


def shutdown_release_model(cfg: cfgs.Config) -> Model[tq.State]:
    return build("TaskQueueShutdownRelease", RELEASING_NEXT, cfg, "ReleasingNothingLost")


def confirm_atomic_model(cfg: cfgs.Config) -> Model[tq.State]:
    return build("TaskQueueConfirmAtomic", ATOMIC_NEXT, cfg, "AtomicNothingLost")


def result_no_fence_model(cfg: cfgs.Config) -> Model[tq.State]:
    return build("TaskQueueResultNoFence", RESULT_NO_FENCE_NEXT, cfg, "ResultNoFenceNothingLost")


def cancel_no_fence_model(cfg: cfgs.Config) -> Model[tq.State]:
    return build("TaskQueueCancelNoFence", CANCEL_NO_FENCE_NEXT, cfg, "CancelNoFenceNothingLost")


def cancel_retried_model(cfg: cfgs.Config) -> Model[tq.State]:
    return build("TaskQueueCancelRetried", CANCEL_RETRIED_NEXT, cfg, "CancelRetriedNothingLost")


def time_out_mid_effect_model(cfg: cfgs.Config) -> Model[tq.State]:
    return build("TaskQueueTimeOutMidEffect", MID_EFFECT_NEXT, cfg, "MidEffectNothingLost")


def end_mid_effect_model(cfg: cfgs.Config) -> Model[tq.State]:
    return build("TaskQueueEndMidEffect", END_MID_EFFECT_NEXT, cfg, "EndMidEffectNothingLost")


def time_out_unrenewed_model(cfg: cfgs.Config) -> Model[tq.State]:
    return build("TaskQueueTimeOutUnrenewed", UNRENEWED_NEXT, cfg, "UnrenewedNothingLost")


def time_out_returned_model(cfg: cfgs.Config) -> Model[tq.State]:
    return build("TaskQueueTimeOutReturned", RETURNED_NEXT, cfg, "ReturnedNothingLost")
