"""The broker's side of workflows: starting one, reading how it stands, cancelling it.

One thin method per script (start_flow.lua, flow_status.lua, cancel_flow.lua), on the
blocking broker (`Flows`) and the asyncio one (`AsyncFlows`), each call built and read by
the same functions; what a workflow is and how its stages hand on their results is
described in `_flow.lua`, and the user's side (chain, group, then) in `taskq.canvas`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any

import redis

from taskq.boundary import redis_errors, stored_int, text
from taskq.calls import Call, outage_errors
from taskq.codec import decode_result
from taskq.errors import BrokerError, IncompleteEnqueueError, InvalidTaskError, TaskNotFoundError
from taskq.keys import QueueKeys, check_flow_id, flow_step_id
from taskq.outages import Outage, ride_out, ride_out_async
from taskq.results import ENDED
from taskq.scripts import source

if TYPE_CHECKING:
    from taskq.aio import AsyncBroker
    from taskq.broker import Broker

# What a stage does when one of its steps does not complete (dies, or is cancelled):
# "fail" ends the workflow, every later step cancelled with that step's error; "partial"
# (a group only) hands on the failure in that step's place, as `{"taskq_failed": ...}`.
POLICIES = ("fail", "partial")
FLOW_ENDED = ("completed", "failed", "cancelled")
# Steps a status read takes in one step with the workflow's record and shape; a bigger
# workflow's others are read after it, as many a round trip, each a command of its own
# that other clients' commands may come between.
STATUS_STEPS = 1000
# A step's fields a status read gives, and what it gives for a step that has none; the
# fields of the workflow's record it gives before its shape.
STEP_FIELDS = ("state", "name", "retries", "upstream")
NO_STEP = ("", "", "0", "")
HEADER_FIELDS = ("state", "stage", "created_at", "ended_at", "upstream", "error_type",
                 "error_message")


@dataclass(frozen=True)
class StageSpec:
    """One stage as start_flow.lua takes it: each step's six checked ARGV values
    (name, payload, max_retries, result_ttl_ms, priority, limit_key), whether it hands
    on a list (a group), and its policy."""

    steps: tuple[tuple[Any, ...], ...]
    group: bool
    policy: str


@dataclass(frozen=True)
class StepState:
    """One step of a workflow as it stands: its task id, stage and place (both from
    1), task name, state and retries so far ('' state: its record has expired); a
    step that never ran because the workflow failed first names the step that failed
    it (`upstream`)."""

    task_id: str
    stage: int
    index: int
    name: str
    state: str
    retries: int
    upstream: str = ""


@dataclass(frozen=True)
class FlowStatus:
    """A workflow as it stands: running, completed, failed or cancelled; the stage it is
    on; and every step. A failed one names the first step that did not complete
    (`upstream`) and what each such step of that stage did (`error_message`)."""

    flow_id: str
    state: str
    stage: int
    stages: int
    steps: tuple[StepState, ...]
    groups: tuple[bool, ...]
    policies: tuple[str, ...]
    created_at_ms: int
    ended_at_ms: int | None
    upstream: str
    error_type: str
    error_message: str

    @property
    def ended(self) -> bool:
        return self.state in FLOW_ENDED

    @property
    def steps_ended(self) -> int:
        """How many of its steps have ended: completed, dead or cancelled, or with no
        record any more (a task's record expires only once the task has ended)."""
        return sum(1 for s in self.steps if s.state in ENDED or not s.state)

    def stage_steps(self, stage: int) -> tuple[StepState, ...]:
        return tuple(s for s in self.steps if s.stage == stage)

    def skipped(self, step: StepState) -> bool:
        """Whether `step` never ran because the workflow failed first (its record names
        the step that failed it), rather than being cancelled by hand."""
        return step.state == "cancelled" and bool(step.upstream)

    @classmethod
    def from_reply(cls, flow_id: str, reply: list[Any]) -> FlowStatus | None:
        if not reply:
            return None
        values = [text(v) for v in reply]
        stages = int(values[7])
        shape = values[8 : 8 + 3 * stages]
        sizes = [int(n) for n in shape[0::3]]
        rows = values[8 + 3 * stages :]
        steps, at = [], 0
        for stage, size in enumerate(sizes, start=1):
            for index in range(1, size + 1):
                state, name, retries, upstream = rows[at : at + 4]
                steps.append(StepState(flow_step_id(flow_id, stage, index), stage, index,
                                       name, state, stored_int(retries), upstream))
                at += 4
        return cls(flow_id=flow_id, state=values[0], stage=int(values[1] or 1),
                   stages=stages, steps=tuple(steps),
                   groups=tuple(g == "1" for g in shape[1::3]),
                   policies=tuple(shape[2::3]),
                   created_at_ms=stored_int(values[2]),
                   ended_at_ms=stored_int(values[3]) if values[3] else None,
                   upstream=values[4], error_type=values[5], error_message=values[6])


@dataclass(frozen=True)
class FlowCancellation:
    """What cancelling a workflow did: `outcome` cancelled (it was running), unchanged
    (it had ended, as `state`) or unknown (no such workflow); how many steps ended now,
    and how many running ones were told to stop."""

    flow_id: str
    outcome: str
    state: str
    ended: int
    told: int


def start_flow_call(keys: QueueKeys, retention: int, completed_ttl_ms: int,
                    max_payload_bytes: int, flow_id: str, stages: Sequence[StageSpec]) -> Call:
    """The start_flow.lua call that creates workflow `flow_id` with `stages`, no step's
    payload to pass `max_payload_bytes` once the stage before hands it its input."""
    args: list[Any] = [keys.prefix, retention, check_flow_id(flow_id), completed_ttl_ms,
                       max_payload_bytes, len(stages)]
    for stage in stages:
        args += [len(stage.steps), "1" if stage.group else "0", stage.policy]
    for stage in stages:
        for step in stage.steps:
            args.extend(step)
    return [keys.ready, keys.events, keys.seq, keys.epoch, keys.wake], args


def started(flow_id: str, reply: Any) -> bool:
    """start_flow.lua's reply: True if it created the workflow, False if the id named
    one already; InvalidTaskError if a step's id names a task outside it."""
    if isinstance(reply, int):
        return reply == 1
    raise InvalidTaskError(
        f"workflow {flow_id!r} cannot start: its step id {text(reply)!r} names a task "
        "already: a step of an earlier run of it that outlived the workflow's record (a "
        "dead one kept in the DLQ, or a completed one kept for its result_ttl), or a "
        "task enqueued with that id; retry or cancel a dead one, wait for a completed "
        "one's record to expire, or give the workflow another id")


def status_call(keys: QueueKeys, flow_id: str) -> Call:
    """The flow_status.lua call that reads workflow `flow_id` and its first
    STATUS_STEPS steps."""
    return [keys.flow(check_flow_id(flow_id))], [keys.prefix, flow_id, STATUS_STEPS]


def later_reads(keys: QueueKeys, flow_id: str, reply: list[Any]) -> list[list[tuple[str, ...]]]:
    """The HMGETs that complete flow_status.lua's `reply` when it read only some steps,
    in round trips of STATUS_STEPS: the unread steps, in order, and then the record's
    state once more, read after them. A workflow the record then says is running on
    stage k had a step of k that had not ended when that step was read, as it has in a
    view read in one step (an end is never undone while it runs)."""
    if not reply:
        return []
    stages = int(text(reply[7]))
    sizes = [int(text(n)) for n in reply[8 : 8 + 3 * stages : 3]]
    read = (len(reply) - 8 - 3 * stages) // len(STEP_FIELDS)
    ids = [flow_step_id(flow_id, stage, index)
           for stage, size in enumerate(sizes, start=1) for index in range(1, size + 1)]
    if read == len(ids):
        return []
    reads: list[tuple[str, ...]] = [("HMGET", keys.task(step), *STEP_FIELDS)
                                   for step in ids[read:]]
    reads.append(("HMGET", keys.flow(flow_id), *HEADER_FIELDS))
    return [reads[at : at + STATUS_STEPS] for at in range(0, len(reads), STATUS_STEPS)]


def with_later_reads(reply: list[Any], replies: Sequence[Any]) -> list[Any]:
    """`reply` completed by the `replies` to its `later_reads`: their steps added, and
    the record's header as read last in place of the one read before them ([] when the
    record has gone since: no such workflow). A step whose record has expired, or is of
    another type, reads as NO_STEP."""
    *steps, header = replies
    values = list(reply)
    for found in steps:
        if isinstance(found, Exception) and not (
                isinstance(found, redis.ResponseError) and "WRONGTYPE" in str(found)):
            raise found
        fields = [None] * len(NO_STEP) if isinstance(found, Exception) else found
        values += [value or empty for value, empty in zip(fields, NO_STEP, strict=True)]
    if isinstance(header, Exception):
        raise header
    if header[0] is None:
        return []
    values[: len(HEADER_FIELDS)] = [value or "" for value in header]
    return values


def output_fields(stage: int, size: int) -> list[str]:
    """The workflow record's fields holding what stage `stage` (of `size` steps)
    handed on."""
    return [f"result:{stage}:{i}" for i in range(1, size + 1)]


def position_from(values: Sequence[Any]) -> tuple[str, int] | None:
    """A workflow's state and stage from the values of its record's `state` and `stage`
    fields (stage 1 when it lacks one, as `FlowStatus.from_reply` reads it)."""
    state, stage = values
    if state is None:
        return None
    return text(state), stored_int(None if stage is None else text(stage)) or 1


def output_from(flow_id: str, queue: str, values: Sequence[Any], group: bool) -> Any:
    """A stage's output, decoded from the values of the record's `state` and its
    `output_fields`: its one result, or the list of them. TaskNotFoundError when the
    record has gone (it expired after its state was read), rather than None for every
    result."""
    if values[0] is None:
        raise TaskNotFoundError(f"no workflow {flow_id!r} on queue {queue!r}: its record "
                                "expired (kept TASKQ_COMPLETED_TTL_SECONDS) as its result "
                                "was read")
    decoded = [None if v is None else decode_result(text(v)) for v in values[1:]]
    return decoded if group else decoded[0]


def cancel_flow_call(keys: QueueKeys, flow_id: str, retention: int,
                     completed_ttl_ms: int) -> Call:
    """The cancel_flow.lua call that cancels workflow `flow_id`."""
    return ([keys.ready, keys.delayed, keys.leased, keys.dlq, keys.events, keys.seq,
             keys.epoch],
            [keys.prefix, check_flow_id(flow_id), retention, completed_ttl_ms])


def cancellation_from(flow_id: str, reply: list[Any]) -> FlowCancellation:
    """cancel_flow.lua's reply."""
    return FlowCancellation(flow_id, text(reply[0]), text(reply[1]), int(reply[2]),
                            int(reply[3]))


class start_errors(outage_errors):  # lower case, as redis_errors
    """redis_errors for the start of workflow `flow_id`, sent while `outage` allowed: one
    whose round trip failed may have run, and the error (IncompleteEnqueueError) says
    so and names the flow id, with which a start makes the workflow only if it does
    not exist (start_flow.lua)."""

    __slots__ = ("flow_id",)

    def __init__(self, flow_id: str, outage: Outage) -> None:
        super().__init__("start a workflow", outage)
        self.flow_id = flow_id

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, _tb: object
    ) -> None:
        if error is not None and self.may_have_run(error):
            raise IncompleteEnqueueError(
                f"{self.said(error)}; Redis may have started it all the same: "
                f"enqueue(flow_id={self.flow_id!r}) starts it only if it did not",
                flow_id=self.flow_id) from error
        if error is not None and self.ran_nothing(error):
            raise BrokerError(f"{self.said(error)}; the workflow {self.flow_id!r} was not "
                              "started: it is safe to send again") from error
        super().__exit__(kind, error, _tb)


class Flows:
    """The workflow scripts of one queue, called through its `Broker`."""

    def __init__(self, broker: Broker) -> None:
        self.broker = broker

    def start(self, flow_id: str, stages: Sequence[StageSpec]) -> bool:
        """Create workflow `flow_id` with `stages` (checked by `taskq.canvas`); False,
        with nothing written, if the id names a workflow. Raises InvalidTaskError, with
        nothing written, if a step's task id names a task outside any workflow of that
        id: a handle on the flow would watch nothing."""
        b = self.broker
        keys, args = start_flow_call(b.keys, b.events_retention, b.completed_ttl_ms,
                                     b.max_payload_bytes, flow_id, stages)
        outage = Outage(b.producer_retry)
        b.register_for(outage)
        with start_errors(flow_id, outage):
            return started(flow_id, ride_out(
                partial(b.scripts.start_flow, keys=keys, args=args), outage))

    def status(self, flow_id: str) -> FlowStatus | None:
        """The workflow and each of its steps; None if there is no such workflow (it
        never existed, or it ended and its record expired). The record and the first
        STATUS_STEPS steps are read in one step; a bigger workflow's other steps after
        it, and then its state again (see `later_reads`)."""
        keys, args = status_call(self.broker.keys, flow_id)
        with redis_errors("read a workflow"):
            reply = self.broker.scripts.flow_status(keys=keys, args=args)
            later: list[Any] = []
            for stretch in later_reads(self.broker.keys, flow_id, reply):
                pipe = self.broker.client.pipeline(transaction=False)
                for command in stretch:
                    pipe.execute_command(*command)
                later += pipe.execute(raise_on_error=False)
            # Inside the block: an error a later read met is raised as the BrokerError
            # it is.
            reply = with_later_reads(reply, later) if later else reply
        return FlowStatus.from_reply(flow_id, reply)

    def state(self, flow_id: str) -> str | None:
        """The workflow's state alone (one field: running, completed, failed or
        cancelled); None if there is no such workflow."""
        with redis_errors("read a workflow"):
            value = self.broker.client.hget(self.broker.keys.flow(check_flow_id(flow_id)),
                                            "state")
        return None if value is None else text(value)

    def position(self, flow_id: str) -> tuple[str, int] | None:
        """The workflow's state and the stage it is on, in one read of two fields; None
        if there is no such workflow."""
        with redis_errors("read a workflow"):
            values = self.broker.client.hmget(self.broker.keys.flow(check_flow_id(flow_id)),
                                              ["state", "stage"])
        return position_from(values)

    def output(self, flow_id: str, stage: int, size: int, group: bool) -> Any:
        """What stage `stage` (of `size` steps) handed on, decoded: its one result, or
        the list of them (a `{"taskq_failed": ...}` in the place of a step that did not
        complete, under the "partial" policy)."""
        with redis_errors("read a workflow's result"):
            values = self.broker.client.hmget(self.broker.keys.flow(check_flow_id(flow_id)),
                                              ["state", *output_fields(stage, size)])
        return output_from(flow_id, self.broker.queue, values, group)

    def cancel(self, flow_id: str) -> FlowCancellation:
        """Cancel the workflow: it starts no further stage; waiting, pending, delayed and
        dead steps end cancelled now, running ones are told at their next heartbeat.
        Sent again while Redis cannot answer for a while (see taskq.outages), as
        `Broker.cancel` is: a second cancel of a workflow changes nothing."""
        b = self.broker
        keys, args = cancel_flow_call(b.keys, flow_id, b.events_retention,
                                      b.completed_ttl_ms)
        outage = Outage(b.producer_retry)
        ride_out(partial(b.permit, ("cancel_flow",), "cancel a workflow"), outage)
        with redis_errors("cancel a workflow"):
            reply = ride_out(partial(b.scripts.cancel_flow, keys=keys, args=args), outage)
        return cancellation_from(flow_id, reply)


class AsyncFlows:
    """`Flows` for coroutines: the same scripts, built and read by the same functions,
    called through an `AsyncBroker`, so a coroutine's workflow waits on its own event
    loop rather than on a thread of the loop's pool."""

    def __init__(self, broker: AsyncBroker) -> None:
        self.broker = broker
        client = broker.client
        self._start = client.register_script(source("start_flow"))
        self._status = client.register_script(source("flow_status"))
        self._cancel = client.register_script(source("cancel_flow"))

    async def start(self, flow_id: str, stages: Sequence[StageSpec]) -> bool:
        """`Flows.start`, awaited."""
        b = self.broker
        keys, args = start_flow_call(b.keys, b.events_retention, b.completed_ttl_ms,
                                     b.max_payload_bytes, flow_id, stages)
        outage = Outage(b.producer_retry)
        await b.register_for(outage)
        async with b.calling("start a workflow"):
            with start_errors(flow_id, outage):
                return started(flow_id, await ride_out_async(
                    partial(self._start, keys=keys, args=args), outage))

    async def status(self, flow_id: str) -> FlowStatus | None:
        """`Flows.status`, awaited."""
        keys, args = status_call(self.broker.keys, flow_id)
        async with self.broker.calling("read a workflow"):
            reply = await self._status(keys=keys, args=args)
            later: list[Any] = []
            for stretch in later_reads(self.broker.keys, flow_id, reply):
                pipe = self.broker.client.pipeline(transaction=False)
                for command in stretch:
                    pipe.execute_command(*command)
                later += await pipe.execute(raise_on_error=False)
            reply = with_later_reads(reply, later) if later else reply
        return FlowStatus.from_reply(flow_id, reply)

    async def state(self, flow_id: str) -> str | None:
        """`Flows.state`, awaited."""
        async with self.broker.calling("read a workflow"):
            value = await self.broker.client.hget(
                self.broker.keys.flow(check_flow_id(flow_id)), "state")
        return None if value is None else text(value)

    async def position(self, flow_id: str) -> tuple[str, int] | None:
        """`Flows.position`, awaited."""
        async with self.broker.calling("read a workflow"):
            values = await self.broker.client.hmget(
                self.broker.keys.flow(check_flow_id(flow_id)), ["state", "stage"])
        return position_from(values)

    async def output(self, flow_id: str, stage: int, size: int, group: bool) -> Any:
        """`Flows.output`, awaited."""
        async with self.broker.calling("read a workflow's result"):
            values = await self.broker.client.hmget(
                self.broker.keys.flow(check_flow_id(flow_id)),
                ["state", *output_fields(stage, size)])
        return output_from(flow_id, self.broker.queue, values, group)

    async def cancel(self, flow_id: str) -> FlowCancellation:
        """`Flows.cancel`, awaited."""
        b = self.broker
        keys, args = cancel_flow_call(b.keys, flow_id, b.events_retention,
                                      b.completed_ttl_ms)
        outage = Outage(b.producer_retry)
        await ride_out_async(partial(b.permit, ("cancel_flow",), "cancel a workflow"),
                             outage)
        async with b.calling("cancel a workflow"):
            reply = await ride_out_async(partial(self._cancel, keys=keys, args=args), outage)
        return cancellation_from(flow_id, reply)
