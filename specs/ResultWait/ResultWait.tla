------------------------------ MODULE ResultWait ------------------------------
(***************************************************************************)
(* How a producer waits for a task's result without polling, as built      *)
(* (lua/watch.lua, ack.lua, fail.lua, reap.lua, retry_dead.lua,            *)
(* wake_waiters in lua/_ended.lua, and TaskHandle.result in handle.py).    *)
(*                                                                         *)
(* One task, worked on by workers abstracted as End (ack.lua completes it; *)
(* fail.lua or reap.lua sends it to the DLQ) and Revive (retry_dead.lua),  *)
(* and WAITERS producers, each in result()'s loop:                         *)
(*   Watch   watch.lua: read the state and, if the task has not ended, set *)
(*           the record's `waiters` flag, in one script; an ended task's   *)
(*           outcome is returned.                                          *)
(*   Block   BLMOVE done done, one slice long: returns at once if the done *)
(*           list has an element (rotating it, so it stays for the other   *)
(*           waiters), else blocks.                                        *)
(*   Wake    a push onto the done list serves the blocked BLMOVE; every    *)
(*           blocked waiter wakes: the element is rotated, not taken.      *)
(*   Timeout the slice runs out with nothing pushed (only when SLICE).     *)
(* and Recreate: the ended task's record expires (or is purged) and its id *)
(* is enqueued again, a new record with no `waiters` flag beside the done  *)
(* list the last run left (its TTL outlives the record's). watch.lua's     *)
(* first mark of a run deletes that list (CLEAR_ON_MARK, as built).        *)
(* and back to Watch. Every script that ends the task pushes one element   *)
(* onto the done list in the same step if `waiters` is set (the flag is    *)
(* never cleared); retry_dead deletes the list.                            *)
(*                                                                         *)
(* The done list is its length (its elements are all alike). Not modelled: *)
(* the list's TTL (it need only outlive the BLMOVEs issued right after a   *)
(* watch), a producer giving up at its timeout (it only stops taking       *)
(* steps), watch without marking (status()), and a producer that finds no  *)
(* record at all.                                                          *)
(*                                                                         *)
(* Checks: NoLostWakeup, NoSpuriousSpin (invariants), AllReturn (where a   *)
(* run stops, every producer has returned). Without SLICE every run stops, *)
(* so AllReturn is "every producer eventually returns" under weak          *)
(* fairness, and it holds by wake-ups from the ends alone.                 *)
(* Mutants: ResultWaitSplitWatch (watch reads, then marks in a second      *)
(* step), ResultWaitKeepDone (retry_dead leaves the done list), and        *)
(* CLEAR_ON_MARK = FALSE (ResultWaitRecreateKeepsDone.cfg: a run enqueued  *)
(* again under an expired record's id finds its done list).                *)
(* Python transcription: result_wait.py.                                   *)
(***************************************************************************)
EXTENDS Naturals

CONSTANTS
    WAITERS,        \* producers waiting for the task's result
    MAX_REVIVALS,   \* times retry_dead may revive the dead task
    SLICE,          \* TRUE: a blocked BLMOVE's slice may run out (WAIT_SLICE_SECONDS)
    MAX_RECREATES,  \* times the ended task's id may be enqueued again, its record gone
    CLEAR_ON_MARK   \* TRUE: a run's first mark deletes the done list (as built)

Waiters == 1..WAITERS
PCs == {"watch", "block", "blocked", "returned"}

VARIABLES
    state,      \* the task's record: "running" (not ended), "completed" or "dead"
    revivals,   \* retry_dead calls so far
    waiters,    \* the record's `waiters` flag: a producer watched it before its end
    done,       \* the length of the task's done list
    pc,         \* each producer's place in result()'s loop: "watch" (about to call
                \* watch.lua), "block" (about to call BLMOVE), "blocked", "returned"
    run,        \* the record's incarnation: Recreate counts them
    seen        \* the incarnation each producer last watched

vars == <<state, revivals, waiters, done, pc, run, seen>>

TypeOK ==
    /\ state \in {"running", "completed", "dead"}
    /\ revivals \in 0..MAX_REVIVALS
    /\ waiters \in BOOLEAN
    /\ done \in 0..(MAX_REVIVALS + MAX_RECREATES + 1)
    /\ pc \in [Waiters -> PCs]
    /\ run \in 0..MAX_RECREATES
    /\ seen \in [Waiters -> 0..MAX_RECREATES]

Init ==
    /\ state = "running"
    /\ revivals = 0
    /\ waiters = FALSE
    /\ done = 0
    /\ pc = [w \in Waiters |-> "watch"]
    /\ run = 0
    /\ seen = [w \in Waiters |-> 0]

Ended == state # "running"

---------------------------------------------------------------------------
\* the workers' scripts

\* ack.lua (to = "completed"), or fail.lua or reap.lua sending the task to the
\* DLQ (to = "dead"): the task ends and, if a producer marked it, one element
\* is pushed onto its done list in the same script (wake_waiters).
End(to) ==
    /\ state = "running"
    /\ state' = to
    /\ done' = IF waiters THEN done + 1 ELSE done
    /\ UNCHANGED <<revivals, waiters, pc, run, seen>>

\* retry_dead.lua: the dead task runs again. `clear`: the done list is deleted
\* in the same script, as built.
ReviveWith(clear) ==
    /\ state = "dead"
    /\ revivals < MAX_REVIVALS
    /\ state' = "running"
    /\ revivals' = revivals + 1
    /\ done' = IF clear THEN 0 ELSE done
    /\ UNCHANGED <<waiters, pc, run, seen>>

Revive == ReviveWith(TRUE)

\* The ended task's record expires (or purge.lua deletes a dead one) and the id is
\* enqueued again (enqueue.lua, fire.lua, start_flow.lua): a new record, unmarked,
\* beside the done list the last run left.
Recreate ==
    /\ Ended
    /\ run < MAX_RECREATES
    /\ state' = "running"
    /\ waiters' = FALSE
    /\ run' = run + 1
    /\ UNCHANGED <<revivals, done, pc, seen>>

---------------------------------------------------------------------------
\* a producer's result() loop

\* watch.lua: one script reads the state and marks a task that has not ended; the
\* first mark of a run deletes the done list, which only an earlier run can have
\* filled (CLEAR_ON_MARK).
Watch(w) ==
    /\ pc[w] = "watch"
    /\ IF Ended
       THEN /\ pc' = [pc EXCEPT ![w] = "returned"]
            /\ UNCHANGED <<waiters, done, seen>>
       ELSE /\ pc' = [pc EXCEPT ![w] = "block"]
            /\ waiters' = TRUE
            /\ done' = IF CLEAR_ON_MARK /\ ~waiters THEN 0 ELSE done
            /\ seen' = [seen EXCEPT ![w] = run]
    /\ UNCHANGED <<state, revivals, run>>

\* BLMOVE done done: an element there returns it at once, else it blocks.
Block(w) ==
    /\ pc[w] = "block"
    /\ pc' = [pc EXCEPT ![w] = IF done > 0 THEN "watch" ELSE "blocked"]
    /\ UNCHANGED <<state, revivals, waiters, done, run, seen>>

\* The blocked BLMOVE is served by an element pushed onto the list.
Wake(w) ==
    /\ pc[w] = "blocked"
    /\ done > 0
    /\ pc' = [pc EXCEPT ![w] = "watch"]
    /\ UNCHANGED <<state, revivals, waiters, done, run, seen>>

\* The slice runs out with nothing pushed; the producer watches again.
Timeout(w) ==
    /\ SLICE
    /\ pc[w] = "blocked"
    /\ done = 0
    /\ pc' = [pc EXCEPT ![w] = "watch"]
    /\ UNCHANGED <<state, revivals, waiters, done, run, seen>>

Next ==
    \/ End("completed")
    \/ End("dead")
    \/ Revive
    \/ Recreate
    \/ \E w \in Waiters : Watch(w)
    \/ \E w \in Waiters : Block(w)
    \/ \E w \in Waiters : Wake(w)
    \/ \E w \in Waiters : Timeout(w)

Spec == Init /\ [][Next]_vars

---------------------------------------------------------------------------
\* checks

\* A producer about to block, or blocked, last watched the task running (else it
\* would have returned); if the task has ended now, it ended since that watch.
Waiting(w) == pc[w] \in {"block", "blocked"}

\* No lost wake-up: a producer waiting on a task that has ended since it watched
\* finds the done list non-empty, so its BLMOVE returns (at once, or Wake is
\* enabled) and not only when its slice runs out. Both checks judge the producers
\* that watched the record as it is (seen[w] = run): one that watched a record that
\* has since expired waits for a run whose outcome no record holds any more, and
\* returns with a later run's (woken by its end, or by its own slice).
NoLostWakeup == \A w \in Waiters : Waiting(w) /\ Ended /\ seen[w] = run => done > 0

\* No spurious spin: a producer waiting on a task that runs (again, after a
\* revival, or under a new record) finds the done list empty, so no element left
\* by an earlier end wakes it; it blocks until this run ends. (One that watched
\* the record before it expired is woken by that run's end: once, then it
\* watches the new run.)
NoSpuriousSpin == \A w \in Waiters : Waiting(w) /\ ~Ended /\ seen[w] = run => done = 0

\* Wherever a run stops, every producer has returned.
AllReturned == \A w \in Waiters : pc[w] = "returned"
AllReturn == [](~ENABLED Next => AllReturned)

=============================================================================
