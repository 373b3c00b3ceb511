--------------------------- MODULE ConcurrencyGroups ---------------------------
(***************************************************************************)
(* How a lease finds the parked tasks it may send back, when a limit is    *)
(* kept per key and so has many groups (`max_concurrency=` with            *)
(* `concurrency_key=`: each account its own group of slots).               *)
(*                                                                         *)
(* lua/lease.lua does not look at every group with waiting tasks (at       *)
(* 20,000 accounts that would hold Redis for a fifth of a second on every  *)
(* poll). It looks at the groups whose slot came free since a lease last   *)
(* looked (`slots_freed`, marked by _slots.lua's free_slot), and at the    *)
(* next SWEEP of the groups with waiting tasks in turn (`parked_sweep`, an *)
(* SSCAN cursor over `parked`). This model checks that a group with a      *)
(* waiting task and a free slot is looked at within a bounded number of    *)
(* leases, whichever way its slot came free: the end of a run (marked), or *)
(* a limit raised by a redeploy (marked by nothing: the sweep finds it).   *)
(*                                                                         *)
(* GROUPS groups, TASKS tasks (task t of group ((t - 1) % GROUPS) + 1),    *)
(* every group `most` slots (1, raised to 2 at most once), WORKERS workers *)
(* leasing one task at a time.                                             *)
(*   Lease(w)   lease.lua for an idle worker, one atomic step: when some   *)
(*              group waits, it looks at the marked groups and the sweep's *)
(*              window, unmarks them and moves the cursor on; each looked  *)
(*              group sends back its oldest parked tasks, one per slot     *)
(*              neither held nor promised to a task sent back before;      *)
(*              then a ready task is popped (any: the Priority model's     *)
(*              concern), and parks (a task sent back goes to the front of *)
(*              its line) with every slot of its group held, or starts. A  *)
(*              worker with no ready task still polls while a group waits. *)
(*   Ack(w)     the run ends and gives its slot back, marking its group    *)
(*              when a task of it waits.                                   *)
(*   Raise      a redeploy raises every group's limit from 1 to 2.         *)
(* Not modelled: fencing, crashes and reaps (ConcurrencyLimit.tla: a reap  *)
(* frees and marks as an ack does); a cancel that drops a promise (it      *)
(* marks, as an ack does); SSCAN's hash-table order (a window over a fixed *)
(* order of the groups: SSCAN returns every member present throughout a    *)
(* full iteration, which is what the window's turn gives here); the 1,000  *)
(* tasks a lease passes at most.                                           *)
(*                                                                         *)
(* Checks: NeverOverLimit (L1 per group), NoneWaitsUnnamed (a group with   *)
(* waiting tasks is in `parked`, so the sweep can reach it),               *)
(* LookedAtInTime (a group that could send a task back is looked at within *)
(* Reach leases), EveryTaskEnds. Mutant: ConcurrencyGroupsNoSweep (only    *)
(* the marked groups looked at). Python transcription:                     *)
(* concurrency_groups.py.                                                  *)
(***************************************************************************)
EXTENDS Naturals, Sequences, FiniteSets

CONSTANTS
    TASKS,      \* tasks of the limited name
    GROUPS,     \* its groups: one per key
    WORKERS,    \* workers leasing
    SWEEP       \* groups a lease sweeps past the marked ones

Tasks == 1..TASKS
Groups == 1..GROUPS
Workers == 1..WORKERS
Group(t) == ((t - 1) % GROUPS) + 1
\* Leases for the sweep's window to pass over every group once.
Reach == (GROUPS + SWEEP - 1) \div SWEEP

VARIABLES
    place,      \* each task: "ready", "back" (sent back, a slot promised to it),
                \* "parked", "leased" or "done"
    line,       \* each group's parked list, oldest first
    waiting,    \* `parked`: the groups named as having waiting tasks
    freed,      \* `slots_freed`: the groups marked since a lease looked
    cursor,     \* `parked_sweep`: where the next sweep starts, 0..GROUPS-1
    most,       \* every group's slots
    held,       \* each worker's task, or 0
    unseen      \* ghost: leases since each group was last looked at, while it
                \* could send a task back

vars == <<place, line, waiting, freed, cursor, most, held, unseen>>

TypeOK ==
    /\ place \in [Tasks -> {"ready", "back", "parked", "leased", "done"}]
    /\ line \in [Groups -> Seq(Tasks)]
    /\ waiting \subseteq Groups
    /\ freed \subseteq Groups
    /\ cursor \in 0..GROUPS - 1
    /\ most \in {1, 2}
    /\ held \in [Workers -> 0..TASKS]
    /\ unseen \in [Groups -> 0..Reach]

Init ==
    /\ place = [t \in Tasks |-> "ready"]
    /\ line = [g \in Groups |-> << >>]
    /\ waiting = {}
    /\ freed = {}
    /\ cursor = 0
    /\ most = 1
    /\ held = [w \in Workers |-> 0]
    /\ unseen = [g \in Groups |-> 0]

Min(a, b) == IF a < b THEN a ELSE b
Of(g, p) == {t \in Tasks : Group(t) = g /\ place[t] = p}
\* The slots of g neither held by a run nor promised to a task sent back.
Free(g) == most - Cardinality(Of(g, "leased")) - Cardinality(Of(g, "back"))
\* g has a waiting task a lease that looked would send back.
Starved(g) == line[g] # << >> /\ Free(g) > 0

---------------------------------------------------------------------------
\* lease.lua

Window == {((cursor + i) % GROUPS) + 1 : i \in 0..SWEEP - 1}
\* The groups a lease looks at (none when no group waits: one SCARD).
Looked == IF waiting = {} THEN {} ELSE freed \cup (Window \cap waiting)
\* How many of g's parked tasks a lease that looks at `looked` sends back.
Sent(g, looked) == IF g \in looked /\ Free(g) > 0 THEN Min(Free(g), Len(line[g])) ELSE 0

\* A lease's pop of t (0: none ready), after its unpark of the groups `looked` left the
\* places p, the lines l and the waiting groups `named`.
Pop(w, looked, t, p, l, named) ==
    /\ IF t = 0
       THEN /\ place' = p /\ line' = l /\ waiting' = named
            /\ UNCHANGED held
       ELSE LET g == Group(t) IN
            IF Cardinality(Of(g, "leased")) >= most
            THEN /\ place' = [p EXCEPT ![t] = "parked"]
                 /\ line' = [l EXCEPT ![g] = IF p[t] = "back" THEN <<t>> \o @
                                               ELSE Append(@, t)]
                 /\ waiting' = named \cup {g}
                 /\ UNCHANGED held
            ELSE /\ place' = [p EXCEPT ![t] = "leased"]
                 /\ line' = l /\ waiting' = named
                 /\ held' = [held EXCEPT ![w] = t]
    /\ freed' = freed \ looked
    /\ cursor' = IF waiting = {} THEN cursor ELSE (cursor + SWEEP) % GROUPS
    /\ unseen' = [g \in Groups |-> IF g \notin looked /\ Starved(g)
                                   THEN unseen[g] + 1 ELSE 0]
    /\ UNCHANGED most

\* Lease(w), looking at the groups `looked`.
LeaseLooking(w, looked) ==
    LET sent == UNION {{line[g][i] : i \in 1..Sent(g, looked)} : g \in Groups}
        p == [t \in Tasks |-> IF t \in sent THEN "back" ELSE place[t]]
        l == [g \in Groups |-> SubSeq(line[g], Sent(g, looked) + 1, Len(line[g]))]
        named == waiting \ {g \in looked : l[g] = << >>}
        ready == {t \in Tasks : p[t] \in {"ready", "back"}}
    IN /\ held[w] = 0
       \* Not written as a disjunction, which TLC takes as a choice of two ways.
       /\ Cardinality(ready) + Cardinality(waiting) > 0
       /\ IF ready = {}
          THEN Pop(w, looked, 0, p, l, named)
          ELSE \E t \in ready : Pop(w, looked, t, p, l, named)

Lease(w) == LeaseLooking(w, Looked)

---------------------------------------------------------------------------
\* the end of a run, and a redeploy

Ack(w) ==
    LET t == held[w] IN
    /\ t # 0
    /\ place' = [place EXCEPT ![t] = "done"]
    /\ held' = [held EXCEPT ![w] = 0]
    /\ freed' = IF line[Group(t)] # << >> THEN freed \cup {Group(t)} ELSE freed
    /\ UNCHANGED <<line, waiting, cursor, most, unseen>>

Raise ==
    /\ most = 1
    /\ most' = 2
    /\ UNCHANGED <<place, line, waiting, freed, cursor, held, unseen>>

Next ==
    \/ \E w \in Workers : Lease(w)
    \/ \E w \in Workers : Ack(w)
    \/ Raise

Spec == Init /\ [][Next]_vars

---------------------------------------------------------------------------
\* checks

\* L1, per group.
NeverOverLimit == \A g \in Groups : Cardinality(Of(g, "leased")) <= most

\* A group with waiting tasks is named in `parked`, where the sweep looks.
NoneWaitsUnnamed == \A g \in Groups : line[g] # << >> => g \in waiting

\* A group that could send a task back is looked at within Reach leases.
LookedAtInTime == \A g \in Groups : unseen[g] < Reach

\* Wherever a run stops, every task has ended.
AllEnded == \A t \in Tasks : place[t] = "done"
EveryTaskEnds == [](~ENABLED Next => AllEnded)

=============================================================================
