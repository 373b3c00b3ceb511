"""A consistent picture of a queue for dashboards: counts, leases, delays, the DLQ."""

from __future__ import annotations

from dataclasses import dataclass

from taskq.broker import Broker, redis_errors
from taskq.keys import QUEUES_KEY
from taskq.results import QueueCounts


@dataclass(frozen=True)
class LeaseView:
    task_id: str
    name: str
    worker: str
    token: int
    attempt: int
    expires_at: int


@dataclass(frozen=True)
class DelayedView:
    task_id: str
    name: str
    retries: int
    run_at: int
    last_error: str


@dataclass(frozen=True)
class DeadView:
    task_id: str
    name: str
    retries: int
    dead_at: int
    last_error: str


@dataclass(frozen=True)
class QueueSnapshot:
    """One queue at one moment of Redis time (`now_ms`), and the feed position
    (`epoch`, `seq`, and that row's `last_ts`) of the last event reflected in it."""

    queue: str
    now_ms: int
    counts: QueueCounts
    leased: list[LeaseView]
    delayed: list[DelayedView]
    dead: list[DeadView]
    epoch: str
    seq: int
    last_ts: int


def queue_names(broker: Broker) -> list[str]:
    """Every queue any producer has used on this Redis, sorted."""
    with redis_errors("queues"):
        names = broker.client.smembers(QUEUES_KEY)
    return sorted(str(n) for n in names)


def take_snapshot(broker: Broker, limit: int = 20) -> QueueSnapshot:
    """Read the queue's structures atomically (MULTI), then the listed tasks' records."""
    k = broker.keys
    with redis_errors("snapshot"):
        pipe = broker.client.pipeline(transaction=True)
        pipe.time()
        pipe.llen(k.ready)
        pipe.zcard(k.leased)
        pipe.zcard(k.delayed)
        pipe.llen(k.dlq)
        pipe.zrange(k.leased, 0, limit - 1, withscores=True)
        pipe.zrange(k.delayed, 0, limit - 1, withscores=True)
        pipe.lrange(k.dlq, 0, limit - 1)
        pipe.get(k.epoch)
        pipe.xrevrange(k.events, count=1)
        (now, ready, leased_n, delayed_n, dead_n, leased, delayed, dead,
         epoch, last) = pipe.execute()
        ids = [str(i) for i, _ in leased] + [str(i) for i, _ in delayed] + [str(i) for i in dead]
        fields = ("name", "worker", "fencing_token", "retries", "last_error", "dead_at")
        pipe = broker.client.pipeline(transaction=False)
        for task_id in ids:
            pipe.hmget(k.task(task_id), fields)
        records = dict(zip(ids, pipe.execute(), strict=True))

    def field(task_id: str, index: int) -> str:
        value = records[task_id][index]
        return "" if value is None else str(value)

    def number(task_id: str, index: int) -> int:
        return int(field(task_id, index) or 0)

    return QueueSnapshot(
        queue=broker.queue,
        now_ms=int(now[0]) * 1000 + int(now[1]) // 1000,
        counts=QueueCounts(int(ready), int(leased_n), int(delayed_n), int(dead_n)),
        leased=[
            LeaseView(str(i), field(str(i), 0), field(str(i), 1), number(str(i), 2),
                      number(str(i), 3) + 1, int(score))
            for i, score in leased
        ],
        delayed=[
            DelayedView(str(i), field(str(i), 0), number(str(i), 3), int(score), field(str(i), 4))
            for i, score in delayed
        ],
        dead=[
            DeadView(str(i), field(str(i), 0), number(str(i), 3), number(str(i), 5),
                     field(str(i), 4))
            for i in dead
        ],
        epoch=str(epoch or ""),
        seq=int(str(last[0][0]).split("-")[0]) if last else 0,
        last_ts=int(last[0][1].get("ts", 0)) if last else 0,
    )
