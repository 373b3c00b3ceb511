"""The queue operations: one thin typed method per Lua script, plus read-only views."""

from __future__ import annotations

import logging
import random
from collections.abc import Sequence
from datetime import datetime
from functools import partial
from typing import Any

from taskq.boundary import (
    block_limit,
    block_seconds,
    broker_error,
    lost_in_transit,
    redis_errors,
    text,
    whole_text,
    write_refused,
)
from taskq.calls import (
    WATCHED,
    can_run_call,
    cancel_call,
    counts_call,
    counts_from,
    enqueue_calls,
    enqueue_errors,
    enqueued,
    record_from,
    refuse_unrunnable,
    watch_call,
    watched_alone,
)
from taskq.codec import decode_payload, result_problem
from taskq.concurrency import ConcurrencyLimit
from taskq.connection import connect
from taskq.errors import BrokerError, ConfigError, InvalidTaskError
from taskq.fields import enqueue_fields, new_task_fields
from taskq.handle import TaskHandle
from taskq.keys import (
    QUEUES_KEY,
    TASK_NAME,
    QueueKeys,
    Registration,
    check_held,
    check_task_id,
    check_task_name,
    new_id,
)
from taskq.limits import (
    BATCH_SIZE,
    COMPLETED_TTL,
    DLQ_START,
    EVENTS_RETENTION,
    IDEMPOTENCY_TTL,
    LEASE_COUNT,
    LIMIT,
    MAX_DEFINITION_BYTES,
    MAX_PAYLOAD_BYTES,
    MAX_PROGRESS_MESSAGE_CHARS,
    MAX_REQUEST_ID_CHARS,
    MAX_RESULT_BYTES,
    MAX_TRACEBACK_CHARS,
    MAX_WORKER_ID_CHARS,
    PRIORITY,
    PRODUCER_RETRY,
    PROGRESS,
    TICK_MS,
    TIMEOUT,
    TOKEN,
    Seconds,
    check_text,
    error_text,
    shown,
    to_ms,
)
from taskq.outages import Outage, ride_out
from taskq.rates import QUEUE_LIMIT, RateLimit, spacing_text
from taskq.results import (
    SIMULATE_TASK,
    Cancellation,
    Enqueued,
    FailResult,
    Failure,
    Fired,
    Forgotten,
    LeaseBatch,
    LeasedTask,
    Lifted,
    NewTask,
    QueueCounts,
    ReapOutcome,
    Released,
    Renewal,
    TaskRecord,
    Watched,
)
from taskq.schedules import Schedule, check_schedule_name
from taskq.scripts import PRODUCER_SCRIPTS, Scripts
from taskq.settings import Settings
from taskq.shards import SHARDS_KEY, refuse_sharded
from taskq.transport import Client, transport_for
from taskq.unanswered import Unanswered

__all__ = [
    "Broker",
    "Enqueued",
    "FailResult",
    "LeaseBatch",
    "LeasedTask",
    "NewTask",
    "QueueCounts",
    "TaskHandle",
    "TaskRecord",
    "connect",
]

log = logging.getLogger("taskq.broker")

# What the ack script takes, in a result's place, for a run cut off at a worker's
# shutdown after its effect (see ack.lua): no JSON text is a lone NUL.
CUT = "\x00"


def _fail_mode(delay: float | None, dead: bool) -> str:
    """fail.lua's mode for `Broker.fail`'s options; both at once is a contradiction."""
    if dead and delay is not None:
        raise InvalidTaskError("fail takes a retry delay or dead=True, not both")
    return "dead" if dead else "backoff" if delay is None else "delay"


class Broker:
    """A queue on a Redis server. Every state change is one atomic script.

    Every duration, count and size is checked against its range in `taskq.limits` (the
    README lists them) before anything is sent: a call that is refused raises a
    `TaskqError` naming the argument, the value and the range, and changes nothing."""

    def __init__(
        self,
        client: Client,
        queue: str = "default",
        *,
        events_retention: int = EVENTS_RETENTION.default,
        max_payload_bytes: int = MAX_PAYLOAD_BYTES.default,
        completed_ttl: float = COMPLETED_TTL.default,
        max_result_bytes: int = MAX_RESULT_BYTES.default,
        producer_retry: float = PRODUCER_RETRY.default,
    ) -> None:
        self.keys = QueueKeys(queue)
        # How long an enqueue sends its tasks again while Redis cannot answer.
        self.producer_retry = PRODUCER_RETRY.check(producer_retry, error=ConfigError)
        self.events_retention = EVENTS_RETENTION.check(events_retention, error=ConfigError)
        self.max_payload_bytes = MAX_PAYLOAD_BYTES.check(max_payload_bytes, error=ConfigError)
        self.max_result_bytes = MAX_RESULT_BYTES.check(max_result_bytes, error=ConfigError)
        completed_ttl = COMPLETED_TTL.check(completed_ttl, error=ConfigError)
        self.completed_ttl_ms = to_ms(completed_ttl, "completed_ttl")
        self.client = client
        self.queue = queue
        self._block_limit = block_limit(client)
        self.transport = transport_for(client)
        self.scripts = Scripts(self.transport)
        self._registration = Registration()
        # The scripts the ACL user was found to be allowed to run (each asked about once,
        # before its first use: see permit).
        self._permitted: set[str] = set()
        self._unanswered = Unanswered()
        # The rate and concurrency limits every lease of this broker applies (a worker
        # sets its app's).
        self.rate_limits: tuple[RateLimit, ...] = ()
        self.concurrency_limits: tuple[ConcurrencyLimit, ...] = ()
        self._limit_args_for: tuple[object, list[Any]] = (None, [0])
        # The limits another deploy was found to hold (see _leased), each warned of once.
        self._held_warned: set[tuple[str, int, int]] = set()

    @classmethod
    def from_settings(cls, settings: Settings, queue: str | None = None,
                      client: Client | None = None) -> Broker:
        """A Broker for `queue` on `client` (brokers of several queues may share one), or
        on a new connection to `settings.redis_url`."""
        return cls(
            connect(settings) if client is None else client,
            settings.queue if queue is None else queue,
            events_retention=settings.events_retention,
            max_payload_bytes=settings.max_payload_bytes,
            completed_ttl=settings.completed_ttl_seconds,
            max_result_bytes=settings.max_result_bytes,
            producer_retry=settings.producer_retry_seconds,
        )

    # -- producers ---------------------------------------------------------------------

    def enqueue(
        self,
        task_id: str,
        delay: Seconds = 0,
        max_retries: int = 3,
        payload: dict[str, Any] | None = None,
        idempotency_key: str | None = None,
        idempotency_ttl: int = IDEMPOTENCY_TTL.default,
        *,
        name: str = SIMULATE_TASK,
        run_at: datetime | None = None,
        result_ttl: Seconds | None = None,
        priority: int = PRIORITY.default,
    ) -> TaskHandle:
        """Create a task; an id or idempotency key that already names one creates nothing.

        `run_at` (an aware datetime) runs it at that time of the Redis server's clock,
        instead of after `delay` seconds; `result_ttl` keeps its completed record and
        result that many seconds instead of the queue's completed_ttl; `priority` (0 to
        9, higher first, default 5) orders it among the ready tasks: a worker always
        leases the highest priority there is, the oldest first within one. The handle it
        returns is the `Enqueued` of the call, and waits for the task's result."""
        fields = enqueue_fields(task_id, name, payload, delay, max_retries, idempotency_key,
                                idempotency_ttl, self.max_payload_bytes, run_at, result_ttl,
                                priority)
        return self.send_checked([fields], 1)[0]

    def enqueue_many(self, tasks: Sequence[NewTask],
                     batch_size: int = 1000) -> list[TaskHandle]:
        """Enqueue `tasks`, `batch_size` per script call; results come back in order.

        Each batch is one atomic step; a batch that fails (Redis away) raises, and the
        batches before it stay enqueued: sending the same tasks again is safe."""
        batch_size = BATCH_SIZE.check(batch_size)
        return self.send_checked(new_task_fields(tasks, self.max_payload_bytes),
                                     batch_size)

    def send_checked(self, fields: list[list[Any]], batch_size: int, sent: int = 0,
                     call_ids: Sequence[str] | None = None,
                     outage: Outage | None = None) -> list[TaskHandle]:
        """Send tasks already checked and encoded (`taskq.fields`), `batch_size` per call;
        `sent` tasks of the same enqueue went in before (on other shards), as an error
        says, which names `call_ids` (every task of that enqueue; these tasks' if not
        given). The whole rides out a Redis that cannot answer for a while (see
        taskq.outages) on `outage`'s time (the enqueue's), each call sent again with the
        same task ids."""
        if outage is None:
            outage = Outage(self.producer_retry)
        if self._registration.due():
            self.register_for(outage)
        results: list[TaskHandle] = []
        for keys, args in enqueue_calls(self.keys, self.events_retention, fields, batch_size):
            with enqueue_errors(sent + len(results), outage, fields, call_ids):
                reply = ride_out(partial(self.scripts.enqueue, keys=keys, args=args), outage)
            outage.step_done()
            results.extend(TaskHandle(task_id, created, broker=self)
                           for task_id, created in enqueued(reply))
        return results

    def register_for(self, outage: Outage) -> None:
        """`register_queue` if it is due, riding out an outage on `outage`'s time; a
        reply it lost says nothing of the sends after it."""
        if self._registration.due():
            ride_out(self.register_queue, outage)
            outage.step_done()

    def register_queue(self) -> None:
        """Name the queue in the registry of queues (again each REGISTER_AGAIN_SECONDS),
        so dashboards find it; `ConfigError` if Redis holds it as a sharded queue (see
        refuse_sharded)."""
        if self._registration.due():
            with redis_errors("register the queue"):
                stored = self.client.hget(SHARDS_KEY, self.queue)
            refuse_sharded(self.queue, stored)
            self.permit(PRODUCER_SCRIPTS)
            with redis_errors("register the queue"):
                self.client.sadd(QUEUES_KEY, self.queue)
            self._registration.done()

    def permit(self, scripts: tuple[str, ...],
               doing: str = "check what the ACL user may run") -> None:
        """`check_permissions` for those of `scripts` not asked about on this broker
        yet: a producer's scripts beyond enqueue's and watch's (cancel, revive, cancel
        a workflow) are asked about before their first call, which `doing` names."""
        unasked = tuple(name for name in scripts if name not in self._permitted)
        if unasked:
            self.check_permissions(unasked, doing)
            self._permitted.update(unasked)

    def check_permissions(self, scripts: tuple[str, ...],
                          doing: str = "check what the ACL user may run") -> None:
        """Raise `ConfigError` if the connection's ACL user may not run a command
        `scripts` call on this queue's keys (see can_run.lua): a producer asks about
        its own as it first registers the queue, a worker about its own as it is made.
        A Redis error is a BrokerError saying Redis could not do `doing`."""
        keys, args = can_run_call(self.keys, scripts)
        with redis_errors(doing):
            reply = self.scripts.can_run(keys=keys, args=args)
        refuse_unrunnable(self.queue, reply)

    # -- workers -----------------------------------------------------------------------

    def lease(self, worker_id: str, lease_seconds: float) -> tuple[str, int] | None:
        """Lease the task at the front of ready: `(task_id, token)`, or None if none is ready."""
        batch = self.lease_many(worker_id, lease_seconds, 1)
        return (batch.tasks[0].task_id, batch.tasks[0].token) if batch.tasks else None

    def lease_many(
        self, worker_id: str, lease_seconds: float, count: int, request_id: str | None = None
    ) -> LeaseBatch:
        """Lease up to `count` ready tasks in one atomic step.

        Every call carries a request id (made here unless given), so a call the client
        retries after a lost reply returns the tasks it already leased, not more. A call
        whose round trip failed altogether, with an id made here, is replayed by this
        broker's next lease (see give_back_unanswered); one with an id given is the
        caller's to send again.
        """
        keys, args = self._lease_call(worker_id, lease_seconds, count, request_id)
        self.give_back_unanswered()
        with (self._unanswered.errors("lease tasks", worker_id, args[5], lease_seconds)
              if request_id is None else redis_errors("lease tasks")):
            reply = self.scripts.lease(keys=keys, args=args)
        return self._leased(reply)

    def wait_and_lease(
        self, worker_id: str, lease_seconds: float, count: int, timeout: float
    ) -> LeaseBatch | None:
        """Block until a script signals new work or `timeout` seconds pass, then lease up
        to `count` tasks, in one round trip: the lease is queued behind the blocking pop
        on the same connection, so Redis runs it the moment a producer wakes this worker
        and both replies come back together. None, having leased nothing, where the
        transport cannot send the two in one round trip (a cluster): there, call
        `wait_for_work` and then `lease_many`."""
        keys, args = self._lease_call(worker_id, lease_seconds, count, None)
        timeout = block_seconds(TIMEOUT.check(timeout), self._block_limit)
        self.give_back_unanswered()
        with self._unanswered.errors("lease tasks", worker_id, args[5], lease_seconds):
            reply = self.transport.wait_then_run(self.keys.wake, timeout,
                                                 self.scripts.lease.script, keys, args)
        return None if reply is None else self._leased(reply)

    def give_back_unanswered(self) -> None:
        """Replay each lease call of this broker that may have run unanswered, and
        release what it leased, unstarted, to the front of ready (see unanswered.py).
        Every lease call does this first, and a worker's maintenance each turn, so a
        queue it leases nothing from gets its tasks back too. Raises BrokerError."""
        if not self._unanswered:
            return
        for call in self._unanswered.take():
            keys, args = self._lease_call(call.worker_id, 1, 1, call.request_id)
            args[3] = 0  # only the replay: lease.lua leases nothing new
            try:
                with redis_errors("take back the tasks of a lease whose reply was lost"):
                    batch = LeaseBatch.from_reply(self.scripts.lease(keys=keys, args=args))
                for task in reversed(batch.tasks):  # each to the front: first goes last
                    self.release(task.task_id, task.token)
            except BrokerError as e:
                if lost_in_transit(e):
                    self._unanswered.keep(call)
                raise
            self._unanswered.replayed(call, bool(batch.tasks))
            if batch.tasks:
                log.warning("gave back %d task(s) of queue %r leased by a call whose reply "
                            "was lost: %s", len(batch.tasks), self.queue,
                            ", ".join(task.task_id for task in batch.tasks))

    def _lease_call(self, worker_id: str, lease_seconds: float, count: int,
                    request_id: str | None) -> tuple[list[str], list[Any]]:
        check_text(worker_id, "worker_id", MAX_WORKER_ID_CHARS)
        lease_ms = to_ms(lease_seconds, "lease_seconds")
        count = LEASE_COUNT.check(count)
        if request_id is None or request_id == "":
            request_id = new_id()
        else:
            check_text(request_id, "request_id", MAX_REQUEST_ID_CHARS)
        k = self.keys
        keys = [k.ready, k.leased, k.delayed, k.events, k.seq, k.epoch, k.wake, k.rates]
        return keys, [k.prefix, worker_id, lease_ms, count, self.events_retention, request_id,
                      *self._limit_args()]

    def _leased(self, reply: list[Any]) -> LeaseBatch:
        """A lease reply read, each rate limit another deploy holds warned of once."""
        batch = LeaseBatch.from_reply(reply)
        for held in batch.held:
            seen = (held.name, held.interval_us, held.burst)
            if seen in self._held_warned:
                continue
            self._held_warned.add(seen)
            own = next((r for r in self.rate_limits if r.name == held.name), None)
            whose = ("the queue's rate limit" if held.name == QUEUE_LIMIT
                     else f"the rate limit of task {held.name!r}")
            log.warning(
                "queue %r: %s is applied as another deploy declares it (%s), not as "
                "this worker's app does (%s), while a worker that applied it runs (%s "
                "among them): once they stop, this one's applies. Declare one limit in "
                "every deploy, or stop the old workers first", self.queue, whose,
                spacing_text(held.interval_us, held.burst),
                spacing_text(own.interval_us, own.burst) if own else "no limit",
                shown(held.holder))
        return batch

    def _limit_args(self) -> list[Any]:
        """lease.lua's limits: how many names, then (name, interval_us, burst, max,
        keyed) for each, 0 standing for a limit the name does not have, keyed 1 for a
        concurrency limit kept per key. Built once for the limits set, not on every
        lease."""
        key = (self.rate_limits, self.concurrency_limits)
        if self._limit_args_for[0] != key:
            self._limit_args_for = (key, self._build_limit_args())
        return self._limit_args_for[1]

    def _build_limit_args(self) -> list[Any]:
        if not self.rate_limits and not self.concurrency_limits:
            return [0]
        rates = {r.name: r for r in self.rate_limits}
        most = {c.name: c for c in self.concurrency_limits}
        args: list[Any] = [len(rates.keys() | most.keys())]
        for name in sorted(rates.keys() | most.keys()):
            rate, limit = rates.get(name), most.get(name)
            args += [name, rate.interval_us if rate else 0, rate.burst if rate else 1,
                     limit.most if limit else 0, int(bool(limit and limit.key))]
        return args

    def heartbeat(self, task_id: str, token: int, lease_seconds: float) -> Renewal:
        """Extend the lease: `Renewal.HELD`, `CANCEL` (held, and the task's cancel was
        requested) or `LOST` (expired, reaped or taken over), truthy while held."""
        return self.heartbeat_many([(task_id, token)], lease_seconds)[0]

    def heartbeat_many(self, held: Sequence[tuple[str, int]],
                       lease_seconds: float) -> list[Renewal]:
        """Extend the lease of each `(task_id, token)` in one atomic step, so a worker's
        beat is one round trip however many tasks it holds; a `Renewal` for each."""
        held = check_held(held)
        lease_ms = to_ms(lease_seconds, "lease_seconds")
        if not held:
            return []
        k = self.keys
        with redis_errors("renew leases"):
            reply = self.scripts.heartbeat(
                keys=[k.leased, k.events, k.seq, k.epoch],
                args=[k.prefix, lease_ms, self.events_retention, len(held),
                      *(value for pair in held for value in pair)],
            )
        return [Renewal(int(r)) for r in reply]

    def ack(self, task_id: str, token: int, result: str | None = None) -> bool:
        """Mark the task completed, keeping `result` (JSON text, as `codec.encode_result`
        makes it) as its result; False means the token is stale and nothing changed."""
        return self.ack_many([(task_id, token)], [result])[0]

    def ack_cut(self, task_id: str, token: int) -> bool:
        """Mark the task completed with no result: its handler was cut off at a worker's
        shutdown after its effect. A workflow step so ended fails its stage (`cut`), as
        it has nothing to hand on; False means the token is stale and nothing changed."""
        return self._acked([(task_id, token)], None, cut=True)[0]

    def ack_many(self, held: Sequence[tuple[str, int]],
                 results: Sequence[str | None] | None = None) -> list[bool]:
        """Ack each `(task_id, token)` in one atomic step, keeping each task's result
        (JSON text; None keeps none) only if its ack is taken; False for each stale one."""
        return self._acked(held, results)

    def _acked(self, held: Sequence[tuple[str, int]], results: Sequence[str | None] | None,
               cut: bool = False) -> list[bool]:
        keys, args = self._ack_call(held, results, cut)
        if not held:
            return []
        with redis_errors("mark a task completed"):
            reply = self.scripts.ack(keys=keys, args=args)
        return [int(r) == 1 for r in reply]

    def ack_and_lease(
        self, held: Sequence[tuple[str, int]], worker_id: str, lease_seconds: float,
        count: int, results: Sequence[str | None] | None = None,
    ) -> tuple[list[bool] | BrokerError, LeaseBatch]:
        """`ack_many(held)` and `lease_many(worker_id, lease_seconds, count)`: two atomic
        steps, sent in one write so a busy worker settles and refills its slots in one
        round trip (on a cluster, one call after the other). An ack step that failed
        where the lease ran (a key of the wrong type) comes back as its error beside the
        leased tasks, which must not be lost. Out of memory, Redis refuses both (the
        lease checks for room before it pops: lua/_common.lua's
        refuse_when_out_of_memory). If the lease step or the round trip fails, this
        raises: acks that went through are refused as stale when sent again, and tasks a
        lost lease took come back when their leases expire."""
        lease_keys, lease_args = self._lease_call(worker_id, lease_seconds, count, None)
        if not held:
            return self.ack_many(held, results), self.lease_many(
                worker_id, lease_seconds, count)
        ack_keys, ack_args = self._ack_call(held, results)
        self.give_back_unanswered()
        with self._unanswered.errors("mark tasks completed and lease more", worker_id,
                                     lease_args[5], lease_seconds):
            acks, leased = self.transport.run_many(
                [(self.scripts.ack.script, ack_keys, ack_args),
                 (self.scripts.lease.script, lease_keys, lease_args)])
            if isinstance(leased, Exception):
                raise leased
        if isinstance(acks, Exception):
            return broker_error("mark a task completed", acks), self._leased(leased)
        return [int(r) == 1 for r in acks], self._leased(leased)

    def _ack_call(self, held: Sequence[tuple[str, int]], results: Sequence[str | None] | None,
                  cut: bool = False) -> tuple[list[str], list[Any]]:
        held = check_held(held)
        kept = [CUT] * len(held) if cut else self._check_results(results, len(held))
        k = self.keys
        keys = [k.leased, k.events, k.seq, k.epoch]
        args = [k.prefix, self.events_retention, self.completed_ttl_ms, len(held),
                *(value for (task_id, token), result in zip(held, kept, strict=True)
                  for value in (task_id, token, result))]
        return keys, args

    def _check_results(self, results: Sequence[str | None] | None, n: int) -> list[str]:
        """Each result as the ack script takes it ('' for none), or `InvalidTaskError`."""
        if results is None:
            return [""] * n
        if isinstance(results, str | bytes) or not isinstance(results, Sequence) \
                or len(results) != n:
            raise InvalidTaskError(f"results must be a sequence of {n} JSON texts or None, "
                                   f"one per held task, not {shown(results)}")
        kept = []
        for result in results:
            if result is None:
                kept.append("")
                continue
            if not isinstance(result, str) or result in ("", CUT):
                raise InvalidTaskError(f"a result must be JSON text or None, not {shown(result)}")
            try:
                # ASCII text (most JSON) is its own UTF-8: no copy to measure it.
                size = len(result) if result.isascii() else len(result.encode("utf-8"))
            except UnicodeEncodeError:
                raise InvalidTaskError(f"a result must be UTF-8 text, not {shown(result)}: it "
                                       "holds a lone surrogate") from None
            if size > self.max_result_bytes:
                raise InvalidTaskError(f"a result of {size} bytes is over the limit of "
                                       f"{self.max_result_bytes} bytes (TASKQ_MAX_RESULT_BYTES)")
            problem = result_problem(result)
            if problem is not None:
                raise InvalidTaskError(f"a result must be one JSON value, not "
                                       f"{shown(result)}: {problem}")
            kept.append(result)
        return kept

    def fail(
        self,
        task_id: str,
        token: int,
        error: str | Failure,
        backoff_base: float = 1.0,
        backoff_max: float = 60.0,
        *,
        delay: float | None = None,
        dead: bool = False,
    ) -> FailResult:
        """Record a failed attempt: retry after an equal-jitter backoff, or move to the DLQ.

        `error` is what went wrong: a `Failure` (type, message and traceback, each kept
        on the record) or just text. Its summary is kept as the task's last_error.
        Characters UTF-8 cannot encode (lone surrogates) are written as escapes and text
        past `limits.MAX_ERROR_CHARS` (a traceback: its first characters past
        `MAX_TRACEBACK_CHARS`) is cut, never refused, so a worker reporting an odd
        exception does not fail too.

        `delay` (seconds) retries after that delay instead of the backoff; `dead` moves
        the task to the DLQ now, whatever retries it has left (an attempt that can never
        succeed). Either way a task with no retries left goes to the DLQ."""
        failure = error if isinstance(error, Failure) else Failure("", error_text(error))
        mode = _fail_mode(delay, dead)
        k = self.keys
        args = [k.prefix, check_task_id(task_id), TOKEN.check(token), error_text(failure.line),
                to_ms(backoff_base, "backoff_base"), to_ms(backoff_max, "backoff_max"),
                repr(random.random()), self.events_retention,
                error_text(failure.error_type, "error_type"),
                error_text(failure.message, "error_message"),
                error_text(failure.traceback, "traceback", MAX_TRACEBACK_CHARS, keep_end=True),
                mode, 0 if delay is None else to_ms(delay, "delay")]
        with redis_errors("record a failed attempt"):
            reply = self.scripts.fail(
                keys=[k.leased, k.delayed, k.dlq, k.events, k.seq, k.epoch], args=args)
        status = text(reply[0])
        if status not in ("retry", "dead", "cancelled", "stale"):
            raise BrokerError(f"fail returned an unknown status {status!r}")
        return FailResult(status, int(reply[1]), int(text(reply[2])) / 1000)  # type: ignore[arg-type]

    def release(self, task_id: str, token: int) -> Released:
        """Give the task back to the front of ready without using a retry (a task whose
        cancel was requested ends cancelled instead); STALE (false) if the token is
        stale."""
        k = self.keys
        args = [k.prefix, check_task_id(task_id), TOKEN.check(token), self.events_retention]
        with redis_errors("hand back a leased task"):
            reply = self.scripts.release(
                keys=[k.leased, k.ready, k.events, k.seq, k.epoch, k.wake], args=args)
        return Released(int(reply))

    def progress(self, task_id: str, token: int, fraction: float, message: str = "") -> bool:
        """Record how far a running task has got (`fraction`, 0 to 1, kept in
        thousandths) and what it is doing (up to 200 characters), with a `progress`
        event; False, and nothing written, if the token is stale."""
        k = self.keys
        fraction = PROGRESS.check(fraction)
        if message:
            check_text(message, "message", MAX_PROGRESS_MESSAGE_CHARS)
        args = [k.prefix, check_task_id(task_id), TOKEN.check(token), round(fraction * 1000),
                message, self.events_retention]
        with redis_errors("record a task's progress"):
            reply = self.scripts.progress(keys=[k.leased, k.events, k.seq, k.epoch],
                                          args=args)
        return int(reply) == 1

    def ack_cancelled(self, task_id: str, token: int) -> bool:
        """End a leased task cancelled, its handler having returned or raised after its
        holder learned of the cancel (a `Renewal.CANCEL`); keeps no result. False if the
        token is stale or no cancel was requested: nothing changed."""
        k = self.keys
        args = [k.prefix, check_task_id(task_id), TOKEN.check(token), self.events_retention]
        with redis_errors("mark a task cancelled"):
            reply = self.scripts.ack_cancelled(keys=[k.leased, k.events, k.seq, k.epoch],
                                               args=args)
        return int(reply) == 1

    def cancel(self, task_id: str, only: str | None = None) -> Cancellation:
        """Cancel a task: a pending, delayed or dead one ends `cancelled` now; a running
        one is flagged, its worker told at its next heartbeat, and it ends `cancelled`
        when its handler returns (or completes, if it finished before it could learn of
        the cancel). A completed or cancelled task is left as it is. With `only` (a
        state: "dead" to empty the DLQ), a task in any other state is left as well.
        Sent again while Redis cannot answer for a while (see taskq.outages): a second
        cancel of a task changes nothing."""
        keys, args = cancel_call(self.keys, task_id, self.events_retention,
                                 self.completed_ttl_ms, only)
        outage = Outage(self.producer_retry)
        ride_out(partial(self.permit, ("cancel",), "cancel a task"), outage)
        with redis_errors("cancel a task"):
            reply = ride_out(partial(self.scripts.cancel, keys=keys, args=args), outage)
        return Cancellation.from_reply(task_id, reply)

    def handle(self, task_id: str) -> TaskHandle:
        """A handle on the task `task_id` (which may not exist yet, or any more): its
        `status()` and `result()`, from any process."""
        return TaskHandle(check_task_id(task_id), False, broker=self)

    def watch(self, task_id: str, mark: bool = True) -> Watched | None:
        """How the task stands, read with its result or error; None if it has no record.
        With `mark`, a task that has not ended will wake `wait_done` when it ends."""
        keys, args = watch_call(self.keys, task_id, mark)
        try:
            with redis_errors("read a task's result"):
                reply = self.scripts.watch(keys=keys, args=args)
        except BrokerError as e:
            if not write_refused(e):
                raise
            # While Redis refuses writes it refuses a script that may write, though the
            # record can be read: read it alone, unmarked (no task ends meanwhile).
            with redis_errors("read a task's result"):
                reply = watched_alone(self.client.hmget(keys[0], WATCHED))
        return Watched.from_reply(reply)

    def wait_done(self, task_id: str, timeout: float) -> bool:
        """Block until a task that `watch` marked ends, or `timeout` seconds pass: a
        BLMOVE of the task's done list onto itself, which the ending script fills, so
        every waiter wakes. True if it woke for an end (call `watch` again to read it)."""
        done = self.keys.done(check_task_id(task_id))
        timeout = TIMEOUT.check(timeout)
        timeout = block_seconds(timeout, self._block_limit)
        with redis_errors("wait for a task to end"):
            # Redis takes a fractional timeout; redis-py's hint says int but passes it on.
            return self.client.blmove(done, done, timeout,  # type: ignore[arg-type]
                                      "RIGHT", "LEFT") is not None

    def has_workers(self) -> bool:
        """Whether any worker is registered on the queue whose record has not expired
        by the server's clock (a whole fleet killed at once leaves its entries until
        the next registration prunes them)."""
        with redis_errors("read the workers"):
            return bool(self.scripts.live_workers(keys=[self.keys.workers]))

    def wait_for_work(self, timeout: float, also: Sequence[Broker] = ()) -> bool:
        """Block until a script signals new work on this queue or on a queue of `also`
        (brokers on this client; one call names every wake list, so only where the
        transport `spans_slots`), or `timeout` seconds pass; False if Redis could not be
        asked (the caller's next operation will say why)."""
        timeout = block_seconds(TIMEOUT.check(timeout), self._block_limit)
        return self.transport.wait([self.keys.wake, *(b.keys.wake for b in also)], timeout)

    # -- maintenance -------------------------------------------------------------------

    def reap(
        self, limit: int = 100, backoff_base: float = 1.0, backoff_max: float = 60.0
    ) -> list[tuple[str, ReapOutcome]]:
        """Treat expired leases as failed attempts: each waits its backoff, or dies (or
        ends cancelled, or is dropped if its record is gone)."""
        k = self.keys
        args = [k.prefix, LIMIT.check(limit), to_ms(backoff_base, "backoff_base"),
                to_ms(backoff_max, "backoff_max"), random.randint(1, 2**31 - 2),
                self.events_retention]
        with redis_errors("take back expired leases"):
            reply = self.scripts.reap(
                keys=[k.leased, k.delayed, k.dlq, k.events, k.seq, k.epoch], args=args)
        outcomes: dict[str, ReapOutcome] = {"dead": "dead", "cancelled": "cancelled",
                                            "gone": "gone"}
        return [(text(reply[i]), outcomes.get(text(reply[i + 1]), "delayed"))
                for i in range(0, len(reply), 2)]

    def promote(self, limit: int = 100) -> list[str]:
        """Move delayed tasks that are due to the back of ready."""
        k = self.keys
        with redis_errors("move due delayed tasks to ready"):
            reply = self.scripts.promote(
                keys=[k.delayed, k.ready, k.events, k.seq, k.epoch, k.wake],
                args=[k.prefix, LIMIT.check(limit), self.events_retention],
            )
        return [text(task_id) for task_id in reply]

    def lift_rate_limits(self, names: Sequence[str], limit: int = 1000) -> Lifted:
        """Forget the rate limits stored for `names` (task names run with no rate limit
        now or run by no live worker, or QUEUE_LIMIT for a queue with none of its own):
        their lines of throttled tasks are made due, up to `limit` tasks a call, to be
        checked again by the limits in force; call again while `left`. A worker does so
        as it starts."""
        names = [n if n == QUEUE_LIMIT else check_task_name(n) for n in names]
        limit = LIMIT.check(limit)
        k = self.keys
        lifted = left = 0
        # The script takes as many names as a lease takes limits; an app with more
        # names is lifted a script call per share of them.
        for start in range(0, len(names), LEASE_COUNT.high):
            with redis_errors("lift rate limits"):
                reply = self.scripts.lift_rate_limits(
                    keys=[k.rates, k.delayed, k.events, k.seq, k.epoch],
                    args=[k.prefix, self.events_retention, limit,
                          *names[start:start + LEASE_COUNT.high]])
            done = Lifted.from_reply(reply)
            lifted, left = lifted + done.lifted, left + done.left
        return Lifted(lifted, left)

    def rate_limited_names(self) -> list[str]:
        """The task names the queue holds a rate limit (or its line's cursors) for, as
        leases stored them; not QUEUE_LIMIT, nor a field no task could be named by (one
        written by hand, which lift_rate_limits would refuse). Sorted."""
        with redis_errors("read the rate limits"):
            fields = self.client.hkeys(self.keys.rates)
        names = {text(f).split("|", 1)[0] for f in fields}
        return sorted(n for n in names if TASK_NAME.fullmatch(n))

    def fire(self, schedule: Schedule, ticks: Sequence[int] = (), after_ms: int = 0) -> Fired:
        """Make the task of each of `ticks` (ms, ascending) that is due by the server's
        clock and after the schedule's last handled tick, as its policy says, in one
        atomic step: however many workers fire the same tick, it becomes one task.

        `after_ms` is the last handled tick the ticks were computed from (the previous
        reply's): if Redis has an earlier one, it lost writes, and nothing fires until
        ticks are proposed from what it has. The schedule's definition is kept beside
        its version, for readers without the app (the dashboards)."""
        if not isinstance(schedule, Schedule):
            raise InvalidTaskError(f"fire needs a Schedule, not {shown(schedule)}")
        if not isinstance(ticks, Sequence) or any(
                not isinstance(t, int) or isinstance(t, bool) for t in [*ticks, after_ms]):
            raise InvalidTaskError(f"ticks must be whole milliseconds, not "
                                   f"{shown(ticks)} after {shown(after_ms)}")
        definition = schedule.definition
        if len(definition.encode()) > MAX_DEFINITION_BYTES:
            raise InvalidTaskError(f"schedule {schedule.name!r}: its definition is over "
                                   f"{MAX_DEFINITION_BYTES} bytes")
        k = self.keys
        self.register_queue()
        with redis_errors("fire a periodic schedule"):
            reply = self.scripts.fire(
                keys=[k.schedules, k.ready, k.events, k.seq, k.epoch, k.wake],
                args=[k.prefix, self.events_retention, schedule.name, schedule.version,
                      definition, schedule.task, schedule.payload, schedule.max_retries,
                      schedule.policy, schedule.grace_ms, after_ms, schedule.priority,
                      len(ticks), *ticks],
            )
        return Fired.from_reply(reply)

    def schedule_state(self, name: str) -> tuple[int, str] | None:
        """A schedule's last handled tick (ms) and stored version; None if never fired,
        or if what is stored is no whole number of ms (written by hand), as the
        dashboard's reader (schedule_view) takes it."""
        with redis_errors("read a periodic schedule"):
            last, version = self.client.hmget(self.keys.schedules,
                                              [f"last:{name}", f"version:{name}"])
        tick = None if last is None else whole_text(text(last))
        return None if tick is None else (tick, text(version or ""))

    def forget_schedule(self, name: str, last_tick_ms: int | None = None) -> Forgotten:
        """Remove schedule `name`'s record (last tick, version, definition), so that
        readers stop listing it; the tasks its ticks made stay. With `last_tick_ms`,
        only if that is still its last tick: a worker that fired it since leaves it
        (`fired`). A worker that still declares it starts it again at its next
        firing, from the server's now: the ticks in between are skipped, none runs
        twice."""
        name = check_schedule_name(name)
        if last_tick_ms is not None:
            last_tick_ms = TICK_MS.check(last_tick_ms)
        with redis_errors("forget a periodic schedule"):
            reply = self.scripts.forget_schedule(
                keys=[self.keys.schedules],
                args=[name, "" if last_tick_ms is None else last_tick_ms],
            )
        return Forgotten.from_reply(reply)

    def retry_dead(self, task_id: str) -> bool:
        """Move a task from the DLQ back to ready with its retries reset; False, changing
        nothing, when it is not in the DLQ or its record names no task to run."""
        k = self.keys
        task_id = check_task_id(task_id)
        self.permit(("retry_dead",), "retry a dead task")
        with redis_errors("retry a dead task"):
            reply = self.scripts.retry_dead(
                keys=[k.dlq, k.ready, k.events, k.seq, k.epoch, k.wake],
                args=[k.prefix, task_id, self.events_retention],
            )
        return int(reply) == 1

    def purge(self, dead_ttl: float, limit: int = 100) -> list[str]:
        """Delete dead tasks older than `dead_ttl` seconds: record and DLQ entry together."""
        k = self.keys
        args = [k.prefix, LIMIT.check(limit), to_ms(dead_ttl, "dead_ttl"), self.events_retention]
        with redis_errors("delete old dead tasks"):
            reply = self.scripts.purge(keys=[k.dlq, k.events, k.seq, k.epoch], args=args)
        return [text(task_id) for task_id in reply]

    # -- reads -------------------------------------------------------------------------

    def payload(self, task_id: str) -> dict[str, Any]:
        """The task's payload ({} if it has none or the task does not exist)."""
        with redis_errors("read a task's payload"):
            text = self.client.hget(self.keys.task(check_task_id(task_id)), "payload")
        return decode_payload(text)

    def dead(self, limit: int | None = None, start: int = 0) -> list[str]:
        """Task ids in the DLQ, most recently dead first, but for a task a purge kept
        for its idempotency key, which it moves to the front (all, or the first `limit`
        of them: 1 to 100,000, else InvalidTaskError), from the `start`th on."""
        start = DLQ_START.check(start)
        last = -1 if limit is None else start + LIMIT.check(limit) - 1
        with redis_errors("list the dead letter queue"):
            ids = self.client.lrange(self.keys.dlq, start, last)
        return [text(task_id) for task_id in ids]

    def task(self, task_id: str) -> TaskRecord | None:
        """The task's stored record, or None if there is none."""
        with redis_errors("read a task's record"):
            raw = self.client.hgetall(self.keys.task(check_task_id(task_id)))
        return record_from(task_id, raw)

    def counts(self) -> QueueCounts:
        """How many ids are ready, leased, delayed and dead, read in one atomic step
        (the snapshot script listing nothing: a cluster cannot run MULTI on a node
        that failed over, but routes a script by its keys like any command)."""
        keys, args = counts_call(self.keys)
        with redis_errors("count the queue's tasks"):
            reply = self.scripts.snapshot(keys=keys, args=args)
        return counts_from(reply)

    def server_time_ms(self) -> int:
        """Redis server time: the clock every lease and run-at time is measured on."""
        with redis_errors("read the server's clock"):
            seconds, micros = self.client.time()
        return int(seconds) * 1000 + int(micros) // 1000
