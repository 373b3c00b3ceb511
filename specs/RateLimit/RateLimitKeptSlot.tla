-------------------------- MODULE RateLimitKeptSlot --------------------------
(***************************************************************************)
(* Mutant of RateLimit: the first design of lease.lua's rate limit, with   *)
(* one cursor. A task leased without a slot takes the next one, first =    *)
(* max(S, now), S := first + T, whether it starts now or is throttled onto *)
(* it; a throttled task keeps its slot (the record's rate_slot), and when  *)
(* it is leased again it starts on that slot with no new check. Leased     *)
(* after its slot (every worker busy), it starts among the tasks of the    *)
(* slots after its own, which GCRA counted as coming later.                *)
(*                                                                         *)
(* The module EXTENDS RateLimit: Promote, Tick and every check are         *)
(* literally the original's; both cursors hold the one slot S.             *)
(*                                                                         *)
(* RateLimitKeptSlot.cfg (LATE = TRUE): NeverOverRate breaks after 13      *)
(* steps. Python transcription: rate_limit.py.                             *)
(***************************************************************************)
EXTENDS RateLimit

KeptSlotLease(t) ==
    /\ place[t] = "ready"
    /\ IF Throttled(t)
       THEN /\ Start(t)
            /\ UNCHANGED <<startAt, nextSlot>>
       ELSE LET first == Max(startAt, now)
            IN /\ startAt' = first + INTERVAL
               /\ nextSlot' = first + INTERVAL
               /\ IF first - Ahead <= now
                  THEN Start(t)
                  ELSE /\ place' = [place EXCEPT ![t] = "delayed"]
                       /\ runAt' = [runAt EXCEPT ![t] = first - Ahead]
                       /\ UNCHANGED starts
    /\ UNCHANGED <<now, releases>>

KeptSlotNext ==
    \/ \E t \in Tasks : KeptSlotLease(t)
    \/ \E t \in Tasks : Promote(t)
    \/ Tick

KeptSlotSpec == Init /\ [][KeptSlotNext]_vars

KeptSlotEveryTaskStarts == [](~ENABLED KeptSlotNext => AllStarted)

=============================================================================
