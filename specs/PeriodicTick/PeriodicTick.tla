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
(*              A schedule with no record (never fired, or forgotten)      *)
(*              starts at the clock and fires nothing: RESTART = "now".    *)
(*   Crash(w)   a worker restarts with no view (it proposes from 0).       *)
(*   Forget     forget_schedule.lua: the record goes (`taskq schedules     *)
(*              --forget NAME`), at most MAX_FORGETS times.                *)
(*   Sync       the replica copies the primary (a script's writes travel   *)
(*              together: MULTI/EXEC effects replication).                 *)
(*   Failover   the replica takes over, losing what it had not copied.     *)
(*                                                                         *)
(* Not modelled: the clock of a new primary behind the old one's, grace    *)
(* and the "latest" and "skip" policies (they fire fewer ticks, never      *)
(* more), and MAX_CATCH_UP.                                                *)
(* Checks: OneTaskPerTick (S1) and NoLostTick (every tick after the one   *)
(* the record started at, `since`, up to `last` has its task). Mutants:    *)
(* PeriodicTickCheckThenEnqueue (the check and the create in two steps)    *)
(* and RESTART = "caller" (a schedule with no record fires every due tick  *)
(* after the caller's view, PeriodicTickForgetReplays.cfg). Python         *)
(* transcription: periodic_tick.py.                                        *)
(***************************************************************************)
EXTENDS Naturals

CONSTANTS
    WORKERS,        \* workers firing the schedule
    MAX_TICK,       \* ticks the clock reaches
    MAX_FAILOVERS,  \* failovers that may happen
    MAX_FORGETS,    \* times the record may be forgotten
    RESTART         \* "now" (as built) or "caller" (the mutant): see Fire

Workers == 1..WORKERS
Ticks == 1..MAX_TICK

VARIABLES
    clock,      \* the last tick the server's clock has reached
    last,       \* the schedule's last handled tick, on the primary
    tasks,      \* tasks made per tick, on the primary
    rlast,      \* the replica's copy of last
    rtasks,     \* the replica's copy of tasks
    failovers,  \* failovers so far
    view,       \* each worker's last tick as its previous reply named it
    present,    \* the schedule's record exists, on the primary
    since,      \* the tick the record started at, on the primary
    rpresent,   \* the replica's copy of present
    rsince,     \* the replica's copy of since
    forgets     \* forgets so far

vars == <<clock, last, tasks, rlast, rtasks, failovers, view, present, since, rpresent,
          rsince, forgets>>

TypeOK ==
    /\ clock \in 0..MAX_TICK
    /\ last \in 0..MAX_TICK
    /\ tasks \in [Ticks -> 0..WORKERS]
    /\ rlast \in 0..MAX_TICK
    /\ rtasks \in [Ticks -> 0..WORKERS]
    /\ failovers \in 0..MAX_FAILOVERS
    /\ view \in [Workers -> 0..MAX_TICK]
    /\ present \in BOOLEAN
    /\ since \in 0..MAX_TICK
    /\ rpresent \in BOOLEAN
    /\ rsince \in 0..MAX_TICK
    /\ forgets \in 0..MAX_FORGETS

Init ==
    /\ clock = 0
    /\ last = 0
    /\ tasks = [t \in Ticks |-> 0]
    /\ rlast = 0
    /\ rtasks = [t \in Ticks |-> 0]
    /\ failovers = 0
    /\ view = [w \in Workers |-> 0]
    /\ present = TRUE
    /\ since = 0
    /\ rpresent = TRUE
    /\ rsince = 0
    /\ forgets = 0

Made(low, high) == [t \in Ticks |-> IF low < t /\ t <= high THEN tasks[t] + 1 ELSE tasks[t]]

Tick ==
    /\ clock < MAX_TICK
    /\ clock' = clock + 1
    /\ UNCHANGED <<last, tasks, rlast, rtasks, failovers, view, present, since, rpresent,
                   rsince, forgets>>

\* fire.lua, one atomic step.
Fire(w) ==
    /\ ~(present /\ view[w] = last /\ last = clock)
    /\ IF ~present
       THEN /\ present' = TRUE
            /\ last' = clock
            /\ view' = [view EXCEPT ![w] = clock]
            /\ IF RESTART = "now"
               THEN /\ since' = clock
                    /\ UNCHANGED tasks
               ELSE /\ since' = view[w]
                    /\ tasks' = Made(view[w], clock)
       ELSE /\ UNCHANGED <<present, since>>
            /\ IF view[w] > last \/ last = clock
               THEN /\ view' = [view EXCEPT ![w] = last]
                    /\ UNCHANGED <<last, tasks>>
               ELSE /\ tasks' = Made(last, clock)
                    /\ last' = clock
                    /\ view' = [view EXCEPT ![w] = clock]
    /\ UNCHANGED <<clock, rlast, rtasks, failovers, rpresent, rsince, forgets>>

Crash(w) ==
    /\ view[w] # 0
    /\ view' = [view EXCEPT ![w] = 0]
    /\ UNCHANGED <<clock, last, tasks, rlast, rtasks, failovers, present, since, rpresent,
                   rsince, forgets>>

\* forget_schedule.lua: the record's fields go; the tasks its ticks made stay.
Forget ==
    /\ present
    /\ forgets < MAX_FORGETS
    /\ present' = FALSE
    /\ last' = 0
    /\ since' = 0
    /\ forgets' = forgets + 1
    /\ UNCHANGED <<clock, tasks, rlast, rtasks, failovers, view, rpresent, rsince>>

Sync ==
    /\ <<rlast, rtasks, rpresent, rsince>> # <<last, tasks, present, since>>
    /\ rlast' = last
    /\ rtasks' = tasks
    /\ rpresent' = present
    /\ rsince' = since
    /\ UNCHANGED <<clock, last, tasks, failovers, view, present, since, forgets>>

Failover ==
    /\ failovers < MAX_FAILOVERS
    /\ <<rlast, rtasks, rpresent, rsince>> # <<last, tasks, present, since>>
    /\ last' = rlast
    /\ tasks' = rtasks
    /\ present' = rpresent
    /\ since' = rsince
    /\ failovers' = failovers + 1
    /\ UNCHANGED <<clock, rlast, rtasks, view, rpresent, rsince, forgets>>

Next ==
    \/ Tick
    \/ \E w \in Workers : Fire(w)
    \/ \E w \in Workers : Crash(w)
    \/ Forget
    \/ Sync
    \/ Failover

Spec == Init /\ [][Next]_vars

OneTaskPerTick == \A t \in Ticks : tasks[t] <= 1

\* A forgotten schedule's ticks between its last and the next firing's clock are
\* dropped on purpose; every tick of the record's current life has its task.
NoLostTick == \A t \in Ticks : since < t /\ t <= last => tasks[t] = 1
================================================================================
