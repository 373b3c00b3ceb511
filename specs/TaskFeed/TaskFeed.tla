------------------------------- MODULE TaskFeed -------------------------------
(***************************************************************************)
(* taskq's change feed, as built (lua/_common.lua emit, lua/read_events.lua *)
(* and feed/stream.py).                                                    *)
(*                                                                         *)
(* Every state change appends a row with the dense id <seq>-0 (the counter *)
(* is bumped in the same script). The first row of a new log also creates  *)
(* its epoch, so a log whose keys were lost and recreated has a new one.   *)
(* The stream is trimmed to its retention. One client reads the feed: its  *)
(* cursor is <<epoch, seq>> of the last row it received (epoch 0 = none:   *)
(* the start, "the whole current log"). Every read is ONE atomic script    *)
(* (read_events.lua): a gap if the cursor's epoch is not the log's, if the *)
(* cursor is beyond the head, or if rows after it were trimmed; otherwise  *)
(* at most BATCH rows after the cursor. A resume of many rows is therefore *)
(* several reads, each atomic, and the live phase is the same read again.  *)
(* The frames of a read may be cut off anywhere by a broken connection:    *)
(* the client gets a prefix of the rows, or misses the gap frame, and      *)
(* reconnects with the cursor it has (Last-Event-ID).                      *)
(*                                                                         *)
(* A read that returns no rows changes nothing and is left out (a stutter), *)
(* so a run stops exactly when nothing more can happen.                    *)
(*                                                                         *)
(* Abstractions: Trim removes any prefix of the rows older than the newest *)
(* KEEP at any moment; the XTRIM that ends each appending script is one   *)
(* of those behaviours. Not modelled: a crash that rolls the log back      *)
(* within an epoch (read_events' 'ahead' and 'diverged' gaps, which the    *)
(* model's reachable states never need), malformed ids, and the hub's      *)
(* ring: it holds only rows an earlier atomic read returned (contiguous,   *)
(* one epoch), so serving from it is an earlier Read's answer.             *)
(*                                                                         *)
(* F1-F5 of design.md: NoSilentGap, NoDuplicates, CaughtUpAfterResume,     *)
(* GapOnlyWhenLost, OpenStreamReachesHead. NoSilentLoss is stricter than   *)
(* F1 and the feed does not meet it; see TaskFeed_NoSilentLoss.cfg.        *)
(* Mutant: TaskFeedSplitAttach. Python transcription: task_feed.py.        *)
(***************************************************************************)
EXTENDS Naturals, FiniteSets

CONSTANTS
    MAX_ID,         \* rows per log (appends stop there, keeping the model finite)
    KEEP,           \* retention: rows older than the newest KEEP may be trimmed
    BATCH,          \* most rows one read returns
    MAX_RESETS,     \* times the log's keys are lost and it starts over
    MAX_DROPS       \* times the connection breaks

Epochs == 0..(MAX_RESETS + 1)
Rows == Epochs \X (1..MAX_ID)

VARIABLES
    epochs,     \* log: epochs created so far; the current one while hasEpoch
    hasEpoch,   \* log: the epoch key exists (a row was appended since the start)
    head,       \* log: the seq counter, the id of the last row (0 = none)
    first,      \* log: the oldest retained id (head + 1 when nothing is retained)
    resets,     \* log: resets so far
    open,       \* client: its connection is up and reading
    cEpoch,     \* client: its cursor's epoch (0 = none)
    cursor,     \* client: its cursor's seq
    mark,       \* client: where its last gap resynced it, <<epoch, seq>>
    got,        \* client: every row it received
    owed,       \* history: rows appended since its last gap, not received yet
    dupes,      \* client: deliveries of a row it already had
    lost,       \* history: since its last gap, rows it was owed were removed
                \*          or its log was reset
    said,       \* observation: "gap" or "current" (a read reached the head)
    drops       \* connections broken so far

logVars == <<epochs, hasEpoch, head, first, resets>>
vars == <<logVars, open, cEpoch, cursor, mark, got, owed, dupes, lost, said, drops>>

TypeOK ==
    /\ epochs \in Epochs
    /\ hasEpoch \in BOOLEAN
    /\ head \in 0..MAX_ID
    /\ first \in 1..(head + 1)
    /\ resets \in 0..MAX_RESETS
    /\ open \in BOOLEAN
    /\ cEpoch \in Epochs
    /\ cursor \in 0..MAX_ID
    /\ mark \in Epochs \X (0..MAX_ID)
    /\ got \subseteq Rows
    /\ owed \subseteq Rows
    /\ dupes \in Nat
    /\ lost \in BOOLEAN
    /\ said \in {"", "gap", "current"}
    /\ drops \in 0..MAX_DROPS

Init ==
    /\ epochs = 0
    /\ hasEpoch = FALSE
    /\ head = 0
    /\ first = 1
    /\ resets = 0
    /\ open = FALSE
    /\ cEpoch = 0
    /\ cursor = 0
    /\ mark = <<0, 0>>
    /\ got = {}
    /\ owed = {}
    /\ dupes = 0
    /\ lost = FALSE
    /\ said = ""
    /\ drops = 0

---------------------------------------------------------------------------
\* helpers

LogEpoch == IF hasEpoch THEN epochs ELSE 0

\* Row r is after the client's position.
Ahead(r) == cEpoch = 0 \/ r[1] > cEpoch \/ (r[1] = cEpoch /\ r[2] > cursor)

Min(a, b) == IF a < b THEN a ELSE b

---------------------------------------------------------------------------
\* steps

\* emit(): INCR the counter and XADD <seq>-0; the first row of a log creates
\* its epoch. Every row is owed to the client.
Append ==
    LET e == IF hasEpoch THEN epochs ELSE epochs + 1 IN
    /\ head < MAX_ID
    /\ epochs' = e
    /\ hasEpoch' = TRUE
    /\ head' = head + 1
    /\ owed' = owed \cup {<<e, head + 1>>}
    /\ said' = ""
    /\ UNCHANGED <<first, resets, open, cEpoch, cursor, mark, got, dupes, lost, drops>>

\* Retention drops a prefix of the rows older than the newest KEEP.
Trim ==
    \E o \in (first + 1)..(head - KEEP + 1) :
        /\ first' = o
        /\ lost' = (lost \/ (cEpoch \in {0, LogEpoch} /\ o - 1 > cursor))
        /\ said' = ""
        /\ UNCHANGED <<epochs, hasEpoch, head, resets, open, cEpoch, cursor, mark, got,
                       owed, dupes, drops>>

\* The log's keys are lost (stream, counter and epoch); the next append
\* starts a new epoch at id 1.
Reset ==
    /\ resets < MAX_RESETS
    /\ hasEpoch
    /\ hasEpoch' = FALSE
    /\ head' = 0
    /\ first' = 1
    /\ resets' = resets + 1
    /\ lost' = (lost \/ (cEpoch # 0 /\ cEpoch = epochs))
    /\ said' = ""
    /\ UNCHANGED <<epochs, open, cEpoch, cursor, mark, got, owed, dupes, drops>>

\* The client (re)connects with its cursor as Last-Event-ID.
Connect ==
    /\ ~open
    /\ open' = TRUE
    /\ said' = ""
    /\ UNCHANGED <<logVars, cEpoch, cursor, mark, got, owed, dupes, lost, drops>>

\* The connection breaks between reads.
Drop ==
    /\ open
    /\ drops < MAX_DROPS
    /\ open' = FALSE
    /\ drops' = drops + 1
    /\ said' = ""
    /\ UNCHANGED <<logVars, cEpoch, cursor, mark, got, owed, dupes, lost>>

\* read_events.lua's checks, in its order ('diverged' needs a rollback).
IsGap == (cEpoch # 0 /\ cEpoch # LogEpoch) \/ cursor > head \/ cursor < first - 1

ToRead == Min(head - cursor, BATCH)

\* The gap frame arrives: the client resyncs at the head.
ReadGap ==
    /\ cEpoch' = LogEpoch
    /\ cursor' = head
    /\ mark' = <<LogEpoch, head>>
    /\ owed' = {}
    /\ lost' = FALSE
    /\ said' = "gap"
    /\ UNCHANGED <<open, got, dupes, drops>>

\* The connection breaks before the gap frame arrives.
ReadGapLost ==
    /\ drops < MAX_DROPS
    /\ open' = FALSE
    /\ drops' = drops + 1
    /\ said' = ""
    /\ UNCHANGED <<cEpoch, cursor, mark, got, owed, dupes, lost>>

\* The first n of the ToRead rows arrive; fewer than all only if the
\* connection breaks. `reached` is what `said` becomes when all of a read
\* that reached the head arrived.
ReadRows(n, reached) ==
    LET rows == {<<LogEpoch, x>> : x \in (cursor + 1)..(cursor + n)} IN
    /\ n = ToRead \/ drops < MAX_DROPS
    /\ got' = got \cup rows
    /\ owed' = owed \ rows
    /\ dupes' = dupes + Cardinality(got \cap rows)
    /\ cursor' = cursor + n
    /\ cEpoch' = IF n > 0 THEN LogEpoch ELSE cEpoch
    /\ lost' = IF n > 0 /\ cEpoch = 0 THEN FALSE ELSE lost
    /\ IF n = ToRead
       THEN /\ said' = IF ToRead < BATCH THEN reached ELSE ""
            /\ UNCHANGED <<open, drops>>
       ELSE /\ open' = FALSE
            /\ drops' = drops + 1
            /\ said' = ""
    /\ UNCHANGED mark

\* One atomic read and what arrives of it.
ReadStep(reached) ==
    /\ IF IsGap
       THEN ReadGap \/ ReadGapLost
       ELSE /\ ToRead > 0
            /\ \E n \in 0..ToRead : ReadRows(n, reached)
    /\ UNCHANGED logVars

Read == open /\ ReadStep("current")

Next == Append \/ Trim \/ Reset \/ Connect \/ Drop \/ Read

Spec == Init /\ [][Next]_vars

---------------------------------------------------------------------------
\* F1-F5 (design.md section 3)

\* F1: since its last gap the client has left no log except through a gap,
\* and holds every row of its log from where it resynced up to its cursor.
NoSilentGap ==
    /\ mark[1] # 0 => cEpoch = mark[1]
    /\ \A x \in ((IF cEpoch = mark[1] THEN mark[2] ELSE 0) + 1)..cursor :
          <<cEpoch, x>> \in got

\* F2: no row is delivered twice.
NoDuplicates == dupes = 0

\* F3: a read that reached the head leaves the client at the head.
CaughtUpAfterResume == said = "current" => (cEpoch = LogEpoch /\ cursor = head)

\* F4: a gap is signalled only if rows the client was owed were removed since
\* its last gap, or its log was reset (the server cannot tell then).
GapOnlyWhenLost == [][said' = "gap" => lost]_vars

\* F5: wherever a run stops, the stream is open and at the log's head.
AtHead == open /\ cEpoch = LogEpoch /\ cursor = head
OpenStreamReachesHead == [](~ENABLED Next => AtHead)

\* Stricter than F1: every row appended since the last gap (or the start) and
\* not yet received is still ahead of the client, in whatever log it was.
NoSilentLoss == \A r \in owed : Ahead(r)

=============================================================================
