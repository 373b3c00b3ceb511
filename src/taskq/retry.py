"""Retry policies: which failures a task retries, after how long, and which go dead at once."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import Literal

from taskq.errors import InvalidTaskError, Retry
from taskq.limits import BACKOFF_BASE, BACKOFF_MAX, DELAY, Seconds, shown

FailMode = Literal["backoff", "delay", "dead"]


@dataclass(frozen=True, init=False)
class Decision:
    """What to do with one failed attempt: `mode` is fail.lua's (retry after the backoff,
    retry after `delay` seconds, or to the DLQ now); `backoff_base`/`backoff_max` are
    the task's own, None for the worker's settings. Each duration is given as seconds
    or a timedelta, and kept as its seconds."""

    mode: FailMode
    delay: float | None = None
    backoff_base: float | None = None
    backoff_max: float | None = None

    def __init__(self, mode: FailMode, delay: Seconds | None = None,
                 backoff_base: Seconds | None = None,
                 backoff_max: Seconds | None = None) -> None:
        object.__setattr__(self, "mode", mode)
        object.__setattr__(self, "delay", delay)
        object.__setattr__(self, "backoff_base", backoff_base)
        object.__setattr__(self, "backoff_max", backoff_max)
        self.__post_init__()

    def __post_init__(self) -> None:
        for name in ("delay", "backoff_base", "backoff_max"):
            object.__setattr__(self, name, _seconds(getattr(self, name)))


def _seconds(value: Seconds | None) -> float | None:
    """A duration given as a timedelta as its seconds; anything else as it is, for
    `decision_problem` to judge (a policy subclass may return any value)."""
    return value.total_seconds() if isinstance(value, timedelta) else value


@dataclass(frozen=True, init=False)
class RetryPolicy:
    """How a task's failed attempts are retried, given as `@app.task(retry=...)`.

    An exception is retried if it is an instance of one of `retry_on` (default: any) and
    of none of `dont_retry_on`; any other goes to the DLQ at once, whatever retries are
    left.
    `backoff_base` and `backoff_max` (seconds, or a timedelta) replace BACKOFF_BASE_SECONDS and
    BACKOFF_MAX_SECONDS for this task's failures; None keeps the settings. (An attempt
    whose lease ran out is retried by the worker that reaps it, after that worker's
    settings: Redis keeps no policy.) How many retries a task
    gets stays `max_retries`. A handler that raises `taskq.Retry` is always retried
    (while retries are left)."""

    retry_on: tuple[type[BaseException], ...] = (BaseException,)
    dont_retry_on: tuple[type[BaseException], ...] = ()
    backoff_base: float | None = None
    backoff_max: float | None = None

    # Written out so that the durations may be given as timedeltas (kept as seconds) and
    # one exception class alone: a subclass that is a dataclass of its own gets the
    # generated one, and the checks of __post_init__ all the same.
    def __init__(self, retry_on: type[BaseException] | tuple[type[BaseException], ...]
                 = (BaseException,),
                 dont_retry_on: type[BaseException] | tuple[type[BaseException], ...] = (),
                 backoff_base: Seconds | None = None,
                 backoff_max: Seconds | None = None) -> None:
        object.__setattr__(self, "retry_on", retry_on)
        object.__setattr__(self, "dont_retry_on", dont_retry_on)
        object.__setattr__(self, "backoff_base", backoff_base)
        object.__setattr__(self, "backoff_max", backoff_max)
        self.__post_init__()

    def __post_init__(self) -> None:
        for name in ("retry_on", "dont_retry_on"):
            value = getattr(self, name)
            if isinstance(value, type):  # one class given alone: as a tuple of one
                value = (value,)
                object.__setattr__(self, name, value)
            if not isinstance(value, tuple) or not all(
                isinstance(c, type) and issubclass(c, BaseException) for c in value
            ):
                raise InvalidTaskError(
                    f"RetryPolicy {name} must be an exception class or a tuple of them, "
                    f"not {shown(value)}"
                )
        if self.backoff_base is not None:
            object.__setattr__(self, "backoff_base",
                               BACKOFF_BASE.check(self.backoff_base, "RetryPolicy backoff_base"))
        if self.backoff_max is not None:
            object.__setattr__(self, "backoff_max",
                               BACKOFF_MAX.check(self.backoff_max, "RetryPolicy backoff_max"))
        base, cap = self.backoff_base, self.backoff_max
        if base is not None and cap is not None and cap < base:
            raise InvalidTaskError(
                f"RetryPolicy backoff_max ({self.backoff_max!r}) must be at least its "
                f"backoff_base ({self.backoff_base!r})"
            )

    def retries(self, error: BaseException) -> bool:
        """Whether `error`, raised by a handler, is worth another attempt."""
        return isinstance(error, self.retry_on) and not isinstance(error, self.dont_retry_on)

    def decide(self, error: BaseException) -> Decision:
        """What to do with an attempt that failed with `error`. `InvalidTaskError` for a
        `Retry` whose `delay` is not one a retry can wait: `Retry.__init__` checks it,
        but a subclass may skip that or set the attribute afterwards."""
        if isinstance(error, Retry):
            delay = getattr(error, "delay", None)
            if delay is None:
                return self.backoff()
            return Decision("delay", DELAY.check(delay, "Retry delay"), self.backoff_base,
                            self.backoff_max)
        if not self.retries(error):
            return Decision("dead")
        return self.backoff()

    def backoff(self) -> Decision:
        """A retry after this policy's backoff."""
        return Decision("backoff", None, self.backoff_base, self.backoff_max)


def decision_problem(decision: object) -> str | None:
    """Why `decision`, what a policy's `decide()` returned (a subclass's own), is none a
    failed attempt can be settled by; None if it is one."""
    if not isinstance(decision, Decision):
        return f"is {shown(decision)}, not a Decision"
    if decision.mode not in ("backoff", "delay", "dead"):
        return f"has mode {shown(decision.mode)}, not 'backoff', 'delay' or 'dead'"
    if decision.mode == "delay" and not DELAY.holds(decision.delay):
        return f"has delay {shown(decision.delay)}, not {DELAY.rule}"
    if decision.mode != "delay" and decision.delay is not None:
        return (f"has mode {shown(decision.mode)} and delay {shown(decision.delay)}: "
                "only mode 'delay' takes one")
    for name, rule in (("backoff_base", BACKOFF_BASE), ("backoff_max", BACKOFF_MAX)):
        value = getattr(decision, name)
        if value is not None and not rule.holds(value):
            return f"has {name} {shown(value)}, not {rule.rule}"
    base, cap = decision.backoff_base, decision.backoff_max
    if base is not None and cap is not None and cap < base:
        return f"has backoff_max {shown(cap)} below its backoff_base {shown(base)}"
    return None


DEFAULT = RetryPolicy()
# A failure retried after the worker's own backoff settings.
BACKOFF = Decision("backoff")
# An attempt that can never succeed, however often it is made: an unknown task name, a
# payload that does not decode, arguments that do not bind to the function.
NEVER = Decision("dead")
