"""One queue over several Redis primaries: its shards, which shard a task goes to, and
the layout every producer and worker must agree on.

A queue lives in one Redis Cluster slot (its hash tag, see `taskq.keys`), so one
queue's throughput is bounded by one primary. A sharded queue is N queues, its shards,
named `<queue>~<n>`: each a whole queue with its own hash tag, scripts, fencing and
event log, so every guarantee holds on each shard as on any queue. A task never moves
between shards: the shard is a function of its task id, so a handle finds the task
from the id alone; a task with an idempotency key goes to the key's shard, which its
id must route to as well (taskq draws ids so), so a key names at most one task and an
id one task, whatever the shard count, while the layout stands (a layout changed by
hand routes a key sent again to its new shard).

Each shard's name is picked so that its slot falls in its own N-th of the slot space,
which spreads the shards over the primaries of a cluster whose slots are split evenly
(as `redis-cli --cluster create` splits them). The layout is stored in Redis
(`SHARDS_KEY`) by the first producer or worker; one that counts the shards differently
is refused, since it would route keys to other shards.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass

from redis.crc import REDIS_CLUSTER_HASH_SLOTS, key_slot

from taskq.boundary import redis_errors
from taskq.errors import ConfigError, InvalidTaskError
from taskq.keys import (
    SCHEDULE_TASK_PREFIX,
    SHARD_MARK,
    QueueKeys,
    check_idempotency_key,
    check_queue_name,
    new_id,
)
from taskq.limits import SHARDS, shown
from taskq.transport import Client

# Each sharded queue's layout: queue name -> its shards' names, comma-separated.
SHARDS_KEY = "taskq:shards"

# A name is searched among this many suffixes; an N-th of the slot space is hit about
# once in N tries, so with at most SHARDS.high shards this bound is never reached.
MAX_SUFFIX = 1_000_000


def slot_of(queue: str) -> int:
    """The Redis Cluster slot every key of `queue` lives in."""
    return key_slot(QueueKeys(queue).prefix.encode())


def shard_names(queue: str, count: int) -> tuple[str, ...]:
    """The names of `queue`'s `count` shards, in order: shard i is `<queue>~<s>` for the
    smallest `s` whose slot lies in the i-th `count`-th of the slot space."""
    check_queue_name(queue)
    if SHARD_MARK in queue:
        raise ConfigError(f"queue {queue!r} is a shard itself; shard the queue it belongs to")
    SHARDS.check(count, f"the shards of queue {queue!r}", error=ConfigError)
    names: list[str | None] = [None] * count
    left = count
    for suffix in range(MAX_SUFFIX):
        name = f"{queue}{SHARD_MARK}{suffix}"
        part = slot_of(name) * count // REDIS_CLUSTER_HASH_SLOTS
        if names[part] is None:
            names[part] = name
            left -= 1
            if not left:
                return tuple(n for n in names if n is not None)
    raise ConfigError(f"no shard names found for queue {queue!r}")  # pragma: no cover


def route(key: str, count: int) -> int:
    """The shard (0 to count-1) of a task routed by `key`: CRC-32 of its UTF-8, modulo
    `count`, the same in every process and Python version."""
    return zlib.crc32(key.encode()) % count


def shard_holding(task_id: str, count: int) -> int:
    """The shard (0 to count-1) that holds the task `task_id`: the one its id routes to,
    but for a schedule's tick the first, where every worker fires the schedules."""
    return 0 if task_id.startswith(SCHEDULE_TASK_PREFIX) else route(task_id, count)


@dataclass(frozen=True)
class Layout:
    """A sharded queue: its name and its shards' names, in routing order."""

    queue: str
    shards: tuple[str, ...]

    @classmethod
    def of(cls, queue: str, count: int) -> Layout:
        return cls(queue, shard_names(queue, count))

    @property
    def count(self) -> int:
        return len(self.shards)

    @property
    def schedules_shard(self) -> str:
        """The shard its periodic schedules fire on, and their ticks' tasks are kept on
        (see shard_holding): every worker of it fires them there."""
        return self.shards[shard_holding(SCHEDULE_TASK_PREFIX, self.count)]

    def shard_of(self, task_id_or_key: str) -> str:
        """The shard a task id (or an idempotency key) routes to."""
        return self.shards[route(task_id_or_key, self.count)]

    def matching(self, base: str, shard_of: str) -> str:
        """`base`, or the first of `base.1`, `base.2`... that routes to the same shard as
        `shard_of`: a task id (or key) fit to go with it (about `count` tries)."""
        want = route(shard_of, self.count)
        for n in range(MAX_SUFFIX):
            found = base if n == 0 else f"{base}.{n}"
            if route(found, self.count) == want:
                return found
        raise ConfigError(  # pragma: no cover
            f"no id like {base!r} routes to the shard of {shard_of!r}")

    def new_id(self, idempotency_key: str | None = None) -> str:
        """A new random task id that routes to the same shard as `idempotency_key`, so
        a handle made later from the id alone finds the task (about `count` tries)."""
        if idempotency_key is None:
            return new_id()
        # Checked before routing, which encodes it: a key that is no text of the allowed
        # size gets the error an unsharded enqueue gives.
        want = route(check_idempotency_key(idempotency_key), self.count)
        while True:
            task_id = new_id()
            if route(task_id, self.count) == want:
                return task_id

    @property
    def stored(self) -> str:
        """The layout as `SHARDS_KEY` keeps it."""
        return ",".join(self.shards)


def register(client: Client, layout: Layout) -> None:
    """Store `layout` unless one is stored for its queue; raise `ConfigError` if the one
    stored differs (another shard count), since routing by both would put one key's
    tasks on two shards, or if none is and the plain queue of that name holds tasks
    (see refuse_if_holding)."""
    with redis_errors(f"register the shards of queue {layout.queue!r}"):
        stored = client.hget(SHARDS_KEY, layout.queue)
        if stored is None:
            refuse_if_holding(layout.queue, [getattr(client, command)(key)
                                             for command, key in holding_calls(layout.queue)])
            client.hsetnx(SHARDS_KEY, layout.queue, layout.stored)
            stored = client.hget(SHARDS_KEY, layout.queue)  # another's, if it came first
    check_stored(layout, stored)


def holding_calls(queue: str) -> list[tuple[str, str]]:
    """The reads that count what the plain queue `queue` holds: its ready tasks (the
    default priority's, and the other priorities that have any), delayed, leased and
    dead ones."""
    k = QueueKeys(queue)
    return [("llen", k.ready), ("zcard", k.ready_levels), ("zcard", k.delayed),
            ("zcard", k.leased), ("llen", k.dlq)]


def refuse_if_holding(queue: str, counts: list[int]) -> None:
    """Raise `ConfigError` when the plain queue `queue` holds tasks (`counts` of
    holding_calls): once it is sharded, no worker leases from it, and the operator
    commands read its shards instead."""
    if any(counts):
        raise ConfigError(
            f"queue {queue!r} holds tasks as a plain queue (ready {counts[0]}, other "
            f"priorities {counts[1]}, delayed {counts[2]}, running {counts[3]}, dead "
            f"{counts[4]}): sharded, they would be stranded there. Drain it first, or "
            "give the sharded queue a new name")


def check_stored(layout: Layout, stored: object) -> None:
    """Raise `ConfigError` unless `stored` (what `SHARDS_KEY` holds for the queue) is
    `layout`."""
    if stored != layout.stored:
        found = str(stored).split(",")
        raise ConfigError(
            f"queue {layout.queue!r} has {len(found)} shards in Redis ({shown(stored)}), "
            f"but this app gives it {layout.count}: every producer and worker of a queue "
            "must count its shards alike. To change the count, drain the queue and "
            f"remove its layout: HDEL {SHARDS_KEY} {layout.queue}")


def refuse_sharded(queue: str, stored: object, worker: bool = False) -> None:
    """Raise `ConfigError` when `stored` (what `SHARDS_KEY` holds for `queue`) is a
    layout: a producer that gives the queue no shards would leave its tasks on `queue`
    itself, where no worker of the sharded queue leases, and its idempotency keys on
    another shard than theirs; a `worker` would lease from `queue` itself, where none
    of the sharded queue's tasks are."""
    if stored is not None:
        count = len(str(stored).split(","))
        why = ("it would wait for tasks where none of the sharded queue's are" if worker
               else "its tasks would wait where no worker of the sharded queue looks")
        raise ConfigError(
            f"queue {queue!r} has {count} shards in Redis, but this "
            f"{'worker' if worker else 'producer'} gives it none: {why}. Give "
            f"App(shards={count}) or set TASKQ_SHARDS={count}: every producer and worker "
            "of a queue must count its shards alike")


def refuse_shard_name(queue: str) -> None:
    """Raise `ConfigError` for a producer of a shard's own name (`jobs~1`): only the
    sharded queue routes a task or an idempotency key to the shard that must hold it."""
    if SHARD_MARK in queue:
        raise ConfigError(
            f"queue {queue!r} is a shard's name: enqueue through the queue it belongs to "
            f"(App({queue.partition(SHARD_MARK)[0]!r}, shards=N)), which sends each task "
            "to its shard")


def layouts(client: Client) -> dict[str, Layout]:
    """Every sharded queue's stored layout, by queue name; one that names a queue no
    queue name can be (written by hand) is left out, as the queue list's are, rather
    than stopping every reader of the others."""
    with redis_errors("read the sharded queues"):
        stored = client.hgetall(SHARDS_KEY)
    found = {}
    for queue, shards in sorted(stored.items()):
        layout = Layout(str(queue), tuple(str(shards).split(",")))
        if all(valid_queue_name(name) for name in (layout.queue, *layout.shards)):
            found[layout.queue] = layout
    return found


def valid_queue_name(name: str) -> bool:
    try:
        check_queue_name(name)
    except InvalidTaskError:
        return False
    return True


def layout_holding(client: Client, queue: str) -> Layout | None:
    """The sharded queue `queue` is, or is a shard of; None for a plain queue."""
    whole = queue.partition(SHARD_MARK)[0]
    with redis_errors("read the sharded queues"):
        stored = client.hget(SHARDS_KEY, whole)
    if stored is None:
        return None
    found = Layout(whole, tuple(str(stored).split(",")))
    if not all(map(valid_queue_name, found.shards)):
        raise ConfigError(f"the layout of queue {whole!r} in Redis names a shard no queue "
                          f"name can be ({shown(str(stored))}): fix or remove it with "
                          f"HDEL {SHARDS_KEY} {whole}")
    return found if queue == whole or queue in found.shards else None

