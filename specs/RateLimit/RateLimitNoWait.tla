--------------------------- MODULE RateLimitNoWait ---------------------------
(***************************************************************************)
(* Mutant of RateLimit: lease.lua gives a throttled task its slot but puts *)
(* it back on ready rather than on delayed. The next lease pops it and,    *)
(* finding its kept slot, lets it through at once, before its slot.        *)
(*                                                                         *)
(* The module EXTENDS RateLimit: Tick and every check are literally the    *)
(* original's. Nothing is ever delayed, so Next has no Promote.            *)
(*                                                                         *)
(* RateLimitNoWait.cfg: NeverOverRate breaks after 4 steps. Python         *)
(* transcription: rate_limit.py.                                           *)
(***************************************************************************)
EXTENDS RateLimit

NoWaitLease(t) == LeaseWith(t, TRUE, "ready")

NoWaitNext ==
    \/ \E t \in Tasks : NoWaitLease(t)
    \/ Tick

NoWaitSpec == Init /\ [][NoWaitNext]_vars

NoWaitEveryTaskStarts == [](~ENABLED NoWaitNext => AllStarted)

=============================================================================
