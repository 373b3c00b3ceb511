----------------------- MODULE RateDeclarationEveryLease -----------------------
(***************************************************************************)
(* Mutant of RateDeclaration, taskq before holders: every lease whose      *)
(* declaration differs from the stored one stores its own and releases    *)
(* the line. Two deploys that both keep leasing release each other's line *)
(* at every lease, each waiting task rescheduled again and again, and the *)
(* queue's rate is neither deploy's.                                      *)
(*                                                                         *)
(* The module EXTENDS RateDeclaration: every other action and every check *)
(* are literally the original's.                                           *)
(*                                                                         *)
(* RateDeclarationEveryLease.cfg: NoThrash breaks. Python transcription:  *)
(* rate_declaration.py.                                                    *)
(***************************************************************************)
EXTENDS RateDeclaration

EveryLease(w) == LeaseWith(w, FALSE)

EveryLeaseNext ==
    \/ \E w \in Workers : EveryLease(w)
    \/ \E w \in Workers : Stop(w)

EveryLeaseSpec == Init /\ [][EveryLeaseNext]_vars

=============================================================================
