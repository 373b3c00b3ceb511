------------------------- MODULE TaskQueueReapNoBump -------------------------
(***************************************************************************)
(* Mutant (b) of TaskQueue: reap.lua without its HINCRBY of the fencing    *)
(* token. The reaped holder keeps a token equal to the task's current one. *)
(*                                                                         *)
(* As built this changes no script's answer: every holder script checks   *)
(* that the task is leased before it compares tokens, the reaped task is   *)
(* not leased, and it only becomes leased again through lease.lua, which   *)
(* raises the token past the reaped holder's. So T1, T2, T3 as a step, T4, *)
(* T5 and T6 all hold (TaskQueueReapNoBump_NoStaleAtOnce.cfg checks that). *)
(* What the bump is for is T3_StaleAtOnce, "once a lease ends its token is *)
(* stale", which TaskQueueReapNoBump.cfg checks: broken in 4 steps. The    *)
(* module TaskQueueByToken shows where that matters: a check that compares *)
(* tokens alone. Python transcription: task_queue_mutants.py.              *)
(***************************************************************************)
EXTENDS TaskQueue

ReapNoBump(t) == ReapBy(t, 0)

NoBumpNext ==
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
    \/ \E t \in Ids : ReapNoBump(t)
    \/ \E t \in Ids : Tick(t)
    \/ \E t \in Ids : Promote(t)
    \/ \E t \in Ids : RetryDead(t)
    \/ \E t \in Ids : Cancel(t)
    \/ \E w \in Workers : AckCancelled(w)
    \/ \E w \in Workers : TimeOut(w)
    \/ \E w \in Workers : Return(w)
    \/ \E t \in Ids : Throttle(t)

NoBumpSpec == Init /\ [][NoBumpNext]_vars

NoBumpNothingLost == [](~ENABLED NoBumpNext => Settled)

=============================================================================
