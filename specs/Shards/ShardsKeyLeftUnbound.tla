------------------------- MODULE ShardsKeyLeftUnbound -------------------------
(***************************************************************************)
(* Mutant of Shards: a send whose key names no task, but whose given id    *)
(* names one, is answered with that task and leaves the key unbound, as    *)
(* enqueue.lua did before bind_key. The next send with the key, carrying   *)
(* another id, finds it free and creates a second task: one key, two       *)
(* answers.                                                                *)
(*                                                                         *)
(* The module EXTENDS Shards: Turn, Ack, Reap and every check are          *)
(* literally the original's.                                               *)
(*                                                                         *)
(* ShardsKeyLeftUnbound.cfg: KeyAnsweredOneTask breaks. Python             *)
(* transcription: shards.py.                                               *)
(***************************************************************************)
EXTENDS Shards

UnboundEnqueueOn(s, i, k) ==
    IF i \in Records(s) /\ ~(k # NoKey /\ keyed[s][k] # None)
    THEN /\ Answer(k, i)
         /\ UNCHANGED <<ready, leased, ended, keyed, token, tries, held, first, skipped,
                        created>>
    ELSE EnqueueOn(s, i, k)

UnboundSend(i, k) ==
    /\ IdFor(i, Home(i, k))
    /\ Fits(i, k)
    /\ UnboundEnqueueOn(Home(i, k), i, k)

KeyLeftUnboundNext ==
    \/ \E i \in Ids : \E k \in KeyOrNone : UnboundSend(i, k)
    \/ \E w \in Workers : Turn(w)
    \/ \E w \in Workers : Ack(w)
    \/ \E s \in Shards : \E i \in Ids : Reap(s, i)

KeyLeftUnboundSpec == Init /\ [][KeyLeftUnboundNext]_vars

=============================================================================
