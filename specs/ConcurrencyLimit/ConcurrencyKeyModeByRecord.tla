--------------------- MODULE ConcurrencyKeyModeByRecord ----------------------
(***************************************************************************)
(* Mutant of ConcurrencyKeyMode: the code before declared groups. A popped *)
(* task is counted against, and parks in, the group of its record's key    *)
(* whatever the declaration, and each group sends back one parked task per *)
(* slot of its own left free. Once a redeploy drops the key, tasks sent    *)
(* with different keys each find their own group's slot free, and a limit  *)
(* of one runs one of them per key.                                        *)
(***************************************************************************)
EXTENDS ConcurrencyKeyMode

ByRecordSent(g) == SentBy(g, RunsIn)

ByRecordLease(w) == LeaseWith(w, Key, RunsIn, ByRecordSent)

ByRecordNext ==
    \/ \E w \in Workers : ByRecordLease(w)
    \/ \E w \in Workers : Ack(w)
    \/ Redeploy
    \/ \E t \in Tasks : Cancel(t)

ByRecordSpec == Init /\ [][ByRecordNext]_vars

=============================================================================
