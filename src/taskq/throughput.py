"""A queue's recent throughput: tasks completed and attempts failed per minute, counted
from the newest end of its event log by a bounded scan."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from taskq.boundary import redis_errors, stored_int, text
from taskq.broker import Broker

# The span the rates are counted over (ms).
WINDOW_MS = 60_000
# Most log entries one reading scans, and per XREVRANGE. A busy queue's minute can hold
# more (heartbeats included): the rates are then counted over the part the scan covered,
# so a reading costs the same however busy the queue is.
SCAN = 5_000
CHUNK = 1_000
# The event types counted: as the lifetime totals `completed` and `failed` count them.
COUNTED = ("completed", "failed")


@dataclass(frozen=True)
class Throughput:
    """Tasks completed and attempts failed in the last `window_ms` before `now_ms` (Redis
    time) that the log accounts for: the whole window, or, when the scan stopped at its
    bound or the log was trimmed within the window, the span since the oldest event read."""

    now_ms: int
    window_ms: int
    completed: int
    failed: int

    @property
    def completed_per_min(self) -> float:
        return self.completed * 60_000 / self.window_ms

    @property
    def failed_per_min(self) -> float:
        return self.failed * 60_000 / self.window_ms


@dataclass
class _Scan:
    """What the scan has counted, and how far back it reached."""

    start: int
    counts: dict[str, int]
    oldest_ts: int
    oldest_seq: int = 0
    covered: bool = False  # it reached the window's start, or the log's first event ever

    def take(self, chunk: Sequence[tuple[Any, Mapping[Any, Any] | None]]) -> None:
        # The two fields it needs, looked up, not every field copied: a reading is up to
        # 5,000 entries. By text first, as taskq's clients decode replies; by bytes for
        # a client that does not.
        for _, raw in chunk:
            fields = raw or {}
            ts = stored_int(fields.get("ts") or fields.get(b"ts"))
            if ts < self.start:
                self.covered = True
                return
            kind = text(fields.get("type") or fields.get(b"type") or "")
            if kind in self.counts:
                self.counts[kind] += 1
            self.oldest_ts = ts
        if chunk:
            self.oldest_seq = int(text(chunk[-1][0]).partition("-")[0])


def read_throughput(broker: Broker, window_ms: int = WINDOW_MS, scan: int = SCAN) -> Throughput:
    """The queue's throughput over the last `window_ms`, from at most `scan` log entries
    read newest first. The reads are separate, but entries never change: events appended
    meanwhile are counted, as they happened within the window too."""
    now = broker.server_time_ms()
    seen = _Scan(start=now - window_ms, counts=dict.fromkeys(COUNTED, 0), oldest_ts=now)
    read, upper = 0, "+"
    with redis_errors("read the queue's recent events"):
        while read < scan and not seen.covered:
            want = min(CHUNK, scan - read)
            chunk = broker.client.xrevrange(broker.keys.events, max=upper, min="-",
                                            count=want) or []
            seen.take(chunk)
            read += len(chunk)
            if len(chunk) < want:
                # The log's start: the whole window when it holds the queue's first
                # event (or nothing), else retention trimmed what came before.
                seen.covered = seen.covered or seen.oldest_seq in (0, 1)
                break
            upper = "(" + text(chunk[-1][0])
    span = window_ms if seen.covered else max(1, now - seen.oldest_ts)
    return Throughput(now_ms=now, window_ms=min(window_ms, span),
                      completed=seen.counts["completed"], failed=seen.counts["failed"])
