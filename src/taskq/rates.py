"""Rate limits: how fast a task may start, across every worker of its queue.

A limit such as "100/s" is kept as the spacing between starts (GCRA, the generic cell
rate algorithm): lease.lua gives each start of a limited task its own slot, the
theoretical arrival time of the limit advancing by one spacing per start, so however
many workers lease at once the starts never run ahead of the rate (plus `burst`). A task
that comes before its slot waits on delayed until it, its slot kept. A queue may have a
limit of its own (`App.queue_rate_limit`), which every start of its tasks passes too.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from taskq.errors import ConfigError
from taskq.limits import plain_number, shown

UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0}
# The name a queue's own limit goes by in lease.lua: every task of the queue starts under
# it, beside its name's. No task name can be this (see taskq.keys.check_task_name).
QUEUE_LIMIT = "*"
# ASCII digits only: float() reads other scripts' digits too (Arabic-Indic, full-width),
# and no one reviewing a config would take those for a number.
RATE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*/\s*([smh])\s*$", re.ASCII)
# Spacings lease.lua accepts, in microseconds: a million per second down to one a day.
MIN_INTERVAL_US = 1
MAX_INTERVAL_US = 86_400_000_000
MAX_BURST = 10_000


@dataclass(frozen=True)
class RateLimit:
    """At most `per_second` starts a second of the task `name`, with up to `burst` of them
    at once after a quiet spell (1: evenly spaced)."""

    name: str
    per_second: float
    burst: int = 1

    def __post_init__(self) -> None:
        """ConfigError for a rate or burst lease.lua cannot keep: one made here rather
        than by `parse_rate` (a broker's `rate_limits` set by hand) would otherwise fail
        each lease with a bare Python error, or run a million a second for a negative
        rate."""
        owner = "the queue's own rate limit" if self.name == QUEUE_LIMIT \
            else f"the rate limit of task {self.name!r}"
        rate = self.per_second
        # A float first: an int past a float's range (10**400) has no spacing either.
        as_float = float(rate) if isinstance(rate, float) or (
            isinstance(rate, int) and not isinstance(rate, bool) and abs(rate) < 2**64) \
            else math.nan
        if not (math.isfinite(as_float) and as_float > 0
                and MIN_INTERVAL_US <= 1_000_000 / as_float <= MAX_INTERVAL_US):
            raise ConfigError(f"{owner}: per_second must be a number from one a day "
                              f"(1/86400) to a million, not {shown(rate)}")
        burst = self.burst
        if isinstance(burst, bool) or not isinstance(burst, int) or \
                not 1 <= burst <= MAX_BURST:
            raise ConfigError(f"{owner}: burst must be a whole number from 1 to "
                              f"{MAX_BURST}, not {shown(burst)}")

    @property
    def interval_us(self) -> int:
        """The spacing between starts, in microseconds (what lease.lua takes), rounded
        up: a spacing rounded down would let a window just under a second of "3/s" hold
        a fourth start. (Rounded to a millionth first, so that a spacing that is whole
        but for a float's last bit, as 1e6 / (1 / 3600) may be, stays whole.)"""
        return max(MIN_INTERVAL_US, math.ceil(round(1_000_000 / self.per_second, 6)))


def parse_rate(name: str, text: object, burst: object = 1, owner: str = "") -> RateLimit:
    """The limit `text` ("100/s", "30/m", "500/h") of task `name`, or `ConfigError`
    naming `owner` (default: the task) and what is wrong."""
    owner = owner or f"task {name!r}"
    match = RATE.match(text) if isinstance(text, str) else None
    if match is None:
        raise ConfigError(f"{owner}: rate_limit must look like '100/s', '30/m' or "
                          f"'500/h', not {shown(text)}")
    per_second = float(match[1]) / UNITS[match[2]]
    interval = 1_000_000 / per_second if per_second > 0 else float("inf")
    if not MIN_INTERVAL_US <= interval <= MAX_INTERVAL_US:
        raise ConfigError(f"{owner}: rate_limit {shown(text)} is outside what taskq "
                          "supports (from one a day to a million a second)")
    burst = plain_number(burst)
    if not isinstance(burst, int) or isinstance(burst, bool) or not 1 <= burst <= MAX_BURST:
        raise ConfigError(f"{owner}: rate_burst must be a whole number from 1 to "
                          f"{MAX_BURST}, not {shown(burst)}")
    return RateLimit(name, per_second, burst)


def spacing_text(interval_us: int, burst: int) -> str:
    """A stored limit as a person reads it: "20/s, burst 1", "30/m, burst 2", in the
    largest unit that counts at least one start (a spacing rounded up reads a hair under
    its rate, so to three significant digits)."""
    per_second = 1_000_000 / interval_us
    unit = next((u for u in ("s", "m") if per_second * UNITS[u] >= 1), "h")
    starts = per_second * UNITS[unit]
    return f"{starts:,.0f}/{unit}, burst {burst}" if starts >= 100 else \
        f"{starts:.3g}/{unit}, burst {burst}"
