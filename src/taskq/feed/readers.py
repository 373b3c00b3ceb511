"""The hubs of one server process: one per followed queue, only for queues that exist,
dropped with their last client, and never more than a fixed number at once."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Literal

from taskq import limits
from taskq.connection import AsyncClient
from taskq.feed.hub import CATCH_UP_READS, Hub
from taskq.feed.log import FeedLog
from taskq.feed.waker import Waker
from taskq.keys import QUEUES_KEY, QueueKeys

# The hubs wait for their logs in one blocking XREAD (taskq.feed.waker), which holds
# one pooled connection, and their clients' catch-up reads share one semaphore: with a
# pool of FEED_CONNECTIONS, the waker, the hubs' own reads, the catch-up reads and the
# existence checks of new streams never wait on each other for a connection.
FEED_CONNECTIONS = 64
# A hub idle on a quiet queue costs an entry in the waker's read and an empty ring; a
# busy one keeps its ring's frames in memory (10,000 events, about 5 MB, more where
# completed events carry results of up to a KiB). The bound on
# hubs (TASKQ_FEED_MAX_QUEUES) is on that memory, and is above the queues most
# deployments have, so that streams left open on a server's queues do not take every
# reader.
MAX_READERS = limits.FEED_MAX_QUEUES.default
# New streams ask Redis whether their queue exists at most this many at a time: a
# barrage of streams for made-up queues waits its turn rather than take a connection
# each from the hubs' reads.
EXISTENCE_CHECKS = 8


def connections_needed(limit: int, catch_up_reads: int = CATCH_UP_READS) -> int:
    """The most connections the hubs of `limit` queues hold at once on one Redis
    node: a read each, the catch-up reads, the existence checks and the waker's read,
    and two to spare: a hub still stopping while its queue's next hub starts, and the
    cluster client's own refresh of the slot map. A Redis Cluster client fails a
    command past its bound rather than wait for a connection, so its bound per node
    must be this."""
    return limit + catch_up_reads + EXISTENCE_CHECKS + 1 + 2


@dataclass(frozen=True)
class Refused:
    """Why a stream gets no hub: its queue does not exist, or too many are followed."""

    reason: Literal["missing", "busy"]
    queue: str


class Readers:
    """Hands out one hub per queue. A hub is created only for a queue in the
    `taskq:queues` set, so made-up names cost one SISMEMBER and nothing that lasts; it
    is stopped when its last client leaves. No lock is held across a Redis call: the
    hub is registered before it starts, and every client of it waits for its start."""

    def __init__(self, client: AsyncClient, ring_size: int, limit: int = MAX_READERS,
                 catch_up_reads: int = CATCH_UP_READS, by_slot: bool = False) -> None:
        self.client = client
        self.ring_size = ring_size
        self.limit = limit
        self.hubs: dict[str, Hub] = {}
        self.catch_up = asyncio.Semaphore(catch_up_reads)
        self.checks = asyncio.Semaphore(EXISTENCE_CHECKS)
        self.waker = Waker(client, by_slot=by_slot)
        # Per queue ever followed: events delivered by hubs since stopped, so the
        # deliveries counter never goes back when a hub is dropped.
        self.retired: dict[str, int] = {}

    async def acquire(self, queue: str) -> Hub | Refused:
        """The started hub of `queue`, counted as one more client; `release` it after.
        Raises what Redis raised when it cannot be asked or the hub cannot start."""
        hub = self.hubs.get(queue)
        if hub is None:
            if len(self.hubs) >= self.limit:  # no round trip for a client turned away
                return Refused("busy", queue)
            async with self.checks:
                # Or its log, for a queue whose producers have not named it again
                # since Redis lost its data (see REGISTER_AGAIN_SECONDS).
                exists = (await self.client.sismember(QUEUES_KEY, queue)
                          or await self.client.exists(QueueKeys(queue).events))
            if not exists:
                return Refused("missing", queue)
            hub = self.hubs.get(queue)  # another client may have started it meanwhile
        if hub is None:
            if len(self.hubs) >= self.limit:
                return Refused("busy", queue)
            hub = Hub(FeedLog(self.client, QueueKeys(queue)), ring_size=self.ring_size,
                      catch_up=self.catch_up, waker=self.waker)
            hub.begin()
            self.hubs[queue] = hub
            self.retired.setdefault(queue, 0)
        hub.clients += 1
        try:
            await hub.ready()
        except BaseException:
            await self.release(queue, hub)
            raise
        return hub

    async def release(self, queue: str, hub: Hub) -> None:
        hub.clients -= 1
        if hub.clients == 0 and self.hubs.get(queue) is hub:
            del self.hubs[queue]
            self.retired[queue] += hub.delivered
            await hub.stop()

    def clients(self, queue: str) -> int:
        hub = self.hubs.get(queue)
        return hub.clients if hub else 0

    def delivered(self, queue: str) -> int:
        hub = self.hubs.get(queue)
        return self.retired.get(queue, 0) + (hub.delivered if hub else 0)

    async def close(self) -> None:
        for hub in list(self.hubs.values()):
            await hub.stop()
        self.hubs.clear()
        await self.waker.close()
