------------------------------ MODULE RateLimit ------------------------------
(***************************************************************************)
(* Rate limits that hold across all workers, as built (lua/lease.lua's     *)
(* `admitted`, taskq/rates.py): GCRA over Redis server time.               *)
(*                                                                         *)
(* One rate-limited task name with a spacing INTERVAL (T) between starts   *)
(* and a burst BURST (B); TASKS tasks of it, all in ready at the start     *)
(* (one enqueued later is one leased later: leases may come at any time).  *)
(* Redis keeps the name's next slot `nextSlot` (S, {q}:rates), the         *)
(* theoretical start of its next run.                                      *)
(*   Lease(t)   lease.lua popping t, one atomic step whichever worker runs *)
(*              it (so the model has no workers): a task that kept a slot  *)
(*              starts and takes no other; any other takes the next slot,  *)
(*              first = max(S, now), S := first + T, and starts now if     *)
(*              first - (B-1)*T <= now, else waits on delayed until        *)
(*              run_at = first - (B-1)*T, keeping that slot (rate_slot).   *)
(*   Promote(t) a delayed task whose run_at has come goes back to ready.   *)
(*   Tick       Redis time passes a tick.                                  *)
(* A start is the lease that lets a task run: `starts` records its time.   *)
(*                                                                         *)
(* LATE says when a due throttled task is leased. TRUE: any time after its *)
(* slot (every worker may be busy). FALSE: no later than its theoretical   *)
(* start, (B-1)*T after its slot (Deadline); with B = 1, at its slot.      *)
(*                                                                         *)
(* Time is bounded: the clock passes MAX_TIME only to reach a delayed      *)
(* task's slot, so every run stops, all tasks started. Not modelled: other *)
(* names (each has its own slot, read by no other), unlimited tasks (never *)
(* held up: a throttled task is not counted against the lease's count),    *)
(* retries (a retried run is a new start: its slot was spent), the         *)
(* request-id replay, the wait hint, and the rounding of run_at up to a    *)
(* millisecond (later, never earlier).                                     *)
(*                                                                         *)
(* Checks: NeverOverRate (L1), NeverAheadOfRate, SlotKept, EveryTaskStarts.*)
(* Mutants: RateLimitCheckThenTake (the slot read and written in two       *)
(* steps), RateLimitTakesAgain (a kept slot ignored), RateLimitNoWait (a   *)
(* throttled task left on ready). Python transcription: rate_limit.py.     *)
(***************************************************************************)
EXTENDS Naturals, Sequences

CONSTANTS
    TASKS,      \* tasks of the one rate-limited name
    INTERVAL,   \* T: the spacing between starts, in ticks (lease.lua's interval_us)
    BURST,      \* B: starts let through at once after a quiet spell (rate_burst)
    MAX_TIME,   \* the clock passes MAX_TIME only to reach a delayed task's slot
    LATE        \* TRUE: a due throttled task may wait for a worker any time

Tasks == 1..TASKS
NoSlot == 0     \* a slot is a run_at later than its lease's now, so never 0
Ahead == (BURST - 1) * INTERVAL     \* how far S may be ahead of now for a start
Horizon == MAX_TIME + TASKS * INTERVAL

VARIABLES
    now,        \* Redis server time, in ticks
    nextSlot,   \* S: the name's next slot ({q}:rates)
    place,      \* each task: "ready", "delayed" or "started" (leased to run)
    slot,       \* each task's kept slot (the record's rate_slot = its run_at), or NoSlot
    starts      \* the time of every start, in order

vars == <<now, nextSlot, place, slot, starts>>

TypeOK ==
    /\ now \in 0..Horizon
    /\ nextSlot \in 0..Horizon
    /\ place \in [Tasks -> {"ready", "delayed", "started"}]
    /\ slot \in [Tasks -> 0..Horizon]
    /\ starts \in Seq(0..Horizon)

Init ==
    /\ now = 0
    /\ nextSlot = 0
    /\ place = [t \in Tasks |-> "ready"]
    /\ slot = [t \in Tasks |-> NoSlot]
    /\ starts = <<>>

Kept(t) == slot[t] # NoSlot

\* A kept slot's theoretical start: the latest start GCRA's bound allows it.
Deadline(t) == slot[t] + Ahead

---------------------------------------------------------------------------
\* lease.lua

\* t starts now; a slot it kept is spent (HDEL rate_slot).
Start(t) ==
    /\ place' = [place EXCEPT ![t] = "started"]
    /\ slot' = [slot EXCEPT ![t] = NoSlot]
    /\ starts' = Append(starts, now)

\* The GCRA step for t with the name's next slot as `read`: t takes the slot
\* `first`, and starts now if that slot is at most B-1 spacings ahead, else
\* waits in `to` until B-1 spacings before it, keeping it.
Gcra(t, read, to) ==
    LET first == IF read > now THEN read ELSE now
    IN /\ nextSlot' = first + INTERVAL
       /\ IF first <= now + Ahead
          THEN Start(t)
          ELSE /\ place' = [place EXCEPT ![t] = to]
               /\ slot' = [slot EXCEPT ![t] = first - Ahead]
               /\ UNCHANGED starts

\* lease.lua popping t. `keep`: a kept slot is honoured (the task starts and
\* takes no other); `to`: where a throttled task waits. As built, TRUE and
\* "delayed".
LeaseWith(t, keep, to) ==
    /\ place[t] = "ready"
    /\ IF keep /\ Kept(t)
       THEN /\ Start(t)
            /\ UNCHANGED nextSlot
       ELSE Gcra(t, nextSlot, to)
    /\ UNCHANGED now

Lease(t) == LeaseWith(t, TRUE, "delayed")

---------------------------------------------------------------------------
\* promotion and time

Promote(t) ==
    /\ place[t] = "delayed"
    /\ slot[t] <= now
    /\ place' = [place EXCEPT ![t] = "ready"]
    /\ UNCHANGED <<now, nextSlot, slot, starts>>

\* Delayed tasks whose slot has not come; throttled tasks past their deadline.
Waiting == {t \in Tasks : place[t] = "delayed" /\ now < slot[t]}
Overdue == {t \in Tasks : Kept(t) /\ Deadline(t) <= now}

\* (Implications, not disjunctions: TLC would explore each true disjunct.)
Tick ==
    /\ now >= MAX_TIME => Waiting # {}
    /\ ~LATE => Overdue = {}
    /\ now' = now + 1
    /\ UNCHANGED <<nextSlot, place, slot, starts>>

Next ==
    \/ \E t \in Tasks : Lease(t)
    \/ \E t \in Tasks : Promote(t)
    \/ Tick

Spec == Init /\ [][Next]_vars

---------------------------------------------------------------------------
\* checks

\* L1, the promise: every window of time of length W > 0 holds at most
\* floor(W / T) + B starts. `starts` is in time order (now never goes back), so
\* a window's starts are starts[i..j] for some i <= j, and a window holds them
\* exactly when W > starts[j] - starts[i]; W just above that difference gives
\* the smallest bound, (starts[j] - starts[i]) \div T + B, whether or not the
\* difference is a multiple of T. So the promise for all windows is this, for
\* all i <= j. (It allows B + 1 starts within T, B at once then one a spacing
\* later; "B + 1 starts span at least B * T" would be a token bucket that must
\* refill entirely, which GCRA is not.)
NeverOverRate ==
    \A i, j \in 1..Len(starts) :
        i <= j => j - i + 1 <= (starts[j] - starts[i]) \div INTERVAL + BURST

\* The same bound for the windows that begin at time 0, when no slot was
\* taken: the k-th start comes no earlier than (k - B) * T. Late starts break
\* L1 only by catching up on slots that passed; this holds whatever LATE is.
NeverAheadOfRate ==
    \A k \in 1..Len(starts) : k > BURST => starts[k] >= (k - BURST) * INTERVAL

\* A task that kept a slot is started when it is next leased, not before its
\* slot (no lease of it before then: no busy loop), and takes no new slot.
SlotKept ==
    [][\A t \in Tasks :
         place[t] = "ready" /\ Kept(t) /\ place'[t] # "ready" =>
            /\ place'[t] = "started"
            /\ now >= slot[t]
            /\ nextSlot' = nextSlot]_vars

\* Wherever a run stops, every task has started: none is lost or held forever.
AllStarted == \A t \in Tasks : place[t] = "started"
EveryTaskStarts == [](~ENABLED Next => AllStarted)

=============================================================================
