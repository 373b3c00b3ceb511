--------------------------- MODULE ConcurrencyLimit ---------------------------
(***************************************************************************)
(* Concurrency limits that hold across all workers: the slots of a task    *)
(* name, taken in lua/lease.lua and given back by the script that ends a   *)
(* lease (see lua/_slots.lua's free_slot).                                 *)
(*                                                                         *)
(* One limited name with MOST slots; TASKS tasks of it, all ready at the   *)
(* start; WORKERS workers, each leasing one task at a time. Redis keeps    *)
(* `holding`, the name's SET of tasks whose run holds a slot, and each     *)
(* task's fencing token.                                                   *)
(*   Lease(w)   lease.lua for an idle worker w, one atomic step: first     *)
(*              parked tasks go back to ready, as many as slots are free   *)
(*              (which ones is the Priority model's concern: any here);    *)
(*              then a ready task t is popped. With every slot held, t is  *)
(*              parked; else t starts: a new token, t joins `holding`, w   *)
(*              holds <<t, token>>.                                        *)
(*   Ack(w), Fail(w)   w settles its run: with the current token, t ends   *)
(*              (or goes back to ready to retry, or dies out of retries)   *)
(*              and leaves `holding`; with a stale token, nothing changes. *)
(*   Crash(w)   w forgets its run (killed, or paused for good): its lease  *)
(*              stays until reaped.                                        *)
(*   Reap(t)    t's lease expired (at any time: a holder may be paused     *)
(*              past it): a new token, t leaves `holding`, and retries or  *)
(*              dies. The holder, if any, keeps its now stale lease.       *)
(* Not modelled: release, ack_cancelled and a fail to the DLQ, which free  *)
(* a slot exactly as Fail does; the wake-up a freed slot pushes (a worker  *)
(* that sleeps through it leases at its next poll); delays before a retry  *)
(* (the RateLimit and TaskQueue models have the clock); other names, and   *)
(* each key of a limit kept per key (its own group of slots, as a name     *)
(* here). lease.lua sends back no more parked tasks than the slots left    *)
(* after those promised to tasks it sent back before and no lease has      *)
(* popped yet, a lease looks at no more than 1,000 waiting tasks, and at   *)
(* the groups whose slot came free since and 100 others in turn rather     *)
(* than every group (with the one group here, every lease looks at it):    *)
(* all are restrictions of Lease here (fewer tasks sent back, a lease that *)
(* stops early), so every check below holds for them.                      *)
(*                                                                         *)
(* Checks: NeverOverLimit (L1: at most MOST tasks hold leases),            *)
(* SlotsAreLeases (`holding` is exactly the leased tasks), EveryTaskEnds   *)
(* (wherever a run stops, every task has ended: a parked task is never     *)
(* stranded). Mutants: ConcurrencyLimitStaleFree (a settle frees the slot  *)
(* whatever its token), ConcurrencyLimitCheckThenTake (the slots counted   *)
(* in one call and taken in another, as a limiter outside the lease script *)
(* would). Python transcription: concurrency_limit.py.                     *)
(***************************************************************************)
EXTENDS Naturals, FiniteSets

CONSTANTS
    TASKS,      \* tasks of the one limited name
    MOST,       \* its slots: max_concurrency
    WORKERS,    \* workers leasing
    RETRIES     \* failed or reaped attempts a task may have before it dies

Tasks == 1..TASKS
Workers == 1..WORKERS
None == <<0, 0>>
Ended == {"done", "dead"}

VARIABLES
    place,      \* each task: "ready", "parked", "leased", "done" or "dead"
    token,      \* each task's fencing token
    tries,      \* each task's failed or reaped attempts
    holding,    \* the tasks whose run holds one of the name's slots
    held        \* each worker's run: <<task, token>>, or None

vars == <<place, token, tries, holding, held>>

MaxToken == 2 * (RETRIES + 1)

TypeOK ==
    /\ place \in [Tasks -> {"ready", "parked", "leased", "done", "dead"}]
    /\ token \in [Tasks -> 0..MaxToken]
    /\ tries \in [Tasks -> 0..RETRIES + 1]
    /\ holding \subseteq Tasks
    /\ held \in [Workers -> {None} \cup (Tasks \X (1..MaxToken))]

Init ==
    /\ place = [t \in Tasks |-> "ready"]
    /\ token = [t \in Tasks |-> 0]
    /\ tries = [t \in Tasks |-> 0]
    /\ holding = {}
    /\ held = [w \in Workers |-> None]

Parked == {t \in Tasks : place[t] = "parked"}
Free == MOST - Cardinality(holding)
Min(a, b) == IF a < b THEN a ELSE b
\* How many parked tasks a lease sends back to ready: one per free slot.
Unparking == IF Free > 0 THEN Min(Free, Cardinality(Parked)) ELSE 0

---------------------------------------------------------------------------
\* lease.lua

\* t, popped from ready (after the unpark: places `p`), starts or is parked,
\* by the slots counted as `inUse`.
Take(w, t, p, inUse) ==
    IF inUse >= MOST
    THEN /\ place' = [p EXCEPT ![t] = "parked"]
         /\ UNCHANGED <<token, tries, holding, held>>
    ELSE /\ place' = [p EXCEPT ![t] = "leased"]
         /\ token' = [token EXCEPT ![t] = @ + 1]
         /\ holding' = holding \cup {t}
         /\ held' = [held EXCEPT ![w] = <<t, token[t] + 1>>]
         /\ UNCHANGED tries

Lease(w) ==
    /\ held[w] = None
    /\ \E U \in SUBSET Parked :
         /\ Cardinality(U) = Unparking
         /\ LET p == [t \in Tasks |-> IF t \in U THEN "ready" ELSE place[t]]
            IN \E t \in Tasks : p[t] = "ready" /\ Take(w, t, p, Cardinality(holding))

---------------------------------------------------------------------------
\* the scripts that end a lease, and faults

\* Whether w's run is still the current lease of its task.
Current(w) == place[held[w][1]] = "leased" /\ token[held[w][1]] = held[w][2]

\* t's lease ends: it goes to `to`, giving its slot back.
EndLease(t, to) ==
    /\ place' = [place EXCEPT ![t] = to]
    /\ holding' = holding \ {t}

Retry(t) == IF tries[t] < RETRIES THEN "ready" ELSE "dead"

Ack(w) ==
    /\ held[w] # None
    /\ IF Current(w) THEN EndLease(held[w][1], "done") ELSE UNCHANGED <<place, holding>>
    /\ held' = [held EXCEPT ![w] = None]
    /\ UNCHANGED <<token, tries>>

Fail(w) ==
    LET t == held[w][1] IN
    /\ held[w] # None
    /\ IF Current(w)
       THEN EndLease(t, Retry(t)) /\ tries' = [tries EXCEPT ![t] = @ + 1]
       ELSE UNCHANGED <<place, holding, tries>>
    /\ held' = [held EXCEPT ![w] = None]
    /\ UNCHANGED token

Crash(w) ==
    /\ held[w] # None
    /\ held' = [held EXCEPT ![w] = None]
    /\ UNCHANGED <<place, token, tries, holding>>

Reap(t) ==
    /\ place[t] = "leased"
    /\ EndLease(t, Retry(t))
    /\ token' = [token EXCEPT ![t] = @ + 1]
    /\ tries' = [tries EXCEPT ![t] = @ + 1]
    /\ UNCHANGED held

Next ==
    \/ \E w \in Workers : Lease(w)
    \/ \E w \in Workers : Ack(w)
    \/ \E w \in Workers : Fail(w)
    \/ \E w \in Workers : Crash(w)
    \/ \E t \in Tasks : Reap(t)

Spec == Init /\ [][Next]_vars

---------------------------------------------------------------------------
\* checks

Leased == {t \in Tasks : place[t] = "leased"}

\* L1: never more runs hold leases than the name has slots. (A paused holder
\* may still run past its reaped lease: exactly-once execution is not
\* promised, and its effect is fenced.)
NeverOverLimit == Cardinality(Leased) <= MOST

\* The slots Redis counts are exactly the leases that hold them.
SlotsAreLeases == holding = Leased

\* Wherever a run stops, every task has ended: no task waits parked for ever.
AllEnded == \A t \in Tasks : place[t] \in Ended
EveryTaskEnds == [](~ENABLED Next => AllEnded)

=============================================================================
