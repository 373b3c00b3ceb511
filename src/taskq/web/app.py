"""The web app: a route table, its state built by the lifespan, and access control."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from importlib import resources

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import FileResponse, JSONResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import Receive, Scope, Send

from taskq.errors import InvalidTaskError
from taskq.feed.cursor import parse_cursor
from taskq.feed.frames import notice_frame
from taskq.feed.readers import MAX_READERS, Refused
from taskq.feed.stream import feed_frames
from taskq.settings import Settings
from taskq.web import api
from taskq.web.auth import AccessControl
from taskq.web.metrics import metrics
from taskq.web.sse import EventStreamResponse
from taskq.web.state import WebState

STATIC = resources.files("taskq").joinpath("web").joinpath("static")
# Long enough that a page left open on a queue nobody has used yet costs one request
# per MISSING_RETRY_MS, short enough that it goes live soon after the first enqueue.
MISSING_RETRY_MS = 10_000
UNAVAILABLE_RETRY_MS = 5_000


class EventsEndpoint:
    """`GET /events`: the queue's events as SSE, resumed from `Last-Event-ID` (or
    `?last_event_id=`). A bad, stale or foreign id gets a `gap` event, never an error
    status, because a browser's EventSource stops reconnecting after one. A queue that
    does not exist (yet) gets a `missing` event and the stream ends, with a `retry:`
    that brings the client back in MISSING_RETRY_MS."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        request = Request(scope, receive)
        state = api.state_of(request)
        queue = api.queue_of(request)
        raw = request.headers.get("last-event-id") or request.query_params.get("last_event_id")
        hub = await state.readers.acquire(queue)
        if isinstance(hub, Refused):
            await notice(refusal_frame(hub))(scope, receive, send)
            return
        try:
            frames = feed_frames(hub, parse_cursor(raw), state.stream)
            await EventStreamResponse(frames, state.settings.feed_send_timeout_seconds)(
                scope, receive, send)
        finally:
            await state.readers.release(queue, hub)


def refusal_frame(refused: Refused) -> str:
    if refused.reason == "missing":
        return notice_frame("missing", {
            "queue": refused.queue,
            "error": f"no queue named {refused.queue!r}: it exists from its first enqueue",
        }, MISSING_RETRY_MS)
    return notice_frame("unavailable", {
        "queue": refused.queue,
        "error": f"this server already follows {MAX_READERS} queues; try again later",
    }, UNAVAILABLE_RETRY_MS)


def notice(frame: str) -> Response:
    """A whole event stream of one frame: the client reads it, then reconnects."""
    return Response(frame, media_type="text/event-stream", headers={"cache-control": "no-store"})


async def index(request: Request) -> Response:
    return FileResponse(str(STATIC.joinpath("index.html")),
                        headers={"cache-control": "no-store"})


async def invalid_task(request: Request, exc: Exception) -> Response:
    return JSONResponse({"error": str(exc)}, status_code=400)


def create_app(settings: Settings) -> Starlette:
    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        app.state.web = WebState.create(settings)
        try:
            yield
        finally:
            await app.state.web.close()

    routes = [
        Route("/", index),
        Route("/events", EventsEndpoint()),
        Route("/api/queues", api.queues),
        Route("/api/snapshot", api.snapshot),
        Route("/api/tasks/{task_id}", api.task),
        Route("/api/dlq", api.dlq),
        Route("/api/dlq/{task_id}/retry", api.retry, methods=["POST"]),
        Route("/metrics", metrics),
        Route("/healthz", api.healthz),
        Mount("/static", StaticFiles(directory=str(STATIC)), name="static"),
    ]
    app = Starlette(routes=routes, lifespan=lifespan,
                    exception_handlers={InvalidTaskError: invalid_task})
    app.add_middleware(AccessControl, token=settings.api_token)
    return app
