"""Actions on every dead task of a queue at once: send them back to ready, or take them
out of the DLQ for good (they end cancelled). Each task is its own atomic script with
its own event, as one would be alone; a call handles at most `limit`, so a huge DLQ is
worked through in bounded steps, and a task that left the DLQ meanwhile is skipped."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from taskq.boundary import held_by_another_type
from taskq.broker import Broker
from taskq.errors import BrokerError, InvalidTaskError
from taskq.limits import Range

BULK_LIMIT = Range("limit", 1, 10_000, 1000, "tasks", whole=True)


@dataclass(frozen=True)
class Bulk:
    """What a bulk action did: the ids it acted on, the ids that had left the DLQ by
    the time it reached them, the dead tasks left after it, and the DLQ entries that are
    no task id (pushed by hand or by another tool: left as they are, for an operator)."""

    done: list[str]
    missed: list[str]
    left: int
    unusable: list[str] = field(default_factory=list)


def retry_all(broker: Broker, limit: int = BULK_LIMIT.default) -> Bulk:
    """Send up to `limit` dead tasks back to ready, retries reset (`revived` events)."""
    return _each(broker, limit, broker.retry_dead)


def cancel_all(broker: Broker, limit: int = BULK_LIMIT.default) -> Bulk:
    """End up to `limit` dead tasks cancelled, out of the DLQ for good (`cancelled`
    events; their records kept as completed ones are)."""
    return _each(broker, limit,
                 lambda task_id: broker.cancel(task_id, only="dead").outcome == "cancelled")


def _each(broker: Broker, limit: int, act: Callable[[str], bool]) -> Bulk:
    BULK_LIMIT.check(limit)
    done: list[str] = []
    missed: list[str] = []
    unusable: list[str] = []
    for task_id in broker.dead(limit):
        try:
            (done if act(task_id) else missed).append(task_id)
        except InvalidTaskError:  # one bad entry must not stop the rest
            unusable.append(task_id)
        except BrokerError as e:
            if not held_by_another_type(e):
                raise
            unusable.append(task_id)
    return Bulk(done, missed, broker.counts().dead - len(unusable), unusable)
