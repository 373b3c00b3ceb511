------------------------- MODULE QueueRateLimitRetake -------------------------
(***************************************************************************)
(* Mutant of QueueRateLimit, lease.lua before refused tasks kept their     *)
(* slots: a task throttled again always gives back every slot it holds and *)
(* takes the next of each refusing limit. After a raise of the name's rate *)
(* releases its line, each released task is refused by the queue's limit  *)
(* and goes to the back of the queue's line, behind slots no one holds     *)
(* now: the waiting tasks are held back longer by the raise, not less. No  *)
(* rate is exceeded (every start passes both limits at its own time).      *)
(*                                                                         *)
(* The module EXTENDS QueueRateLimit: every other action and every check   *)
(* are literally the original's.                                           *)
(*                                                                         *)
(* QueueRateLimitRetake.cfg: NoPlaceLost breaks. Python transcription:     *)
(* queue_rate_limit.py.                                                    *)
(***************************************************************************)
EXTENDS QueueRateLimit

RetakeLease(t) == LeaseKeeping(t, FALSE)

RetakeNext ==
    \/ \E t \in Tasks : RetakeLease(t)
    \/ \E t \in Tasks : Promote(t)
    \/ Raise
    \/ Remove
    \/ Tick

RetakeSpec == Init /\ [][RetakeNext]_vars

RetakeEveryTaskStarts == [](~ENABLED RetakeNext => AllStarted)

=============================================================================
