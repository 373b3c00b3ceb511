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
from typing import Any, cast

ABORT = "taskq.abort"
CLOSING = "taskq.closing"


def aborting_protocol(request_timeout: float) -> type[asyncio.Protocol]:
    """uvicorn's HTTP protocol class, with `scope[ABORT]` set to abort the connection
    and `scope[CLOSING]`, an asyncio.Event set when the server shuts down; a connection
    whose first request has not begun `request_timeout` seconds after it opened is
    closed (uvicorn times none out before its first request: a few hundred that send
    a header byte now and then would hold as many file descriptors for good)."""
    base = _uvicorn_protocol()

    class AbortingProtocol(base):  # type: ignore[misc,valid-type]
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            app: Any = cast(Any, self).app
            closing = asyncio.Event()

            async def app_that_can_abort(scope: Any, receive: Any, send: Any) -> None:
                self.stop_waiting()
                scope[ABORT] = self.abort
                scope[CLOSING] = closing
                await app(scope, receive, send)

            self.app = app_that_can_abort
            self.closing = closing
            self.first_request: asyncio.TimerHandle | None = None

        def connection_made(self, transport: Any) -> None:
            super().connection_made(transport)
            self.first_request = asyncio.get_running_loop().call_later(
                request_timeout, self.abort)

        def connection_lost(self, exc: Exception | None) -> None:
            self.stop_waiting()
            super().connection_lost(exc)

        def stop_waiting(self) -> None:
            """No more waiting for the first request: it began, or the connection
            ended."""
            waiting, self.first_request = self.first_request, None
            if waiting is not None:
                waiting.cancel()

        def shutdown(self) -> None:
            self.closing.set()
            super().shutdown()

        def abort(self) -> None:
            if self.transport is not None and not self.transport.is_closing():
                self.transport.abort()

    return AbortingProtocol


def _uvicorn_protocol() -> type[Any]:
    """The protocol uvicorn would pick: httptools where it is installed, else h11."""
    try:
        from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol  # noqa: PLC0415
    except ImportError:
        from uvicorn.protocols.http.h11_impl import H11Protocol  # noqa: PLC0415
        return H11Protocol
    return HttpToolsProtocol
