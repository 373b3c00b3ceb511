----------------------- MODULE TaskQueueConfirmAtomic -----------------------
(***************************************************************************)
(* TaskQueue with the lease's confirmation and the effect as one step      *)
(* (ConfirmAndApply): no pause can fall between them. Not taskq as built   *)
(* (a process can always stop after its check and before its write): a     *)
(* variant that shows what closing that window would and would not buy.    *)
(*                                                                         *)
(* TaskQueueConfirmAtomic.cfg: every effect is applied while its run holds *)
(* the lease (EffectWhileHeld), which TaskQueue_EffectWhileHeld.cfg shows  *)
(* broken by the window as built. TaskQueueConfirmAtomic_GuardNone.cfg:    *)
(* with no ledger guard, no SIGKILL and no handler raising after its       *)
(* effect, T4 still breaks: a worker paused after its effect and before    *)
(* its ack is reaped, and the task runs again. Only the guard makes the    *)
(* effect single. Python transcription: task_queue_mutants.py.             *)
(***************************************************************************)
EXTENDS TaskQueue

AtomicNext ==
    \/ \E k \in 0..N_KEYS : \E d \in BOOLEAN : Enqueue(k, d)
    \/ \E w \in Workers : Lease(w)
    \/ \E w \in Workers : Heartbeat(w)
    \/ \E w \in Workers : ConfirmAndApply(w)
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

AtomicSpec == Init /\ [][AtomicNext]_vars

AtomicNothingLost == [](~ENABLED AtomicNext => Settled)

=============================================================================
