------------------------ MODULE ConcurrencyGroupsNoSweep ------------------------
(***************************************************************************)
(* Mutant of ConcurrencyGroups: a lease looks only at the groups marked    *)
(* since the last look, with no sweep. A group whose slot comes free by a  *)
(* raised limit is marked by nothing, and its waiting task is never sent   *)
(* back while its one run lasts.                                           *)
(***************************************************************************)
EXTENDS ConcurrencyGroups

MarkedOnly == IF waiting = {} THEN {} ELSE freed

NoSweepLease(w) == LeaseLooking(w, MarkedOnly)

NoSweepNext ==
    \/ \E w \in Workers : NoSweepLease(w)
    \/ \E w \in Workers : Ack(w)
    \/ Raise

NoSweepSpec == Init /\ [][NoSweepNext]_vars

=============================================================================
