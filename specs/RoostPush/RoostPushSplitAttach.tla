------------------------ MODULE RoostPushSplitAttach ------------------------
(***************************************************************************)
(* Mutant of RoostPush: the "natural" two-stage resume. The server first   *)
(* runs the gap check and streams the replay (Replay), and only later, as  *)
(* a separate step, registers the live listener (Attach). Anything the     *)
(* writer appends in between reaches neither the replay nor the listener.  *)
(*                                                                         *)
(* The module EXTENDS RoostPush so that everything except the resume is    *)
(* literally the original: same constants, variables, Append, Trim, Drop   *)
(* and the same five invariants. TLA+ forbids redefining an inherited      *)
(* name, so the new top-level definitions carry a Split prefix.            *)
(*                                                                         *)
(* RoostPushSplitAttach.cfg checks every invariant: the first one broken   *)
(* is OpenStreamIsCurrent, after 3 steps (Replay, Append, Attach).         *)
(* RoostPushSplitAttach_NoOpenStreamCheck.cfg leaves that one out and      *)
(* gets the seed's 4-step NoSilentGap counterexample. See README.md.       *)
(* Python transcription: roost_push_split_attach.py.                       *)
(***************************************************************************)
EXTENDS RoostPush

VARIABLE
    replayed    \* the replay has run on this connection; the listener is not attached yet

SplitVars == <<vars, replayed>>

SplitTypeOK ==
    /\ TypeOK
    /\ replayed \in BOOLEAN

SplitInit ==
    /\ Init
    /\ replayed = FALSE

\* Resume without its last act: the gap check and the replay, exactly as in
\* Resume, but the stream is not attached yet.
Replay ==
    /\ ~open
    /\ ~replayed
    /\ replayed' = TRUE
    /\ IF cursor < oldest - 1
          THEN /\ gapSeen' = TRUE
               /\ cursor' = latest
               /\ resumed' = FALSE
               /\ UNCHANGED <<received, dupes>>
          ELSE LET replay == (cursor + 1)..latest IN
               /\ received' = Deliver(received, replay)
               /\ dupes' = dupes + Repeats(received, replay)
               /\ cursor' = latest
               /\ resumed' = TRUE
               /\ UNCHANGED gapSeen
    /\ UNCHANGED <<latest, oldest, lost, open>>

\* The listener registers, some time after the replay. Like every step other
\* than a resume it clears the `resumed` observation.
Attach ==
    /\ replayed
    /\ open' = TRUE
    /\ replayed' = FALSE
    /\ resumed' = FALSE
    /\ UNCHANGED <<latest, oldest, cursor, received, dupes, gapSeen, lost>>

SplitNext ==
    \/ (Append /\ UNCHANGED replayed)
    \/ (Trim /\ UNCHANGED replayed)
    \/ (Drop /\ UNCHANGED replayed)
    \/ Replay
    \/ Attach

SplitSpec == SplitInit /\ [][SplitNext]_SplitVars

=============================================================================
