"""How scripts reach Redis: one transport per client, single node or cluster, chosen once.

`transport_for` is the one place that tells the two client kinds apart. Everything else
runs scripts through the `Transport` it returns and sends plain commands on the client,
which both kinds answer alike.
"""

from __future__ import annotations

from redis.cluster import RedisCluster

from taskq.transport.cluster import Cluster
from taskq.transport.protocol import Client, ScriptRun, Transport
from taskq.transport.single import SingleNode

__all__ = ["Client", "Cluster", "ScriptRun", "SingleNode", "Transport", "transport_for"]


def transport_for(client: Client) -> Transport:
    """The transport for `client`: direct connections on a single node, redis-py's
    script objects on a cluster (whose commands must follow their keys' slots)."""
    if isinstance(client, RedisCluster):
        return Cluster(client)
    return SingleNode(client)
