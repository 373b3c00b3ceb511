"""Raw asyncio SSE clients that only count the `id:` lines they receive."""

from __future__ import annotations

import asyncio
import time
import urllib.error
import urllib.request
from collections.abc import Callable

from bench.harness import BenchError

MARK = b"\nid: "
# The last chunk of a chunked body: the server finished the response.
END_OF_BODY = b"\r\n0\r\n\r\n"
CONNECT_BATCH = 100


class FeedClient(asyncio.Protocol):
    """One `GET /events` connection. Every event frame starts a line with `id: `, so the
    count of `\\nid: ` in the body is the count of events delivered (a chunk header of
    the chunked encoding ends in CRLF, so a frame at the start of a chunk counts too)."""

    def __init__(self, request: bytes) -> None:
        self.request = request
        self.events = 0
        self.last_at = 0.0
        self.ended = False
        self._tail = b""
        self._header = b""
        self.ready: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        transport.write(self.request)

    def data_received(self, data: bytes) -> None:
        if not self.ready.done():
            self._header += data
            end = self._header.find(b"\r\n\r\n")
            if end < 0:
                return
            status = self._header.split(b"\r\n", 1)[0]
            if b" 200 " not in status + b" ":
                self.ready.set_exception(BenchError(f"feed answered {status!r}"))
                return
            self.ready.set_result(None)
            data = self._header[end + 2:]
        found = (self._tail + data).count(MARK)
        if found:
            self.events += found
            self.last_at = time.perf_counter()
        self._tail = data[-(len(MARK) - 1):]
        if data.endswith(END_OF_BODY):
            self.ended = True

    def connection_lost(self, exc: Exception | None) -> None:
        """A feed never ends on its own: the server gave up on this client."""
        self.ended = True
        if not self.ready.done():
            self.ready.set_exception(BenchError(f"feed connection lost: {exc}"))

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()


def ended(clients: list[FeedClient]) -> int:
    """How many of `clients` had their stream ended by the server."""
    return sum(1 for c in clients if c.ended)


def request(queue: str, last_event_id: str = "") -> bytes:
    resume = f"Last-Event-ID: {last_event_id}\r\n" if last_event_id else ""
    return (f"GET /events?queue={queue} HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            f"Accept: text/event-stream\r\nConnection: close\r\n{resume}\r\n").encode()


def _factory(client: FeedClient) -> Callable[[], FeedClient]:
    return lambda: client


async def connect(port: int, queue: str, count: int, last_event_id: str = "") -> list[FeedClient]:
    """`count` clients, connected a batch at a time, each past its response headers."""
    loop = asyncio.get_running_loop()
    clients: list[FeedClient] = []
    for start in range(0, count, CONNECT_BATCH):
        batch = [FeedClient(request(queue, last_event_id))
                 for _ in range(min(CONNECT_BATCH, count - start))]
        await asyncio.gather(*(loop.create_connection(_factory(c), "127.0.0.1", port)
                               for c in batch))
        await asyncio.wait_for(asyncio.gather(*(c.ready for c in batch)), 30)
        clients.extend(batch)
    return clients


def wait_healthy(port: int, timeout: float = 30.0) -> None:
    """Until `/healthz` answers 200 (the server is up and reaches Redis)."""
    deadline = time.monotonic() + timeout
    last = ""
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2) as r:
                if r.status == 200:
                    return
        except (urllib.error.URLError, OSError) as e:
            last = str(e)
        time.sleep(0.1)
    raise BenchError(f"taskq serve did not answer /healthz within {timeout:.0f}s: {last}")
