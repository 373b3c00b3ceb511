------------------------------ MODULE WorkflowAnyAck ------------------------------
(***************************************************************************)
(* Mutant of Workflow: a stale holder's ack counted as its step's end, as  *)
(* when a result is counted apart from its acknowledgement (ChordAnyAck    *)
(* for a chain). Stage 1's count reaches MEMBERS while a member waits to   *)
(* run again, and stage 2 is triggered: TriggerAfterAll breaks.            *)
(* Python transcription: workflow.py.                                      *)
(***************************************************************************)
EXTENDS Workflow

\* The stale ack is refused, but its stage counts it and may settle.
AnyAckStale(w) ==
    LET k == held[w][1][1]
        cnt == [counted EXCEPT ![k] = @ + 1]
        r == Settle(k, state, triggered, cnt, failed)
    IN /\ held[w] # Idle /\ ~Current(w)
       /\ held' = [held EXCEPT ![w] = Idle]
       /\ counted' = cnt
       /\ IF cnt[k] = MEMBERS /\ Handles(k)
          THEN /\ state' = r.state
               /\ triggered' = r.triggered
               /\ flow' = r.flow
          ELSE UNCHANGED <<state, triggered, flow>>
       /\ UNCHANGED <<token, tries, ended, failed, intent>>

AnyAckNext ==
    \/ \E w \in Workers, k \in Stages, i \in Members : Lease(w, <<k, i>>)
    \/ \E w \in Workers : Ack(w)
    \/ \E w \in Workers : AckCancelled(w)
    \/ \E w \in Workers : AnyAckStale(w)
    \/ \E k \in Stages, i \in Members : Expire(<<k, i>>)
    \/ \E w \in Workers : Crash(w)
    \/ CancelFlow
    \/ \E k \in Stages, i \in Members : CancelWaitingStep(<<k, i>>)

AnyAckSpec == Init /\ [][AnyAckNext]_vars

=============================================================================
