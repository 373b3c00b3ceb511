"""Celery's chord on Redis, set up as its docs advise for surviving a lost worker.

The broker and the result backend are the same redis-server (databases 0 and 1). Tasks
are acknowledged after they run (`task_acks_late`, and `task_reject_on_worker_lost`
so a pool child's death requeues rather than fails), a worker reserves one message per
pool process (`worker_prefetch_multiplier=1`), and an unacknowledged message is
redelivered once `visibility_timeout` passes, swept for every second, so a killed or
paused worker's members run again within seconds rather than the default hour.

`celery worker` loads `app`, built from $BENCH_REDIS_URL, $BENCH_QUEUE and
$BENCH_VISIBILITY_SECONDS; the bench builds its own producer with `make_app`.
"""

from __future__ import annotations

import os
import time
from typing import Any

from celery import Celery, chord, group  # type: ignore[import-untyped]

from bench import chord_log

MEMBER = "chords.member"
CALLBACK = "chords.callback"


def make_app(url: str, queue: str, visibility_seconds: float, member_seconds: float) -> Any:
    """A Celery app on `url` (broker db 0, results db 1) with the chord's two tasks."""
    base = url.rsplit("/", 1)[0]
    app = Celery("bench_chords", broker=f"{base}/0", backend=f"{base}/1")
    app.conf.update(
        task_default_queue=queue,
        task_acks_late=True,
        task_reject_on_worker_lost=True,
        worker_prefetch_multiplier=1,
        broker_transport_options={
            "visibility_timeout": visibility_seconds,
            "unacked_restore_interval": 1,
            "unacked_restore_throttle": 1,
        },
        broker_connection_retry_on_startup=True,
        worker_hijack_root_logger=False,
    )

    @app.task(name=MEMBER)  # type: ignore[untyped-decorator]
    def member(key: str, index: int) -> int:
        time.sleep(member_seconds)
        chord_log.member_ran(key, index)
        return index

    @app.task(name=CALLBACK)  # type: ignore[untyped-decorator]
    def callback(results: list[object], key: str, members: int) -> None:
        chord_log.callback_ran(key, results, members)

    return app


def send(app: Any, key: str, members: int) -> None:
    """Enqueue one chord: `members` members, then the callback with their results."""
    header = group(app.signature(MEMBER, args=(key, i)) for i in range(members))
    chord(header, app.signature(CALLBACK, args=(key, members))).apply_async()


if "BENCH_VISIBILITY_SECONDS" in os.environ:
    app = make_app(os.environ["BENCH_REDIS_URL"], os.environ["BENCH_QUEUE"],
                   float(os.environ["BENCH_VISIBILITY_SECONDS"]),
                   float(os.environ["BENCH_MEMBER_SECONDS"]))
