------------------------- MODULE TaskQueueAckNoFence -------------------------
(***************************************************************************)
(* Mutant (a) of TaskQueue: ack.lua without its fencing check. The script  *)
(* still returns 0 when the task is not leased, but no longer compares the *)
(* caller's token with the record's, so a paused holder whose task was     *)
(* reaped and leased again acks the new holder's run as its own.           *)
(*                                                                         *)
(* TaskQueueAckNoFence.cfg checks all of TaskQueue's invariants: the first *)
(* broken is T3_StaleAtOnce, in the state the stale ack produces (the new  *)
(* holder's token is current for a task no longer leased).                 *)
(* TaskQueueAckNoFence_NoStaleAtOnce.cfg leaves that one out and gets the  *)
(* same 9-step trace from T3_StaleChangesNothing: the step itself changed  *)
(* the queue although the caller's lease was not current.                 *)
(* Python transcription: task_queue_mutants.py.                            *)
(***************************************************************************)
EXTENDS TaskQueue

InLease(w) == held[w].task \in leased

AckNoFence(w) == AckIf(w, InLease)

NoFenceNext ==
    \/ \E k \in 0..N_KEYS : \E d \in BOOLEAN : Enqueue(k, d)
    \/ \E w \in Workers : Lease(w)
    \/ \E w \in Workers : Heartbeat(w)
    \/ \E w \in Workers : Confirm(w)
    \/ \E w \in Workers : Effect(w)
    \/ \E w \in Workers : AckNoFence(w)
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

NoFenceSpec == Init /\ [][NoFenceNext]_vars

NoFenceNothingLost == [](~ENABLED NoFenceNext => Settled)

=============================================================================
