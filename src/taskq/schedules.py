"""Periodic schedules: their declaration, its checks, and the tick times they name.

A schedule only names instants; which of them are due is decided by `fire.lua` against
the Redis server's clock, so workers on hosts whose clocks disagree still agree on it.
"""

from __future__ import annotations

import functools
import hashlib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, timezone, tzinfo
from typing import Any, Literal, get_args
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from croniter import CroniterBadCronError, CroniterBadDateError, croniter

from taskq.codec import args_payload, encode_payload
from taskq.errors import ConfigError, InvalidTaskError
from taskq.keys import check_task_id, schedule_task_id
from taskq.limits import (
    MAX_DEFINITION_BYTES,
    MAX_PAYLOAD_BYTES,
    MAX_RETRIES,
    PRIORITY,
    shown,
    utf8,
)

# What happens to ticks that came and went while no worker ran:
#   skip   - dropped; only a tick fired at most `grace` after its time runs
#   latest - the latest of them runs once, the rest are dropped (Celery beat's way)
#   all    - each runs, at most MAX_CATCH_UP of the latest ones
Policy = Literal["skip", "latest", "all"]
POLICIES: tuple[Policy, ...] = get_args(Policy)
# Running the latest once loses no "at least once per period" promise (a nightly job
# still runs after a deploy that spanned midnight) and never floods the queue.
DEFAULT_POLICY: Policy = "latest"
DEFAULT_GRACE = timedelta(minutes=1)
# Ticks one firing turns into tasks under "all": a worker fleet down for a day with a
# one-second schedule must not come back to 86,400 tasks.
MAX_CATCH_UP = 100
MAX_GRACE = timedelta(days=3650)
# The least `grace` a worker can keep under `skip`: it fires a due tick up to a maintenance
# turn (100 ms while it has work) and a round trip late, by design never early, so under
# a shorter grace `skip` would drop most ticks, and say nothing.
MIN_GRACE = timedelta(seconds=1)
# A longer interval puts its next tick past the latest time the scripts take (2286).
MAX_EVERY = timedelta(days=3650)
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
# How `str(datetime.timezone(offset))` writes a fixed offset, which ZoneInfo cannot read.
FIXED_OFFSET = re.compile(r"UTC([+-])(\d\d):(\d\d)(?::(\d\d)(?:\.(\d{6}))?)?")
# croniter's random (R) and hashed (H) values: a value drawn by each iterator croniter
# builds would have every worker, and every call, name its own ticks, and fire.lua
# takes any tick later than the last, so an hourly `R * * * *` would fire many times an
# hour.
DRAWN_VALUE = re.compile(r"[hr](\(\d+-\d+\))?(/\d+)?", re.IGNORECASE)


@dataclass(frozen=True)
class Timing:
    """When a schedule's ticks fall: `cron` read in `tz`, or every `every_ms` since
    the Unix epoch (so every worker names the same ticks). Exactly one is set."""

    cron: str | None
    every_ms: int | None
    tz: tzinfo

    @property
    def when(self) -> str:
        """The timing as people write it: the cron line and zone, or the period."""
        if self.cron is not None:
            return f"cron {self.cron!r} ({zone_text(self.tz)})"
        return f"every {timedelta(milliseconds=self.every_ms or 0)}"

    def next_tick(self, after_ms: int) -> int:
        """The first tick strictly after `after_ms` (ms since the epoch)."""
        if self.every_ms is not None:
            return (after_ms // self.every_ms + 1) * self.every_ms
        it = self._cron(after_ms)
        while True:
            tick = it.get_next(datetime)
            if not self._dropped(tick):
                return _ms(tick)

    def ticks(self, after_ms: int, upto_ms: int, limit: int) -> list[int]:
        """The latest `limit` ticks `t` with `after_ms < t <= upto_ms`, earliest first."""
        found: list[int] = []
        if self.every_ms is not None:
            tick = upto_ms // self.every_ms * self.every_ms
            while tick > after_ms and len(found) < limit:
                found.append(tick)
                tick -= self.every_ms
        else:
            # get_prev from just past upto_ms includes a tick at upto_ms itself.
            it = self._cron(upto_ms + 1)
            while len(found) < limit:
                when = it.get_prev(datetime)
                tick = _ms(when)
                if tick <= after_ms:
                    break
                if not self._dropped(when):
                    found.append(tick)
        return found[::-1]

    def _dropped(self, tick: datetime) -> bool:
        """Whether `tick` is the second coming of a wall-clock time that a change back
        from summer time repeats, for a cron at fixed times: a nightly job at 02:30 runs
        once that night, as cron itself does it. A cron whose minute or hour field is a
        wildcard (`0 * * * *`, `*/15 2 * * *`; cron's own rule) keeps it: each of the two
        hours is an hour of its own."""
        if self._wildcard:
            return False
        local = tick.astimezone(self.tz)
        first, second = local.replace(fold=0).utcoffset(), local.replace(fold=1).utcoffset()
        return first != second and local.utcoffset() == second

    @functools.cached_property
    def _wildcard(self) -> bool:
        assert self.cron is not None
        fields = self.cron.split()
        if len(fields) == 1:  # a macro (@daily...): only @hourly names every hour
            return fields[0].lower() == "@hourly"
        return fields[0].startswith("*") or fields[1].startswith("*")

    def _cron(self, start_ms: int) -> croniter:
        assert self.cron is not None, "a schedule with every_ms has no cron iterator"
        return croniter(self.cron, _instant(start_ms, self.tz))


@dataclass(frozen=True)
class Schedule:
    """One periodic task: which task, with which arguments, at which instants.

    Exactly one of `cron` (a cron expression, read in `tz`) and `every_ms` (a period,
    its ticks at whole multiples of it since the Unix epoch, so every worker names the
    same ones) is set. `version` changes whenever anything that decides what runs
    changes, so a redeployed schedule is recognised as replacing the old one."""

    name: str
    task: str
    cron: str | None
    every_ms: int | None
    tz: tzinfo
    payload: str
    policy: Policy
    grace_ms: int
    max_retries: int
    # Its task's, as for any call of it (0 to 9, higher first).
    priority: int = PRIORITY.default

    @property
    def version(self) -> str:
        definition: list[Any] = [self.task, self.cron, self.every_ms, zone_text(self.tz),
                                 self.payload, self.policy, self.grace_ms, self.max_retries]
        if self.priority != PRIORITY.default:  # a default one keeps the versions it had
            definition.append(self.priority)
        return hashlib.sha256(json.dumps(definition).encode()).hexdigest()[:16]

    @property
    def timing(self) -> Timing:
        return Timing(self.cron, self.every_ms, self.tz)

    @property
    def when(self) -> str:
        """The schedule as people write it: the cron line and zone, or the period."""
        return self.timing.when

    @property
    def definition(self) -> str:
        """What fire.lua keeps beside the version, for readers without the app (the
        dashboard): JSON of the version, task, timing, policy, grace and retries. The
        arguments are left out: each fired task's record holds them, and they may be
        large."""
        return json.dumps({
            "version": self.version, "task": self.task, "cron": self.cron,
            "tz": None if self.cron is None else zone_text(self.tz),
            "every_ms": self.every_ms, "policy": self.policy, "grace_ms": self.grace_ms,
            "max_retries": self.max_retries, "priority": self.priority,
        }, separators=(",", ":"))

    def task_id(self, tick_ms: int) -> str:
        """The id of the task a tick becomes: the same on every worker, at every try."""
        return schedule_task_id(self.name, tick_ms)

    def next_tick(self, after_ms: int) -> int:
        """The first tick strictly after `after_ms` (ms since the epoch)."""
        return self.timing.next_tick(after_ms)

    def ticks(self, after_ms: int, upto_ms: int, limit: int) -> list[int]:
        """The latest `limit` ticks `t` with `after_ms < t <= upto_ms`, earliest first."""
        return self.timing.ticks(after_ms, upto_ms, limit)


def make_schedule(
    *,
    name: str,
    task: str,
    cron: str | None,
    every: timedelta | None,
    tz: tzinfo | str | None,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    policy: str,
    grace: timedelta,
    max_retries: int,
    priority: int = PRIORITY.default,
    max_payload_bytes: int = MAX_PAYLOAD_BYTES.default,
) -> Schedule:
    """A checked `Schedule`, or `ConfigError` naming what is wrong with the declaration."""
    check_schedule_name(name)
    if (cron is None) == (every is None):
        raise ConfigError(f"schedule {name!r}: give exactly one of cron=... and every=...")
    zone = _zone(name, tz)
    every_ms = None
    if every is not None:
        if tz is not None:
            raise ConfigError(f"schedule {name!r}: tz applies to cron=..., not every=...")
        every_ms = _span_ms(name, "every", every, MAX_EVERY)
    else:
        if not isinstance(cron, str) or not croniter.is_valid(cron) \
                or len(cron.split()) > 6:
            raise ConfigError(f"schedule {name!r}: {shown(cron)} is not a valid cron "
                              "expression (5 fields, or 6 with seconds last; no year)")
        if drawn(cron):
            raise ConfigError(f"schedule {name!r}: cron {cron!r} draws a value (R or H): "
                              "name the minute, hour or second, so every worker fires "
                              "the same ticks")
        try:
            croniter(cron, datetime.now(zone)).get_next(datetime)
        except CroniterBadCronError as e:
            raise ConfigError(f"schedule {name!r}: cron {cron!r}: {e}") from e
        except CroniterBadDateError:
            raise ConfigError(f"schedule {name!r}: cron {cron!r} names no date that "
                              "comes (such as 30 February), so it would never fire") from None
    if policy not in POLICIES:
        raise ConfigError(f"schedule {name!r}: unknown policy {shown(policy)}; use one of "
                          f"{', '.join(POLICIES)}")
    grace_ms = _grace_ms(name, grace, policy)
    payload = encode_payload(args_payload(args, kwargs), max_payload_bytes)
    schedule = Schedule(name=name, task=task, cron=cron, every_ms=every_ms, tz=zone,
                        payload=payload, policy=policy, grace_ms=grace_ms,
                        max_retries=MAX_RETRIES.check(max_retries, error=ConfigError),
                        priority=PRIORITY.check(priority, error=ConfigError))
    size = len(schedule.definition.encode())
    if size > MAX_DEFINITION_BYTES:
        raise ConfigError(f"schedule {name!r}: its definition takes {size} bytes, over "
                          f"{MAX_DEFINITION_BYTES}: shorten its cron expression or task name")
    return schedule


SCHEDULE_NAME_RULE = "1-100 letters, digits, '_', '.', ':' or '-', other than '.' and '..'"


def check_schedule_name(name: object) -> str:
    """`name` if a schedule can bear it (its tasks' ids are built from it), else
    `InvalidTaskError`."""
    # "." and ".." would be resolved away in a URL path (`/api/schedules/../forget`).
    if not isinstance(name, str) or not name or len(name) > 100 or name in (".", ".."):
        raise InvalidTaskError(f"invalid schedule name {shown(name)}: use {SCHEDULE_NAME_RULE}")
    try:
        check_task_id(schedule_task_id(name, 0))
    except InvalidTaskError:
        raise InvalidTaskError(f"invalid schedule name {shown(name)}: use "
                               f"{SCHEDULE_NAME_RULE}") from None
    return name


def zone_text(tz: tzinfo) -> str:
    """The zone's name as `zone_from_text` reads it back: an IANA key, `UTC`, or a
    fixed offset as `UTC+05:30`; other tzinfo kinds as they print themselves. A
    `datetime.timezone` is its offset whatever name it was given: a reader would take
    `timezone(timedelta(hours=10), "Australia/Sydney")` for the IANA zone, whose offset
    is another half the year, and the same text must not stand for two zones in a
    schedule's version (`timezone(timedelta(hours=1), "CET")` against ZoneInfo("CET"))."""
    if isinstance(tz, timezone):
        return str(timezone(tz.utcoffset(None)))
    return str(getattr(tz, "key", None) or tz)


def zone_from_text(text: str) -> tzinfo | None:
    """The zone `zone_text` named, or None when this process cannot rebuild it."""
    offset = FIXED_OFFSET.fullmatch(text)
    try:
        if offset is not None:
            sign, hours, minutes, seconds, micros = offset.groups()
            delta = timedelta(hours=int(hours), minutes=int(minutes),
                              seconds=int(seconds or 0), microseconds=int(micros or 0))
            return timezone(-delta if sign == "-" else delta)
        return UTC if text == "UTC" else ZoneInfo(text)
    except (ZoneInfoNotFoundError, ValueError, OSError):  # OSError: a name too long
        return None


def timing_of(described: Mapping[str, Any]) -> Timing | None:
    """The timing a stored definition (`Schedule.definition`, decoded) names, or None
    when it names none this process can rebuild: an unknown zone, a cron line this
    croniter cannot read, a malformed entry."""
    cron, every_ms, tz = described.get("cron"), described.get("every_ms"), described.get("tz")
    if isinstance(every_ms, int) and not isinstance(every_ms, bool) \
            and 0 < every_ms <= MAX_EVERY // timedelta(milliseconds=1) and cron is None:
        return Timing(None, every_ms, UTC)
    if not isinstance(cron, str) or not isinstance(tz, str) or every_ms is not None:
        return None
    zone = zone_from_text(tz)
    if zone is None or not croniter.is_valid(cron) or drawn(cron):
        return None
    return Timing(cron, None, zone)


def drawn(cron: str) -> bool:
    """Whether cron line `cron` holds a value croniter draws (R, or H, hashed)."""
    return any(DRAWN_VALUE.fullmatch(value)
               for field in cron.split() for value in field.split(","))


# Zone keys that name whatever zone the host is set to: every worker would fire its own
# host's 09:00 under one version, so a daily schedule could fire twice a day.
HOST_ZONES = frozenset({"localtime", "posixrules"})
# tzinfo kinds that are whatever zone the host is set to, printing the same on every
# host (dateutil's), so that one version stands for each host's own zone likewise.
HOST_ZONE_KINDS = frozenset({("dateutil.tz.tz", "tzlocal"), ("dateutil.tz.win", "tzwinlocal")})


def _zone(name: str, tz: tzinfo | str | None) -> tzinfo:
    if tz is None:
        return UTC
    key = tz if isinstance(tz, str) else getattr(tz, "key", None)
    if (isinstance(key, str) and key in HOST_ZONES) or \
            (type(tz).__module__, type(tz).__name__) in HOST_ZONE_KINDS:
        said = repr(key) if isinstance(key, str) else shown(tz)
        raise ConfigError(f"schedule {name!r}: tz {said} is the host's own zone, which "
                          "may differ between workers; name it (e.g. 'Europe/Paris')")
    if isinstance(tz, str):
        try:
            return ZoneInfo(tz)
        except (ZoneInfoNotFoundError, ValueError) as e:
            raise ConfigError(f"schedule {name!r}: unknown time zone {tz!r}") from e
    if not isinstance(tz, tzinfo) or tz.utcoffset(datetime.now()) is None:
        raise ConfigError(f"schedule {name!r}: tz must be a time zone (a ZoneInfo, "
                          f"datetime.UTC or an IANA name), not {shown(tz)}")
    try:
        datetime.now(tz)  # a tzinfo of its own may give an offset datetime refuses
    except (ValueError, TypeError) as e:
        raise ConfigError(f"schedule {name!r}: tz {shown(tz)} is no usable time zone: "
                          f"{e}") from None
    try:
        named = zone_text(tz)
    except Exception as e:  # a tzinfo of its own whose name cannot be made
        raise ConfigError(f"schedule {name!r}: tz {shown(tz)} has no name: "
                          f"{type(e).__name__}") from None
    # Its name goes to Redis in the schedule's definition, which Redis must read back.
    if not isinstance(named, str) or not utf8(named):
        raise ConfigError(f"schedule {name!r}: tz {shown(tz)} has a name that cannot be "
                          "sent to Redis (a lone surrogate)")
    return tz


def _span_ms(name: str, what: str, value: object, most: timedelta) -> int:
    """`value` in ms if it is a timedelta of whole ms from 1 ms to `most`, else
    `ConfigError`. A fraction is refused, not rounded: ticks are whole ms on Redis's
    clock, and 1.5 ms taken as 1 would fire half as often again as declared."""
    if not isinstance(value, timedelta) or value < timedelta(milliseconds=1):
        raise ConfigError(f"schedule {name!r}: {what} must be a timedelta of at least "
                          f"1 ms, not {shown(value)}")
    if value > most:
        raise ConfigError(f"schedule {name!r}: {what} {value} is over {most.days} days")
    ms, rest = divmod(value, timedelta(milliseconds=1))
    if rest:
        raise ConfigError(f"schedule {name!r}: {what} {value} is not a whole number of "
                          "milliseconds (schedules tick in ms)")
    return ms


def _grace_ms(name: str, grace: object, policy: str) -> int:
    """`grace` in ms; under `skip`, the only policy that reads it, at least MIN_GRACE."""
    grace_ms = _span_ms(name, "grace", grace, MAX_GRACE)
    if policy == "skip" and grace_ms < MIN_GRACE // timedelta(milliseconds=1):
        raise ConfigError(f"schedule {name!r}: grace {grace} under policy 'skip' is under a "
                          "second: workers fire a tick up to a maintenance turn (0.1 s) and "
                          "a round trip after it is due, so a tick would be dropped as late, "
                          "most under load")
    return grace_ms


def _instant(ms: int, tz: tzinfo) -> datetime:
    return (EPOCH + timedelta(milliseconds=ms)).astimezone(tz)


def _ms(instant: datetime) -> int:
    return (instant - EPOCH) // timedelta(milliseconds=1)
