"""The JSON API's reads whose cost grows with the data they read (a workflow's every
step, a history search through the log, a task's events, a snapshot of a thousand
tasks, the counts of every queue for /api/queues and /metrics, the throughput counted
from thousands of log entries), run on threads a few at
a time (`WebState.heavy`), so that a crowd of them queues rather than starving the event
loop, and with it every live feed, of the GIL, or taking every thread of the pool the
other routes (`/healthz` among them) run on."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import anyio.to_thread
from starlette.requests import Request
from starlette.responses import Response

from taskq.web.state import WebState


def heavy(endpoint: Callable[[Request], Response]) -> Callable[[Request], Awaitable[Response]]:
    """`endpoint` (a blocking handler) run on a thread under the server's limit."""

    async def bounded(request: Request) -> Response:
        state: WebState = request.app.state.web
        return await anyio.to_thread.run_sync(endpoint, request, limiter=state.heavy)

    bounded.__name__ = bounded.__qualname__ = endpoint.__name__
    bounded.__doc__ = endpoint.__doc__
    return bounded
