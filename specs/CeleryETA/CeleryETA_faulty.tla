------------------------- MODULE CeleryETA_faulty -------------------------
(***************************************************************************)
(* Celery's Redis transport with an ETA task and a visibility timeout:     *)
(* the faulty model, from the project seed.                                *)
(*                                                                         *)
(* The seed shipped this module as MODULE CeleryETA inside a file called   *)
(* celery_eta_visibility_timeout_faulty.tla. SANY refuses a root module    *)
(* whose name differs from its file name, so the module is renamed to      *)
(* match this file. The definitions are the seed's, unchanged.             *)
(*                                                                         *)
(* Check with:  tlc -config CeleryETA.cfg CeleryETA_faulty.tla             *)
(* Python transcription: celery_eta.py (faulty_model).                     *)
(***************************************************************************)
EXTENDS Integers, FiniteSets, TLC

CONSTANTS MaxTasks

\* The timeout returns a task to the ready queue while the worker that
\* picked it up still holds a copy; a second worker can then pick it up
\* and both copies run. readySet and activeSet may therefore share an id.

VARIABLES
    tasks,              \* ids published so far
    readySet,           \* ids a worker may pick up
    activeSet,          \* ids some worker holds in flight
    execCount           \* [id -> Int]: how many times each task ran

AllIds == 0..MaxTasks

Init ==
    /\ tasks = {}
    /\ readySet = {}
    /\ activeSet = {}
    /\ execCount = [id \in AllIds |-> 0]

PublishTask ==
    /\ Cardinality(tasks) < MaxTasks
    /\ \E id \in AllIds \ tasks :
        /\ tasks' = tasks \cup {id}
        /\ readySet' = readySet \cup {id}
        /\ UNCHANGED <<activeSet, execCount>>

PickupTask ==
    /\ \E id \in readySet :
        /\ readySet' = readySet \ {id}
        /\ activeSet' = activeSet \cup {id}
        /\ UNCHANGED <<tasks, execCount>>

\* Nothing stops a held copy from running again: that is the fault.
ExecuteTask ==
    /\ \E id \in activeSet :
        /\ execCount' = [execCount EXCEPT ![id] = execCount[id] + 1]
        /\ UNCHANGED <<tasks, readySet, activeSet>>

AckTask ==
    /\ \E id \in activeSet :
        /\ activeSet' = activeSet \ {id}
        /\ UNCHANGED <<tasks, readySet, execCount>>

\* restore_visible: the task is ready again although a worker still runs it.
VisTimeoutExpired ==
    /\ \E id \in activeSet :
        /\ activeSet' = activeSet \ {id}
        /\ readySet' = readySet \cup {id}
        /\ UNCHANGED <<tasks, execCount>>

Next ==
    \/ PublishTask
    \/ PickupTask
    \/ ExecuteTask
    \/ AckTask
    \/ VisTimeoutExpired

Spec == Init /\ [][Next]_<<tasks, readySet, activeSet, execCount>>

InvariantNoDoubleExecution ==
    \A id \in tasks :
        execCount[id] <= 1

=============================================================================
