"""Actions on every dead task of a queue at once: send them back to ready, or take them
out of the DLQ for good (they end cancelled). Each task is its own atomic script with
its own event, as one would be alone; a call handles at most `limit`, so a huge DLQ is
worked through in bounded steps, and a task that left the DLQ meanwhile is skipped."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

from taskq.boundary import unusable_as_stored
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
    """Act on up to `limit` dead tasks, newest first. Entries left in the DLQ (no task's)
    are stepped past, not read again: a block of them at the newest end would stop
    every later call. An entry whose task left the DLQ meanwhile (another operator) is
    gone from it, so the next page starts no further for it."""
    BULK_LIMIT.check(limit)
    done = [] if done is None else done
    acted = len(done)  # the caller's list may hold other shards' already
    missed: list[str] = []
    unusable: list[str] = []
    seen: set[str] = set()
    kept = 0  # entries looked at and still in the DLQ: the next page starts past them
    unusable_ids: set[str] = set()  # as `unusable`, looked up once per entry read again
    unusable_entries = 0  # copies too: each is one entry of the DLQ's length
    while len(done) - acted < limit:
        page = broker.dead(limit - (len(done) - acted), start=kept)
        if not page:
            break
        for task_id in page:
            if task_id in seen:
                # Come round again: a second copy, or the list shifted under it (new
                # deaths at the newest end). Still there either way.
                kept += 1
                unusable_entries += task_id in unusable_ids
                continue
            seen.add(task_id)
            outcome = _act_on(broker, task_id, act)
            if outcome == "done":
                done.append(task_id)
            elif outcome == "missed":
                missed.append(task_id)
            else:
                unusable.append(task_id)
                unusable_ids.add(task_id)
                unusable_entries += 1
                kept += 1
    return Bulk(done, missed, broker.counts().dead - unusable_entries, unusable)


def _act_on(broker: Broker, task_id: str,
            act: Callable[[str], bool]) -> Literal["done", "missed", "unusable"]:
    """What became of the entry: `act` moved its task out of the DLQ ("done"); the task
    had left it meanwhile ("missed"); or it is no task's (no task id, a record of another
    type, or none at all), left as it is ("unusable")."""
    try:
        if act(task_id):
            return "done"
        return "missed" if broker.task(task_id) is not None else "unusable"
    except InvalidTaskError:  # one bad entry must not stop the rest
        return "unusable"
    except BrokerError as e:
        if not unusable_as_stored(e):
            raise
        return "unusable"
