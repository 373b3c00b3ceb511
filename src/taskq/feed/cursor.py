"""Feed positions and their wire form: `<epoch>.<seq>.<ts>`, or nothing for the start."""

from __future__ import annotations

import re
from dataclasses import dataclass

from taskq.boundary import text

WIRE_ID = re.compile(r"(\d{0,24})\.(\d{1,18})\.(\d{1,15})", re.ASCII)
MAX_ECHO = 120


@dataclass(frozen=True, slots=True)
class Cursor:
    """The last row a client holds: its log's epoch, its sequence number, and its `ts`
    as a fingerprint that tells a row rewritten after a Redis crash from the original.
    `Cursor.start()` (no epoch, seq 0) asks for the whole log."""

    epoch: str
    seq: int
    ts: str

    @classmethod
    def start(cls) -> Cursor:
        return cls("", 0, "")

    @property
    def wire_id(self) -> str:
        """The SSE `id:`; only digits and dots, so never a CR, LF or NUL."""
        return f"{self.epoch}.{self.seq}.{self.ts or 0}"


@dataclass(frozen=True)
class Malformed:
    """A `Last-Event-ID` that is not one of ours; the client gets a gap, never an error."""

    raw: str

    @property
    def echo(self) -> str:
        """The raw value, shortened, for the gap event's JSON body."""
        return self.raw[:MAX_ECHO]


def parse_cursor(raw: str | None) -> Cursor | Malformed:
    """The cursor in `raw` (a Last-Event-ID header or query value); no value is the start."""
    if raw is None or raw.strip() == "":
        return Cursor.start()
    match = WIRE_ID.fullmatch(raw.strip())
    if match is None:
        return Malformed(raw)
    epoch, seq, ts = match.groups()
    if not epoch:
        # Only a log with no rows yet has no epoch; a gap hands out its start, `.0.0`.
        return Cursor.start() if int(seq) == 0 else Malformed(raw)
    return Cursor(epoch, int(seq), ts)


def fingerprint(ts: object) -> str:
    """A row's `ts` as its cursor's fingerprint: '' (none) for one no script wrote, a
    log entry written by hand with a `ts` that is no time in ms, so its wire id still
    parses (WIRE_ID) and a resume from it is not taken for malformed."""
    value = text(ts)
    return value if value.isascii() and value.isdigit() and len(value) <= 15 else ""
