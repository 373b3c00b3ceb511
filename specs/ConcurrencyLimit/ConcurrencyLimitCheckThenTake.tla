--------------------- MODULE ConcurrencyLimitCheckThenTake ---------------------
(***************************************************************************)
(* Mutant of ConcurrencyLimit: the slots counted in one call (SCARD) and   *)
(* taken in another, as a limiter outside the lease script would. Two      *)
(* workers that count the same free slot both start a task in it.          *)
(*                                                                         *)
(* The module EXTENDS ConcurrencyLimit: Take, the settles, the faults and  *)
(* every check are literally the original's.                               *)
(*                                                                         *)
(* ConcurrencyLimitCheckThenTake.cfg: NeverOverLimit breaks. Python        *)
(* transcription: concurrency_limit.py.                                    *)
(***************************************************************************)
EXTENDS ConcurrencyLimit

NotCounted == MOST + 1

VARIABLE seen       \* each worker's count of the slots in use, or NotCounted

splitVars == <<place, token, tries, holding, held, seen>>

CheckThenTakeTypeOK ==
    /\ TypeOK
    /\ seen \in [Workers -> 0..NotCounted]

CheckThenTakeInit ==
    /\ Init
    /\ seen = [w \in Workers |-> NotCounted]

\* The first call: count the slots in use.
Count(w) ==
    /\ held[w] = None
    /\ seen[w] = NotCounted
    /\ seen' = [seen EXCEPT ![w] = Cardinality(holding)]
    /\ UNCHANGED vars

\* The second call: unpark and pop as lease.lua does, deciding by the count.
CountedLease(w) ==
    /\ seen[w] # NotCounted
    /\ held[w] = None
    /\ \E U \in SUBSET Parked :
         /\ Cardinality(U) = Unparking
         /\ LET p == [t \in Tasks |-> IF t \in U THEN "ready" ELSE place[t]]
            IN \E t \in Tasks : p[t] = "ready" /\ Take(w, t, p, seen[w])
    /\ seen' = [seen EXCEPT ![w] = NotCounted]

CheckThenTakeNext ==
    \/ \E w \in Workers : Count(w)
    \/ \E w \in Workers : CountedLease(w)
    \/ \E w \in Workers : Ack(w) /\ UNCHANGED seen
    \/ \E w \in Workers : Fail(w) /\ UNCHANGED seen
    \/ \E w \in Workers : Crash(w) /\ UNCHANGED seen
    \/ \E t \in Tasks : Reap(t) /\ UNCHANGED seen

CheckThenTakeSpec == CheckThenTakeInit /\ [][CheckThenTakeNext]_splitVars

=============================================================================
