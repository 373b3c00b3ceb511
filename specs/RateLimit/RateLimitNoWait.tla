--------------------------- MODULE RateLimitNoWait ---------------------------
(***************************************************************************)
(* Mutant of RateLimit: lease.lua throttles a task but puts it back on     *)
(* ready rather than on delayed. The next lease pops it before its run_at  *)
(* and throttles it again: a busy loop, each lease giving back the task's  *)
(* slot and handing it another.                                            *)
(*                                                                         *)
(* The module EXTENDS RateLimit: Tick and every check are literally the    *)
(* original's. Nothing is ever delayed, so Next has no Promote.            *)
(*                                                                         *)
(* RateLimitNoWait.cfg: NoEarlyStart breaks after 5 steps. Python          *)
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
