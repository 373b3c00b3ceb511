"""A producer's call riding out a Redis that cannot answer for a while.

A restart refuses connections for a moment and then answers LOADING until its data set
is in memory (seconds for a large one); a script run past Redis's busy limit makes it
answer BUSY until the script ends or is killed. None of these runs the call, and each
ends without anyone acting, so an enqueue sent again a moment later goes through. The
client's own retries (taskq.connection) cover a blip of under a second; a producer's
call that sends tasks keeps sending the same call, with the same task ids, until it has
spent `TASKQ_PRODUCER_RETRY_SECONDS` in failed sends and pauses: a task id that already
names a task is not enqueued again, so a call that did run before its reply was lost
creates nothing the second time. Refusals that last until someone acts (a read-only replica,
out of memory, a failed save, a denied command) fail at once, with what mends them.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

import redis

from taskq.boundary import MAX_CLIENTS
from taskq.errors import BrokerError

T = TypeVar("T")

# The first and the longest pause before a call Redis could not answer is sent again,
# doubling in between; a result wait asks again on the same schedule.
OUTAGE_PAUSE_SECONDS = (0.05, 1.0)


def cause_of(error: BaseException) -> BaseException:
    """The Redis error behind `error` (a BrokerError made of one), or `error` itself."""
    return error.__cause__ if isinstance(error, BrokerError) and error.__cause__ else error


# Connection errors, as redis-py raises them, that last until someone acts: wrong
# credentials, a user refused, a full maxclients (some are only in newer releases; the
# older raise a plain ConnectionError, told by its words below).
_LASTING = tuple(getattr(redis.exceptions, name) for name in (
    "AuthenticationError", "AuthorizationError", "MaxClientsReachedError",
    "ExternalAuthProviderError") if hasattr(redis.exceptions, name))


# redis-py's words for a call that found every connection of its pool in use, and its
# class for it where it has one (the asyncio cluster client's says no words): this
# process's own contention, which the error explains (see taskq.boundary); nothing
# was sent.
_POOL_FULL = ("No connection available", "Too many connections")
_POOL_FULL_ERROR = getattr(redis.exceptions, "MaxConnectionsError", ())


def _pool_full(cause: BaseException) -> bool:
    return isinstance(cause, _POOL_FULL_ERROR) or (
        isinstance(cause, redis.ConnectionError) and str(cause).rstrip(".") in _POOL_FULL)


def passing(error: BaseException) -> bool:
    """Whether `error` (a Redis error, or the BrokerError made of one) is a Redis that
    cannot answer for a while that ends by itself: a connection refused or lost (a
    restart), a timeout, LOADING, BUSY. Wrong credentials and a full maxclients are
    connection errors too, but last until someone acts; a pool with no connection free
    is this process's own."""
    cause = cause_of(error)
    if isinstance(cause, _LASTING) or _pool_full(cause):
        return False
    if isinstance(cause, redis.ConnectionError | redis.TimeoutError):
        return str(cause).rstrip(".") != MAX_CLIENTS
    return isinstance(cause, redis.ResponseError) and str(cause).startswith("BUSY ")


def nothing_ran(error: BaseException) -> bool:
    """Whether `error` says for sure that Redis did not run the call: Redis answered
    with an error (BUSY among them: a script that runs answers nothing until it ends),
    or no connection was free to send it on. A connection refused or lost, a timeout or
    LOADING does not say so: the client tries each send up to four times (see
    taskq.connection) and raises the last try's error, and an earlier try may have
    written the call and lost its reply."""
    cause = cause_of(error)
    if isinstance(cause, redis.ResponseError) and not isinstance(cause, redis.BusyLoadingError):
        return True
    return _pool_full(cause)


class Outage:
    """One call's time while Redis cannot answer: the call (all of its steps: a queue's
    registration, each batch, each shard) may spend `seconds` in all in failed sends and
    the pauses after them, each stretch counted from the start of its first failed send;
    a send under way when they are spent is let end, and none begins after a failure
    then. A call's healthy sends, however long, count for nothing. And whether any send
    may have run (its reply lost), for the error of the step that fails."""

    __slots__ = ("failing_since", "may_have_run", "pauses", "seconds", "sending", "spent")

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.spent = 0.0  # in failing stretches that ended
        self.failing_since: float | None = None
        self.sending = 0.0  # when the send under way began (see ride_out)
        self.pauses = 0
        self.may_have_run = False

    def pause_after(self, error: BaseException) -> float | None:
        """Seconds to pause before sending the call again after `error`, or None: the
        caller raises it (no passing outage, or its time is up)."""
        if not isinstance(error, redis.RedisError | BrokerError) or not passing(error):
            return None
        if not nothing_ran(error):
            self.may_have_run = True
        now = time.monotonic()
        if self.failing_since is None:
            self.failing_since = self.sending or now
        left = self.seconds - self.spent - (now - self.failing_since)
        if left <= 0:
            return None
        first, longest = OUTAGE_PAUSE_SECONDS
        pause: float = min(longest, first * 2 ** min(self.pauses, 10), left)
        self.pauses += 1
        return pause

    def answered(self) -> None:
        """A send went through: the failing stretch before it, if any, is over."""
        if self.failing_since is not None:
            self.spent += time.monotonic() - self.failing_since
            self.failing_since = None

    def step_done(self) -> None:
        """A step of the call (its registration, a batch) went through: what its sends
        may have run says nothing of the next step's."""
        self.may_have_run = False

    @property
    def waited(self) -> str:
        """How often the call was sent again and for how long, for an error's message
        ('' if never)."""
        if self.pauses == 0:
            return ""
        failing = self.spent + (0.0 if self.failing_since is None
                                else time.monotonic() - self.failing_since)
        return f" (sent again {self.pauses} times over {failing:.1f}s)"


def ride_out(send: Callable[[], T], outage: Outage) -> T:
    """`send()`, again after each pause `outage` allows; its last error is raised."""
    while True:
        outage.sending = time.monotonic()
        try:
            answer = send()
        except (redis.RedisError, BrokerError) as e:
            pause = outage.pause_after(e)
            if pause is None:
                raise
        else:
            if outage.failing_since is not None:
                outage.answered()
            return answer
        time.sleep(pause)


async def ride_out_async(send: Callable[[], Awaitable[T]], outage: Outage) -> T:
    """`ride_out`, awaited."""
    while True:
        outage.sending = time.monotonic()
        try:
            answer = await send()
        except (redis.RedisError, BrokerError) as e:
            pause = outage.pause_after(e)
            if pause is None:
                raise
        else:
            if outage.failing_since is not None:
                outage.answered()
            return answer
        await asyncio.sleep(pause)
