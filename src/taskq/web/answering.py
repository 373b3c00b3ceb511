"""Whether Redis answers, as `taskq serve` learns it. A Redis that stopped answering
without refusing (paused, cut off by the network) holds each call for the client's
timeouts and retries, 20 s: each JSON API request would hold a thread that long, and a
crowd of them every thread the API runs on, for as long. So a request still running
ANSWER_SECONDS after it came in asks Redis for a PING; if none comes back within
ANSWER_SECONDS, Redis is doubted, and each API request after (or waiting for a thread
then) is answered 503 unless a PING, or another request's calls, come back first.
Whoever asks while a PING is out shares it; /healthz asks the same. Only the requests
already calling Redis when it went silent wait out the client's timeouts."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Literal

import anyio.to_thread
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

log = logging.getLogger("taskq.web")

# How long a PING may take: a load balancer's probe of /healthz must get its 503 before
# its own timeout, and a crowd of API requests theirs before their threads run out.
ANSWER_SECONDS = 2.0
# A PING answered this recently speaks for Redis: slow requests (a heavy read waiting
# its turn) ask for no other meanwhile.
TRUSTED_SECONDS = 1.0

Health = Literal["up", "down", "not answering"]
Endpoint = Callable[[Request], Response]


class Answering:
    """The last word on Redis: `doubted` after a PING that did not come back, until one
    does, or a request's calls come back. Built and used on the server's event loop.
    With `judges` False (a Redis Cluster, whose client sends PING to one node: its
    silence says nothing of the others, and doubt would refuse the queues on every
    node) it never doubts, and each request waits its own calls out."""

    def __init__(self, ping: Callable[[], Awaitable[object]], judges: bool = True) -> None:
        self._ping = ping
        self.judges = judges
        self.doubted = False
        self._asking: asyncio.Task[Health] | None = None
        self._answered_at = -TRUSTED_SECONDS

    async def health(self) -> Health:
        """A PING's outcome: the one out already, or a new one."""
        return await asyncio.shield(self._ask())

    def calls_came_back(self) -> None:
        """A request's calls to Redis came back: it answers."""
        self.doubted = False
        self._answered_at = time.monotonic()

    def check(self) -> None:
        """Asks for a PING unless one is out or came back a moment ago."""
        if self.judges and time.monotonic() - self._answered_at >= TRUSTED_SECONDS:
            self._ask()

    def _ask(self) -> asyncio.Task[Health]:
        if self._asking is None:
            self._asking = asyncio.get_running_loop().create_task(self._ping_once())
        return self._asking

    async def _ping_once(self) -> Health:
        health: Health = "up"
        try:
            await asyncio.wait_for(self._ping(), ANSWER_SECONDS)
        except TimeoutError:
            log.warning("Redis did not answer a PING within %.0f s", ANSWER_SECONDS)
            health = "not answering"
        except Exception as e:
            log.warning("Redis is down: %s", e)
            health = "down"
        finally:
            self._asking = None
        # A refusing Redis fails each call at once by itself; only silence is doubted.
        self.doubted = self.judges and health == "not answering"
        if health == "up":
            self._answered_at = time.monotonic()
        return health

    async def close(self) -> None:
        if self._asking is not None:
            self._asking.cancel()


def answered(endpoint: Endpoint) -> Callable[[Request], Awaitable[Response]]:
    """`endpoint` (a blocking handler of the JSON API) run by `on_thread`, unless
    `unanswered` refuses it."""

    async def run(request: Request) -> Response:
        return await unanswered(request) or await on_thread(endpoint, request)

    run.__name__ = run.__qualname__ = endpoint.__name__
    run.__doc__ = endpoint.__doc__
    return run


async def unanswered(request: Request) -> Response | None:
    """A 503 while Redis is doubted and a PING does not come back; else None."""
    answering: Answering = request.app.state.web.answering
    if answering.doubted and await answering.health() == "not answering":
        return not_answering()
    return None


async def on_thread(endpoint: Endpoint, request: Request) -> Response:
    """`endpoint` run on a thread (a 503 if Redis was doubted meanwhile); a PING is asked
    for if it runs past ANSWER_SECONDS."""
    answering: Answering = request.app.state.web.answering
    watch = asyncio.get_running_loop().call_later(ANSWER_SECONDS, answering.check)
    try:
        response = await anyio.to_thread.run_sync(_unless_doubted, endpoint, request,
                                                  answering)
    finally:
        watch.cancel()
    if response.status_code < 500:
        # Requests waiting for a thread behind it are not refused for a doubt it ends.
        answering.calls_came_back()
    return response


def _unless_doubted(endpoint: Endpoint, request: Request, answering: Answering) -> Response:
    # A request that waited for a thread while Redis went silent is not sent into it.
    return not_answering() if answering.doubted else endpoint(request)


def not_answering() -> Response:
    return JSONResponse({"error": f"Redis is not answering: no PING came back within "
                                  f"{ANSWER_SECONDS:.0f} s; try again later"},
                        status_code=503, headers={"retry-after": "5"})
