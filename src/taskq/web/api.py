"""The JSON API: queue counts, a snapshot with its feed position, tasks, workflows, the
DLQ, periodic schedules, concurrency limits, live workers, lifetime totals, recent
throughput and a sharded queue's shards; and the writes: DLQ retries and cancels, a
task's cancel, and forgetting a schedule."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse

from taskq import bulk
from taskq.boundary import redis_errors, stored_int
from taskq.broker import Broker
from taskq.errors import BrokerError
from taskq.feed.frames import row_data
from taskq.feed.recent import MAX_RECENT, recent_rows
from taskq.flows import Flows
from taskq.history import read_task
from taskq.limits import HISTORY_SCAN
from taskq.recent import ENDS, MAX_SEARCH_CHARS, RECENT_LIMIT, recent
from taskq.registry import live_count, read_workers
from taskq.schedule_view import forget_schedule, read_schedules, schedules_queue
from taskq.shard_view import read_shards
from taskq.snapshot import READ_AT_ONCE, LeaseView, queue_names, read_counts, take_snapshot
from taskq.throughput import WINDOW_MS, read_throughput
from taskq.web.params import (
    SNAPSHOT_LIMIT,
    TASK_SCAN,
    THROUGHPUT_WINDOW,
    choice_param,
    flag_param,
    flow_id_param,
    int_param,
    queue_param,
    schedule_name_param,
    task_id_param,
    text_param,
)
from taskq.web.state import WebState
from taskq.web.totals import read_totals


def state_of(request: Request) -> WebState:
    state: WebState = request.app.state.web
    return state


def queue_of(request: Request) -> str:
    return queue_param(request, state_of(request).settings.queue)


def not_found(message: str) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=404)


def queues(request: Request) -> JSONResponse:
    """Every queue with its counts, or with `names=1` its name alone: the counts take a
    script a queue, READ_AT_ONCE to a round trip, which the page's picker, asking every
    30 s, does without."""
    state = state_of(request)
    first = state.broker(state.settings.queue)
    names = queue_names(first) or [state.settings.queue]
    if flag_param(request, "names"):
        listed: list[dict[str, Any]] = [{"name": name} for name in names]
    else:
        listed = []
        for start in range(0, len(names), READ_AT_ONCE):
            chunk = names[start:start + READ_AT_ONCE]
            # A queue that cannot be counted (its keys hold another type) says why,
            # and hides no other queue.
            listed += [{"name": name, "error": str(counts)} if isinstance(counts, BrokerError)
                       else {"name": name, **asdict(counts)}
                       for name, counts in zip(chunk, read_counts(first, chunk), strict=True)]
    # `default`: the queue the server was started on (`taskq serve --queue`), which the
    # page shows when its URL names none.
    return JSONResponse({"queues": listed, "default": state.settings.queue})


def snapshot(request: Request) -> JSONResponse:
    """The queue now, and `position`: the feed id of the last event this view reflects,
    so a page can follow `/events?last_event_id=<position>` with no gap or repeat; and
    `recent`: the last `events` events it reflects, oldest first, as the feed sends them,
    to list and never to apply again."""
    broker = state_of(request).broker_holding(queue_of(request))
    snap = take_snapshot(broker, limit=int_param(request, "limit", 50, SNAPSHOT_LIMIT))
    wanted = int_param(request, "events", 0, (0, MAX_RECENT))
    body: dict[str, Any] = asdict(snap)
    body["position"] = snap.position
    body["recent"] = [row_data(row) for row in recent_rows(broker, snap.epoch, snap.seq, wanted)]
    for row, requested in zip(body["leased"], cancel_requests(broker, snap.leased), strict=True):
        row["cancel_requested_at"] = requested
    return JSONResponse(body)


def cancel_requests(broker: Broker, leased: list[LeaseView]) -> list[int]:
    """When each leased task's cancel was requested (ms; 0: it was not). Read after the
    snapshot, yet as good as part of it: the flag is only ever set while the lease
    lasts, by the `cancel_requested` event, which the page applies anyway if it came
    after the snapshot; a lease that ended meanwhile leaves by its own event."""
    if not leased:
        return []
    with redis_errors("read the leased tasks' cancel requests"):
        pipe = broker.client.pipeline(transaction=False)
        for lease in leased:
            pipe.hget(broker.keys.task(lease.task_id), "cancel_requested")
        found = pipe.execute()
    return [stored_int(value) for value in found]


def task(request: Request) -> JSONResponse:
    """The task's record, its result decoded, its last failure and its events (see
    `TaskView.to_json`), found in at most `scan` log entries (0: the record alone)."""
    task_id = task_id_param(request)
    scan = int_param(request, "scan", HISTORY_SCAN.default, TASK_SCAN)
    view = read_task(state_of(request).broker_holding(queue_of(request), task_id), task_id,
                     scan)
    if view is None:
        return not_found(f"no task {task_id!r} on this queue")
    return JSONResponse(view.to_json())


def flow(request: Request) -> JSONResponse:
    """The workflow as it stands (see `taskq.flows.FlowStatus`): its state, the stage it
    is on, each stage's kind and policy, why it failed, and every step's state (see
    `taskq.flows.Flows.status`)."""
    flow_id = flow_id_param(request)
    status = Flows(state_of(request).broker_holding(queue_of(request))).status(flow_id)
    if status is None:
        return not_found(f"no workflow {flow_id!r} on this queue: it never started here, "
                         "or it ended and its record expired")
    return JSONResponse(asdict(status))


def dlq(request: Request) -> JSONResponse:
    snap = take_snapshot(state_of(request).broker_holding(queue_of(request)), limit=1000)
    return JSONResponse({"queue": snap.queue, "dead": [asdict(d) for d in snap.dead]})


def limits(request: Request) -> JSONResponse:
    """The queue's concurrency limits (see `LimitView`): each limited name's limit, runs
    holding a slot and tasks parked for one, read in one atomic step."""
    snap = take_snapshot(state_of(request).broker_holding(queue_of(request)), limit=0,
                         groups=int_param(request, "limit", 1000, SNAPSHOT_LIMIT))
    return JSONResponse({"queue": snap.queue, "limits": [asdict(v) for v in snap.limits]})


def shards(request: Request) -> JSONResponse:
    """The shards of the sharded queue `queue` is, or is a shard of (see `ShardView`):
    each one's slot, counts and feed position, one read per shard; none for a plain
    queue."""
    state = state_of(request)
    return JSONResponse(asdict(read_shards(state.client, queue_of(request), state.broker)))


def history(request: Request) -> JSONResponse:
    """The queue's recently ended tasks, newest first (see `taskq.recent`): `state`
    (some of completed, dead, cancelled; default all), `prefix` of the id, text in the
    `name`, `limit` (1-1000, default 50); with how many log entries were read and
    whether that reached the log's start."""
    queue = queue_of(request)
    found = recent(state_of(request).broker_holding(queue),
                   states=choice_param(request, "state", ENDS),
                   id_prefix=text_param(request, "prefix", MAX_SEARCH_CHARS),
                   name=text_param(request, "name", MAX_SEARCH_CHARS),
                   limit=int_param(request, "limit", RECENT_LIMIT.default,
                                   (RECENT_LIMIT.low, RECENT_LIMIT.high)))
    return JSONResponse({"queue": queue, "tasks": [asdict(t) for t in found.tasks],
                         "scanned": found.scanned, "complete": found.complete})


def workers(request: Request) -> JSONResponse:
    """The queue's live workers (see `taskq.registry.WorkerView`), with the server's
    `now_ms` they were read at."""
    queue = queue_of(request)
    broker = state_of(request).broker_holding(queue)
    now, found = read_workers(broker)
    return JSONResponse({"queue": queue, "now_ms": now,
                         "workers": [asdict(w) for w in found],
                         "total": live_count(broker, now, len(found))})


def schedules_broker(request: Request) -> Broker:
    """The broker of the queue the request's schedules are on: for a sharded queue named
    as a whole, the shard they fire on (see `schedules_queue`)."""
    state = state_of(request)
    return state.broker(schedules_queue(state.client, queue_of(request)))


def schedules(request: Request) -> JSONResponse:
    """The queue's periodic schedules as Redis holds them (see `ScheduleView`), with the
    server's `now_ms` they were read at; `queue` is the one they are on (a sharded
    queue's shard that fires them)."""
    return JSONResponse(asdict(read_schedules(schedules_broker(request))))


def forget(request: Request) -> JSONResponse:
    """Forget a periodic schedule no worker declares any more, its next tick long
    overdue (see `taskq.schedule_view.forget_schedule`), or with `force=1` in any case:
    200 when forgotten; 404 when none is listed; 409 when kept (`verdict` `alive`, a
    worker may still declare it, or `fired`, one did as it was forgotten). `message`
    says which, and why."""
    name = schedule_name_param(request)
    done = forget_schedule(schedules_broker(request), name,
                           force=flag_param(request, "force"))
    body = {"schedule": name, "verdict": done.verdict, "message": done.message}
    if done.verdict == "forgotten":
        return JSONResponse(body)
    return JSONResponse({**body, "error": done.message},
                        status_code=404 if done.verdict == "missing" else 409)


def totals(request: Request) -> JSONResponse:
    """The queue's lifetime totals (see `taskq.web.totals.TOTALS`)."""
    queue = queue_of(request)
    return JSONResponse({"queue": queue,
                         "totals": read_totals(state_of(request).broker_holding(queue))})


def throughput(request: Request) -> JSONResponse:
    """The queue's tasks completed and attempts failed over the last `window` seconds,
    and each per minute (see `taskq.throughput.Throughput`): `window_ms` is the span
    counted, shorter than asked when the log does not reach back that far. A reading is
    given to every request for the same queue and window within a second of it."""
    queue = queue_of(request)
    window = int_param(request, "window", WINDOW_MS // 1000, THROUGHPUT_WINDOW)
    state = state_of(request)
    seen = state.throughputs.get((queue, window), lambda: read_throughput(
        state.broker_holding(queue), window_ms=window * 1000))
    return JSONResponse({"queue": queue, **asdict(seen),
                         "completed_per_min": seen.completed_per_min,
                         "failed_per_min": seen.failed_per_min})


def retry(request: Request) -> JSONResponse:
    task_id = task_id_param(request)
    if not state_of(request).broker_holding(queue_of(request), task_id).retry_dead(task_id):
        return not_found(f"task {task_id!r} is not in the DLQ (or its record names no task "
                         "to run)")
    return JSONResponse({"retried": task_id})


def retry_all(request: Request) -> JSONResponse:
    """Send every dead task back to ready (at most 1,000 a call; see `taskq.bulk`):
    `done` the ids sent back, `missed` those that had left the DLQ, `left` the dead
    tasks still there. Each one's `revived` event moves it on the page."""
    return JSONResponse(asdict(bulk.retry_all(
        state_of(request).broker_holding(queue_of(request)))))


def cancel_all(request: Request) -> JSONResponse:
    """Take every dead task out of the DLQ for good (at most 1,000 a call): each ends
    cancelled, with its `cancelled` event; the same reply as `retry_all`."""
    return JSONResponse(asdict(bulk.cancel_all(
        state_of(request).broker_holding(queue_of(request)))))


def cancel_dead(request: Request) -> JSONResponse:
    """Take one dead task out of the DLQ for good (it ends `cancelled`), as the DLQ row's
    Cancel does; 404 when it has left the DLQ (revived by another operator, say), which
    `POST /api/tasks/{id}/cancel` would have cancelled wherever it had got to."""
    task_id = task_id_param(request)
    done = state_of(request).broker_holding(queue_of(request), task_id).cancel(
        task_id, only="dead")
    if done.outcome != "cancelled":
        where = "no such task" if done.outcome == "unknown" else f"it is {done.state}"
        return not_found(f"task {task_id!r} is not in the DLQ ({where}); nothing cancelled")
    return JSONResponse(asdict(done))


def cancel(request: Request) -> JSONResponse:
    """Cancel a task (see `Broker.cancel`): `outcome` is `cancelled` (it ended now),
    `requested` (running: its worker is told at its next heartbeat) or `unchanged` (it
    had ended, or its cancel was requested already), with the `state` it was in."""
    task_id = task_id_param(request)
    done = state_of(request).broker_holding(queue_of(request), task_id).cancel(task_id)
    if done.outcome == "unknown":
        return not_found(f"no task {task_id!r} on this queue")
    return JSONResponse(asdict(done))


async def healthz(request: Request) -> JSONResponse:
    """Whether Redis answers a PING within ANSWER_SECONDS (taskq.web.answering). Open to
    anyone (see AccessControl), so a failure is told only as `down` or `not answering`:
    Redis's own error names its host and port, and goes to the log."""
    health = await state_of(request).answering.health()
    return JSONResponse({"ok": health == "up", "redis": health},
                        status_code=200 if health == "up" else 503)
