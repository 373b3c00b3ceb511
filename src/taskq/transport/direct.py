"""Commands sent on connections kept at hand, past redis-py's per-call pool work.

Checking a connection out of redis-py's pool and back in (locks, a readiness poll
through several layers, bookkeeping) costs an idle process about as much as the round
trip itself, on the path from a producer to a handler (docs/benchmarks.md has the
figures). The connections here come from the client's own pool and stay
checked out while they are kept, so closing the client (when it owns its pool) closes
them too; every Broker on one pool shares them, and each call keeps the client's
retry policy.
"""

from __future__ import annotations

import os
import select
import threading
import weakref
from collections.abc import Sequence
from typing import Any

import hiredis
import redis
from redis.connection import Connection, ConnectionPool
from redis.exceptions import ResponseError

Command = Sequence[Any]

# Connections kept for reuse per pool; more than this many at rest go back to the pool,
# so a burst of threads does not hold connections out of it for good.
IDLE_LIMIT = 8

_shared: weakref.WeakKeyDictionary[ConnectionPool, DirectConnections] = (
    weakref.WeakKeyDictionary()
)
_shared_lock = threading.Lock()


class DirectConnections:
    """Single-node connections of one pool, each used by one thread at a time."""

    def __init__(self, pool: ConnectionPool) -> None:
        # Weakly: the shared table is keyed by the pool, and a strong reference here
        # would keep every pool (and its sockets) alive after its client is dropped.
        self._pool = weakref.proxy(pool)
        self._idle: list[Connection] = []
        self._pid = os.getpid()

    @classmethod
    def of(cls, client: redis.Redis) -> DirectConnections:
        """The connections shared by everything built on `client`'s pool."""
        pool = client.connection_pool
        with _shared_lock:
            direct = _shared.get(pool)
            if direct is None:
                direct = _shared[pool] = cls(pool)
            return direct

    def call(self, *command: Any) -> Any:
        """Send one command and return its reply; an error reply raises."""
        reply = self.call_many([command])[0]
        if isinstance(reply, ResponseError):
            raise reply
        return reply

    def call_many(self, commands: Sequence[Command]) -> list[Any]:
        """Send `commands` in one write and read every reply in order; an error reply
        is returned in its place, as `pipeline().execute(raise_on_error=False)` does."""
        connection = self._take()

        def exchange() -> list[Any]:
            connection.send_packed_command(packed)  # type: ignore[no-untyped-call]
            return [self._read(connection) for _ in commands]

        def drop(_error: object = None) -> None:
            connection.disconnect()  # type: ignore[no-untyped-call]

        try:
            packed = pack(connection, commands)
            replies: list[Any] = connection.retry.call_with_retry(exchange, drop)
            return replies
        except BaseException:
            # Whatever stopped the exchange may have left replies unread on the socket;
            # a fresh connection is the only safe one for the next caller.
            drop()
            raise
        finally:
            self._give_back(connection)

    @staticmethod
    def _read(connection: Connection) -> Any:
        try:
            return connection.read_response()
        except ResponseError as e:
            return e

    def _take(self) -> Connection:
        if self._pid != os.getpid():
            # A forked child must not share its parent's sockets: the pool makes new ones.
            self._idle, self._pid = [], os.getpid()
        try:
            connection = self._idle.pop()
        except IndexError:
            fresh: Connection = self._pool.get_connection()
            return fresh
        if _readable(connection):
            # The server closed it while it rested (a restart, a kill, an idle timeout):
            # start afresh now, as the pool's own check would, rather than fail a call
            # on a client that does not retry.
            connection.disconnect()  # type: ignore[no-untyped-call]
        return connection

    def _give_back(self, connection: Connection) -> None:
        if len(self._idle) < IDLE_LIMIT:
            self._idle.append(connection)
        else:
            self._pool.release(connection)


def _numbers_as_text(command: Command) -> tuple[Any, ...]:
    return tuple([str(a) if type(a) is int or type(a) is float else a for a in command])


def pack(connection: Connection, commands: Sequence[Command]) -> list[bytes]:
    """`commands` in the wire protocol. hiredis packs them in C, several times faster
    than redis-py's packer, which encodes each argument in Python: for a batch of acks
    or an enqueue that is most of the client's own work. redis-py's packer takes any
    command hiredis refuses (an argument of another type: a bool, a bytearray, an
    IntEnum) or would send otherwise (a first argument of several words, which
    redis-py splits), so what reaches the wire, and the error a bad argument raises,
    are redis-py's own; tests/test_transport.py holds the two to the same bytes.
    Numbers go to hiredis as text, as TextArgsPacker hands them: its own conversion
    crashes the process when a Ctrl-C lands in it."""
    if not any(" " in str(command[0]) for command in commands):
        try:
            return [b"".join([hiredis.pack_command(_numbers_as_text(command))
                              for command in commands])]
        except TypeError:
            pass
    packed: list[bytes] = connection.pack_commands(commands)  # type: ignore[no-untyped-call]
    return packed


def _readable(connection: Connection) -> bool:
    """Whether a resting connection's socket has anything to read: end of file from a
    closed peer, or a stray reply. One poll call (select() fails on fds over 1023)."""
    sock = getattr(connection, "_sock", None)
    if sock is None:
        return False
    poller = select.poll()
    poller.register(sock, select.POLLIN)
    return bool(poller.poll(0))
