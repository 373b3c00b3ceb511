------------------------ MODULE PeriodicTickCheckThenEnqueue ------------------------
(***************************************************************************)
(* Mutant of PeriodicTick: a worker reads the last tick and the clock in   *)
(* one step (Check) and creates the tasks and moves the last tick in       *)
(* another (Enqueue), as a client that checks and then enqueues would. Two *)
(* workers that both check before either enqueues make each tick twice:    *)
(* OneTaskPerTick must be violated.                                        *)
(***************************************************************************)
EXTENDS Naturals

CONSTANTS WORKERS, MAX_TICK, MAX_FAILOVERS

Workers == 1..WORKERS
Ticks == 1..MAX_TICK

VARIABLES clock, last, tasks, rlast, rtasks, failovers, view,
          checked   \* each worker's checked range <<from, to>>, or <<0, 0>> for none

vars == <<clock, last, tasks, rlast, rtasks, failovers, view, checked>>

Init ==
    /\ clock = 0
    /\ last = 0
    /\ tasks = [t \in Ticks |-> 0]
    /\ rlast = 0
    /\ rtasks = [t \in Ticks |-> 0]
    /\ failovers = 0
    /\ view = [w \in Workers |-> 0]
    /\ checked = [w \in Workers |-> <<0, 0>>]

Tick ==
    /\ clock < MAX_TICK
    /\ clock' = clock + 1
    /\ UNCHANGED <<last, tasks, rlast, rtasks, failovers, view, checked>>

\* First step: read the last tick and the clock.
Check(w) ==
    /\ checked[w] = <<0, 0>>
    /\ view[w] <= last
    /\ last < clock
    /\ checked' = [checked EXCEPT ![w] = <<last, clock>>]
    /\ UNCHANGED <<clock, last, tasks, rlast, rtasks, failovers, view>>

\* Second step: create the checked ticks' tasks and move the last tick.
Enqueue(w) ==
    /\ checked[w] # <<0, 0>>
    /\ tasks' = [t \in Ticks |-> IF checked[w][1] < t /\ t <= checked[w][2]
                                 THEN tasks[t] + 1 ELSE tasks[t]]
    /\ last' = checked[w][2]
    /\ view' = [view EXCEPT ![w] = checked[w][2]]
    /\ checked' = [checked EXCEPT ![w] = <<0, 0>>]
    /\ UNCHANGED <<clock, rlast, rtasks, failovers>>

Crash(w) ==
    /\ <<view[w], checked[w]>> # <<0, <<0, 0>>>>
    /\ view' = [view EXCEPT ![w] = 0]
    /\ checked' = [checked EXCEPT ![w] = <<0, 0>>]
    /\ UNCHANGED <<clock, last, tasks, rlast, rtasks, failovers>>

Sync ==
    /\ <<rlast, rtasks>> # <<last, tasks>>
    /\ rlast' = last
    /\ rtasks' = tasks
    /\ UNCHANGED <<clock, last, tasks, failovers, view, checked>>

Failover ==
    /\ failovers < MAX_FAILOVERS
    /\ <<rlast, rtasks>> # <<last, tasks>>
    /\ last' = rlast
    /\ tasks' = rtasks
    /\ failovers' = failovers + 1
    /\ UNCHANGED <<clock, rlast, rtasks, view, checked>>

Next ==
    \/ Tick
    \/ \E w \in Workers : Check(w)
    \/ \E w \in Workers : Enqueue(w)
    \/ \E w \in Workers : Crash(w)
    \/ Sync
    \/ Failover

Spec == Init /\ [][Next]_vars

OneTaskPerTick == \A t \in Ticks : tasks[t] <= 1
=====================================================================================
