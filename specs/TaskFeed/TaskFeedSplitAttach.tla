------------------------ MODULE TaskFeedSplitAttach ------------------------
(***************************************************************************)
(* Mutant of TaskFeed: the "natural" two-stage resume. On connect the      *)
(* server replays the missed rows with the same atomic, batched reads      *)
(* (Replay), and when it has caught up it registers a live listener as a   *)
(* separate step (Attach); from then on every append is pushed to the      *)
(* client (SplitAppend) instead of being read after the cursor. A row      *)
(* appended between the last replayed read and Attach reaches neither.    *)
(*                                                                         *)
(* The module EXTENDS TaskFeed: Trim, Reset, Drop, the read step and every *)
(* check are literally the original's. TLA+ forbids redefining an          *)
(* inherited name, so the new definitions carry a Split prefix.            *)
(*                                                                         *)
(* TaskFeedSplitAttach.cfg checks all of TaskFeed.cfg: CaughtUpAfterResume *)
(* breaks after 4 steps (connect, replay of the empty log, append, attach). *)
(* TaskFeedSplitAttach_NoCaughtUpCheck.cfg leaves it out: NoSilentGap      *)
(* breaks one step later, when the next row is pushed and row 1 is lost.   *)
(* Python transcription: task_feed_split_attach.py.                        *)
(***************************************************************************)
EXTENDS TaskFeed

VARIABLE
    phase       \* "idle", "replay", "replayed" (not attached yet) or "live"

SplitVars == <<vars, phase>>

SplitTypeOK ==
    /\ TypeOK
    /\ phase \in {"idle", "replay", "replayed", "live"}

SplitInit ==
    /\ Init
    /\ phase = "idle"

\* Append, and a live listener pushes the row to the client at once, unless
\* the connection breaks in the same instant.
SplitAppend ==
    LET e == IF hasEpoch THEN epochs ELSE epochs + 1
        row == <<e, head + 1>>
    IN
    /\ head < MAX_ID
    /\ epochs' = e
    /\ hasEpoch' = TRUE
    /\ head' = head + 1
    /\ said' = ""
    /\ UNCHANGED <<first, resets, mark, phase>>
    /\ \/ /\ open /\ phase = "live"
          /\ got' = got \cup {row}
          /\ owed' = owed
          /\ dupes' = dupes + (IF row \in got THEN 1 ELSE 0)
          /\ cursor' = head + 1
          /\ cEpoch' = e
          /\ lost' = IF cEpoch = 0 THEN FALSE ELSE lost
          /\ UNCHANGED <<open, drops>>
       \/ /\ open /\ phase = "live"
          /\ drops < MAX_DROPS
          /\ open' = FALSE
          /\ drops' = drops + 1
          /\ owed' = owed \cup {row}
          /\ UNCHANGED <<cEpoch, cursor, got, dupes, lost>>
       \/ /\ ~(open /\ phase = "live")
          /\ owed' = owed \cup {row}
          /\ UNCHANGED <<open, cEpoch, cursor, got, dupes, lost, drops>>

SplitConnect ==
    /\ ~open
    /\ open' = TRUE
    /\ phase' = "replay"
    /\ said' = ""
    /\ UNCHANGED <<logVars, cEpoch, cursor, mark, got, owed, dupes, lost, drops>>

\* The replay: TaskFeed's read step while replaying; once a read reaches the
\* head, or nothing is left to read, the replay is over but the listener is
\* not attached yet. Only Attach completes the resume.
Replay ==
    /\ open
    /\ phase = "replay"
    /\ IF ~IsGap /\ ToRead = 0
       THEN /\ phase' = "replayed"
            /\ said' = ""
            /\ UNCHANGED <<logVars, open, cEpoch, cursor, mark, got, owed, dupes, lost,
                           drops>>
       ELSE /\ ReadStep("")
            /\ phase' = IF open' /\ ~IsGap /\ ToRead < BATCH THEN "replayed" ELSE phase

Attach ==
    /\ open
    /\ phase = "replayed"
    /\ phase' = "live"
    /\ said' = "current"
    /\ UNCHANGED <<logVars, open, cEpoch, cursor, mark, got, owed, dupes, lost, drops>>

SplitNext ==
    \/ SplitAppend
    \/ (Trim /\ UNCHANGED phase)
    \/ (Reset /\ UNCHANGED phase)
    \/ SplitConnect
    \/ (Drop /\ UNCHANGED phase)
    \/ Replay
    \/ Attach

SplitSpec == SplitInit /\ [][SplitNext]_SplitVars

SplitReachesHead == [](~ENABLED SplitNext => AtHead)

=============================================================================
