-------------------------- MODULE WorkflowIgnoresCancel --------------------------
(***************************************************************************)
(* Mutant of Workflow: ack.lua settles a stage without reading the flow's  *)
(* state. A member whose cancel was requested finishes its run and acks:   *)
(* its stage is settled in a cancelled flow, triggering the next stage (or *)
(* ending the flow completed after the last): CancelStops breaks.          *)
(* Python transcription: workflow.py.                                      *)
(***************************************************************************)
EXTENDS Workflow

EndIgnoringCancel(s, to) == EndIf(s, to, triggered[s[1]] > 0)

IgnoringAck(w) == AckWith(w, "completed", EndIgnoringCancel)

IgnoringNext ==
    \/ \E w \in Workers, k \in Stages, i \in Members : Lease(w, <<k, i>>)
    \/ \E w \in Workers : IgnoringAck(w)
    \/ \E w \in Workers : AckCancelled(w)
    \/ \E w \in Workers : StaleAck(w)
    \/ \E k \in Stages, i \in Members : Expire(<<k, i>>)
    \/ \E w \in Workers : Crash(w)
    \/ CancelFlow
    \/ \E k \in Stages, i \in Members : CancelWaitingStep(<<k, i>>)

IgnoringSpec == Init /\ [][IgnoringNext]_vars

=============================================================================
