------------------------------ MODULE TaskQueue ------------------------------
(***************************************************************************)
(* taskq's lease protocol, as the Lua scripts in src/taskq/lua build it.   *)
(*                                                                         *)
(* A producer enqueues a task (enqueue.lua), perhaps with a delay and an   *)
(* idempotency key, and may retry its send with the same key. Workers      *)
(* lease ready tasks (lease.lua), each lease raising the task's fencing    *)
(* token, keep the lease alive by heartbeat (heartbeat.lua), confirm it    *)
(* with one more renewal right before the handler's one side effect        *)
(* (Confirm), run that effect through the ledger's guard (Effect), and     *)
(* end the lease by ack or fail (ack.lua, fail.lua), or at shutdown by ack *)
(* if the effect was applied and release otherwise (Shutdown). Every one   *)
(* of those scripts first checks that the task is still leased and that    *)
(* the caller's token is the current one: Holds(w). The reaper (reap.lua)  *)
(* treats an expired lease as a failed attempt and bumps the token;        *)
(* promote.lua moves due delayed tasks to ready; retry_dead.lua revives a  *)
(* dead task.                                                              *)
(*                                                                         *)
(* Time is abstract. Expire(t) is the server clock passing a lease's       *)
(* expiry and Tick(t) passing a delayed task's run-at; due[t] is "now >=   *)
(* run_at". A holder can act at any later moment, so a worker paused past  *)
(* its lease (SIGSTOP) is simply one whose next step comes after Expire    *)
(* and Reap: it keeps its old token and may still heartbeat, confirm, run  *)
(* its effect, ack, fail or shut down. Die(w) is a SIGKILL. Which faults   *)
(* happen is set by three constants, so that a .cfg can state the          *)
(* conditions of a promise: PAUSES (a lease may run out while its holder   *)
(* lives), KILLS (SIGKILL), LATE_FAILS (a handler may raise after its      *)
(* effect).                                                                *)
(*                                                                         *)
(* Abstractions, each an over-approximation, so safety carries over:       *)
(*  - ready and the DLQ are sets: Lease may take any ready task, not only  *)
(*    the list's front, so every order the real lists produce is included; *)
(*  - reap.lua, promote.lua and ack.lua handle a batch of tasks per call;  *)
(*    here each task is its own step, and a batch is those steps back to   *)
(*    back (lease.lua with count 1 is the same: every task is checked and  *)
(*    changed alone);                                                      *)
(*  - backoff lengths are not modelled, only "not yet due" until a Tick.   *)
(* Not modelled: lease.lua's request-id replay of a lost reply, key TTLs   *)
(* (idempotency, completed records), purge.lua, the event log (E1 is       *)
(* checked by taskq.tools.tracecheck on real logs instead).                *)
(*                                                                         *)
(* Bounds keep the state space finite: one task (a second send is a retry  *)
(* with the first one's key, so T5 is exercised; two independent tasks     *)
(* would multiply the states by about a hundred and share nothing but the  *)
(* workers), MAX_RETRIES, MAX_RESTARTS worker exits, MAX_REVIVALS.         *)
(*                                                                         *)
(* Cancellation (CANCELS), modelled before its code, is the protocol below *)
(* ("Cancellation"); the code follows it. Time limits (TIME_LIMITS): a run *)
(* may pass its task's time limit at any moment (TimeOut); see "Time       *)
(* limits" below.                                                          *)
(*                                                                         *)
(* Mutants: TaskQueueAckNoFence, TaskQueueReapNoBump, TaskQueueByToken,    *)
(* TaskQueueShutdownRelease, TaskQueueResultNoFence, TaskQueueCancelNoFence,*)
(* TaskQueueCancelRetried, TaskQueueTimeOutMidEffect,                      *)
(* TaskQueueEndMidEffect, TaskQueueTimeOutUnrenewed,                       *)
(* TaskQueueTimeOutReturned; a variant,                                    *)
(* TaskQueueConfirmAtomic;                                                 *)
(* the `none` and `fence` ledger guards are .cfg settings (GUARD).         *)
(* Python: task_queue.py (steps), task_queue_checks.py (properties).       *)
(***************************************************************************)
EXTENDS Naturals, FiniteSets, TLC

CONSTANTS
    WORKERS,        \* worker processes, each running one task at a time
    MAX_SENDS,      \* producer sends: the first, then retries of it with its key
    N_KEYS,         \* idempotency keys 1..N_KEYS; 0 is a send without a key
    MAX_RETRIES,    \* the task's max_retries
    MAX_RESTARTS,   \* worker exits: a shutdown with a task in hand, or a SIGKILL
    MAX_REVIVALS,   \* retry_dead calls that move a task back to ready
    GUARD,          \* the ledger's guard: "none", "dedupe" or "fence"
    PAUSES,         \* a lease may run out while its holder lives (SIGSTOP, GC, a
                    \* cut-off network); FALSE: only a killed worker's lease runs out
    KILLS,          \* a worker may be SIGKILLed
    LATE_FAILS,     \* a handler may raise after its effect was applied
    FINAL_FAILS,    \* a failure may be final (fail.lua's mode 'dead'): to the DLQ at
                    \* once, whatever retries are left
    CANCELS,        \* a producer may cancel the task (Cancel); FALSE: no cancellation
    TIME_LIMITS,    \* a run may pass its time limit (TimeOut); FALSE: no time limits
    RATE_LIMITS     \* a lease may throttle a ready task to delayed (Throttle): its
                    \* rate limit's slot has not come (the RateLimit model checks the rate)

Ids == 1..MAX_SENDS             \* send i proposes task id i
Workers == 1..WORKERS
Keys == 1..N_KEYS
States == {"none", "pending", "running", "delayed", "completed", "dead", "cancelled"}
PlaceOf == "pending" :> "ready" @@ "running" :> "leased" @@ "delayed" :> "delayed"
           @@ "dead" :> "dlq"
\* A run's return value is abstracted to its token: what tells a stale run's value
\* from the current run's. Tokens start at 1, so 0 is free to mean "no result".
NoResult == 0
NoTask == [task |-> 0, token |-> 0, ran |-> FALSE, lost |-> FALSE, confirmed |-> FALSE,
           cancelSeen |-> FALSE, timedOut |-> FALSE, returned |-> FALSE]

VARIABLES
    sent,       \* producer: sends made so far
    keyOf,      \* producer: the idempotency key each send carried (0 = none)
    answer,     \* producer: the task id each send was answered with (0 = not sent)
    idem,       \* Redis idem:<key>: the task id a key names (0 = none)
    ready,      \* Redis ready LIST, as a set
    leased,     \* Redis leased ZSET
    delayed,    \* Redis delayed ZSET
    dlq,        \* Redis dlq LIST, as a set
    state,      \* task record: state ("none" = no record)
    retries,    \* task record: retries
    token,      \* task record: fencing_token
    due,        \* server time has reached the task's run_at
    expired,    \* server time has passed the lease's expiry (while leased)
    held,       \* worker w holds [task, token, ran: effect done, lost: a renewal was
                \* refused, confirmed: effect() renewed the lease for the effect,
                \* cancelSeen: a renewal's reply said the task's cancel was requested,
                \* timedOut: the run passed its time limit, returned: its handler
                \* returned and claimed the run's report (Return)]
    restarts,   \* worker exits so far
    revivals,   \* retry_dead calls so far
    charges,    \* ledger: charges applied per task (the effect)
    applied,    \* ledger: the dedupe guard's table of tasks charged
    fenceTok,   \* ledger: the fence guard's newest token per task
    result,     \* results hash: the stored return value per task (NoResult = none)
    cancelReq   \* task record: cancel_requested, set by a cancel while the task is leased

queueVars == <<ready, leased, delayed, dlq, state, retries, token, due, expired, cancelReq>>
vars == <<sent, keyOf, answer, idem, queueVars, held, restarts, revivals,
          charges, applied, fenceTok, result>>

TypeOK ==
    /\ sent \in 0..MAX_SENDS
    /\ keyOf \in [Ids -> 0..N_KEYS]
    /\ answer \in [Ids -> 0..MAX_SENDS]
    /\ idem \in [Keys -> 0..MAX_SENDS]
    /\ ready \cup leased \cup delayed \cup dlq \cup applied \subseteq Ids
    /\ state \in [Ids -> States]
    /\ retries \in [Ids -> 0..MAX_RETRIES]
    /\ token \in [Ids -> Nat]
    /\ due \in [Ids -> BOOLEAN]
    /\ expired \in [Ids -> BOOLEAN]
    /\ \A w \in Workers : held[w].task \in Ids \cup {0}
    /\ PAUSES \in BOOLEAN /\ KILLS \in BOOLEAN /\ LATE_FAILS \in BOOLEAN
    /\ FINAL_FAILS \in BOOLEAN /\ CANCELS \in BOOLEAN /\ TIME_LIMITS \in BOOLEAN
    /\ RATE_LIMITS \in BOOLEAN
    /\ restarts \in 0..MAX_RESTARTS
    /\ revivals \in 0..MAX_REVIVALS
    /\ charges \in [Ids -> Nat]
    /\ fenceTok \in [Ids -> Nat]
    /\ result \in [Ids -> Nat]
    /\ cancelReq \in [Ids -> BOOLEAN]

Init ==
    /\ sent = 0
    /\ keyOf = [i \in Ids |-> 0]
    /\ answer = [i \in Ids |-> 0]
    /\ idem = [k \in Keys |-> 0]
    /\ ready = {}
    /\ leased = {}
    /\ delayed = {}
    /\ dlq = {}
    /\ state = [i \in Ids |-> "none"]
    /\ retries = [i \in Ids |-> 0]
    /\ token = [i \in Ids |-> 0]
    /\ due = [i \in Ids |-> FALSE]
    /\ expired = [i \in Ids |-> FALSE]
    /\ held = [w \in Workers |-> NoTask]
    /\ restarts = 0
    /\ revivals = 0
    /\ charges = [i \in Ids |-> 0]
    /\ applied = {}
    /\ fenceTok = [i \in Ids |-> 0]
    /\ result = [i \in Ids |-> NoResult]
    /\ cancelReq = [i \in Ids |-> FALSE]

---------------------------------------------------------------------------
\* helpers

\* The worker holds a task with that task's current token.
Current(w) == held[w].task # 0 /\ token[held[w].task] = held[w].token

\* What every holder script checks before it changes anything: the task is
\* still leased (ZSCORE leased) and the caller's token is current (HGET).
Holds(w) == held[w].task \in leased /\ token[held[w].task] = held[w].token

Drop(w) == held' = [held EXCEPT ![w] = NoTask]

\* Its effect() block is under way: confirmed, its effect not yet written.
InEffect(w) == held[w].confirmed /\ ~held[w].ran

\* The task leaves leased; its expiry means nothing any more.
EndLease(t) ==
    /\ leased' = leased \ {t}
    /\ expired' = [expired EXCEPT ![t] = FALSE]

\* The task goes to the DLQ, its retries as they are.
ToDLQ(t) ==
    /\ state' = [state EXCEPT ![t] = "dead"]
    /\ dlq' = dlq \cup {t}
    /\ UNCHANGED <<retries, delayed, due>>

\* A leased task whose cancel was requested ends cancelled, in no structure.
ToCancelled(t) ==
    /\ state' = [state EXCEPT ![t] = "cancelled"]
    /\ UNCHANGED <<retries, delayed, dlq, due>>

\* fail.lua and reap.lua alike: a failed attempt waits its backoff on
\* delayed, or goes to the DLQ once retries reach max_retries.
RetryOrDie(t) ==
    IF retries[t] >= MAX_RETRIES
    THEN ToDLQ(t)
    ELSE /\ state' = [state EXCEPT ![t] = "delayed"]
         /\ retries' = [retries EXCEPT ![t] = @ + 1]
         /\ delayed' = delayed \cup {t}
         /\ due' = [due EXCEPT ![t] = FALSE]
         /\ UNCHANGED dlq

---------------------------------------------------------------------------
\* Cancellation (CANCELS TRUE), the protocol the code must follow:
\*
\*  - Cancel(t), by a producer at any time (handle.cancel(), `taskq cancel`,
\*    the dashboard, the HTTP route; one script, cancel.lua): a ready,
\*    delayed or dead task ends "cancelled" at once, taken out of its list
\*    or set; a cancelled task is in no structure, like a completed one, and
\*    never changes again. A leased task only gets its record's
\*    cancel_requested flag (cancelReq) and stays running. A cancel of a
\*    task that is completed, cancelled, already cancel-requested or unknown
\*    changes nothing (the script answers so).
\*  - The holder learns of the flag from the next renewal it makes: a
\*    heartbeat's reply (heartbeat.lua answers "cancel" while extending the
\*    lease, so no extra polling), or the renewal that effect() makes before
\*    its block. From then on (cancelSeen) effect() refuses without asking
\*    Redis, current_task().cancelled reads true and an async handler gets
\*    CancelledError at its next await. A block that effect() let in before
\*    the cancel was seen still runs: no check can stop code already past
\*    it (NoChargeAfterCancelSeen does not hold, by that window).
\*  - Once the handler returns (or raises), a holder that saw the cancel
\*    settles with ack_cancelled.lua (AckCancelled): leased -> cancelled for
\*    the current token, no result stored; a stale token changes nothing.
\*  - A holder that never saw the flag settles as usual, and the scripts
\*    honour the flag themselves: fail.lua ends the task cancelled, never
\*    retried nor dead; release.lua (a shutdown) ends it cancelled, never
\*    back to ready; reap.lua ends an expired cancel-requested lease
\*    cancelled. ack.lua completes it: the run finished before it could
\*    learn of the cancel, which lost that race (its result is stored).
\*  - Lease never takes a cancelled task: it is in no list.
\*
\* Time limits (TIME_LIMITS TRUE), as worker/heartbeat.py and runner.py build
\* them: a run passes its time limit at any moment it holds a task
\* (TimeOut). From then on effect() refuses without asking Redis, and the
\* run's outcome is a failed attempt (TimeLimitExceeded, retried or final as
\* the task's retry policy says) whatever its handler does later: it never
\* acks. A handler's thread cannot be stopped: a run timed out inside its
\* effect() block (InEffect) goes on until the block ends, its effect may
\* still be written (Effect), and its failure is reported only after that
\* (Fail is then the block's end: written, or raised with nothing written,
\* and the failure after it, one step since nothing can come between them
\* that tells them apart). Meanwhile its heartbeat renews its lease, so no
\* other worker can take the task while the block runs; otherwise a timed-
\* out run is not renewed (its lease may run out with its holder alive,
\* PAUSES or not). The failure may come after the run's effect was applied
\* (a handler that hung after it), like a late failure. A run that saw its
\* task's cancel still ends it cancelled. The two older orderings, the
\* failure reported while the block is under way and no renewal during it,
\* are the mutants TaskQueueTimeOutMidEffect and TaskQueueTimeOutUnrenewed.
\* A handler that returns within its limit claims its run's report at once
\* (Return), and the time-limit check then declines the run: it is acked, or
\* fails for a reason of its own, never as timed out after its effect
\* (ReturnedNeverTimesOut; the mutant TaskQueueTimeOutReturned).

---------------------------------------------------------------------------
\* steps

\* enqueue.lua: the producer's first send, or a retry of it with its key.
\* A key that already names a task answers with that task and writes nothing.
Enqueue(k, d) ==
    LET i == sent + 1 IN
    /\ sent < MAX_SENDS
    /\ sent = 0 \/ (k # 0 /\ k = keyOf[1])
    /\ sent' = i
    /\ keyOf' = [keyOf EXCEPT ![i] = k]
    /\ IF k # 0 /\ idem[k] # 0
       THEN /\ answer' = [answer EXCEPT ![i] = idem[k]]
            /\ UNCHANGED <<idem, ready, delayed, state, due>>
       ELSE /\ answer' = [answer EXCEPT ![i] = i]
            /\ idem' = IF k # 0 THEN [idem EXCEPT ![k] = i] ELSE idem
            /\ state' = [state EXCEPT ![i] = IF d THEN "delayed" ELSE "pending"]
            /\ due' = [due EXCEPT ![i] = ~d]
            /\ IF d THEN /\ delayed' = delayed \cup {i}
                         /\ UNCHANGED ready
                    ELSE /\ ready' = ready \cup {i}
                         /\ UNCHANGED delayed
    /\ UNCHANGED <<leased, dlq, retries, token, expired, held, restarts, revivals,
                   charges, applied, fenceTok, result, cancelReq>>

\* lease.lua: an idle worker takes a ready task; HINCRBY raises its token.
Lease(w) ==
    /\ held[w].task = 0
    /\ \E t \in ready :
        /\ ready' = ready \ {t}
        /\ leased' = leased \cup {t}
        /\ token' = [token EXCEPT ![t] = @ + 1]
        /\ state' = [state EXCEPT ![t] = "running"]
        /\ expired' = [expired EXCEPT ![t] = FALSE]
        /\ held' = [held EXCEPT ![w] = [task |-> t, token |-> token[t] + 1,
                                         ran |-> FALSE, lost |-> FALSE,
                                         confirmed |-> FALSE, cancelSeen |-> FALSE,
                                         timedOut |-> FALSE, returned |-> FALSE]]
    /\ UNCHANGED <<sent, keyOf, answer, idem, delayed, dlq, retries, due, restarts,
                   revivals, charges, applied, fenceTok, result, cancelReq>>

\* cancel.lua: see "Cancellation" above.
Cancel(t) ==
    /\ CANCELS
    /\ \/ state[t] \in {"pending", "delayed", "dead"}
       \/ state[t] = "running" /\ ~cancelReq[t]
    /\ IF state[t] = "running"
       THEN /\ cancelReq' = [cancelReq EXCEPT ![t] = TRUE]
            /\ UNCHANGED <<ready, delayed, dlq, state>>
       ELSE /\ state' = [state EXCEPT ![t] = "cancelled"]
            /\ ready' = ready \ {t}
            /\ delayed' = delayed \ {t}
            /\ dlq' = dlq \ {t}
            /\ UNCHANGED cancelReq
    /\ UNCHANGED <<sent, keyOf, answer, idem, leased, retries, token, due, expired, held,
                   restarts, revivals, charges, applied, fenceTok, result>>

\* heartbeat.lua guarded by Check: extend the lease, or tell the worker it is
\* lost, after which TaskContext.effect() refuses the handler's effect. An
\* extended lease whose task's cancel was requested answers "cancel": the
\* holder has seen the cancel. A run past its time limit is renewed while its
\* effect() block is under way, and a sync run of a concurrency-limited task
\* until its handler returns (it keeps its slot until then): so a timed-out
\* run may be renewed or not, in its block or out of it, until it fails; with
\* inEffect FALSE never (the mutant TaskQueueTimeOutUnrenewed).
HeartbeatWhile(w, Check(_), inEffect) ==
    /\ held[w].task # 0
    /\ ~held[w].lost
    /\ IF held[w].timedOut THEN inEffect ELSE TRUE
    /\ IF Check(w)
       THEN /\ expired' = [expired EXCEPT ![held[w].task] = FALSE]
            /\ IF cancelReq[held[w].task]
               THEN held' = [held EXCEPT ![w].cancelSeen = TRUE]
               ELSE UNCHANGED held
       ELSE /\ held' = [held EXCEPT ![w].lost = TRUE]
            /\ UNCHANGED expired
    /\ UNCHANGED <<sent, keyOf, answer, idem, ready, leased, delayed, dlq, state, retries,
                   token, due, restarts, revivals, charges, applied, fenceTok, result,
                   cancelReq>>

HeartbeatIf(w, Check(_)) == HeartbeatWhile(w, Check, TRUE)

\* effect() first confirms the lease: heartbeat.lua guarded by Check, with the
\* run's token. Renewed, the effect may start; refused, the run is lost and its
\* effect is refused. The process may pause after the confirmation and before
\* the effect writes: any steps may come between Confirm and Effect. With
\* fenced (as built), a run that has seen its task's cancel makes no
\* confirmation (effect() refuses at once), and a renewal that answers
\* "cancel" refuses this effect; a run past its time limit makes none either.
\* With fenced FALSE both are ignored (the mutant TaskQueueCancelNoFence).
ConfirmFencing(w, Check(_), fenced) ==
    /\ held[w].task # 0
    /\ ~held[w].ran
    /\ ~held[w].lost
    /\ ~held[w].confirmed
    /\ fenced => ~held[w].cancelSeen /\ ~held[w].timedOut
    /\ IF Check(w)
       THEN /\ expired' = [expired EXCEPT ![held[w].task] = FALSE]
            /\ IF fenced /\ cancelReq[held[w].task]
               THEN held' = [held EXCEPT ![w].cancelSeen = TRUE]
               ELSE held' = [held EXCEPT ![w].confirmed = TRUE]
       ELSE /\ held' = [held EXCEPT ![w].lost = TRUE]
            /\ UNCHANGED expired
    /\ UNCHANGED <<sent, keyOf, answer, idem, ready, leased, delayed, dlq, state, retries,
                   token, due, restarts, revivals, charges, applied, fenceTok, result,
                   cancelReq>>

ConfirmIf(w, Check(_)) == ConfirmFencing(w, Check, TRUE)

\* The ledger charge through the guard: none applies it always, dedupe once
\* per task, fence unless the token is older than the newest one the ledger
\* has seen for the task.
Charge(w) ==
    LET t == held[w].task
        k == held[w].token
        Apply == charges' = [charges EXCEPT ![t] = @ + 1]
    IN
    CASE GUARD = "none" -> Apply /\ UNCHANGED <<applied, fenceTok>>
      [] GUARD = "dedupe" ->
           IF t \in applied
           THEN UNCHANGED <<charges, applied, fenceTok>>
           ELSE Apply /\ applied' = applied \cup {t} /\ UNCHANGED fenceTok
      [] GUARD = "fence" ->
           IF k < fenceTok[t]
           THEN UNCHANGED <<charges, applied, fenceTok>>
           ELSE Apply /\ fenceTok' = [fenceTok EXCEPT ![t] = k] /\ UNCHANGED applied

\* The handler's one side effect, once its run has confirmed the lease.
Effect(w) ==
    /\ held[w].task # 0
    /\ ~held[w].ran
    /\ ~held[w].lost
    /\ held[w].confirmed
    /\ held' = [held EXCEPT ![w].ran = TRUE]
    /\ Charge(w)
    /\ UNCHANGED <<sent, keyOf, answer, idem, queueVars, restarts, revivals, result>>

\* Confirm and Effect as one step, with no pause between them: not taskq as
\* built (no process can promise that), but the variant TaskQueueConfirmAtomic;
\* TaskQueueTrace also takes a log's implied effect by it. A renewal that
\* answers "cancel" applies nothing, as in Confirm.
ConfirmAndApply(w) ==
    /\ held[w].task # 0
    /\ ~held[w].ran
    /\ ~held[w].lost
    /\ ~held[w].cancelSeen
    /\ IF Holds(w) /\ cancelReq[held[w].task]
       THEN /\ expired' = [expired EXCEPT ![held[w].task] = FALSE]
            /\ held' = [held EXCEPT ![w].cancelSeen = TRUE]
            /\ UNCHANGED <<charges, applied, fenceTok>>
       ELSE IF Holds(w)
       THEN /\ expired' = [expired EXCEPT ![held[w].task] = FALSE]
            /\ held' = [held EXCEPT ![w].confirmed = TRUE, ![w].ran = TRUE]
            /\ Charge(w)
       ELSE /\ held' = [held EXCEPT ![w].lost = TRUE]
            /\ UNCHANGED <<expired, charges, applied, fenceTok>>
    /\ UNCHANGED <<sent, keyOf, answer, idem, ready, leased, delayed, dlq, state, retries,
                   token, due, restarts, revivals, result, cancelReq>>

\* ack.lua guarded by Check, once the handler has returned (after its effect),
\* with the handler's return value (the run's token): an accepted ack stores it
\* in the same step as the completion, a refused one stores nothing. With
\* fenced FALSE a refused ack stores it all the same (the mutant
\* TaskQueueResultNoFence: the result written outside the fencing check).
\* A holder that has seen its task's cancel settles by AckCancelled instead,
\* and one past its time limit by Fail. With time limits the handler's return
\* is a step of its own (Return), so this is ack.lua alone.
AckStoring(w, Check(_), fenced) ==
    LET t == held[w].task
        Store == result' = [result EXCEPT ![t] = held[w].token]
    IN
    /\ t # 0
    /\ held[w].ran
    /\ IF TIME_LIMITS THEN held[w].returned ELSE TRUE
    /\ ~held[w].cancelSeen
    /\ ~held[w].timedOut
    /\ Drop(w)
    /\ IF Check(w)
       THEN /\ EndLease(t)
            /\ state' = [state EXCEPT ![t] = "completed"]
            /\ Store
       ELSE /\ UNCHANGED <<leased, expired, state>>
            /\ IF fenced THEN UNCHANGED result ELSE Store
    /\ UNCHANGED <<sent, keyOf, answer, idem, ready, delayed, dlq, retries, token, due,
                   restarts, revivals, charges, applied, fenceTok, cancelReq>>

AckIf(w, Check(_)) == AckStoring(w, Check, TRUE)

\* ack_cancelled.lua guarded by Check: the handler of a run that has seen its
\* task's cancel returned or raised; the task ends cancelled, with no result.
AckCancelledIf(w, Check(_)) ==
    LET t == held[w].task IN
    /\ t # 0
    /\ held[w].cancelSeen
    /\ Drop(w)
    /\ IF Check(w)
       THEN EndLease(t) /\ ToCancelled(t)
       ELSE UNCHANGED <<leased, expired, state, retries, delayed, dlq, due>>
    /\ UNCHANGED <<sent, keyOf, answer, idem, ready, token, restarts, revivals,
                   charges, applied, fenceTok, result, cancelReq>>

\* fail.lua guarded by Check: the handler raised, before or after its effect.
\* A `final` failure (mode 'dead': an unknown task, arguments that do not
\* bind, an exception its retry policy does not retry) goes to the DLQ at
\* once; with FINAL_FAILS FALSE none is. Mode 'delay' is a backoff of
\* another length, which this model does not tell apart. A task whose cancel
\* was requested ends cancelled instead, final or not. A run past its time
\* limit fails (TimeLimitExceeded) whether or not its effect ran; inside its
\* effect() block, this step is the block's end too (see "Time limits").
FailIf(w, Check(_)) ==
    LET t == held[w].task IN
    /\ t # 0
    /\ LATE_FAILS \/ ~held[w].ran \/ held[w].timedOut
    /\ ~held[w].cancelSeen
    /\ \E final \in IF FINAL_FAILS THEN BOOLEAN ELSE {FALSE} :
        /\ Drop(w)
        /\ IF Check(w)
           THEN /\ EndLease(t)
                /\ IF cancelReq[t] THEN ToCancelled(t)
                   ELSE IF final THEN ToDLQ(t) ELSE RetryOrDie(t)
           ELSE UNCHANGED <<leased, expired, state, retries, delayed, dlq, due>>
    /\ UNCHANGED <<sent, keyOf, answer, idem, ready, token, restarts, revivals,
                   charges, applied, fenceTok, result, cancelReq>>

\* A worker shutting down whose drain grace ran out, for a task still in hand:
\* it fences the run (no effect can start afterwards: the worker drops the
\* task and exits), then acks the task if this run applied its effect
\* (ack.lua) and releases it otherwise (release.lua: to the front of ready,
\* run_at = now), either guarded by Check. With ackRan FALSE it always
\* releases (the mutant TaskQueueShutdownRelease). Its handler has not
\* returned, so the run has no return value: the shutdown's ack completes the
\* task with no result (result stays NoResult). A run that has seen its
\* task's cancel does not ack, nor does one past its time limit (its attempt
\* has failed), and release.lua ends a cancel-requested task cancelled
\* rather than ready.
ShutdownIf(w, Check(_), ackRan) ==
    LET t == held[w].task IN
    /\ t # 0
    /\ restarts < MAX_RESTARTS
    /\ Drop(w)
    /\ restarts' = restarts + 1
    /\ IF ~Check(w)
       THEN UNCHANGED <<leased, expired, ready, state, due>>
       ELSE IF ackRan /\ held[w].ran /\ ~held[w].cancelSeen /\ ~held[w].timedOut
       THEN /\ EndLease(t)
            /\ state' = [state EXCEPT ![t] = "completed"]
            /\ UNCHANGED <<ready, due>>
       ELSE IF cancelReq[t]
       THEN /\ EndLease(t)
            /\ state' = [state EXCEPT ![t] = "cancelled"]
            /\ UNCHANGED <<ready, due>>
       ELSE /\ EndLease(t)
            /\ ready' = ready \cup {t}
            /\ state' = [state EXCEPT ![t] = "pending"]
            /\ due' = [due EXCEPT ![t] = TRUE]
    /\ UNCHANGED <<sent, keyOf, answer, idem, delayed, dlq, retries, token, revivals,
                   charges, applied, fenceTok, result, cancelReq>>

Heartbeat(w) == HeartbeatIf(w, Holds)
Confirm(w) == ConfirmIf(w, Holds)
Ack(w) == AckIf(w, Holds)
AckCancelled(w) == AckCancelledIf(w, Holds)
Fail(w) == FailIf(w, Holds)
Shutdown(w) == ShutdownIf(w, Holds, TRUE)

\* SIGKILL: the worker's process and what it held are gone; a new one starts.
Die(w) ==
    /\ KILLS
    /\ held[w].task # 0
    /\ restarts < MAX_RESTARTS
    /\ Drop(w)
    /\ restarts' = restarts + 1
    /\ UNCHANGED <<sent, keyOf, answer, idem, queueVars, revivals, charges, applied,
                   fenceTok, result>>

\* Server time passes the lease's expiry with no heartbeat in between: its
\* holder is paused or cut off (PAUSES), gone (killed, or shut down with a
\* stale token), or past its time limit and outside its effect() block (no
\* longer renewing; with inEffect FALSE, inside it too: the mutant
\* TaskQueueTimeOutUnrenewed).
ExpireWhile(t, inEffect) ==
    /\ t \in leased
    /\ ~expired[t]
    /\ PAUSES \/ \A w \in Workers :
                   held[w].task = t => held[w].timedOut /\ ~(inEffect /\ InEffect(w))
    /\ expired' = [expired EXCEPT ![t] = TRUE]
    /\ UNCHANGED <<sent, keyOf, answer, idem, ready, leased, delayed, dlq, state, retries,
                   token, due, held, restarts, revivals, charges, applied, fenceTok,
                   result, cancelReq>>

Expire(t) == ExpireWhile(t, TRUE)

\* reap.lua: an expired lease counts as a failed attempt; HINCRBY raises the
\* token by `bump` (1 as built) so the lost holder's token is stale at once.
\* With honoured (as built) a lease whose cancel was requested ends the task
\* cancelled; with honoured FALSE it is retried like any other (the mutant
\* TaskQueueCancelRetried).
ReapWith(t, bump, honoured) ==
    /\ t \in leased
    /\ expired[t]
    /\ token' = [token EXCEPT ![t] = @ + bump]
    /\ EndLease(t)
    /\ IF honoured /\ cancelReq[t] THEN ToCancelled(t) ELSE RetryOrDie(t)
    /\ UNCHANGED <<sent, keyOf, answer, idem, ready, held, restarts, revivals,
                   charges, applied, fenceTok, result, cancelReq>>

ReapBy(t, bump) == ReapWith(t, bump, TRUE)

Reap(t) == ReapBy(t, 1)

\* The run passes its task's time limit (the time-limit thread's check). With
\* claimed (as built) TaskContext.time_out() declines a run whose handler has
\* returned (its report claimed); with claimed FALSE it does not (the mutant
\* TaskQueueTimeOutReturned).
TimeOutIf(w, claimed) ==
    /\ TIME_LIMITS
    /\ held[w].task # 0
    /\ ~held[w].timedOut
    /\ IF claimed THEN ~held[w].returned ELSE TRUE
    /\ held' = [held EXCEPT ![w].timedOut = TRUE]
    /\ UNCHANGED <<sent, keyOf, answer, idem, queueVars, restarts, revivals, charges,
                   applied, fenceTok, result>>

TimeOut(w) == TimeOutIf(w, TRUE)

\* With time limits: the handler returns within its limit, after its effect,
\* and Runner._ended claims the run's report at once, before its value is
\* encoded; ack.lua (Ack) follows. A run past its limit, or that has seen its
\* task's cancel, is settled otherwise (Fail, AckCancelled). Without time
\* limits nothing can come between the return and the ack that tells them
\* apart, and Ack is both.
Return(w) ==
    /\ TIME_LIMITS
    /\ held[w].task # 0
    /\ held[w].ran
    /\ ~held[w].returned
    /\ ~held[w].timedOut
    /\ ~held[w].cancelSeen
    /\ held' = [held EXCEPT ![w].returned = TRUE]
    /\ UNCHANGED <<sent, keyOf, answer, idem, queueVars, restarts, revivals, charges,
                   applied, fenceTok, result>>

\* lease.lua under a rate limit: a popped ready task whose slot has not come
\* waits on delayed until it (its next lease takes no other slot).
Throttle(t) ==
    /\ RATE_LIMITS
    /\ t \in ready
    /\ ready' = ready \ {t}
    /\ delayed' = delayed \cup {t}
    /\ state' = [state EXCEPT ![t] = "delayed"]
    /\ due' = [due EXCEPT ![t] = FALSE]
    /\ UNCHANGED <<sent, keyOf, answer, idem, leased, dlq, retries, token, expired, held,
                   restarts, revivals, charges, applied, fenceTok, result, cancelReq>>

\* Server time reaches a delayed task's run_at.
Tick(t) ==
    /\ t \in delayed
    /\ ~due[t]
    /\ due' = [due EXCEPT ![t] = TRUE]
    /\ UNCHANGED <<sent, keyOf, answer, idem, ready, leased, delayed, dlq, state, retries,
                   token, expired, held, restarts, revivals, charges, applied, fenceTok,
                   result, cancelReq>>

\* promote.lua: ZRANGEBYSCORE delayed -inf now, so only a due task moves.
Promote(t) ==
    /\ t \in delayed
    /\ due[t]
    /\ delayed' = delayed \ {t}
    /\ ready' = ready \cup {t}
    /\ state' = [state EXCEPT ![t] = "pending"]
    /\ UNCHANGED <<sent, keyOf, answer, idem, leased, dlq, retries, token, due, expired,
                   held, restarts, revivals, charges, applied, fenceTok, result, cancelReq>>

\* retry_dead.lua: an operator revives a dead task with its retries reset.
RetryDead(t) ==
    /\ revivals < MAX_REVIVALS
    /\ t \in dlq
    /\ state[t] = "dead"
    /\ revivals' = revivals + 1
    /\ dlq' = dlq \ {t}
    /\ ready' = ready \cup {t}
    /\ state' = [state EXCEPT ![t] = "pending"]
    /\ retries' = [retries EXCEPT ![t] = 0]
    /\ due' = [due EXCEPT ![t] = TRUE]
    /\ UNCHANGED <<sent, keyOf, answer, idem, leased, delayed, token, expired, held,
                   restarts, charges, applied, fenceTok, result, cancelReq>>

Next ==
    \/ \E k \in 0..N_KEYS : \E d \in BOOLEAN : Enqueue(k, d)
    \/ \E w \in Workers : Lease(w)
    \/ \E w \in Workers : Heartbeat(w)
    \/ \E w \in Workers : Confirm(w)
    \/ \E w \in Workers : Effect(w)
    \/ \E w \in Workers : Ack(w)
    \/ \E w \in Workers : Fail(w)
    \/ \E w \in Workers : Shutdown(w)
    \/ \E w \in Workers : Die(w)
    \/ \E t \in Ids : Expire(t)
    \/ \E t \in Ids : Reap(t)
    \/ \E t \in Ids : Tick(t)
    \/ \E t \in Ids : Promote(t)
    \/ \E t \in Ids : RetryDead(t)
    \/ \E t \in Ids : Cancel(t)
    \/ \E w \in Workers : AckCancelled(w)
    \/ \E w \in Workers : TimeOut(w)
    \/ \E w \in Workers : Return(w)
    \/ \E t \in Ids : Throttle(t)

Spec == Init /\ [][Next]_vars

---------------------------------------------------------------------------
\* invariants (design.md section 3)

\* T1: in exactly one of ready, leased, delayed, dlq, or in none of them and
\* completed or cancelled (the terminal states); the record's state agrees.
T1_OnePlace ==
    \A t \in Ids :
        LET places == {p \in {"ready", "leased", "delayed", "dlq"} :
                      t \in CASE p = "ready" -> ready [] p = "leased" -> leased
                              [] p = "delayed" -> delayed [] p = "dlq" -> dlq}
        IN places = IF state[t] \in DOMAIN PlaceOf THEN {PlaceOf[state[t]]} ELSE {}

\* T3, as a step: a holder whose lease is not current acted (its own record
\* changed), and the queue is exactly as it was.
T3_StaleChangesNothing ==
    [][\A w \in Workers :
          (held[w].task # 0 /\ ~Holds(w) /\ held'[w] # held[w]) => UNCHANGED queueVars]_vars

\* T3, as a state: a token is current only while the lease it was issued
\* with lasts; once a lease ends, its holder's token is stale at once.
T3_StaleAtOnce == \A w \in Workers : Current(w) => held[w].task \in leased

\* T4: no task's effect is applied twice.
T4_EffectOnce == \A t \in Ids : charges[t] <= 1

\* What confirming the lease aims at: an effect starts only while its run
\* holds the lease. A run taken over before it confirmed never gets that far;
\* the window between Confirm and Effect still breaks it.
EffectWhileHeld ==
    [][\A w \in Workers : (held'[w].ran /\ ~held[w].ran) => Holds(w)]_vars

\* T5: a key names at most one task; every send with a key was answered with
\* the task the key names; a send answered with another task created nothing.
T5_IdempotentEnqueue ==
    LET created == {t \in Ids : state[t] # "none"} IN
    /\ \A i, j \in created : (i # j /\ keyOf[i] # 0) => keyOf[i] # keyOf[j]
    /\ \A i \in 1..sent : keyOf[i] # 0 => answer[i] = idem[keyOf[i]]
    /\ \A i \in 1..sent : answer[i] # i => state[i] = "none"

\* T6: a task that is not yet due is neither ready nor leased.
T6_DueOnly == \A t \in ready \cup leased : due[t]

\* Cancellation: a cancelled task never changes state again and is never
\* leased again, and neither is a task whose cancel was requested once its
\* lease has ended (it is not retried, released or reaped back to a list).
CancelledIsFinal ==
    [][\A t \in Ids : state[t] = "cancelled" => state'[t] = "cancelled"]_vars

CancelledNeverLeased ==
    [][\A t \in Ids : (state[t] = "cancelled" \/ (cancelReq[t] /\ t \notin leased))
                        => t \notin leased']_vars

\* A task whose cancel was requested (while it was leased) is running until
\* its lease ends, then cancelled, or completed by a run that finished before
\* it learned of the cancel: never pending, delayed or dead.
CancelSticks ==
    \A t \in Ids : cancelReq[t] => state[t] \in {"running", "completed", "cancelled"}

\* effect() is refused once its run has seen the cancel: no effect block is
\* let in (confirmed) by a run that knew of it.
NoEffectAfterCancelSeen ==
    [][\A w \in Workers :
          (held'[w].confirmed /\ ~held[w].confirmed) => ~held[w].cancelSeen]_vars

\* Not a promise: no charge at all by a run after it saw the cancel. A block
\* let in before the cancel was seen still writes (confirmed, cancel, a
\* heartbeat says so, the effect), as EffectWhileHeld's window does.
NoChargeAfterCancelSeen ==
    [][\A w \in Workers : (held'[w].ran /\ ~held[w].ran) => ~held[w].cancelSeen]_vars

\* Time limits: effect() is refused once its run is past its time limit: no
\* effect block is let in (confirmed) by a run that had timed out. (One let in
\* before still writes, as with a cancel.)
NoEffectPastTimeLimit ==
    [][\A w \in Workers :
          (held'[w].confirmed /\ ~held[w].confirmed) => ~held[w].timedOut]_vars

\* A run past its time limit never completes its task: its attempt fails.
TimedOutNeverAcks ==
    [][\A w \in Workers :
          LET t == held[w].task IN
          (t # 0 /\ held[w].timedOut /\ state[t] # "completed") =>
              (state'[t] = "completed" => held'[w] = held[w])]_vars

\* A run whose handler returned within its limit is never timed out after:
\* it is acked, or fails for a reason of its own (its value cannot be kept).
ReturnedNeverTimesOut ==
    [][\A w \in Workers : held[w].returned => ~held'[w].timedOut]_vars

\* R1 (results): a result is stored only by the accepted ack of the current
\* token, at most once per task, and a stale holder's value is never visible.
\* Once stored, a task's result never changes.
R1_AtMostOne ==
    [][\A t \in Ids : result[t] # NoResult => result'[t] = result[t]]_vars

\* A stored result is the value of the run whose ack completed the task: its
\* token, which is the task's token from then on (a completed task is never
\* leased or reaped again).
R1_CurrentToken ==
    \A t \in Ids : result[t] # NoResult => result[t] = token[t]

\* A result exists only for a completed task.
R1_OnlyCompleted ==
    \A t \in Ids : result[t] # NoResult => state[t] = "completed"

\* T2, wherever a run stops (no step is enabled): every task that was created
\* is completed, dead or cancelled. Runs need not stop: a holder may heartbeat
\* forever.
Settled == \A t \in Ids : state[t] \in {"none", "completed", "dead", "cancelled"}
T2_NothingLost == [](~ENABLED Next => Settled)

=============================================================================
