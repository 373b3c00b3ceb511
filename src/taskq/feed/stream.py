"""One client's feed: resume (gap or replay), then live rows, as server-sent event frames."""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import AsyncIterator
from dataclasses import dataclass

from taskq.feed.cursor import Cursor, Malformed
from taskq.feed.hub import Hub
from taskq.feed.log import Gap, Row

EVENT_NAME = re.compile(r"[a-z][a-z_]{0,31}")
NUMERIC_FIELDS = ("ts", "at", "token", "retries")


@dataclass(frozen=True)
class StreamSettings:
    """Batch size of a read, and the longest silence before a comment heartbeat."""

    batch: int = 500
    heartbeat_seconds: float = 15.0
    retry_ms: int = 1000


def row_frame(row: Row) -> str:
    """`id:`, `event:` and one line of JSON `data:`; ids and names are checked to be
    digits, dots and lower-case letters, so no CR, LF or NUL can reach those fields."""
    name = row.type if EVENT_NAME.fullmatch(row.type) else "event"
    data: dict[str, object] = {"seq": row.cursor.seq, "id": row.cursor.wire_id}
    for key, value in row.fields.items():
        data[key] = int(value) if key in NUMERIC_FIELDS and value.isdigit() else value
    return f"id: {row.cursor.wire_id}\nevent: {name}\ndata: {_json(data)}\n\n"


def gap_frame(requested: str, gap: Gap) -> str:
    body = {
        "requested": requested,
        "first_available": gap.first,
        "head": gap.head,
        "reason": gap.reason,
        "resume_id": gap.resume_at.wire_id,
    }
    return f"id: {gap.resume_at.wire_id}\nevent: gap\ndata: {_json(body)}\n\n"


def _json(value: object) -> str:
    # ensure_ascii: every character outside ASCII, CR and LF included, is escaped.
    return json.dumps(value, ensure_ascii=True, separators=(",", ":"))


async def feed_frames(
    hub: Hub, start: Cursor | Malformed, settings: StreamSettings
) -> AsyncIterator[str]:
    """Frames for one client from `start`: a gap or the missed rows, then live rows.

    Every batch is either taken from the hub's contiguous ring or read from Redis by
    the atomic gap-checked script, so the cursor never skips a row unannounced and no
    row is sent twice.
    """
    yield f"retry: {settings.retry_ms}\n\n"
    if isinstance(start, Malformed):
        gap = dataclasses.replace(await hub.log.probe(), reason="malformed")
        cursor = gap.resume_at
        yield gap_frame(start.echo, gap)
    else:
        cursor = start
    while True:
        rows = hub.rows_after(cursor, settings.batch)
        if rows is None:
            result = await hub.log.read(cursor, settings.batch)
            if isinstance(result, Gap):
                yield gap_frame(cursor.wire_id if cursor.seq else "", result)
                cursor = result.resume_at
                continue
            rows = result.rows
        if rows:
            hub.delivered += len(rows)
            yield "".join(row_frame(row) for row in rows)
            cursor = rows[-1].cursor
            continue
        before = hub.tail
        await hub.wait(cursor, settings.heartbeat_seconds)
        if hub.tail == before and hub.tail.seq <= cursor.seq:
            yield ": keepalive\n\n"
