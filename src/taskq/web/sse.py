"""An ASGI response that streams server-sent events and cuts a client that stops reading."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator

from starlette.types import Receive, Scope, Send

from taskq.feed.cancel import cancel_and_wait
from taskq.web.protocol import ABORT, CLOSING

log = logging.getLogger("taskq.feed")

INCOMPLETE = "ASGI callable returned without completing response"


class CutClientsAreExpected(logging.Filter):
    """Uvicorn reports a response ended without its last chunk as an error; for a feed
    client we cut on purpose that is the intended outcome, already logged by us."""

    def filter(self, record: logging.LogRecord) -> bool:
        return INCOMPLETE not in record.getMessage()


logging.getLogger("uvicorn.error").addFilter(CutClientsAreExpected())

HEADERS = [
    (b"content-type", b"text/event-stream; charset=utf-8"),
    (b"cache-control", b"no-store"),
    # Tells nginx-style proxies not to buffer the stream.
    (b"x-accel-buffering", b"no"),
]


class EventStreamResponse:
    """Sends each frame as it comes. A send that cannot complete within `send_timeout`
    means the client's buffers are full: it is disconnected (the connection aborted,
    where the server's protocol offers it: `taskq.web.protocol`) and will resume by id,
    so a slow client costs the server one pending frame, never a growing queue."""

    def __init__(
        self,
        frames: AsyncIterator[str],
        send_timeout: float,
    ) -> None:
        self.frames = frames
        self.send_timeout = send_timeout

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": HEADERS})
        pump = asyncio.create_task(self._pump(send))
        listen = asyncio.create_task(self._until_disconnect(receive))
        tasks = {pump, listen}
        closing = scope.get(CLOSING)
        if closing is not None:  # the server shuts down: end the stream; it resumes by id
            tasks.add(asyncio.create_task(closing.wait()))
        done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        for task in tasks:
            await cancel_and_wait(task)
        reason = "disconnected"
        if pump in done and not pump.cancelled() and pump.exception() is None:
            reason = pump.result()
        elif pump in done and not pump.cancelled():
            log.warning("feed stream ended by an error (the client will resume): %s",
                        pump.exception())
        if reason == "cut":
            # Closing would wait for the client to take what is queued, which it never
            # does: the connection goes at once, its buffers with it.
            abort = scope.get(ABORT)
            if abort is not None:
                abort()
        else:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(
                    send({"type": "http.response.body", "body": b"", "more_body": False}), 1.0
                )

    async def _pump(self, send: Send) -> str:
        try:
            async for frame in self.frames:
                message = {"type": "http.response.body", "body": frame.encode(), "more_body": True}
                try:
                    # asyncio.timeout, not wait_for: no task per frame on the hot path.
                    async with asyncio.timeout(self.send_timeout):
                        await send(message)
                except TimeoutError:
                    log.info("cut a feed client that read nothing for %.0fs", self.send_timeout)
                    return "cut"
        finally:
            await aclose(self.frames)
        return "ended"

    @staticmethod
    async def _until_disconnect(receive: Receive) -> None:
        while (await receive())["type"] != "http.disconnect":
            pass


async def aclose(frames: AsyncIterator[str]) -> None:
    close = getattr(frames, "aclose", None)
    if close is not None:
        with contextlib.suppress(Exception):
            await close()
