"""A producer's handle on a workflow: how it stands, its result once it ends, and
cancelling it."""

from __future__ import annotations

import asyncio
from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Generic

from taskq.errors import TaskCancelledError, TaskNotFoundError, TaskqError, UpstreamFailed
from taskq.flows import AsyncFlows, FlowCancellation, Flows, FlowStatus
from taskq.handle import ResultWait, TaskHandle, cancel_requested, cancels
from taskq.keys import flow_step_id
from taskq.limits import STEP_NUMBER, Seconds
from taskq.results import ENDED

if TYPE_CHECKING:
    # The result type is Any when unsaid (a handle made from an id), as a TaskHandle's.
    from typing_extensions import TypeVar

    T = TypeVar("T", default=Any)
else:
    from typing import TypeVar

    T = TypeVar("T")


@dataclass(frozen=True)
class WorkflowHandle(Generic[T]):
    """A started workflow: `status()`, `result()` waiting for its end, `cancel()`, and a
    `TaskHandle` on each step (`step(stage, index)`). `created` is False when its id
    already named a workflow, so nothing was started.

    Each method has an `_async` twin for coroutines. A handle made in a coroutine
    (`enqueue_async()`, `App.workflow_async`) carries `async_flows`, and its twins await
    Redis on the event loop itself, so any number of them wait at once; on a handle
    made by blocking code (`enqueue()`, `App.workflow`) they run on a thread."""

    flow_id: str
    created: bool
    flows: Flows = field(repr=False)
    async_flows: AsyncFlows | None = field(default=None, repr=False)

    def status(self) -> FlowStatus:
        """The workflow and each of its steps (see `Flows.status`); `TaskNotFoundError`
        if there is no such workflow (never started, or ended and expired)."""
        return self._found(self.flows.status(self.flow_id))

    def step(self, stage: int, index: int = 1) -> TaskHandle:
        """The handle on step `index` of stage `stage` (both counted from 1): its
        `status()`, `result()` and `cancel()`, and on a handle made in a coroutine their
        `_async` twins on its event loop. `InvalidTaskError` unless both are whole
        numbers from 1 to 10000 (a step beyond the workflow's reads "unknown")."""
        stage, index = STEP_NUMBER.check(stage, "stage"), STEP_NUMBER.check(index, "index")
        task_id = flow_step_id(self.flow_id, stage, index)
        return TaskHandle(task_id, False, broker=self.flows.broker,
                          async_broker=None if self.async_flows is None
                          else self.async_flows.broker)

    def result(self, timeout: Seconds | None = None) -> T:
        """What the last stage produced once the workflow has completed (one result, or
        a group's list), waiting up to `timeout` seconds (None: as long as it takes).

        Raises `UpstreamFailed` (a `TaskFailed`, naming the first step that did not
        complete and what each such step did) when it failed, `TaskCancelledError` when
        it was cancelled, `TaskNotFoundError` when there is no such workflow, and
        `ResultTimeoutError` when the timeout passes first. The wait is woken through
        Redis by the script that ends a step, not by polling; between wakes the
        workflow's state is read once a second, so a cancel is seen within one.

        The whole workflow is read at the start and the end, and again only when a
        stage seems not to move on: in between, one step is read at a time, and the
        stage the workflow is on, so a chain of thousands of stages costs thousands of
        reads, not millions."""
        return self._result(self._wait(timeout))

    def _result(self, wait: ResultWait) -> T:
        # Each read rides out a Redis that cannot answer for a while (see ResultWait).
        status = wait.retried(self.status)
        sizes = _stage_sizes(status)
        while not status.ended:
            stage, steps = status.stage, self._live(status)
            while self._waited(steps, wait):
                position = wait.retried(self.flows.position, self.flow_id)
                if position is None or position[0] != "running" or position[1] == stage:
                    break  # ended, or stuck: read in whole below
                stage = position[1]
                steps = _step_ids(self.flow_id, stage, sizes[stage])
            status = wait.retried(self.status)
        if status.state == "completed":
            value: T = wait.retried(self.flows.output, *_output_of(status))  # as JSON kept it
            return value
        raise self._failure(status)

    def cancel(self) -> FlowCancellation:
        """Cancel the workflow in one step: it starts no further stage; its waiting,
        pending, delayed and dead steps end cancelled now, and running ones are told at
        their next heartbeat (their handlers stop; their effects are refused). A
        workflow that has ended is left as it is (`outcome` "unchanged")."""
        return self.flows.cancel(self.flow_id)

    async def status_async(self) -> FlowStatus:
        """`status()` for coroutines."""
        flows = self.async_flows
        if flows is None:
            return await asyncio.to_thread(self.status)
        return self._found(await flows.status(self.flow_id))

    async def result_async(self, timeout: Seconds | None = None) -> T:
        """`result()` for coroutines, raising the same errors; the event loop runs other
        coroutines while Redis holds the wait. A handle from `Flows` waits on a thread,
        its timeout counted from this call however long a thread takes to come free."""
        flows = self.async_flows
        if flows is None:
            return await self._wait(timeout).on_thread(self._result)
        wait, since = self._wait(timeout), cancels()
        async with wait.bounded():
            status = await wait.retried_async(self.status_async)
            sizes = _stage_sizes(status)
            while not status.ended:
                stage, steps = status.stage, self._live(status)
                while await self._waited_async(flows, steps, wait, since):
                    position = await wait.retried_async(flows.position, self.flow_id)
                    if position is None or position[0] != "running" or position[1] == stage:
                        break
                    stage = position[1]
                    steps = _step_ids(self.flow_id, stage, sizes[stage])
                status = await wait.retried_async(self.status_async)
            if status.state == "completed":
                value: T = await wait.retried_async(flows.output, *_output_of(status))
                return value
        raise self._failure(status)

    async def cancel_async(self) -> FlowCancellation:
        """`cancel()` for coroutines."""
        flows = self.async_flows
        if flows is None:
            return await asyncio.to_thread(self.cancel)
        return await flows.cancel(self.flow_id)

    def _waited(self, steps: list[str], wait: ResultWait) -> bool:
        """Wait for each of `steps` to end, in turn; False as soon as the workflow is
        read to have stopped running (failed or cancelled: no need to wait for the
        rest, nor for a step it told to stop)."""
        broker = self.flows.broker
        for step in steps:
            while (watched := wait.retried(broker.watch, step)) is not None \
                    and not watched.ended:
                wait.waited_out(broker.wait_done, step, wait.next_block(watched, f"step {step}"))
                if wait.retried(self.flows.state, self.flow_id) != "running":
                    return False
        return True

    async def _waited_async(self, flows: AsyncFlows, steps: list[str],
                            wait: ResultWait, since: int) -> bool:
        """`_waited`, awaited; ended by a cancel asked since the task had `since`."""
        broker = flows.broker
        for step in steps:
            while (watched := await wait.retried_async(broker.watch, step)) is not None \
                    and not watched.ended:
                cancel_requested(since)
                await wait.waited_out_async(broker.wait_done, step,
                                            wait.next_block(watched, f"step {step}"))
                cancel_requested(since)
                if await wait.retried_async(flows.state, self.flow_id) != "running":
                    return False
        return True

    def _wait(self, timeout: Seconds | None) -> ResultWait:
        return ResultWait(self.flow_id, self.flows.broker.queue, timeout,
                          what=f"workflow {self.flow_id}")

    def _found(self, status: FlowStatus | None) -> FlowStatus:
        if status is None:
            raise TaskNotFoundError(
                f"no workflow {self.flow_id!r} on queue {self.flows.broker.queue!r}: it "
                "never started there, or it ended and its record expired (kept "
                "TASKQ_COMPLETED_TTL_SECONDS)")
        return status

    def _live(self, status: FlowStatus) -> list[str]:
        """The task ids of the running stage's steps that have not ended, to wait for in
        turn: each end wakes the wait through Redis, and the last one's moves the
        workflow on in the same script, which the record read again says. One step
        read at a time, not the whole workflow per step: a stage of thousands costs
        thousands of reads, not millions. A step with no state had its record expire
        after it ended."""
        live = [s.task_id for s in status.stage_steps(status.stage)
                if s.state and s.state not in ENDED]
        if not live:
            # Read in one step, or its state read after its steps (`later_reads`), a
            # running stage always has a step that had not ended when it was read:
            # here each such step's record is gone (deleted or evicted), so no end will
            # ever move the workflow on.
            raise TaskNotFoundError(
                f"workflow {self.flow_id} is running, but no step of its stage "
                f"{status.stage} that has not ended has a record any more (deleted "
                "or evicted), so it cannot end; cancel it")
        return live

    def _failure(self, status: FlowStatus) -> TaskqError:
        """Why a workflow that ended other than completed has no result."""
        if status.state == "failed":
            return UpstreamFailed(self.flow_id, status.upstream, status.error_type,
                                  status.error_message, "failed", subject="workflow")
        return TaskCancelledError(self.flow_id, subject="workflow")


def _stage_sizes(status: FlowStatus) -> Counter[int]:
    """How many steps each stage has, by stage number."""
    return Counter(step.stage for step in status.steps)


def _step_ids(flow_id: str, stage: int, size: int) -> list[str]:
    return [flow_step_id(flow_id, stage, index) for index in range(1, size + 1)]


def _output_of(status: FlowStatus) -> tuple[str, int, int, bool]:
    """The arguments of `Flows.output` that read what a completed workflow's last
    stage handed on."""
    last = status.stages
    return (status.flow_id, last, len(status.stage_steps(last)), status.groups[last - 1])
