-------------------------- MODULE TokenMintStepBack ---------------------------
(***************************************************************************)
(* Mutant of TokenMint: Redis's wall clock steps back while it runs (an   *)
(* NTP step, a virtual machine resumed from a snapshot, a data set moved  *)
(* onto a host whose clock is behind). A crash then loses a lease's       *)
(* writes, and the restart moves the clock on, but not past the tick that *)
(* lease was minted in: the lease after it mints the lost token again     *)
(* (Tick, Lease(w=1), StepBack, Crash, Lease(w=2)). Until the clock       *)
(* passes the tokens minted before the step, each mint is one more than   *)
(* the record's, as the counter was. The floor needs a clock that never   *)
(* steps back past a token it minted, on one server as after a failover.  *)
(*                                                                         *)
(* The module EXTENDS TokenMint: every other action and every check are   *)
(* literally the original's.                                               *)
(*                                                                         *)
(* TokenMintStepBack.cfg: AtMostOneCurrent breaks.                         *)
(* Python transcription: token_mint.py.                                    *)
(***************************************************************************)
EXTENDS TokenMint

\* Before any crash (a clock behind at the restart is TokenMintSameClock's).
StepBack ==
    /\ crashes = 0
    /\ now > 1
    /\ now' = now - 1
    /\ UNCHANGED <<token, holder, saved, minted, held, issued, crashes>>

StepBackNext ==
    \/ \E w \in Workers : Lease(w)
    \/ Reap
    \/ \E w \in Workers : End(w)
    \/ Sync
    \/ Tick
    \/ Crash
    \/ StepBack

StepBackSpec == Init /\ [][StepBackNext]_vars

=============================================================================
