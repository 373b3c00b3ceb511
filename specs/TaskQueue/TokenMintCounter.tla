--------------------------- MODULE TokenMintCounter ---------------------------
(***************************************************************************)
(* Mutant of TokenMint, taskq before the floor: a lease or a reap mints    *)
(* one more than the record's token. A crash that loses a lease's write    *)
(* rolls the record's token back, and the next lease mints the lost token  *)
(* again: two workers hold one token, each heartbeat renews it for both,   *)
(* and neither effect()'s check nor the fence guard can tell them apart.   *)
(*                                                                         *)
(* The module EXTENDS TokenMint: every other action and every check are   *)
(* literally the original's.                                               *)
(*                                                                         *)
(* TokenMintCounter.cfg: AtMostOneCurrent breaks.                          *)
(* Python transcription: token_mint.py.                                    *)
(***************************************************************************)
EXTENDS TokenMint

CounterLease(w) == LeaseBy(w, Counter)
CounterReap == ReapBy(Counter)

CounterNext ==
    \/ \E w \in Workers : CounterLease(w)
    \/ CounterReap
    \/ \E w \in Workers : End(w)
    \/ Sync
    \/ Tick
    \/ Crash

CounterSpec == Init /\ [][CounterNext]_vars

=============================================================================
