------------------------------ MODULE TokenMint ------------------------------
(***************************************************************************)
(* How a task's fencing token is minted (lua/lease.lua, lua/reap.lua)      *)
(* across a Redis crash that loses the writes since the last fsync of its  *)
(* append-only file (`appendfsync everysec`: up to a second), or a         *)
(* failover that loses what the old primary had not yet passed on.         *)
(*                                                                         *)
(* Redis holds the record's token and the worker it is leased to           *)
(* (`holder`, 0: ready); the append-only file holds them as of its last    *)
(* fsync (`saved`). Redis's clock (TIME) ticks on from 1, as a real clock *)
(* reads above zero; a tick stands for a millisecond, in which one task is *)
(* given at most PER_TICK tokens.                                          *)
(*   Lease(w)  w leases the ready task: a new token, held by w.           *)
(*   Reap      the lease expired: a new token, the task ready again, its  *)
(*             holder left running with the old one.                      *)
(*   End(w)    w's run ends; its ack frees the task if w still holds it.  *)
(*   Sync      the fsync: the file catches up with Redis.                 *)
(*   Tick      the clock moves on.                                        *)
(*   Crash     Redis dies and restarts from its file: what was written    *)
(*             since the last fsync is gone; the workers run on, each     *)
(*             with the token it was given. A restart takes longer than a *)
(*             tick, so the clock has moved on when Redis answers again.  *)
(* A token is minted as Mint: one more than the record's, or the clock's  *)
(* time scaled by PER_TICK (lease.lua: the server's milliseconds times    *)
(* 1000), whichever is larger. A token lost in a crash was minted at or   *)
(* after its tick's floor and below the next tick's; the next mint after  *)
(* the restart is at least that floor, so it is never minted again.        *)
(*                                                                         *)
(* AtMostOneCurrent: no two workers hold the record's current token, so a *)
(* heartbeat, effect()'s check, an ack or a fail by the worker that lost   *)
(* its lease in the crash is refused as stale (T3). NeverReissued: no     *)
(* lease or reap mints a token handed out before, so the ledger's fence   *)
(* guard orders every run of a task by its token.                         *)
(*                                                                         *)
(* TokenMint.cfg: both hold. Mutants: TokenMintCounter.tla (one more than *)
(* the record's, taskq before the floor), TokenMintSameClock.tla (a       *)
(* restart within the tick of the lost writes) and TokenMintStepBack.tla  *)
(* (the clock stepped back before a crash): the assumption the floor      *)
(* rests on. Python transcription: token_mint.py.                         *)
(***************************************************************************)
EXTENDS Naturals

CONSTANTS WORKERS, MAX_TIME, PER_TICK, CRASHES

ASSUME WORKERS \in Nat /\ MAX_TIME \in Nat /\ PER_TICK \in Nat \ {0} /\ CRASHES \in Nat

Workers == 1..WORKERS
NONE == 0

VARIABLES token, holder, saved, now, minted, held, issued, crashes

vars == <<token, holder, saved, now, minted, held, issued, crashes>>

TypeOK ==
    /\ token \in Nat
    /\ holder \in {NONE} \cup Workers
    /\ saved \in Nat \X ({NONE} \cup Workers)
    /\ now \in 1..MAX_TIME
    /\ minted \in 0..PER_TICK
    /\ held \in [Workers -> Nat]
    /\ issued \subseteq Nat
    /\ crashes \in 0..CRASHES

Init ==
    /\ token = 0
    /\ holder = NONE
    /\ saved = <<0, NONE>>
    /\ now = 1
    /\ minted = 0
    /\ held = [w \in Workers |-> 0]
    /\ issued = {}
    /\ crashes = 0

\* The token a lease or a reap writes now, given how it mints: Floor, or Counter.
Floor == IF token + 1 > now * PER_TICK THEN token + 1 ELSE now * PER_TICK
Counter == token + 1

LeaseBy(w, mint) ==
    /\ holder = NONE
    /\ held[w] = 0
    /\ minted < PER_TICK
    /\ token' = mint
    /\ holder' = w
    /\ held' = [held EXCEPT ![w] = mint]
    /\ issued' = issued \cup {mint}
    /\ minted' = minted + 1
    /\ UNCHANGED <<saved, now, crashes>>

ReapBy(mint) ==
    /\ holder # NONE
    /\ minted < PER_TICK
    /\ token' = mint
    /\ holder' = NONE
    /\ issued' = issued \cup {mint}
    /\ minted' = minted + 1
    /\ UNCHANGED <<saved, now, held, crashes>>

Lease(w) == LeaseBy(w, Floor)
Reap == ReapBy(Floor)

End(w) ==
    /\ held[w] # 0
    /\ held' = [held EXCEPT ![w] = 0]
    /\ holder' = IF holder = w /\ token = held[w] THEN NONE ELSE holder
    /\ UNCHANGED <<token, saved, now, minted, issued, crashes>>

Sync ==
    /\ saved # <<token, holder>>
    /\ saved' = <<token, holder>>
    /\ UNCHANGED <<token, holder, now, minted, held, issued, crashes>>

Tick ==
    /\ now < MAX_TIME
    /\ now' = now + 1
    /\ minted' = 0
    /\ UNCHANGED <<token, holder, saved, held, issued, crashes>>

\* `later`: the restart has let the clock move on (TRUE as built).
CrashWith(later) ==
    /\ crashes < CRASHES
    /\ later => now < MAX_TIME
    /\ token' = saved[1]
    /\ holder' = saved[2]
    /\ now' = IF later THEN now + 1 ELSE now
    /\ minted' = IF later THEN 0 ELSE minted
    /\ crashes' = crashes + 1
    /\ UNCHANGED <<saved, held, issued>>

Crash == CrashWith(TRUE)

Next ==
    \/ \E w \in Workers : Lease(w)
    \/ Reap
    \/ \E w \in Workers : End(w)
    \/ Sync
    \/ Tick
    \/ Crash

Spec == Init /\ [][Next]_vars

\* At most one worker holds the record's current token.
AtMostOneCurrent ==
    \A v, w \in Workers : v # w /\ held[v] # 0 /\ held[v] = token => held[w] # token

\* A lease never hands out a token any lease or reap minted before.
NeverReissued ==
    [][\A w \in Workers : held[w] = 0 /\ held'[w] # 0 => held'[w] \notin issued]_vars

=============================================================================
