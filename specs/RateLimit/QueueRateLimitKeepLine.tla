------------------------ MODULE QueueRateLimitKeepLine ------------------------
(***************************************************************************)
(* Mutant of QueueRateLimit, taskq before lift_rate_limits.lua: a redeploy *)
(* that removes the name's rate limit leaves its line as it was. No lease  *)
(* applies the limit any more, but each task throttled by it still waits   *)
(* on delayed until the slot it was handed at the old spacing, though no   *)
(* limit in force holds it back. No rate is exceeded and every task still  *)
(* starts, late.                                                           *)
(*                                                                         *)
(* The module EXTENDS QueueRateLimit: every other action and every check   *)
(* are literally the original's.                                           *)
(*                                                                         *)
(* QueueRateLimitKeepLine.cfg: NothingWaitsForARemovedLimit breaks.        *)
(* Python transcription: queue_rate_limit.py.                              *)
(***************************************************************************)
EXTENDS QueueRateLimit

KeepLineRemove == RemoveReleasing(FALSE)

KeepLineNext ==
    \/ \E t \in Tasks : Lease(t)
    \/ \E t \in Tasks : Promote(t)
    \/ Raise
    \/ KeepLineRemove
    \/ Tick

KeepLineSpec == Init /\ [][KeepLineNext]_vars

KeepLineEveryTaskStarts == [](~ENABLED KeepLineNext => AllStarted)

=============================================================================
