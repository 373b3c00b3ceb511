"""Workflows as users write them: `chain`, `group` and `then`.

    chain(fetch.s(url), parse.s(), store.s()).enqueue()
    group(resize.s(p) for p in photos).then(archive.s()).enqueue()

A workflow is a list of stages run one after another; the steps of a stage run in
parallel. Each stage hands on what it produced as the first argument of every step of
the next: a single step its result, a group the list of its results in order. The hand
over is made by the script that accepts the end of a stage's last step (see
_flow.lua), so a stage starts exactly once whatever crashes, redeliveries and stale
holders do. Everything is checked before anything is sent.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Generic, overload

from taskq.codec import args_payload, encode_payload
from taskq.concurrency import limit_key_of
from taskq.errors import InvalidTaskError
from taskq.flow_handle import WorkflowHandle
from taskq.flows import POLICIES, StageSpec
from taskq.keys import check_flow_id, new_id
from taskq.limits import FLOW_STEPS, MAX_RETRIES, PRIORITY, Seconds, shown, to_ms
from taskq.results import brief_repr

if TYPE_CHECKING:
    # A bare `Step` or `Chain` annotation reads as Any (a default needs
    # typing_extensions before Python 3.13, which type checkers have).
    from typing_extensions import TypeVar

    from taskq.app import App, Task

    T = TypeVar("T", default=Any)
    U = TypeVar("U")
else:
    from typing import TypeVar

    T = TypeVar("T")
    U = TypeVar("U")

# The options a step takes; the others a task's `enqueue` takes make no sense for a
# step: its id comes from its workflow's, and it starts when the stage before it ends.
STEP_OPTIONS = ("max_retries", "priority", "result_ttl")
REFUSED_OPTIONS = ("delay", "run_at", "task_id", "idempotency_key")


class Stages(Generic[T]):
    """What a workflow is made of (a step, a group or a chain), typed by what it hands
    on: its last stage's output, which a workflow of it returns as its `result()`."""

    @overload
    def then(self, last: Stages[U], /) -> Chain[U]: ...
    @overload
    def then(self, part: Part, last: Stages[U], /) -> Chain[U]: ...
    @overload
    def then(self, part: Part, part2: Part, last: Stages[U], /) -> Chain[U]: ...
    @overload
    def then(self, part: Part, part2: Part, part3: Part, last: Stages[U], /) -> Chain[U]: ...
    @overload
    def then(self, part: Part, part2: Part, part3: Part, part4: Part, last: Stages[U],
             /) -> Chain[U]: ...
    @overload
    def then(self, *parts: Part) -> Chain[Any]: ...
    def then(self, *parts: Part) -> Chain[Any]:
        """This, then `parts` (steps, groups or chains) one after another:
        `group(...).then(callback.s())` is a chord, whose callback gets the list of the
        group's results."""
        return Chain(self, *parts)

    def enqueue(self, flow_id: str | None = None) -> WorkflowHandle[T]:
        """Start a workflow of this alone (see `Chain.enqueue`)."""
        started: Chain[T] = Chain(self)
        return started.enqueue(flow_id)

    async def enqueue_async(self, flow_id: str | None = None) -> WorkflowHandle[T]:
        started: Chain[T] = Chain(self)
        return await started.enqueue_async(flow_id)


@dataclass(frozen=True)
class Step(Stages[T]):
    """One call of a task inside a workflow: `task.s(*args, **kwargs)`, typed by what
    the task returns. A step of any stage but the first gets what the stage before
    produced as its first argument, before `args`."""

    task: Task[Any, Any]
    args: tuple[Any, ...]
    kwargs: dict[str, Any] = field(default_factory=dict)
    max_retries: int | None = None
    priority: int | None = None
    result_ttl: Seconds | None = None

    __repr__ = brief_repr


class Group(Stages[list[Any]]):
    """Steps that run in parallel; the next stage gets the list of their results, in
    the order given. `on_member_failure` says what a step that dies (or is cancelled)
    does: "fail" (the default) ends the workflow, every later step cancelled with the
    members' errors; "partial" hands on its failure in its place, as
    `{"taskq_failed": {"task_id", "state", "error_type", "error"}}` (see
    `taskq.failure_of`)."""

    def __init__(self, *steps: Step[Any] | Iterable[Step[Any]],
                 on_member_failure: str = "fail") -> None:
        # group(task.s(x) for x in xs); a chain or group alone is refused below as a
        # member, with the message that says why.
        if len(steps) == 1 and not isinstance(steps[0], Step | Chain | Group):
            if isinstance(steps[0], str | bytes | dict) or not isinstance(steps[0], Iterable):
                raise InvalidTaskError(f"a group's members are steps, task.s(...), or one "
                                       f"iterable of them, not {shown(steps[0])}")
            steps = tuple(steps[0])
        if not steps:
            raise InvalidTaskError("a group needs at least one step")
        for step in steps:
            if not isinstance(step, Step):
                raise InvalidTaskError(
                    f"a group's members are steps, task.s(...), not {shown(step)}"
                    + ("; a chain inside a group is not supported: run it as its own "
                       "workflow" if isinstance(step, Chain | Group) else ""))
        if on_member_failure not in POLICIES:
            raise InvalidTaskError(f"on_member_failure must be one of "
                                   f"{', '.join(POLICIES)}, not {shown(on_member_failure)}")
        self.steps: tuple[Step[Any], ...] = tuple(steps)  # type: ignore[arg-type]
        self.on_member_failure = on_member_failure

    def __repr__(self) -> str:
        return f"group({', '.join(s.task.name for s in self.steps)})"


class Chain(Stages[T]):
    """Parts run one after another, each stage's output the first argument of the
    next's steps; a chain inside a chain is flattened. Typed by what its last part
    hands on."""

    def __init__(self, *parts: Part) -> None:
        stages: list[Step[Any] | Group] = []
        for part in parts:
            if isinstance(part, Chain):
                stages.extend(part.stages)
            elif isinstance(part, Step | Group):
                stages.append(part)
            else:
                raise InvalidTaskError(f"a chain's parts are steps (task.s(...)), groups "
                                       f"or chains, not {shown(part)}")
        if not stages:
            raise InvalidTaskError("a chain needs at least one step")
        self.stages: tuple[Step[Any] | Group, ...] = tuple(stages)

    def enqueue(self, flow_id: str | None = None) -> WorkflowHandle[T]:
        """Start the workflow and return its handle: `result()` waits for the last
        stage's value, `status()` shows every step, `cancel()` stops it. A `flow_id`
        that already names a workflow starts nothing and returns a handle on that one
        (`created` False), so a producer may send the same workflow again safely."""
        app = self.app()
        specs = stage_specs(self.stages, app.settings.max_payload_bytes)
        flow_id = new_id() if flow_id is None else check_flow_id(flow_id)
        flows = app.flows()
        created = flows.start(flow_id, specs)
        return WorkflowHandle(flow_id, created, flows)

    async def enqueue_async(self, flow_id: str | None = None) -> WorkflowHandle[T]:
        """`enqueue` for coroutines, on the app's asyncio client: the event loop goes on
        while Redis starts it, and the handle's `_async` methods await on that loop
        (its blocking ones, outside the loop, still work)."""
        app = self.app()
        specs = stage_specs(self.stages, app.settings.max_payload_bytes)
        flow_id = new_id() if flow_id is None else check_flow_id(flow_id)
        flows = app.async_flows()
        created = await flows.start(flow_id, specs)
        return WorkflowHandle(flow_id, created, app.flows(), flows)

    def app(self) -> App:
        """The one app every step's task belongs to (a workflow runs in one queue)."""
        apps = {id(step.task.app): step.task.app for step in steps_of(self.stages)}
        if len(apps) > 1:
            raise InvalidTaskError("every step of a workflow must be a task of the same "
                                   "App: a workflow runs in one queue")
        return next(iter(apps.values()))

    def __repr__(self) -> str:
        return " | ".join(repr(s) if isinstance(s, Group) else s.task.name
                          for s in self.stages)


# A step, a group or a chain (a hand-made subclass of Stages is refused as one runs).
Part = Stages[Any]


# Typed by the last part, for up to six parts; more read as Chain[Any].
@overload
def chain(last: Stages[T], /) -> Chain[T]: ...
@overload
def chain(p1: Part, last: Stages[T], /) -> Chain[T]: ...
@overload
def chain(p1: Part, p2: Part, last: Stages[T], /) -> Chain[T]: ...
@overload
def chain(p1: Part, p2: Part, p3: Part, last: Stages[T], /) -> Chain[T]: ...
@overload
def chain(p1: Part, p2: Part, p3: Part, p4: Part, last: Stages[T], /) -> Chain[T]: ...
@overload
def chain(p1: Part, p2: Part, p3: Part, p4: Part, p5: Part, last: Stages[T], /) -> Chain[T]: ...
@overload
def chain(*parts: Part) -> Chain[Any]: ...
def chain(*parts: Part) -> Chain[Any]:
    """`parts` one after another: `chain(a.s(1), b.s(), c.s())` runs a(1), then b with
    a's result, then c with b's."""
    return Chain(*parts)


def group(*steps: Step[Any] | Iterable[Step[Any]], on_member_failure: str = "fail") -> Group:
    """`steps` in parallel: `group(a.s(1), a.s(2))`, or `group(a.s(x) for x in xs)`."""
    return Group(*steps, on_member_failure=on_member_failure)


def steps_of(stages: Iterable[Step[Any] | Group]) -> list[Step[Any]]:
    return [s for stage in stages for s in (stage.steps if isinstance(stage, Group)
                                             else (stage,))]


def stage_specs(stages: Iterable[Step[Any] | Group], max_payload_bytes: int) -> list[StageSpec]:
    """Each stage's checked and encoded steps, as start_flow.lua takes them, or
    `InvalidTaskError` naming the first step that is wrong and why."""
    specs = []
    stages = tuple(stages)
    for number, stage in enumerate(stages, start=1):
        steps = stage.steps if isinstance(stage, Group) else (stage,)
        if number < len(stages):
            for step in steps:
                if not step.task.store_result:
                    raise InvalidTaskError(
                        f"cannot start {step.task.name} as step of stage {number}: it keeps "
                        "no result (store_result=False), so the next stage would get None "
                        "for it; let it keep its result, or make it the last stage")
        specs.append(StageSpec(
            tuple(step_fields(s, number, max_payload_bytes) for s in steps),
            group=isinstance(stage, Group),
            policy=stage.on_member_failure if isinstance(stage, Group) else "fail"))
    FLOW_STEPS.check(sum(len(s.steps) for s in specs))
    return specs


def step_fields(step: Step[Any], stage: int, max_payload_bytes: int) -> tuple[Any, ...]:
    """The six ARGV values of one step in start_flow.lua's order."""
    task = step.task
    what = f"cannot start {task.name} as step of stage {stage}"
    # After the first stage, the stage before hands its output on as the first argument.
    bound_args = step.args if stage == 1 else (None, *step.args)
    task.check_arguments(bound_args, step.kwargs, what + (
        "" if stage == 1 else " (its first argument is what the stage before produces)"))
    limit_key = None
    if task.concurrency_limit is not None and task.concurrency_limit.key:
        if stage > 1:
            raise InvalidTaskError(f"{what}: its concurrency limit is kept per argument "
                                   f"{task.concurrency_limit.key!r}, which a later stage's "
                                   "step cannot name before it starts; make it the first step")
        limit_key = limit_key_of(task.concurrency_limit, task.signature, step.args,
                                 step.kwargs)
    max_retries = task.max_retries if step.max_retries is None else step.max_retries
    priority = task.priority if step.priority is None else step.priority
    result_ttl = "" if step.result_ttl is None else to_ms(step.result_ttl, "result_ttl")
    return (task.name, encode_payload(args_payload(step.args, step.kwargs), max_payload_bytes),
            MAX_RETRIES.check(max_retries), result_ttl, PRIORITY.check(priority),
            limit_key or "")


def new_step(task: Task[Any, Any], args: tuple[Any, ...], kwargs: dict[str, Any],
             options: dict[str, Any]) -> Step[Any]:
    """A step of `task` called with `args` and `kwargs`, with the queue `options` given
    (of the names a task's enqueue takes, those a step takes; the others refused)."""
    refused = [k for k in REFUSED_OPTIONS if k in options]
    if refused:
        raise InvalidTaskError(
            f"{task.name}.s() takes no {refused[0]}: a step's id comes from its "
            "workflow's (enqueue(flow_id=...) makes starting it idempotent), and it starts "
            "when the stage before it has ended")
    return Step(task, args, kwargs, **options)


@dataclass(frozen=True)
class MemberFailure:
    """A step that did not complete, in its place in a group's results under
    `on_member_failure="partial"`."""

    task_id: str
    state: str
    error_type: str
    error: str


def failure_of(value: Any) -> MemberFailure | None:
    """The failure `value` stands for, if it is a failed member's place in a group's
    results under "partial", else None: `[r for r in results if not failure_of(r)]`."""
    if isinstance(value, dict) and set(value) == {"taskq_failed"}:
        f = value["taskq_failed"]
        if isinstance(f, dict):
            return MemberFailure(str(f.get("task_id", "")), str(f.get("state", "")),
                                 str(f.get("error_type", "")), str(f.get("error", "")))
    return None
