------------------------- MODULE RateLimitTakesAgain -------------------------
(***************************************************************************)
(* Mutant of RateLimit: lease.lua ignores the slot a throttled task kept   *)
(* (no rate_slot, or one it does not read) and runs the GCRA step for it   *)
(* again when it is leased after its promotion. The slots taken after its  *)
(* own are ahead of it, so it is throttled again, later each time: it      *)
(* waits more than its slot, and is leased again and again.                *)
(*                                                                         *)
(* The module EXTENDS RateLimit: Promote, Tick and every check are         *)
(* literally the original's.                                               *)
(*                                                                         *)
(* RateLimitTakesAgain.cfg: SlotKept breaks after 7 steps. Python          *)
(* transcription: rate_limit.py.                                           *)
(***************************************************************************)
EXTENDS RateLimit

TakesAgainLease(t) == LeaseWith(t, FALSE, "delayed")

TakesAgainNext ==
    \/ \E t \in Tasks : TakesAgainLease(t)
    \/ \E t \in Tasks : Promote(t)
    \/ Tick

TakesAgainSpec == Init /\ [][TakesAgainNext]_vars

TakesAgainEveryTaskStarts == [](~ENABLED TakesAgainNext => AllStarted)

=============================================================================
