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
  HeartbeatByToken(w) == HeartbeatIf(w, Current), and AckByToken, FailByToken,
  ReleaseByToken alike                   heartbeat_by_token .. release_by_token
  ByTokenNext, ByTokenNothingLost        BY_TOKEN_NEXT, its T2
  ByTokenNoBumpNext, ...NothingLost      BY_TOKEN_NO_BUMP_NEXT (and ReapNoBump), its T2
everything else                          task_queue.py, unchanged
"""

from __future__ import annotations

from specs.tlacheck import Model
from specs.tlacheck import cfg as cfgs

from . import task_queue as tq
from .task_queue_checks import build

ack_no_fence = tq.ack_if("AckNoFence", tq.in_lease)
reap_no_bump = tq.reap_by("ReapNoBump", 0)
heartbeat_by_token = tq.heartbeat_if("HeartbeatByToken", tq.current)
ack_by_token = tq.ack_if("AckByToken", tq.current)
fail_by_token = tq.fail_if("FailByToken", tq.current)
release_by_token = tq.release_if("ReleaseByToken", tq.current)

NO_FENCE_NEXT = tq.swap(tq.NEXT, (tq.ack, ack_no_fence))
NO_BUMP_NEXT = tq.swap(tq.NEXT, (tq.reap, reap_no_bump))
BY_TOKEN_NEXT = tq.swap(
    tq.NEXT,
    (tq.heartbeat, heartbeat_by_token),
    (tq.ack, ack_by_token),
    (tq.fail, fail_by_token),
    (tq.release, release_by_token),
)
BY_TOKEN_NO_BUMP_NEXT = tq.swap(BY_TOKEN_NEXT, (tq.reap, reap_no_bump))


def ack_no_fence_model(cfg: cfgs.Config) -> Model[tq.State]:
    return build("TaskQueueAckNoFence", NO_FENCE_NEXT, cfg, "NoFenceNothingLost")


def reap_no_bump_model(cfg: cfgs.Config) -> Model[tq.State]:
    return build("TaskQueueReapNoBump", NO_BUMP_NEXT, cfg, "NoBumpNothingLost")


def by_token_model(cfg: cfgs.Config) -> Model[tq.State]:
    """TaskQueueByToken under its cfg's SPECIFICATION: ByTokenSpec or ByTokenNoBumpSpec."""
    if cfg.specification == "ByTokenNoBumpSpec":
        return build("TaskQueueByToken", BY_TOKEN_NO_BUMP_NEXT, cfg, "ByTokenNoBumpNothingLost")
    return build("TaskQueueByToken", BY_TOKEN_NEXT, cfg, "ByTokenNothingLost")
