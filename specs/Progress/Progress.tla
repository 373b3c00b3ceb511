------------------------------- MODULE Progress -------------------------------
(***************************************************************************)
(* A running task's progress (progress.lua, TaskContext.progress): its     *)
(* handler says how far it has got; the record keeps the value with the   *)
(* token of the run that said it, and readers (the snapshot, the task      *)
(* view) show it only while that run is the current one.                  *)
(*                                                                         *)
(*   token        the task's fencing token (lease: +1; an expired lease    *)
(*                reaped: +1)                                              *)
(*   state        pending | running | completed                            *)
(*   held[w]      the token worker w's run believes it holds (0: none); a  *)
(*                run whose lease was reaped keeps it until it hears so    *)
(*   record       [value, by]: the progress stored and the token it came   *)
(*                with (0, 0: none)                                        *)
(*   last[t]      ghost: the last value the run with token t said (0: none)*)
(*                                                                         *)
(* Actions: Lease(w), Report(w, v) (progress.lua: only while the task runs *)
(* and w's token is the current one), Expire (the lease runs out and is    *)
(* reaped: the task is pending again, its token bumped), Hear(w) (a stale  *)
(* run learns it lost the lease), Ack(w).                                  *)
(*                                                                         *)
(* Checks: NoStaleShown (what a reader shows is what the current run said  *)
(* last, or nothing), ShownIsLast (once the current run has said something,*)
(* a reader shows its last word). Mutants: ProgressNoFence (progress.lua   *)
(* without the token check), ProgressTokenless (the value kept without the *)
(* token of its run, shown whatever run said it).                          *)
(* Python transcription: progress.py.                                      *)
(***************************************************************************)
EXTENDS Naturals

CONSTANTS
    WORKERS,    \* workers that may lease the task
    STEPS,      \* progress values 1..STEPS a run may say
    RUNS        \* leases the task may have

Workers == 1..WORKERS
Values == 1..STEPS
MaxToken == 2 * RUNS
Tokens == 1..MaxToken

VARIABLES token, state, held, record, last

vars == <<token, state, held, record, last>>

TypeOK ==
    /\ token \in 0..MaxToken
    /\ state \in {"pending", "running", "completed"}
    /\ held \in [Workers -> 0..MaxToken]
    /\ record \in [value : 0..STEPS, by : 0..MaxToken]
    /\ last \in [Tokens -> 0..STEPS]

Init ==
    /\ token = 0
    /\ state = "pending"
    /\ held = [w \in Workers |-> 0]
    /\ record = [value |-> 0, by |-> 0]
    /\ last = [t \in Tokens |-> 0]

\* What a reader shows: the stored value while the run that said it is current.
Shown == IF record.by = token /\ record.by # 0 THEN record.value ELSE 0

Lease(w) ==
    /\ state = "pending" /\ held[w] = 0 /\ token + 1 <= MaxToken
    /\ token' = token + 1
    /\ state' = "running"
    /\ held' = [held EXCEPT ![w] = token + 1]
    /\ UNCHANGED <<record, last>>

\* progress.lua as built: recorded only for the current token of a running task.
Accepts(w) == state = "running" /\ held[w] = token

ReportIf(w, v, accepts) ==
    /\ held[w] # 0
    /\ accepts
    /\ record' = [value |-> v, by |-> held[w]]
    /\ last' = [last EXCEPT ![held[w]] = v]
    /\ UNCHANGED <<token, state, held>>

Report(w, v) == ReportIf(w, v, Accepts(w))

Expire ==
    /\ state = "running" /\ token + 1 <= MaxToken
    /\ token' = token + 1
    /\ state' = "pending"
    /\ UNCHANGED <<held, record, last>>

Hear(w) ==
    /\ held[w] # 0 /\ held[w] # token
    /\ held' = [held EXCEPT ![w] = 0]
    /\ UNCHANGED <<token, state, record, last>>

Ack(w) ==
    /\ Accepts(w)
    /\ state' = "completed"
    /\ held' = [held EXCEPT ![w] = 0]
    /\ UNCHANGED <<token, record, last>>

Next ==
    \/ \E w \in Workers : Lease(w)
    \/ \E w \in Workers, v \in Values : Report(w, v)
    \/ Expire
    \/ \E w \in Workers : Hear(w)
    \/ \E w \in Workers : Ack(w)

Spec == Init /\ [][Next]_vars

---------------------------------------------------------------------------
\* The current run's last word, or 0 before it says anything (or with no run).
Current == IF token = 0 THEN 0 ELSE last[token]

NoStaleShown == Shown # 0 => Shown = Current

ShownIsLast == (state = "running" /\ Current # 0) => Shown = Current

=============================================================================
