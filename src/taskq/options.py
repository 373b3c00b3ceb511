"""`task.options(...)`: a task's queue options set apart from its call's arguments, so
a type checker checks the arguments against the function's own (`enqueue(...)` cannot
say both, as its keyword arguments carry the options too)."""

from __future__ import annotations

from collections.abc import Coroutine
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Generic, ParamSpec, TypeVar, overload

from taskq.canvas import Step, new_step
from taskq.handle import TaskHandle
from taskq.results import NewTask

if TYPE_CHECKING:
    from taskq.app import Task

P = ParamSpec("P")
R = TypeVar("R")
T = TypeVar("T")


@dataclass(frozen=True)
class Options(Generic[P, R]):
    """`task` with the queue options `given` (only those set): `enqueue`, `call` and `s`
    take the function's arguments alone (checked by type, but for `s`)."""

    task: Task[P, R]
    given: dict[str, Any] = field(default_factory=dict)

    def call(self, *args: P.args, **kwargs: P.kwargs) -> NewTask:
        """A checked call, to enqueue later with others (`task.enqueue_many`)."""
        return self.task.new_call(args, dict(kwargs), self.given)

    @overload
    def enqueue(self: Options[P, Coroutine[Any, Any, T]], *args: P.args,
                **kwargs: P.kwargs) -> TaskHandle[T]: ...
    @overload
    def enqueue(self: Options[P, T], *args: P.args, **kwargs: P.kwargs) -> TaskHandle[T]: ...
    def enqueue(self, *args: Any, **kwargs: Any) -> TaskHandle[Any]:
        """`task.enqueue(...)` with these options; its handle's result is typed as the
        function's return."""
        return self.task.app.producer.enqueue_many([self.call(*args, **kwargs)], 1)[0]

    @overload
    async def enqueue_async(self: Options[P, Coroutine[Any, Any, T]], *args: P.args,
                            **kwargs: P.kwargs) -> TaskHandle[T]: ...
    @overload
    async def enqueue_async(self: Options[P, T], *args: P.args,
                            **kwargs: P.kwargs) -> TaskHandle[T]: ...
    async def enqueue_async(self, *args: Any, **kwargs: Any) -> TaskHandle[Any]:
        """`enqueue` for coroutines, on the app's asyncio client."""
        call = self.call(*args, **kwargs)
        return (await self.task.app.async_producer.enqueue_many([call], 1))[0]

    # Not checked by type: a step after the first stage gets the stage before's output
    # as its first argument, which the call leaves out.
    @overload
    def s(self: Options[P, Coroutine[Any, Any, T]], *args: Any, **kwargs: Any) -> Step[T]: ...
    @overload
    def s(self: Options[P, T], *args: Any, **kwargs: Any) -> Step[T]: ...
    def s(self, *args: Any, **kwargs: Any) -> Step[Any]:
        """A step of a workflow with these options (a step takes `max_retries`,
        `priority` and `result_ttl`; the others are refused, saying why)."""
        return new_step(self.task, args, dict(kwargs), self.given)
