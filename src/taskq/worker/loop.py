"""The worker: its parts wired together, `run()`, and one turn of its loop.

Threads, and the one module each one's code lives in: the loop (this module, on the
thread that calls `run`), the waker (`waker.py`; one per queue for a worker on several
queues of a cluster), the heartbeat (`heartbeat.py`), the time limits
(`time_limits.py`), the handlers (`runner.py`). What
they share lives in one `Slots` (`slots.py`); they talk to the loop through its `Inbox`
(`inbox.py`). The queues it leases from, and their order, are its `Queues`
(`queues.py`).
"""

from __future__ import annotations

import logging
import os
import socket
import time
import uuid

import redis

from taskq.app import App
from taskq.broker import Broker
from taskq.connection import connect
from taskq.errors import BrokerError, ConfigError, InvalidTaskError
from taskq.keys import SHARD_MARK
from taskq.limits import CONCURRENCY, LEASE_COUNT, MAX_WORKER_ID_CHARS, check_text
from taskq.rates import QUEUE_LIMIT
from taskq.registry import Presence
from taskq.scripts import WORKER_SCRIPTS
from taskq.settings import Settings
from taskq.shards import SHARDS_KEY, refuse_sharded, register
from taskq.version import __version__
from taskq.worker.dispatch import Dispatcher
from taskq.worker.due import Due
from taskq.worker.heartbeat import Heartbeat, LeaseCheck
from taskq.worker.inbox import Inbox, Outcome
from taskq.worker.lifecycle import EarlyStop, Lifecycle
from taskq.worker.maintenance import Maintenance
from taskq.worker.outage import Backoff
from taskq.worker.queues import (
    Leased,
    Leaser,
    Leases,
    QueueChoice,
    Queues,
    queue_choice,
    with_shards,
)
from taskq.worker.report import report
from taskq.worker.runner import HOLD_SECONDS, Runner
from taskq.worker.settle import Settler
from taskq.worker.slots import Slots, Stats
from taskq.worker.time_limits import TimeLimits
from taskq.worker.waker import Waker

log = logging.getLogger("taskq.worker")

# The exit status of a worker that stopped with tasks it could not settle or give back,
# Redis away past their leases (EX_TEMPFAIL): a supervisor can tell it from a clean
# drain. Nothing is lost: they are reaped.
UNSETTLED_STATUS = 75


def make_worker_id() -> str:
    return f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"


def refuse_unknown_shards(queues: Queues) -> Queues:
    """`queues`, or ConfigError when Redis holds one served whole as sharded (a worker
    without the app's shards, or with TASKQ_SHARDS unset): it would lease from the
    queue itself, where none of the shards' tasks are. Checked when Redis answers; one
    that does not yet is waited out by the loop, as any outage."""
    plain = [name for name in queues.names if SHARD_MARK not in name]
    if not plain:  # a sharded app's shards alone: its layout is checked by register
        return queues
    try:
        stored = queues.first.client.hmget(SHARDS_KEY, plain)
    except redis.RedisError:
        return queues
    for name, layout in zip(plain, stored, strict=True):
        refuse_sharded(name, layout, worker=True)
    return queues


def refuse_limits_on_shards(app: App, queues: Queues) -> None:
    """ConfigError when `app` limits tasks a shard served by name would lease (`--queue
    jobs~0,jobs~1` with an app that has no shards, or TASKQ_SHARDS unset): each shard
    keeps its own slots and spacing, so the limit would hold per shard, N times over.
    A sharded app's own limits were refused as it declared them."""
    for name in queues.names:
        if SHARD_MARK not in name:
            continue
        limited = [*("the queue's own rate limit" if r.name == QUEUE_LIMIT else
                     f"a rate limit on task {r.name!r}" for r in app.rate_limits(name)),
                   *(f"a concurrency limit on task {c.name!r}"
                     for c in app.concurrency_limits())]
        if limited:
            raise ConfigError(
                f"this worker serves {name!r}, a shard of queue "
                f"{name.partition(SHARD_MARK)[0]!r}, and its app declares "
                f"{', '.join(limited)}: a worker applies its app's limits on every queue it "
                "serves, and a limit is kept in one Redis slot, so on each shard it would "
                "hold in full; serve the shards from workers of an app that declares no "
                "limits (the sharded app's own, or one without the limited tasks)")


def checked_worker_id(worker_id: object) -> str:
    """`worker_id` if every script takes it, else ConfigError now: its first lease, on
    the worker's own threads, would refuse it."""
    try:
        return check_text(worker_id, "worker_id", MAX_WORKER_ID_CHARS)
    except InvalidTaskError as e:
        raise ConfigError(str(e)) from None


class Worker:
    """Runs an App's tasks with `concurrency` handlers at a time, from one queue (the
    app's, or `broker`'s) or from several: `queues=["high", "default", "low"]` tries
    them in that order each turn (a queue gets slots only while the ones before it have
    no ready task), `queues={"high": 3, "default": 1}` picks the queue tried first in
    proportion to the weights, so none is starved. The queues share one connection
    (`broker`'s when given) and one set of slots; each task is settled, renewed and
    maintained on its own queue."""

    def __init__(
        self,
        app: App,
        *,
        settings: Settings | None = None,
        broker: Broker | None = None,
        queues: QueueChoice | None = None,
        concurrency: int | None = None,
        worker_id: str | None = None,
    ) -> None:
        self.app = app
        self.settings = s = settings or app.settings
        self.queues = self._queues(broker, queues)
        self.broker = self.queues.first  # the only one, for a worker on one queue
        # Every lease this worker makes, on every queue, applies its app's rate limits
        # (see taskq.rates; the queue's own too) and concurrency limits
        # (taskq.concurrency).
        refuse_limits_on_shards(app, self.queues)
        for each in self.queues:
            each.rate_limits = app.rate_limits(each.queue)
            each.concurrency_limits = app.concurrency_limits()
        self.concurrency = s.concurrency if concurrency is None else CONCURRENCY.check(
            concurrency, "Worker concurrency", ConfigError)
        if self.concurrency + s.prefetch > LEASE_COUNT.high:
            raise ConfigError(
                f"Worker concurrency ({self.concurrency}) + TASKQ_PREFETCH ({s.prefetch}) "
                f"must be at most {LEASE_COUNT.high:,}: a worker leases up to both at once")
        self.worker_id = make_worker_id() if worker_id is None else checked_worker_id(worker_id)
        self._refuse_unrunnable()
        # Slots for the handlers and for the tasks leased to wait for one (--prefetch).
        self.slots = Slots(self.concurrency + s.prefetch)
        self.inbox = Inbox()
        self.lifecycle = Lifecycle(s.shutdown_grace_seconds, self.inbox)
        # A result is encoded against the limit the brokers will check it against at
        # the ack (the worker's settings, not the app's): over it there, the ack would
        # be refused after the handler's effects, and the task run again.
        self.runner = Runner(app, self.concurrency, self.inbox, s.time_limit_seconds,
                             backlog=s.prefetch, lease_seconds=s.lease_seconds,
                             max_result_bytes=min(q.max_result_bytes for q in self.queues))
        self.dispatcher = Dispatcher(self.worker_id, self.slots, self.runner,
                                     {q.queue: LeaseCheck(q, s.lease_seconds)
                                      for q in self.queues})
        # Its own thread, so a renewal waiting on a slow Redis holds no run past its limit;
        # always there, since a task registered after this may have a limit.
        self.time_limits = TimeLimits(self.slots, self.runner.time_out,
                                      lambda: self.lifecycle.drain_deadline)
        self.heartbeat = Heartbeat(self.queues, s, self.slots, self.runner, Presence(
            worker_id=self.worker_id, host=socket.gethostname(), pid=os.getpid(),
            queues=self.queues.names, concurrency=self.slots.capacity,
            tasks=sorted(app.tasks), version=__version__,
            dead_ttl_seconds=s.dead_ttl_seconds))
        # When the next delayed task or throttled start comes due, or a lease expires,
        # as the loop's and the wakers' leases said.
        self.due = Due()
        self.wakers = self._wakers()
        self.waker = self.wakers[0]
        self.leaser = Leaser(self.worker_id, s.lease_seconds)
        self.settler = Settler(self.queues, s, self.slots, self.worker_id,
                               lambda: not self.lifecycle.running)
        # The app's schedules fire on one queue whichever queues a worker serves, so
        # workers dividing the queues between them still make one task per tick. One
        # that does not serve it fires there for those that do, with its first queue's
        # maintenance.
        name = app.schedules_queue
        served = name in self.queues.names
        fires_on = self.queues.broker(name) if served else Broker.from_settings(
            s, name, self.queues.first.client)
        carrier = fires_on if served else self.queues.first
        if app.schedules and not served:
            log.warning("this worker does not serve queue %r, where the app's %d "
                        "schedule(s) fire: it fires them there for the workers that do; "
                        "if none does, their tasks wait there", name, len(app.schedules))
        self.maintenance = tuple(
            Maintenance(q, s, app.schedules.values() if q is carrier else (),
                        fires_on if q is carrier else None,
                        unlimited=app.unlimited_rates(q.queue), known=tuple(app.tasks))
            for q in self.queues)
        self._backoff = Backoff()

    def _queues(self, broker: Broker | None, queues: QueueChoice | None) -> Queues:
        """`broker` (else the app's queue) alone, or each of `queues` through a broker
        on one client: `broker`'s (itself for its own queue), else a new one. A sharded
        app's queue stands for its shards, which take turns (equal weights); another
        queue, or one shard by name, stands for itself."""
        layout = self.app.layout
        if queues is None and layout is None:
            return refuse_unknown_shards(Queues.of(broker or self.app.make_broker()))
        if queues is None:
            queues = [self.app.queue if broker is None else broker.queue]
        names, weights = queue_choice(queues)
        client = connect(self.settings) if broker is None else broker.client
        if layout is not None and layout.queue in names:
            register(client, layout)
            names, weights = with_shards(layout, names, weights)
        return refuse_unknown_shards(Queues(
            [broker if broker is not None and name == broker.queue else
             Broker.from_settings(self.settings, name, client=client) for name in names],
            weights))

    def _wakers(self) -> tuple[Waker, ...]:
        """One waker for one queue, leasing what wakes it; for several, wakers that only
        wake the loop (which leases in the queues' order): one waiting on every queue in
        one call, or on a cluster, where one call cannot span the queues' slots, one per
        queue."""
        parts = (self.settings, self.worker_id, self.slots, self.due)
        rest = (self.runner, self.lifecycle, self.inbox)
        if len(self.queues) == 1:
            return (Waker(self.queues.brokers, *parts, self.dispatcher, *rest),)
        if self.queues.first.transport.spans_slots:
            return (Waker(self.queues.brokers, *parts, None, *rest),)
        return tuple(Waker([q], *parts, None, *rest, name=f"taskq-waker-{q.queue}")
                     for q in self.queues)

    @property
    def stats(self) -> Stats:
        return self.slots.stats()

    def run(self, install_signal_handlers: bool = True, pool_copy: bool = False,
            early: EarlyStop | None = None) -> int:
        """Work until asked to stop and drained; returns the process exit status.
        `pool_copy`: this process is one of a worker pool's, whose stop signals only
        drain it (see lifecycle.EXIT_NOW_SIGNAL). `early`: the stop signals that came
        before this worker's own handlers took over, one of which stops it at once."""
        if install_signal_handlers:
            self.lifecycle.install_signal_handlers(pool_copy)
        if early is not None and early.reason is not None:
            self.lifecycle.request_stop(early.reason)
        where = f"queue {self.broker.queue!r}" if len(self.queues) == 1 \
            else self.queues.describe()
        log.info("worker %s on %s, concurrency %d, prefetch %d, lease %.1fs",
                 self.worker_id, where, self.concurrency, self.settings.prefetch,
                 self.settings.lease_seconds)
        self.runner.start()
        # Registered before the first lease: a worker not yet in the registry may have
        # the rate limits its leases apply lifted by another, as run by no one.
        self.heartbeat.announce()
        self.heartbeat.start()
        self.time_limits.start()
        for waker in self.wakers:
            waker.start()
        try:
            while not self._finished():
                if self.lifecycle.report_asked():
                    report(self.worker_id, self.slots.in_hand(), self.stats,
                           self.lifecycle.draining, self.runner.coroutines_on)
                if self.lifecycle.running:
                    self._wait(self._turn())
                else:
                    self._drain()
                    self._wait(None)
            # The grace is over (or every run in hand ended): fenced before any call.
            self.settler.fence(self.slots.in_hand())
            self.settler.settle(self.inbox.take())
        finally:
            for waker in self.wakers:
                waker.stop()
            # A waker's lease under way (the grace may have ended during it, or be 0)
            # gives back what it takes once the worker has begun to stop, or puts it in
            # hand if it passed that check just before: wait for it, at most a wait and
            # a Redis call, so the tasks are given back or settled here, not left
            # leased by a process that has gone. With a grace, the loop has already waited
            # for the slots to come back; without, a stop waits one of the waker's waits.
            # A loop that never drained (no grace) starts nothing more from now on, and
            # hands back what waits for a handler; what ends meanwhile is settled.
            self.runner.stop_starting()
            self.settler.fence(self.slots.in_hand())
            self.slots.close(max(w.timeout for w in self.wakers)
                             + self.settings.redis_timeout_seconds)
            self.settler.settle(self.inbox.take())
            self.settler.abandon(self.slots.in_hand(), self.inbox.take,
                                 self.runner.give_up_at_stop)
            self.time_limits.stop()
            self.heartbeat.stop()
            # It leaves the registry on its way out: wait for that, at most a Redis call.
            if self.heartbeat.ident is not None:
                self.heartbeat.join(self.settings.redis_timeout_seconds + 1)
            self.runner.close()
            self.lifecycle.stopped()
            log.info("worker %s done: %s", self.worker_id, self.stats)
            if install_signal_handlers:
                self.lifecycle.restore_signal_handlers()
        return self._exit_status()

    def _exit_status(self) -> int:
        """0, or UNSETTLED_STATUS when the stop left tasks it could not settle."""
        left = self.settler.left
        if left:
            log.error("worker %s stopped with %d task(s) it could not settle or give back "
                      "(Redis away past their leases): they are reaped and run again, or "
                      "ended, there; exit status %d", self.worker_id, left, UNSETTLED_STATUS)
            return UNSETTLED_STATUS
        return 0

    def _refuse_unrunnable(self) -> None:
        """Raise `ConfigError` if Redis refuses this worker's ACL user a command the
        scripts call on a queue it serves, or scripts or the queue's keys at all. Under
        the first, each lease is made and its script stops part way, and the task is
        reaped until it goes dead, never run; under the others the worker would wait
        for good, as for an outage. An outage now is waited out by the loop."""
        for broker in self.queues.brokers:
            try:
                broker.check_permissions(WORKER_SCRIPTS)
            except BrokerError as e:
                if not isinstance(e.__cause__, redis.exceptions.NoPermissionError):
                    return
                raise ConfigError(f"worker {self.worker_id} cannot start: {e}") from e

    def stop(self, reason: str = "stop requested") -> None:
        """Drain and stop, as the first SIGTERM would."""
        self.lifecycle.request_stop(reason)

    # -- one turn ----------------------------------------------------------------------

    def _turn(self) -> float:
        """Settle finished handlers and fill the free slots (theirs included) in one round
        trip per queue leased from, then promote and reap; leasing first keeps
        maintenance off the path from a new task to its handler. Returns how long the
        loop may wait before looking again."""
        outcomes = self.inbox.take()
        free = self.slots.reserve(finishing=len(outcomes))
        try:
            leases = self._settle_and_refill(outcomes, free)
        except BrokerError as e:
            return self._backoff.failed(e)
        finally:
            self.slots.unreserve(free)
        # Once what a lease said comes due (a delayed task or throttled start to promote,
        # a lease expired to reap) has come, maintenance runs at once: left to its
        # interval, a start due every few milliseconds would wait for it.
        if leases is not None:
            self.due.note(leases.wait_seconds)
        due = self.due.take()
        asked_from = time.monotonic()
        try:
            promoted = self._maintain(backlog=leases is not None and leases.count == free,
                                      due=due)
        except BrokerError as e:
            return self._backoff.failed(e)
        # Only a turn Redis answered ends an outage: one that asked it nothing (no slot
        # free, maintenance not due) says nothing of it, and would log it back, and
        # away again at the next refusal, a few times a second.
        if leases is not None or any(m.ran_at >= asked_from for m in self.maintenance):
            self._backoff.succeeded()
        return self._idle_wait(leases, free, promoted)

    def _maintain(self, backlog: bool, due: bool) -> int:
        """Each queue's maintenance (at once when something is `due`); a queue that cannot
        be reached (its primary down, on a cluster) is skipped for this turn. Raises
        BrokerError when every queue failed."""
        promoted, failures = 0, 0
        for m in self.maintenance:
            try:
                promoted += m.run(backlog=backlog, due=due)
            except BrokerError as e:
                failures += 1
                if failures == len(self.maintenance):
                    raise
                log.info("maintenance of queue %r failed: %s", m.broker.queue, e)
        return promoted

    def _settle_and_refill(self, outcomes: list[Outcome], free: int) -> Leases | None:
        """Settle `outcomes` with a lease of `free` tasks from the turn's first queue
        carried by that queue's acks, then lease from the next queues while slots are
        left (a lease alone where no acks carry it); start what the leases took."""
        order = self.queues.order() if free > 0 else self.queues.brokers
        carried: Leased | None = None
        if outcomes:
            sent = time.monotonic()
            batch = self.settler.settle(outcomes, refill=free, lease_from=order[0]).refill
            carried = None if batch is None else Leased(order[0], batch, sent)
        leases = self.leaser.fill(free, order, carried)
        if leases is not None:
            for leased in leases.taken:
                self.dispatcher.start(leased.broker.queue, leased.batch, leased.sent_at)
        return leases

    def _idle_wait(self, leases: Leases | None, free: int, promoted: int) -> float:
        """0 when there may be more to lease at once; else arm the wakers and wait until
        something comes due (the soonest hint of any lease: the next delayed task or
        throttled start, or lease expiry) or the next periodic tick, at most a poll."""
        waits = [self.settings.poll_seconds, self.due.left(),
                 *(m.wait_seconds() for m in self.maintenance)]
        if leases is None:
            return min(w for w in waits if w is not None)
        if promoted:
            return 0.0
        if leases.count == free:
            # There may be more to lease. With a backlog, every slot is now filled, and
            # one frees only when an outcome comes, which wakes the loop or waits for
            # its timed look; without, look again at once.
            return self.settings.poll_seconds if self.runner.holds else 0.0
        for waker in self.wakers:
            waker.arm()
        return min(w for w in waits if w is not None)

    def _drain(self) -> None:
        """While draining: start nothing more, settle what finishes, lease nothing."""
        self.runner.stop_starting()
        self.settler.settle(self.inbox.take())

    def _finished(self) -> bool:
        if self.lifecycle.running:
            return False
        # A lease still under way on the waker's thread may yet put tasks in hand.
        return self.slots.idle() or self.lifecycle.grace_expired()

    def _wait(self, seconds: float | None) -> None:
        """Sleep until a handler finishes, work arrives, a signal comes, or `seconds` pass
        (None: a poll interval)."""
        if seconds == 0.0:
            return
        timeout = self.settings.poll_seconds if seconds is None else seconds
        if self.runner.holds and not self.slots.idle():
            timeout = min(timeout, HOLD_SECONDS)  # held outcomes are settled this soon
        if self.lifecycle.draining:
            timeout = min(timeout, max(0.01, self.lifecycle.drain_deadline - time.monotonic()))
        self.inbox.wait(timeout)
