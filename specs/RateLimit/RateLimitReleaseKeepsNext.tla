--------------------- MODULE RateLimitReleaseKeepsNext ----------------------
(***************************************************************************)
(* Mutant of RateLimit: a redeploy that changed the rate releases the      *)
(* waiting line (every throttled task due now, holding no slot) but        *)
(* leaves the next slot S_r where the old line ended. The released tasks   *)
(* and every new one are throttled behind slots no one holds: raising a    *)
(* limit from one an hour to a hundred a second would still hold them      *)
(* back for as many hours as the old line was long.                        *)
(*                                                                         *)
(* The module EXTENDS RateLimit: every other action and every check are    *)
(* literally the original's.                                               *)
(*                                                                         *)
(* RateLimitReleaseKeepsNext.cfg: NoGhostSlot breaks. Python               *)
(* transcription: rate_limit.py.                                           *)
(***************************************************************************)
EXTENDS RateLimit

ReleaseKeepsNext == ReleaseWith(nextSlot)

ReleaseKeepsNextNext ==
    \/ \E t \in Tasks : Lease(t)
    \/ \E t \in Tasks : Promote(t)
    \/ \E t \in Tasks : Cancel(t)
    \/ ReleaseKeepsNext
    \/ Tick

ReleaseKeepsNextSpec == Init /\ [][ReleaseKeepsNextNext]_vars

ReleaseKeepsNextEveryTaskStarts == [](~ENABLED ReleaseKeepsNextNext => AllStarted)

=============================================================================
