"""The last events a snapshot reflects, read with the feed's own gap-checked step, for a
page to list when it opens on a queue."""

from __future__ import annotations

from taskq.boundary import redis_errors
from taskq.broker import Broker
from taskq.feed.log import Gap, Row, decode

# Most events a page may ask to list at once.
MAX_RECENT = 200


def recent_rows(broker: Broker, epoch: str, upto: int, count: int) -> list[Row]:
    """At most `count` rows of the queue's log, the last at or before sequence number
    `upto` of log `epoch` (a snapshot's position), oldest first: fewer when retention
    has trimmed the rest, none when the log was recreated since."""
    after = max(0, upto - count)
    k = broker.keys
    # Twice at most: a first read finds where a trimmed log now starts.
    for _ in range(2):
        if not epoch or after >= upto:
            return []
        with redis_errors("read the queue's recent events"):
            reply = decode(broker.scripts.read_events(
                keys=[k.events, k.seq, k.epoch], args=[epoch, after, "", upto - after]))
        if not isinstance(reply, Gap):
            return [row for row in reply.rows if row.cursor.seq <= upto]
        if reply.reason != "trimmed":
            return []
        after = reply.first - 1
    return []
