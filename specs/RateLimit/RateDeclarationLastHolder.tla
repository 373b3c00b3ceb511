----------------------- MODULE RateDeclarationLastHolder -----------------------
(***************************************************************************)
(* Mutant of RateDeclaration, the first design of the holder: a lease     *)
(* with another declaration defers only while the last worker to apply    *)
(* the stored one is up. When that one worker stops, the next lease of    *)
(* the other deploy takes over and releases the line, though the rest of  *)
(* the first deploy still runs (and may take it back once the taker       *)
(* stops): the rate switches early in a rollout, one release at a time.   *)
(*                                                                         *)
(* The module EXTENDS RateDeclaration: every other action and every check *)
(* are literally the original's.                                           *)
(*                                                                         *)
(* RateDeclarationLastHolder.cfg: KeepsARunningDeploysLimit breaks.       *)
(* Python transcription: rate_declaration.py.                             *)
(***************************************************************************)
EXTENDS RateDeclaration

LastHolderLease(w) == LeaseWith(w, last # NONE /\ last # w /\ up[last])

LastHolderNext ==
    \/ \E w \in Workers : LastHolderLease(w)
    \/ \E w \in Workers : Stop(w)

LastHolderSpec == Init /\ [][LastHolderNext]_vars

=============================================================================
