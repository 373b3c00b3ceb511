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
from taskq.feed.stream import feed_frames
from taskq.settings import Settings
from taskq.web import api
from taskq.web.auth import AccessControl
from taskq.web.metrics import metrics
from taskq.web.sse import EventStreamResponse
from taskq.web.state import WebState

STATIC = resources.files("taskq").joinpath("web").joinpath("static")


class EventsEndpoint:
    """`GET /events`: the queue's events as SSE, resumed from `Last-Event-ID` (or
    `?last_event_id=`). A bad, stale or foreign id gets a `gap` event, never an error
    status, because a browser's EventSource stops reconnecting after one."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        request = Request(scope, receive)
        state = api.state_of(request)
        raw = request.headers.get("last-event-id") or request.query_params.get("last_event_id")
        hub = await state.hub(api.queue_of(request))
        hub.clients += 1

        def closed(reason: str) -> None:
            hub.clients -= 1

        frames = feed_frames(hub, parse_cursor(raw), state.stream)
        response = EventStreamResponse(frames, state.settings.feed_send_timeout_seconds, closed)
        await response(scope, receive, send)


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
