"""`/metrics` in the Prometheus text format."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import PlainTextResponse

from taskq.boundary import unusable_as_stored
from taskq.errors import BrokerError
from taskq.snapshot import queue_names
from taskq.web.api import state_of
from taskq.web.totals import TOTALS, read_totals

# Each lifetime counter and the total of `taskq.web.totals` it shows.
COUNTERS = {
    "taskq_completions_total": "completed",
    "taskq_failures_total": "failed",
    "taskq_retries_total": "retried",
    "taskq_reaps_total": "reaped",
    "taskq_dead_total": "dead",
    "taskq_enqueued_total": "enqueued",
    "taskq_cancelled_total": "cancelled",
}


def metrics(request: Request) -> PlainTextResponse:
    state = state_of(request)
    names = queue_names(state.broker(state.settings.queue)) or [state.settings.queue]
    lines = ["# HELP taskq_tasks Task ids in each structure of a queue.",
             "# TYPE taskq_tasks gauge"]
    totals: dict[str, dict[str, int]] = {}
    unread: list[str] = []
    for name in names:
        broker = state.broker(name)
        counts = broker.counts()
        for structure in ("ready", "leased", "delayed", "dead"):
            lines.append(f'taskq_tasks{{queue="{name}",structure="{structure}"}} '
                         f"{getattr(counts, structure)}")
        try:
            totals[name] = read_totals(broker)
        except BrokerError as e:
            # One queue's counters of another type must not hide every queue's metrics.
            if not unusable_as_stored(e):
                raise
            unread.append(f"# queue {name}'s totals are left out: {' '.join(str(e).split())}")
    for metric, total in COUNTERS.items():
        lines += [f"# HELP {metric} {TOTALS[total][0]}", f"# TYPE {metric} counter"]
        lines += [f'{metric}{{queue="{name}"}} {totals[name][total]}' for name in totals]
    lines += unread
    lines += ["# HELP taskq_feed_clients Feed clients connected to this server.",
              "# TYPE taskq_feed_clients gauge"]
    readers = state.readers
    lines += [f'taskq_feed_clients{{queue="{q}"}} {readers.clients(q)}' for q in readers.retired]
    lines += ["# HELP taskq_feed_deliveries_total Events sent to feed clients by this server.",
              "# TYPE taskq_feed_deliveries_total counter"]
    lines += [f'taskq_feed_deliveries_total{{queue="{q}"}} {readers.delivered(q)}'
              for q in readers.retired]
    lines += ["# HELP taskq_feed_readers Queues this server follows for feed clients now.",
              "# TYPE taskq_feed_readers gauge",
              f"taskq_feed_readers {len(readers.hubs)}"]
    return PlainTextResponse("\n".join(lines) + "\n",
                             media_type="text/plain; version=0.0.4; charset=utf-8")
