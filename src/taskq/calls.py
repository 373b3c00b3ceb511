"""The producer's script calls, built and read once for the blocking and the asyncio broker.

Each function here either builds the KEYS and ARGV of a script call or reads its reply;
sending it is left to the broker, so `Broker` and `AsyncBroker` differ only in how they
wait for Redis.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from typing import Any

import redis

from taskq.boundary import broker_error, lost_in_transit, redis_errors, text
from taskq.errors import BrokerError, ConfigError, IncompleteEnqueueError, InvalidTaskError
from taskq.keys import QueueKeys, check_task_id
from taskq.limits import shown
from taskq.outages import Outage, nothing_ran, passing
from taskq.results import QueueCounts, TaskRecord
from taskq.scripts import commands_called

Call = tuple[list[str], list[Any]]
"""A script call's KEYS and ARGV."""

# The most payload bytes one enqueue call carries (a task larger than this goes alone).
# Redis runs a script whole, every other client waiting, at about 3 ms per MiB of
# payloads here: a thousand 1 MiB payloads in one call held it 2.8 s, and past the
# client's timeout the call is sent again.
BATCH_BYTES = 4 * 1024 * 1024
PAYLOAD = 2  # a task's payload among its fields (taskq.fields.enqueue_fields)
# Task ids an error's message names at most (the exception holds them all).
IDS_SHOWN = 10


def enqueue_calls(keys: QueueKeys, retention: int, fields: list[list[Any]],
                  batch_size: int) -> Iterator[Call]:
    """One enqueue.lua call per `batch_size` tasks of `fields` (each task's checked
    values, from `taskq.fields`), in order, fewer where their payloads come to more
    than BATCH_BYTES."""
    queue_keys = [keys.ready, keys.delayed, keys.events, keys.seq, keys.epoch, keys.wake]
    start = 0
    while start < len(fields):
        end, carried = start, 0
        while end < len(fields) and end - start < batch_size:
            payload = fields[end][PAYLOAD]
            carried += len(payload) if payload.isascii() else len(payload.encode())
            if carried > BATCH_BYTES and end > start:
                break
            end += 1
        batch = fields[start:end]
        yield queue_keys, [keys.prefix, retention, len(batch),
                           *(value for task in batch for value in task)]
        start = end


class outage_errors(redis_errors):  # lower case, as redis_errors
    """redis_errors for a producer's call that was sent again while `outage` allowed
    (see taskq.outages): whether any of its sends may have run, and how long it was
    sent for, for the error's message."""

    __slots__ = ("outage",)

    def __init__(self, operation: str, outage: Outage | None) -> None:
        super().__init__(operation)
        self.outage = outage

    def may_have_run(self, error: BaseException) -> bool:
        """Whether the call may have run, `error` (a Redis error) ending it; anything
        else (Ctrl-C, a cancelled coroutine) goes on as it is."""
        if not isinstance(error, redis.RedisError | BrokerError):
            return False
        if self.outage is None:
            return lost_in_transit(error)
        return self.outage.may_have_run or (lost_in_transit(error) and not nothing_ran(error))

    def ran_nothing(self, error: BaseException) -> bool:
        """Whether none of the call's sends can have run, Redis unable to answer."""
        return self.outage is not None and passing(error) and not self.may_have_run(error)

    def said(self, error: BaseException) -> str:
        """What failed, as redis_errors says it, and how long the call was sent for."""
        return str(broker_error(self.operation, error)) + (
            "" if self.outage is None else self.outage.waited)


def named(ids: tuple[str, ...]) -> str:
    """`ids` for a message: the first IDS_SHOWN, and how many more."""
    return ", ".join(ids[:IDS_SHOWN]) + (
        f" and {len(ids) - IDS_SHOWN} more" if len(ids) > IDS_SHOWN else "")


class enqueue_errors(outage_errors):  # lower case, as redis_errors
    """redis_errors for an enqueue of the tasks `fields` (each task's checked values,
    from `taskq.fields`), sent while `outage` allowed, after `sent` tasks of the same
    enqueue went in (in the batches or shards before it): one that may have run, or
    failed after others went in, is an IncompleteEnqueueError that says so, names every
    task id of the enqueue (`call_ids`; these tasks' if not given), and how to send them
    again without making a task twice."""

    __slots__ = ("call_ids", "fields", "sent")

    def __init__(self, sent: int = 0, outage: Outage | None = None,
                 fields: list[list[Any]] | None = None,
                 call_ids: Sequence[str] | None = None) -> None:
        super().__init__("enqueue tasks", outage)
        self.sent = sent
        self.fields = fields
        self.call_ids = call_ids

    @property
    def ids(self) -> tuple[str, ...]:
        """Every task id of the enqueue: the caller got no handle of any."""
        if self.call_ids is not None:
            return tuple(self.call_ids)
        return tuple(str(task[0]) for task in self.fields or ())

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, _tb: object
    ) -> None:
        if error is None:
            return
        if not isinstance(error, redis.RedisError | BrokerError):
            super().__exit__(kind, error, _tb)
            return
        if type(error) is redis.ResponseError and (
                found := FAR_RUN_AT.search(str(error))) is not None:
            # The server's clock is behind this host's, which let it through.
            raise InvalidTaskError(
                f"run_at (Unix ms {found[1]}) is more than ten years ahead of the Redis "
                f"server's time ({found[2]} ms); a task may wait at most ten years. The "
                "batch holding it was refused; batches sent before it were enqueued"
            ) from error
        resend = ("an id that names a task is not enqueued again, so sending the same "
                  "task ids (or idempotency keys) again enqueues only what is missing "
                  f"(this call's: {named(self.ids)})")
        if self.may_have_run(error):
            raise IncompleteEnqueueError(
                f"{self.said(error)}; Redis may have run the call all the same"
                f"{self._before()}: {resend}", self.ids) from error
        if self.sent:
            # This batch wrote nothing; the caller gets no handle of those that went
            # before, and sent again with new ids they would be made twice.
            raise IncompleteEnqueueError(
                f"{self.said(error)}; this batch was not enqueued{self._before()}: "
                f"{resend}", self.ids) from error
        if self.ran_nothing(error):
            raise BrokerError(f"{self.said(error)}; nothing was enqueued by this call: it "
                              "is safe to send again") from error
        super().__exit__(kind, error, _tb)

    def _before(self) -> str:
        return (f"; the {self.sent} task(s) of the batches before this one were enqueued"
                if self.sent else "")


# enqueue.lua's refusal of a run_at past its bound, before it writes anything.
FAR_RUN_AT = re.compile(r"run_at_ms (\d+) is more than ten years after the server time (\d+)")


def enqueued(reply: list[Any]) -> Iterator[tuple[str, bool]]:
    """enqueue.lua's reply as `(task_id, created)` pairs, in the order sent."""
    for i in range(0, len(reply), 2):
        yield text(reply[i]), bool(int(reply[i + 1]))


def watch_call(keys: QueueKeys, task_id: str, mark: bool) -> Call:
    """The watch.lua call that reads `task_id` (and, with `mark`, asks to be woken)."""
    task_id = check_task_id(task_id)
    return [keys.task(task_id), keys.done(task_id)], ["1" if mark else "0"]


# The fields watch.lua reads of a task's record, in its order: read alone where Redis
# refuses the script (see `write_refused`).
WATCHED = ("state", "result", "error_type", "error_message", "traceback", "last_error",
           "fencing_token", "retries", "upstream")


def watched_alone(reply: list[Any]) -> list[Any]:
    """An HMGET of WATCHED as watch.lua would have replied: [] for no record."""
    return reply if reply and reply[0] is not None else []


# The states a cancel can be limited to: those a task can be cancelled in.
CANCELLABLE = ("pending", "delayed", "running", "dead", "waiting")


def cancel_call(keys: QueueKeys, task_id: str, retention: int, completed_ttl_ms: int,
                only: str | None) -> Call:
    """The cancel.lua call that cancels `task_id` (with `only`, only in that state)."""
    if only is not None and only not in CANCELLABLE:
        raise InvalidTaskError(f"only must be one of {', '.join(CANCELLABLE)} or None, "
                               f"not {shown(only)}")
    return ([keys.ready, keys.delayed, keys.leased, keys.dlq, keys.events, keys.seq,
             keys.epoch],
            [keys.prefix, check_task_id(task_id), retention, completed_ttl_ms, only or ""])


def counts_call(keys: QueueKeys) -> Call:
    """The snapshot.lua call that lists nothing and only counts."""
    return ([keys.ready, keys.leased, keys.delayed, keys.dlq, keys.events, keys.epoch],
            [keys.prefix, 0, 0])


def counts_from(reply: list[Any]) -> QueueCounts:
    """The counts in the reply of `counts_call`."""
    return QueueCounts(int(reply[1]), int(reply[2]), int(reply[3]), int(reply[4]))


def record_from(task_id: str, raw: dict[Any, Any]) -> TaskRecord | None:
    """A task's record from its HGETALL reply; None for an empty one (no record)."""
    if not raw:
        return None
    return TaskRecord.from_hash(task_id, {text(a): text(b) for a, b in raw.items()})


def can_run_call(keys: QueueKeys, scripts: tuple[str, ...]) -> Call:
    """The can_run.lua call that asks which commands of `scripts` the connection's ACL
    user may not run on the queue's keys."""
    return [keys.events], list(commands_called(scripts))


def refuse_unrunnable(queue: str, reply: list[Any]) -> None:
    """Raise `ConfigError` naming the commands can_run.lua's `reply` says the ACL user
    may not run (nothing where Redis cannot say, as 6.2 cannot)."""
    refused = [text(v) for v in reply[1:]]
    if refused:
        grant = " ".join(f"+{c.lower().replace(' ', '|')}" for c in refused)
        raise ConfigError(
            f"the ACL user REDIS_URL names may not run {', '.join(refused)} on the keys "
            f"of queue {queue!r}, which taskq's scripts use: a script refused part way "
            "keeps the writes it made before (Redis undoes none), so taskq uses no queue "
            f"this user cannot run. Grant them (ACL SETUSER <user> {grant})")
