"""The task registry: users decorate their functions, enqueue calls, workers run them."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any, Generic, ParamSpec, TypeVar

from taskq.broker import Broker
from taskq.codec import args_payload
from taskq.errors import InvalidTaskError
from taskq.keys import check_task_name, new_id
from taskq.results import Enqueued
from taskq.settings import Settings

P = ParamSpec("P")
R = TypeVar("R")

RESERVED = ("delay", "max_retries", "idempotency_key", "task_id")


class Task(Generic[P, R]):
    """A registered function: call it directly, or `.enqueue(...)` it to run on a worker."""

    def __init__(self, app: App, fn: Callable[P, R], name: str, max_retries: int) -> None:
        self.app = app
        self.fn = fn
        self.name = name
        self.max_retries = max_retries
        self.is_async = inspect.iscoroutinefunction(fn)
        # Read once: building a signature costs more than the rest of a Python-side enqueue.
        self._signature = inspect.signature(fn)
        self.__doc__ = fn.__doc__
        self.__wrapped__ = fn

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R:
        return self.fn(*args, **kwargs)

    def enqueue(self, *args: Any, **kwargs: Any) -> Enqueued:
        """Enqueue a call. `delay`, `max_retries`, `idempotency_key` and `task_id` are
        options for the queue, not arguments of the function."""
        options = {k: kwargs.pop(k) for k in RESERVED if k in kwargs}
        self._check_arguments(args, kwargs)
        return self.app.broker.enqueue(
            options.get("task_id") or new_id(),
            delay=options.get("delay", 0),
            max_retries=options.get("max_retries", self.max_retries),
            payload=args_payload(args, kwargs),
            idempotency_key=options.get("idempotency_key"),
            idempotency_ttl=self.app.settings.idempotency_ttl_seconds,
            name=self.name,
        )

    def _check_arguments(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        try:
            self._signature.bind(*args, **kwargs)
        except TypeError as e:
            raise InvalidTaskError(f"cannot enqueue {self.name}: {e}") from e

    def __repr__(self) -> str:
        return f"<Task {self.name}>"


class App:
    """A set of tasks bound to one queue. Workers load an App to know what to run.

    Settings come from the environment unless given; `redis_url` overrides just that one.
    """

    def __init__(self, queue: str | None = None, settings: Settings | None = None, *,
                 redis_url: str | None = None) -> None:
        if settings is None:
            settings = (Settings.from_env() if redis_url is None else
                        Settings.from_env(None, redis_url=redis_url))
        elif redis_url is not None:
            raise InvalidTaskError("give App either settings or redis_url, not both")
        self.settings = settings
        self.queue = queue or self.settings.queue
        self.tasks: dict[str, Task[Any, Any]] = {}
        self._broker: Broker | None = None

    def task(
        self, name: str | None = None, *, max_retries: int = 3
    ) -> Callable[[Callable[P, R]], Task[P, R]]:
        """Register a function (plain or `async def`) under `name` (default: module.qualname)."""
        if name is not None and not isinstance(name, str):
            # A bare `@app.task` would hand us the function as the name and register nothing.
            raise InvalidTaskError(
                "app.task takes a task name: write @app.task() to use the default name"
            )

        def register(fn: Callable[P, R]) -> Task[P, R]:
            task_name = check_task_name(f"{fn.__module__}.{fn.__qualname__}"
                                        if name is None else name)
            clashing = [p for p in inspect.signature(fn).parameters if p in RESERVED]
            if clashing:
                raise InvalidTaskError(
                    f"{task_name}: parameter(s) {', '.join(clashing)} clash with the options "
                    f"of .enqueue ({', '.join(RESERVED)}); rename them"
                )
            if task_name in self.tasks and self.tasks[task_name].fn is not fn:
                raise InvalidTaskError(
                    f"a different function is already registered as {task_name!r}"
                )
            task = Task(self, fn, task_name, max_retries)
            self.tasks[task_name] = task
            return task

        return register

    @property
    def broker(self) -> Broker:
        if self._broker is None:
            self._broker = self.make_broker()
        return self._broker

    def make_broker(self) -> Broker:
        """A new Broker (and connection) for this app's queue and settings."""
        return Broker.from_settings(self.settings, self.queue)

    def use_broker(self, broker: Broker) -> None:
        """Enqueue through `broker` (for tests and embedders that build their own client)."""
        self._broker = broker
