----------------------- MODULE RateLimitCheckThenTake -----------------------
(***************************************************************************)
(* Mutant of RateLimit: the GCRA step done by a client in two calls, as a  *)
(* limiter outside the lease script would: Check(w) reads the name's next  *)
(* slot (GET), Take(w, t) pops a task and decides with what it read,       *)
(* writing the slot after it (SET). Two workers that read the same slot    *)
(* both take it, and the later write moves the slot back.                  *)
(*                                                                         *)
(* The module EXTENDS RateLimit: Promote, Tick, the GCRA step and every    *)
(* check are literally the original's; a task that kept a slot needs no    *)
(* read and is started as built (TakeKept).                                *)
(*                                                                         *)
(* RateLimitCheckThenTake.cfg: NeverOverRate breaks after 6 steps. Python  *)
(* transcription: rate_limit.py.                                           *)
(***************************************************************************)
EXTENDS RateLimit

CONSTANT WORKERS    \* workers leasing

Workers == 1..WORKERS

VARIABLE seen       \* each worker's read of nextSlot, <<S>>, or <<>> before one

splitVars == <<now, nextSlot, place, slot, starts, seen>>

CheckThenTakeTypeOK ==
    /\ TypeOK
    /\ seen \in [Workers -> {<<>>} \cup {<<x>> : x \in 0..Horizon}]

CheckThenTakeInit ==
    /\ Init
    /\ seen = [w \in Workers |-> <<>>]

FreshReady == {t \in Tasks : place[t] = "ready" /\ ~Kept(t)}

TakeKept(t) ==
    /\ Kept(t)
    /\ Lease(t)
    /\ UNCHANGED seen

\* The first call: read the name's next slot.
Check(w) ==
    /\ seen[w] = <<>>
    /\ FreshReady # {}
    /\ seen' = [seen EXCEPT ![w] = <<nextSlot>>]
    /\ UNCHANGED vars

\* The second call: pop t and take a slot from the one read, whatever was
\* written since.
Take(w, t) ==
    /\ seen[w] # <<>>
    /\ t \in FreshReady
    /\ Gcra(t, seen[w][1], "delayed")
    /\ seen' = [seen EXCEPT ![w] = <<>>]
    /\ UNCHANGED now

CheckThenTakeNext ==
    \/ \E t \in Tasks : TakeKept(t)
    \/ \E w \in Workers : Check(w)
    \/ \E w \in Workers : \E t \in Tasks : Take(w, t)
    \/ \E t \in Tasks : Promote(t) /\ UNCHANGED seen
    \/ Tick /\ UNCHANGED seen

CheckThenTakeSpec == CheckThenTakeInit /\ [][CheckThenTakeNext]_splitVars

CheckThenTakeEveryTaskStarts == [](~ENABLED CheckThenTakeNext => AllStarted)

=============================================================================
