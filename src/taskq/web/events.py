"""`GET /events`: one client's SSE stream, or the one event that says why there is none."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.types import Receive, Scope, Send

from taskq.feed.cursor import parse_cursor
from taskq.feed.frames import notice_frame
from taskq.feed.readers import Refused
from taskq.feed.stream import REDIS_ERRORS, feed_frames
from taskq.web import api
from taskq.web.params import BadParameter
from taskq.web.sse import EventStreamResponse, aclose

log = logging.getLogger("taskq.feed")

# Long enough that a page left open on a queue nobody has used yet costs one request
# per MISSING_RETRY_MS, short enough that it goes live soon after the first enqueue.
MISSING_RETRY_MS = 10_000
UNAVAILABLE_RETRY_MS = 5_000
# A name no queue can have stays wrong: a client that is no page (which stops there)
# comes back seldom.
INVALID_RETRY_MS = 60_000


class EventsEndpoint:
    """`GET /events`: the queue's events as SSE, resumed from `Last-Event-ID` (or
    `?last_event_id=`). A bad, stale or foreign id gets a `gap` event, never an error
    status, because a browser's EventSource stops reconnecting after one. For the same
    reason a queue that does not exist (yet), and Redis being unavailable, get one
    event (`missing`, `unavailable`) whose `retry:` says when to come back, and the
    stream ends; the client keeps its last id and resumes from it. A name no queue can
    have gets an `invalid` event, which the page takes as final."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        request = Request(scope, receive)
        if request.method != "GET":
            response = JSONResponse({"error": f"{request.method} /events: the feed is GET only"},
                                    status_code=405, headers={"allow": "GET"})
            await response(scope, receive, send)
            return
        state = api.state_of(request)
        try:
            queue = api.queue_of(request)
        except BadParameter as e:
            await notice(notice_frame("invalid", {"queue": e.value, "error": str(e)},
                                      INVALID_RETRY_MS))(scope, receive, send)
            return
        raw = request.headers.get("last-event-id") or request.query_params.get("last_event_id")
        try:
            hub = await state.readers.acquire(queue)
        except REDIS_ERRORS as e:
            await notice(unavailable_frame(queue, e))(scope, receive, send)
            return
        if isinstance(hub, Refused):
            await notice(refusal_frame(hub, state.readers.limit))(scope, receive, send)
            return
        try:
            frames = until_redis_fails(queue, feed_frames(hub, parse_cursor(raw), state.stream))
            await EventStreamResponse(frames, state.settings.feed_send_timeout_seconds)(
                scope, receive, send)
        finally:
            await state.readers.release(queue, hub)


async def until_redis_fails(queue: str, frames: AsyncIterator[str]) -> AsyncIterator[str]:
    """`frames`, ended by an `unavailable` event if Redis fails under them."""
    try:
        async for frame in frames:
            yield frame
    except REDIS_ERRORS as e:
        yield unavailable_frame(queue, e)
    finally:
        await aclose(frames)


def unavailable_frame(queue: str, error: BaseException) -> str:
    # Debug only: every client says this during an outage; the hub logs it once.
    log.debug("feed of %r: Redis unavailable (the client comes back in %d ms): %s",
              queue, UNAVAILABLE_RETRY_MS, error)
    return notice_frame("unavailable", {
        "queue": queue, "error": f"Redis is unavailable: {error}",
    }, UNAVAILABLE_RETRY_MS)


def refusal_frame(refused: Refused, limit: int) -> str:
    if refused.reason == "missing":
        return notice_frame("missing", {
            "queue": refused.queue,
            "error": f"no queue named {refused.queue!r}: it exists from its first enqueue",
        }, MISSING_RETRY_MS)
    return notice_frame("unavailable", {
        "queue": refused.queue,
        "error": f"this server already follows {limit} queues (TASKQ_FEED_MAX_QUEUES); "
                 "try again later",
    }, UNAVAILABLE_RETRY_MS)


def notice(frame: str) -> Response:
    """A whole event stream of one frame: the client reads it, then reconnects."""
    return Response(frame, media_type="text/event-stream", headers={"cache-control": "no-store"})
