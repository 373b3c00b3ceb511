"""What the web app holds while it runs: its settings, Redis clients, brokers and hubs."""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass, field

import anyio
import redis
import redis.asyncio as aioredis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff

from taskq.broker import Broker
from taskq.connection import AsyncClient, async_client, connect
from taskq.errors import ConfigError
from taskq.feed.readers import FEED_CONNECTIONS, Readers, connections_needed
from taskq.feed.stream import StreamSettings
from taskq.keys import check_queue_name, check_task_id
from taskq.settings import Settings
from taskq.shards import layout_holding, shard_holding
from taskq.throughput import Throughput
from taskq.transport import Client
from taskq.transport.keeping import KeepingPool
from taskq.web.answering import Answering
from taskq.web.reuse import Reused

# Brokers kept for the queues the JSON API was last asked about. Any valid name is
# answered (an unknown queue reads as empty), so the set a client can name is unbounded;
# the least recently asked-for broker is dropped past this, to be built again if needed.
MAX_BROKERS = 1_000


# How many of the reads whose cost grows with the data run at once. Each holds a thread
# and the GIL for up to ~100 ms (a 10,000-step workflow's view) or Redis for ~25 ms (a
# history search): forty at once, on the default pool's forty threads, held every
# other client's live events back by seconds.
HEAVY_AT_ONCE = 4
# How many of them may wait for one of those threads; one past it is answered 503 with
# Retry-After at once rather than wait behind reads that take seconds to serve (a page
# gives up on one after 10 s). Those whose clients left are not served (taskq.web.heavy).
HEAVY_WAITING = 100

# How long a queue's throughput reading is given to the requests that ask after it (s).
# Each costs ~20 ms of scanning (taskq.throughput.SCAN entries) on a busy queue, and
# every open dashboard asks every few seconds.
THROUGHPUT_REUSED_FOR = 1.0


@dataclass
class WebState:
    """Built by the lifespan; one sync client for the JSON API (run in threads), one
    asyncio client for the feed, and the feed's hubs (`readers`)."""

    settings: Settings
    client: Client
    aclient: AsyncClient
    stream: StreamSettings
    readers: Readers
    # The reads whose cost grows with the data (see taskq.web.heavy) run at most this
    # many at once: built in the lifespan, on the server's event loop.
    heavy: anyio.CapacityLimiter
    # Whether Redis answers (see taskq.web.answering).
    answering: Answering
    brokers: OrderedDict[str, Broker] = field(default_factory=OrderedDict)
    # Readings of /api/throughput by (queue, window in s).
    throughputs: Reused[tuple[str, int], Throughput] = field(
        default_factory=lambda: Reused(THROUGHPUT_REUSED_FOR, MAX_BROKERS))
    # The API's handlers run in threads, so the brokers are reached under this lock.
    _brokers_lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    @classmethod
    def create(cls, settings: Settings) -> WebState:
        aclient = feed_client(settings)
        # A ring longer than the log's retention would serve rows Redis has trimmed,
        # so two servers could answer the same resume differently.
        ring = min(10_000, settings.events_retention)
        return cls(
            settings=settings,
            client=connect(settings),
            aclient=aclient,
            stream=StreamSettings(heartbeat_seconds=settings.feed_heartbeat_seconds),
            readers=Readers(aclient, ring_size=ring, limit=settings.feed_max_queues,
                            by_slot=settings.redis_cluster),
            heavy=anyio.CapacityLimiter(HEAVY_AT_ONCE),
            answering=Answering(aclient.ping, judges=not settings.redis_cluster),
        )

    def broker(self, queue: str) -> Broker:
        """The broker of `queue` on the shared client: kept for the MAX_BROKERS queues
        asked for most recently (a broker holds no connection of its own)."""
        check_queue_name(queue)
        with self._brokers_lock:
            broker = self.brokers.get(queue)
            if broker is None:
                broker = self.brokers[queue] = Broker(
                    self.client, queue, events_retention=self.settings.events_retention
                )
                if len(self.brokers) > MAX_BROKERS:
                    self.brokers.popitem(last=False)
            else:
                self.brokers.move_to_end(queue)
            return broker

    def broker_holding(self, queue: str, task_id: str | None = None) -> Broker:
        """`broker(queue)`, but for a sharded queue named as a whole: the shard holding
        `task_id`, or with no id `ConfigError` (a 409) naming the shards, since the plain
        queue of its name holds none of its tasks."""
        layout = layout_holding(self.client, queue)
        if layout is None or layout.queue != queue:
            return self.broker(queue)
        if task_id is not None:
            return self.broker(layout.shards[shard_holding(check_task_id(task_id),
                                                           layout.count)])
        raise ConfigError(f"queue {queue!r} has {layout.count} shards: ask each by its own "
                          f"name ({', '.join(layout.shards)})")

    async def close(self) -> None:
        await self.answering.close()
        await self.readers.close()
        await self.aclient.aclose()  # its pool too: the client was made from it
        self.client.close()


def feed_client(settings: Settings) -> AsyncClient:
    """The feed's asyncio client. On a Redis Cluster, the cluster client: each queue's
    log is on the primary that owns its slot, and the set of queues may be on another.
    It holds at most as many connections to each node as the hubs ever use at once,
    since it fails a command past its bound where a single node's pool waits."""
    if settings.redis_cluster:
        return async_client(settings, connections_needed(settings.feed_max_queues))
    return aioredis.Redis.from_pool(KeepingPool.from_url(
        settings.redis_url,
        decode_responses=True,
        socket_connect_timeout=settings.redis_timeout_seconds,
        # Many feed clients read at once: they wait for a pooled connection rather
        # than fail with "Too many connections" and end their stream.
        max_connections=FEED_CONNECTIONS,
        timeout=settings.redis_timeout_seconds,
        # After a Redis restart every pooled connection is dead: each fails once on
        # its next use and is reconnected and retried at once (every feed command is
        # a read: a read-only script, XREAD or SISMEMBER), so a restart neither ends
        # a stream nor pauses a reader.
        retry=Retry(NoBackoff(), 1),
        retry_on_error=[redis.ConnectionError],
    ))
