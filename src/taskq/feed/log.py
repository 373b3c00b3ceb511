"""The one read of the event log: gap check and rows after a cursor, in one atomic script."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Literal

from taskq.boundary import text
from taskq.connection import AsyncClient
from taskq.feed.cursor import Cursor, fingerprint
from taskq.feed.frames import row_frame
from taskq.keys import QueueKeys
from taskq.scripts import source

BEYOND_ANY_HEAD = 10**18 - 1

GapReason = Literal["epoch", "ahead", "trimmed", "diverged", "malformed"]


@dataclass(frozen=True)
class Row:
    """One event of the log, with the cursor a client holds once it has received it."""

    cursor: Cursor
    fields: dict[str, str]

    @property
    def type(self) -> str:
        return self.fields.get("type", "")

    @cached_property
    def frame(self) -> str:
        """This row as a server-sent event, rendered once however many clients get it."""
        return row_frame(self)

    def framed(self) -> Framed:
        """This row as a hub's ring keeps it: its cursor and its frame, no fields."""
        return Framed(self.cursor, self.frame)


@dataclass(frozen=True, slots=True)
class Framed:
    """A row as a hub's ring keeps it for every client that catches up from memory:
    its cursor and its frame, rendered once. Its fields are let go, since no client
    reads them: a dict of them a row (the names new strings each, as Redis's reply
    makes them) held a busy queue's ring at several times its frames' size."""

    cursor: Cursor
    frame: str


@dataclass(frozen=True)
class Rows:
    """The rows right after the cursor (possibly none); nothing between was lost."""

    epoch: str
    head: int
    first: int
    rows: list[Row]


@dataclass(frozen=True)
class Gap:
    """Rows after the cursor can no longer be delivered; resume from `resume_at`."""

    epoch: str
    head: int
    first: int
    reason: GapReason
    resume_at: Cursor


class FeedLog:
    """Reads one queue's event log for feed clients, on an asyncio Redis client."""

    def __init__(self, client: AsyncClient, keys: QueueKeys) -> None:
        self.client = client
        self.keys = keys
        self._script = client.register_script(source("read_events"))

    async def read(self, cursor: Cursor, count: int) -> Rows | Gap:
        k = self.keys
        reply = await self._script(
            keys=[k.events, k.seq, k.epoch],
            args=[cursor.epoch, cursor.seq, cursor.ts, count],
        )
        return decode(reply)

    async def probe(self) -> Gap:
        """Where the log is now, as the gap a cursor beyond every head would get."""
        result = await self.read(Cursor("", BEYOND_ANY_HEAD, ""), 1)
        assert isinstance(result, Gap), "a cursor beyond the head always gets a gap"
        return result

    async def head(self) -> Cursor:
        """Where the log ends now: the cursor of its last row (seq 0 when empty)."""
        return (await self.probe()).resume_at


def decode(reply: list[object]) -> Rows | Gap:
    kind, epoch, head, first = text(reply[0]), text(reply[1]), int(text(reply[2])), \
        int(text(reply[3]))
    if kind == "gap":
        reason = text(reply[5])
        resume = Cursor(epoch, head, fingerprint(reply[4])) if head else Cursor(epoch, 0, "")
        return Gap(epoch, head, first, reason, resume)  # type: ignore[arg-type]
    rows = []
    for i in range(4, len(reply), 3):
        flat = reply[i + 2]
        assert isinstance(flat, list)
        fields = {text(flat[j]): text(flat[j + 1]) for j in range(0, len(flat), 2)}
        rows.append(Row(Cursor(epoch, int(text(reply[i])), fingerprint(reply[i + 1])), fields))
    return Rows(epoch, head, first, rows)

