"""The JSON API: queue counts, a snapshot with its feed position, tasks, the DLQ and
periodic schedules."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse

from taskq.feed.cursor import Cursor
from taskq.history import read_task
from taskq.limits import HISTORY_SCAN
from taskq.schedule_view import read_schedules
from taskq.snapshot import queue_names, take_snapshot
from taskq.web.params import (
    SNAPSHOT_LIMIT,
    TASK_SCAN,
    int_param,
    queue_param,
    task_id_param,
)
from taskq.web.state import WebState


def state_of(request: Request) -> WebState:
    state: WebState = request.app.state.web
    return state


def queue_of(request: Request) -> str:
    return queue_param(request, state_of(request).settings.queue)


def not_found(message: str) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=404)


def queues(request: Request) -> JSONResponse:
    state = state_of(request)
    names = queue_names(state.broker(state.settings.queue)) or [state.settings.queue]
    listed = [{"name": name, **asdict(state.broker(name).counts())} for name in names]
    return JSONResponse({"queues": listed})


def snapshot(request: Request) -> JSONResponse:
    """The queue now, and `position`: the feed id of the last event this view reflects,
    so a page can follow `/events?last_event_id=<position>` with no gap or repeat."""
    broker = state_of(request).broker(queue_of(request))
    snap = take_snapshot(broker, limit=int_param(request, "limit", 50, SNAPSHOT_LIMIT))
    position = Cursor(snap.epoch, snap.seq, str(snap.last_ts)).wire_id if snap.seq else ""
    body: dict[str, Any] = asdict(snap)
    body["position"] = position
    return JSONResponse(body)


def task(request: Request) -> JSONResponse:
    """The task's record, its result decoded, its last failure and its events (see
    `TaskView.to_json`), found in at most `scan` log entries (0: the record alone)."""
    task_id = task_id_param(request)
    scan = int_param(request, "scan", HISTORY_SCAN.default, TASK_SCAN)
    view = read_task(state_of(request).broker(queue_of(request)), task_id, scan)
    if view is None:
        return not_found(f"no task {task_id!r} on this queue")
    return JSONResponse(view.to_json())


def dlq(request: Request) -> JSONResponse:
    snap = take_snapshot(state_of(request).broker(queue_of(request)), limit=1000)
    return JSONResponse({"queue": snap.queue, "dead": [asdict(d) for d in snap.dead]})


def schedules(request: Request) -> JSONResponse:
    """The queue's periodic schedules as Redis holds them (see `ScheduleView`), with the
    server's `now_ms` they were read at."""
    return JSONResponse(asdict(read_schedules(state_of(request).broker(queue_of(request)))))


def retry(request: Request) -> JSONResponse:
    task_id = request.path_params["task_id"]
    if not state_of(request).broker(queue_of(request)).retry_dead(task_id):
        return not_found(f"task {task_id!r} is not in the DLQ")
    return JSONResponse({"retried": task_id})


def healthz(request: Request) -> JSONResponse:
    try:
        state_of(request).client.ping()
    except Exception as e:
        return JSONResponse({"ok": False, "redis": str(e)}, status_code=503)
    return JSONResponse({"ok": True, "redis": "up"})
