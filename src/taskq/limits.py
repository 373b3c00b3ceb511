"""Every duration, count and size taskq accepts: its default, its range, and the checks.

The ranges are generous, but they keep every sum a script makes (now + delay, now +
lease, a backoff, a TTL in ms) far inside 2^53, below which Lua's numbers (doubles)
still count single milliseconds, and inside what Redis accepts (PX, PEXPIRE, XTRIM
MAXLEN). Each script checks its arguments against the same maxima before its first
write (`LIMITS` in lua/_common.lua; a test pins the two tables together).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import Generic, TypeVar

from taskq.errors import InvalidTaskError, TaskqError

N = TypeVar("N", int, float)
V = TypeVar("V")

# A duration a caller gives: seconds, or a timedelta (as `periodic` takes its period).
Seconds = float | timedelta

DAY = 86_400
WEEK = 7 * DAY
TEN_YEARS = 3650 * DAY


def plain_number(value: V) -> V:
    """An int or float subclass's value as a plain int or float (through the base
    class's own method, so the subclass's overrides are never called); anything else
    as it is. Checked and sent as the subclass, a value could compare as it likes
    (NaN as in range) or be sent by its name (an `(int, Enum)` member as `Kind.FEW`)."""
    if isinstance(value, bool):
        return value
    if isinstance(value, int):
        return int.__int__(value)  # type: ignore[return-value]
    if isinstance(value, float):
        return float.__float__(value)  # type: ignore[return-value]
    return value


@dataclass(frozen=True)
class Range(Generic[N]):
    """The values one argument or setting accepts: numbers (integers only when `whole`)
    from `low` to `high`, `low` itself refused when `above` (a lease of 0 holds nothing)."""

    name: str
    low: N
    high: N
    default: N
    unit: str = ""
    whole: bool = False
    above: bool = False

    def holds(self, value: object) -> bool:
        return self._held(value) is not None

    def _held(self, value: object) -> N | None:
        """`value` as a plain number if the range holds it, else None."""
        kinds = int if self.whole else (int, float)
        if isinstance(value, bool) or not isinstance(value, kinds):
            return None
        # Compared as a plain number, never converted to float: NaN fails both tests and
        # 10**400 no test overflows.
        plain = plain_number(value)
        if (plain > self.low if self.above else plain >= self.low) and plain <= self.high:
            # A float's zero with its sign as plain zero: a message would say "-0s".
            return abs(plain) if plain == 0 else plain  # type: ignore[return-value]
        return None

    def _seconds(self, value: timedelta) -> object:
        """`value` as a number this range may hold; left as it is where it holds no
        seconds, so the error names what the caller gave."""
        if self.unit != "seconds":
            return value
        seconds = value.total_seconds()
        return int(seconds) if self.whole and seconds.is_integer() else seconds

    @property
    def rule(self) -> str:
        """What a valid value is, as in "a number of seconds from 0 to 86400"."""
        kind = "a whole number" if self.whole else "a number"
        unit = f" of {self.unit}" if self.unit else ""
        low, high = number_text(self.low), number_text(self.high)
        span = f"above {low} and at most {high}" if self.above else f"between {low} and {high}"
        return f"{kind}{unit} {span}"

    def check(self, value: object, name: str | None = None,
              error: type[TaskqError] = InvalidTaskError) -> N:
        """`value` (a timedelta as its seconds, where the range is of seconds), or
        `error` naming the argument, the value and the range."""
        plain = self._held(value)
        if plain is None and isinstance(value, timedelta):  # numbers pay nothing for it
            plain = self._held(self._seconds(value))
        if plain is None:
            raise error(f"{name or self.name} must be {self.rule}, not {shown(value)}")
        return plain


def number_text(n: float) -> str:
    return str(int(n)) if float(n).is_integer() else repr(n)


def shown(value: object) -> str:
    """`repr(value)` short enough for an error message, whatever the caller passed."""
    try:
        text = repr(value)
    except ValueError:  # an int too long to print in decimal
        return f"an integer of {value.bit_length()} bits" if isinstance(value, int) else "?"
    return text if len(text) <= 80 else text[:77] + "..."


# Broker arguments (and the settings that feed them).
DELAY = Range("delay", 0.0, float(TEN_YEARS), 0.0, "seconds")
LEASE_SECONDS = Range("lease_seconds", 0.0, float(WEEK), 10.0, "seconds", above=True)
# A worker's leases are kept by heartbeats a third of a lease apart; shorter than this,
# a beat held up by a busy handler thread for tens of ms comes after its lease expired,
# and tasks are reaped and run again while their first run goes on.
WORKER_LEASE_SECONDS = Range("lease_seconds", 0.25, float(WEEK), 10.0, "seconds")
BACKOFF_BASE = Range("backoff_base", 0.0, float(DAY), 1.0, "seconds")
BACKOFF_MAX = Range("backoff_max", 0.0, float(DAY), 60.0, "seconds")
COMPLETED_TTL = Range("completed_ttl", 0.0, float(TEN_YEARS), float(DAY), "seconds", above=True)
RESULT_TTL = Range("result_ttl", 0.0, float(TEN_YEARS), float(DAY), "seconds", above=True)
DEAD_TTL = Range("dead_ttl", 0.0, float(TEN_YEARS), float(WEEK), "seconds", above=True)
IDEMPOTENCY_TTL = Range("idempotency_ttl", 1, TEN_YEARS, DAY, "seconds", whole=True)
EVENTS_RETENTION = Range("events_retention", 1, 10**9, 100_000, "events", whole=True)
MAX_PAYLOAD_BYTES = Range("max_payload_bytes", 2, 512 * 2**20, 2**20, "bytes", whole=True)
MAX_RESULT_BYTES = Range("max_result_bytes", 4, 512 * 2**20, 2**20, "bytes", whole=True)
MAX_RETRIES = Range("max_retries", 0, 1000, 3, whole=True)
# A task's priority: higher runs first; the default is in the middle, so a task can be
# made more or less urgent than the rest without touching them.
PRIORITY = Range("priority", 0, 9, 5, whole=True)
LEASE_COUNT = Range("count", 1, 10_000, 1, "tasks", whole=True)
BATCH_SIZE = Range("batch_size", 1, 10_000, 1000, "tasks", whole=True)
# Steps in one workflow, all its stages together (start_flow.lua checks the same).
FLOW_STEPS = Range("steps", 1, 10_000, 1, "steps", whole=True)
# A stage or a step within one, counted from 1 (the most steps a workflow has).
STEP_NUMBER = Range("stage", 1, 10_000, 1, whole=True)
LIMIT = Range("limit", 1, 100_000, 100, "tasks", whole=True)
# Where a listing of the DLQ starts, counted from its newest end.
DLQ_START = Range("start", 0, 2**40, 0, "entries", whole=True)
# What one snapshot lists of each section, and of the concurrency groups (0: counts):
# a limit kept per account may have thousands of groups, and the reply (and a
# dashboard's table) must stay bounded.
SNAPSHOT_ROWS = Range("limit", 0, LIMIT.high, 20, "tasks", whole=True)
SNAPSHOT_GROUPS = Range("groups", 0, LIMIT.high, 1000, "groups", whole=True)
TOKEN = Range("token", 0, 2**53, 0, whole=True)
# Log entries one read of a task's events scans at most, newest first: a long log cannot
# make one look at a task slow. 0 reads none (the record alone is wanted).
HISTORY_SCAN = Range("scan", 0, 1_000_000, 10_000, "events", whole=True)
# The latest `run_at` a task may name, in server milliseconds (the year 2286).
RUN_AT_MS_MAX = 10**13
# A schedule's tick, as a caller names the last one it read (forget_schedule.lua).
TICK_MS = Range("last_tick_ms", 0, RUN_AT_MS_MAX, 0, "ms", whole=True)
# A BLPOP timeout of 0 waits forever: a wait for work must end.
TIMEOUT = Range("timeout", 0.0, float(DAY), 1.0, "seconds", above=True)
# A result's wait: 0 reads the outcome once and waits for nothing, as a Future's.
RESULT_TIMEOUT = Range("timeout", 0.0, float(DAY), 1.0, "seconds")

# Settings only (and Simulation's, the seed's simulated task).
REDIS_TIMEOUT = Range("redis_timeout_seconds", 0.0, 3600.0, 5.0, "seconds", above=True)
WORK_SECONDS = Range("work_seconds", 0.0, float(DAY), 3.0, "seconds")
AFTER_EFFECT_SECONDS = Range("after_effect_seconds", 0.0, float(DAY), 0.0, "seconds")
FAIL_RATE = Range("fail_rate", 0.0, 1.0, 0.0)
POLL_SECONDS = Range("poll_seconds", 0.0, 3600.0, 0.5, "seconds", above=True)
SHUTDOWN_GRACE = Range("shutdown_grace_seconds", 0.0, float(DAY), 10.0, "seconds")
# How long a handler may run (0: no limit), per task (`@app.task(time_limit=...)`) or by
# default (TASKQ_TIME_LIMIT_SECONDS).
TIME_LIMIT = Range("time_limit", 0.0, float(WEEK), 0.0, "seconds")
# A worker leases up to its free slots in one call, so it can never want more than that.
CONCURRENCY = Range("concurrency", 1, LEASE_COUNT.high, 1, "handlers", whole=True)
# Leased tasks a worker process holds beyond its handlers, each started the moment a
# handler comes free (see taskq.worker.runner); with its concurrency, a lease's count.
PREFETCH = Range("prefetch", 0, LEASE_COUNT.high - 1, 0, "tasks", whole=True)
# More copies than cores only adds contention; the cap catches a typo like 1000.
WORKER_PROCESSES = Range("worker_processes", 1, 256, 1, "processes", whole=True)
# A queue's weight on a worker that leases from several (`--queue high:3,low:1`): how
# often it is tried first, relative to the others; the cap catches a typo like 3000.
QUEUE_WEIGHT = Range("weight", 1, 1000, 1, whole=True)
# A sharded queue's shards (see taskq.shards); 1 is a plain queue.
SHARDS = Range("shards", 1, 64, 1, whole=True)
# How far a running task has got (`current_task().progress`), kept in thousandths.
PROGRESS = Range("progress", 0.0, 1.0, 0.0)
MAX_PROGRESS_MESSAGE_CHARS = 200
# Heartbeats at most every 15 s (the feed protocol's promise).
FEED_HEARTBEAT = Range("feed_heartbeat_seconds", 0.0, 15.0, 15.0, "seconds", above=True)
FEED_SEND_TIMEOUT = Range("feed_send_timeout_seconds", 0.0, 3600.0, 10.0, "seconds", above=True)
# Queues one `taskq serve` follows for feed clients at once: a busy queue's reader keeps
# its last 10,000 events in memory, about 5 MB (see taskq.feed.readers).
FEED_MAX_QUEUES = Range("feed_max_queues", 1, 4096, 64, "queues", whole=True)
REQUEST_TIMEOUT = Range("request_timeout_seconds", 0.0, 3600.0, 10.0, "seconds", above=True)
# How long a producer's call sends its tasks again while Redis cannot answer (restarting,
# loading, busy: see taskq.outages); 0 fails at the first refusal the client's own
# retries did not ride out.
PRODUCER_RETRY = Range("producer_retry_seconds", 0.0, 300.0, 5.0, "seconds")
# The command line's own numbers. `taskq enqueue COUNT` builds its tasks in memory first.
ENQUEUE_COUNT = Range("count", 0, 1_000_000, 5, "tasks", whole=True)
DASHBOARD_INTERVAL = Range("--interval", 0.0, float(DAY), 1.0, "seconds", above=True)
DASHBOARD_ROWS = Range("--rows", 1, 1000, 10, "tasks", whole=True)
PORT = Range("--port", 0, 65535, 8000, whole=True)

# Each numeric Simulation field and its range; Simulation checks every one at start.
SIMULATION: dict[str, Range[int] | Range[float]] = {
    "work_seconds": WORK_SECONDS,
    "after_effect_seconds": AFTER_EFFECT_SECONDS,
    "fail_rate": FAIL_RATE,
}

# Each numeric Settings field and its range; Settings checks every one at start.
SETTINGS: dict[str, Range[int] | Range[float]] = {
    "redis_timeout_seconds": REDIS_TIMEOUT,
    "lease_seconds": WORKER_LEASE_SECONDS,
    "backoff_base_seconds": BACKOFF_BASE,
    "backoff_max_seconds": BACKOFF_MAX,
    "poll_seconds": POLL_SECONDS,
    "shutdown_grace_seconds": SHUTDOWN_GRACE,
    "time_limit_seconds": TIME_LIMIT,
    "concurrency": CONCURRENCY,
    "prefetch": PREFETCH,
    "worker_processes": WORKER_PROCESSES,
    "shards": SHARDS,
    "events_retention": EVENTS_RETENTION,
    "max_payload_bytes": MAX_PAYLOAD_BYTES,
    "max_result_bytes": MAX_RESULT_BYTES,
    "idempotency_ttl_seconds": IDEMPOTENCY_TTL,
    "completed_ttl_seconds": COMPLETED_TTL,
    "dead_ttl_seconds": DEAD_TTL,
    "feed_heartbeat_seconds": FEED_HEARTBEAT,
    "feed_send_timeout_seconds": FEED_SEND_TIMEOUT,
    "feed_max_queues": FEED_MAX_QUEUES,
    "request_timeout_seconds": REQUEST_TIMEOUT,
    "producer_retry_seconds": PRODUCER_RETRY,
}

DURATIONS: dict[str, Range[float]] = {
    r.name: r for r in (DELAY, LEASE_SECONDS, BACKOFF_BASE, BACKOFF_MAX, COMPLETED_TTL,
                        RESULT_TTL, DEAD_TTL, TIMEOUT)
}

# Strings: lengths in characters; every one must also be encodable as UTF-8.
MAX_WORKER_ID_CHARS = 512
MAX_REQUEST_ID_CHARS = 200
# A periodic schedule's definition as fire.lua keeps it (JSON, `Schedule.definition`):
# a task name and a cron line take a few hundred bytes at most.
MAX_DEFINITION_BYTES = 4096
# Error text is kept, not refused (see `error_text`), but only this much of it.
MAX_ERROR_CHARS = 8192
# A failure's traceback is kept likewise, cut to its last this many characters (the
# frames nearest the error).
MAX_TRACEBACK_CHARS = 32768


def to_ms(seconds: object, what: str) -> int:
    """Whole milliseconds of `seconds`, checked against the range of the duration `what`
    (a key of `DURATIONS`), or `InvalidTaskError` naming it, the value and the range."""
    bound = DURATIONS[what]
    ms = round(bound.check(seconds) * 1000)
    return max(1, ms) if bound.above else ms


def utf8(value: str) -> bool:
    """Whether `value` can be sent to Redis: a lone surrogate has no UTF-8 form."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def check_text(value: object, name: str, most: int) -> str:
    """`value` if it is a string of 1 to `most` characters of UTF-8 text, else
    `InvalidTaskError` naming the argument, the value and the rule."""
    if not isinstance(value, str) or not 0 < len(value) <= most:
        raise InvalidTaskError(
            f"{name} must be a string of 1 to {most} characters, not {shown(value)}"
        )
    if not utf8(value):
        raise InvalidTaskError(
            f"{name} must be UTF-8 text, not {shown(value)}: it holds a lone surrogate"
        )
    return value


def error_text(error: object, name: str = "error", most: int = MAX_ERROR_CHARS,
               keep_end: bool = False) -> str:
    """A worker's description of a failure as it can be stored: characters UTF-8 cannot
    encode (lone surrogates) written as escapes, and cut to `most` characters (its last
    ones when `keep_end`). Never refused for its content: a worker reporting an odd
    exception must not crash too."""
    if not isinstance(error, str):
        raise InvalidTaskError(f"{name} must be a string, not {shown(error)}")
    if not utf8(error):
        error = error.encode("utf-8", "backslashreplace").decode("utf-8")
    if len(error) <= most:
        return error
    if keep_end:
        cut = f"[{len(error) - most} characters cut]\n"
        return cut + error[len(error) - most + len(cut):]
    return error[:most]

