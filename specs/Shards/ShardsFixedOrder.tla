--------------------------- MODULE ShardsFixedOrder ---------------------------
(***************************************************************************)
(* Mutant of Shards: every turn tries shard 1 first, the shards in strict  *)
(* order (worker/queues.py never sets that up: a sharded queue's shards    *)
(* get equal weights). While shard 1 has a ready task, a task on shard 2   *)
(* waits, turn after turn.                                                 *)
(*                                                                         *)
(* The module EXTENDS Shards: Send, TurnFrom, Ack, Reap and every check    *)
(* are literally the original's.                                           *)
(*                                                                         *)
(* ShardsFixedOrder.cfg: NoShardStarves breaks. Python transcription:      *)
(* shards.py.                                                              *)
(***************************************************************************)
EXTENDS Shards

FixedTurn(w) ==
    /\ TurnFrom(w, 1)
    /\ UNCHANGED first

FixedOrderNext ==
    \/ \E i \in Ids : \E k \in KeyOrNone : Send(i, k)
    \/ \E w \in Workers : FixedTurn(w)
    \/ \E w \in Workers : Ack(w)
    \/ \E s \in Shards : \E i \in Ids : Reap(s, i)

FixedOrderSpec == Init /\ [][FixedOrderNext]_vars

=============================================================================
