----------------------- MODULE TaskQueueResultNoFence -----------------------
(***************************************************************************)
(* Mutant of TaskQueue for R1 (task results): ack.lua writes the handler's *)
(* return value before, and so regardless of, its fencing check. The       *)
(* completion is still fenced (a stale ack completes nothing), but every   *)
(* ack, stale or not, stores its run's value, so a paused holder whose     *)
(* lease was reaped makes its return value visible.                        *)
(*                                                                         *)
(* TaskQueueResultNoFence.cfg checks TaskQueue.cfg's invariants plus R1:   *)
(* the stale ack's state breaks R1_CurrentToken (the stored value is the   *)
(* stale token) and R1_OnlyCompleted (the task waits for its retry), and   *)
(* TLC names the first listed, R1_CurrentToken.                            *)
(* Python transcription: task_queue_mutants.py.                            *)
(***************************************************************************)
EXTENDS TaskQueue

AckResultNoFence(w) == AckStoring(w, Holds, FALSE)

ResultNoFenceNext ==
    \/ \E k \in 0..N_KEYS : \E d \in BOOLEAN : Enqueue(k, d)
    \/ \E w \in Workers : Lease(w)
    \/ \E w \in Workers : Heartbeat(w)
    \/ \E w \in Workers : Confirm(w)
    \/ \E w \in Workers : Effect(w)
    \/ \E w \in Workers : AckResultNoFence(w)
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

ResultNoFenceSpec == Init /\ [][ResultNoFenceNext]_vars

ResultNoFenceNothingLost == [](~ENABLED ResultNoFenceNext => Settled)

=============================================================================
