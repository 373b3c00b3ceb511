----------------------- MODULE TaskQueueCancelRetried -----------------------
(***************************************************************************)
(* Cancellation mutant (b): reap.lua that ignores the cancel_requested     *)
(* flag. An expired lease whose cancel was requested counts as a failed    *)
(* attempt like any other and goes to delayed, from where it is promoted   *)
(* and leased again: the task runs again after its cancel.                 *)
(*                                                                         *)
(* TaskQueueCancelRetried.cfg checks TaskQueue_Cancel.cfg's invariants and *)
(* properties: CancelSticks breaks in 5 steps (enqueue, lease, cancel, the *)
(* lease expires, the reap retries it). TaskQueueCancelRetried_Leased.cfg  *)
(* leaves CancelSticks out: CancelledNeverLeased breaks when the task is   *)
(* leased again, three steps later. Python transcription:                  *)
(* task_queue_mutants.py.                                                  *)
(***************************************************************************)
EXTENDS TaskQueue

ReapIgnoringCancel(t) == ReapWith(t, 1, FALSE)

CancelRetriedNext ==
    \/ \E k \in 0..N_KEYS : \E d \in BOOLEAN : Enqueue(k, d)
    \/ \E w \in Workers : Lease(w)
    \/ \E w \in Workers : Heartbeat(w)
    \/ \E w \in Workers : Confirm(w)
    \/ \E w \in Workers : Effect(w)
    \/ \E w \in Workers : Ack(w)
    \/ \E w \in Workers : Fail(w)
    \/ \E w \in Workers : Shutdown(w)
    \/ \E w \in Workers : Die(w)
    \/ \E t \in Ids : Expire(t)
    \/ \E t \in Ids : ReapIgnoringCancel(t)
    \/ \E t \in Ids : Tick(t)
    \/ \E t \in Ids : Promote(t)
    \/ \E t \in Ids : RetryDead(t)
    \/ \E t \in Ids : Cancel(t)
    \/ \E w \in Workers : AckCancelled(w)
    \/ \E w \in Workers : TimeOut(w)
    \/ \E w \in Workers : Return(w)
    \/ \E t \in Ids : Throttle(t)

CancelRetriedSpec == Init /\ [][CancelRetriedNext]_vars

CancelRetriedNothingLost == [](~ENABLED CancelRetriedNext => Settled)

=============================================================================
