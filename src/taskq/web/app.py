"""The web app: a route table, its state built by the lifespan, and access control."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator
from importlib import resources

import redis
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import FileResponse, JSONResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from taskq.boundary import unusable_as_stored
from taskq.errors import BrokerError, ConfigError, InvalidTaskError
from taskq.settings import Settings
from taskq.web import api
from taskq.web.answering import answered
from taskq.web.auth import AccessControl
from taskq.web.events import EventsEndpoint
from taskq.web.headers import SecurityHeaders
from taskq.web.heavy import heavy
from taskq.web.hosts import AllowedHosts, allowed_names
from taskq.web.metrics import metrics
from taskq.web.params import BadParameter
from taskq.web.state import WebState

log = logging.getLogger("taskq.web")

STATIC = resources.files("taskq").joinpath("web").joinpath("static")


async def index(request: Request) -> Response:
    return FileResponse(str(STATIC.joinpath("index.html")),
                        headers={"cache-control": "no-store"})


async def invalid_task(request: Request, exc: Exception) -> Response:
    return JSONResponse({"error": str(exc)}, status_code=400)


async def bad_parameter(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, BadParameter)
    return JSONResponse(exc.body, status_code=400)


async def unusable_state(request: Request, exc: Exception) -> Response:
    """What Redis holds cannot be used as it is (a sharded queue's layout written by
    hand): a 409 that says what to mend, not a 500."""
    return JSONResponse({"error": str(exc)}, status_code=409)


async def redis_unavailable(request: Request, exc: Exception) -> Response:
    """Redis down or refusing is the server's state, not a bug: a 503 that says so,
    one log line instead of a traceback. A key of another type where taskq reads, or a
    record a script found damaged, is no outage, and no retry mends it: a 409 naming
    it."""
    if isinstance(exc, BrokerError) and unusable_as_stored(exc):
        return await unusable_state(request, exc)
    log.warning("%s %s: Redis unavailable: %s", request.method, request.url.path, exc)
    return JSONResponse({"error": f"Redis is unavailable: {exc}"}, status_code=503,
                        headers={"retry-after": "5"})


def create_app(settings: Settings, host: str = "127.0.0.1") -> Starlette:
    """The app for `taskq serve` bound to `host`, which its Host check accepts."""
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
        Route("/api/queues", heavy(api.queues)),
        Route("/api/snapshot", heavy(api.snapshot)),
        Route("/api/schedules", answered(api.schedules)),
        Route("/api/schedules/{name}/forget", answered(api.forget), methods=["POST"]),
        Route("/api/limits", heavy(api.limits)),
        Route("/api/workers", answered(api.workers)),
        Route("/api/history", heavy(api.history)),
        Route("/api/shards", answered(api.shards)),
        Route("/api/tasks/{task_id}", heavy(api.task)),
        Route("/api/tasks/{task_id}/cancel", answered(api.cancel), methods=["POST"]),
        Route("/api/flows/{flow_id}", heavy(api.flow)),
        Route("/api/totals", answered(api.totals)),
        Route("/api/throughput", heavy(api.throughput)),
        Route("/api/dlq", heavy(api.dlq)),
        Route("/api/dlq/retry-all", answered(api.retry_all), methods=["POST"]),
        Route("/api/dlq/cancel-all", answered(api.cancel_all), methods=["POST"]),
        Route("/api/dlq/{task_id}/retry", answered(api.retry), methods=["POST"]),
        Route("/api/dlq/{task_id}/cancel", answered(api.cancel_dead), methods=["POST"]),
        Route("/metrics", heavy(metrics)),
        Route("/healthz", api.healthz),
        Mount("/static", StaticFiles(directory=str(STATIC)), name="static"),
    ]
    app = Starlette(routes=routes, lifespan=lifespan,
                    exception_handlers={InvalidTaskError: invalid_task,
                                        BadParameter: bad_parameter,
                                        ConfigError: unusable_state,
                                        BrokerError: redis_unavailable,
                                        redis.RedisError: redis_unavailable})
    app.add_middleware(AccessControl, token=settings.api_token)
    app.add_middleware(AllowedHosts,
                       names=allowed_names(host, settings.allowed_hosts.split(",")))
    app.add_middleware(SecurityHeaders)
    return app
