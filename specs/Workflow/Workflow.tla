-------------------------------- MODULE Workflow --------------------------------
(***************************************************************************)
(* A workflow (issue 20, flow-design.md): STAGES stages run one after      *)
(* another, each of MEMBERS steps run in parallel. Chord.tla for a whole   *)
(* chain: the steps of every later stage start `waiting` (in no list,      *)
(* never leased), and the script that records the last member's end of a   *)
(* stage (ack.lua with the current token; reap.lua when it dies; cancel    *)
(* on a waiting step) also, in the same call, settles the stage: the flow  *)
(* completed or failed after the last stage; failed, and every waiting     *)
(* step cancelled, when a member failed and POLICY is fail; else the next  *)
(* stage's waiting steps made pending (triggered), and that stage settled  *)
(* at once if it already ended (its steps all cancelled while waiting).    *)
(* A stage whose input (what the stage before hands on) would make a step  *)
(* of it larger than the payload limit is not triggered: the flow fails,   *)
(* its waiting steps cancelled, as for a failed member (OVERSIZED names    *)
(* that stage in a run; SIZE_CHECK FALSE is the code before the check).    *)
(* Nothing is settled once the flow is not running (cancelled), nor for a  *)
(* stage not yet reached: its turn comes when the stage before settles.    *)
(* cancel_flow.lua is one step: waiting, pending and dead steps cancelled, *)
(* running ones have their cancel requested (here: running in a cancelled  *)
(* flow), so their holder acks them completed or cancelled and a reap     *)
(* ends them cancelled, never retried. The ends a flow's own cancelling    *)
(* writes are not counted: nothing reads a stage's count once the flow     *)
(* has stopped running.                                                    *)
(* A run cut off at a worker's shutdown after its effect() block is acked  *)
(* (running it again would apply the effect twice) with no result: ack.lua *)
(* ends it `cut`, a completed task that its flow counts as failed, since   *)
(* it has nothing to hand on (CUT_FAILS FALSE: the code before, which      *)
(* counted it completed and handed on null in its place).                  *)
(*                                                                         *)
(*   state[s]     waiting | pending | running | completed | cut | dead |   *)
(*                cancelled, for each step s = <<k, i>> (stage, member)    *)
(*   token[s]     its fencing token; tries[s] its reaped attempts          *)
(*   held[w]      <<s, t>>: the run worker w believes it holds; Idle       *)
(*   ended        the steps recorded as ended (end:k:i, set with HSETNX)   *)
(*   counted[k]   ended:k, the ends stage k counted                        *)
(*   failed[k]    failed:k, of those, the ones not completed               *)
(*   triggered[k] how many times stage k was triggered (stage 1 at start)  *)
(*   flow         running | completed | failed | cancelled                 *)
(*   intent[w]    the stage w still means to settle, or 0 (mutant only)    *)
(*                                                                         *)
(* Checks: TriggeredOnce, TriggerAfterAll (only once every step of every   *)
(* stage before ended), NoEarlyRun (no step pending or leased in a stage   *)
(* not triggered), OutcomeRight, FlowEndsLast (completed or failed only    *)
(* once every step ended), FlowNotLost (wherever the workers stop, the     *)
(* flow has ended and nothing waits), CancelStops (once cancelled, the     *)
(* flow stays so and nothing is triggered), OversizedNeverRuns (no step    *)
(* of the OVERSIZED stage is ever pending or leased) and FlowEnds          *)
(* (FlowNotLost as a property, with cancels off, where a run's end is the  *)
(* workers' end).                                                          *)
(* Mutants: WorkflowAnyAck (a stale ack counted), WorkflowSeparateStep     *)
(* (the stage settled by a step after the ack), WorkflowIgnoresCancel      *)
(* (ack.lua settles without reading the flow's state), WorkflowEarlyStage  *)
(* (cancelling a waiting step settles its stage before it is reached),     *)
(* WorkflowUncheckedInput.cfg (SIZE_CHECK FALSE: that stage runs),         *)
(* WorkflowCutHandedOn.cfg (CUT_FAILS FALSE: a flow completes on a cut     *)
(* step's null).                                                           *)
(* Python transcription: workflow.py.                                      *)
(***************************************************************************)
EXTENDS Naturals, FiniteSets

CONSTANTS
    STAGES,     \* stages, run one after another
    MEMBERS,    \* steps per stage, run in parallel
    WORKERS,    \* workers, each with one slot
    RETRIES,    \* reaped attempts a step may have before it dies
    POLICY,     \* "fail" | "partial": what a failed member does to its flow
    CANCELS,    \* whether a user cancels the flow or a waiting step
    OVERSIZED,  \* the stage whose input is over the payload limit; 0: none
    SIZE_CHECK, \* whether settling checks it (FALSE: the code before, a mutant)
    CUT_FAILS   \* whether a cut step counts as failed (FALSE: the code before)

Stages == 1..STAGES
Members == 1..MEMBERS
Steps == Stages \X Members
Workers == 1..WORKERS
Idle == <<<<0, 0>>, 0>>
MaxToken == RETRIES + 1
Ended == {"completed", "cut", "dead", "cancelled"}

\* Whether an end `to` counts as a failed member of its stage: all but a completed
\* step's, a cut one's too (it completed with no result to hand on).
Fails(to) == to # "completed" /\ (CUT_FAILS \/ to # "cut")

VARIABLES state, token, tries, held, ended, counted, failed, triggered, flow, intent

vars == <<state, token, tries, held, ended, counted, failed, triggered, flow, intent>>

TypeOK ==
    /\ state \in [Steps -> {"waiting", "pending", "running"} \cup Ended]
    /\ token \in [Steps -> 0..MaxToken]
    /\ tries \in [Steps -> 0..RETRIES]
    /\ held \in [Workers -> {Idle} \cup (Steps \X (1..MaxToken))]
    /\ ended \subseteq Steps
    /\ counted \in [Stages -> 0..2 * MEMBERS]
    /\ failed \in [Stages -> 0..MEMBERS]
    /\ triggered \in [Stages -> 0..2]
    /\ flow \in {"running", "completed", "failed", "cancelled"}
    /\ intent \in [Workers -> 0..STAGES]

Init ==
    /\ state = [s \in Steps |-> IF s[1] = 1 THEN "pending" ELSE "waiting"]
    /\ token = [s \in Steps |-> 0]
    /\ tries = [s \in Steps |-> 0]
    /\ held = [w \in Workers |-> Idle]
    /\ ended = {}
    /\ counted = [k \in Stages |-> 0]
    /\ failed = [k \in Stages |-> 0]
    /\ triggered = [k \in Stages |-> IF k = 1 THEN 1 ELSE 0]
    /\ flow = "running"
    /\ intent = [w \in Workers |-> 0]

\* Every waiting step of a stage after k, cancelled (the flow failed at k).
CancelLater(k, st) ==
    [s \in Steps |-> IF s[1] > k /\ st[s] = "waiting" THEN "cancelled" ELSE st[s]]

\* Stage k's waiting steps made pending.
Trigger(k, st) == [s \in Steps |-> IF s[1] = k /\ st[s] = "waiting" THEN "pending" ELSE st[s]]

\* What the script does once stage k has every member's end: the steps' states,
\* the triggers and the flow's state it leaves (a trigger leaves the flow's state
\* as it was), reading the stages' counts `cnt` and `fl` as it has just written them.
RECURSIVE Settle(_, _, _, _, _)
Settle(k, st, tr, cnt, fl) ==
    IF k = STAGES
    THEN [state |-> st, triggered |-> tr,
          flow |-> IF fl[k] > 0 /\ POLICY = "fail" THEN "failed" ELSE "completed"]
    ELSE IF fl[k] > 0 /\ POLICY = "fail"
    THEN [state |-> CancelLater(k, st), triggered |-> tr, flow |-> "failed"]
    ELSE IF SIZE_CHECK /\ k + 1 = OVERSIZED /\ \E i \in Members : st[<<k + 1, i>>] = "waiting"
    THEN [state |-> CancelLater(k, st), triggered |-> tr, flow |-> "failed"]
    ELSE LET next == Trigger(k + 1, st)
             tr2 == [tr EXCEPT ![k + 1] = @ + 1]
         IN IF cnt[k + 1] = MEMBERS
            THEN Settle(k + 1, next, tr2, cnt, fl)
            ELSE [state |-> next, triggered |-> tr2, flow |-> flow]

\* Whether the script that ends a member of stage k settles the stage it completes.
Handles(k) == triggered[k] > 0 /\ flow = "running"

\* The script that ends step s as `to`: s recorded once (HSETNX), and, when it is
\* its stage's last end and `settles` holds, the stage settled in the same step.
EndIf(s, to, settles) ==
    LET k == s[1]
        st == [state EXCEPT ![s] = to]
        fresh == s \notin ended
        cnt == [counted EXCEPT ![k] = IF fresh THEN @ + 1 ELSE @]
        fl == [failed EXCEPT ![k] = IF fresh /\ Fails(to) THEN @ + 1 ELSE @]
        r == Settle(k, st, triggered, cnt, fl)
    IN /\ ended' = ended \cup {s}
       /\ counted' = cnt
       /\ failed' = fl
       /\ IF fresh /\ cnt[k] = MEMBERS /\ settles
          THEN /\ state' = r.state
               /\ triggered' = r.triggered
               /\ flow' = r.flow
          ELSE /\ state' = st
               /\ UNCHANGED <<triggered, flow>>

End(s, to) == EndIf(s, to, Handles(s[1]))

Lease(w, s) ==
    /\ state[s] = "pending" /\ held[w] = Idle /\ token[s] < MaxToken
    /\ state' = [state EXCEPT ![s] = "running"]
    /\ token' = [token EXCEPT ![s] = @ + 1]
    /\ held' = [held EXCEPT ![w] = <<s, token[s] + 1>>]
    /\ UNCHANGED <<tries, ended, counted, failed, triggered, flow, intent>>

Current(w) == held[w] # Idle /\ held[w][2] = token[held[w][1]]
                /\ state[held[w][1]] = "running"

\* ack.lua with the current token, through the script's ending `E`.
AckWith(w, to, E(_, _)) ==
    /\ held[w] # Idle /\ Current(w)
    /\ held' = [held EXCEPT ![w] = Idle]
    /\ E(held[w][1], to)
    /\ UNCHANGED <<token, tries, intent>>

Ack(w) == AckWith(w, "completed", End)

\* ack.lua for a run cut off at shutdown after its effect: completed, no result.
AckCut(w) == AckWith(w, "cut", End)

\* ack_cancelled.lua: the holder was told of the flow's cancel and stopped.
AckCancelled(w) == flow = "cancelled" /\ AckWith(w, "cancelled", End)

\* A stale holder's ack (its lease was reaped, the step maybe run again): refused.
StaleAck(w) ==
    /\ held[w] # Idle /\ ~Current(w)
    /\ held' = [held EXCEPT ![w] = Idle]
    /\ UNCHANGED <<state, token, tries, ended, counted, failed, triggered, flow, intent>>

\* The lease runs out (its holder paused, or dead) and is reaped: cancelled when
\* its cancel was requested, else retried, or dead; the holder keeps its stale view.
Expire(s) ==
    /\ state[s] = "running"
    /\ IF flow = "cancelled"
       THEN /\ End(s, "cancelled")
            /\ UNCHANGED tries
       ELSE IF tries[s] < RETRIES /\ token[s] < MaxToken
       THEN /\ state' = [state EXCEPT ![s] = "pending"]
            /\ tries' = [tries EXCEPT ![s] = @ + 1]
            /\ UNCHANGED <<ended, counted, failed, triggered, flow>>
       ELSE /\ End(s, "dead")
            /\ UNCHANGED tries
    /\ UNCHANGED <<token, held, intent>>

\* A worker dies: what it held is left to expire.
Crash(w) ==
    /\ held[w] # Idle \/ intent[w] # 0
    /\ held' = [held EXCEPT ![w] = Idle]
    /\ intent' = [intent EXCEPT ![w] = 0]
    /\ UNCHANGED <<state, token, tries, ended, counted, failed, triggered, flow>>

\* cancel_flow.lua: one script. A dead step ends cancelled too, as cancel.lua ends a
\* task in the DLQ.
CancelFlow ==
    /\ CANCELS /\ flow = "running"
    /\ flow' = "cancelled"
    /\ state' = [s \in Steps |-> IF state[s] \in {"waiting", "pending", "dead"}
                                 THEN "cancelled" ELSE state[s]]
    /\ UNCHANGED <<token, tries, held, ended, counted, failed, triggered, intent>>

\* cancel.lua on one step not running: a waiting one ends, and is counted, before its
\* stage runs; a pending one ends as a failed member of its stage, settling it when it
\* is the last; a dead one, counted when it died, only changes its state.
CancelStep(s) ==
    /\ CANCELS /\ state[s] \in {"waiting", "pending", "dead"}
    /\ End(s, "cancelled")
    /\ UNCHANGED <<token, tries, held, intent>>

\* The cancel of a waiting step alone, as the mutants of other scripts take it: their
\* bugs show without the cancels of pending and dead steps, which only shorten their
\* traces through another path.
CancelWaitingStep(s) == state[s] = "waiting" /\ CancelStep(s)

Next ==
    \/ \E w \in Workers, k \in Stages, i \in Members : Lease(w, <<k, i>>)
    \/ \E w \in Workers : Ack(w)
    \/ \E w \in Workers : AckCut(w)
    \/ \E w \in Workers : AckCancelled(w)
    \/ \E w \in Workers : StaleAck(w)
    \/ \E k \in Stages, i \in Members : Expire(<<k, i>>)
    \/ \E w \in Workers : Crash(w)
    \/ CancelFlow
    \/ \E k \in Stages, i \in Members : CancelStep(<<k, i>>)

Spec == Init /\ [][Next]_vars

---------------------------------------------------------------------------
TriggeredOnce == \A k \in Stages : triggered[k] <= 1

TriggerAfterAll ==
    \A k \in Stages : triggered[k] > 0 => \A s \in Steps : s[1] < k => state[s] \in Ended

NoEarlyRun ==
    \A s \in Steps : (state[s] \in {"pending", "running"} \/ token[s] > 0)
                        => triggered[s[1]] > 0

\* Completed: every step completed (with a result to hand on) under policy fail;
\* under partial, a stage's failed members are handed on, the last stage's as its
\* output, so it only needs every step ended (FlowEndsLast).
OutcomeRight ==
    /\ flow = "completed" => \A s \in Steps : POLICY = "fail" => state[s] = "completed"
    /\ flow = "failed" => \E s \in Steps : state[s] \in {"cut", "dead", "cancelled"}

FlowEndsLast == flow \in {"completed", "failed"} => \A s \in Steps : state[s] \in Ended

\* No step of the stage whose input is too big is ever made pending or leased.
OversizedNeverRuns ==
    \A i \in Members : OVERSIZED \in Stages =>
        state[<<OVERSIZED, i>>] \notin {"pending", "running"} /\ token[<<OVERSIZED, i>>] = 0

\* Once cancelled, the flow stays cancelled and no stage is triggered.
CancelStops == [][flow = "cancelled" => flow' = "cancelled" /\ triggered' = triggered]_vars

\* The flow has ended and no step is left waiting.
FlowDone == flow # "running" /\ \A s \in Steps : state[s] # "waiting"

\* Wherever a run stops, the flow is done. With CANCELS on, CancelFlow is enabled
\* in any state where the flow runs, so this says something only with it off.
FlowEnds == [](~ENABLED Next => FlowDone)

\* The same as a state invariant, which every checker evaluates alike, with or
\* without cancels: once no step is pending or running and no worker holds
\* anything or means to do anything, the flow is done.
Stopped == /\ \A s \in Steps : state[s] \notin {"pending", "running"}
           /\ \A w \in Workers : held[w] = Idle /\ intent[w] = 0
FlowNotLost == Stopped => FlowDone

=============================================================================
