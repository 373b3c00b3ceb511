"""What a transport does: the few ways taskq sends scripts to Redis."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol, TypeAlias

import redis
from redis.cluster import RedisCluster
from redis.commands.core import Script

Client: TypeAlias = redis.Redis | RedisCluster
"""A client `taskq.connect()` makes and `Broker` accepts: one node, or a cluster."""

# Each script's SHA1 by its source and the encoding a client sends it in. A redis-py
# Script hashes its source (up to 30 kB) as it is made, and a Broker is made for each
# queue a dashboard, /metrics or `taskq workers` lists: each would hash every script
# again. Not the Scripts themselves, each client's: a Script holds its client, so a
# table of them keyed by the client would keep every client, and its sockets, for ever.
_shas: dict[tuple[str, str, str], str] = {}


class _HashedScript(Script):
    """A redis-py Script given the SHA1 of its source rather than working it out."""

    def __init__(self, client: Client, source: str, sha: str) -> None:
        self.registered_client = client
        self.script = source
        self.sha = sha


def client_script(client: Client, source: str) -> Script:
    """`client`'s Script for the Lua text `source`, its source hashed once per process."""
    encoder = client.get_encoder()
    known = (source, encoder.encoding, encoder.encoding_errors)
    sha = _shas.get(known)
    if sha is None:
        sha = _shas[known] = client.register_script(source).sha
    return _HashedScript(client, source, sha)


ScriptRun: TypeAlias = tuple[Script, Sequence[Any], Sequence[Any]]
"""One script to run, with its keys and args."""


class Transport(Protocol):
    """Runs the scripts of one client. Each script run is its own atomic step; a server
    that lost a script (NOSCRIPT, after a restart or SCRIPT FLUSH) ran nothing, so the
    transport loads it and runs it again with the same arguments."""

    @property
    def spans_slots(self) -> bool:
        """Whether one call may name keys of several hash slots (several queues): a
        single node takes any keys; a cluster refuses keys that live in different slots."""
        ...

    def script(self, source: str) -> Script:
        """The script with Lua text `source`, ready to run on this transport."""
        ...

    def run(self, script: Script, keys: Sequence[Any], args: Sequence[Any]) -> Any:
        """Run one script and return its reply; an error reply raises `ResponseError`."""
        ...

    def run_many(self, runs: Sequence[ScriptRun]) -> list[Any]:
        """Run each script in order, in one write where the transport can; return the
        replies in order with a script's error reply (a `ResponseError`) in its place,
        since one may fail where another ran. A failed round trip raises."""
        ...

    def wait_then_run(self, key: str, timeout: float, script: Script,
                      keys: Sequence[Any], args: Sequence[Any]) -> Any | None:
        """BLPOP `key` for up to `timeout` seconds and then run the script, in one round
        trip, and return the script's reply (an error reply raises); None, having done
        nothing, where the two cannot go in one round trip: use `wait` and then `run`."""
        ...

    def wait(self, keys: Sequence[str], timeout: float) -> bool:
        """BLPOP `keys` (in one call, so in one slot unless `spans_slots`) for up to
        `timeout` seconds; False if Redis could not be asked."""
        ...
