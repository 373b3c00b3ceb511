"""What a running handler can know about its task, and the fence around its effects."""

from __future__ import annotations

import contextlib
import contextvars
import logging
import math
import os
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Protocol

from taskq.errors import BrokerError, TaskqError
from taskq.limits import MAX_PROGRESS_MESSAGE_CHARS, shown
from taskq.results import Renewal

log = logging.getLogger("taskq.worker")

# How often a shutdown waiting for an effect under way says so.
ABANDON_WARN_SECONDS = 5.0

# The least time between two progress reports of one run that are sent (see
# TaskContext.progress): a run can say how far it is four times a second.
PROGRESS_EVERY = 0.25


class LeaseLostError(TaskqError):
    """Raised inside a handler's `effect()` block when its task may no longer be applied:
    the lease was lost to another worker, the task was cancelled, the run passed its time
    limit, or the worker abandoned the task at shutdown."""


class LeaseConfirmer(Protocol):
    """Asks Redis whether a lease is still held, renewing it if so (a heartbeat)."""

    lease_seconds: float

    def confirm(self, task_id: str, token: int) -> Renewal:
        """Whether `token` still holds the lease (now renewed), and whether the task's
        cancel was requested; raises `BrokerError` when Redis cannot be asked."""
        ...

    def progress(self, task_id: str, token: int, fraction: float, message: str) -> bool:
        """Record the run's progress if `token` still holds the lease; raises
        `BrokerError` when Redis cannot be asked."""
        ...


def held_progress(fraction: object, message: object) -> tuple[float, str] | str:
    """`fraction` held to 0..1 and `message` cut to MAX_PROGRESS_MESSAGE_CHARS (a lone
    surrogate replaced, as Redis takes UTF-8), or why they cannot be recorded."""
    if isinstance(fraction, bool) or not isinstance(fraction, int | float):
        return f"progress must be a number from 0 to 1, not {shown(fraction)}"
    try:
        value = float(fraction)
    except OverflowError:  # an int past a float's range
        value = 1.0 if fraction > 0 else 0.0
    if not math.isfinite(value):
        return f"progress must be a number from 0 to 1, not {shown(fraction)}"
    if not isinstance(message, str):
        return f"a progress message must be text, not {shown(message)}"
    text = message[:MAX_PROGRESS_MESSAGE_CHARS].encode("utf-8", "replace").decode("utf-8")
    return min(1.0, max(0.0, value)), text


# Where a run stands with its time limit (TaskContext._limit).
WITHIN_LIMIT, TIMED_OUT, KEPT_TO_END = 0, 1, 2
# The fields a TaskContext may have: CPython shares one key table among the instance
# dicts of a class up to 30 keys, and past that gives each instance a dict of its own,
# which made each run's context (one a task) cost a worker 3% more instructions a task
# (bench.instructions). test_context checks it.
MOST_FIELDS = 29


@dataclass
class TaskContext:
    """The task a handler is running: its id, attempt and fencing token, and its lease.

    Three threads touch it: the handler (`effect()`, `cancelled`), the heartbeat
    (`renewed`, `mark_lost`, `cancel`, `time_out`) and the worker's loop (`finished`,
    `abandon`). Only
    `effect()` and `abandon()` take the lock, so a heartbeat never waits on a handler's
    effect.
    """

    task_id: str
    name: str
    queue: str
    worker_id: str
    token: int
    attempt: int
    max_retries: int
    # Confirms the lease with Redis before each effect; None runs effects on the local
    # flags alone (a context made outside a worker).
    lease: LeaseConfirmer | None = field(default=None, repr=False)
    # Monotonic time at which the last renewal Redis accepted was sent (the lease was
    # granted no earlier): the lease holds for a lease length from there.
    confirmed_at: float = field(default_factory=time.monotonic, repr=False)
    # How long this run may take (0: no limit) and the monotonic time it ends (None: never).
    time_limit: float = field(default=0.0, repr=False)
    deadline: float | None = field(default=None, repr=False)
    # When (monotonic) its handler started and returned or raised, for the task log.
    started_at: float = field(default=0.0, repr=False)
    ended_at: float = field(default=0.0, repr=False)
    # The thread its handler runs on (the asyncio loop's for an async one), from its start.
    thread: int = field(default=0, repr=False)
    # When (monotonic) its last progress was sent; the handler's alone.
    _progress_sent: float = field(default=float("-inf"), repr=False)
    _progress_refused: bool = field(default=False, repr=False)
    # Re-entrant: an effect may call code that guards an effect of its own.
    _lock: threading.RLock = field(default_factory=threading.RLock, repr=False)
    # Held only for a moment, never around user code: `claim_report` must not wait. It
    # also orders `after_effects` with the last block's end.
    _report_lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    _reported: bool = field(default=False, repr=False)
    # WITHIN_LIMIT, TIMED_OUT, or KEPT_TO_END: past its time limit, a run of a
    # concurrency-limited task keeps its lease, and so its slot, until its handler ends
    # (see Runner.time_out). One field, not two: see MOST_FIELDS.
    _limit: int = field(default=0, repr=False)
    _cancelled: bool = field(default=False, repr=False)
    _lost: bool = field(default=False, repr=False)
    _abandoned: bool = field(default=False, repr=False)
    # Its handler ended failed or cancelled: a retry or the cancel follows (see close).
    _closed: bool = field(default=False, repr=False)
    _applied: bool = field(default=False, repr=False)
    # effect() blocks under way (more than one when nested).
    _effects: int = field(default=0, repr=False)
    # What waits for the blocks under way to end, by purpose (see after_effects); made
    # when first needed, ordered with the last block's end by the report's lock.
    _after_effects: dict[str, Callable[[], object]] | None = field(default=None, repr=False)
    finished: bool = field(default=False, repr=False)
    # The process the run was leased in: a process its handler forks shares its token,
    # and an effect there would pass the lease check beside the worker's own.
    _pid: int = field(default_factory=os.getpid, repr=False)

    @property
    def key(self) -> tuple[str, str, int]:
        """(queue, task id, token): tells this run from every other a worker holds. A
        worker on several queues may hold the same task id from two of them, and after
        a lost lease the same task again under a newer token."""
        return (self.queue, self.task_id, self.token)

    @property
    def lease_lost(self) -> bool:
        return self._lost

    @property
    def abandoned(self) -> bool:
        return self._abandoned

    @property
    def timed_out(self) -> bool:
        """Whether the run was stopped (or, a sync one, given up on) at its time limit."""
        return self._limit != WITHIN_LIMIT

    @property
    def kept_to_end(self) -> bool:
        """Whether the run, timed out, keeps its lease until its handler returns."""
        return self._limit == KEPT_TO_END

    def keep_to_end(self) -> None:
        """Keep a timed-out run's lease renewed until its handler returns (its effects
        stay refused); the handler's return then fails its attempt."""
        self._limit = KEPT_TO_END

    @property
    def cancelled(self) -> bool:
        """Whether this run has learned that its task was cancelled (a heartbeat or an
        `effect()` check answered so). From then on `effect()` refuses, and the task
        ends cancelled when the handler returns; a long handler should look at this
        between steps and return early."""
        return self._cancelled

    def cancel(self) -> None:
        """The task's cancel was requested: fence later effects. Takes no lock, as
        `mark_lost`."""
        self._cancelled = True

    def progress(self, fraction: float, message: str = "") -> bool:
        """Say how far this run has got: `fraction` from 0 to 1, and what it is doing
        (up to 200 characters). The dashboard shows it as a bar on the running task,
        and `taskq task ID` as a line; a run leased again starts with none.

        At most PROGRESS_EVERY apart: a call sooner after the last one sent is dropped
        (unless it says 1, done), so a loop may call it on every item. Each one sent is
        one call to Redis from the handler's thread (on an async handler's event loop,
        a round trip's block). Returns whether it was recorded: False when dropped,
        when the run lost its lease, timed out or was cancelled, or when Redis cannot
        be reached (progress never fails a task); outside a worker, always False.

        A fraction past 0 or 1 (an estimate a little off: done / total past 1) is held
        to it, and a message is cut to its length; one that is no finite number, or a
        message that is no text, is not recorded (False), and the log says why once a
        run."""
        held = held_progress(fraction, message)
        if isinstance(held, str):
            if not self._progress_refused:
                self._progress_refused = True
                log.warning("task %s: progress not recorded: %s", self.task_id, held)
            return False
        fraction, message = held
        if self.lease is None or self._lost or self.timed_out or self._cancelled \
                or self.finished:
            return False
        now = time.monotonic()
        if fraction < 1 and now - self._progress_sent < PROGRESS_EVERY:
            return False
        self._progress_sent = now
        try:
            return self.lease.progress(self.task_id, self.token, fraction, message)
        except BrokerError as e:
            log.info("task %s: progress not recorded (Redis unavailable): %s",
                     self.task_id, e)
            return False

    def limit(self, seconds: float) -> None:
        """Give this run `seconds` (0: no limit), counted from `begin`: a task leased
        ahead of a free handler is not running while it waits for one."""
        self.time_limit = seconds

    def begin(self) -> None:
        """Its handler starts now: its time limit, if it has one, runs from here."""
        self.started_at = now = time.monotonic()
        self.thread = threading.get_ident()
        if self.time_limit > 0:
            self.deadline = now + self.time_limit

    def overdue(self, now: float) -> bool:
        """Whether monotonic time `now` is past this run's time limit."""
        return self.deadline is not None and now >= self.deadline

    def time_out(self) -> bool:
        """Fence later effects of a run past its time limit, unless its report was
        claimed (its handler returned within the limit: it must keep its lease while
        its result is encoded and sent). Returns whether it timed out. Takes only the
        report's lock, never the effect lock."""
        with self._report_lock:
            if self._reported:
                return False
            self._limit = TIMED_OUT
            return True

    def claim_report(self) -> bool:
        """True for the first caller only: the one that reports how this run ended (the
        handler, or the heartbeat giving up on it at its time limit)."""
        with self._report_lock:
            first, self._reported = not self._reported, True
            return first

    def lease_lapsed(self) -> bool:
        """Whether more than a lease has passed since the last renewal Redis accepted
        and a renewal asked now does not hold it: another worker may hold the task by
        now, whether or not the heartbeat has heard so (a process paused past its lease
        has not). A lease whose grant came back late (Redis stalled) is dated from its
        sending, and is still held: the renewal tells them apart."""
        if self.lease is None or time.monotonic() - self.confirmed_at < self.lease.lease_seconds:
            return False
        return not self._renew(self.lease)

    @property
    def effect_applied(self) -> bool:
        """Whether an `effect()` block of this run has completed without raising."""
        return self._applied

    def mark_lost(self) -> None:
        """Fence later effects. Takes no lock: the heartbeat calls it and must never
        wait for an effect that is under way (it was confirmed before it started)."""
        self._lost = True

    def renewed(self, sent_at: float) -> None:
        """Record a renewal Redis accepted, sent at monotonic time `sent_at`."""
        self.confirmed_at = max(self.confirmed_at, sent_at)

    @property
    def in_effect(self) -> bool:
        """Whether an `effect()` block of this run is under way (read without the lock:
        it orders a shutdown's work, and a block that starts meanwhile is waited for)."""
        return self._effects > 0

    def after_effects(self, purpose: str, then: Callable[[], object]) -> bool:
        """Have `then` called (on the thread whose block ends last) once no `effect()`
        block of this run is under way, if one is now; returns whether one is. An async
        handler's cancel waits for it this way: delivered at an await inside the block,
        it would cut the effect in two. One call per `purpose` waits, the last made."""
        with self._report_lock:
            if self._effects == 0:
                return False
            if self._after_effects is None:
                self._after_effects = {}
            self._after_effects[purpose] = then
            return True

    def abandon(self, warn_every: float = ABANDON_WARN_SECONDS) -> bool:
        """Forbid any later effect; waits for one already under way to finish first, as
        long as it takes (given back meanwhile, its task could run twice), saying so
        every `warn_every` seconds. Returns whether an effect of this run was applied."""
        while not self._lock.acquire(timeout=warn_every):
            log.warning("task %s: its handler is inside an effect() block; the worker waits "
                        "for the block to end before it gives the task back", self.task_id)
        try:
            self._abandoned = True
            return self._applied
        finally:
            self._lock.release()

    def fence_now(self) -> bool:
        """Forbid any later effect, as a shutdown does (`abandon`), without the lock: a
        handler that runs blocks back to back holds it nearly always. Returns whether no
        block is under way; if one is, the shutdown waits for it (`abandon`). Never
        waits itself."""
        self._abandoned = True
        return self.effect_idle()

    def close(self) -> None:
        """Its handler ended failed, or its task was cancelled: forbid later effects (on
        threads or coroutines the handler left behind), since a retry may run, or the
        cancel be acknowledged, once the run is reported. Takes no lock."""
        self._closed = True

    def effect_idle(self) -> bool:
        """Whether no `effect()` block of this run is under way: its lock is free (a block
        past its checks but not yet counted holds it) and, held by the caller's own
        thread, holds no block (a coroutine beside the handler's, on its event loop)."""
        if not self._lock.acquire(blocking=False):
            return False
        try:
            return self._effects == 0
        finally:
            self._lock.release()

    def wait_for_effect(self, why: str, warn_every: float = ABANDON_WARN_SECONDS) -> None:
        """Wait for an `effect()` block under way to end, saying every `warn_every` seconds
        that the worker waits before it does `why`; the run is timed out or closed, so no
        block starts after it. Called on no thread the block may run on."""
        while not self._lock.acquire(timeout=warn_every):
            log.warning("task %s: an effect() block of its run goes on; the worker waits for "
                        "it to end before it %s", self.task_id, why)
        self._lock.release()

    @contextmanager
    def effect(self) -> Iterator[None]:
        """Run a side effect only while this worker still holds the task's lease.

        Before the block runs, the lease is confirmed with Redis (one renewal with this
        run's token), so a worker that was paused past its lease and taken over finds
        out here, not after its effect. The block is refused when the lease was lost,
        the task was cancelled or released at shutdown, its run was settled (a thread
        the handler left behind), or more than a lease has passed since the last
        renewal Redis accepted. What no check can cover: a process paused inside
        the block, after the check, for longer than a lease. Guard the effect itself
        (the ledger's dedupe) where that must not apply twice.

        The worker takes the same lock before it gives the task back at shutdown, so an
        effect is either finished before the release or never started after it. Blocks
        nest on one thread; a block on another thread of the run waits for the one
        under way to end (a block that waits for it, in turn, waits for ever: the wait
        says so every ABANDON_WARN_SECONDS).
        """
        if os.getpid() != self._pid:
            # Before the lock, which a thread of the worker may have held at the fork.
            raise LeaseLostError(
                f"task {self.task_id}: effect() in a process its handler forked; only the "
                "worker's process may apply it (it alone settles the task)")
        # The lease is confirmed before the lock is taken: a shutdown waits on the lock
        # for the block under way, and must not wait out a renewal that hangs on a
        # silent Redis (the client's timeouts, far past the grace) for none.
        self._refuse_if_fenced()
        self._confirm_lease()
        while not self._lock.acquire(blocking=False):
            self._wait_for_other_block()
            if self.lease is None or (time.monotonic() - self.confirmed_at
                                      < self.lease.lease_seconds):
                break
            # No renewal was accepted for a lease while the other block ran (Redis
            # away, the process paused): confirm again, the lock let go meanwhile.
            self._lock.release()
            self._refuse_if_fenced()
            self._confirm_lease()
        try:
            # Fenced, cancelled, timed out or lost while the renewal was out, or while
            # another block ran, it is not let in: under the lock, a shutdown's release
            # waits for it or comes first.
            self._refuse_if_fenced()
            self._refuse_if_ended()
            self._effects += 1
            try:
                yield
            finally:
                with self._report_lock:
                    self._effects -= 1
                    waiting = self._after_effects if not self._effects else None
                    if waiting:
                        self._after_effects = None
                for then in (waiting or {}).values():
                    then()
            self._applied = True
        finally:
            self._lock.release()

    def _wait_for_other_block(self) -> None:
        """Take the lock once another thread's block of this run has ended."""
        while not self._lock.acquire(timeout=ABANDON_WARN_SECONDS):
            log.warning("task %s: an effect() block waits for another of its run, on "
                        "another thread, to end; if that block waits for this one "
                        "(blocks nest on one thread only), neither ever will", self.task_id)

    def _refuse_if_fenced(self) -> None:
        if self._abandoned:
            raise LeaseLostError(
                f"task {self.task_id} was released at shutdown; its effect is skipped")
        if self._closed:
            raise LeaseLostError(f"task {self.task_id}: its handler ended, failed or "
                                 "cancelled; an effect after that is skipped")

    def _refuse_if_ended(self) -> None:
        """Refuse a run cancelled, timed out, settled or lost: checked before its lease is
        confirmed, and again once its block may start."""
        self._refuse_if_cancelled()
        self._refuse_if_timed_out()
        if self.finished:
            # Settled by this worker (a thread or task the handler left behind): its
            # lease is given up, and a retry may be running, whatever Redis can say.
            raise LeaseLostError(f"task {self.task_id}: its run was settled; an effect "
                                 "after that is skipped")
        if self._lost:
            raise LeaseLostError(f"task {self.task_id} lost its lease (token "
                                 f"{self.token}); its effect is skipped")

    def _confirm_lease(self) -> None:
        self._refuse_if_ended()
        # A renewal Redis held that took a lease or more to come back (Redis stalled)
        # says the lease is held but not since when: asked once more, it says so afresh.
        for _ in range(2):
            held = not self._lost and self.lease is not None and self._renew(self.lease)
            # The limit may have passed while the renewal was on its way (the run has
            # been failed meanwhile, and its retry may apply the effect too), or the
            # renewal said the task was cancelled or the lease lost.
            self._refuse_if_ended()
            since = time.monotonic() - self.confirmed_at
            if self.lease is None or since < self.lease.lease_seconds or not held:
                break
        if self.lease is not None and since >= self.lease.lease_seconds:
            raise LeaseLostError(
                f"task {self.task_id}: {since:.1f}s since its lease was last renewed, "
                f"longer than the lease ({self.lease.lease_seconds:g}s); another worker "
                "may hold it, so its effect is skipped"
            )

    def _refuse_if_timed_out(self) -> None:
        if self.timed_out or self.overdue(time.monotonic()):
            raise LeaseLostError(
                f"task {self.task_id} ran past its time limit ({self.time_limit:g}s); "
                "its effect is skipped"
            )

    def _refuse_if_cancelled(self) -> None:
        if self._cancelled:
            raise LeaseLostError(f"task {self.task_id} was cancelled; its effect is skipped")

    def _renew(self, lease: LeaseConfirmer) -> bool:
        """Renew the lease now: held (the clock restarts from when the renewal was sent)
        or lost. When Redis cannot say, the lease Redis last accepted still runs its
        course. Returns whether Redis held it."""
        sent = time.monotonic()
        try:
            held = lease.confirm(self.task_id, self.token)
        except BrokerError as e:
            log.warning("task %s: could not confirm its lease: %s", self.task_id, e)
            return False
        if held:
            self.renewed(sent)
            if held == Renewal.CANCEL:
                self.cancel()
            return True
        self.mark_lost()
        return False


_current: contextvars.ContextVar[TaskContext] = contextvars.ContextVar("taskq_current_task")


def current_task() -> TaskContext:
    """The context of the task the calling handler runs; raises outside a handler."""
    try:
        return _current.get()
    except LookupError:
        raise TaskqError(
            "current_task() was called outside a running task handler: only a task a "
            "worker runs has one. Calling the task function directly runs it without the "
            "queue (no task id, lease, retries or effect fence); to test it as a worker "
            "runs it, use taskq.testing.TaskRunner (an embedded Redis and a real worker "
            "for your tests)"
        ) from None


def running_task() -> TaskContext | None:
    """The context of the task the caller runs in, or None outside a handler."""
    return _current.get(None)


def bind(context: TaskContext) -> contextvars.Token[TaskContext]:
    return _current.set(context)


def unbind(token: contextvars.Token[TaskContext]) -> None:
    # A coroutine closed from outside its task (its loop torn down) runs this in another
    # context, where the token means nothing: there is nothing to undo.
    with contextlib.suppress(ValueError):
        _current.reset(token)
