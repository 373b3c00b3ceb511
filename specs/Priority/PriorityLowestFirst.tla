------------------------- MODULE PriorityLowestFirst -------------------------
(***************************************************************************)
(* Mutant of Priority: lease.lua's scan starts at the lowest level and     *)
(* takes from the first non-empty list it meets, so a low task is leased   *)
(* while a higher one waits.                                               *)
(*                                                                         *)
(* The module EXTENDS Priority: everything but the lease is literally the  *)
(* original's, and LowestFirstLease(p) is LeaseIf(p, ...) with the scan    *)
(* reversed.                                                               *)
(*                                                                         *)
(* PriorityLowestFirst.cfg: LeasedWasHighest breaks after 3 steps (a low   *)
(* task sent, a higher one sent, the low one leased). Python               *)
(* transcription: priority.py.                                             *)
(***************************************************************************)
EXTENDS Priority

\* The scan goes from the lowest level up.
LowestFirstLease(p) == LeaseIf(p, \A q \in Levels : q < p => ready[q] = <<>>)

LowestFirstNext ==
    \/ \E p \in Levels : \E d \in BOOLEAN : Enqueue(p, d)
    \/ \E p \in Levels : LowestFirstLease(p)
    \/ \E t \in Tasks : Release(t)
    \/ \E t \in Tasks : Fail(t)
    \/ \E t \in Tasks : Ack(t)
    \/ \E t \in Tasks : Promote(t)
    \/ \E t \in Tasks : RetryDead(t)
    \/ \E t \in Tasks : Cancel(t)

LowestFirstSpec == Init /\ [][LowestFirstNext]_vars

LowestFirstNothingLost == [](~ENABLED LowestFirstNext => Settled)

=============================================================================
