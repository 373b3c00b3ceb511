--------------------- MODULE TaskQueueTimeOutUnrenewed ---------------------
(***************************************************************************)
(* Time-limit mutant (b), the heartbeat's older rule: a run past its time  *)
(* limit is never renewed, not even while its effect() block, which        *)
(* nothing can stop, is under way. A block longer than the lease outlives  *)
(* it: the lease runs out, the reaper retries the task, and the first      *)
(* block writes its effect after that (another worker may be applying it   *)
(* too). The failure is reported after the block, as built.                *)
(*                                                                         *)
(* TaskQueueTimeOutUnrenewed.cfg checks TaskQueue_TimeLimitHeld.cfg's      *)
(* invariants and properties: EffectWhileHeld breaks in 7 steps (enqueue,  *)
(* lease, confirm, time out, expire, reap, the effect).                    *)
(* Python transcription: task_queue_mutants.py.                            *)
(***************************************************************************)
EXTENDS TaskQueue

HeartbeatUnrenewed(w) == HeartbeatWhile(w, Holds, FALSE)
ExpireUnrenewed(t) == ExpireWhile(t, FALSE)

UnrenewedNext ==
    \/ \E k \in 0..N_KEYS : \E d \in BOOLEAN : Enqueue(k, d)
    \/ \E w \in Workers : Lease(w)
    \/ \E w \in Workers : HeartbeatUnrenewed(w)
    \/ \E w \in Workers : Confirm(w)
    \/ \E w \in Workers : Effect(w)
    \/ \E w \in Workers : Ack(w)
    \/ \E w \in Workers : Fail(w)
    \/ \E w \in Workers : Shutdown(w)
    \/ \E w \in Workers : Die(w)
    \/ \E t \in Ids : ExpireUnrenewed(t)
    \/ \E t \in Ids : Reap(t)
    \/ \E t \in Ids : Tick(t)
    \/ \E t \in Ids : Promote(t)
    \/ \E t \in Ids : RetryDead(t)
    \/ \E t \in Ids : Cancel(t)
    \/ \E w \in Workers : AckCancelled(w)
    \/ \E w \in Workers : TimeOut(w)
    \/ \E w \in Workers : Return(w)
    \/ \E t \in Ids : Throttle(t)

UnrenewedSpec == Init /\ [][UnrenewedNext]_vars

UnrenewedNothingLost == [](~ENABLED UnrenewedNext => Settled)

=============================================================================
