"""The queue's recently ended tasks, searchable by id prefix and task name: read from
its event log by one bounded script, so the list is as bounded as the log's retention
and as lasting as the records' TTLs, and no task's end pays for it."""

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


def recent(broker: Broker, states: Sequence[str] = ENDS, id_prefix: str = "",
           name: str = "", limit: int = RECENT_LIMIT.default,
           scan: int = RECENT_SCAN.default) -> Recent:
    """The newest `limit` tasks of `broker`'s queue that ended in one of `states`, whose
    id starts with `id_prefix` and whose name contains `name`, found in at most `scan`
    log entries; raises `InvalidTaskError` for a value out of range."""
    unknown = [s for s in states if s not in ENDS]
    if unknown or not states:
        raise InvalidTaskError(f"states must be some of {', '.join(ENDS)}, not "
                               f"{shown(list(states))}")
    for what, value in (("id prefix", id_prefix), ("name", name)):
        if not isinstance(value, str) or len(value) > MAX_SEARCH_CHARS or not utf8(value):
            raise InvalidTaskError(f"the {what} searched for must be text (UTF-8) of at "
                                   f"most {MAX_SEARCH_CHARS} characters, not {shown(value)}")
    limit, scan = RECENT_LIMIT.check(limit), RECENT_SCAN.check(scan)
    with redis_errors("read the recently ended tasks"):
        reply = broker.scripts.recent(keys=[broker.keys.events],
                                      args=[broker.keys.prefix, ",".join(states), id_prefix,
                                            name, limit, scan])
    values = [text(v) for v in reply]
    scanned, start, n = int(values[0]), values[1] == "1", int(values[2])
    rows = [values[3 + i * 6: 9 + i * 6] for i in range(n)]
    return Recent([Ended(r[0], r[1], r[2], stored_int(r[3]), stored_int(r[4]), r[5])
                   for r in rows], scanned, start)
