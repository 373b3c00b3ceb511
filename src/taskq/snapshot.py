"""A consistent picture of a queue for dashboards: counts, leases, delays, the DLQ, and
the concurrency limits' slots."""

from __future__ import annotations

import logging
from dataclasses import dataclass

from taskq.boundary import broker_error, redis_errors, stored_int, text, unusable_as_stored
from taskq.broker import Broker
from taskq.calls import counts_call, counts_from
from taskq.errors import BrokerError, InvalidTaskError
from taskq.feed.cursor import Cursor, fingerprint
from taskq.keys import QUEUES_KEY, QueueKeys, check_queue_name
from taskq.limits import SNAPSHOT_GROUPS, SNAPSHOT_ROWS
from taskq.results import QueueCounts

log = logging.getLogger("taskq")


# Queues whose counts (and, for /metrics, totals) are read in one round trip: a
# registry may hold tens of thousands of queues (one a tenant), which read one at a
# time would outlast a Prometheus scrape's timeout.
READ_AT_ONCE = 500


def read_counts(broker: Broker, names: list[str]) -> list[QueueCounts | BrokerError]:
    """Each queue's counts (snapshot.lua counting alone, an atomic step a queue), in one
    write where the client can (`Transport.run_many`, a pipeline): a round trip for
    every queue would hold one of the server's few threads for slow reads
    (`WebState.heavy`) a second per thousand queues. A queue whose keys hold what taskq
    never writes there has the BrokerError naming it, so that it hides no other queue's
    counts; raises BrokerError when Redis cannot be read."""
    runs = [(broker.scripts.snapshot.script, *counts_call(QueueKeys(name)))
            for name in names]
    with redis_errors("count the queues' tasks"):
        replies = broker.transport.run_many(runs)
    counts: list[QueueCounts | BrokerError] = []
    for name, reply in zip(names, replies, strict=True):
        if not isinstance(reply, Exception):
            counts.append(counts_from(reply))
            continue
        error = broker_error(f"count the tasks of queue {name!r}", reply)
        if not unusable_as_stored(error):
            raise error from reply
        counts.append(error)
    return counts


@dataclass(frozen=True)
class LeaseView:
    task_id: str
    name: str
    worker: str
    token: int
    attempt: int
    expires_at: int
    # How far this run said it has got (0 to 1) and what it is doing; None and '' until
    # it says (progress another run of the task said is not this run's).
    progress: float | None = None
    progress_message: str = ""


@dataclass(frozen=True)
class DelayedView:
    task_id: str
    name: str
    retries: int
    run_at: int
    last_error: str
    error_type: str  # of the failed attempt it waits to retry after (module.Name)
    throttled: bool = False  # it waits for its rate limit's slot, not a retry or delay


@dataclass(frozen=True)
class DeadView:
    task_id: str
    name: str
    retries: int
    dead_at: int
    last_error: str
    error_type: str  # of the failure that killed it (module.Name)


@dataclass(frozen=True)
class LimitView:
    """A concurrency-limited task name, or with `key` one key of a limit kept per key:
    the name's limit as leases last applied it (0: unknown, e.g. only a parked task is
    left of a name no worker limits now), its runs holding a slot, and its tasks parked
    for one."""

    name: str
    most: int
    running: int
    parked: int
    key: str = ""


@dataclass(frozen=True)
class QueueSnapshot:
    """One queue at one moment of Redis time (`now_ms`), and the feed position
    (`epoch`, `seq`, and that row's `last_ts`) of the last event reflected in it."""

    queue: str
    now_ms: int
    counts: QueueCounts
    leased: list[LeaseView]
    delayed: list[DelayedView]
    dead: list[DeadView]
    epoch: str
    seq: int
    last_ts: int
    limits: list[LimitView]
    # How many concurrency groups there are in all: `limits` holds the first of them.
    limit_groups: int = 0

    @property
    def position(self) -> str:
        """The feed id of the last event reflected ('' before the first): following
        `/events?last_event_id=<position>` misses and repeats none."""
        return Cursor(self.epoch, self.seq, str(self.last_ts)).wire_id if self.seq else ""


def queue_names(broker: Broker) -> list[str]:
    """Every queue any producer has used on this Redis, sorted. A member that is no valid
    queue name (written by something else) is left out, and logged once, so that it
    cannot fail every listing of the queues (the API's, /metrics, the command's)."""
    with redis_errors("list the queues"):
        members = broker.client.smembers(QUEUES_KEY)
    names, new = [], []
    for member in sorted(text(m) for m in members):
        try:
            names.append(check_queue_name(member))
        except InvalidTaskError as e:
            if member not in _skipped:
                _skipped.add(member)
                new.append(str(e))
    if new:
        # One line however many: thousands written by something else would make as
        # many lines before every command's answer.
        more = f" (and {len(new) - 1:,} more such members)" if len(new) > 1 else ""
        log.warning("%s: not listed (a member of %s)%s", new[0], QUEUES_KEY, more)
    return names


# The invalid members already logged, so a dashboard polling the list logs each once.
_skipped: set[str] = set()


def take_snapshot(broker: Broker, limit: int = SNAPSHOT_ROWS.default,
                  groups: int = SNAPSHOT_GROUPS.default) -> QueueSnapshot:
    """The queue and the feed position it reflects, read by one atomic script: up to
    `limit` tasks of each section and the first `groups` concurrency groups by name;
    InvalidTaskError for a count outside its range."""
    limit, groups = SNAPSHOT_ROWS.check(limit), SNAPSHOT_GROUPS.check(groups)
    k = broker.keys
    with redis_errors("read the queue's state"):
        reply = broker.scripts.snapshot(
            keys=[k.ready, k.leased, k.delayed, k.dlq, k.events, k.epoch],
            args=[k.prefix, limit, groups],
        )
    values = [text(v) for v in reply]
    head, rest = values[:8], values[8:]
    leased, rest = _section(rest, 9)
    delayed, rest = _section(rest, 7)
    dead, rest = _section(rest, 6)
    limits, rest = _section(rest, 4)
    return QueueSnapshot(
        queue=broker.queue,
        now_ms=int(head[0]),
        counts=QueueCounts(int(head[1]), int(head[2]), int(head[3]), int(head[4])),
        leased=[LeaseView(r[0], r[2], r[3], stored_int(r[4]), stored_int(r[5]) + 1,
                          stored_int(r[1]), *_progress(r[6], r[7], r[8], r[4]))
                for r in leased],
        delayed=[DelayedView(r[0], r[2], stored_int(r[3]), stored_int(r[1]), r[4], r[5], r[6] != "")
                 for r in delayed],
        dead=[DeadView(r[0], r[1], stored_int(r[2]), stored_int(r[3]), r[4], r[5]) for r in dead],
        epoch=head[5],
        seq=int(head[6]),
        last_ts=int(fingerprint(head[7]) or 0),
        limits=[LimitView(r[0].partition("|")[0], stored_int(r[1]), stored_int(r[2]),
                          stored_int(r[3]), r[0].partition("|")[2]) for r in limits],
        limit_groups=int(rest[0]),
    )


def _section(values: list[str], width: int) -> tuple[list[list[str]], list[str]]:
    """A counted run of `width`-field rows from the front of `values`, and the rest."""
    n = int(values[0])
    end = 1 + n * width
    return [values[i : i + width] for i in range(1, end, width)], values[end:]


def _progress(permille: str, message: str, said_by: str, token: str
              ) -> tuple[float | None, str]:
    """A run's progress as a fraction and its message, if the run that said it (its
    token) is the one that holds the lease now; else none."""
    if not permille or said_by != token:
        return None, ""
    return min(1000, max(0, stored_int(permille))) / 1000, message

