"""A sharded queue as the dashboards show it (the web page, `taskq dashboard`): each
shard's slot, its counts and its feed position, one atomic read per shard."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from taskq.boundary import unusable_as_stored
from taskq.broker import Broker
from taskq.errors import BrokerError
from taskq.shards import Layout, layout_holding, slot_of
from taskq.snapshot import take_snapshot
from taskq.terminal import one_line
from taskq.transport import Client


@dataclass(frozen=True)
class ShardView:
    """One shard: its name, its Redis Cluster slot, its counts, and `position`, the feed
    id of the last event the counts reflect ('' before the first), read in the same
    atomic step: a reader that follows the shard's feed from there sees every later
    change once."""

    name: str
    slot: int
    ready: int
    leased: int
    delayed: int
    dead: int
    position: str
    # Why the shard could not be read ('' when it was): a key of it holds what taskq
    # never writes there. Its counts are then 0, and hide no other shard's.
    error: str = ""


@dataclass(frozen=True)
class ShardsView:
    """A sharded queue's shards in routing order; none for a plain queue."""

    queue: str
    shards: list[ShardView]


def read_shard(broker: Broker) -> ShardView:
    """One shard's view: the snapshot script listing nothing, so one call per shard."""
    try:
        snap = take_snapshot(broker, limit=0)
    except BrokerError as e:
        if not unusable_as_stored(e):
            raise
        return ShardView(broker.queue, slot_of(broker.queue), 0, 0, 0, 0, "",
                         one_line(str(e)))
    c = snap.counts
    return ShardView(broker.queue, slot_of(broker.queue), c.ready, c.leased, c.delayed,
                     c.dead, snap.position)


def read_shards(client: Client, queue: str, broker: Callable[[str], Broker]) -> ShardsView:
    """The shards of the sharded queue `queue` is, or is a shard of, each read through
    `broker(name)`; a plain queue's view has none."""
    layout = layout_holding(client, queue)
    if layout is None:
        return ShardsView(queue, [])
    return shards_of(layout, broker)


def shards_of(layout: Layout, broker: Callable[[str], Broker]) -> ShardsView:
    """`layout`'s shards, each read through `broker(name)`."""
    return ShardsView(layout.queue, [read_shard(broker(name)) for name in layout.shards])
