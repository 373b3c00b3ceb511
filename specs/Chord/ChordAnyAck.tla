------------------------------- MODULE ChordAnyAck -------------------------------
(***************************************************************************)
(* Mutant of Chord: the count bumped by any ack, a stale holder's too, as  *)
(* when a member's result is counted apart from its acknowledgement (the   *)
(* Celery chord counter a redelivered member can bump twice). The count    *)
(* reaches MEMBERS while a member is still running: CallbackAfterAll       *)
(* breaks.                                                                 *)
(* Python transcription: chord.py.                                         *)
(***************************************************************************)
EXTENDS Chord

\* The stale ack still counts: its result arrived.
AnyAckStale(w) ==
    /\ held[w] # Idle /\ ~Current(w)
    /\ held' = [held EXCEPT ![w] = Idle]
    /\ counted' = counted + 1
    /\ IF counted + 1 = MEMBERS
       THEN /\ callback' = callback + 1
            /\ outcome' = "ok"
       ELSE UNCHANGED <<callback, outcome>>
    /\ UNCHANGED <<state, token, tries, ended, intent>>

AnyAckNext ==
    \/ \E w \in Workers, m \in Members : Lease(w, m)
    \/ \E w \in Workers : Ack(w)
    \/ \E w \in Workers : AnyAckStale(w)
    \/ \E m \in Members : Expire(m)
    \/ \E w \in Workers : Crash(w)

AnyAckSpec == Init /\ [][AnyAckNext]_vars

=============================================================================
