"""A queue's lifetime totals (tasks created, completed, failed, dead, cancelled, ...),
summed from the counters every script keeps per event `type:state` (see close_feed)."""

from __future__ import annotations

from typing import Any

from taskq.boundary import redis_errors, stored_int, text
from taskq.broker import Broker

# Each total: what it counts, and the `type:state` counters it sums. The event log is
# trimmed, so only these counters know a queue's whole history.
TOTALS: dict[str, tuple[str, tuple[str, ...]]] = {
    # A workflow creates its later stages' steps `waiting` when it starts.
    "enqueued": ("Tasks created.", ("enqueued:pending", "enqueued:delayed",
                                    "enqueued:waiting")),
    "completed": ("Tasks acked as completed.", ("completed:completed",)),
    # A handler's failure after its task's cancel was requested ends it cancelled, but it
    # is a failed attempt all the same.
    "failed": ("Failed attempts reported by handlers.",
               ("failed:delayed", "failed:dead", "failed:cancelled")),
    "retried": ("Attempts scheduled again after a failure or an expired lease.",
                ("failed:delayed", "reaped:delayed")),
    "reaped": ("Leases that expired without an ack.",
               ("reaped:delayed", "reaped:dead", "reaped:cancelled")),
    "dead": ("Tasks moved to the DLQ.", ("failed:dead", "reaped:dead")),
    "cancelled": ("Tasks ended cancelled.",
                  ("cancelled:cancelled", "failed:cancelled", "released:cancelled",
                   "reaped:cancelled")),
}


def read_totals(broker: Broker) -> dict[str, int]:
    """Every total of TOTALS for the queue, from one read of its counters."""
    with redis_errors("read the queue's totals"):
        raw = broker.client.hgetall(broker.keys.stats)
    return totals_from(raw)


def totals_from(raw: dict[Any, Any]) -> dict[str, int]:
    """Every total of TOTALS from a queue's counters (their HGETALL reply)."""
    counters = {text(k): stored_int(v) for k, v in raw.items()}
    return {name: sum(counters.get(k, 0) for k in keys) for name, (_, keys) in TOTALS.items()}
