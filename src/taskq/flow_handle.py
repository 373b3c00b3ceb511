"""A producer's handle on a workflow: how it stands, its result once it ends, and
cancelling it."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

from taskq.errors import TaskCancelledError, TaskNotFoundError, UpstreamFailed
from taskq.flows import FlowCancellation, Flows, FlowStatus
from taskq.handle import ResultWait, TaskHandle
from taskq.keys import flow_step_id
from taskq.limits import STEP_NUMBER
from taskq.results import ENDED


@dataclass(frozen=True)
class WorkflowHandle:
    """A started workflow: `status()`, `result()` waiting for its end, `cancel()`, and a
    `TaskHandle` on each step (`step(stage, index)`). `created` is False when its id
    already named a workflow, so nothing was started."""

    flow_id: str
    created: bool
    flows: Flows = field(repr=False)

    def status(self) -> FlowStatus:
        """The workflow and each of its steps, read in one step; `TaskNotFoundError` if
        there is no such workflow (never started, or ended and expired)."""
        status = self.flows.status(self.flow_id)
        if status is None:
            raise TaskNotFoundError(self._missing())
        return status

    def step(self, stage: int, index: int = 1) -> TaskHandle:
        """The handle on step `index` of stage `stage` (both counted from 1): its
        `status()`, `result()` and `cancel()`. `InvalidTaskError` unless both are whole
        numbers from 1 to 10000 (a step beyond the workflow's reads "unknown")."""
        for what, value in (("stage", stage), ("index", index)):
            STEP_NUMBER.check(value, what)
        return self.flows.broker.handle(flow_step_id(self.flow_id, stage, index))

    def result(self, timeout: float | None = None) -> Any:
        """What the last stage produced once the workflow has completed (one result, or
        a group's list), waiting up to `timeout` seconds (None: as long as it takes).

        Raises `UpstreamFailed` (a `TaskFailed`, naming the first step that did not
        complete and what each such step did) when it failed, `TaskCancelledError` when
        it was cancelled, `TaskNotFoundError` when there is no such workflow, and
        `ResultTimeoutError` when the timeout passes first. The wait is woken through
        Redis by the script that ends a step, not by polling."""
        wait = ResultWait(self.flow_id, self.flows.broker.queue, timeout,
                          what=f"workflow {self.flow_id}")
        while True:
            status = self.status()
            if status.ended:
                return self._outcome(status)
            # The running stage's steps that have not ended are waited for in turn, each
            # end waking the wait through Redis; the last one's moves the workflow on in
            # the same script, and the record read again says to what. One step read
            # at a time, not the whole workflow per step: a stage of thousands costs
            # thousands of reads, not millions. A step with no state had its record
            # expire after it ended.
            live = [s for s in status.stage_steps(status.stage)
                    if s.state and s.state not in ENDED]
            if not live:
                # Read in one step, a running stage always has a step that has not
                # ended: here each such step's record is gone (deleted or evicted), so
                # no end will ever move the workflow on.
                raise TaskNotFoundError(
                    f"workflow {self.flow_id} is running, but no step of its stage "
                    f"{status.stage} that has not ended has a record any more (deleted "
                    "or evicted), so it cannot end; cancel it")
            for step in live:
                self._wait_for(step.task_id, wait)
                if self.flows.state(self.flow_id) != "running":
                    break  # it failed or was cancelled: no need to wait for the rest

    def _wait_for(self, task_id: str, wait: ResultWait) -> None:
        """Block until step `task_id` has ended (or its record expired after it did)."""
        broker = self.flows.broker
        while (watched := broker.watch(task_id)) is not None and not watched.ended:
            broker.wait_done(task_id, wait.next_block(watched, f"step {task_id}"))

    def cancel(self) -> FlowCancellation:
        """Cancel the workflow in one step: it starts no further stage; its waiting,
        pending, delayed and dead steps end cancelled now, and running ones are told at
        their next heartbeat (their handlers stop; their effects are refused). A
        workflow that has ended is left as it is (`outcome` "unchanged")."""
        return self.flows.cancel(self.flow_id)

    async def status_async(self) -> FlowStatus:
        """`status()` for coroutines (on a thread: the event loop goes on)."""
        return await asyncio.to_thread(self.status)

    async def result_async(self, timeout: float | None = None) -> Any:
        """`result()` for coroutines, raising the same errors; the wait runs on a
        thread, so the event loop runs other coroutines meanwhile."""
        return await asyncio.to_thread(self.result, timeout)

    async def cancel_async(self) -> FlowCancellation:
        """`cancel()` for coroutines."""
        return await asyncio.to_thread(self.cancel)

    def _outcome(self, status: FlowStatus) -> Any:
        if status.state == "completed":
            last = status.stages
            return self.flows.output(self.flow_id, last, len(status.stage_steps(last)),
                                     status.groups[last - 1])
        if status.state == "failed":
            raise UpstreamFailed(f"workflow {self.flow_id}", status.upstream,
                                 status.error_type, status.error_message, "failed")
        raise TaskCancelledError(f"workflow {self.flow_id}")

    def _missing(self) -> str:
        return (f"no workflow {self.flow_id!r} on queue {self.flows.broker.queue!r}: it "
                "never started there, or it ended and its record expired (kept "
                "TASKQ_COMPLETED_TTL_SECONDS)")

