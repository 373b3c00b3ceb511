--------------------- MODULE PriorityRetryLosesPriority ---------------------
(***************************************************************************)
(* Mutant of Priority: promote.lua pushes a task that comes due (a retry   *)
(* after its backoff, or a delayed enqueue) to the default level's list,   *)
(* the plain `ready` key, whatever its priority: a script that forgot the  *)
(* record's priority on the way through delayed.                           *)
(*                                                                         *)
(* The module EXTENDS Priority: everything but the promotion is literally  *)
(* the original's, and LosingPromote(t) is PromoteTo(t, DEFAULT).          *)
(*                                                                         *)
(* PriorityRetryLosesPriority.cfg: PriorityKept breaks after 2 steps (a    *)
(* task sent with a delay at level 0, promoted into the default list).     *)
(* PriorityRetryLosesPriority_Highest.cfg leaves out the checks that come  *)
(* first, and LeasedWasHighest breaks after 4: the level-0 task, now in    *)
(* the default list, is leased ahead of a default task sent after it. A    *)
(* retry goes the same way through delayed, two steps (lease, fail) later; *)
(* the tests show it. Python transcription: priority.py.                   *)
(***************************************************************************)
EXTENDS Priority

LosingPromote(t) == PromoteTo(t, DEFAULT)

LosingNext ==
    \/ \E p \in Levels : \E d \in BOOLEAN : Enqueue(p, d)
    \/ \E p \in Levels : Lease(p)
    \/ \E t \in Tasks : Release(t)
    \/ \E t \in Tasks : Fail(t)
    \/ \E t \in Tasks : Ack(t)
    \/ \E t \in Tasks : LosingPromote(t)
    \/ \E t \in Tasks : RetryDead(t)
    \/ \E t \in Tasks : Cancel(t)

LosingSpec == Init /\ [][LosingNext]_vars

LosingNothingLost == [](~ENABLED LosingNext => Settled)

=============================================================================
