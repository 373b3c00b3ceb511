"""The workers registry: each worker says, at every heartbeat, that it is alive on each
of its queues and what it is doing; `taskq workers`, the JSON API and the dashboard read
it. A record expires a lease after its last heartbeat, so a worker that vanished (killed,
its host gone) leaves the registry within a lease; one that stops takes itself out.

Not a task state: nothing here appends an event, and nothing a worker does with tasks
waits on it (a registration Redis refuses is logged and tried again next beat), but for
the firing of a periodic schedule, held while a live worker does not run its task."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from taskq.boundary import redis_errors, stored_int, text
from taskq.broker import Broker
from taskq.limits import DEAD_TTL, to_ms

# Most workers one read returns.
MAX_LISTED = 1000


@dataclass(frozen=True)
class Presence:
    """What a worker says about itself on each of its queues."""

    worker_id: str
    host: str
    pid: int
    queues: Sequence[str]
    concurrency: int
    tasks: Sequence[str]
    version: str
    # How long it keeps a dead task (TASKQ_DEAD_TTL_SECONDS); 0: unsaid.
    dead_ttl_seconds: float = 0


@dataclass(frozen=True)
class WorkerView:
    """A registered worker as the registry holds it: times in ms of the server's clock,
    `tasks` the names it runs, `in_hand` the tasks it held at its last beat."""

    worker_id: str
    host: str
    pid: int
    queues: list[str]
    concurrency: int
    in_hand: int
    tasks: list[str]
    version: str
    started_at: int
    last_beat: int

    @classmethod
    def from_record(cls, record: dict[str, str]) -> WorkerView:
        return cls(
            worker_id=record.get("worker_id", ""), host=record.get("host", ""),
            pid=stored_int(record.get("pid")),
            queues=[q for q in record.get("queues", "").split(",") if q],
            concurrency=stored_int(record.get("concurrency")),
            in_hand=stored_int(record.get("in_hand")),
            tasks=[t for t in record.get("tasks", "").split(",") if t],
            version=record.get("version", ""),
            started_at=stored_int(record.get("started_at")),
            last_beat=stored_int(record.get("last_beat")),
        )  # fmt: skip


def register(broker: Broker, presence: Presence, in_hand: int, ttl: float) -> int:
    """Write `presence` on `broker`'s queue for `ttl` seconds; the server time (ms)."""
    keys = [broker.keys.workers, broker.keys.worker(presence.worker_id),
            broker.keys.dead_ttls, broker.keys.runners]
    args = [presence.worker_id, to_ms(ttl, "lease_seconds"), presence.host, presence.pid,
            ",".join(presence.queues), presence.concurrency, in_hand,
            ",".join(presence.tasks), presence.version,
            to_ms(presence.dead_ttl_seconds, DEAD_TTL.name) if presence.dead_ttl_seconds else 0]
    with redis_errors("register the worker"):
        return int(broker.scripts.register_worker(keys=keys, args=args))


def unregister(broker: Broker, worker_id: str) -> bool:
    """Take `worker_id` out of `broker`'s queue's registry; whether it was in it."""
    keys = [broker.keys.workers, broker.keys.worker(worker_id), broker.keys.dead_ttls]
    with redis_errors("unregister the worker"):
        return bool(broker.scripts.unregister_worker(keys=keys, args=[worker_id]))


def read_workers(broker: Broker, limit: int = MAX_LISTED) -> tuple[int, list[WorkerView]]:
    """The live workers of `broker`'s queue (the soonest to expire first), and the
    server time (ms) they were read at."""
    with redis_errors("read the workers"):
        reply = broker.scripts.workers(keys=[broker.keys.workers],
                                       args=[broker.keys.prefix, limit])
    now, records = int(reply[0]), reply[1:]
    return now, [WorkerView.from_record(_pairs(r)) for r in records]


def live_count(broker: Broker, now_ms: int, listed: int) -> int:
    """How many workers of `broker`'s queue were live at `now_ms` (server time), where a
    listing of `read_workers` gave `listed`: read only when that listing may have been
    cut at its limit (a fleet past MAX_LISTED)."""
    if listed < MAX_LISTED:
        return listed
    with redis_errors("count the live workers"):
        return max(listed, int(broker.client.zcount(broker.keys.workers, now_ms, "+inf")))


def longest_dead_ttl(broker: Broker) -> tuple[int, int]:
    """The longest (ms) a live worker of `broker`'s queue keeps a dead task (0: none
    says), and how many entries of the registry's index were read to find it: a purge
    asks this every few seconds on every worker, so it must not cost a read of each."""
    keys = [broker.keys.workers, broker.keys.dead_ttls]
    with redis_errors("read the workers' dead task retention"):
        longest, walked = broker.scripts.longest_dead_ttl(keys=keys, args=[])
    return int(longest), int(walked)


def not_run(broker: Broker, names: Sequence[str]) -> list[str]:
    """Those of `names` that no live worker of `broker`'s queue runs: looked up by name
    in the registry's index, however many workers there are; a name the index shows
    unrun is looked for in the records of the live workers whose names the index does
    not hold (a version that writes none, in a rolling deploy), and only theirs."""
    if not names:
        return []
    keys = [broker.keys.runners, broker.keys.workers]
    with redis_errors("read the task names live workers run"):
        reply = broker.scripts.not_run(keys=keys, args=[broker.keys.prefix, *names])
    return [text(name) for name in reply]


def lacking(broker: Broker, names: Sequence[str]) -> dict[str, str]:
    """Those of `names` that some live worker of `broker`'s queue does not run, each
    with one such worker's id (the soonest to expire), in one call however many names:
    read from each live worker's record, which every taskq version writes its names
    to. A worker whose record says nothing of its names counts as running them."""
    if not names:
        return {}
    with redis_errors("read the task names live workers run"):
        reply = broker.scripts.lacking(keys=[broker.keys.workers],
                                       args=[broker.keys.prefix, *names])
    flat = [text(value) for value in reply]
    return dict(zip(flat[::2], flat[1::2], strict=True))


def _pairs(flat: Sequence[object]) -> dict[str, str]:
    items = [text(v) for v in flat]
    return dict(zip(items[::2], items[1::2], strict=True))
