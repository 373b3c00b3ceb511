"""What the web app holds while it runs: its settings, Redis clients, brokers and hubs."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

import redis
import redis.asyncio as aioredis

from taskq.broker import Broker
from taskq.connection import connect
from taskq.feed.hub import Hub
from taskq.feed.log import FeedLog
from taskq.feed.stream import StreamSettings
from taskq.keys import QueueKeys, check_queue_name
from taskq.settings import Settings

FEED_CONNECTIONS = 64


@dataclass
class WebState:
    """Built by the lifespan; one sync client for the JSON API (run in threads), one
    asyncio client for the feed, one hub per queue that has feed clients."""

    settings: Settings
    client: redis.Redis
    aclient: aioredis.Redis
    stream: StreamSettings
    brokers: dict[str, Broker] = field(default_factory=dict)
    hubs: dict[str, Hub] = field(default_factory=dict)
    _hub_lock: asyncio.Lock = field(default_factory=asyncio.Lock)

    @classmethod
    def create(cls, settings: Settings) -> WebState:
        return cls(
            settings=settings,
            client=connect(settings),
            # Many feed clients read at once: they wait for a pooled connection rather
            # than fail with "Too many connections" and end their stream.
            aclient=aioredis.Redis(connection_pool=aioredis.BlockingConnectionPool.from_url(
                settings.redis_url,
                decode_responses=True,
                socket_connect_timeout=settings.redis_timeout_seconds,
                max_connections=FEED_CONNECTIONS,
                timeout=settings.redis_timeout_seconds,
            )),
            stream=StreamSettings(heartbeat_seconds=settings.feed_heartbeat_seconds),
        )

    def broker(self, queue: str) -> Broker:
        check_queue_name(queue)
        if queue not in self.brokers:
            self.brokers[queue] = Broker(
                self.client, queue, events_retention=self.settings.events_retention
            )
        return self.brokers[queue]

    async def hub(self, queue: str) -> Hub:
        check_queue_name(queue)
        async with self._hub_lock:
            if queue not in self.hubs:
                # A ring longer than the log's retention would serve rows Redis has
                # trimmed, so two servers could answer the same resume differently.
                ring = min(10_000, self.settings.events_retention)
                hub = Hub(FeedLog(self.aclient, QueueKeys(queue)), ring_size=ring)
                await hub.start()
                self.hubs[queue] = hub
            return self.hubs[queue]

    async def close(self) -> None:
        for hub in self.hubs.values():
            await hub.stop()
        await self.aclient.aclose(close_connection_pool=True)  # it was given a pool
        self.client.close()
