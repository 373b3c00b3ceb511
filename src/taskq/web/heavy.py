"""The JSON API's reads whose cost grows with the data they read (a workflow's every
step, a history search through the log, a task's events, a snapshot of a thousand
tasks, the counts of every queue for /api/queues and /metrics, the throughput counted
from thousands of log entries), run on threads a few at
a time (`WebState.heavy`), so that a crowd of them queues rather than starving the event
loop, and with it every live feed, of the GIL, or taking every thread of the pool the
other routes (`/healthz` among them) run on. The line is bounded (HEAVY_WAITING), and a
read whose client has left while it waited is not run: a crowd of clients that gave up
would otherwise hold everyone after them back for as long as their reads take."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from taskq.web.answering import on_thread, unanswered
from taskq.web.state import HEAVY_WAITING, WebState

# What a read whose client left is answered: nobody reads it (nginx's "client closed").
CLIENT_GONE = 499


def heavy(endpoint: Callable[[Request], Response]) -> Callable[[Request], Awaitable[Response]]:
    """`endpoint` (a blocking handler) run on a thread under the server's limit, once a
    thread is free and if its client is still there; 503 when too many wait already."""

    async def bounded(request: Request) -> Response:
        state: WebState = request.app.state.web
        # Asked before the line: a PING in a silent Redis holds no thread of it.
        if refused := await unanswered(request):
            return refused
        if state.heavy.statistics().tasks_waiting >= HEAVY_WAITING:
            return JSONResponse(
                {"error": f"the server is busy: {HEAVY_WAITING} slow reads are waiting "
                          "already; try again in a second"},
                status_code=503, headers={"Retry-After": "1"})
        async with state.heavy:
            # Endpoints run here read no body, so this takes no message they need.
            if await request.is_disconnected():
                return Response(status_code=CLIENT_GONE)
            return await on_thread(endpoint, request)

    bounded.__name__ = bounded.__qualname__ = endpoint.__name__
    bounded.__doc__ = endpoint.__doc__
    return bounded
