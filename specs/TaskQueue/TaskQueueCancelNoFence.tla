----------------------- MODULE TaskQueueCancelNoFence -----------------------
(***************************************************************************)
(* Cancellation mutant (a): a worker that does not fence its effects once  *)
(* it knows of its task's cancel. The heartbeat still answers "cancel" and *)
(* the run still settles by ack_cancelled.lua, but effect() neither refuses *)
(* after the cancel was seen nor treats a renewal that answers "cancel" as *)
(* a refusal, so the handler's effect is let in after the cancel was       *)
(* acknowledged.                                                           *)
(*                                                                         *)
(* TaskQueueCancelNoFence.cfg checks TaskQueue_Cancel.cfg's invariants and *)
(* properties: NoEffectAfterCancelSeen breaks in 5 steps (enqueue, lease,  *)
(* cancel, a heartbeat that says so, the effect's confirmation).           *)
(* Python transcription: task_queue_mutants.py.                            *)
(***************************************************************************)
EXTENDS TaskQueue

ConfirmNoCancelFence(w) == ConfirmFencing(w, Holds, FALSE)

CancelNoFenceNext ==
    \/ \E k \in 0..N_KEYS : \E d \in BOOLEAN : Enqueue(k, d)
    \/ \E w \in Workers : Lease(w)
    \/ \E w \in Workers : Heartbeat(w)
    \/ \E w \in Workers : ConfirmNoCancelFence(w)
    \/ \E w \in Workers : Effect(w)
    \/ \E w \in Workers : Ack(w)
    \/ \E w \in Workers : Fail(w)
    \/ \E w \in Workers : Shutdown(w)
    \/ \E w \in Workers : Die(w)
    \/ \E t \in Ids : Expire(t)
    \/ \E t \in Ids : Reap(t)
    \/ \E t \in Ids : Tick(t)
    \/ \E t \in Ids : Promote(t)
    \/ \E t \in Ids : RetryDead(t)
    \/ \E t \in Ids : Cancel(t)
    \/ \E w \in Workers : AckCancelled(w)
    \/ \E w \in Workers : TimeOut(w)
    \/ \E w \in Workers : Return(w)
    \/ \E t \in Ids : Throttle(t)

CancelNoFenceSpec == Init /\ [][CancelNoFenceNext]_vars

CancelNoFenceNothingLost == [](~ENABLED CancelNoFenceNext => Settled)

=============================================================================
