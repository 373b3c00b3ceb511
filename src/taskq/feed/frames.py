"""Server-sent event frames of the change feed: what goes on the wire for a row or a gap."""

from __future__ import annotations

import json
import re
from typing import TYPE_CHECKING

from taskq.boundary import whole_text

if TYPE_CHECKING:
    from taskq.feed.log import Gap, Row

EVENT_NAME = re.compile(r"[a-z][a-z_]{0,31}")
NUMERIC_FIELDS = ("ts", "at", "token", "retries", "priority")


def row_frame(row: Row) -> str:
    """`id:`, `event:` and one line of JSON `data:`; ids and names are checked to be
    digits, dots and lower-case letters, so no CR, LF or NUL can reach those fields.
    Use `Row.frame`, which renders it once for every client."""
    name = row.type if EVENT_NAME.fullmatch(row.type) else "event"
    return f"id: {row.cursor.wire_id}\nevent: {name}\ndata: {_json(row_data(row))}\n\n"


def row_data(row: Row) -> dict[str, object]:
    """The row as its event's JSON `data`: `seq`, `id` (the wire id) and its fields, the
    whole numbers among them as numbers."""
    data: dict[str, object] = {"seq": row.cursor.seq, "id": row.cursor.wire_id}
    for key, value in row.fields.items():
        number = whole_text(value) if key in NUMERIC_FIELDS else None
        data[key] = value if number is None else number
    return data


def gap_frame(requested: str, gap: Gap) -> str:
    body = {
        "requested": requested,
        "first_available": gap.first,
        "head": gap.head,
        "reason": gap.reason,
        "resume_id": gap.resume_at.wire_id,
    }
    return f"id: {gap.resume_at.wire_id}\nevent: gap\ndata: {_json(body)}\n\n"


def notice_frame(event: str, body: dict[str, object], retry_ms: int) -> str:
    """An event with no `id:` (so the client keeps its position) that tells why the
    stream ends here, and how long the client should wait before it comes back."""
    assert EVENT_NAME.fullmatch(event), event
    return f"retry: {retry_ms}\nevent: {event}\ndata: {_json(body)}\n\n"


def _json(value: object) -> str:
    # ensure_ascii: every character outside ASCII, CR and LF included, is escaped.
    return json.dumps(value, ensure_ascii=True, separators=(",", ":"))
