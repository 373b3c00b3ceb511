"""The queue's recently ended tasks, searchable by id prefix and task name: read from
its event log by a bounded scan, a stretch of it a script call, so the list is as
bounded as the log's retention and as lasting as the records' TTLs, no task's end pays
for it, and no search holds Redis for longer than one stretch."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from taskq.boundary import redis_errors, stored_int, text
from taskq.broker import Broker
from taskq.errors import InvalidTaskError
from taskq.limits import HISTORY_SCAN, Range, shown, utf8

ENDS = ("completed", "dead", "cancelled")
RECENT_LIMIT = Range("limit", 1, 1000, 50, "tasks", whole=True)
RECENT_SCAN = Range("scan", 1, 100_000, HISTORY_SCAN.default, "events", whole=True)
MAX_SEARCH_CHARS = 200
# Log entries one script call reads: a few ms of Redis with a record read for each.
# A search of 10,000 entries in one call held every worker's lease and ack back 70 ms.
STRETCH = 500


@dataclass(frozen=True)
class Ended:
    """A task that ended: how (`state`), when (`ended_at`, server ms), after how many
    retries, and its last error ('' for none)."""

    task_id: str
    name: str
    state: str
    ended_at: int
    retries: int
    last_error: str


@dataclass(frozen=True)
class Recent:
    """What a search found, newest first; `scanned` log entries were read, and
    `complete` says whether the scan reached the log's oldest entry."""

    tasks: list[Ended]
    scanned: int
    complete: bool


def check_search(states: Sequence[str], id_prefix: str, name: str) -> None:
    """Raise `InvalidTaskError` unless `recent` can search for these."""
    unknown = [s for s in states if s not in ENDS]
    if unknown or not states:
        raise InvalidTaskError(f"states must be some of {', '.join(ENDS)}, not "
                               f"{shown(list(states))}")
    for what, value in (("id prefix", id_prefix), ("name", name)):
        if not isinstance(value, str) or len(value) > MAX_SEARCH_CHARS or not utf8(value):
            raise InvalidTaskError(f"the {what} searched for must be text (UTF-8) of at "
                                   f"most {MAX_SEARCH_CHARS} characters, not {shown(value)}")


def recent(broker: Broker, states: Sequence[str] = ENDS, id_prefix: str = "",
           name: str = "", limit: int = RECENT_LIMIT.default,
           scan: int = RECENT_SCAN.default) -> Recent:
    """The newest `limit` tasks of `broker`'s queue that ended in one of `states`, whose
    id starts with `id_prefix` and whose name contains `name`, found in at most `scan`
    log entries; raises `InvalidTaskError` for a value out of range."""
    check_search(states, id_prefix, name)
    limit, scan = RECENT_LIMIT.check(limit), RECENT_SCAN.check(scan)
    found: dict[str, Ended] = {}
    scanned, start, upper = 0, False, "+"
    with redis_errors("read the recently ended tasks"):
        while len(found) < limit and scanned < scan and not start:
            reply = broker.scripts.recent(
                keys=[broker.keys.events],
                args=[broker.keys.prefix, ",".join(states), id_prefix, name,
                      limit - len(found), min(STRETCH, scan - scanned), upper])
            values = [text(v) for v in reply]
            scanned += int(values[0])
            start, upper, n = values[1] == "1", "(" + values[2], int(values[3])
            for r in (values[4 + i * 6: 10 + i * 6] for i in range(n)):
                # Listed by a newer stretch at a later end of it (a dead task revived).
                found.setdefault(r[0], Ended(r[0], r[1], r[2], stored_int(r[3]),
                                            stored_int(r[4]), r[5]))
    return Recent(list(found.values()), scanned, start)
