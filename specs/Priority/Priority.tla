------------------------------- MODULE Priority -------------------------------
(***************************************************************************)
(* Priorities within a queue, as the Lua scripts are to build them (issue  *)
(* 18, item 1): strict priority across levels, FIFO within a level.        *)
(*                                                                         *)
(* Each task has a priority in Levels (higher runs first; taskq's levels   *)
(* are 0..9 with default 5), given at enqueue and kept in its record for   *)
(* its whole life. Ready tasks wait in one list per level (the default     *)
(* level's list is the plain `ready` key, the others `ready:<p>`):         *)
(*   Enqueue(p, d)  enqueue.lua: a new task of priority p, to the back of  *)
(*                  its level's list, or with a delay (d) to delayed.      *)
(*   Lease(p)       lease.lua: the scan from the highest level down stops  *)
(*                  at p, the first non-empty list, and takes its front.   *)
(*   Release(t)     release.lua (graceful shutdown): to the FRONT of its   *)
(*                  own level's list; it has already waited.               *)
(*   Fail(t)        fail.lua or reap.lua: to delayed (a retry), or to the  *)
(*                  DLQ; the record keeps its priority either way.         *)
(*   Promote(t)     promote.lua: a delayed task (a delayed enqueue, or a   *)
(*                  retry after its backoff) comes due, to the back of its *)
(*                  own level's list.                                      *)
(*   Ack(t)         ack.lua: completed.                                    *)
(*   RetryDead(t)   retry_dead.lua: from the DLQ to the back of its        *)
(*                  level's list (MAX_REVIVALS in all).                    *)
(*   Cancel(t)      cancel.lua on a pending task: taken out of its level's *)
(*                  list, cancelled.                                       *)
(* Tasks are sent in id order (the n-th send is task n), which only names  *)
(* them; every assignment of priorities is explored, since each send       *)
(* picks any level.                                                        *)
(*                                                                         *)
(* What is left to TaskQueue.tla: tokens and fencing (a stale holder's     *)
(* script changes nothing, so here every holder is current), heartbeats,   *)
(* effects, idempotency keys, retry counts (a fail may retry or bury any   *)
(* number of times), run-at times (a delayed task may come due at any      *)
(* moment), and cancel of a leased, delayed or dead task, which touches no *)
(* list. Worker slots are interchangeable: WORKERS bounds how many tasks   *)
(* are leased at once.                                                     *)
(*                                                                         *)
(* `earlier` is a ghost, the promise FIFO is judged against: <<a, b>> when *)
(* a and b are both waiting, have the same priority, and a entered ready   *)
(* first. An entry at the back comes after every task of its level then    *)
(* waiting; a release's entry at the front comes before every one.         *)
(*                                                                         *)
(* Checks: TypeOK, OnePlace, PriorityKept (invariants), LeasedWasHighest   *)
(* (P1) and FifoWithinLevel (step properties), NothingLost (where a run    *)
(* stops, every task is completed, dead or cancelled).                     *)
(* Mutants: PriorityLowestFirst (the scan starts at the lowest level),     *)
(* PriorityRetryLosesPriority (promote pushes to the default level's       *)
(* list), PriorityReleaseToBack (release pushes to the back).              *)
(* Python transcription: priority.py.                                      *)
(***************************************************************************)
EXTENDS Naturals, Sequences, FiniteSets

CONSTANTS
    TASKS,          \* tasks sent, one after another
    WORKERS,        \* lease slots: at most this many tasks leased at once
    MAX_PRIORITY,   \* the levels are 0..MAX_PRIORITY
    DEFAULT,        \* the default level, whose list is the plain `ready` key
    MAX_REVIVALS    \* retry_dead calls, over all tasks

Tasks == 1..TASKS
Levels == 0..MAX_PRIORITY

VARIABLES
    sent,       \* tasks sent so far: 1..sent have a record
    prio,       \* each task's priority, from its record (DEFAULT before it is sent)
    ready,      \* each level's list of waiting tasks, front first
    leased,     \* tasks leased (the leased ZSET)
    delayed,    \* tasks waiting for their run-at: a delayed enqueue, or a retry
    dlq,        \* dead tasks
    done,       \* completed (acked) tasks
    cancelled,  \* cancelled tasks
    revivals,   \* retry_dead calls so far
    earlier     \* ghost: <<a, b>>, a and b waiting at one priority, a entered first

vars == <<sent, prio, ready, leased, delayed, dlq, done, cancelled, revivals, earlier>>

TypeOK ==
    /\ sent \in 0..TASKS
    /\ prio \in [Tasks -> Levels]
    /\ ready \in [Levels -> Seq(Tasks)]
    /\ leased \subseteq Tasks
    /\ Cardinality(leased) <= WORKERS
    /\ delayed \subseteq Tasks
    /\ dlq \subseteq Tasks
    /\ done \subseteq Tasks
    /\ cancelled \subseteq Tasks
    /\ revivals \in 0..MAX_REVIVALS
    /\ earlier \subseteq Tasks \X Tasks

Init ==
    /\ sent = 0
    /\ prio = [t \in Tasks |-> DEFAULT]
    /\ ready = [p \in Levels |-> <<>>]
    /\ leased = {}
    /\ delayed = {}
    /\ dlq = {}
    /\ done = {}
    /\ cancelled = {}
    /\ revivals = 0
    /\ earlier = {}

\* Tasks in any level's list.
Waiting == {t \in Tasks : \E p \in Levels : \E i \in DOMAIN ready[p] : ready[p][i] = t}

\* The waiting tasks of priority p: who a task of that priority enters beside.
Peers(p) == {r \in Waiting : prio[r] = p}

\* The ghost once t has left ready (leased or cancelled).
Forget(t) == {e \in earlier : e[1] # t /\ e[2] # t}

Without(s, t) == SelectSeq(s, LAMBDA x : x # t)

---------------------------------------------------------------------------
\* the scripts

\* enqueue.lua: the next task, of priority p; to delayed when sent with a delay.
Enqueue(p, d) ==
    /\ sent < TASKS
    /\ LET t == sent + 1
       IN /\ sent' = t
          /\ prio' = [prio EXCEPT ![t] = p]
          /\ IF d
             THEN /\ delayed' = delayed \cup {t}
                  /\ UNCHANGED <<ready, earlier>>
             ELSE /\ ready' = [ready EXCEPT ![p] = Append(@, t)]
                  /\ earlier' = earlier \cup {<<r, t>> : r \in Peers(p)}
                  /\ UNCHANGED delayed
    /\ UNCHANGED <<leased, dlq, done, cancelled, revivals>>

\* lease.lua takes the front of level p's list, where `scannedFirst` says that its
\* scan of the levels stops at p (no list it looks at before p has a task).
LeaseIf(p, scannedFirst) ==
    /\ Cardinality(leased) < WORKERS
    /\ ready[p] # <<>>
    /\ scannedFirst
    /\ LET t == Head(ready[p])
       IN /\ ready' = [ready EXCEPT ![p] = Tail(@)]
          /\ leased' = leased \cup {t}
          /\ earlier' = Forget(t)
    /\ UNCHANGED <<sent, prio, delayed, dlq, done, cancelled, revivals>>

\* As built: the scan goes from the highest level down.
Lease(p) == LeaseIf(p, \A q \in Levels : q > p => ready[q] = <<>>)

\* release.lua: a leased task back to its own level's list, at the front (as
\* built) or the back. Either way it counts as entering before every task of its
\* priority now waiting: it had already waited.
ReleaseTo(t, front) ==
    /\ t \in leased
    /\ leased' = leased \ {t}
    /\ ready' = [ready EXCEPT ![prio[t]] = IF front THEN <<t>> \o @ ELSE Append(@, t)]
    /\ earlier' = earlier \cup {<<t, r>> : r \in Peers(prio[t])}
    /\ UNCHANGED <<sent, prio, delayed, dlq, done, cancelled, revivals>>

Release(t) == ReleaseTo(t, TRUE)

\* fail.lua or reap.lua: a retry waits in delayed, or the task is dead.
Fail(t) ==
    /\ t \in leased
    /\ leased' = leased \ {t}
    /\ \/ /\ delayed' = delayed \cup {t}
          /\ UNCHANGED dlq
       \/ /\ dlq' = dlq \cup {t}
          /\ UNCHANGED delayed
    /\ UNCHANGED <<sent, prio, ready, done, cancelled, revivals, earlier>>

\* ack.lua.
Ack(t) ==
    /\ t \in leased
    /\ leased' = leased \ {t}
    /\ done' = done \cup {t}
    /\ UNCHANGED <<sent, prio, ready, delayed, dlq, cancelled, revivals, earlier>>

\* promote.lua: a delayed task comes due and goes to the back of level p's list
\* (as built, its own priority's).
PromoteTo(t, p) ==
    /\ t \in delayed
    /\ delayed' = delayed \ {t}
    /\ ready' = [ready EXCEPT ![p] = Append(@, t)]
    /\ earlier' = earlier \cup {<<r, t>> : r \in Peers(prio[t])}
    /\ UNCHANGED <<sent, prio, leased, dlq, done, cancelled, revivals>>

Promote(t) == PromoteTo(t, prio[t])

\* retry_dead.lua: a dead task to the back of its level's list.
RetryDead(t) ==
    /\ t \in dlq
    /\ revivals < MAX_REVIVALS
    /\ dlq' = dlq \ {t}
    /\ ready' = [ready EXCEPT ![prio[t]] = Append(@, t)]
    /\ revivals' = revivals + 1
    /\ earlier' = earlier \cup {<<r, t>> : r \in Peers(prio[t])}
    /\ UNCHANGED <<sent, prio, leased, delayed, done, cancelled>>

\* cancel.lua on a pending task: LREM from the list its record's priority names.
Cancel(t) ==
    /\ t \in Waiting
    /\ ready' = [ready EXCEPT ![prio[t]] = Without(@, t)]
    /\ cancelled' = cancelled \cup {t}
    /\ earlier' = Forget(t)
    /\ UNCHANGED <<sent, prio, leased, delayed, dlq, done, revivals>>

Next ==
    \/ \E p \in Levels : \E d \in BOOLEAN : Enqueue(p, d)
    \/ \E p \in Levels : Lease(p)
    \/ \E t \in Tasks : Release(t)
    \/ \E t \in Tasks : Fail(t)
    \/ \E t \in Tasks : Ack(t)
    \/ \E t \in Tasks : Promote(t)
    \/ \E t \in Tasks : RetryDead(t)
    \/ \E t \in Tasks : Cancel(t)

Spec == Init /\ [][Next]_vars

---------------------------------------------------------------------------
\* checks

\* Every position of every list, as <<level, index>>.
Slots == UNION {{<<p, i>> : i \in DOMAIN ready[p]} : p \in Levels}

\* How many times t appears in the lists and the sets, over all of them.
Count(t) ==
    LET one(S) == IF t \in S THEN 1 ELSE 0
    IN Cardinality({s \in Slots : ready[s[1]][s[2]] = t})
           + one(leased) + one(delayed) + one(dlq) + one(done) + one(cancelled)

\* T1 for this model: a sent task is in exactly one place, once; no other task is
\* anywhere.
OnePlace == \A t \in Tasks : Count(t) = IF t <= sent THEN 1 ELSE 0

\* A waiting task is only ever in its own priority's list.
PriorityKept == \A p \in Levels : \A i \in DOMAIN ready[p] : prio[ready[p][i]] = p

\* The tasks a step leases.
NewlyLeased == leased' \ leased

\* P1: a task that becomes leased has a priority >= every task then waiting.
LeasedWasHighest ==
    [][\A t \in NewlyLeased : \A r \in Waiting : prio[r] <= prio[t]]_vars

\* FIFO within a level: no task of its priority that entered ready before it
\* (by the ghost's account, a release entering first) is still waiting.
FifoWithinLevel ==
    [][\A t \in NewlyLeased : \A r \in Tasks : <<r, t>> \notin earlier]_vars

\* Wherever a run stops, every task is completed, dead or cancelled.
Settled == \A t \in Tasks : t \in done \cup dlq \cup cancelled
NothingLost == [](~ENABLED Next => Settled)

=============================================================================
