"""The floor of a single call: the thinnest client there is (hiredis on a bare socket,
its commands built in advance but for a fresh task id) sending taskq's enqueue script
(bare_script_app), or one LPUSH of a message as small as a peer's (bare_lpush_app). No queue
library's Python runs between calls, so what is left is the round trip and what Redis
does for each call: what no client, taskq's or a peer's, can go below."""

from __future__ import annotations

import socket
import uuid
from collections.abc import Callable
from typing import Any

import hiredis
import redis

from bench.enqueue import NOOP
from bench.peers.counter import QUEUE, URL
from bench.tasks import make_app
from taskq import Broker, Settings
from taskq.calls import enqueue_calls
from taskq.fields import new_task_fields
from taskq.scripts import source

# The size of Huey's pickled no-op message, the fastest peer's: an LPUSH of it stands
# for every peer's one-command enqueue.
MESSAGE = b"x" * 200


def pack(command: tuple[str | int | bytes, ...]) -> bytes:
    # hiredis's stub types its argument as a one-element tuple; it takes any length.
    packed: bytes = hiredis.pack_command(command)  # type: ignore[arg-type]
    return packed


class Bare:
    """One connection's socket, past every layer of redis-py (which only connects it)."""

    def __init__(self) -> None:
        self.client = redis.Redis.from_url(URL)
        self.connection = self.client.connection_pool.get_connection()
        self.connection.connect()  # type: ignore[no-untyped-call]
        sock = self.connection._sock
        assert isinstance(sock, socket.socket)
        self.sock: socket.socket = sock
        self.reader: hiredis.Reader = hiredis.Reader()

    def call(self, packed: bytes) -> Any:
        self.sock.sendall(packed)
        reply = self.reader.gets()
        while reply is False:
            self.reader.feed(self.sock.recv(65536))
            reply = self.reader.gets()
        if isinstance(reply, hiredis.ReplyError):
            raise reply
        return reply


def script_sender() -> Callable[[], Any]:
    bare = Bare()
    broker = Broker(bare.client, QUEUE)
    sha = bare.client.script_load(source("enqueue"))
    # One task's call exactly as Task.enqueue() builds it (taskq.calls, taskq.fields);
    # each send swaps in a fresh task id, the first of the task's values.
    template = make_app(QUEUE, Settings.from_env({}, redis_url=URL)).tasks[NOOP].call()
    fields = new_task_fields([template], broker.max_payload_bytes)
    (keys, args), = enqueue_calls(broker.keys, broker.events_retention, fields, 1)
    head, tail = ("EVALSHA", sha, len(keys), *keys, *args[:3]), tuple(args[4:])
    return lambda: bare.call(pack((*head, uuid.uuid4().hex, *tail)))


def lpush_sender() -> Callable[[], Any]:
    bare = Bare()
    packed = pack(("LPUSH", f"bare:{QUEUE}", MESSAGE))
    return lambda: bare.call(packed)
