----------------------- MODULE TaskQueueEndMidEffect -----------------------
(***************************************************************************)
(* Left-behind-block mutant, the worker's older ordering: a run whose      *)
(* handler raised, or returned having seen its task's cancel, while a      *)
(* thread or coroutine it started was still inside an effect() block of    *)
(* the run, was reported at once: fail.lua (the task retried or dead, or   *)
(* cancelled when its cancel was requested) or ack_cancelled.lua, while    *)
(* the block went on and could still write its effect. EndMidEffect is     *)
(* that report: the lease ends, the holder keeps its run (a stale one      *)
(* now), and its Effect may follow. The worker as built closes such a run  *)
(* (no block starts after) and reports it only once the block has ended:   *)
(* in TaskQueue, Fail and AckCancelled drop the run, so no Effect of it     *)
(* can come after them. Unlike TaskQueueTimeOutMidEffect, the run need not *)
(* be past a time limit.                                                   *)
(*                                                                         *)
(* TaskQueueEndMidEffect.cfg checks TaskQueue_TimeLimitHeld.cfg's          *)
(* invariants and properties: T3_StaleAtOnce breaks in 4 steps (enqueue,   *)
(* lease, confirm, the report: a current token, no lease), and without it *)
(* (_NoStaleAtOnce.cfg) EffectWhileHeld in 5 (then the effect).            *)
(* Python transcription: task_queue_mutants.py.                            *)
(***************************************************************************)
EXTENDS TaskQueue

\* fail.lua or ack_cancelled.lua for a run with a block under way on a thread its
\* handler left behind, its holding kept. A final failure is not modelled here
\* (the .cfg has none).
EndMidEffect(w) ==
    LET t == held[w].task IN
    /\ t # 0
    /\ InEffect(w)
    /\ Holds(w)
    /\ EndLease(t)
    /\ IF held[w].cancelSeen \/ cancelReq[t] THEN ToCancelled(t) ELSE RetryOrDie(t)
    /\ UNCHANGED <<sent, keyOf, answer, idem, ready, token, held, restarts, revivals,
                   charges, applied, fenceTok, result, cancelReq>>

EndMidEffectNext ==
    \/ \E k \in 0..N_KEYS : \E d \in BOOLEAN : Enqueue(k, d)
    \/ \E w \in Workers : Lease(w)
    \/ \E w \in Workers : Heartbeat(w)
    \/ \E w \in Workers : Confirm(w)
    \/ \E w \in Workers : Effect(w)
    \/ \E w \in Workers : Ack(w)
    \/ \E w \in Workers : Fail(w)
    \/ \E w \in Workers : EndMidEffect(w)
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

EndMidEffectSpec == Init /\ [][EndMidEffectNext]_vars

EndMidEffectNothingLost == [](~ENABLED EndMidEffectNext => Settled)

=============================================================================
