"""The task registry: users decorate their functions, enqueue calls, workers run them."""

from __future__ import annotations

import asyncio
import inspect
import logging
import threading
from collections.abc import Callable, Coroutine, Iterable, Sequence, Sized
from datetime import datetime, timedelta, tzinfo
from typing import Any, Generic, ParamSpec, TypeVar, overload

from taskq.aio import AsyncBroker
from taskq.broker import Broker
from taskq.canvas import Step, new_step
from taskq.codec import args_payload
from taskq.concurrency import ConcurrencyLimit, check_concurrency, limit_key_of
from taskq.connection import async_client, connect
from taskq.errors import ConfigError, InvalidTaskError
from taskq.fields import raise_at_item
from taskq.flow_handle import WorkflowHandle
from taskq.flows import AsyncFlows, Flows
from taskq.handle import TaskHandle
from taskq.keys import check_flow_id, check_queue_name, check_task_id, check_task_name, new_id
from taskq.limits import BATCH_SIZE, MAX_RETRIES, PRIORITY, SHARDS, TIME_LIMIT, Seconds, shown
from taskq.options import Options
from taskq.rates import QUEUE_LIMIT, RateLimit, parse_rate
from taskq.results import NewTask
from taskq.retry import DEFAULT, RetryPolicy
from taskq.routing import AsyncShardedBroker, ShardedBroker, by_shard
from taskq.schedules import (
    DEFAULT_GRACE,
    DEFAULT_POLICY,
    Schedule,
    check_schedule_name,
    make_schedule,
)
from taskq.settings import Settings
from taskq.shards import Layout, refuse_shard_name

log = logging.getLogger("taskq")

def _options(task: Task[..., Any]) -> tuple[object, ...]:
    return (task.max_retries, task.store_result, task.retry, task.time_limit, task.priority,
            task.rate_limit, task.concurrency_limit)


def default_name(fn: Callable[..., Any]) -> str:
    """A task's name when none is given: its function's module and qualified name. One
    defined in a script run as `python job.py` gets a warning: its module is then
    `__main__`, which a worker that imports `job` knows by another name."""
    module, qualname = getattr(fn, "__module__", None), getattr(fn, "__qualname__", None)
    if not isinstance(module, str) or not isinstance(qualname, str):
        raise InvalidTaskError(f"{fn!r:.80} has no name of its own (a functools.partial or "
                               "a callable object?): name the task, "
                               "@app.task(\"module.name\")")
    # A name with <locals> or <lambda> in it is refused anyway, saying why.
    if fn.__module__ == "__main__" and "<" not in qualname:
        log.warning("task %s is named after a script run as __main__: a worker that imports "
                    "its module knows it by another name and sends it to the DLQ as "
                    "unknown; name it: @app.task(\"module.%s\")", fn.__qualname__,
                    fn.__qualname__)
    return f"{fn.__module__}.{fn.__qualname__}"


P = ParamSpec("P")
R = TypeVar("R")
T = TypeVar("T")

# The options of .enqueue and .call: for the queue, never passed to the function.
RESERVED = ("delay", "run_at", "max_retries", "idempotency_key", "task_id", "result_ttl",
            "priority")

# Call shapes (how many positional arguments, which keyword names) a task remembers as
# fitting its function; a function taking **kwargs could see endless names.
FITTING_SHAPES = 64

# Why a sharded queue has no workflows.
_WORKFLOW_SHARDS = (": a workflow runs in one queue, so give its tasks an App without "
                    "shards")


class Task(Generic[P, R]):
    """A registered function: call it directly, or `.enqueue(...)` it to run on a worker."""

    def __init__(self, app: App, fn: Callable[P, R], name: str, max_retries: int,
                 store_result: bool = True, retry: RetryPolicy = DEFAULT,
                 time_limit: float | None = None, priority: int = PRIORITY.default,
                 rate_limit: RateLimit | None = None,
                 concurrency_limit: ConcurrencyLimit | None = None) -> None:
        self.app = app
        self.fn = fn
        self.name = name
        self.max_retries = max_retries
        self.store_result = store_result
        self.retry = retry
        self.time_limit = time_limit
        self.priority = priority
        self.rate_limit = rate_limit
        self.concurrency_limit = concurrency_limit
        # An object whose __call__ is `async def` is run as one too: on a thread its
        # call would only make a coroutine, never run.
        self.is_async = inspect.iscoroutinefunction(fn) or \
            inspect.iscoroutinefunction(type(fn).__call__)
        if any(inspect.isgeneratorfunction(f) or inspect.isasyncgenfunction(f)
               for f in (fn, type(fn).__call__)):
            raise InvalidTaskError(f"task {name!r} is a generator function: a call only "
                                   "makes a generator and never runs its body; return a "
                                   "value (a list) instead of yielding")
        # Read once: building a signature costs more than the rest of a Python-side enqueue.
        self.signature = inspect.signature(fn)
        # Whether arguments bind depends only on their count and keyword names, never on
        # their values: a shape that bound once is not bound again, on the producer's
        # enqueue or on the worker's every run.
        self._fitting: set[tuple[Any, ...]] = set()
        self.__doc__ = fn.__doc__
        self.__wrapped__ = fn

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R:
        return self.fn(*args, **kwargs)

    # The handle's result type is the function's return type, awaited for `async def`
    # (the arguments are not checked by type: the queue's options share the call).
    @overload
    def enqueue(self: Task[P, Coroutine[Any, Any, T]], *args: Any,
                **kwargs: Any) -> TaskHandle[T]: ...
    @overload
    def enqueue(self: Task[P, T], *args: Any, **kwargs: Any) -> TaskHandle[T]: ...
    def enqueue(self, *args: Any, **kwargs: Any) -> TaskHandle[Any]:
        """Enqueue a call and return its handle (`handle.result()` waits for the return
        value). Options for the queue, not arguments of the function: `delay` (seconds
        or a timedelta) or `run_at` (an aware datetime), `max_retries`,
        `idempotency_key`, `task_id`, `result_ttl` (how long its result is kept) and
        `priority` (0 to 9, higher first). Everything is checked before anything is sent."""
        return self.app.producer.enqueue_many([self.call(*args, **kwargs)], 1)[0]

    @overload
    async def enqueue_async(self: Task[P, Coroutine[Any, Any, T]], *args: Any,
                            **kwargs: Any) -> TaskHandle[T]: ...
    @overload
    async def enqueue_async(self: Task[P, T], *args: Any, **kwargs: Any) -> TaskHandle[T]: ...
    async def enqueue_async(self, *args: Any, **kwargs: Any) -> TaskHandle[Any]:
        """`enqueue` for coroutines (a FastAPI or Starlette endpoint): the same options
        and checks, sent with the app's asyncio client, so the event loop never blocks;
        wait for the result with `await handle.result_async(timeout)`."""
        call = self.call(*args, **kwargs)
        return (await self.app.async_producer.enqueue_many([call], 1))[0]

    def call(self, *args: Any, **kwargs: Any) -> NewTask:
        """A checked call of this task, with the options `enqueue` takes, to enqueue later
        with others: `task.enqueue_many([task.call(1), task.call(2, delay=5)])`."""
        return self.new_call(args, kwargs, {k: kwargs.pop(k) for k in RESERVED if k in kwargs})

    def options(self, *, delay: Seconds | None = None, run_at: datetime | None = None,
                max_retries: int | None = None, idempotency_key: str | None = None,
                task_id: str | None = None, result_ttl: Seconds | None = None,
                priority: int | None = None) -> Options[P, R]:
        """This task with the queue options `enqueue` takes (those left None are not
        set), given apart from the call: `task.options(delay=60).enqueue(1, 2)`. Its
        `enqueue`, `enqueue_async`, `call` and `s` take the function's arguments alone,
        and a type checker checks them (but for `s`, whose step may get the stage
        before's output as its first argument)."""
        given = {"delay": delay, "run_at": run_at, "max_retries": max_retries,
                 "idempotency_key": idempotency_key, "task_id": task_id,
                 "result_ttl": result_ttl, "priority": priority}
        return Options(self, {k: v for k, v in given.items() if v is not None})

    def new_call(self, args: tuple[Any, ...], kwargs: dict[str, Any],
                 options: dict[str, Any]) -> NewTask:
        """The checked call of `args` and `kwargs` with the queue `options` given."""
        self.check_arguments(args, kwargs)
        task_id = options.get("task_id")
        max_retries = options.get("max_retries", self.max_retries)
        key = options.get("idempotency_key")
        task = NewTask(
            task_id=self.app.new_task_id(key) if task_id is None else check_task_id(task_id),
            delay=options.get("delay", 0),
            max_retries=MAX_RETRIES.check(max_retries),
            payload=args_payload(args, kwargs),
            idempotency_key=key,
            idempotency_ttl=self.app.settings.idempotency_ttl_seconds,
            name=self.name,
            run_at=options.get("run_at"),
            result_ttl=options.get("result_ttl"),
            priority=PRIORITY.check(options.get("priority", self.priority)),
            limit_key=None if self.concurrency_limit is None else limit_key_of(
                self.concurrency_limit, self.signature, args, kwargs),
        )
        if self.app.shard_rules is not None:
            by_shard(self.app.shard_rules, [task])  # as the sharded producer refuses
        return task

    @overload
    def s(self: Task[P, Coroutine[Any, Any, T]], *args: Any, **kwargs: Any) -> Step[T]: ...
    @overload
    def s(self: Task[P, T], *args: Any, **kwargs: Any) -> Step[T]: ...
    def s(self, *args: Any, **kwargs: Any) -> Step[Any]:
        """A step of a workflow: this task called with `args` and `kwargs` (and the
        options `max_retries`, `priority`, `result_ttl`), to run in `chain(...)` or
        `group(...)`. A step after the first stage gets what the stage before produced
        as its first argument, before `args`."""
        return new_step(self, args, kwargs, {k: kwargs.pop(k) for k in RESERVED if k in kwargs})

    @overload
    def enqueue_many(self: Task[P, Coroutine[Any, Any, T]],
                     calls: Iterable[NewTask | tuple[Any, ...]],
                     batch_size: int = 1000) -> list[TaskHandle[T]]: ...
    @overload
    def enqueue_many(self: Task[P, T], calls: Iterable[NewTask | tuple[Any, ...]],
                     batch_size: int = 1000) -> list[TaskHandle[T]]: ...
    def enqueue_many(self, calls: Iterable[NewTask | tuple[Any, ...]],
                     batch_size: int = 1000) -> list[TaskHandle[Any]]:
        """Enqueue many calls, `batch_size` per round trip; handles come back in order.

        Each call is a `task.call(...)` (arguments and options) or a tuple of positional
        arguments. Every call is checked before any is sent; each batch is one atomic
        step, and sending the same calls again after an error is safe when they carry
        task ids or idempotency keys."""
        return self.app.producer.enqueue_many(self._calls(calls, batch_size), batch_size)

    @overload
    async def enqueue_many_async(self: Task[P, Coroutine[Any, Any, T]],
                                 calls: Iterable[NewTask | tuple[Any, ...]],
                                 batch_size: int = 1000) -> list[TaskHandle[T]]: ...
    @overload
    async def enqueue_many_async(self: Task[P, T], calls: Iterable[NewTask | tuple[Any, ...]],
                                 batch_size: int = 1000) -> list[TaskHandle[T]]: ...
    async def enqueue_many_async(self, calls: Iterable[NewTask | tuple[Any, ...]],
                                 batch_size: int = 1000) -> list[TaskHandle[Any]]:
        """`enqueue_many` for coroutines: the same calls and checks, sent with the app's
        asyncio client; the handles answer `await handle.result_async()`."""
        tasks = self._calls(calls, batch_size)
        return await self.app.async_producer.enqueue_many(tasks, batch_size)

    def _calls(self, calls: Iterable[NewTask | tuple[Any, ...]],
               batch_size: int) -> list[NewTask]:
        batch_size = BATCH_SIZE.check(batch_size)
        if isinstance(calls, str | bytes | dict) or not isinstance(calls, Iterable):
            raise InvalidTaskError(f"calls must be an iterable of task.call(...) or tuples of "
                                   f"arguments, not {shown(calls)}")
        tasks: list[NewTask] = []
        try:
            for call in calls:
                tasks.append(self._as_call(call))
        except InvalidTaskError as e:
            raise_at_item(e, len(tasks), len(calls) if isinstance(calls, Sized) else None)
        return tasks

    def _as_call(self, call: object) -> NewTask:
        if isinstance(call, NewTask):
            if call.name != self.name:
                raise InvalidTaskError(f"{self.name}.enqueue_many was given a call of "
                                       f"{call.name}; enqueue it with that task")
            return call
        if isinstance(call, tuple):
            return self.call(*call)
        raise InvalidTaskError(f"each call must be {self.name}.call(...) or a tuple of "
                               f"arguments, not {shown(call)}")

    def check_arguments(self, args: Sequence[Any], kwargs: dict[str, Any],
                        what: str | None = None) -> None:
        """Raise `InvalidTaskError` (saying `what` went wrong, by default that the call
        cannot be enqueued) if `args` and `kwargs` do not bind to the function."""
        error = self._binding_error(args, kwargs)
        if error is not None:
            raise InvalidTaskError(f"{what or f'cannot enqueue {self.name}'}: {error}") \
                from error

    def check_call(self, args: list[Any], kwargs: dict[str, Any]) -> None:
        """`check_arguments` for a worker's call, before it is made, so that a TypeError
        the handler itself raises is not taken for arguments that do not fit."""
        error = self._binding_error(args, kwargs)
        if error is not None:
            # Spelled out only here: a signature's text costs more than the check.
            raise InvalidTaskError(f"the arguments of this task do not fit "
                                   f"{self.name}{self.signature}: {error}") from error

    def _binding_error(self, args: Sequence[Any], kwargs: dict[str, Any]) -> TypeError | None:
        """Why `args` and `kwargs` do not bind to the function; None if they do."""
        shape = (len(args), *kwargs)
        if shape in self._fitting:
            return None
        try:
            self.signature.bind(*args, **kwargs)
        except TypeError as e:
            return e
        if len(self._fitting) < FITTING_SHAPES:
            self._fitting.add(shape)
        return None

    def __repr__(self) -> str:
        return f"<Task {self.name}>"


class App:
    """A set of tasks bound to one queue. Workers load an App to know what to run.

    Settings come from the environment unless given; `redis_url` overrides just that one.
    With `shards` above 1 (default: TASKQ_SHARDS, else 1) the queue is spread over that
    many shards, each its own queue in its own Redis Cluster slot (see `taskq.shards`):
    enqueues go to each task's shard, and a worker leases from every shard in turn.
    """

    def __init__(self, queue: str | None = None, settings: Settings | None = None, *,
                 redis_url: str | None = None, shards: int | None = None) -> None:
        if settings is None:
            settings = (Settings.from_env() if redis_url is None else
                        Settings.from_env(None, redis_url=redis_url))
        elif redis_url is not None:
            raise InvalidTaskError("give App either settings or redis_url, not both")
        self.settings = settings
        self.queue = check_queue_name(self.settings.queue if queue is None else queue)
        count = self.settings.shards if shards is None else shards
        SHARDS.check(count, f"the shards of queue {self.queue!r}", error=ConfigError)
        # The queue's shards; None for a plain queue.
        self.layout = Layout.of(self.queue, count) if count > 1 else None
        # The layout whose rules hold while `taskq.testing.pointed_at` keeps a sharded
        # app's tasks in one queue: a test refuses what production would.
        self.shard_rules: Layout | None = None
        self.tasks: dict[str, Task[Any, Any]] = {}
        self.schedules: dict[str, Schedule] = {}
        # Each queue's own rate limit, by queue name (see queue_rate_limit).
        self.queue_limits: dict[str, RateLimit] = {}
        self._broker: Broker | None = None
        self._sharded: ShardedBroker | None = None
        # Held while the first broker (and its connection pool) is made: threads that
        # enqueue for the first time at once share one.
        self._making = threading.Lock()
        self._async = _LoopBroker()

    def __repr__(self) -> str:
        shards = "" if self.layout is None else f" shards={self.layout.count}"
        return f"<App queue={self.queue!r}{shards} tasks={len(self.tasks)}>"

    @property
    def schedules_queue(self) -> str:
        """The queue the app's periodic schedules fire on, whichever queues a worker
        serves: its own, or for a sharded app its first shard."""
        return self.queue if self.layout is None else self.layout.schedules_shard

    def _check_unique(self, task: Task[..., Any]) -> None:
        """Refuse a second task under `task`'s name: another function, or the same one
        (a module imported twice) with other options, which a Task made before would
        enqueue with while the worker ran the new ones."""
        before = self.tasks.get(task.name)
        if before is None:
            return
        if before.fn is not task.fn:
            raise InvalidTaskError(f"a different function is already registered as "
                                   f"{task.name!r}")
        if _options(before) != _options(task):
            raise InvalidTaskError(f"{task.name!r} is already registered with other "
                                   "options; register it once")

    def task(
        self, name: str | None = None, *, max_retries: int = 3, store_result: bool = True,
        retry: RetryPolicy | None = None, time_limit: Seconds | None = None,
        priority: int = PRIORITY.default, rate_limit: str | None = None, rate_burst: int = 1,
        max_concurrency: int | None = None, concurrency_key: str | None = None,
    ) -> Callable[[Callable[P, R]], Task[P, R]]:
        """Register a function (plain or `async def`) under `name` (default: module.qualname).

        Its return value is kept as the task's result (JSON, up to TASKQ_MAX_RESULT_BYTES)
        unless `store_result` is False. `retry` (a `taskq.RetryPolicy`) says which
        exceptions are retried and with what backoff (default: every one, with the
        settings' backoff); `time_limit` (seconds, 0 for none) is how long one run may
        take (default: TASKQ_TIME_LIMIT_SECONDS); `priority` (0 to 9, higher first) is
        its calls' priority unless `.enqueue(priority=...)` says otherwise (default 5);
        `rate_limit` ("100/s", "30/m", "500/h") caps how fast its runs start across every
        worker of the queue, `rate_burst` of them at once after a quiet spell (default 1:
        evenly spaced); a run that comes early waits on delayed for its turn;
        `max_concurrency` caps how many of its runs hold leases at once across every
        worker of the queue: one more waits, still pending, until a run ends; with
        `concurrency_key` (one of its parameters) the cap holds per value of that
        argument (per account, per tenant)."""
        if retry is not None and not isinstance(retry, RetryPolicy):
            raise InvalidTaskError(f"retry must be a taskq.RetryPolicy, not {shown(retry)}")
        if time_limit is not None:
            time_limit = TIME_LIMIT.check(time_limit)
        priority = PRIORITY.check(priority)
        if name is not None and not isinstance(name, str):
            # A bare `@app.task` would hand us the function as the name and register nothing.
            raise InvalidTaskError(
                "app.task takes a task name: write @app.task() to use the default name"
            )

        def register(fn: Callable[P, R]) -> Task[P, R]:
            task_name = check_task_name(default_name(fn) if name is None else name)
            clashing = [p for p in inspect.signature(fn).parameters if p in RESERVED]
            if clashing:
                raise InvalidTaskError(
                    f"{task_name}: parameter(s) {', '.join(clashing)} clash with the options "
                    f"of .enqueue ({', '.join(RESERVED)}); rename them"
                )
            if self.layout is not None and (rate_limit or max_concurrency) is not None:
                raise ConfigError(self._unshareable(f"task {task_name!r} has a "
                    + ("rate limit" if rate_limit is not None else "concurrency limit")))
            limit = None if rate_limit is None else parse_rate(task_name, rate_limit,
                                                                 rate_burst)
            if max_concurrency is None and concurrency_key is not None:
                raise ConfigError(f"task {task_name!r}: concurrency_key needs max_concurrency")
            if not isinstance(store_result, bool):  # "no" would read as True
                raise InvalidTaskError(f"task {task_name!r}: store_result must be True or "
                                       f"False, not {shown(store_result)}")
            slots = None if max_concurrency is None else check_concurrency(
                task_name, max_concurrency, concurrency_key, inspect.signature(fn))
            task = Task(self, fn, task_name, MAX_RETRIES.check(max_retries),
                        store_result, retry or DEFAULT, time_limit, priority, limit,
                        slots)
            self._check_unique(task)
            self.tasks[task_name] = task
            return task

        return register

    def periodic(
        self,
        *,
        cron: str | None = None,
        every: timedelta | None = None,
        tz: tzinfo | str | None = None,
        args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None,
        policy: str = DEFAULT_POLICY,
        grace: timedelta = DEFAULT_GRACE,
        name: str | None = None,
        max_retries: int | None = None,
    ) -> Callable[[Callable[P, R] | Task[P, R]], Task[P, R]]:
        """Run a function (registered here as a task unless it is one) on a schedule:
        `cron` (read in `tz`, UTC by default) or `every` (ticks at whole multiples of it
        since the epoch). Whichever workers run fire each tick once, as one task with
        `args` and `kwargs`. Ticks no worker was up for follow `policy`: "latest" (the
        default) runs the latest of them once, "skip" drops them and runs a tick only up
        to `grace` late, "all" runs each (at most the last 100). `name` (default: the
        task's name) identifies the schedule: one changed under the same name replaces
        the old definition, keeping its last tick, so no tick runs twice or is lost."""

        def register(fn: Callable[P, R] | Task[P, R]) -> Task[P, R]:
            task = fn if isinstance(fn, Task) else self.task()(fn)
            schedule_name = task.name if name is None else name
            if schedule_name in self.schedules:
                raise InvalidTaskError(f"a schedule named {schedule_name!r} is already "
                                       "declared; give this one another name=")
            if name is None:
                try:
                    check_schedule_name(schedule_name)
                except InvalidTaskError as e:
                    raise InvalidTaskError(f"{e}; a schedule is named after its task "
                                           "unless it is given name=") from None
            call_kwargs = {} if kwargs is None else dict(kwargs)
            task.check_arguments(tuple(args), call_kwargs)
            self.schedules[schedule_name] = make_schedule(
                name=schedule_name, task=task.name, cron=cron, every=every, tz=tz,
                args=tuple(args), kwargs=call_kwargs, policy=policy, grace=grace,
                max_retries=task.max_retries if max_retries is None else max_retries,
                priority=task.priority, max_payload_bytes=self.settings.max_payload_bytes)
            return task

        return register

    def queue_rate_limit(self, rate_limit: str, rate_burst: int = 1,
                         queue: str | None = None) -> None:
        """Cap how fast the tasks of `queue` (default: the app's) start, all of them
        together, across every worker of it: `rate_limit` as for a task ("100/s",
        "30/m", "500/h"), `rate_burst` of them at once after a quiet spell. Each start
        passes its task's own limit too, if it has one. Declaring it again replaces it."""
        name = check_queue_name(self.queue if queue is None else queue)
        if self.layout is not None and name == self.queue:
            raise ConfigError(self._unshareable("a queue rate limit was declared"))
        self.queue_limits[name] = parse_rate(QUEUE_LIMIT, rate_limit, rate_burst,
                                             owner=f"queue {name!r}")

    def rate_limits(self, queue: str | None = None) -> tuple[RateLimit, ...]:
        """The rate limits a worker's leases on `queue` (default: the app's) apply: its
        tasks', and the queue's own if one was declared."""
        tasks = tuple(t.rate_limit for t in self.tasks.values() if t.rate_limit is not None)
        own = self.queue_limits.get(self.queue if queue is None else queue)
        return tasks if own is None else (*tasks, own)

    def unlimited_rates(self, queue: str | None = None) -> tuple[str, ...]:
        """The rate limits a worker's leases on `queue` (default: the app's) do not
        apply: the names of its tasks with none, and QUEUE_LIMIT if the queue has no
        limit of its own. A worker lifts any still stored there as it starts (see
        `Broker.lift_rate_limits`): a limit removed by a redeploy holds no task back."""
        names = tuple(sorted(n for n, t in self.tasks.items() if t.rate_limit is None))
        own = self.queue_limits.get(self.queue if queue is None else queue)
        return names if own is not None else (*names, QUEUE_LIMIT)

    def concurrency_limits(self) -> tuple[ConcurrencyLimit, ...]:
        """The concurrency limits of this app's tasks, as a worker's leases apply them."""
        return tuple(t.concurrency_limit for t in self.tasks.values()
                     if t.concurrency_limit is not None)

    def _unshareable(self, what: str) -> str:
        return (f"{what}, but queue {self.queue!r} has {self.layout and self.layout.count} "
                "shards: a limit is kept in one Redis slot and cannot hold across "
                "shards; give limited tasks a queue of their own without shards")

    def _unsharded(self, why: str) -> None:
        """Refuse what needs one queue on one Redis slot: ConfigError saying `why` after
        "queue Q has N shards"."""
        layout = self.layout or self.shard_rules
        if layout is not None:
            raise ConfigError(f"queue {self.queue!r} has {layout.count} shards{why}")

    def new_task_id(self, idempotency_key: str | None = None) -> str:
        """A new random task id; on a sharded queue, one that routes to the shard of
        `idempotency_key` (when given), so the id alone finds the task."""
        layout = self.layout or self.shard_rules
        return new_id() if layout is None else layout.new_id(idempotency_key)

    def handle(self, task_id: str) -> TaskHandle:
        """A handle on the task `task_id` of this app's queue (on a sharded queue, on
        its shard), made at any time later (in another process too): its `status()`
        and `result()`."""
        return (self.broker if self.layout is None else self.producer).handle(task_id)

    def flows(self) -> Flows:
        """The workflow scripts of this app's queue (see `taskq.canvas`); a sharded
        queue refuses workflows, since a workflow's steps must share one Redis slot."""
        self._unsharded(_WORKFLOW_SHARDS)
        refuse_shard_name(self.queue)
        return Flows(self.broker)

    def async_flows(self) -> AsyncFlows:
        """`flows` for coroutines, on the app's asyncio client of the running loop."""
        self._unsharded(_WORKFLOW_SHARDS)
        refuse_shard_name(self.queue)
        return AsyncFlows(self.async_broker)

    def workflow(self, flow_id: str) -> WorkflowHandle:
        """A handle on workflow `flow_id` of this app's queue, made at any time later (in
        another process too): its `status()`, `result()` and `cancel()`."""
        return WorkflowHandle(check_flow_id(flow_id), False, self.flows())

    def workflow_async(self, flow_id: str) -> WorkflowHandle:
        """`workflow` for coroutines: its `await status_async()`, `await result_async()`
        and `await cancel_async()` use the app's asyncio client, on the running loop."""
        return WorkflowHandle(check_flow_id(flow_id), False, self.flows(), self.async_flows())

    def handle_async(self, task_id: str) -> TaskHandle:
        """`handle` for coroutines: its `await status_async()` and `await result_async()`
        use the app's asyncio client."""
        return (self.async_broker if self.layout is None else self.async_producer
                ).handle(task_id)

    @property
    def producer(self) -> Broker | ShardedBroker:
        """What this app enqueues through: the queue's Broker, or on a sharded queue the
        `ShardedBroker` that sends each task to its shard's. A plain app on a shard's
        own name (`jobs~1`) is refused (see refuse_shard_name)."""
        if self.layout is None:
            refuse_shard_name(self.queue)
            return self.broker
        sharded = self._sharded
        if sharded is None:
            with self._making:
                if self._sharded is None:
                    client = connect(self.settings)
                    self._sharded = ShardedBroker(self.layout, [
                        Broker.from_settings(self.settings, name, client=client)
                        for name in self.layout.shards])
                sharded = self._sharded
        return sharded

    @property
    def broker(self) -> Broker:
        """The Broker of this app's queue; a sharded queue has one per shard, so it has
        none (enqueue through `producer`, or the tasks)."""
        broker = self._broker
        if broker is None:
            with self._making:
                if self._broker is None:
                    self._broker = self.make_broker()
                broker = self._broker
        return broker

    def make_broker(self) -> Broker:
        """A new Broker (and connection) for this app's queue and settings."""
        self._unsharded(", so no one Broker: enqueue through app.producer, or the tasks")
        return Broker.from_settings(self.settings, self.queue)

    def use_broker(self, broker: Broker | None) -> Broker | None:
        """Enqueue through `broker` (for tests and embedders that build their own client);
        None makes one from the settings when next needed. Returns the broker it replaces
        (None when none was made yet), to put back later."""
        previous, self._broker = self._broker, broker
        return previous

    @property
    def async_producer(self) -> AsyncBroker | AsyncShardedBroker:
        """`producer` for coroutines: `async_broker`, or on a sharded queue its shards'
        AsyncBrokers on one asyncio client; made on first use in each event loop."""
        if self.layout is None:
            refuse_shard_name(self.queue)
            return self.async_broker
        mine = self._async
        if not mine.serves(_running_loop()):
            client = async_client(self.settings)
            mine.broker = AsyncShardedBroker(self.layout, [
                AsyncBroker.from_settings(self.settings, name, client)
                for name in self.layout.shards])
        assert mine.broker is not None
        return mine.broker

    @property
    def async_broker(self) -> AsyncBroker:
        """The AsyncBroker of `enqueue_async` and `handle_async`, made on first use in
        each event loop: an asyncio client belongs to the loop it connects on, so a new
        loop (a second `asyncio.run`, a test client's portal) gets a new one rather than
        one whose connections wait on a loop that no longer runs."""
        self._unsharded(", so no one AsyncBroker: use app.async_producer")
        mine = self._async
        if not mine.serves(_running_loop()):
            mine.broker = AsyncBroker.from_settings(self.settings, self.queue)
        assert isinstance(mine.broker, AsyncBroker)
        return mine.broker

    async def aclose(self) -> None:
        """Close the asyncio client made in this event loop (in an ASGI app's lifespan,
        at shutdown); the next `enqueue_async` makes a new one."""
        mine = self._async
        broker, mine.broker = mine.broker, None
        # One whose client belongs to another loop cannot be closed from this one: it is
        # dropped. One made outside a loop belongs to its first call's.
        if broker is not None and broker.loop in (_running_loop(), None):
            await broker.aclose()


class _LoopBroker(threading.local):
    """The AsyncBroker of the loop a thread last used, kept per thread since threads
    run event loops of their own at once."""

    broker: AsyncBroker | AsyncShardedBroker | None = None

    def serves(self, loop: asyncio.AbstractEventLoop | None) -> bool:
        """Whether the broker kept may be used in `loop`: its client belongs to it, or
        to none yet (made outside a loop, its first call's will be), and is not closed
        (by the app's aclose(), or by its own)."""
        broker = self.broker
        return broker is not None and not broker.closed and broker.loop in (loop, None)


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None
