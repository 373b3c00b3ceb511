"""taskq as the peers' client runs it: `Task.enqueue` of the `async def` no-op, one call
per task (bench/enqueue.py's row of that name), so that taskq's single calls can be
timed in a process of their own, started and importing as each peer's does."""

from __future__ import annotations

from typing import Any

from bench.enqueue import NOOP
from bench.peers.counter import QUEUE, URL
from bench.tasks import make_app
from taskq import Settings


def enqueue(n: int) -> dict[str, Any]:
    from bench.peers.client import stamps  # noqa: PLC0415

    # Only the URL comes from outside, as bench/enqueue.py's App: the defaults otherwise.
    app = make_app(QUEUE, Settings.from_env({}, redis_url=URL))
    return stamps(n, app.tasks[NOOP].enqueue)
