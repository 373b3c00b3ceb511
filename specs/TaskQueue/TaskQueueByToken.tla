-------------------------- MODULE TaskQueueByToken --------------------------
(***************************************************************************)
(* TaskQueue with holder scripts that compare tokens only: heartbeat (and  *)
(* the effect's confirmation), ack, fail and the shutdown's ack or release *)
(* guarded by Current(w) instead of Holds(w), i.e. with their ZSCORE       *)
(* leased check removed. Not taskq as built: a variant that                *)
(* shows what each of the two checks buys.                                 *)
(*                                                                         *)
(* TaskQueueByToken.cfg (ByTokenSpec, reap bumps): every invariant holds,  *)
(* in exactly TaskQueue's state graph, because Holds(w) = Current(w) in    *)
(* every reachable state: with the bump the token alone is a full fence.   *)
(* TaskQueueByToken_NoBump.cfg (ByTokenNoBumpSpec): without the bump a     *)
(* reaped holder's fail passes the token check and moves a delayed task to *)
(* the DLQ too: T1 broken in 5 steps. So taskq has two independent fences, *)
(* either of which alone keeps T1-T6, and reap's bump is the one that also *)
(* makes a bare token comparison (a downstream fence, TaskQueue's          *)
(* T3_StaleAtOnce) safe. Python transcription: task_queue_mutants.py.      *)
(***************************************************************************)
EXTENDS TaskQueueReapNoBump

HeartbeatByToken(w) == HeartbeatIf(w, Current)
ConfirmByToken(w) == ConfirmIf(w, Current)
AckByToken(w) == AckIf(w, Current)
FailByToken(w) == FailIf(w, Current)
ShutdownByToken(w) == ShutdownIf(w, Current, TRUE)

ByTokenNext ==
    \/ \E k \in 0..N_KEYS : \E d \in BOOLEAN : Enqueue(k, d)
    \/ \E w \in Workers : Lease(w)
    \/ \E w \in Workers : HeartbeatByToken(w)
    \/ \E w \in Workers : ConfirmByToken(w)
    \/ \E w \in Workers : Effect(w)
    \/ \E w \in Workers : AckByToken(w)
    \/ \E w \in Workers : FailByToken(w)
    \/ \E w \in Workers : ShutdownByToken(w)
    \/ \E w \in Workers : Die(w)
    \/ \E t \in Ids : Expire(t)
    \/ \E t \in Ids : Reap(t)
    \/ \E t \in Ids : Tick(t)
    \/ \E t \in Ids : Promote(t)
    \/ \E t \in Ids : RetryDead(t)

ByTokenNoBumpNext ==
    \/ \E k \in 0..N_KEYS : \E d \in BOOLEAN : Enqueue(k, d)
    \/ \E w \in Workers : Lease(w)
    \/ \E w \in Workers : HeartbeatByToken(w)
    \/ \E w \in Workers : ConfirmByToken(w)
    \/ \E w \in Workers : Effect(w)
    \/ \E w \in Workers : AckByToken(w)
    \/ \E w \in Workers : FailByToken(w)
    \/ \E w \in Workers : ShutdownByToken(w)
    \/ \E w \in Workers : Die(w)
    \/ \E t \in Ids : Expire(t)
    \/ \E t \in Ids : ReapNoBump(t)
    \/ \E t \in Ids : Tick(t)
    \/ \E t \in Ids : Promote(t)
    \/ \E t \in Ids : RetryDead(t)

ByTokenSpec == Init /\ [][ByTokenNext]_vars
ByTokenNoBumpSpec == Init /\ [][ByTokenNoBumpNext]_vars

ByTokenNothingLost == [](~ENABLED ByTokenNext => Settled)
ByTokenNoBumpNothingLost == [](~ENABLED ByTokenNoBumpNext => Settled)

=============================================================================
