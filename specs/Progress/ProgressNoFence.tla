---------------------------- MODULE ProgressNoFence ----------------------------
(***************************************************************************)
(* Mutant of Progress: progress.lua without the token check. A run whose   *)
(* lease was reaped, still reporting, overwrites the progress the current  *)
(* run said, and readers lose it: ShownIsLast breaks.                       *)
(* Python transcription: progress.py.                                      *)
(***************************************************************************)
EXTENDS Progress

NoFenceReport(w, v) == ReportIf(w, v, TRUE)

NoFenceNext ==
    \/ \E w \in Workers : Lease(w)
    \/ \E w \in Workers, v \in Values : NoFenceReport(w, v)
    \/ Expire
    \/ \E w \in Workers : Hear(w)
    \/ \E w \in Workers : Ack(w)

NoFenceSpec == Init /\ [][NoFenceNext]_vars

=============================================================================
