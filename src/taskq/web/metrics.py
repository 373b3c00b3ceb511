"""`/metrics` in the Prometheus text format."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import PlainTextResponse

from taskq.snapshot import queue_names
from taskq.web.api import state_of

# Lifetime totals derived from the scripts' `type:state` counters.
TOTALS = {
    "taskq_completions_total": ("Tasks acked as completed.", ("completed:completed",)),
    "taskq_failures_total": ("Failed attempts reported by handlers.",
                             ("failed:delayed", "failed:dead")),
    "taskq_retries_total": ("Attempts scheduled again after a failure or an expired lease.",
                            ("failed:delayed", "reaped:delayed")),
    "taskq_reaps_total": ("Leases that expired without an ack.",
                          ("reaped:delayed", "reaped:dead")),
    "taskq_dead_total": ("Tasks moved to the DLQ.", ("failed:dead", "reaped:dead")),
    "taskq_enqueued_total": ("Tasks created.", ("enqueued:pending", "enqueued:delayed")),
}


def metrics(request: Request) -> PlainTextResponse:
    state = state_of(request)
    names = queue_names(state.broker(state.settings.queue)) or [state.settings.queue]
    lines = ["# HELP taskq_tasks Task ids in each structure of a queue.",
             "# TYPE taskq_tasks gauge"]
    totals: dict[str, dict[str, int]] = {}
    for name in names:
        broker = state.broker(name)
        counts = broker.counts()
        for structure in ("ready", "leased", "delayed", "dead"):
            lines.append(f'taskq_tasks{{queue="{name}",structure="{structure}"}} '
                         f"{getattr(counts, structure)}")
        raw = broker.client.hgetall(broker.keys.stats)
        totals[name] = {str(k): int(v) for k, v in raw.items()}
    for metric, (text, keys) in TOTALS.items():
        lines += [f"# HELP {metric} {text}", f"# TYPE {metric} counter"]
        for name in names:
            lines.append(f'{metric}{{queue="{name}"}} {sum(totals[name].get(k, 0) for k in keys)}')
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
