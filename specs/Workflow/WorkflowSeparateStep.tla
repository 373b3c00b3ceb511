--------------------------- MODULE WorkflowSeparateStep ---------------------------
(***************************************************************************)
(* Mutant of Workflow: ack.lua only records the step; the worker whose ack *)
(* recorded its stage's last member settles the stage in a step of its own *)
(* afterwards (ChordSeparateStep for a chain). A crash between the two     *)
(* leaves the next stage waiting for ever: FlowNotLost breaks (nothing     *)
(* pending or running, no worker left to trigger it, the flow running).    *)
(* Python transcription: workflow.py.                                      *)
(***************************************************************************)
EXTENDS Workflow

\* The ack records the step and notes the stage the worker still has to settle.
SeparateAck(w) ==
    LET s == held[w][1]
        k == s[1]
    IN /\ held[w] # Idle /\ Current(w)
       /\ held' = [held EXCEPT ![w] = Idle]
       /\ EndIf(s, "completed", FALSE)
       /\ intent' = [intent EXCEPT ![w] =
                        IF s \notin ended /\ counted[k] + 1 = MEMBERS /\ Handles(k)
                        THEN k ELSE 0]
       /\ UNCHANGED <<token, tries>>

\* The separate step: settle the stage the worker noted, if the flow still runs.
SettleLater(w) ==
    LET k == intent[w]
        r == Settle(k, state, triggered, counted, failed)
    IN /\ k # 0
       /\ intent' = [intent EXCEPT ![w] = 0]
       /\ IF flow = "running"
          THEN /\ state' = r.state
               /\ triggered' = r.triggered
               /\ flow' = r.flow
          ELSE UNCHANGED <<state, triggered, flow>>
       /\ UNCHANGED <<token, tries, held, ended, counted, failed>>

SeparateNext ==
    \/ \E w \in Workers, k \in Stages, i \in Members : Lease(w, <<k, i>>)
    \/ \E w \in Workers : SeparateAck(w)
    \/ \E w \in Workers : AckCancelled(w)
    \/ \E w \in Workers : StaleAck(w)
    \/ \E k \in Stages, i \in Members : Expire(<<k, i>>)
    \/ \E w \in Workers : Crash(w)
    \/ CancelFlow
    \/ \E k \in Stages, i \in Members : CancelWaitingStep(<<k, i>>)
    \/ \E w \in Workers : SettleLater(w)

SeparateSpec == Init /\ [][SeparateNext]_vars

=============================================================================
