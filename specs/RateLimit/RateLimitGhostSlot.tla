-------------------------- MODULE RateLimitGhostSlot --------------------------
(***************************************************************************)
(* Mutant of RateLimit, the design before reservations were kept: a       *)
(* throttled task that is cancelled, or leased again, leaves the name's    *)
(* next slot S_r where it was. Every task throttled after it waits behind  *)
(* a slot no one will take: cancel a thousand throttled tasks of a name    *)
(* limited to one a second, and the next one throttled waits a quarter of  *)
(* an hour for nothing. The rate is never exceeded (every start still      *)
(* passes GCRA at its own time): the slots are lost, not the promise.      *)
(*                                                                         *)
(* The module EXTENDS RateLimit: every other action and every check are    *)
(* literally the original's.                                               *)
(*                                                                         *)
(* RateLimitGhostSlot.cfg: NoGhostSlot breaks. Python transcription:       *)
(* rate_limit.py.                                                          *)
(***************************************************************************)
EXTENDS RateLimit

GhostLease(t) ==
    /\ place[t] = "ready"
    /\ Gcra(t, startAt, nextSlot, "delayed")
    /\ UNCHANGED <<now, releases>>

GhostCancel(t) == CancelWith(t, nextSlot)

GhostSlotNext ==
    \/ \E t \in Tasks : GhostLease(t)
    \/ \E t \in Tasks : Promote(t)
    \/ \E t \in Tasks : GhostCancel(t)
    \/ Tick

GhostSlotSpec == Init /\ [][GhostSlotNext]_vars

GhostSlotEveryTaskStarts == [](~ENABLED GhostSlotNext => AllStarted)

=============================================================================
