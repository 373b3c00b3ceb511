----------------------- MODULE ConcurrencyLimitStaleFree -----------------------
(***************************************************************************)
(* Mutant of ConcurrencyLimit: an ack gives its task's slot back whatever  *)
(* its token, as a script that freed before its fencing check would (or a  *)
(* counter decremented by every ack, as Celery's chord counter is bumped   *)
(* by every result). A reaped task leased again holds a slot; its lost     *)
(* holder's late ack frees that slot, and a third task starts in it.       *)
(*                                                                         *)
(* The module EXTENDS ConcurrencyLimit: Lease, Fail, Crash, Reap and every *)
(* check are literally the original's.                                     *)
(*                                                                         *)
(* ConcurrencyLimitStaleFree.cfg: NeverOverLimit breaks. Python            *)
(* transcription: concurrency_limit.py.                                    *)
(***************************************************************************)
EXTENDS ConcurrencyLimit

StaleFreeAck(w) ==
    LET t == held[w][1] IN
    /\ held[w] # None
    /\ IF Current(w)
       THEN EndLease(t, "done")
       ELSE /\ holding' = holding \ {t}
            /\ UNCHANGED place
    /\ held' = [held EXCEPT ![w] = None]
    /\ UNCHANGED <<token, tries>>

StaleFreeNext ==
    \/ \E w \in Workers : Lease(w)
    \/ \E w \in Workers : StaleFreeAck(w)
    \/ \E w \in Workers : Fail(w)
    \/ \E w \in Workers : Crash(w)
    \/ \E t \in Tasks : Reap(t)

StaleFreeSpec == Init /\ [][StaleFreeNext]_vars

=============================================================================
