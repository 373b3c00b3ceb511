----------------------- MODULE RateLimitCheckThenTake -----------------------
(***************************************************************************)
(* Mutant of RateLimit: the GCRA step done by a client in two calls, as a  *)
(* limiter outside the lease script would: Check(w) reads the name's two   *)
(* cursors (GET), Take(w, t) pops a task and decides with what it read,    *)
(* writing the cursors after it (SET). Two workers that read the same      *)
(* cursors both start a task on them, and the later write moves S_a back.  *)
(*                                                                         *)
(* The module EXTENDS RateLimit: Promote, Tick, the GCRA step and every    *)
(* check are literally the original's.                                     *)
(*                                                                         *)
(* RateLimitCheckThenTake.cfg: NeverOverRate breaks after 6 steps. Python  *)
(* transcription: rate_limit.py.                                           *)
(***************************************************************************)
EXTENDS RateLimit

CONSTANT WORKERS    \* workers leasing

Workers == 1..WORKERS

VARIABLE seen       \* each worker's read of the cursors, <<S_a, S_r>>, or <<>>

splitVars == <<now, startAt, nextSlot, place, runAt, starts, releases, seen>>

CheckThenTakeTypeOK ==
    /\ TypeOK
    /\ seen \in [Workers -> {<<>>} \cup (0..Horizon) \X (0..Horizon)]

CheckThenTakeInit ==
    /\ Init
    /\ seen = [w \in Workers |-> <<>>]

Ready == {t \in Tasks : place[t] = "ready"}

\* The first call: read the name's cursors. (A set, not \E: TLC would make a
\* successor per ready task.)
Check(w) ==
    /\ seen[w] = <<>>
    /\ Ready # {}
    /\ seen' = [seen EXCEPT ![w] = <<startAt, nextSlot>>]
    /\ UNCHANGED vars

\* The second call: pop t and decide with the cursors read, whatever was
\* written since.
Take(w, t) ==
    /\ seen[w] # <<>>
    /\ t \in Ready
    /\ Gcra(t, seen[w][1], seen[w][2], "delayed")
    /\ seen' = [seen EXCEPT ![w] = <<>>]
    /\ UNCHANGED <<now, releases>>

CheckThenTakeNext ==
    \/ \E w \in Workers : Check(w)
    \/ \E w \in Workers : \E t \in Tasks : Take(w, t)
    \/ \E t \in Tasks : Promote(t) /\ UNCHANGED seen
    \/ Tick /\ UNCHANGED seen

CheckThenTakeSpec == CheckThenTakeInit /\ [][CheckThenTakeNext]_splitVars

CheckThenTakeEveryTaskStarts == [](~ENABLED CheckThenTakeNext => AllStarted)

=============================================================================
