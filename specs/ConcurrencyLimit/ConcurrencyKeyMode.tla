------------------------- MODULE ConcurrencyKeyMode --------------------------
(***************************************************************************)
(* A concurrency limit whose declaration a redeploy flips between kept per *)
(* key and not, while tasks of it wait and run (`max_concurrency=` with or *)
(* without `concurrency_key=`: each key, e.g. an account, its own group of *)
(* slots, or one group for the name).                                      *)
(*                                                                         *)
(* Each task's record keeps the key it was sent with, or none (key 0). A   *)
(* run holds its slot in the group of its record's key whatever the        *)
(* declaration (`holding:<name>` with no key, `holding:<name>|<k>`, and    *)
(* `keyed:<name>` for every keyed run), so a lease counts exactly the runs *)
(* a declaration bounds: all of the name's when the limit is not kept per  *)
(* key, those of the task's key (or of no key) when it is. A task that     *)
(* must wait does so in its DECLARED group: the name's list when the limit *)
(* is not kept per key, whatever its record says.                          *)
(*                                                                         *)
(* TASKS tasks (task t sent with key t % (KEYS + 1)), MOST slots, WORKERS  *)
(* workers leasing one task at a time, the limit kept per key at first.    *)
(*   Lease(w)   lease.lua for an idle worker, one atomic step: every group *)
(*              sends back its oldest parked tasks, one per slot neither   *)
(*              counted nor promised to a task sent back before (a keyed   *)
(*              group while the limit is not kept per key, which no        *)
(*              declared task waits in, sends back all of them, to be      *)
(*              regrouped); then a ready task is popped (any: the Priority *)
(*              model's concern), its promise dropped, and it starts, or   *)
(*              parks in its declared group (a task sent back at the front *)
(*              of its line). A lease that would send back none and pop    *)
(*              none changes nothing and is left out, so that a task no    *)
(*              lease would send back shows as a state where nothing can   *)
(*              happen.                                                    *)
(*   Ack(w)     the run ends and gives its slot back.                      *)
(*   Redeploy   the declaration flips, at most FLIPS times.                *)
(*   Cancel(t)  a parked or sent-back task ends (MAX_CANCELS at most):     *)
(*              _cancel.lua looks for it in its record's group's list,     *)
(*              then in the name's, and drops its promise from both.       *)
(* Not modelled: which groups a lease looks at (ConcurrencyGroups.tla: the *)
(* marked ones and a sweep; here every one, every lease) and the marks     *)
(* that a run's end or a cancel leaves; fencing, crashes and reaps         *)
(* (ConcurrencyLimit.tla); the limit's size changed by a redeploy.         *)
(*                                                                         *)
(* Checks: PerKeyNeverOverLimit (L1 per key, either way declared),         *)
(* UnkeyedNeverOverLimit (L1 for the name while the limit is not kept per  *)
(* key, counting the runs started since the redeploy: runs a keyed         *)
(* declaration started still run, as after a lowered limit),               *)
(* WaitsWhereCancelLooks (where _cancel.lua looks, every waiting task is   *)
(* found, once), NoneStranded (where no lease and no run's end can happen, *)
(* whatever the declaration, every task has ended), EveryTaskEnds. Mutant: *)
(* ConcurrencyKeyModeByRecord (a popped task counted and parked by its     *)
(* record's key whatever the declaration). Python transcription:           *)
(* concurrency_key_mode.py.                                                *)
(***************************************************************************)
EXTENDS Naturals, Sequences, FiniteSets

CONSTANTS
    TASKS,      \* tasks of the limited name
    KEYS,       \* the keys they are sent with, 1..KEYS, or none (0)
    WORKERS,    \* workers leasing
    MOST,       \* the limit's slots, per group
    FLIPS,      \* redeploys that flip the declaration, at most
    MAX_CANCELS \* parked or sent-back tasks cancelled, at most

Tasks == 1..TASKS
Workers == 1..WORKERS
\* Group 0 is the name's own (its tasks with no key, or all of them when the limit is
\* not kept per key); group k the name's and key k's.
Groups == 0..KEYS
Key(t) == t % (KEYS + 1)

VARIABLES
    place,      \* each task: "ready", "back" (sent back, a slot promised to it),
                \* "parked", "leased", "done" or "cancelled"
    line,       \* each group's parked list, oldest first
    promised,   \* `unparked:<group>`: each group's tasks sent back, not yet popped
    keyed,      \* the declaration: the limit is kept per key
    flips,      \* redeploys so far
    held,       \* each worker's task, or 0
    fresh       \* ghost: the runs started since the last redeploy

vars == <<place, line, promised, keyed, flips, held, fresh>>

TypeOK ==
    /\ place \in [Tasks -> {"ready", "back", "parked", "leased", "done", "cancelled"}]
    /\ line \in [Groups -> Seq(Tasks)]
    /\ promised \in [Groups -> SUBSET Tasks]
    /\ keyed \in BOOLEAN
    /\ flips \in 0..FLIPS
    /\ held \in [Workers -> 0..TASKS]
    /\ fresh \subseteq Tasks

Init ==
    /\ place = [t \in Tasks |-> "ready"]
    /\ line = [g \in Groups |-> << >>]
    /\ promised = [g \in Groups |-> {}]
    /\ keyed = TRUE
    /\ flips = 0
    /\ held = [w \in Workers |-> 0]
    /\ fresh = {}

Min(a, b) == IF a < b THEN a ELSE b
Has(s, t) == \E i \in 1..Len(s) : s[i] = t
Without(s, t) == LET Other(u) == u # t IN SelectSeq(s, Other)

\* The runs holding a slot of group g: `holding:<name>` for g = 0, else
\* `holding:<name>|<g>`.
Runs(g) == {t \in Tasks : place[t] = "leased" /\ Key(t) = g}
\* `keyed:<name>`: the runs holding a slot of a keyed group.
KeyedRuns == {t \in Tasks : place[t] = "leased" /\ Key(t) # 0}
RunsIn(g) == Cardinality(Runs(g))
\* _slots.lua's runs_counted: the runs a task waiting in group g is judged against.
Counted(g) == IF keyed THEN RunsIn(g) ELSE RunsIn(0) + Cardinality(KeyedRuns)
\* _slots.lua's declared_group: the group a task is judged in, and waits in.
Declared(t) == IF keyed THEN Key(t) ELSE 0
\* The slots of g neither counted against its tasks nor promised.
FreeBy(g, Count(_)) == MOST - Count(g) - Cardinality(promised[g])
SentBy(g, Count(_)) ==
    IF FreeBy(g, Count) > 0 THEN Min(FreeBy(g, Count), Len(line[g])) ELSE 0
\* How many of g's parked tasks a lease sends back.
Sent(g) == IF ~keyed /\ g # 0 THEN Len(line[g]) ELSE SentBy(g, Counted)

---------------------------------------------------------------------------
\* lease.lua

\* A lease's pop of t after its unpark left the places p, the lines l and the promises
\* pr: t is judged in group Home(t) against Count(Home(t)) runs.
Pop(w, t, p, l, pr, Home(_), Count(_)) ==
    LET g == Home(t)
        kept == [h \in Groups |-> IF h \in {Key(t), 0} THEN pr[h] \ {t} ELSE pr[h]]
    IN /\ promised' = kept
       /\ IF Count(g) >= MOST
          THEN /\ place' = [p EXCEPT ![t] = "parked"]
               /\ line' = [l EXCEPT ![g] = IF p[t] = "back" THEN <<t>> \o @
                                             ELSE Append(@, t)]
               /\ UNCHANGED <<held, fresh>>
          ELSE /\ place' = [p EXCEPT ![t] = "leased"]
               /\ line' = l
               /\ held' = [held EXCEPT ![w] = t]
               /\ fresh' = fresh \cup {t}
       /\ UNCHANGED <<keyed, flips>>

\* Lease(w): each group g sends back its Send(g) oldest parked tasks, then a ready task
\* is popped and judged as Pop says.
LeaseWith(w, Home(_), Count(_), Send(_)) ==
    LET n == [g \in Groups |-> Send(g)]
        sent(g) == {line[g][i] : i \in 1..n[g]}
        back == UNION {sent(g) : g \in Groups}
        p == [t \in Tasks |-> IF t \in back THEN "back" ELSE place[t]]
        l == [g \in Groups |-> SubSeq(line[g], n[g] + 1, Len(line[g]))]
        pr == [g \in Groups |-> promised[g] \cup sent(g)]
        ready == {t \in Tasks : p[t] \in {"ready", "back"}}
    IN /\ held[w] = 0
       /\ \E t \in ready : Pop(w, t, p, l, pr, Home, Count)

Lease(w) == LeaseWith(w, Declared, Counted, Sent)

---------------------------------------------------------------------------
\* the end of a run, a redeploy, a cancel

Ack(w) ==
    LET t == held[w] IN
    /\ t # 0
    /\ place' = [place EXCEPT ![t] = "done"]
    /\ held' = [held EXCEPT ![w] = 0]
    /\ fresh' = fresh \ {t}
    /\ UNCHANGED <<line, promised, keyed, flips>>

Redeploy ==
    /\ flips < FLIPS
    /\ keyed' = ~keyed
    /\ flips' = flips + 1
    /\ fresh' = {}
    /\ UNCHANGED <<place, line, promised, held>>

\* _cancel.lua: the list of t's record's group, failing that the name's.
Looked(t) == IF Has(line[Key(t)], t) THEN Key(t) ELSE 0

Cancel(t) ==
    /\ place[t] \in {"parked", "back"}
    /\ Cardinality({u \in Tasks : place[u] = "cancelled"}) < MAX_CANCELS
    /\ place' = [place EXCEPT ![t] = "cancelled"]
    /\ line' = [line EXCEPT ![Looked(t)] = Without(@, t)]
    /\ promised' = [g \in Groups |-> IF g \in {Key(t), 0} THEN promised[g] \ {t}
                                     ELSE promised[g]]
    /\ UNCHANGED <<keyed, flips, held, fresh>>

Next ==
    \/ \E w \in Workers : Lease(w)
    \/ \E w \in Workers : Ack(w)
    \/ Redeploy
    \/ \E t \in Tasks : Cancel(t)

Spec == Init /\ [][Next]_vars

---------------------------------------------------------------------------
\* checks

\* L1 per key, and for the tasks sent with none: it holds either way declared, since a
\* start not kept per key counts every run.
PerKeyNeverOverLimit == \A g \in Groups : RunsIn(g) <= MOST

\* L1 for the name while its limit is not kept per key, over the runs started since the
\* last redeploy.
UnkeyedNeverOverLimit == ~keyed => Cardinality(fresh) <= MOST

\* Where _cancel.lua looks finds every waiting task, in one place: a parked task in
\* its record's group's list or the name's, a sent-back one promised in one of those
\* two; a task in at most one list, once; only parked tasks in lists, only sent-back
\* tasks promised.
Copies(t) == Cardinality(UNION {{<<g, i>> : i \in {j \in 1..Len(line[g]) : line[g][j] = t}}
                                 : g \in Groups})
WaitsWhereCancelLooks ==
    \A t \in Tasks :
        /\ Copies(t) = IF place[t] = "parked" THEN 1 ELSE 0
        /\ place[t] = "parked" => Has(line[Key(t)], t) \/ Has(line[0], t)
        /\ \A g \in Groups : t \in promised[g] => place[t] = "back"
        /\ place[t] = "back" => t \in promised[Key(t)] \cup promised[0]

\* Wherever a run stops, every task has ended.
AllEnded == \A t \in Tasks : place[t] \in {"done", "cancelled"}
EveryTaskEnds == [](~ENABLED Next => AllEnded)

\* Where no lease and no run's end can happen, whatever the declaration, every task has
\* ended: no waiting task needs a redeploy or a cancel to leave its list. (A run stops
\* only with every flip spent, so EveryTaskEnds sees one declaration only.)
Work == \E w \in Workers : Lease(w) \/ Ack(w)
NoneStranded == ~ENABLED Work => AllEnded

=============================================================================
