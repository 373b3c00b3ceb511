------------------------------ MODULE RateLimit ------------------------------
(***************************************************************************)
(* Rate limits that hold across all workers: GCRA over Redis server time,  *)
(* in lua/lease.lua, with two cursors per limited name.                    *)
(*                                                                         *)
(* One rate-limited task name with a spacing INTERVAL (T) between starts   *)
(* and a burst BURST (B); TASKS tasks of it, all in ready at the start     *)
(* (one enqueued later is one leased later: leases may come at any time).  *)
(* Redis keeps two cursors for the name: `startAt` (S_a, `start`), GCRA's  *)
(* theoretical start time, moved only by actual starts, and `nextSlot`     *)
(* (S_r, `next`), the next slot to hand a throttled task, S_r >= S_a.      *)
(*   Lease(t)   lease.lua popping t, one atomic step whichever worker runs *)
(*              it (so the model has no workers), the same for every task  *)
(*              of the name, new or throttled before (none keeps a slot):  *)
(*              first = max(S_a, now); if first - (B-1)*T <= now, t starts *)
(*              now, S_a := first + T, S_r := max(S_r, S_a); otherwise it  *)
(*              is throttled onto slot = max(S_r, first), S_r := slot + T, *)
(*              and waits on delayed until run_at = slot - (B-1)*T.        *)
(*   Promote(t) a delayed task whose run_at has come goes back to ready.   *)
(*   Cancel(t)  cancel.lua ending a task not yet started (up to            *)
(*              MAX_CANCELS of them): a throttled one gives back its slot, *)
(*              S_r coming back to one spacing after the last slot another *)
(*              task still waits for (or to S_a), if that is earlier. The  *)
(*              slots of waiting tasks are kept on `reserved:<name>`, a    *)
(*              ZSET, for this.                                            *)
(*   Release    lease.lua after a redeploy changed the limit's rate or     *)
(*              burst (up to MAX_RELEASES times): the waiting line is      *)
(*              released, every throttled task made due now, holding no    *)
(*              slot, and S_r comes back to S_a; each is checked again     *)
(*              when leased. (The code also puts S_a as far ahead at the   *)
(*              new spacing as it was at the old; the model keeps one      *)
(*              spacing.)                                                  *)
(*   Tick       Redis time passes a tick.                                  *)
(* A start is the lease that lets a task run: `starts` records its time.   *)
(* Every start passes the GCRA check at its own time, so the limit holds   *)
(* however late a throttled task is leased; one leased after starts that   *)
(* came before it is throttled again.                                      *)
(*                                                                         *)
(* LATE says when a due throttled task is leased. TRUE: any time after its *)
(* run_at (every worker may be busy). FALSE: no later than its slot,       *)
(* (B-1)*T after its run_at (Deadline); with B = 1, at its run_at.         *)
(*                                                                         *)
(* Time is bounded: the clock passes MAX_TIME only to reach a delayed      *)
(* task's run_at, so every run stops, every task started or cancelled.    *)
(* Not modelled: other names (each has its own cursors and reservations,   *)
(* read by no other), unlimited tasks (never held up: a throttled task is  *)
(* not counted against the lease's count), retries (a retried run is a new *)
(* start, checked again), the request-id replay, the wait hint, and the    *)
(* rounding of run_at up to a millisecond (later, never earlier).          *)
(*                                                                         *)
(* Checks: NeverOverRate (L1), NeverAheadOfRate, NoEarlyStart,             *)
(* EveryTaskStarts, NoGhostSlot. Mutants: RateLimitCheckThenTake (the      *)
(* cursors read and written in two steps), RateLimitNoWait (a throttled    *)
(* task left on ready), RateLimitKeptSlot (the first design: a throttled   *)
(* task keeps its slot and starts on it unchecked), RateLimitGhostSlot (a  *)
(* cancel leaves S_r where it was), RateLimitReleaseKeepsNext (a release   *)
(* leaves S_r where it was). Python transcription: rate_limit.py.          *)
(***************************************************************************)
EXTENDS Naturals, Sequences, FiniteSets

CONSTANTS
    TASKS,      \* tasks of the one rate-limited name
    INTERVAL,   \* T: the spacing between starts, in ticks (lease.lua's interval_us)
    BURST,      \* B: starts let through at once after a quiet spell (rate_burst)
    MAX_TIME,   \* the clock passes MAX_TIME only to reach a delayed task's run_at
    LATE,       \* TRUE: a due throttled task may wait for a worker any time
    MAX_CANCELS, \* tasks cancelled before they start, at most
    MAX_RELEASES \* redeploys that release the waiting line, at most

Tasks == 1..TASKS
NoRunAt == 0    \* a throttled task's run_at is later than its lease's now, so never 0
Ahead == (BURST - 1) * INTERVAL     \* how far S_a may be ahead of now for a start
\* A task is throttled at most once more per start that comes before its lease.
Horizon == MAX_TIME + (TASKS + 1) * TASKS * INTERVAL

VARIABLES
    now,        \* Redis server time, in ticks
    startAt,    \* S_a: the name's theoretical start time, moved by starts only
    nextSlot,   \* S_r: the name's next slot for a throttled task
    place,      \* each task: "ready", "delayed", "started" (leased to run) or
                \* "cancelled"
    runAt,      \* each throttled task's run_at until it starts, else NoRunAt
    starts,     \* the time of every start, in order
    releases    \* how many times the line was released

vars == <<now, startAt, nextSlot, place, runAt, starts, releases>>

TypeOK ==
    /\ now \in 0..Horizon
    /\ startAt \in 0..Horizon
    /\ nextSlot \in 0..Horizon
    /\ place \in [Tasks -> {"ready", "delayed", "started", "cancelled"}]
    /\ runAt \in [Tasks -> 0..Horizon]
    /\ starts \in Seq(0..Horizon)
    /\ releases \in 0..MAX_RELEASES

Init ==
    /\ now = 0
    /\ startAt = 0
    /\ nextSlot = 0
    /\ place = [t \in Tasks |-> "ready"]
    /\ runAt = [t \in Tasks |-> NoRunAt]
    /\ starts = <<>>
    /\ releases = 0

Throttled(t) == runAt[t] # NoRunAt

\* A throttled task's slot: the latest time GCRA's bound lets it start on time.
Deadline(t) == runAt[t] + Ahead

Max(a, b) == IF a > b THEN a ELSE b
Min(a, b) == IF a < b THEN a ELSE b

\* The slots throttled tasks other than those of U wait for (`reserved:<name>`).
SlotsBut(U) == {Deadline(u) : u \in {u \in Tasks \ U : Throttled(u)}}

\* One spacing after the last of the slots S, or S_a if that is later.
LastOf(S) == CHOOSE d \in S : \A e \in S : e <= d
After(S) == IF S = {} THEN startAt ELSE Max(startAt, LastOf(S) + INTERVAL)

\* The next slot to hand a throttled task once t has left the line.
FreeFrom(t) == After(SlotsBut({t}))

---------------------------------------------------------------------------
\* lease.lua

\* t starts now.
Start(t) ==
    /\ place' = [place EXCEPT ![t] = "started"]
    /\ runAt' = [runAt EXCEPT ![t] = NoRunAt]
    /\ starts' = Append(starts, now)

\* The GCRA step for t with the cursors read as `sa` and `sr`; a throttled
\* task waits in `to`.
Gcra(t, sa, sr, to) ==
    LET first == Max(sa, now)
        slot == Max(sr, first)
    IN IF first - Ahead <= now
       THEN /\ Start(t)
            /\ startAt' = first + INTERVAL
            /\ nextSlot' = Max(sr, first + INTERVAL)
       ELSE /\ place' = [place EXCEPT ![t] = to]
            /\ runAt' = [runAt EXCEPT ![t] = slot - Ahead]
            /\ nextSlot' = slot + INTERVAL
            /\ UNCHANGED <<startAt, starts>>

\* S_r once t, if throttled, has given back its slot: it comes back to just
\* after the slots other tasks still wait for, never forward. (A slot in the
\* middle of the line is not filled: the tasks behind it keep theirs.)
GiveBack(t) == IF Throttled(t) THEN Min(nextSlot, FreeFrom(t)) ELSE nextSlot

\* lease.lua popping t; `to`: where a throttled task waits. As built, "delayed".
\* A task throttled before gives back its slot first, whether it starts now or
\* is throttled again: a start before it may have taken its slot.
LeaseTo(t, to) ==
    /\ place[t] = "ready"
    /\ Gcra(t, startAt, GiveBack(t), to)
    /\ UNCHANGED <<now, releases>>

Lease(t) == LeaseTo(t, "delayed")

---------------------------------------------------------------------------
\* promotion and time

Promote(t) ==
    /\ place[t] = "delayed"
    /\ runAt[t] <= now
    /\ place' = [place EXCEPT ![t] = "ready"]
    /\ UNCHANGED <<now, startAt, nextSlot, runAt, starts, releases>>

\* cancel.lua, on a task not yet started; a throttled one gives back its slot.
CancelWith(t, sr) ==
    /\ place[t] \in {"ready", "delayed"}
    /\ Cardinality({u \in Tasks : place[u] = "cancelled"}) < MAX_CANCELS
    /\ place' = [place EXCEPT ![t] = "cancelled"]
    /\ runAt' = [runAt EXCEPT ![t] = NoRunAt]
    /\ nextSlot' = sr
    /\ UNCHANGED <<now, startAt, starts, releases>>

Cancel(t) == CancelWith(t, GiveBack(t))

\* lease.lua's release of the line: no task keeps a slot, S_r comes back to
\* `sr` (as built, S_a), and every throttled task is due now, to be promoted
\* and checked again like any other start.
ReleaseWith(sr) ==
    /\ releases < MAX_RELEASES
    /\ {t \in Tasks : Throttled(t)} # {}   \* (not \E: a successor per task)
    /\ runAt' = [t \in Tasks |-> NoRunAt]
    /\ nextSlot' = sr
    /\ releases' = releases + 1
    /\ UNCHANGED <<now, startAt, place, starts>>

Release == ReleaseWith(startAt)

\* Delayed tasks whose run_at has not come; throttled tasks past their slot.
Waiting == {t \in Tasks : place[t] = "delayed" /\ now < runAt[t]}
Overdue == {t \in Tasks : Throttled(t) /\ Deadline(t) <= now}

\* (Implications, not disjunctions: TLC would explore each true disjunct.)
Tick ==
    /\ now >= MAX_TIME => Waiting # {}
    /\ ~LATE => Overdue = {}
    /\ now' = now + 1
    /\ UNCHANGED <<startAt, nextSlot, place, runAt, starts, releases>>

Next ==
    \/ \E t \in Tasks : Lease(t)
    \/ \E t \in Tasks : Promote(t)
    \/ \E t \in Tasks : Cancel(t)
    \/ Release
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

\* The same bound for the windows that begin at time 0, when the name was
\* idle: the k-th start comes no earlier than (k - B) * T.
NeverAheadOfRate ==
    \A k \in 1..Len(starts) : k > BURST => starts[k] >= (k - BURST) * INTERVAL

\* A lease of t starts it or gives it a new run_at. No task is leased before
\* its run_at (the promotion guard: no busy loop on a throttled task).
Leased(t) == place[t] = "ready" /\ <<place'[t], runAt'[t]>> # <<place[t], runAt[t]>>
NoEarlyStart == [][\A t \in Tasks : Leased(t) => now >= runAt[t]]_vars

\* Wherever a run stops, every task has started or was cancelled: none is lost
\* or held forever.
AllStarted == \A t \in Tasks : place[t] \in {"started", "cancelled"}
EveryTaskStarts == [](~ENABLED Next => AllStarted)

\* No task is throttled behind a slot no one waits for: S_r, the next slot to
\* hand out, is at most one spacing after the last slot a task waits for (or
\* S_a, when none does).
NoGhostSlot == nextSlot <= After(SlotsBut({}))

=============================================================================
