--------------------- MODULE TaskQueueTimeOutMidEffect ---------------------
(***************************************************************************)
(* Time-limit mutant (a), the worker's older ordering: a run that passes   *)
(* its time limit inside its effect() block has its attempt failed at once *)
(* (fail.lua: the task is retried or dead), while its handler's thread,    *)
(* which nothing can stop, goes on inside the block and may still write    *)
(* its effect. FailMidEffect is that failure: the lease ends, the holder   *)
(* keeps its run (a stale one now), and its Effect may follow; the         *)
(* heartbeat renews as built. The retry may be leased by another worker    *)
(* and apply the effect while the first block is still under way.          *)
(*                                                                         *)
(* TaskQueueTimeOutMidEffect.cfg checks TaskQueue_TimeLimitHeld.cfg's      *)
(* invariants and properties: T3_StaleAtOnce breaks in 5 steps (enqueue,   *)
(* lease, confirm, time out, the failure: a current token, no lease), and  *)
(* without it (_NoStaleAtOnce.cfg) EffectWhileHeld in 6 (then the effect). *)
(* Python transcription: task_queue_mutants.py.                            *)
(***************************************************************************)
EXTENDS TaskQueue

\* fail.lua for a run timed out inside its effect() block, its holding kept.
\* A final failure is not modelled here (the .cfg has none).
FailMidEffect(w) ==
    LET t == held[w].task IN
    /\ t # 0
    /\ held[w].timedOut
    /\ InEffect(w)
    /\ ~held[w].cancelSeen
    /\ Holds(w)
    /\ EndLease(t)
    /\ IF cancelReq[t] THEN ToCancelled(t) ELSE RetryOrDie(t)
    /\ UNCHANGED <<sent, keyOf, answer, idem, ready, token, held, restarts, revivals,
                   charges, applied, fenceTok, result, cancelReq>>

MidEffectNext ==
    \/ \E k \in 0..N_KEYS : \E d \in BOOLEAN : Enqueue(k, d)
    \/ \E w \in Workers : Lease(w)
    \/ \E w \in Workers : Heartbeat(w)
    \/ \E w \in Workers : Confirm(w)
    \/ \E w \in Workers : Effect(w)
    \/ \E w \in Workers : Ack(w)
    \/ \E w \in Workers : Fail(w)
    \/ \E w \in Workers : FailMidEffect(w)
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

MidEffectSpec == Init /\ [][MidEffectNext]_vars

MidEffectNothingLost == [](~ENABLED MidEffectNext => Settled)

=============================================================================
