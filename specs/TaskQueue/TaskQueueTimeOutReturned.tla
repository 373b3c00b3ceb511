--------------------- MODULE TaskQueueTimeOutReturned ----------------------
(***************************************************************************)
(* Time-limit mutant (c), the older claim: the handler's return did not    *)
(* claim its run's report before its value was encoded, so the time-limit  *)
(* check could still time out a run that had returned within its limit,    *)
(* and its attempt was failed (and retried, its handler and effect run     *)
(* again) after its effect.                                                *)
(*                                                                         *)
(* TaskQueueTimeOutReturned.cfg checks TaskQueue_TimeLimitHeld.cfg's       *)
(* invariants and properties: ReturnedNeverTimesOut breaks in 6 steps      *)
(* (enqueue, lease, confirm, the effect, the return, the time-out).        *)
(* Python transcription: task_queue_mutants.py.                            *)
(***************************************************************************)
EXTENDS TaskQueue

TimeOutUnclaimed(w) == TimeOutIf(w, FALSE)

ReturnedNext ==
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
    \/ \E t \in Ids : Reap(t)
    \/ \E t \in Ids : Tick(t)
    \/ \E t \in Ids : Promote(t)
    \/ \E t \in Ids : RetryDead(t)
    \/ \E t \in Ids : Cancel(t)
    \/ \E w \in Workers : AckCancelled(w)
    \/ \E w \in Workers : TimeOutUnclaimed(w)
    \/ \E w \in Workers : Return(w)
    \/ \E t \in Ids : Throttle(t)

ReturnedSpec == Init /\ [][ReturnedNext]_vars

ReturnedNothingLost == [](~ENABLED ReturnedNext => Settled)

=============================================================================
