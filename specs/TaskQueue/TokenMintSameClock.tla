-------------------------- MODULE TokenMintSameClock --------------------------
(***************************************************************************)
(* Mutant of TokenMint: Redis answers again within the tick its lost       *)
(* writes were made in (a failover onto a server whose clock is behind the *)
(* old one's by more than the failover took has the same effect). The      *)
(* floor is the one the lost lease's token was minted at, and the next     *)
(* lease mints that token again: the assumption the floor rests on, that   *)
(* the clock has moved on past every lost write, is needed.                *)
(*                                                                         *)
(* The module EXTENDS TokenMint: every other action and every check are   *)
(* literally the original's.                                               *)
(*                                                                         *)
(* TokenMintSameClock.cfg: AtMostOneCurrent breaks.                        *)
(* Python transcription: token_mint.py.                                    *)
(***************************************************************************)
EXTENDS TokenMint

SameClockCrash == CrashWith(FALSE)

SameClockNext ==
    \/ \E w \in Workers : Lease(w)
    \/ Reap
    \/ \E w \in Workers : End(w)
    \/ Sync
    \/ Tick
    \/ SameClockCrash

SameClockSpec == Init /\ [][SameClockNext]_vars

=============================================================================
