---------------------------- MODULE WorkflowEarlyStage ----------------------------
(***************************************************************************)
(* Mutant of Workflow: cancelling a waiting step that is its stage's last  *)
(* settles that stage at once, though the stage was never reached. Cancel  *)
(* both steps of stage 2 while stage 1 is still to run, and the flow ends  *)
(* failed with stage 1's steps pending: FlowEndsLast breaks. The design    *)
(* settles such a stage when the stage before it settles.                  *)
(* Python transcription: workflow.py.                                      *)
(***************************************************************************)
EXTENDS Workflow

EarlyCancelStep(s) ==
    /\ CANCELS /\ state[s] = "waiting"
    /\ EndIf(s, "cancelled", flow = "running")
    /\ UNCHANGED <<token, tries, held, intent>>

EarlyNext ==
    \/ \E w \in Workers, k \in Stages, i \in Members : Lease(w, <<k, i>>)
    \/ \E w \in Workers : Ack(w)
    \/ \E w \in Workers : AckCancelled(w)
    \/ \E w \in Workers : StaleAck(w)
    \/ \E k \in Stages, i \in Members : Expire(<<k, i>>)
    \/ \E w \in Workers : Crash(w)
    \/ CancelFlow
    \/ \E k \in Stages, i \in Members : EarlyCancelStep(<<k, i>>)

EarlySpec == Init /\ [][EarlyNext]_vars

=============================================================================
