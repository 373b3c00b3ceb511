--------------------------- MODULE RateLimitNoWait ---------------------------
(***************************************************************************)
(* Mutant of RateLimit: lease.lua throttles a task but puts it back on     *)
(* ready rather than on delayed. The next lease pops it before its run_at  *)
(* and throttles it again onto a later slot: a busy loop that pushes the   *)
(* name's next slot on at every lease.                                     *)
(*                                                                         *)
(* The module EXTENDS RateLimit: Tick and every check are literally the    *)
(* original's. Nothing is ever delayed, so Next has no Promote.            *)
(*                                                                         *)
(* RateLimitNoWait.cfg: NoEarlyStart breaks after 4 steps. Python          *)
(* transcription: rate_limit.py.                                           *)
(***************************************************************************)
EXTENDS RateLimit

NoWaitLease(t) == LeaseTo(t, "ready")

NoWaitNext ==
    \/ \E t \in Tasks : NoWaitLease(t)
    \/ Tick

NoWaitSpec == Init /\ [][NoWaitNext]_vars

NoWaitEveryTaskStarts == [](~ENABLED NoWaitNext => AllStarted)

=============================================================================
