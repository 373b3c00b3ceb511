"""taskq's half of the chord comparison: the member and callback tasks, and a sender.

`taskq worker --app bench.chord_tasks:app` loads `app`, on the queue and server its
environment names (TASKQ_QUEUE, REDIS_URL); a member sleeps $BENCH_MEMBER_SECONDS. The
bench builds its own producer with `make_app`. The tasks keep taskq's defaults
(three retries; a lease that expires counts as one).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable

from bench import chord_log
from taskq import App, Settings, group

MEMBER = "chords.member"
CALLBACK = "chords.callback"


def make_app(settings: Settings | None = None) -> tuple[App, Callable[[str, int], None]]:
    """An App with the chord's two tasks, and a sender of one chord (key, members)."""
    app = App(settings=settings)
    member_seconds = float(os.environ.get("BENCH_MEMBER_SECONDS", "0.2"))

    @app.task(MEMBER)
    def member(key: str, index: int) -> int:
        time.sleep(member_seconds)
        chord_log.member_ran(key, index)
        return index

    @app.task(CALLBACK)
    def callback(results: list[object], key: str, members: int) -> None:
        chord_log.callback_ran(key, results, members)

    def send(key: str, members: int) -> None:
        group(*(member.s(key, i) for i in range(members))).then(
            callback.s(key, members)).enqueue()

    return app, send


app, _ = make_app()
