"""A queue's periodic schedules as Redis holds them, for readers without the app (the
web dashboard, `taskq dashboard`): each one's definition as workers last fired it, its
last handled tick, and its next tick by the Redis server's clock; and forgetting one
that no worker declares any more (`taskq schedules --forget`, the dashboard's button)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Literal

from taskq.boundary import redis_errors, text, whole_text
from taskq.broker import Broker
from taskq.codec import read_json
from taskq.results import ForgetOutcome
from taskq.schedules import Timing, check_schedule_name, timing_of
from taskq.shards import layout_holding
from taskq.transport import Client

# Whether the stored description is the definition workers last fired: `current`;
# `older`, one left from another version (a taskq that keeps none fired a changed
# definition since); `missing`, none is stored (only such a taskq fired the schedule)
# or it cannot be read.
DefinitionState = Literal["current", "older", "missing"]

# How long past due a schedule's next tick must be before it is taken for one no worker
# declares any more: a worker that is up fires a due tick within its loop's turn.
FORGET_AFTER_MS = 60_000

# What a forget did: `forgotten`; `missing`, no schedule of that name is listed; `alive`,
# left as it is without force, since a worker may still declare it (its next tick is
# not FORGET_AFTER_MS overdue, or cannot be computed); `fired`, left as it is, a worker
# fired it between the read and the forget.
ForgetVerdict = ForgetOutcome | Literal["alive"]


@dataclass(frozen=True)
class ScheduleView:
    """One schedule. `version` is the definition's hash workers last fired, `definition`
    how the description (`task` to `max_retries`; empty when missing) relates to it.
    `next_tick_ms` is the first tick after `last_tick_ms` by the description (None
    without one it can be computed from): one in the past has not been fired yet, and
    long past means no running worker declares the schedule."""

    name: str
    version: str
    definition: DefinitionState
    last_tick_ms: int
    next_tick_ms: int | None
    task: str
    when: str
    cron: str | None
    tz: str | None
    every_ms: int | None
    policy: str
    grace_ms: int | None
    max_retries: int | None


@dataclass(frozen=True)
class SchedulesView:
    """A queue's schedules, by name, read at `now_ms` (Redis time)."""

    queue: str
    now_ms: int
    schedules: list[ScheduleView]


def schedules_queue(client: Client, queue: str) -> str:
    """The queue whose schedules `queue` names: itself, but for a sharded queue named as
    a whole the shard its schedules fire on (Layout.schedules_shard), since the queue of
    its own name holds nothing."""
    layout = layout_holding(client, queue)
    if layout is None or layout.queue != queue:
        return queue
    return layout.schedules_shard


def read_schedules(broker: Broker) -> SchedulesView:
    """Every schedule workers have fired on the queue. The clock is read after the
    records, so `now_ms` is never before a last tick they hold."""
    with redis_errors("read the queue's schedules"):
        raw = broker.client.hgetall(broker.keys.schedules)
    now = broker.server_time_ms()
    fields: dict[str, dict[str, str]] = {}
    for field, value in raw.items():
        kind, _, name = text(field).partition(":")
        fields.setdefault(name, {})[kind] = text(value)
    views = [_view(name, f) for name, f in sorted(fields.items()) if "last" in f]
    return SchedulesView(broker.queue, now, [v for v in views if v is not None])


@dataclass(frozen=True)
class Forget:
    """What `forget_schedule` did with schedule `name`, and the schedule as it was read
    (None when none is listed), at `now_ms` (Redis time)."""

    name: str
    verdict: ForgetVerdict
    schedule: ScheduleView | None
    now_ms: int

    @property
    def message(self) -> str:
        """One line saying what happened and why, for the CLI and the API."""
        s, name = self.schedule, repr(self.name)
        if self.verdict == "forgotten":
            return f"schedule {name} forgotten; the tasks its ticks made stay"
        if s is None or self.verdict == "missing":
            return f"no schedule {name} on this queue"
        if self.verdict == "fired":
            return (f"schedule {name} was fired as it was being forgotten: a worker still "
                    "declares it; kept")
        if s.next_tick_ms is None:
            return (f"schedule {name} kept: its next tick cannot be computed here, so a "
                    "worker may still declare it; force it to forget it anyway")
        ago = (self.now_ms - s.next_tick_ms) / 1000
        due = f"is due in {-ago:.0f} s" if ago < 0 else f"was due {ago:.0f} s ago"
        return (f"schedule {name} kept: its next tick {due}, so a worker may still declare "
                f"it (a tick {FORGET_AFTER_MS // 1000} s overdue says none does). Remove it "
                "from the app and restart the workers first, or force it: a worker that "
                "still declares it starts it again from then, skipping the ticks between")


def forget_schedule(broker: Broker, name: str, force: bool = False) -> Forget:
    """Forget schedule `name` (see `Broker.forget_schedule`) if no worker seems to
    declare it any more: its next tick is FORGET_AFTER_MS overdue. With `force`, in
    any case, a record too hand-written to be listed included. Only the last tick read
    is forgotten: a worker that fires it in between keeps it (`fired`)."""
    name = check_schedule_name(name)
    fields = ("last", "version", "definition")
    with redis_errors("read a periodic schedule"):
        raw = broker.client.hmget(broker.keys.schedules, [f"{f}:{name}" for f in fields])
    now = broker.server_time_ms()
    stored = {f: text(v) for f, v in zip(fields, raw, strict=True) if v is not None}
    view = _view(name, stored) if "last" in stored else None
    if not force:
        if view is None:
            return Forget(name, "missing", None, now)
        if view.next_tick_ms is None or view.next_tick_ms > now - FORGET_AFTER_MS:
            return Forget(name, "alive", view, now)
    done = broker.forget_schedule(name, None if force or view is None else view.last_tick_ms)
    return Forget(name, done.outcome, view, now)


def _view(name: str, stored: dict[str, str]) -> ScheduleView | None:
    last = whole_text(stored["last"])
    if last is None:
        return None
    version = stored.get("version", "")
    described = _described(stored.get("definition"))
    state: DefinitionState = "missing" if described is None else \
        "current" if described.get("version") == version else "older"
    d: Mapping[str, Any] = described or {}
    timing = timing_of(d)
    cron, tz, every_ms = _text(d, "cron"), _text(d, "tz"), _whole(d, "every_ms")
    if timing is not None:
        when = timing.when
    elif cron is not None:
        when = f"cron {cron!r} ({tz})"
    else:
        when = _every_text(every_ms)
    return ScheduleView(
        name=name, version=version, definition=state, last_tick_ms=last,
        next_tick_ms=None if timing is None else _next_tick(timing, last),
        task=_text(d, "task") or "", when=when, cron=cron, tz=tz, every_ms=every_ms,
        policy=_text(d, "policy") or "", grace_ms=_whole(d, "grace_ms"),
        max_retries=_whole(d, "max_retries"),
    )


def _every_text(every_ms: int | None) -> str:
    """A period no taskq would store (past what a timedelta holds) reads as none."""
    try:
        return "" if every_ms is None else f"every {timedelta(milliseconds=every_ms)}"
    except OverflowError:
        return ""


def _next_tick(timing: Timing, last: int) -> int | None:
    """None when there is none: a cron line naming no date (30 February: croniter's
    errors are ValueErrors), or a last tick past the years a datetime holds."""
    try:
        return timing.next_tick(last)
    except (ValueError, OverflowError):
        return None


def _described(raw: str | None) -> dict[str, Any] | None:
    """The stored description decoded, or None when there is none or it is no object."""
    if raw is None:
        return None
    try:
        described = read_json(raw)
    except (ValueError, RecursionError):
        return None
    return described if isinstance(described, dict) else None


def _text(d: Mapping[str, Any], key: str) -> str | None:
    value = d.get(key)
    return value if isinstance(value, str) else None


def _whole(d: Mapping[str, Any], key: str) -> int | None:
    value = d.get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) else None

