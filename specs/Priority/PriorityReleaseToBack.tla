------------------------ MODULE PriorityReleaseToBack ------------------------
(***************************************************************************)
(* Mutant of Priority: release.lua pushes the task it gives back to the    *)
(* BACK of its level's list (RPUSH for LPUSH), so a task released at       *)
(* shutdown, which had already waited, queues again behind the tasks of    *)
(* its level that came after it.                                           *)
(*                                                                         *)
(* The module EXTENDS Priority: everything but the release is literally    *)
(* the original's, and ToBackRelease(t) is ReleaseTo(t, FALSE).            *)
(*                                                                         *)
(* PriorityReleaseToBack.cfg: FifoWithinLevel breaks after 5 steps (two    *)
(* tasks of one level sent, the first leased and released to the back,    *)
(* the second leased). Python transcription: priority.py.                  *)
(***************************************************************************)
EXTENDS Priority

ToBackRelease(t) == ReleaseTo(t, FALSE)

ToBackNext ==
    \/ \E p \in Levels : \E d \in BOOLEAN : Enqueue(p, d)
    \/ \E p \in Levels : Lease(p)
    \/ \E t \in Tasks : ToBackRelease(t)
    \/ \E t \in Tasks : Fail(t)
    \/ \E t \in Tasks : Ack(t)
    \/ \E t \in Tasks : Promote(t)
    \/ \E t \in Tasks : RetryDead(t)
    \/ \E t \in Tasks : Cancel(t)

ToBackSpec == Init /\ [][ToBackNext]_vars

ToBackNothingLost == [](~ENABLED ToBackNext => Settled)

=============================================================================
