------------------------- MODULE ResultWaitSplitWatch -------------------------
(***************************************************************************)
(* Mutant of ResultWait: watch split in two. Read (HGET state) returns an  *)
(* ended task's outcome; a task that has not ended is marked by a second,  *)
(* separate call (Mark: HSET waiters). A task that ends between the two    *)
(* finds no flag, pushes nothing, and the producer then blocks on an empty *)
(* done list for a task that has already ended.                            *)
(*                                                                         *)
(* The module EXTENDS ResultWait: End, Revive, Block, Wake, Timeout and    *)
(* every check are literally the original's. TLA+ forbids redefining an    *)
(* inherited name, so the new definitions carry a Split prefix or new      *)
(* names.                                                                  *)
(*                                                                         *)
(* ResultWaitSplitWatch.cfg: NoLostWakeup breaks after 3 steps (read, the  *)
(* task ends, mark). Python transcription: result_wait.py.                 *)
(***************************************************************************)
EXTENDS ResultWait

SplitTypeOK ==
    /\ state \in {"running", "completed", "dead"}
    /\ revivals \in 0..MAX_REVIVALS
    /\ waiters \in BOOLEAN
    /\ done \in 0..(MAX_REVIVALS + MAX_RECREATES + 1)
    /\ pc \in [Waiters -> PCs \cup {"mark"}]
    /\ run \in 0..MAX_RECREATES
    /\ seen \in [Waiters -> 0..MAX_RECREATES]

\* The first call: read the state only.
Read(w) ==
    /\ pc[w] = "watch"
    /\ pc' = [pc EXCEPT ![w] = IF Ended THEN "returned" ELSE "mark"]
    /\ UNCHANGED <<state, revivals, waiters, done, run, seen>>

\* The second call: mark the record, whatever the task did since the read.
Mark(w) ==
    /\ pc[w] = "mark"
    /\ waiters' = TRUE
    /\ pc' = [pc EXCEPT ![w] = "block"]
    /\ seen' = [seen EXCEPT ![w] = run]
    /\ UNCHANGED <<state, revivals, done, run>>

SplitNext ==
    \/ End("completed")
    \/ End("dead")
    \/ Revive
    \/ \E w \in Waiters : Read(w)
    \/ \E w \in Waiters : Mark(w)
    \/ \E w \in Waiters : Block(w)
    \/ \E w \in Waiters : Wake(w)
    \/ \E w \in Waiters : Timeout(w)

SplitSpec == Init /\ [][SplitNext]_vars

SplitAllReturn == [](~ENABLED SplitNext => AllReturned)

=============================================================================
