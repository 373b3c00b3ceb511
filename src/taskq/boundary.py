"""What crosses the Redis boundary: its errors, its reply values, and durations in ms."""

from __future__ import annotations

import math
import re
from typing import Any

import redis
from redis.exceptions import RedisClusterException

from taskq.errors import BrokerError


class redis_errors:  # lower case: it reads as a function at every `with`
    """Turn Redis failures into `BrokerError`, saying in the user's words what failed.

    A class, not a `@contextmanager` generator: it wraps every broker call, on the path
    from a producer to a handler, where a generator's set-up is not free."""

    __slots__ = ("operation",)

    def __init__(self, operation: str) -> None:
        self.operation = operation

    def __enter__(self) -> None:
        return None

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, _tb: object
    ) -> None:
        if isinstance(error, redis.RedisError | RedisClusterException):
            raise broker_error(self.operation, error) from error


def lost_in_transit(error: BaseException | None) -> bool:
    """Whether `error` (a Redis error, or the BrokerError made of one) is a round trip
    that failed, rather than Redis answering with an error: the call may have run."""
    cause = error.__cause__ if isinstance(error, BrokerError) else error
    return isinstance(cause, redis.ConnectionError | redis.TimeoutError)


def unavailable_for_now(error: BaseException) -> bool:
    """Whether `error` (a BrokerError) is Redis out of reach, unable to answer, or
    refusing writes for a while that ends without the caller: the connection lost (a
    restart; loading its data set after one, which redis-py raises as a
    ConnectionError), busy running a script past its busy limit (BUSY), or refusing
    writes (`write_refused`: a result wait's BLMOVE is one, and no task can end then
    either, since its ack is one)."""
    cause = error.__cause__
    return lost_in_transit(error) or write_refused(error) or (
        isinstance(cause, redis.ResponseError) and str(cause).startswith("BUSY"))


# redis-py's text for the error a Redis at its maxclients sends a new connection.
MAX_CLIENTS = "max number of clients reached"


def refusal_at_connect(error: BaseException) -> str | None:
    """What is wrong, and what to do, when a running Redis turned a connection away
    (redis-py raises each as a ConnectionError, which would read as Redis being
    unreachable, and send an operator to start one): None for any other error."""
    detail = str(error).rstrip(".")
    if isinstance(error, redis.BusyLoadingError):
        return (f"{detail}: it has just started and answers once its data set is "
                "loaded; try again then (a worker waits for it)")
    if isinstance(error, redis.AuthenticationError):
        return (f"it refused the credentials ({detail}): put the right user and "
                "password in REDIS_URL")
    if isinstance(error, redis.ConnectionError) and detail == MAX_CLIENTS:
        return (f"{detail}: it has as many connections as its maxclients setting "
                "allows; raise it, or stop what holds connections idle")
    return None


OOM_IN_SCRIPT = "OOM command not allowed"


def mend_for(error: BaseException) -> str | None:
    """What mends a refusal that lasts until someone acts (every call meets it the same
    way: a worker waits it out, a producer's calls fail), where Redis's own words do
    not say; None for any other error."""
    if isinstance(error, redis.exceptions.ReadOnlyError):
        return ("this Redis is a read-only replica (after a failover, perhaps): point "
                "REDIS_URL at the primary")
    # Redis 6.2 passes a script's refused write on as a plain script error.
    if isinstance(error, redis.exceptions.OutOfMemoryError) or (
            isinstance(error, redis.ResponseError) and OOM_IN_SCRIPT in str(error)):
        return ("Redis is at its maxmemory and evicts nothing (noeviction, as taskq "
                "needs): raise maxmemory, or free memory")
    if isinstance(error, redis.exceptions.NoPermissionError):
        return ("the ACL user REDIS_URL names may not run it: grant that user the "
                "commands and the keys taskq uses (each queue's {taskq:<queue>}:*, "
                "taskq:queues and taskq:shards)")
    return None


# Redis's words for the writes it refuses for a while, until someone acts or a save
# succeeds: as the error itself (Redis 7 refuses a script that may write up front), or
# met by a command inside a script (Redis 6.2).
WRITES_REFUSED = ("MISCONF", "OOM command not allowed", "READONLY", "NOREPLICAS")


def write_refused(error: BaseException) -> bool:
    """Whether `error` (a BrokerError) is Redis refusing writes, and with them every
    script that may write, while it still answers reads: a failed save (MISCONF), its
    maxmemory reached (OOM), a replica (READONLY), too few replicas (NOREPLICAS)."""
    cause = error.__cause__
    # redis-py raises the first two by their own classes, their first word taken off.
    return isinstance(cause, redis.exceptions.ReadOnlyError | redis.exceptions.OutOfMemoryError
                      ) or (isinstance(cause, redis.ResponseError)
                            and any(words in str(cause) for words in WRITES_REFUSED))


# What a connection that could not be made adds: where Redis is said to be, and how to
# say otherwise.
NO_REDIS = ("; is Redis running there? Start it (`taskq redis` runs a local one) or point "
            "REDIS_URL, or App(redis_url=...), at where it runs")


# What a connection whose making timed out adds: something listens there, and took no
# connection in time; starting one is not the answer.
STALLED = ("; something listens there but took the connection too slowly: a Redis stalled "
           "(paused, busy with a long script or its backlog of connections full), or "
           "another program on that port")


def broker_error(words: str, error: BaseException) -> BrokerError:
    """The `BrokerError` for a Redis failure of what `words` say was being done, in the
    user's words ("list the dead letter queue"), not the name of an internal step; its
    cause is `error`, so the tests of this module (`write_refused`,
    `unusable_as_stored`, ...) judge it, raised or met in place in a reply."""
    made = _broker_error(words, error)
    made.__cause__ = error
    return made


def _broker_error(words: str, error: BaseException) -> BrokerError:
    detail = str(error).rstrip(".")
    if detail in ("No connection available", "Too many connections"):
        return BrokerError(f"could not {words}: every connection of this client to Redis "
                           f"was in use for as long as a call may wait ({detail})")
    if (answer := refusal_at_connect(error)) is not None:
        return BrokerError(f"Redis could not {words}: {answer}")
    if lost_in_transit(error):
        # A connection never made is the first error of a program whose Redis is not
        # where its settings say (REDIS_URL's default is localhost): say where to look.
        unmade = "connecting to" in detail or "Connect call failed" in detail
        hint = "" if not unmade else STALLED if detail.startswith("Timeout") else NO_REDIS
        return BrokerError(f"cannot reach Redis to {words}: {detail}{hint}")
    if detail == "DB index is out of range":
        return BrokerError(f"could not {words}: this Redis has no database of the number "
                           "REDIS_URL names (after the port, or as db=): it has as many as "
                           "its `databases` setting, counted from 0")
    if (mend := mend_for(error)) is not None:
        return BrokerError(f"Redis could not {words}: {type(error).__name__}: {detail}; {mend}")
    if isinstance(error, redis.exceptions.MovedError):
        # Only a plain client meets one: a cluster client follows it.
        return BrokerError(f"Redis could not {words}: {detail}: this Redis is a node of a "
                           "Redis Cluster; set TASKQ_REDIS_CLUSTER=1")
    return BrokerError(f"Redis could not {words}: {type(error).__name__}: {detail}")


# How a script's own error() (or its Lua failing) reads: "user_script:<line>: ..." on
# Redis 7, behind "Error running script (call to f_<sha>): @user_script:<line>: " on 6.2.
# An error a command inside the script met (MISCONF, NOREPLICAS, OOM, WRONGTYPE) names
# `@user_script` too, but never starts so.
SCRIPT_ERROR = re.compile(
    r"(?:Error running script \(call to f_[0-9a-f]+\): @user_script:\d+: )?user_script:\d+: ")


def refused_by_script(error: BaseException) -> bool:
    """Whether `error` (a BrokerError) is a script refusing what it was given, rather
    than Redis failing to run it: the same call fails the same way however often it is
    made, so waiting it out as an outage would wait for ever. A write Redis refuses for
    a while (a failed save, too few replicas) is not one."""
    cause = error.__cause__
    return type(cause) is redis.ResponseError and SCRIPT_ERROR.match(str(cause)) is not None


def refused_for_a_key(error: BaseException) -> bool:
    """Whether `error` is a script refusing because a key it would write holds another
    type (something else wrote it): Redis state an operator can mend, so the same call
    may go through later, unlike an argument refused."""
    cause = error.__cause__
    if not refused_by_script(error):
        return False
    match = SCRIPT_ERROR.match(str(cause))
    return match is not None and str(cause)[match.end():].startswith("WRONGTYPE ")


# What a script says of a record it cannot read (flow_status.lua).
DAMAGED = "has a damaged record"


def unusable_as_stored(error: BaseException) -> bool:
    """Whether `error` (a BrokerError) is Redis refusing a read or a script because of
    what a key holds: another type than taskq keeps there, or a record a script found
    damaged. Written by something else, and the same for every call until it is mended,
    so no outage."""
    cause = error.__cause__
    return isinstance(cause, redis.ResponseError) and (
        "WRONGTYPE" in str(cause) or DAMAGED in str(cause))


def text(value: Any) -> str:
    """A reply value as text, whether the client decodes responses or not."""
    return value.decode() if isinstance(value, bytes) else str(value)


# The shortest a blocking command asks Redis to hold it. Redis 6.2 turns a timeout into
# whole milliseconds, and one that comes to 0 means "block for ever": the last slice of
# a wait, a few microseconds from its deadline, held a result() 20 s (the client's
# socket timeout, four times) and reported Redis unreachable.
MIN_BLOCK_SECONDS = 0.01


def block_seconds(timeout: float, limit: float) -> float:
    """How long a blocking command asked for `timeout` seconds is held: at most `limit`
    (`block_limit`), at least MIN_BLOCK_SECONDS."""
    return max(MIN_BLOCK_SECONDS, min(timeout, limit))


def block_limit(client: Any) -> float:
    """The longest a blocking command may ask Redis to hold it on `client`: half the
    client's socket timeout, so the reply comes before the client gives up reading (a
    timeout it would report as Redis unreachable); unbounded when it sets none."""
    for owner in (getattr(client, "connection_pool", None),
                  getattr(client, "nodes_manager", None), client):
        kwargs = getattr(owner, "connection_kwargs", None)
        if isinstance(kwargs, dict) and kwargs.get("socket_timeout"):
            return float(kwargs["socket_timeout"]) / 2
    return math.inf


def whole_text(value: str) -> int | None:
    """The whole number `value` spells in ASCII digits, or None when it spells none (a
    field written by hand, or by something other than taskq)."""
    return int(value) if value.isascii() and value.isdigit() else None


def stored_int(value: Any) -> int:
    """A whole number that a record, a counter or an event holds as text: 0 when it
    holds none, or holds what is not a finite number. Such a field was written by hand
    or by something other than taskq; reading it as 0 keeps one bad record from failing
    every listing (and every worker) that reads it."""
    if not value:
        return 0
    try:
        return int(value)
    except (TypeError, ValueError):
        pass
    try:
        number = float(text(value))
    except (TypeError, ValueError, UnicodeDecodeError):
        return 0
    return int(number) if math.isfinite(number) else 0

