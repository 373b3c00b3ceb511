----------------------- MODULE CeleryETA_idempotent -----------------------
(***************************************************************************)
(* Celery's Redis transport with an ETA task and a visibility timeout:     *)
(* the seed's fix, an idempotency guard on execution.                      *)
(*                                                                         *)
(* The seed shipped this module as MODULE CeleryETA inside a file called   *)
(* celery_eta_visibility_timeout_idempotent.tla. SANY refuses a root       *)
(* module whose name differs from its file name, so the module is renamed  *)
(* to match this file. The definitions are the seed's, unchanged.          *)
(*                                                                         *)
(* Check with:  tlc -config CeleryETA.cfg CeleryETA_idempotent.tla         *)
(*   (TLC then stops with "Deadlock reached": see README.md), or with      *)
(*   CeleryETA_NoDeadlock.cfg for the complete state space.                *)
(* Python transcription: celery_eta.py (idempotent_model).                 *)
(***************************************************************************)
EXTENDS Integers, FiniteSets, TLC

CONSTANTS MaxTasks

VARIABLES
    tasks, readySet, activeSet, execCount

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

\* The guard: a copy runs the task only if no copy has run it yet.
ExecuteTask ==
    /\ \E id \in activeSet :
        /\ execCount[id] = 0
        /\ execCount' = [execCount EXCEPT ![id] = 1]
        /\ UNCHANGED <<tasks, readySet, activeSet>>

\* A later copy finds the task already run and only acknowledges it.
AckWithoutExecute ==
    /\ \E id \in activeSet :
        /\ execCount[id] > 0
        /\ activeSet' = activeSet \ {id}
        /\ UNCHANGED <<tasks, readySet, execCount>>

AckTask ==
    /\ \E id \in activeSet :
        /\ activeSet' = activeSet \ {id}
        /\ UNCHANGED <<tasks, readySet, execCount>>

VisTimeoutExpired ==
    /\ \E id \in activeSet :
        /\ activeSet' = activeSet \ {id}
        /\ readySet' = readySet \cup {id}
        /\ UNCHANGED <<tasks, execCount>>

Next ==
    \/ PublishTask
    \/ PickupTask
    \/ ExecuteTask
    \/ AckWithoutExecute
    \/ AckTask
    \/ VisTimeoutExpired

Spec == Init /\ [][Next]_<<tasks, readySet, activeSet, execCount>>

InvariantNoDoubleExecution ==
    \A id \in tasks :
        execCount[id] <= 1

=============================================================================
