----------------------------- MODULE PeriodicTick -----------------------------
(***************************************************************************)
(* Periodic schedules fired by every worker, as built (lua/fire.lua and    *)
(* taskq/worker/periodic.py), with policy "all".                           *)
(*                                                                         *)
(* The server's clock reaches tick `clock`; ticks 1..clock are due. The    *)
(* schedule's record is its last handled tick `last`; `tasks[t]` counts   *)
(* the tasks made for tick t. Each worker keeps `view[w]`, the last tick   *)
(* its previous reply named, and proposes the ticks after it:              *)
(*   Fire(w)    fire.lua in one step: a view later than `last` (Redis lost *)
(*              writes the worker saw) fires nothing and teaches it        *)
(*              `last`; else every due tick after `last` becomes a task    *)
(*              and `last` moves to the clock.                             *)
(*   Crash(w)   a worker restarts with no view (it proposes from 0).       *)
(*   Sync       the replica copies the primary (a script's writes travel   *)
(*              together: MULTI/EXEC effects replication).                 *)
(*   Failover   the replica takes over, losing what it had not copied.     *)
(*                                                                         *)
(* Not modelled: the clock of a new primary behind the old one's, grace    *)
(* and the "latest" and "skip" policies (they fire fewer ticks, never      *)
(* more), and MAX_CATCH_UP.                                                *)
(* Checks: OneTaskPerTick (S1) and NoLostTick (every tick up to `last`     *)
(* has its task). Mutant: PeriodicTickCheckThenEnqueue (the check and the  *)
(* create in two steps). Python transcription: periodic_tick.py.           *)
(***************************************************************************)
EXTENDS Naturals

CONSTANTS
    WORKERS,        \* workers firing the schedule
    MAX_TICK,       \* ticks the clock reaches
    MAX_FAILOVERS   \* failovers that may happen

Workers == 1..WORKERS
Ticks == 1..MAX_TICK

VARIABLES
    clock,      \* the last tick the server's clock has reached
    last,       \* the schedule's last handled tick, on the primary
    tasks,      \* tasks made per tick, on the primary
    rlast,      \* the replica's copy of last
    rtasks,     \* the replica's copy of tasks
    failovers,  \* failovers so far
    view        \* each worker's last tick as its previous reply named it

vars == <<clock, last, tasks, rlast, rtasks, failovers, view>>

TypeOK ==
    /\ clock \in 0..MAX_TICK
    /\ last \in 0..MAX_TICK
    /\ tasks \in [Ticks -> 0..WORKERS]
    /\ rlast \in 0..MAX_TICK
    /\ rtasks \in [Ticks -> 0..WORKERS]
    /\ failovers \in 0..MAX_FAILOVERS
    /\ view \in [Workers -> 0..MAX_TICK]

Init ==
    /\ clock = 0
    /\ last = 0
    /\ tasks = [t \in Ticks |-> 0]
    /\ rlast = 0
    /\ rtasks = [t \in Ticks |-> 0]
    /\ failovers = 0
    /\ view = [w \in Workers |-> 0]

Tick ==
    /\ clock < MAX_TICK
    /\ clock' = clock + 1
    /\ UNCHANGED <<last, tasks, rlast, rtasks, failovers, view>>

\* fire.lua, one atomic step.
Fire(w) ==
    /\ ~(view[w] = last /\ last = clock)
    /\ IF view[w] > last \/ last = clock
       THEN /\ view' = [view EXCEPT ![w] = last]
            /\ UNCHANGED <<last, tasks>>
       ELSE /\ tasks' = [t \in Ticks |-> IF last < t /\ t <= clock
                                         THEN tasks[t] + 1 ELSE tasks[t]]
            /\ last' = clock
            /\ view' = [view EXCEPT ![w] = clock]
    /\ UNCHANGED <<clock, rlast, rtasks, failovers>>

Crash(w) ==
    /\ view[w] # 0
    /\ view' = [view EXCEPT ![w] = 0]
    /\ UNCHANGED <<clock, last, tasks, rlast, rtasks, failovers>>

Sync ==
    /\ <<rlast, rtasks>> # <<last, tasks>>
    /\ rlast' = last
    /\ rtasks' = tasks
    /\ UNCHANGED <<clock, last, tasks, failovers, view>>

Failover ==
    /\ failovers < MAX_FAILOVERS
    /\ <<rlast, rtasks>> # <<last, tasks>>
    /\ last' = rlast
    /\ tasks' = rtasks
    /\ failovers' = failovers + 1
    /\ UNCHANGED <<clock, rlast, rtasks, view>>

Next ==
    \/ Tick
    \/ \E w \in Workers : Fire(w)
    \/ \E w \in Workers : Crash(w)
    \/ Sync
    \/ Failover

Spec == Init /\ [][Next]_vars

OneTaskPerTick == \A t \in Ticks : tasks[t] <= 1

NoLostTick == \A t \in Ticks : t <= last => tasks[t] = 1
================================================================================
