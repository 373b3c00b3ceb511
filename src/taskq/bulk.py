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
    no task's (no task id, a record of another type or none, pushed by hand or by another
    tool: left as they are, for an operator)."""

    done: list[str]
    missed: list[str]
    left: int
    unusable: list[str] = field(default_factory=list)


def retry_all(broker: Broker, limit: int = BULK_LIMIT.default,
              done: list[str] | None = None) -> Bulk:
    """Send up to `limit` dead tasks back to ready, retries reset (`revived` events).
    Each id sent is added to `done` (the Bulk's own list) as it goes, so a caller cut
    short can say what was."""
    return _each(broker, limit, broker.retry_dead, done)


def cancel_all(broker: Broker, limit: int = BULK_LIMIT.default,
               done: list[str] | None = None) -> Bulk:
    """End up to `limit` dead tasks cancelled, out of the DLQ for good (`cancelled`
    events; their records kept as completed ones are); `done` as for `retry_all`."""
    return _each(broker, limit,
                 lambda task_id: broker.cancel(task_id, only="dead").outcome == "cancelled",
                 done)


def _each(broker: Broker, limit: int, act: Callable[[str], bool],
          done: list[str] | None) -> Bulk:
    """Act on up to `limit` dead tasks, newest first. Entries left in the DLQ (no task's,
    or one whose task left it meanwhile and died again) are stepped past, not read
    again: a block of them at the newest end would stop every later call. At most
    EXAMINED times `limit` entries are looked at."""
    BULK_LIMIT.check(limit)
    done = [] if done is None else done
    acted = len(done)  # the caller's list may hold other shards' already
    missed: list[str] = []
    unusable: list[str] = []
    seen: set[str] = set()
    kept = 0  # entries looked at and still in the DLQ: the next page starts past them
    while len(done) - acted < limit and len(seen) < EXAMINED * limit:
        page = broker.dead(limit - (len(done) - acted), start=kept)
        if not page:
            break
        for task_id in page:
            if task_id in seen:
                kept += 1  # it came round again (another operator's moves shift the list)
                continue
            seen.add(task_id)
            if _act_on(broker, task_id, act, missed, unusable):
                done.append(task_id)
            else:
                kept += 1
    return Bulk(done, missed, broker.counts().dead - len(unusable), unusable)


# How many DLQ entries a bulk call looks at, at most, for each task it may act on.
EXAMINED = 10


def _act_on(broker: Broker, task_id: str, act: Callable[[str], bool], missed: list[str],
            unusable: list[str]) -> bool:
    """Whether `act` moved the task out of the DLQ; else `task_id` is added to `missed`
    (it left the DLQ meanwhile) or `unusable` (no task's: no task id, a record of another
    type, or none at all), the entry left as it is."""
    try:
        if act(task_id):
            return True
        (missed if broker.task(task_id) is not None else unusable).append(task_id)
    except InvalidTaskError:  # one bad entry must not stop the rest
        unusable.append(task_id)
    except BrokerError as e:
        if not held_by_another_type(e):
            raise
        unusable.append(task_id)
    return False
