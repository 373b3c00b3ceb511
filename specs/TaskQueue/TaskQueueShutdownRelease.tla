---------------------- MODULE TaskQueueShutdownRelease ----------------------
(***************************************************************************)
(* Mutant of TaskQueue: the shutdown of the worker before this change,     *)
(* which released every task still in hand when its drain grace ran out,   *)
(* whether or not the run had applied its effect.                          *)
(*                                                                         *)
(* TaskQueueShutdownRelease.cfg runs it with no ledger guard and graceful  *)
(* exits only (no pause past a lease, no SIGKILL, no handler raising after *)
(* its effect), the conditions under which TaskQueue_Graceful.cfg shows    *)
(* T4 holding for the shutdown as built: here T4 breaks, the effect runs,  *)
(* the shutdown gives the task back, and the next run applies it again.    *)
(* Python transcription: task_queue_mutants.py.                            *)
(***************************************************************************)
EXTENDS TaskQueue

ShutdownReleasing(w) == ShutdownIf(w, Holds, FALSE)

ReleasingNext ==
    \/ \E k \in 0..N_KEYS : \E d \in BOOLEAN : Enqueue(k, d)
    \/ \E w \in Workers : Lease(w)
    \/ \E w \in Workers : Heartbeat(w)
    \/ \E w \in Workers : Confirm(w)
    \/ \E w \in Workers : Effect(w)
    \/ \E w \in Workers : Ack(w)
    \/ \E w \in Workers : Fail(w)
    \/ \E w \in Workers : ShutdownReleasing(w)
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

ReleasingSpec == Init /\ [][ReleasingNext]_vars

ReleasingNothingLost == [](~ENABLED ReleasingNext => Settled)

=============================================================================
