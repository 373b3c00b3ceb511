-------------------------------- MODULE Shards --------------------------------
(***************************************************************************)
(* A sharded queue (src/taskq/shards.py, routing.py, worker/queues.py):    *)
(* SHARDS independent queues, each with its own enqueue script, keys and   *)
(* fencing tokens. A task goes to the shard its idempotency key routes to, *)
(* or, without one, the shard its id routes to; a worker's turns rotate    *)
(* which shard it tries first.                                             *)
(*                                                                         *)
(* The route is fixed for the whole run, as CRC-32 modulo the shard count  *)
(* is: ids 1..IDS in blocks (IDS = 3 over 2 shards: ids 1 and 2 on shard   *)
(* 1, id 3 on shard 2), keys 1..KEYS in turn (key 1 on shard 1, key 2 on   *)
(* shard 2). Each shard s keeps                                            *)
(*   ready[s]    its ready LIST, front first                               *)
(*   leased[s]   its leased ZSET (the ids)                                 *)
(*   ended[s]    its tasks completed or dead                               *)
(*   keyed[s]    its idempotency keys: key -> the id it names, or None     *)
(*   token[s], tries[s]   each record's fencing token and reaped attempts  *)
(* The actions:                                                            *)
(*   Send(i, k)  a producer's enqueue of id i with key k (NoKey: none):    *)
(*               sent to shard Home(i, k), whose enqueue.lua creates       *)
(*               nothing if i or k already names a task on that shard;     *)
(*               a key that names none, sent with an id that names one,    *)
(*               is bound to that task (bind_key), the send's answer.      *)
(*               The id is Layout.new_id's: one that names no task, and    *)
(*               routes to the key's shard; with EXPLICIT_IDS the caller   *)
(*               gives any id (`task_id=`).                                *)
(*   Turn(w)     one turn of worker w, with its one slot free: it tries    *)
(*               first[w] first, then the others in order (Queues.order:   *)
(*               smooth weighted round robin, which with the shards' equal *)
(*               weights is a rotation), and leases the front of the first *)
(*               ready list that has a task (Leaser.fill: the next shard   *)
(*               only while the slot is still free). A turn that finds     *)
(*               every shard empty leases nothing; it still rotates.       *)
(*   Ack(w)      ack.lua, fenced: with a stale token nothing changes.      *)
(*   Reap(s, i)  i's lease expired (at any time: a holder may be paused    *)
(*               past it): a new token, and i retries or dies.             *)
(* Not modelled: per-shard fencing beyond the ack (TaskQueue.tla's         *)
(* concern), fail and release (a retry or a release is a reap's move       *)
(* without the bump), delays, priorities, key TTLs, several slots per      *)
(* worker (a turn then leases what the first shard has, then the next: it  *)
(* serves the later shards more, not less), other queues beside the        *)
(* shards, and the layout check (producers that count the shards           *)
(* differently are refused, so the route is one function here).            *)
(*                                                                         *)
(* `created`, `answered` and `skipped` are ghosts. `created`: the ids      *)
(* whose send created a task. answered[k]: the ids the sends with key k    *)
(* were answered with. skipped[w][s]: w's turns in a row that leased from  *)
(* another shard while s had a ready task.                                 *)
(*                                                                         *)
(* Checks: KeyNamesOneTask (a key names at most one task, across all       *)
(* shards), KeyAnsweredOneTask (every send with a key is answered with the *)
(* same task: TaskQueue's T5), FoundById (the handle made from a task's id *)
(* alone finds it),                                                        *)
(* NothingLost (each created task in one place of one shard), and          *)
(* NoShardStarves (no worker passes over a shard with a ready task for     *)
(* SHARDS turns in a row). Mutants: ShardsRouteById (every task routed by  *)
(* its id), ShardsFixedOrder (every turn tries shard 1 first),             *)
(* ShardsKeyLeftUnbound (a key sent with a known id is left unbound).      *)
(* Python transcription: shards.py.                                        *)
(***************************************************************************)
EXTENDS Naturals, Sequences, FiniteSets

CONSTANTS
    SHARDS,         \* shards of the queue
    IDS,            \* task ids 1..IDS
    KEYS,           \* idempotency keys 1..KEYS
    WORKERS,        \* workers, each with one slot
    RETRIES,        \* reaped attempts a task may have before it dies
    EXPLICIT_IDS    \* whether producers give ids of their own (task_id=)

Shards == 1..SHARDS
Ids == 1..IDS
Keys == 1..KEYS
Workers == 1..WORKERS
NoKey == 0
KeyOrNone == 0..KEYS
None == 0
Idle == <<0, 0, 0>>
MaxToken == 2 * (RETRIES + 1)

\* The route: CRC-32 of the id or key, modulo SHARDS, stands in as a fixed map.
IdShard(i) == ((i - 1) * SHARDS) \div IDS + 1
KeyShard(k) == ((k - 1) % SHARDS) + 1

\* Layout.shard_of: the key decides when there is one, else the id.
Home(i, k) == IF k = NoKey THEN IdShard(i) ELSE KeyShard(k)

VARIABLES
    ready,      \* each shard's ready list, front first
    leased,     \* each shard's leased tasks
    ended,      \* each shard's tasks completed or dead
    keyed,      \* each shard's idempotency keys: key -> id, or None
    token,      \* each shard's fencing token of each id
    tries,      \* each shard's reaped attempts of each id
    held,       \* each worker's run: <<shard, id, token>>, or Idle
    first,      \* the shard each worker tries first in its next turn
    skipped,    \* ghost: each worker's turns in a row that passed over each shard
    created,    \* ghost: the ids whose send created a task
    answered    \* ghost: each key's answers, the ids its sends were answered with

vars == <<ready, leased, ended, keyed, token, tries, held, first, skipped, created, answered>>

TypeOK ==
    /\ ready \in [Shards -> Seq(Ids)]
    /\ leased \in [Shards -> SUBSET Ids]
    /\ ended \in [Shards -> SUBSET Ids]
    /\ keyed \in [Shards -> [Keys -> Ids \cup {None}]]
    /\ token \in [Shards -> [Ids -> 0..MaxToken]]
    /\ tries \in [Shards -> [Ids -> 0..RETRIES + 1]]
    /\ held \in [Workers -> {Idle} \cup (Shards \X Ids \X (1..MaxToken))]
    /\ first \in [Workers -> Shards]
    /\ skipped \in [Workers -> [Shards -> 0..SHARDS]]
    /\ created \subseteq Ids
    /\ answered \in [Keys -> SUBSET Ids]

Init ==
    /\ ready = [s \in Shards |-> <<>>]
    /\ leased = [s \in Shards |-> {}]
    /\ ended = [s \in Shards |-> {}]
    /\ keyed = [s \in Shards |-> [k \in Keys |-> None]]
    /\ token = [s \in Shards |-> [i \in Ids |-> 0]]
    /\ tries = [s \in Shards |-> [i \in Ids |-> 0]]
    /\ held = [w \in Workers |-> Idle]
    /\ first = [w \in Workers |-> 1]
    /\ skipped = [w \in Workers |-> [s \in Shards |-> 0]]
    /\ created = {}
    /\ answered = [k \in Keys |-> {}]

Range(q) == {q[n] : n \in DOMAIN q}
Min(S) == CHOOSE x \in S : \A y \in S : x <= y

\* The ids with a record on shard s, and on any shard.
Records(s) == Range(ready[s]) \cup leased[s] \cup ended[s]
Named == UNION {Records(s) : s \in Shards}

---------------------------------------------------------------------------
\* producers

\* The send's answer, i, recorded as one of key k's (none without a key).
Answer(k, i) == answered' = IF k = NoKey THEN answered ELSE [answered EXCEPT ![k] = @ \cup {i}]

\* enqueue.lua on shard s: i is created unless i or k already names a task there;
\* a key that names none, sent with an id that names one, is bound to it.
EnqueueOn(s, i, k) ==
    IF k # NoKey /\ keyed[s][k] # None
    THEN /\ Answer(k, keyed[s][k])
         /\ UNCHANGED <<ready, leased, ended, keyed, token, tries, held, first, skipped, created>>
    ELSE IF i \in Records(s)
    THEN /\ keyed' = IF k = NoKey THEN keyed ELSE [keyed EXCEPT ![s][k] = i]
         /\ Answer(k, i)
         /\ UNCHANGED <<ready, leased, ended, token, tries, held, first, skipped, created>>
    ELSE /\ ready' = [ready EXCEPT ![s] = Append(@, i)]
         /\ keyed' = IF k = NoKey THEN keyed ELSE [keyed EXCEPT ![s][k] = i]
         /\ created' = created \cup {i}
         /\ Answer(k, i)
         /\ UNCHANGED <<leased, ended, token, tries, held, first, skipped>>

\* The id of a send that goes to shard s: Layout.new_id's (a random id, so one
\* that names no task, drawn until it routes to s), or with EXPLICIT_IDS any.
\* (An IF, not a disjunction, which TLC would explore once per true disjunct.)
IdFor(i, s) == IF EXPLICIT_IDS THEN TRUE ELSE i \notin Named /\ IdShard(i) = s

\* routing.by_shard refuses a send whose id and key route to different shards (a
\* refused send changes nothing): an id taskq draws always fits; one a producer
\* gives may not (EXPLICIT_IDS).
Fits(i, k) == IF k = NoKey THEN TRUE ELSE IdShard(i) = KeyShard(k)

Send(i, k) ==
    /\ IdFor(i, Home(i, k))
    /\ Fits(i, k)
    /\ EnqueueOn(Home(i, k), i, k)

---------------------------------------------------------------------------
\* workers

\* The shard a turn that tries f first leases from: f, else the first other
\* shard in order with a ready task; None when every shard is empty.
Pick(f) ==
    IF ready[f] # <<>> THEN f
    ELSE LET others == {s \in Shards \ {f} : ready[s] # <<>>}
         IN IF others = {} THEN None ELSE Min(others)

\* A turn of w that tries f first.
TurnFrom(w, f) ==
    LET s == Pick(f) IN
    /\ held[w] = Idle
    /\ skipped' = [skipped EXCEPT ![w] =
                     [x \in Shards |-> IF x = s \/ ready[x] = <<>> THEN 0
                                       ELSE skipped[w][x] + 1]]
    /\ IF s = None
       THEN UNCHANGED <<ready, leased, token, held>>
       ELSE LET i == Head(ready[s]) IN
            /\ ready' = [ready EXCEPT ![s] = Tail(@)]
            /\ leased' = [leased EXCEPT ![s] = @ \cup {i}]
            /\ token' = [token EXCEPT ![s][i] = @ + 1]
            /\ held' = [held EXCEPT ![w] = <<s, i, token[s][i] + 1>>]
    /\ UNCHANGED <<ended, keyed, tries, created, answered>>

\* As built: the shard tried first rotates, turn by turn.
Turn(w) ==
    /\ TurnFrom(w, first[w])
    /\ first' = [first EXCEPT ![w] = (@ % SHARDS) + 1]

\* Whether w's run is still the current lease of its task.
Current(w) ==
    LET s == held[w][1]
        i == held[w][2]
    IN i \in leased[s] /\ token[s][i] = held[w][3]

Ack(w) ==
    LET s == held[w][1]
        i == held[w][2]
    IN /\ held[w] # Idle
       /\ IF Current(w)
          THEN /\ leased' = [leased EXCEPT ![s] = @ \ {i}]
               /\ ended' = [ended EXCEPT ![s] = @ \cup {i}]
          ELSE UNCHANGED <<leased, ended>>
       /\ held' = [held EXCEPT ![w] = Idle]
       /\ UNCHANGED <<ready, keyed, token, tries, first, skipped, created, answered>>

Reap(s, i) ==
    /\ i \in leased[s]
    /\ leased' = [leased EXCEPT ![s] = @ \ {i}]
    /\ token' = [token EXCEPT ![s][i] = @ + 1]
    /\ tries' = [tries EXCEPT ![s][i] = @ + 1]
    /\ IF tries[s][i] < RETRIES
       THEN /\ ready' = [ready EXCEPT ![s] = Append(@, i)]
            /\ UNCHANGED ended
       ELSE /\ ended' = [ended EXCEPT ![s] = @ \cup {i}]
            /\ UNCHANGED ready
    /\ UNCHANGED <<keyed, held, first, skipped, created, answered>>

Next ==
    \/ \E i \in Ids : \E k \in KeyOrNone : Send(i, k)
    \/ \E w \in Workers : Turn(w)
    \/ \E w \in Workers : Ack(w)
    \/ \E s \in Shards : \E i \in Ids : Reap(s, i)

Spec == Init /\ [][Next]_vars

---------------------------------------------------------------------------
\* checks

\* No two tasks share an idempotency key, across all shards: each shard's
\* enqueue dedupes keys only within its shard, so this rests on the routing.
KeyNamesOneTask ==
    \A k \in Keys : Cardinality({s \in Shards : keyed[s][k] # None}) <= 1

\* T5: every send with key k is answered with one task, whichever id it carries.
KeyAnsweredOneTask == \A k \in Keys : Cardinality(answered[k]) <= 1

\* ShardedBroker.handle: the shard the id routes to, and no other.
Lookup(i) == IdShard(i)

\* A handle made from a task's id alone finds that task.
FoundById == \A s \in Shards, i \in Ids : i \in Records(s) => Lookup(i) = s

\* How many times i is in shard s: in its ready list, leased, ended.
Count(s, i) ==
    Cardinality({n \in DOMAIN ready[s] : ready[s][n] = i})
      + (IF i \in leased[s] THEN 1 ELSE 0) + (IF i \in ended[s] THEN 1 ELSE 0)

\* Every created task is in exactly one place of exactly one shard; no other
\* id is anywhere.
NothingLost ==
    \A i \in Ids :
        IF i \in created
        THEN \E s \in Shards : Count(s, i) = 1 /\ \A x \in Shards \ {s} : Count(x, i) = 0
        ELSE \A s \in Shards : Count(s, i) = 0

\* A shard with a ready task is passed over by fewer than SHARDS turns in a row
\* of any worker: with the rotation, it is tried first within SHARDS turns.
NoShardStarves == \A w \in Workers, s \in Shards : skipped[w][s] < SHARDS

=============================================================================
