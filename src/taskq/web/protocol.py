"""The HTTP protocol `taskq serve` runs uvicorn with: uvicorn's own (httptools where it
is installed, else h11, as uvicorn picks), able to abort a connection the app cuts and
telling the app when the server shuts down.

A feed client that stops reading is cut (see `taskq.web.sse`), but closing a transport
waits for what it still has to send, which that client never takes: the connection, its
buffers and its file descriptor would stay for good. The app aborts it instead, through
the callable this protocol puts in each request's scope under ABORT. And a stream never
ends of itself, while at a shutdown uvicorn cancels what still runs after its grace and
logs each as an application error: the event under CLOSING is set when the server asks
the connection to shut down, and the stream ends cleanly on it."""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import struct
import termios
from collections.abc import Callable
from typing import Any, cast

ABORT = "taskq.abort"
CLOSING = "taskq.closing"


def aborting_protocol(request_timeout: float,
                      stall_timeout: float) -> type[asyncio.Protocol]:
    """uvicorn's HTTP protocol class, with `scope[ABORT]` set to abort the connection
    and `scope[CLOSING]`, an asyncio.Event set when the server shuts down; a connection
    whose first request has not begun `request_timeout` seconds after it opened is
    closed (uvicorn times none out before its first request: a few hundred that send
    a header byte now and then would hold as many file descriptors for good). Each later
    request on a kept-alive connection has as long from the end of the response before
    it: uvicorn's keep-alive timeout stops at the next request's first byte.

    A client that takes nothing of what it was sent for `stall_timeout` seconds is cut
    too: uvicorn waits for ever for a response's bytes to drain, so a client that
    pipelines requests and never reads would otherwise hold its connection, and the
    responses it asked for, for good. A slow reader is not cut while it takes bytes."""
    return type("AbortingProtocol", (AbortingProtocol,),
                {"request_timeout": request_timeout, "stall_timeout": stall_timeout})


def _uvicorn_protocol() -> type[Any]:
    """The protocol uvicorn would pick: httptools where it is installed, else h11."""
    try:
        from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol  # noqa: PLC0415
    except ImportError:
        from uvicorn.protocols.http.h11_impl import H11Protocol  # noqa: PLC0415
        return H11Protocol
    return HttpToolsProtocol


class AbortingProtocol(_uvicorn_protocol()):  # type: ignore[misc]
    """See aborting_protocol, which gives it its timeouts."""

    request_timeout: float
    stall_timeout: float

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        app: Any = cast(Any, self).app
        closing = asyncio.Event()

        async def app_that_can_abort(scope: Any, receive: Any, send: Any) -> None:
            self.deadline.stop()
            scope[ABORT] = self.abort
            scope[CLOSING] = closing
            await app(scope, receive, send)

        self.app = app_that_can_abort
        self.closing = closing
        self.deadline = Deadline(self.request_timeout, self.request_overdue)
        # While bytes wait to be sent, the client must take some every `stall_timeout`.
        self.stall = Deadline(self.stall_timeout, self.stalled)
        self.unsent_at_stall = 0

    def connection_made(self, transport: Any) -> None:
        super().connection_made(transport)
        self.deadline.start()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        # A pipelined request may have begun in the call above: its app, not yet run,
        # stops this deadline when it does.
        if self.is_open():
            self.deadline.start()

    def pause_writing(self) -> None:
        """The transport holds more than its high-water mark: the app now waits until
        the client takes some of it, however long, unless the stall wait cuts it."""
        super().pause_writing()
        self.watch_unsent()

    def watch_unsent(self) -> None:
        if self.stall.timer is None:
            self.unsent_at_stall = self.unsent()
            self.stall.start()

    def unsent(self) -> int:
        """Bytes written and not yet sent: the transport's, and the kernel's where it
        says (a socket is writable again only once a good part of its buffer is free,
        so a client that reads slowly takes bytes long before the transport's shrink)."""
        if not self.is_open():
            return 0
        size: int = self.transport.get_write_buffer_size()
        sock = self.transport.get_extra_info("socket")
        with contextlib.suppress(AttributeError, OSError):  # no such ioctl here
            queued = fcntl.ioctl(sock.fileno(), termios.TIOCOUTQ, b"\0" * 4)
            size += struct.unpack("i", queued)[0]
        return size

    def stalled(self) -> None:
        self.stall.stop()
        unsent = self.unsent()
        if not unsent:
            return  # all taken: the request deadline (or the app) goes on from here
        if unsent < self.unsent_at_stall:
            self.unsent_at_stall = unsent
            self.stall.start()
        else:
            self.abort()

    def connection_lost(self, exc: Exception | None) -> None:
        self.deadline.stop()
        self.stall.stop()
        super().connection_lost(exc)

    def shutdown(self) -> None:
        self.closing.set()
        super().shutdown()

    def request_overdue(self) -> None:
        """No request began in time: the connection is aborted, unless the response
        before is still being sent (a client reading a large one slowly), whose tail an
        abort would drop: the wait starts over, and the stall wait sees that the client
        takes some of it."""
        if self.is_open() and self.transport.get_write_buffer_size() > 0:
            self.watch_unsent()
            self.deadline.start()
        else:
            self.abort()

    def is_open(self) -> bool:
        return self.transport is not None and not self.transport.is_closing()

    def abort(self) -> None:
        if self.is_open():
            self.transport.abort()


class Deadline:
    """One connection's wait for its next request to begin: `expire` is called unless
    `stop` comes within `seconds` of `start`."""

    def __init__(self, seconds: float, expire: Callable[[], None]) -> None:
        self.seconds = seconds
        self.expire = expire
        self.timer: asyncio.TimerHandle | None = None

    def start(self) -> None:
        self.stop()
        self.timer = asyncio.get_running_loop().call_later(self.seconds, self.expire)

    def stop(self) -> None:
        timer, self.timer = self.timer, None
        if timer is not None:
            timer.cancel()
