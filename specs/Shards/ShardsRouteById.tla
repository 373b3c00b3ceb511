--------------------------- MODULE ShardsRouteById ---------------------------
(***************************************************************************)
(* Mutant of Shards: every task routed by its id, the naive sharding. The  *)
(* id is any that names no task (new_id() does not look at the key), and   *)
(* the task, with its key, goes to the id's shard. Two sends with one key  *)
(* and ids on different shards each find the key free on their own shard:  *)
(* each shard's enqueue dedupes keys only within its shard.                *)
(*                                                                         *)
(* The module EXTENDS Shards: EnqueueOn, Turn, Ack, Reap and every check   *)
(* are literally the original's.                                           *)
(*                                                                         *)
(* ShardsRouteById.cfg: KeyNamesOneTask breaks. Python transcription:      *)
(* shards.py.                                                              *)
(***************************************************************************)
EXTENDS Shards

ByIdSend(i, k) ==
    /\ IdFor(i, IdShard(i))
    /\ EnqueueOn(IdShard(i), i, k)

RouteByIdNext ==
    \/ \E i \in Ids : \E k \in KeyOrNone : ByIdSend(i, k)
    \/ \E w \in Workers : Turn(w)
    \/ \E w \in Workers : Ack(w)
    \/ \E s \in Shards : \E i \in Ids : Reap(s, i)

RouteByIdSpec == Init /\ [][RouteByIdNext]_vars

=============================================================================
