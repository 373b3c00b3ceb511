r"""Python transcription of Shards.tla and its mutants.

TLA+                              taskq                                 Python
--------------------------------  ------------------------------------  ---------------------
Init                              no task sent; every worker tries      initial(c)
                                  shard 1 first
IdShard(i), KeyShard(k),          shards.route, Layout.shard_of         id_shard, key_shard,
Home(i, k)                                                              home
EnqueueOn(s, i, k), IdFor(i, s),  enqueue.lua on shard s; the id        enqueue_on, id_for,
Send(i, k)                        Layout.new_id draws (or any, with     send: /created,
                                  EXPLICIT_IDS)                         /duplicate
Pick(f), TurnFrom(w, f), Turn(w)  Queues.order and Leaser.fill: the     pick, turn_from, turn:
                                  first shard with a ready task, from   /leased, /empty
                                  the one tried first; it rotates
Current(w), Ack(w)                ack.lua, fenced by the token          current, ack
Reap(s, i)                        reap.lua: a new token, retry or die   reap: /retried, /dead
Next                              NEXT, tried in that order
TypeOK, KeyNamesOneTask,          the INVARIANTS table, under the TLA+ names
KeyAnsweredOneTask, FoundById,
NothingLost, NoShardStarves

ShardsRouteById.tla               every task routed by its id           by_id_send,
                                                                        ROUTE_BY_ID_NEXT
ShardsFixedOrder.tla              every turn tries shard 1 first        fixed_turn,
                                                                        FIXED_ORDER_NEXT
ShardsKeyLeftUnbound.tla          a key sent with a known id is left    unbound_send,
                                  unbound                               UNBOUND_NEXT

Each \E is a loop in ascending order, nested as written (Send's ids outside its key
choices, Reap's shards outside its ids), and Next's disjuncts are tried in the order
written, which is TLC's order. An IF in an action is one successor, labelled by its
branch.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import NamedTuple

from specs.tlacheck import Fn, Model, Transition
from specs.tlacheck import cfg as cfgs

NO_KEY = 0
NONE = 0
IDLE = (0, 0, 0)

Ids = frozenset[int]
PerShard = Fn[int, Fn[int, int]]


class State(NamedTuple):
    # Field names are the TLA+ variable names, so that traces read like TLC's.
    ready: Fn[int, tuple[int, ...]]
    leased: Fn[int, Ids]
    ended: Fn[int, Ids]
    keyed: PerShard
    token: PerShard
    tries: PerShard
    held: Fn[int, tuple[int, int, int]]
    first: Fn[int, int]
    skipped: Fn[int, Fn[int, int]]
    created: Ids
    answered: Fn[int, Ids]


@dataclass(frozen=True)
class Constants:
    shards: int
    ids: int
    keys: int
    workers: int
    retries: int
    explicit_ids: bool

    @classmethod
    def from_cfg(cls, cfg: cfgs.Config) -> Constants:
        explicit = cfg.constants.get("EXPLICIT_IDS")
        if not isinstance(explicit, bool):
            raise cfgs.ConfigError(
                f"{cfg.source}: EXPLICIT_IDS must be TRUE or FALSE, not {explicit!r}")
        return cls(shards=cfg.int_constant("SHARDS"), ids=cfg.int_constant("IDS"),
                   keys=cfg.int_constant("KEYS"), workers=cfg.int_constant("WORKERS"),
                   retries=cfg.int_constant("RETRIES"), explicit_ids=explicit)

    @property
    def all_shards(self) -> range:
        return range(1, self.shards + 1)

    @property
    def all_ids(self) -> range:
        return range(1, self.ids + 1)

    @property
    def all_keys(self) -> range:
        return range(1, self.keys + 1)

    @property
    def key_or_none(self) -> range:
        """KeyOrNone == 0..KEYS: NoKey, then each key."""
        return range(self.keys + 1)

    @property
    def all_workers(self) -> range:
        return range(1, self.workers + 1)

    @property
    def max_token(self) -> int:
        """MaxToken == 2 * (RETRIES + 1): a lease and a reap per attempt."""
        return 2 * (self.retries + 1)


def initial(c: Constants) -> State:
    def per_shard(domain: range, value: int) -> PerShard:
        return Fn.const(c.all_shards, Fn.const(domain, value))

    return State(
        ready=Fn.const(c.all_shards, ()),
        leased=Fn.const(c.all_shards, frozenset()),
        ended=Fn.const(c.all_shards, frozenset()),
        keyed=per_shard(c.all_keys, NONE),
        token=per_shard(c.all_ids, 0),
        tries=per_shard(c.all_ids, 0),
        held=Fn.const(c.all_workers, IDLE),
        first=Fn.const(c.all_workers, 1),
        skipped=Fn.const(c.all_workers, Fn.const(c.all_shards, 0)),
        created=frozenset(),
        answered=Fn.const(c.all_keys, frozenset()),
    )


def id_shard(c: Constants, i: int) -> int:
    """IdShard(i): ids in blocks, the first ones on shard 1."""
    return ((i - 1) * c.shards) // c.ids + 1


def key_shard(c: Constants, k: int) -> int:
    """KeyShard(k): keys in turn."""
    return (k - 1) % c.shards + 1


def home(c: Constants, i: int, k: int) -> int:
    """Home(i, k): the key's shard when there is a key, else the id's."""
    return id_shard(c, i) if k == NO_KEY else key_shard(c, k)


def records(s: State, shard: int) -> Ids:
    """Records(s): the ids with a record on the shard."""
    return frozenset(s.ready[shard]) | s.leased[shard] | s.ended[shard]


def named(s: State) -> Ids:
    return frozenset().union(*(records(s, shard) for shard in s.ready))


def set_in(f: PerShard, shard: int, x: int, value: int) -> PerShard:
    """[f EXCEPT ![shard][x] = value]."""
    return f.except_(shard, f[shard].except_(x, value))


def answer(s: State, k: int, i: int) -> Fn[int, Ids]:
    """Answer(k, i): the send's answer, recorded as one of the key's (none without one)."""
    return s.answered if k == NO_KEY else s.answered.except_(k, s.answered[k] | {i})


def enqueue_on(s: State, shard: int, i: int, k: int) -> tuple[str, State]:
    """EnqueueOn(s, i, k): enqueue.lua on the shard, as (branch, successor)."""
    if k != NO_KEY and s.keyed[shard][k] != NONE:
        return "duplicate", s._replace(answered=answer(s, k, s.keyed[shard][k]))
    if i in records(s, shard):
        return "duplicate" if k == NO_KEY else "bound", s._replace(
            keyed=s.keyed if k == NO_KEY else set_in(s.keyed, shard, k, i),
            answered=answer(s, k, i))
    return "created", s._replace(
        ready=s.ready.except_(shard, (*s.ready[shard], i)),
        keyed=s.keyed if k == NO_KEY else set_in(s.keyed, shard, k, i),
        created=s.created | {i},
        answered=answer(s, k, i),
    )


def unbound_enqueue_on(s: State, shard: int, i: int, k: int) -> tuple[str, State]:
    """UnboundEnqueueOn(s, i, k): a known id's send leaves its key unbound."""
    if i in records(s, shard) and not (k != NO_KEY and s.keyed[shard][k] != NONE):
        return "unbound", s._replace(answered=answer(s, k, i))
    return enqueue_on(s, shard, i, k)


def id_for(c: Constants, s: State, i: int, shard: int) -> bool:
    """IdFor(i, s): Layout.new_id's id (naming no task, routed to the shard), or any."""
    return c.explicit_ids or (i not in named(s) and id_shard(c, i) == shard)


def fits(c: Constants, i: int, k: int) -> bool:
    """Fits(i, k): routing.by_shard sends it (its id and key route to one shard)."""
    return k == NO_KEY or id_shard(c, i) == key_shard(c, k)


Action = Callable[[Constants, State], Iterator[Transition[State]]]


def send_with(name: str, enqueue: Callable[[State, int, int, int], tuple[str, State]]
              ) -> Action:
    """Send(i, k) (or a mutant's, named `name`) with `enqueue` as its EnqueueOn."""

    def action(c: Constants, s: State) -> Iterator[Transition[State]]:
        for i in c.all_ids:
            for k in c.key_or_none:
                shard = home(c, i, k)
                if id_for(c, s, i, shard) and fits(c, i, k):
                    branch, t = enqueue(s, shard, i, k)
                    yield f"{name}(i={i},k={k})/{branch}", t

    return action


send = send_with("Send", enqueue_on)
unbound_send = send_with("UnboundSend", unbound_enqueue_on)  # UnboundEnqueueOn


def by_id_send(c: Constants, s: State) -> Iterator[Transition[State]]:
    """ByIdSend(i, k): the task goes to its id's shard, key or not."""
    for i in c.all_ids:
        for k in c.key_or_none:
            shard = id_shard(c, i)
            if id_for(c, s, i, shard):
                branch, t = enqueue_on(s, shard, i, k)
                yield f"ByIdSend(i={i},k={k})/{branch}", t


def pick(c: Constants, s: State, f: int) -> int:
    """Pick(f): f if it has a ready task, else the first other shard that has; NONE."""
    if s.ready[f]:
        return f
    return min((x for x in c.all_shards if x != f and s.ready[x]), default=NONE)


def turn_from(c: Constants, s: State, w: int, f: int) -> tuple[str, State]:
    """TurnFrom(w, f), for an idle w: (branch, successor)."""
    shard = pick(c, s, f)
    skipped = s.skipped.except_(w, Fn(
        (x, 0 if x == shard or not s.ready[x] else s.skipped[w][x] + 1)
        for x in c.all_shards))
    t = s._replace(skipped=skipped)
    if shard == NONE:
        return "empty", t
    i = s.ready[shard][0]
    token = s.token[shard][i] + 1
    return "leased", t._replace(
        ready=s.ready.except_(shard, s.ready[shard][1:]),
        leased=s.leased.except_(shard, s.leased[shard] | {i}),
        token=set_in(s.token, shard, i, token),
        held=s.held.except_(w, (shard, i, token)),
    )


def turn(c: Constants, s: State) -> Iterator[Transition[State]]:
    for w in c.all_workers:
        if s.held[w] == IDLE:
            branch, t = turn_from(c, s, w, s.first[w])
            yield f"Turn(w={w})/{branch}", t._replace(
                first=s.first.except_(w, s.first[w] % c.shards + 1))


def fixed_turn(c: Constants, s: State) -> Iterator[Transition[State]]:
    """FixedTurn(w): every turn tries shard 1 first."""
    for w in c.all_workers:
        if s.held[w] == IDLE:
            branch, t = turn_from(c, s, w, 1)
            yield f"FixedTurn(w={w})/{branch}", t


def current(s: State, w: int) -> bool:
    shard, i, token = s.held[w]
    return i in s.leased[shard] and s.token[shard][i] == token


def ack(c: Constants, s: State) -> Iterator[Transition[State]]:
    for w in c.all_workers:
        if s.held[w] == IDLE:
            continue
        shard, i, _ = s.held[w]
        t = s._replace(held=s.held.except_(w, IDLE))
        if current(s, w):
            yield f"Ack(w={w})/acked", t._replace(
                leased=s.leased.except_(shard, s.leased[shard] - {i}),
                ended=s.ended.except_(shard, s.ended[shard] | {i}))
        else:
            yield f"Ack(w={w})/stale", t


def reap(c: Constants, s: State) -> Iterator[Transition[State]]:
    for shard in c.all_shards:
        for i in c.all_ids:
            if i not in s.leased[shard]:
                continue
            t = s._replace(
                leased=s.leased.except_(shard, s.leased[shard] - {i}),
                token=set_in(s.token, shard, i, s.token[shard][i] + 1),
                tries=set_in(s.tries, shard, i, s.tries[shard][i] + 1))
            if s.tries[shard][i] < c.retries:
                yield f"Reap(s={shard},i={i})/retried", t._replace(
                    ready=s.ready.except_(shard, (*s.ready[shard], i)))
            else:
                yield f"Reap(s={shard},i={i})/dead", t._replace(
                    ended=s.ended.except_(shard, s.ended[shard] | {i}))


NEXT: tuple[Action, ...] = (send, turn, ack, reap)
ROUTE_BY_ID_NEXT: tuple[Action, ...] = (by_id_send, turn, ack, reap)
FIXED_ORDER_NEXT: tuple[Action, ...] = (send, fixed_turn, ack, reap)
UNBOUND_NEXT: tuple[Action, ...] = (unbound_send, turn, ack, reap)


def type_ok(c: Constants, s: State) -> bool:
    shards, ids = set(c.all_shards), set(c.all_ids)

    def per_shard(f: PerShard, domain: range, values: range | set[int]) -> bool:
        return set(f) == shards and all(
            set(f[x]) == set(domain) and all(v in values for v in f[x].values()) for x in f)

    return (
        set(s.ready) == shards and all(set(q) <= ids for q in s.ready.values())
        and set(s.leased) == shards and all(v <= ids for v in s.leased.values())
        and set(s.ended) == shards and all(v <= ids for v in s.ended.values())
        and per_shard(s.keyed, c.all_keys, ids | {NONE})
        and per_shard(s.token, c.all_ids, range(c.max_token + 1))
        and per_shard(s.tries, c.all_ids, range(c.retries + 2))
        and all(h == IDLE or (h[0] in shards and h[1] in ids and 1 <= h[2] <= c.max_token)
                for h in s.held.values())
        and all(f in shards for f in s.first.values())
        and all(set(row) == shards and all(0 <= v <= c.shards for v in row.values())
                for row in s.skipped.values())
        and s.created <= ids
        and set(s.answered) == set(c.all_keys) and all(v <= ids for v in s.answered.values())
    )  # fmt: skip


def key_names_one_task(c: Constants, s: State) -> bool:
    return all(sum(s.keyed[x][k] != NONE for x in c.all_shards) <= 1 for k in c.all_keys)


def key_answered_one_task(c: Constants, s: State) -> bool:
    return all(len(s.answered[k]) <= 1 for k in c.all_keys)


def lookup(c: Constants, s: State, i: int) -> int:
    """Lookup(i): ShardedBroker.handle's shard for the id, the one it routes to."""
    return id_shard(c, i)


def found_by_id(c: Constants, s: State) -> bool:
    return all(lookup(c, s, i) == x for x in c.all_shards for i in records(s, x))


def count(s: State, shard: int, i: int) -> int:
    """Count(s, i): how many times i is in the shard."""
    return s.ready[shard].count(i) + (i in s.leased[shard]) + (i in s.ended[shard])


def nothing_lost(c: Constants, s: State) -> bool:
    for i in c.all_ids:
        counts = sorted(count(s, x, i) for x in c.all_shards)
        want = [0] * (c.shards - 1) + [1] if i in s.created else [0] * c.shards
        if counts != want:
            return False
    return True


def no_shard_starves(c: Constants, s: State) -> bool:
    return all(v < c.shards for row in s.skipped.values() for v in row.values())


def invariants(c: Constants) -> dict[str, Callable[[State], bool]]:
    return {
        "TypeOK": lambda s: type_ok(c, s),
        "KeyNamesOneTask": lambda s: key_names_one_task(c, s),
        "KeyAnsweredOneTask": lambda s: key_answered_one_task(c, s),
        "FoundById": lambda s: found_by_id(c, s),
        "NothingLost": lambda s: nothing_lost(c, s),
        "NoShardStarves": lambda s: no_shard_starves(c, s),
    }


def model(cfg: cfgs.Config) -> Model[State]:
    return _model("Shards", NEXT, cfg)


def route_by_id_model(cfg: cfgs.Config) -> Model[State]:
    return _model("ShardsRouteById", ROUTE_BY_ID_NEXT, cfg)


def fixed_order_model(cfg: cfgs.Config) -> Model[State]:
    return _model("ShardsFixedOrder", FIXED_ORDER_NEXT, cfg)


def key_left_unbound_model(cfg: cfgs.Config) -> Model[State]:
    return _model("ShardsKeyLeftUnbound", UNBOUND_NEXT, cfg)


def _model(name: str, actions: tuple[Action, ...], cfg: cfgs.Config) -> Model[State]:
    c = Constants.from_cfg(cfg)
    return cfgs.action_model(name, cfg, c, initial(c), actions, invariants(c))
