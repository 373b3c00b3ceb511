---------------------------- MODULE QueueRateLimit ----------------------------
(***************************************************************************)
(* Two rate limits over the same tasks, as lua/lease.lua applies them: the *)
(* task name's and the queue's own ('*', App.queue_rate_limit). A start    *)
(* must pass both; each limit keeps the two cursors of RateLimit.tla,      *)
(* `startAt` (S_a) and `nextSlot` (S_r), and the line of slots its         *)
(* throttled tasks wait for (`reserved:<limit>`). A task refused by either *)
(* waits on delayed for the later of the slots the refusing limits handed  *)
(* it, holding a slot in each of them.                                     *)
(*                                                                         *)
(* What this model adds to RateLimit.tla is a redeploy that raises the     *)
(* name's rate while the queue's stays: lease.lua releases the name's line *)
(* (each task in it due now, to be checked again) and leaves the queue's.  *)
(* A released task leased before its queue slot is refused by the queue   *)
(* limit; it keeps the queue slot it waits for, rather than giving it back *)
(* and taking one at the end of the queue's line, so a raise never sends   *)
(* the waiting tasks to the back (NoPlaceLost).                            *)
(*                                                                         *)
(* Or (REDEPLOY = "remove") a redeploy that removes the name's limit:      *)
(* lift_rate_limits.lua, run by the new deploy's workers before they       *)
(* lease, releases its line and forgets its cursors, and no lease applies  *)
(* it after. A task then waits for nothing but the queue's slot it holds   *)
(* (NothingWaitsForARemovedLimit).                                         *)
(*                                                                         *)
(*   Lease(t)   lease.lua popping t. For each limit L, first = max(S_a,    *)
(*              now); L refuses t if first - (B-1)*T_L > now. Refused by   *)
(*              none, t starts: each S_a := first + T_L, and a slot t      *)
(*              held is given back. Else t waits: for each refusing L, t   *)
(*              keeps its slot if it holds one no start has taken          *)
(*              (slot >= first), else gives it back and takes              *)
(*              max(S_r, first), S_r := slot + T_L; a limit that does not  *)
(*              refuse gets its slot back. run_at is the latest            *)
(*              slot - (B-1)*T_L over the refusing limits.                 *)
(*   Promote(t) a delayed task whose run_at has come goes back to ready.   *)
(*   Raise      the redeploy (at most MAX_RELEASES of them, from INTERVAL  *)
(*              to RAISED, once): T_name := RAISED, S_a put as far ahead   *)
(*              of now at the new spacing as it was at the old (rounded    *)
(*              down, as lease.lua's math.floor), S_r := S_a, and the      *)
(*              name's line released: its tasks hold no name slot and are  *)
(*              due now, keeping their queue slots.                        *)
(*   Remove     the redeploy (REDEPLOY = "remove"): the name's line        *)
(*              released as by Raise, its S_a and S_r back to 0 (HDEL),    *)
(*              and the name's limit no longer in force.                   *)
(*   Tick       Redis time passes a tick.                                  *)
(*                                                                         *)
(* A due task may wait for a worker any time (RateLimit.tla's LATE).       *)
(* Not modelled (RateLimit.tla covers them for one limit): cancels, the    *)
(* wait hint, the rounding of run_at up to a millisecond; other names      *)
(* (each has its own cursors; the queue's line holds their tasks too).     *)
(*                                                                         *)
(* Checks: NeverOverRate (L1 for both limits, the name's at the raised     *)
(* rate over every window and at the first over those before the           *)
(* redeploy), NoGhostSlot for each limit, NoEarlyStart, EveryTaskStarts,   *)
(* NoPlaceLost, NothingWaitsForARemovedLimit. Mutants:                     *)
(* QueueRateLimitRetake (a refused task always gives its slot back and     *)
(* takes the next), QueueRateLimitKeepLine (a removed limit's line kept).  *)
(* Python transcription: queue_rate_limit.py.                              *)
(***************************************************************************)
EXTENDS Naturals, Sequences, FiniteSets

CONSTANTS
    TASKS,          \* tasks of the one name, all in ready at the start
    INTERVAL,       \* the name's spacing between starts, in ticks, before the raise
    RAISED,         \* the name's spacing after the redeploy (RAISED < INTERVAL)
    QUEUE_INTERVAL, \* the queue limit's spacing
    BURST,          \* B: starts let through at once, for both limits
    MAX_TIME,       \* the clock passes MAX_TIME only to reach a delayed task's run_at
    MAX_RELEASES,   \* redeploys, at most (0 or 1)
    REDEPLOY        \* what the redeploy does to the name's limit: "raise" or "remove"

Tasks == 1..TASKS
Limits == {"name", "queue"}
None == 0       \* no slot: a slot handed out is later than the lease's now
NoRunAt == 0
Horizon == MAX_TIME + (TASKS + 1) * TASKS * (INTERVAL + QUEUE_INTERVAL)

VARIABLES
    now,        \* Redis server time, in ticks
    spacing,    \* each limit's spacing between starts (`<limit>|interval`)
    startAt,    \* each limit's S_a, moved by starts only
    nextSlot,   \* each limit's S_r, the next slot for a throttled task
    place,      \* each task: "ready", "delayed" or "started"
    slot,       \* each task: the slot it waits for in each limit's line, or None
    runAt,      \* each task: when it is due while delayed, else NoRunAt
    starts,     \* the time of every start, in order
    releases,   \* how many redeploys raised or removed the name's limit
    raisedAt    \* how many starts came before the redeploy

vars == <<now, spacing, startAt, nextSlot, place, slot, runAt, starts, releases, raisedAt>>

Times == 0..Horizon

TypeOK ==
    /\ now \in Times
    /\ spacing \in [Limits -> {INTERVAL, RAISED, QUEUE_INTERVAL}]
    /\ startAt \in [Limits -> Times]
    /\ nextSlot \in [Limits -> Times]
    /\ place \in [Tasks -> {"ready", "delayed", "started"}]
    /\ slot \in [Tasks -> [Limits -> Times]]
    /\ runAt \in [Tasks -> Times]
    /\ starts \in Seq(Times)
    /\ releases \in 0..MAX_RELEASES
    /\ raisedAt \in 0..TASKS

Init ==
    /\ now = 0
    /\ spacing = [l \in Limits |-> IF l = "name" THEN INTERVAL ELSE QUEUE_INTERVAL]
    /\ startAt = [l \in Limits |-> 0]
    /\ nextSlot = [l \in Limits |-> 0]
    /\ place = [t \in Tasks |-> "ready"]
    /\ slot = [t \in Tasks |-> [l \in Limits |-> None]]
    /\ runAt = [t \in Tasks |-> NoRunAt]
    /\ starts = <<>>
    /\ releases = 0
    /\ raisedAt = 0

Max(a, b) == IF a > b THEN a ELSE b
Min(a, b) == IF a < b THEN a ELSE b

Ahead(l) == (BURST - 1) * spacing[l]
First(l) == Max(startAt[l], now)
Refuses(l) == First(l) - Ahead(l) > now

\* The limits leases apply: both, until a redeploy removes the name's.
InForce == IF REDEPLOY = "remove" /\ releases > 0 THEN {"queue"} ELSE Limits

\* The slots of l's line held by tasks other than those of U.
SlotsBut(l, U) == {slot[u][l] : u \in {u \in Tasks \ U : slot[u][l] # None}}
LastOf(S) == CHOOSE d \in S : \A e \in S : e <= d
\* One spacing after the last of l's slots S, or S_a if that is later.
After(l, S) == IF S = {} THEN startAt[l] ELSE Max(startAt[l], LastOf(S) + spacing[l])

\* l's S_r once t has given back the slot it holds there, if any: back to just
\* after the slots other tasks still wait for, never forward.
GiveBack(t, l) ==
    IF slot[t][l] # None THEN Min(nextSlot[l], After(l, SlotsBut(l, {t}))) ELSE nextSlot[l]

\* t holds a slot of l that no start has taken: it can still start on it.
StillAhead(t, l) == slot[t][l] # None /\ slot[t][l] >= First(l)

---------------------------------------------------------------------------
\* lease.lua

Start(t) ==
    /\ place' = [place EXCEPT ![t] = "started"]
    /\ slot' = [slot EXCEPT ![t] = [l \in Limits |-> None]]
    /\ runAt' = [runAt EXCEPT ![t] = NoRunAt]
    /\ starts' = Append(starts, now)
    /\ startAt' = [l \in Limits |-> IF l \in InForce THEN First(l) + spacing[l]
                                                    ELSE startAt[l]]
    /\ nextSlot' = [l \in Limits |-> IF l \in InForce
                                     THEN Max(GiveBack(t, l), First(l) + spacing[l])
                                     ELSE GiveBack(t, l)]

\* t throttled by the limits `refusing`, keeping its slots in those of `kept`.
Throttle(t, refusing, kept) ==
    LET given == [l \in Limits |->
                    IF l \in kept THEN slot[t][l]
                    ELSE IF l \in refusing THEN Max(GiveBack(t, l), First(l))
                    ELSE None]
        due(l) == IF l \in refusing THEN given[l] - Ahead(l) ELSE NoRunAt
    IN /\ place' = [place EXCEPT ![t] = "delayed"]
       /\ slot' = [slot EXCEPT ![t] = given]
       /\ runAt' = [runAt EXCEPT ![t] = Max(due("name"), due("queue"))]
       /\ nextSlot' = [l \in Limits |->
                        IF l \in kept THEN nextSlot[l]
                        ELSE IF l \in refusing THEN given[l] + spacing[l]
                        ELSE GiveBack(t, l)]
       /\ UNCHANGED <<startAt, starts>>

\* lease.lua popping t; `keeps` says whether a refused task keeps the slots it
\* holds that are still ahead (as built, TRUE).
LeaseKeeping(t, keeps) ==
    LET refusing == {l \in InForce : Refuses(l)}
    IN /\ place[t] = "ready"
       /\ IF refusing = {}
          THEN Start(t)
          ELSE Throttle(t, refusing,
                        IF keeps THEN {l \in refusing : StillAhead(t, l)} ELSE {})
       /\ UNCHANGED <<now, spacing, releases, raisedAt>>

Lease(t) == LeaseKeeping(t, TRUE)

---------------------------------------------------------------------------
\* promotion, the redeploy and time

Promote(t) ==
    /\ place[t] = "delayed"
    /\ runAt[t] <= now
    /\ place' = [place EXCEPT ![t] = "ready"]
    /\ UNCHANGED <<now, spacing, startAt, nextSlot, slot, runAt, starts, releases, raisedAt>>

\* S_a of the name put as far ahead of now at RAISED as it was at INTERVAL.
Rescaled == IF startAt["name"] > now
            THEN now + ((startAt["name"] - now) * RAISED) \div INTERVAL
            ELSE startAt["name"]

Raise ==
    /\ REDEPLOY = "raise"
    /\ releases < MAX_RELEASES
    /\ spacing' = [spacing EXCEPT !["name"] = RAISED]
    /\ startAt' = [startAt EXCEPT !["name"] = Rescaled]
    /\ nextSlot' = [nextSlot EXCEPT !["name"] = Rescaled]
    /\ slot' = [t \in Tasks |-> [slot[t] EXCEPT !["name"] = None]]
    /\ runAt' = [t \in Tasks |-> IF slot[t]["name"] # None THEN NoRunAt ELSE runAt[t]]
    /\ releases' = releases + 1
    /\ raisedAt' = Len(starts)
    /\ UNCHANGED <<now, place, starts>>

\* No lease applies the name's limit after; `releasing` (as built, TRUE) says
\* whether its line is released and its cursors forgotten as it goes.
RemoveReleasing(releasing) ==
    /\ REDEPLOY = "remove"
    /\ releases < MAX_RELEASES
    /\ IF releasing
       THEN /\ startAt' = [startAt EXCEPT !["name"] = 0]
            /\ nextSlot' = [nextSlot EXCEPT !["name"] = 0]
            /\ slot' = [t \in Tasks |-> [slot[t] EXCEPT !["name"] = None]]
            /\ runAt' = [t \in Tasks |-> IF slot[t]["name"] # None THEN NoRunAt
                                                                  ELSE runAt[t]]
       ELSE UNCHANGED <<startAt, nextSlot, slot, runAt>>
    /\ releases' = releases + 1
    /\ raisedAt' = Len(starts)
    /\ UNCHANGED <<now, spacing, place, starts>>

Remove == RemoveReleasing(TRUE)

Waiting == {t \in Tasks : place[t] = "delayed" /\ now < runAt[t]}

Tick ==
    /\ now >= MAX_TIME => Waiting # {}
    /\ now' = now + 1
    /\ UNCHANGED <<spacing, startAt, nextSlot, place, slot, runAt, starts, releases,
                   raisedAt>>

Next ==
    \/ \E t \in Tasks : Lease(t)
    \/ \E t \in Tasks : Promote(t)
    \/ Raise
    \/ Remove
    \/ Tick

Spec == Init /\ [][Next]_vars

---------------------------------------------------------------------------
\* checks

\* RateLimit.tla's bound: every window of length W holds at most
\* floor(W / T) + B of the starts S (in time order).
Bounded(S, T) ==
    \A i, j \in 1..Len(S) : i <= j => j - i + 1 <= (S[j] - S[i]) \div T + BURST

\* L1 for the queue's limit, and for the name's: at the raised rate over every
\* window (unless removed), and at the first rate over the starts before the
\* redeploy.
NeverOverRate ==
    /\ Bounded(starts, QUEUE_INTERVAL)
    /\ REDEPLOY = "raise" => Bounded(starts, RAISED)
    /\ Bounded(IF releases = 0 THEN starts ELSE SubSeq(starts, 1, raisedAt), INTERVAL)

\* Each limit's S_r is at most one spacing after the last slot a task waits for
\* there (or its S_a, when none does).
NoGhostSlot == \A l \in Limits : nextSlot[l] <= After(l, SlotsBut(l, {}))

\* No task is leased before its run_at.
Leased(t) == place[t] = "ready" /\ place'[t] # "ready"
NoEarlyStart == [][\A t \in Tasks : Leased(t) => now >= runAt[t]]_vars

AllStarted == \A t \in Tasks : place[t] = "started"
EveryTaskStarts == [](~ENABLED Next => AllStarted)

\* A task keeps its place in a limit's line while no start has taken its slot:
\* throttled again before that slot (made due early by the other line's
\* release), it waits for the same slot, not one further back.
NoPlaceLost ==
    [][\A t \in Tasks, l \in Limits :
        (StillAhead(t, l) /\ slot'[t][l] # None) => slot'[t][l] <= slot[t][l]]_vars

\* Once the name's limit is removed, a delayed task waits for nothing but the
\* queue's slot it holds: due when that slot lets it start, or now if it holds none.
NothingWaitsForARemovedLimit ==
    "name" \notin InForce =>
        \A t \in Tasks : place[t] = "delayed" =>
            runAt[t] <= IF slot[t]["queue"] # None THEN slot[t]["queue"] - Ahead("queue")
                                                  ELSE now

=============================================================================
