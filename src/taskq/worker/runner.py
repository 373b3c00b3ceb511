"""Runs handlers where the worker can watch them: sync ones on threads, async ones on a loop."""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import os
import queue
import sys
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from typing import Any, NoReturn

from taskq.app import App, Task
from taskq.codec import decode_payload, encode_result
from taskq.context import TaskContext, bind, unbind
from taskq.errors import (
    PayloadError,
    ResultError,
    UnknownTaskError,
)
from taskq.limits import LEASE_SECONDS, MAX_RESULT_BYTES
from taskq.results import Failure, LeasedTask
from taskq.retry import NEVER, RetryPolicy
from taskq.worker.inbox import Inbox, Outcome
from taskq.worker.outcomes import (
    MAX_SUMMARY_CHARS,
    cancelled,
    closes,
    failed,
    message_of,
    past_limit,
    raised,
    time_limit_outcome,
    type_name,
    unstarted,
)

log = logging.getLogger("taskq.worker")

# Longest a finished run's outcome waits, held, for the loop to settle it while the
# worker's handlers have leased tasks waiting (see Runner).
HOLD_SECONDS = 0.01
# An async handler cancelled at its time limit gets this long to end (its cleanup, and
# its report naming where it was), and never more than a quarter of its lease, which
# heartbeats no longer renew: one that catches the cancellation and goes on has its
# attempt failed without it, as a sync handler's is at once.
CANCEL_GRACE_SECONDS = 1.0
# How long the async handlers still running when the worker closes (settled, fenced)
# are given to end once cancelled.
CLOSE_SECONDS = 1.0
# What the worker waits to do while an effect() block of a run goes on (see
# TaskContext.wait_for_effect).
FAILING = "fails the attempt (its retry could apply the effect meanwhile)"
ENDING = ("reports how the run ended (a retry, or the cancel, could come before the "
          "block's effect)")


# A handler call, and whether its return value is kept.
Call = tuple[Callable[..., Any], list[Any], dict[str, Any], bool]
# A prepared run: the handler call, the task it runs, the context it runs in, and how
# its failures are retried.
Job = tuple[Call, LeasedTask, TaskContext, RetryPolicy]
# A run under a time limit, by `TaskContext.key`: its task and what was registered.
Limited = tuple[LeasedTask, Task[Any, Any]]
# `TaskContext.key`: (queue, task id, token).
RunKey = tuple[str, str, int]


def arguments(payload: dict[str, Any]) -> tuple[list[Any], dict[str, Any]]:
    """Call arguments from a payload: `{"args": [...], "kwargs": {...}}` as made by
    `Task.enqueue`, or any other object as keyword arguments (the seed's producer)."""
    if payload and set(payload) <= {"args", "kwargs"}:
        args, kwargs = payload.get("args", []), payload.get("kwargs", {})
        if not isinstance(args, list) or not isinstance(kwargs, dict):
            raise PayloadError("payload 'args' must be a list and 'kwargs' an object")
        return args, kwargs
    return [], dict(payload)


def forked_child_exits(error: BaseException | None) -> NoReturn:
    """End a process a handler forked, its handler's run over there: the thread (or the
    event loop) it forked on would go on with the worker's work, taking its queued
    jobs or running its other coroutines, each task's effect passing its lease check a
    second time. It exits as a program would: 0, SystemExit's code, or 1 after an
    exception, its output flushed."""
    code = 0 if error is None else 1
    if isinstance(error, SystemExit):
        code = error.code if isinstance(error.code, int) else int(error.code is not None)
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(code)


class Runner:
    """Executes leased tasks and puts each `Outcome` in the loop's inbox; never raises.

    A run past its time limit (the heartbeat calls `time_out`) ends at once: an async
    handler's task is cancelled; a sync handler cannot be stopped, so its attempt is
    failed without it, its thread is given up on (it ends when the handler returns, its
    outcome ignored) and a new thread takes its place.

    With a `backlog`, the worker leases that many tasks beyond its `concurrency`; each
    waits in hand (its lease renewed) until a handler comes free, so a handler that
    finishes starts its next task at once instead of after the loop's next round trip,
    and a few threads keep busy where many would fight over the GIL. A task's time limit
    counts from its start. One that did not start before its task was cancelled, its
    lease lost, or the worker began to stop is not started: it is reported unstarted.
    With a backlog, outcomes are held for the loop rather than each waking it: the first
    one after the loop's last look wakes it only once the tasks waiting for a handler
    are down to the low-water mark (half the backlog, at least one per handler), so the
    loop settles and refills many in one call while the handlers still have work; the
    loop looks at least every HOLD_SECONDS meanwhile (see Worker._wait)."""

    def __init__(self, app: App, concurrency: int, inbox: Inbox,
                 time_limit: float = 0.0, backlog: int = 0,
                 lease_seconds: float = LEASE_SECONDS.default,
                 max_result_bytes: int = MAX_RESULT_BYTES.default) -> None:
        self.app = app
        self.max_result_bytes = max_result_bytes
        self.inbox = inbox
        # The worker's process, from `start`: a handler's run that ends in another is in
        # a process the handler forked, which must run nothing more of the worker's.
        self._pid = 0
        self._cancel_grace = min(CANCEL_GRACE_SECONDS, lease_seconds / 4)
        # The limit of a task registered without one (TASKQ_TIME_LIMIT_SECONDS; 0: none).
        self.time_limit = time_limit
        self._jobs: queue.SimpleQueue[Job | None] = queue.SimpleQueue()
        # Guards the threads (a timed-out one is replaced) and the runs under a limit,
        # both touched by the time-limit thread as well; never held around user code.
        self._lock = threading.Lock()
        self._threads: list[threading.Thread] = []
        self._made = 0  # handler threads made, for their names
        for _ in range(concurrency):
            self._new_thread()
        self._limited: dict[RunKey, Limited] = {}
        self._loop = asyncio.new_event_loop()
        # With a backlog, async runs wait here so that at most `concurrency` run at once,
        # as sync ones wait for a thread.
        self._gate: asyncio.Semaphore | None = asyncio.Semaphore(concurrency) \
            if backlog else None
        # The loop thread's alone: the runs holding a place at the gate. One given up on
        # at its time limit gives its place to the next (see `_give_up`).
        self._gated: set[RunKey] = set()
        # False once the worker begins to stop: a task not started by then is not.
        self._starting = True
        # The loop thread's alone: set by `close`'s stop, the only one that ends it.
        self._closing = False
        # The loop thread's alone: each async run's asyncio task and job, by
        # `TaskContext.key`, and the runs already cancelled because their task was.
        self._running: dict[RunKey, tuple[asyncio.Task[None], Job]] = {}
        self._cancelled: set[RunKey] = set()
        self._loop_thread = threading.Thread(
            target=self._loop_main, name="taskq-async-handlers", daemon=True
        )
        # Set when a handler thread takes a job or the loop starts a coroutine, so that
        # a thread that handed work over can step aside until a handler has it.
        self._taken = threading.Event()
        # With a backlog, outcomes are held; the loop is woken once no more than this
        # many tasks wait for a handler thread.
        self.holds = backlog > 0
        self._low_water = max(concurrency, backlog // 2)

    @property
    def coroutines_on(self) -> int | None:
        """The thread the async handlers run on (None before it starts)."""
        return self._loop_thread.ident

    def _new_thread(self) -> threading.Thread:
        # Those a timed-out handler held until it returned are let go, or a worker whose
        # handlers keep timing out would keep every one it ever made.
        self._threads = [t for t in self._threads if t.ident is None or t.is_alive()]
        thread = threading.Thread(target=self._thread_main, daemon=True,
                                  name=f"taskq-handler-{self._made}")
        self._made += 1
        self._threads.append(thread)
        return thread

    def start(self) -> None:
        self._pid = os.getpid()  # a worker may be made in one process and run in another
        for thread in self._threads:
            thread.start()
        self._loop_thread.start()

    def _loop_main(self) -> None:
        try:
            # SystemExit or KeyboardInterrupt raised in a task the handlers started
            # (asyncio re-raises them out of the loop), or a handler's own
            # `loop.stop()`, must not end the loop: every async run after it would
            # wait, leased, in a loop that no longer runs. Only `close` ends it.
            while True:
                try:
                    self._loop.run_forever()
                except (SystemExit, KeyboardInterrupt) as e:
                    log.error("%s raised in the event loop of async handlers, by a task "
                              "a handler started; the loop goes on", type_name(e))
                    continue
                if self._closing:
                    break
                log.error("a handler stopped the event loop of async handlers; the "
                          "loop goes on")
        finally:
            # An unclosed loop leaks its self-pipe; close it once `close` has stopped it.
            self._loop.close()

    def submit(self, batch: Sequence[tuple[LeasedTask, TaskContext]]) -> bool:
        """Start a leased batch: sync handlers go to the threads one by one; async ones
        reach the loop in one hand-off, so its thread wakes once per batch, not per task.
        Returns whether any task went to a handler (the others are reported failed)."""
        self._taken.clear()
        coroutines: list[Job] = []
        handed_over = False
        for task, context in batch:
            try:
                registered, call = self._prepare(task)
            except Exception as e:
                # No attempt of it can ever succeed (an unknown name, a payload that cannot
                # be decoded, arguments that do not bind): it goes to the DLQ at once.
                message = message_of(e)
                self.inbox.put(Outcome(task, context, Failure(
                    type_name(e), message,
                    summary=f"{type(e).__name__}: {message}"[:MAX_SUMMARY_CHARS]),
                    decision=NEVER))
                continue
            limit = self.time_limit if registered.time_limit is None else registered.time_limit
            if limit > 0:
                context.limit(limit)
                with self._lock:
                    self._limited[context.key] = (task, registered)
            job = (call, task, context, registered.retry)
            if registered.is_async:
                coroutines.append(job)
            else:
                self._jobs.put(job)
                handed_over = True
        if coroutines:
            self._loop.call_soon_threadsafe(self._start_coroutines, coroutines)
        return handed_over or bool(coroutines)

    def wait_taken(self, timeout: float) -> bool:
        """Block until the batch last submitted has been taken up (a handler thread took
        a job, or the loop started a coroutine), at most `timeout` seconds.

        The caller steps aside while it does: a thread that hands over work and goes on
        running Python holds the GIL the woken handler needs to start, and an idle
        worker's next task would wait for it."""
        return self._taken.wait(timeout)

    def _mark_taken(self) -> None:
        if not self._taken.is_set():  # set() takes the Event's lock: not once per task
            self._taken.set()

    def _prepare(self, task: LeasedTask) -> tuple[Task[Any, Any], Call]:
        registered = self.app.tasks.get(task.name)
        if registered is None:
            known = ", ".join(sorted(self.app.tasks)) or "none"
            raise UnknownTaskError(
                f"unknown task {task.name!r}: no function with that name is registered "
                f"in this worker (known: {known})"
            )
        args, kwargs = arguments(decode_payload(task.payload))
        registered.check_call(args, kwargs)
        return registered, (registered.fn, args, kwargs, registered.store_result)

    def _start_coroutines(self, jobs: list[Job]) -> None:
        for job in jobs:
            context = job[2]
            # The loop keeps only a weak reference to a task: hold it until it ends
            # (`_run_async` lets go of it last thing, sparing a done-callback per task;
            # only `_cancel` and `_cancel_run` can cancel one before it starts, and they
            # report that themselves).
            self._running[context.key] = (
                self._loop.create_task(self._run_async(job)), job)

    def stop_starting(self) -> None:
        """The worker is stopping: start no more tasks, and report each one still
        waiting for a handler (a thread, or a place among the running coroutines)
        unstarted now, so the loop hands it back at once, not when a handler frees up."""
        self._starting = False
        self._loop.call_soon_threadsafe(self._unstart_waiting)
        while True:
            try:
                job = self._jobs.get_nowait()
            except queue.Empty:
                return
            if job is None:  # closing: leave the thread its stop
                self._jobs.put(None)
                return
            self._report(unstarted(job[1], job[2]))

    def _unstart_waiting(self) -> None:
        """Cancel each async run that has not begun (it waits for the gate): it is
        reported unstarted, as a run whose task was cancelled before it began."""
        for key, (_, job) in list(self._running.items()):
            if not job[2].started_at:
                self._cancel_run(key)

    def _may_start(self, context: TaskContext) -> bool:
        if not self._starting:
            return False
        # A lapsed lease: a prefetched task waited through a pause of this process, and
        # another worker may be running it now. Asked first: the renewal it may make can
        # say the task was cancelled.
        lapsed = context.lease_lapsed()
        return not (lapsed or context.cancelled or context.lease_lost or context.abandoned)

    async def _run_async(self, job: Job) -> None:
        (fn, args, kwargs, keep), task, context, policy = job
        self._mark_taken()
        token = bind(context)
        claimed = closed = False
        error: BaseException | None = None
        try:
            if self._gate is not None:
                await self._gate.acquire()
                self._gated.add(context.key)
            if not self._may_start(context):
                outcome = unstarted(task, context)
            else:
                context.begin()
                ended = self._ended(task, context, policy, await fn(*args, **kwargs), keep)
                if ended is None:
                    return  # given up on at its time limit meanwhile, and reported
                outcome, claimed = ended, True
        except asyncio.CancelledError as e:
            # Cancelled by `close`: its run was settled at shutdown, and is not reported.
            error, closed = e, self._closing
            outcome = cancelled(task, context, policy, e)
        except GeneratorExit as e:
            if not self._loop.is_running():
                raise  # the coroutine itself is being closed (its loop torn down)
            error, outcome = e, raised(task, context, policy, e)  # raised by the handler
        except BaseException as e:  # as in _thread_main: raised here, it would end the loop
            error, outcome = e, raised(task, context, policy, e)
        finally:
            unbind(token)
            self._exit_if_forked(error)
            key = context.key
            self._leave_gate(key)
            self._running.pop(key, None)
            self._cancelled.discard(key)
        if not closed:
            self._report_unless_in_effect(outcome, claimed)

    def _report_unless_in_effect(self, outcome: Outcome, claimed: bool) -> None:
        """Report an async run's outcome, unless it failed, was cancelled or timed out
        while an effect() block of its run goes on (on another thread, asyncio.to_thread,
        or in a coroutine the handler left on the loop): reported now, its retry (or the
        cancel) could come before the block's effect. A timed-out run's give-up reports
        it once the block has ended, unless the handler caught its cancel and returned:
        that claimed the report, which the give-up then leaves alone. Any other, a run
        kept to its end past its limit too (it has no give-up), is sent from a thread of
        its own once the block ends (else no one reports the run, and its slot stays
        taken)."""
        context = outcome.context
        closing = closes(outcome)
        if closing:
            context.close()
        if not (closing or context.timed_out) or context.effect_idle():
            self._report(outcome, claimed)
        elif claimed or not context.timed_out or context.kept_to_end:
            # A run kept to its end past its limit has no give-up to report it.
            threading.Thread(target=self._report_after_effect, args=(outcome, claimed),
                             name="taskq-effect-wait", daemon=True).start()

    def _report_after_effect(self, outcome: Outcome, claimed: bool) -> None:
        outcome.context.wait_for_effect(ENDING)
        self._report(outcome, claimed)

    def _leave_gate(self, key: RunKey) -> None:
        if key in self._gated:
            self._gated.discard(key)
            assert self._gate is not None
            self._gate.release()

    def _thread_main(self) -> None:
        while (job := self._jobs.get()) is not None:
            self._mark_taken()
            (fn, args, kwargs, keep), task, context, policy = job
            if not self._may_start(context):
                self._report(unstarted(task, context))
                continue
            token = bind(context)
            context.begin()
            claimed = False
            error: BaseException | None = None
            try:
                ended = self._ended(task, context, policy, fn(*args, **kwargs), keep)
                if ended is None:
                    log.info("task %s: a handler given up on at its time limit returned; "
                             "its outcome is ignored", context.task_id)
                    return  # a new thread has taken this one's place
                outcome, claimed = ended, True
            # Whatever the handler raised (KeyboardInterrupt, SystemExit, a class of its
            # own) ends its run as a failure: escaping, it would end this thread with the
            # task still leased and renewed, and the worker one handler short.
            except BaseException as e:
                error, outcome = e, raised(task, context, policy, e)
            finally:
                unbind(token)
            self._exit_if_forked(error)
            if closes(outcome):
                # A block on a thread the handler left behind: see _report_unless_in_effect.
                context.close()
                context.wait_for_effect(ENDING)
            if not self._report(outcome, claimed):
                return  # given up on at its time limit: a new thread has taken its place

    def _exit_if_forked(self, error: BaseException | None) -> None:
        """In a process the handler forked (not the worker's), end it there (see
        `forked_child_exits`)."""
        if os.getpid() != self._pid:
            forked_child_exits(error)

    def _report(self, outcome: Outcome, claimed: bool = False) -> bool:
        """Put `outcome` in the inbox, unless the run was given up on at its time limit
        (its attempt was reported failed then); returns whether it was put. `claimed`:
        the caller has claimed the report already."""
        context = outcome.context
        context.ended_at = time.monotonic()
        if not context.time_limit:
            self._send(outcome)
            return True
        if not claimed and not context.claim_report():
            log.info("task %s: a handler given up on at its time limit returned; its "
                     "outcome is ignored", context.task_id)
            return False
        with self._lock:
            self._limited.pop(context.key, None)
        self._send(outcome)
        return True

    def _send(self, outcome: Outcome) -> None:
        if self.holds:
            self.inbox.hold(outcome, wake=self._jobs.qsize() <= self._low_water)
        else:
            self.inbox.put(outcome)

    def time_out(self, context: TaskContext) -> None:
        """End a run past its time limit, its context already timed out (called on the
        time-limit thread): cancel an async handler (once an effect() block under way
        ends); fail a sync one's attempt (now, or when such a block ends) and replace its
        thread, since the thread cannot be stopped. A run of a concurrency-limited task
        keeps its lease and slot until its handler ends, and is failed then."""
        key = context.key
        with self._lock:
            run = self._limited.get(key)
        if run is None:
            return  # it has ended meanwhile
        task, registered = run
        if registered.concurrency_limit is not None:
            # Failed before its handler ends, it would give its slot back with the handler
            # still running, and the next run of the task would start beside it: a limit
            # of 1 would let a new run in every `time_limit`, each beside the ones before.
            context.keep_to_end()
        if registered.is_async:
            self._loop.call_soon_threadsafe(self._cancel, key, task, context, registered.retry)
            # Timed on a thread, not on the loop: a handler that blocks its loop (a sync
            # call in an `async def`) holds back whatever waits there, its lease is no
            # longer renewed, and a give-up queued on the loop would come only after the
            # task had been reaped and run again.
            give_up = threading.Timer(self._cancel_grace, self._give_up,
                                      (key, task, context, registered.retry))
            give_up.daemon = True
            give_up.start()
            return
        if context.kept_to_end:
            log.warning("task %s (%s) passed its time limit of %gs: its effects are refused "
                        "from now on; its sync handler cannot be stopped, and its task has "
                        "a concurrency limit, so it keeps its lease and slot until the "
                        "handler returns, and its attempt is failed then", task.task_id,
                        task.name, context.time_limit)
            return
        if context.effect_idle():
            self._time_out_sync(task, context, registered)
            return
        # Failed now, its retry could apply the effect while this block still does. Its
        # lease is renewed until the block ends (see Heartbeat.beat); the wait has a
        # thread of its own, so that other runs' limits are not held up.
        threading.Thread(target=self._time_out_after_effect, name="taskq-effect-wait",
                         args=(task, context, registered), daemon=True).start()

    def give_up_at_stop(self, context: TaskContext) -> Outcome | None:
        """The failed attempt of a run past its time limit that a stopping worker settles
        now, as the time-limit thread would have (TaskQueue's TimedOutNeverAcks); None
        once its report is claimed: by its handler, or by a give-up whose outcome is in
        the inbox or on its way (each waits for an effect() block under way, as the
        stop has)."""
        with self._lock:
            run = self._limited.get(context.key)
        if run is None or not context.claim_report():
            return None
        with self._lock:
            self._limited.pop(context.key, None)
        task, registered = run
        return time_limit_outcome(task, context, registered.retry, None)

    def _time_out_after_effect(self, task: LeasedTask, context: TaskContext,
                               registered: Task[..., Any]) -> None:
        context.wait_for_effect(FAILING)
        self._time_out_sync(task, context, registered)

    def _time_out_sync(self, task: LeasedTask, context: TaskContext,
                       registered: Task[..., Any]) -> None:
        key = context.key
        if not context.claim_report():
            return  # its handler has just returned
        with self._lock:
            self._limited.pop(key, None)
            thread = self._new_thread()
        log.warning("task %s (%s) passed its time limit of %gs: its attempt is failed; its "
                    "sync handler cannot be stopped, so its thread is left to run until the "
                    "handler returns (its outcome ignored, its effects refused) and %s takes "
                    "its place", task.task_id, task.name, context.time_limit, thread.name)
        self.inbox.put(time_limit_outcome(task, context, registered.retry, None))
        thread.start()

    def cancel(self, context: TaskContext) -> None:
        """Cancel the async handler of a run whose task was cancelled (called on the
        heartbeat's thread, its context already cancelled): it gets CancelledError at its
        next await. A sync handler cannot be interrupted: it reads
        `current_task().cancelled`, and its effects are refused."""
        self._loop.call_soon_threadsafe(self._cancel_run, context.key)

    def _cancel_run(self, key: RunKey) -> None:
        entry = self._running.get(key)
        if entry is None or key in self._cancelled:
            return  # a sync run, one that has ended, or one cancelled already
        running, job = entry
        if self._after_effects(job[2], "cancel", self._cancel_run, key):
            return
        self._cancelled.add(key)
        running.cancel()
        # Cancelled before it started, the coroutine never runs to report: report here.
        running.add_done_callback(lambda done: self._report_unstarted(done, key, job))

    def _after_effects(self, context: TaskContext, purpose: str,
                       cancel: Callable[..., None], *args: Any) -> bool:
        """Whether an effect() block of the run is under way, `cancel(*args)` then called
        on the loop once the last one ends: a cancel delivered at an await inside the
        block would cut its effect in two, and under a time limit its retry would apply
        the whole effect again."""
        def once_ended() -> None:
            with contextlib.suppress(RuntimeError):  # the loop has closed: nothing to cancel
                self._loop.call_soon_threadsafe(cancel, *args)

        return context.after_effects(purpose, once_ended)

    def _report_unstarted(self, done: asyncio.Task[None], key: RunKey,
                          job: Job) -> None:
        if not done.cancelled() or job[2].ended_at:
            # It ran and reported: one that caught the CancelledError, then cancelled
            # its own task again before it returned, ends cancelled all the same.
            return
        self._running.pop(key, None)
        self._cancelled.discard(key)
        self._report(unstarted(job[1], job[2]))

    def _cancel(self, key: RunKey, task: LeasedTask, context: TaskContext,
                policy: RetryPolicy) -> None:
        entry = self._running.get(key)
        if entry is None:
            return
        running = entry[0]
        if self._after_effects(context, "time limit", self._cancel, key, task, context,
                               policy):
            log.info("task %s passed its time limit of %gs inside an effect() block: its "
                     "handler is cancelled once the block ends", task.task_id,
                     context.time_limit)
            return
        log.info("task %s passed its time limit of %gs: its handler is cancelled",
                 task.task_id, context.time_limit)
        running.cancel()
        # Cancelled before it started, the coroutine never runs to report: report here
        # (a claim already made by the coroutine makes this a no-op).
        running.add_done_callback(lambda _: self._report_cancelled(key, task, context, policy))

    def _give_up(self, key: RunKey, task: LeasedTask, context: TaskContext,
                 policy: RetryPolicy) -> None:
        """Fail the attempt of an async run that has not ended a grace after its time
        limit's cancel (on a timer's thread, see `time_out`): once an effect() block
        under way has ended (a blocking call inside one holds the loop), so that its
        retry cannot apply the effect beside it."""
        context.wait_for_effect(FAILING)
        if context.kept_to_end:
            if not context.ended_at:
                log.warning("task %s (%s) passed its time limit of %gs and its async handler "
                            "went on after being cancelled (or blocks its event loop): its "
                            "task has a concurrency limit, so it keeps its lease and slot "
                            "until the handler ends, and its attempt is failed then",
                            task.task_id, task.name, context.time_limit)
            return
        if not context.claim_report():
            return  # it ended, and reported
        with self._lock:
            self._limited.pop(key, None)
        # Its slot is let go with its outcome, and the task leased into it must not wait
        # behind the handler: as a sync one's thread is replaced, it leaves the gate (on
        # the loop, once the handler lets it run).
        with contextlib.suppress(RuntimeError):  # the loop has closed: no gate left
            self._loop.call_soon_threadsafe(self._leave_gate, key)
        log.warning("task %s (%s) passed its time limit of %gs and its async handler went "
                    "on after being cancelled (or blocks its event loop, so the cancel "
                    "cannot reach it): its attempt is failed now; the handler is left to "
                    "end (its outcome ignored, its effects refused)",
                    task.task_id, task.name, context.time_limit)
        self.inbox.put(time_limit_outcome(task, context, policy, None))

    def _report_cancelled(self, key: RunKey, task: LeasedTask,
                          context: TaskContext, policy: RetryPolicy) -> None:
        self._running.pop(key, None)
        if not context.effect_idle():
            return  # a block on another thread goes on: the give-up reports after it
        if context.claim_report():
            with self._lock:
                self._limited.pop(key, None)
            self.inbox.put(time_limit_outcome(task, context, policy, None))

    def _ended(self, task: LeasedTask, context: TaskContext, policy: RetryPolicy,
               value: Any, keep: bool) -> Outcome | None:
        """The outcome of a handler that has just returned `value`, its report claimed
        (the time-limit thread then leaves it, lease and all, while its result is
        encoded); None when it was given up on at its limit first. Past its limit
        before the time-limit thread looked (or, async, after its cancel, which it
        caught), the attempt fails all the same (TaskQueue's TimedOutNeverAcks)."""
        if context.time_limit and not context.claim_report():
            return None
        if past_limit(context):
            return time_limit_outcome(task, context, policy, None)
        try:
            return self._returned(task, context, policy, value, keep)
        # A value's own code (a dict's __iter__) raised, even a KeyboardInterrupt:
        # claimed, the run is reported here or never.
        except BaseException as e:
            return failed(task, context, policy, e)

    def _returned(self, task: LeasedTask, context: TaskContext, policy: RetryPolicy,
                  value: Any, keep: bool) -> Outcome:
        """The outcome of a handler that returned `value`: encoded on the handler's own
        thread, so the loop thread only sends it. A value that cannot be kept fails the
        attempt, saying why, and sends the task to the DLQ at once: another attempt would
        run the handler, and its effects, again to return the same kind of value."""
        unrun = unrun_body(value)
        if unrun:
            # Acked, the task would be completed though its body never ran.
            message = (f"the handler returned {unrun} instead of running it: its body "
                       "never ran (an async def wrapped by a plain def, or a call it "
                       "returned unawaited?); make the task's function run its work")
            return Outcome(task, context, Failure(
                "taskq.InvalidTaskError", message,
                summary=f"InvalidTaskError: {message}"[:MAX_SUMMARY_CHARS]), decision=NEVER)
        if not keep:
            return Outcome(task, context, None)
        try:
            return Outcome(task, context, None,
                           encode_result(value, self.max_result_bytes))
        except ResultError as e:  # the handler must change
            return Outcome(task, context, Failure(
                "taskq.ResultError", str(e), summary=f"ResultError: {e}"[:MAX_SUMMARY_CHARS]),
                decision=NEVER)

    def close(self) -> None:
        """Stop taking jobs. Handlers still running are daemon threads: they end with the
        process, and their effects are already fenced off by `TaskContext.abandon`."""
        with self._lock:
            threads = len(self._threads)
        for _ in range(threads):
            self._jobs.put(None)
        self._loop.call_soon_threadsafe(self._stop_loop)

    def _stop_loop(self) -> None:
        self._closing = True  # on the loop's thread, so no handler's stop can pass for it
        # Handlers still running were settled at the end of the grace, their effects
        # fenced. Cancelled, each gets CLOSE_SECONDS to end: left pending as the loop
        # closes, each would be logged by asyncio as an error, "destroyed but pending".
        pending = [t for t in asyncio.all_tasks(self._loop) if not t.done()]
        if not pending:
            self._loop.stop()
            return
        for task in pending:
            task.cancel()
        ended = self._loop.create_task(asyncio.wait(pending, timeout=CLOSE_SECONDS))
        ended.add_done_callback(lambda _: self._loop.stop())

    def join(self, timeout: float) -> list[str]:
        """After `close`, wait up to `timeout` seconds in all for the handler threads and
        the loop's thread to end; returns the names of those still running (a handler
        that has not returned)."""
        with self._lock:
            threads = [t for t in (*self._threads, self._loop_thread) if t.ident is not None]
        deadline = time.monotonic() + timeout
        for thread in threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        return [t.name for t in threads if t.is_alive()]


def unrun_body(value: Any) -> str:
    """What `value` is when it is work a handler made and did not run (a coroutine, a
    generator, sync or async, an awaitable other than a future), a coroutine or
    generator closed so that Python does not warn it was never awaited; '' for any
    other value."""
    if inspect.iscoroutine(value) or inspect.isgenerator(value):
        value.close()
        return f"a {type(value).__name__}"
    if inspect.isasyncgen(value):
        return "an async generator"
    # A future is work already under way (a client's send returned it); any other
    # awaitable (an HTTP client's request, a query) does nothing until awaited.
    if inspect.isawaitable(value) and not isinstance(value, asyncio.Future | Future):
        return f"an awaitable ({type(value).__name__})"
    return ""
