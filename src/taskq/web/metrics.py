"""`/metrics` in the Prometheus text format."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import PlainTextResponse

from taskq.boundary import broker_error, redis_errors, unusable_as_stored
from taskq.broker import Broker
from taskq.errors import BrokerError
from taskq.keys import QueueKeys
from taskq.results import QueueCounts
from taskq.snapshot import READ_AT_ONCE, queue_names, read_counts
from taskq.web.api import state_of
from taskq.web.totals import TOTALS, totals_from

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


def read_queues(broker: Broker, names: list[str]
                ) -> tuple[list[QueueCounts | BrokerError], list[dict[str, int] | BrokerError]]:
    """Each queue's counts (see read_counts) and totals, in one write each where the
    client can; a queue whose keys or counters hold another type has a BrokerError for
    its counts or totals. Raises BrokerError when Redis cannot be read."""
    counts = read_counts(broker, names)
    with redis_errors("read the queues' totals"):
        pipe = broker.client.pipeline(transaction=False)
        for name in names:
            pipe.hgetall(QueueKeys(name).stats)
        raw = pipe.execute(raise_on_error=False)
    stats: list[dict[str, int] | BrokerError] = []
    for reply in raw:
        if not isinstance(reply, Exception):
            stats.append(totals_from(reply))
            continue
        error = broker_error("read the queue's totals", reply)
        if not unusable_as_stored(error):
            raise error
        stats.append(error)
    return counts, stats


def metrics(request: Request) -> PlainTextResponse:
    state = state_of(request)
    first = state.broker(state.settings.queue)
    names = queue_names(first) or [state.settings.queue]
    lines = ["# HELP taskq_tasks Task ids in each structure of a queue.",
             "# TYPE taskq_tasks gauge"]
    totals: dict[str, dict[str, int]] = {}
    unread: list[str] = []
    for start in range(0, len(names), READ_AT_ONCE):
        chunk = names[start:start + READ_AT_ONCE]
        for name, counts, stats in zip(chunk, *read_queues(first, chunk), strict=True):
            if isinstance(counts, BrokerError):
                # One queue's keys of another type must not hide every queue's counts.
                unread.append(f"# queue {name}'s task counts are left out: "
                              f"{' '.join(str(counts).split())}")
            else:
                for structure in ("ready", "leased", "delayed", "dead"):
                    lines.append(f'taskq_tasks{{queue="{name}",structure="{structure}"}} '
                                 f"{getattr(counts, structure)}")
            if isinstance(stats, BrokerError):
                # One queue's counters of another type must not hide every queue's.
                unread.append(f"# queue {name}'s totals are left out: "
                              f"{' '.join(str(stats).split())}")
            else:
                totals[name] = stats
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
