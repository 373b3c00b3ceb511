"""Workflows on the real broker and the real Redis, driven by Hypothesis against a model.

Each rule is one broker operation or the passing of real time: starting a workflow of a
drawn shape (1-3 stages, each one step or a group of 1-3, policy fail or partial, each
step's max_retries 0 or 1), leasing (a 50 ms lease that runs out during the run, or a
long one), acking, failing and ack_cancelled with the current token or a stale one,
reaping once the brief leases ran out, promoting due retries, reviving a dead step,
cancelling one step in any state, and cancelling a whole workflow. After every step
Redis must hold exactly what the model says: where each step is, its state, retries,
token, result and error type (T1 on the way); each workflow's state and stage (as
flow_status reads it too), each step's `end` (recorded once, whatever runs or cancels
it again) and what it hands on; and each started step's payload must begin with what
the stage before handed on (its results in order, failure markers in the place of the
steps that did not complete, under partial). The queue's payload limit is small, so a
stage handed a few failure markers would take a step of it past the limit: it must not
start, and its workflow fails at it. A stale holder's call must change nothing.
W1 is checked on the event log as it grows: a step is triggered at most once, only
once every step of the stage before has ended, never once its workflow has ended, and
exactly when the model starts its stage; every run's log must pass tracecheck.
"""

from __future__ import annotations

import json
import math
import time
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import redis
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from helpers import PLACE_STATE, dump, leased_token, reaped_token, text, view
from taskq.broker import Broker, FailResult
from taskq.flows import Flows, StageSpec
from taskq.results import Failure
from taskq.tools.tracecheck import TERMINAL, read_log, validate

BRIEF = 0.05  # a lease that runs out during the run
LONG = 30.0  # a lease that does not
FAST = {"backoff_base": 0.001, "backoff_max": 0.002}
MARGIN = 0.015  # client clock vs Redis TIME, and ms rounding
STATE_OF = {**PLACE_STATE, "completed": "completed", "cancelled": "cancelled",
            "waiting": "waiting"}
NOWHERE = ("completed", "cancelled", "waiting")  # places that are no structure
WHO = ("current", "any", "taken over")  # which holder acts
CANCEL_PICKS = ("waiting", "ready", "delayed", "leased", "dlq", "completed", "cancelled")
MAX_FLOWS = 6
# The queue's payload limit: three failure markers handed on go past it, two do not.
MAX_PAYLOAD = 260
TOO_LARGE = "taskq.errors.PayloadTooLargeError"
# What ack.lua writes on the record of a run cut off after its effect.
CUT = ("taskq.errors.NoResultError", "its handler was cut off at a worker's shutdown "
       "after its effect: it completed with no result to hand on")
BOOM = Failure("ValueError", "boom", "Traceback (most recent call last):\n  ...\nValueError: boom")
# What the runs did, summed over every example, so a test can show it covered them.
SEEN: Counter[str] = Counter()
PATHS = {
    "triggered", "triggered a marker", "stage ended before it started", "flow completed",
    "flow failed", "flow cancelled", "end counted once", "stale ack", "stale fail",
    "stale ack_cancelled", "reaped to dead", "reaped to delayed", "reaped to cancelled",
    "revived", "cancel of waiting", "cancel of ready", "cancel of delayed",
    "cancel of leased", "cancel of dlq", "cancel left alone", "flow cancel told a holder",
    "flow cancel left alone", "ack_cancelled", "ack after cancel requested",
    "fail to cancelled", "fail to retry", "fail to dead", "promoted",
    "stale ack over a rerun", "start again", "input over the payload limit", "ack cut",
}  # fmt: skip


@dataclass(frozen=True)
class StageShape:
    """One drawn stage: its steps' max_retries, whether each has an argument of its own,
    whether it is a group, and its policy."""

    max_retries: tuple[int, ...]
    own_arg: tuple[bool, ...]
    group: bool
    policy: str

    @property
    def size(self) -> int:
        return len(self.max_retries)


def stages_of(size: int, group: bool) -> st.SearchStrategy[StageShape]:
    return st.builds(StageShape, st.lists(st.integers(0, 1), min_size=size,
                                          max_size=size).map(tuple),
                     st.lists(st.booleans(), min_size=size, max_size=size).map(tuple),
                     st.just(group), st.sampled_from(["fail", "partial"]))


STAGES = st.one_of(stages_of(1, False), st.integers(1, 3).flatmap(lambda n: stages_of(n, True)))
SHAPES = st.lists(STAGES, min_size=1, max_size=3)


@dataclass
class Step:
    """The model's view of one step. `expires`/`due` are monotonic times after which the
    lease has surely run out / the retry is surely due (inf: not during this run)."""

    flow: str
    stage: int
    index: int
    place: str
    max_retries: int
    own_args: list[Any]
    payload: str  # as the workflow was started with it
    retries: int = 0
    token: int = 0
    worker: str = ""
    expires: float = math.inf
    due: float = 0.0
    result: str | None = None  # what the record keeps: set by the current ack only
    error_type: str = ""
    error_message: str = ""
    cancel_requested: bool = False
    stamp: int = 0  # its place in the ready list: lower is nearer the front
    handed: list[Any] = field(default_factory=list)  # [input] once its stage started


@dataclass
class Flow:
    """The model's view of one workflow: its shape, state and current stage, each step's
    recorded end and what it hands on, and why it failed."""

    shape: list[StageShape]
    state: str = "running"
    stage: int = 1
    ends: dict[tuple[int, int], str] = field(default_factory=dict)
    handed: dict[tuple[int, int], Any] = field(default_factory=dict)
    upstream: str = ""
    error_type: str = ""
    why: str = ""  # how its error message begins
    ended_seq: int | None = None  # the log's last seq when the model saw it end


def step_id(flow_id: str, stage: int, index: int) -> str:
    return f"{flow_id}.{stage}.{index}"


def reap_message(worker: str, retries: int, dead: bool) -> str:
    """The error reap.lua keeps on a step whose lease ran out."""
    said = (f"lease expired while held by worker {worker} (attempt {retries + 1}): the "
            "worker died, hung or was paused past its lease")
    return said + ("; no retries left, so the handler may be what kills it" if dead else "")


class FlowMachine(RuleBasedStateMachine):
    client: redis.Redis

    def __init__(self) -> None:
        super().__init__()
        self.broker = Broker(self.client, f"wf-{uuid.uuid4().hex[:10]}",
                             max_payload_bytes=MAX_PAYLOAD)
        self.api = Flows(self.broker)
        self.flows: dict[str, Flow] = {}
        self.steps: dict[str, Step] = {}
        self.issued: list[tuple[str, int]] = []  # every (step, token) a lease handed out
        self.events = 0  # rows the event log must hold (E1: one per state change)
        self.backs = 0  # stamps for the back of the ready list, counting up
        self.triggered: list[str] = []  # the steps the model started, in order
        # The log as the invariant has read it so far (W1).
        self.log_seq = 0
        self.log_triggered: list[str] = []
        self.log_ended: set[str] = set()

    # -- helpers ----------------------------------------------------------------------

    def in_place(self, place: str) -> list[str]:
        return sorted(t for t, m in self.steps.items() if m.place == place)

    def to_ready(self, m: Step) -> None:
        self.backs += 1
        m.stamp, m.place = self.backs, "ready"

    def next_lease(self) -> str | None:
        return min(self.in_place("ready"), key=lambda t: self.steps[t].stamp, default=None)

    def holder(self, pick: int, who: str) -> tuple[str, int]:
        """The current holder of a leased step; any holder the run has seen (stale ones
        among them: reaped, finished, or holding a step its workflow cancelled); or one
        whose step another holder has leased since, whose ack must not count its end."""
        held = self.in_place("leased")
        if who == "current" and held:
            task_id = held[pick % len(held)]
            return task_id, self.steps[task_id].token
        taken_over = [(t, token) for t, token in self.issued if t in held and
                      token < self.steps[t].token]
        if who == "taken over" and taken_over:
            return taken_over[pick % len(taken_over)]
        return self.issued[pick % len(self.issued)]

    def holds(self, task_id: str, token: int) -> bool:
        m = self.steps[task_id]
        return m.place == "leased" and m.token == token

    def snapshot(self) -> dict[str, object]:
        """Every key of this queue and its content; lease request ids expire on their
        own."""
        return {k: v for k, v in dump(self.client, self.broker.keys.prefix + "*").items()
                if ":lreq:" not in k}

    def unchanged_by(self, call: Callable[[], object], refused: object, what: str) -> None:
        """`call` must answer `refused` and write nothing (a stale holder, a step or
        workflow that has ended)."""
        before = self.snapshot()
        assert call() == refused, what
        assert self.snapshot() == before, f"{what} changed something"
        SEEN[what.split(" of ", maxsplit=1)[0]] += 1

    @staticmethod
    def wait_until(moment: float) -> None:
        if math.isfinite(moment):
            time.sleep(max(0.0, moment - time.monotonic()))

    # -- the workflow's accounting, as _flow.lua must do it ----------------------------

    def step_ended(self, m: Step, how: str, result: Any = None) -> None:
        """Step `m` ended `how`: its first end is recorded, a later one changes nothing."""
        f = self.flows[m.flow]
        at = (m.stage, m.index)
        if at in f.ends:
            SEEN["end counted once"] += 1
            return
        f.ends[at] = how
        f.handed[at] = result if how == "completed" else {"taskq_failed": {
            "task_id": step_id(m.flow, *at), "state": how, "error_type": m.error_type,
            "error": m.error_message}}
        self.advance(m.flow)

    def advance(self, flow_id: str) -> None:
        """While the running workflow's current stage has ended: fail it, end it, or
        start the next stage with what this one hands on."""
        f = self.flows[flow_id]
        while f.state == "running":
            k = f.stage
            shape = f.shape[k - 1]
            places = [(k, i) for i in range(1, shape.size + 1)]
            if any(at not in f.ends for at in places):
                return
            failed = [at for at in places if f.ends[at] != "completed"]
            if failed and not (shape.group and shape.policy == "partial"):
                f.upstream = step_id(flow_id, *failed[0])
                f.error_type = self.steps[f.upstream].error_type or "taskq.Cancelled"
                f.why = f"{len(failed)} of {shape.size} steps of stage {k} did not complete: "
                self.skip_waiting(flow_id, f.error_type)
                f.state = "failed"
                SEEN["flow failed"] += 1
                return
            if k == len(f.shape):
                f.state = "completed"
                SEEN["flow completed"] += 1
                return
            output = [f.handed[at] for at in places] if shape.group else f.handed[places[0]]
            f.stage = k + 1
            over = self.over_the_limit(flow_id, k, places, shape.group)
            if over is not None:
                f.upstream, f.error_type = over, TOO_LARGE
                f.why = f"the input of stage {k + 1}, what stage {k} handed on ("
                self.skip_waiting(flow_id, TOO_LARGE)
                f.state = "failed"
                SEEN["input over the payload limit"] += 1
                return
            SEEN["triggered a marker"] += bool(failed)
            for i in range(1, f.shape[k].size + 1):
                m = self.steps[step_id(flow_id, k + 1, i)]
                if m.place == "waiting":
                    m.handed = [output]
                    self.to_ready(m)
                    self.events += 1
                    self.triggered.append(step_id(flow_id, k + 1, i))
                    SEEN["triggered"] += 1
            if all((k + 1, i) in f.ends for i in range(1, f.shape[k].size + 1)):
                SEEN["stage ended before it started"] += 1

    def skip_waiting(self, flow_id: str, error_type: str) -> None:
        """The failed workflow's waiting steps end cancelled, naming why."""
        for m in self.steps.values():
            if m.flow == flow_id and m.place == "waiting":
                m.place, m.error_type = "cancelled", error_type
                self.events += 1

    def over_the_limit(self, flow_id: str, k: int, places: list[tuple[int, int]],
                       group: bool) -> str | None:
        """The first waiting step of stage k + 1 whose payload, once it is handed what
        stage k hands on, is over the queue's limit; None if none is. Measured on the
        texts the record keeps (checked against the model by the invariant), since
        that is what _flow.lua pastes into the payload."""
        kept = self.client.hmget(self.broker.keys.flow(flow_id),
                                 [f"result:{stage}:{i}" for stage, i in places])
        texts = [text(v) for v in kept]
        handed = f"[{','.join(texts)}]" if group else texts[0]
        for i in range(1, self.flows[flow_id].shape[k].size + 1):
            m = self.steps[step_id(flow_id, k + 1, i)]
            if m.place == "waiting" and len(m.payload) + len(handed) + bool(m.own_args) \
                    > MAX_PAYLOAD:
                return step_id(flow_id, k + 1, i)
        return None

    def to_cancelled(self, m: Step) -> None:
        m.place, m.expires, m.due = "cancelled", math.inf, math.inf
        self.step_ended(m, "cancelled")

    # -- producer ---------------------------------------------------------------------

    @initialize(shape=SHAPES)
    def first_flow(self, shape: list[StageShape]) -> None:
        self.start(shape)

    @rule(shape=SHAPES)
    def start(self, shape: list[StageShape]) -> None:
        """Start a workflow of `shape`; once there are MAX_FLOWS, start one under a taken
        id instead, which must write nothing."""
        if len(self.flows) >= MAX_FLOWS:
            spec = StageSpec((("job", '{"args":[],"kwargs":{}}', 0, "", 5, ""),),
                             group=False, policy="fail")
            self.unchanged_by(lambda: self.api.start("f1", [spec]), False, "start again of f1")
            return
        flow_id = f"f{len(self.flows) + 1}"
        specs = []
        for k, stage in enumerate(shape, start=1):
            steps = []
            for i, (retries, own) in enumerate(zip(stage.max_retries, stage.own_arg,
                                                   strict=True), start=1):
                own_args = [f"own {k}.{i}"] if own else []
                payload = json.dumps({"args": own_args, "kwargs": {}}, separators=(",", ":"))
                steps.append(("job", payload, retries, "", 5, ""))
                m = self.steps[step_id(flow_id, k, i)] = Step(flow_id, k, i, "waiting",
                                                               retries, own_args, payload)
                if k == 1:
                    self.to_ready(m)
            specs.append(StageSpec(tuple(steps), group=stage.group, policy=stage.policy))
        assert self.api.start(flow_id, specs)
        self.flows[flow_id] = Flow(shape)
        self.events += len(self.in_flow(flow_id))

    def in_flow(self, flow_id: str) -> list[str]:
        """The workflow's steps, stage by stage."""
        return sorted((t for t, m in self.steps.items() if m.flow == flow_id),
                      key=lambda t: (self.steps[t].stage, self.steps[t].index))

    # -- workers ----------------------------------------------------------------------

    @rule(worker=st.sampled_from(["w1", "w2"]), brief=st.booleans())
    def lease(self, worker: str, brief: bool) -> None:
        expected = self.next_lease()
        batch = self.broker.lease_many(worker, BRIEF if brief else LONG, 1)
        if expected is None:
            assert batch.tasks == []
            return
        (got,) = batch.tasks
        assert got.task_id == expected  # the front of ready; waiting steps never
        m = self.steps[expected]
        m.token = leased_token(m.token, got.token)
        assert (got.retries, got.max_retries) == (m.retries, m.max_retries)
        m.place, m.worker = "leased", worker
        m.expires = time.monotonic() + BRIEF + MARGIN if brief else math.inf
        self.issued.append((got.task_id, got.token))
        self.events += 1

    @rule(outcome=st.sampled_from(["result", "none", "raise"]))
    def run(self, outcome: str) -> None:
        """A worker's pass: due retries promoted, the step at the front of ready leased
        and settled at once (completed with or without a result, or failed to be retried);
        the path by which workflows get through their stages, and by which a step runs
        again while its old holder lives on."""
        self.promote_once_retries_are_due()
        before = len(self.issued)
        self.lease("w3", brief=False)
        if len(self.issued) == before:
            return
        if outcome == "raise":
            self.fail(before, "any", dead=False)
        else:
            self.ack(before, "any", keep=outcome == "result")

    @precondition(lambda self: self.issued)
    @rule(pick=st.integers(0, 10**6), who=st.sampled_from(WHO), keep=st.booleans())
    def ack(self, pick: int, who: str, keep: bool) -> None:
        task_id, token = self.holder(pick, who)
        result = json.dumps({"by": task_id, "token": token}) if keep else None
        if not self.holds(task_id, token):
            SEEN["stale ack over a rerun"] += self.steps[task_id].place == "leased"
            self.unchanged_by(lambda: self.broker.ack(task_id, token, result), False,
                              f"stale ack of {task_id}")
            return
        m = self.steps[task_id]
        assert self.broker.ack(task_id, token, result)
        SEEN["ack after cancel requested"] += m.cancel_requested
        m.place, m.result = "completed", result
        self.events += 1
        self.step_ended(m, "completed", None if result is None else json.loads(result))

    @precondition(lambda self: self.issued)
    @rule(pick=st.integers(0, 10**6), who=st.sampled_from(WHO))
    def ack_cut(self, pick: int, who: str) -> None:
        """A run cut off at shutdown after its effect: acked with no result, and counted
        by its stage as a step that did not complete (it has nothing to hand on)."""
        task_id, token = self.holder(pick, who)
        if not self.holds(task_id, token):
            self.unchanged_by(lambda: self.broker.ack_cut(task_id, token), False,
                              f"stale ack_cut of {task_id}")
            return
        m = self.steps[task_id]
        assert self.broker.ack_cut(task_id, token)
        SEEN["ack cut"] += 1
        m.place, m.result = "completed", None
        m.error_type, m.error_message = CUT
        self.events += 1
        self.step_ended(m, "cut")

    @precondition(lambda self: self.issued)
    @rule(pick=st.integers(0, 10**6), who=st.sampled_from(WHO), dead=st.booleans())
    def fail(self, pick: int, who: str, dead: bool) -> None:
        task_id, token = self.holder(pick, who)
        send = lambda: self.broker.fail(task_id, token, BOOM, **FAST, dead=dead)  # noqa: E731
        if not self.holds(task_id, token):
            self.unchanged_by(lambda: send().status, "stale", f"stale fail of {task_id}")
            return
        m = self.steps[task_id]
        got = send()
        self.events += 1
        m.error_type, m.error_message = BOOM.error_type, BOOM.message
        if m.cancel_requested:
            assert got == FailResult("cancelled", m.retries, 0.0)
            SEEN["fail to cancelled"] += 1
            self.to_cancelled(m)
        elif dead or m.retries >= m.max_retries:
            assert (got.status, got.retries) == ("dead", m.retries)
            SEEN["fail to dead"] += 1
            m.place = "dlq"
            self.step_ended(m, "dead")
        else:
            assert (got.status, got.retries) == ("retry", m.retries + 1)
            SEEN["fail to retry"] += 1
            m.retries += 1
            m.place, m.due = "delayed", time.monotonic() + FAST["backoff_max"] + MARGIN

    @precondition(lambda self: self.issued)
    @rule(pick=st.integers(0, 10**6), who=st.sampled_from(WHO))
    def ack_cancelled(self, pick: int, who: str) -> None:
        """Only the current holder of a step whose cancel was asked for ends it so."""
        task_id, token = self.holder(pick, who)
        m = self.steps[task_id]
        if not (self.holds(task_id, token) and m.cancel_requested):
            self.unchanged_by(lambda: self.broker.ack_cancelled(task_id, token), False,
                              f"stale ack_cancelled of {task_id}")
            return
        assert self.broker.ack_cancelled(task_id, token)
        SEEN["ack_cancelled"] += 1
        self.events += 1
        self.to_cancelled(m)

    # -- maintenance and time ---------------------------------------------------------

    @rule()
    def reap_after_brief_leases_run_out(self) -> None:
        brief = [t for t in self.in_place("leased") if math.isfinite(self.steps[t].expires)]
        self.wait_until(max((self.steps[t].expires for t in brief), default=0.0))
        reaped = self.broker.reap(limit=100, **FAST)
        assert sorted(t for t, _ in reaped) == brief
        # In the order reap.lua took them: a step's end can start its next stage.
        for task_id, outcome in reaped:
            m = self.steps[task_id]
            m.token = reaped_token(self.broker, task_id, m.token)  # stale at once
            m.expires = math.inf
            self.events += 1
            if m.cancel_requested:
                assert outcome == "cancelled"
                self.to_cancelled(m)
            elif m.retries >= m.max_retries:
                assert outcome == "dead"
                m.error_type = "taskq.LeaseExpired"
                m.error_message = reap_message(m.worker, m.retries, dead=True)
                m.place = "dlq"
                self.step_ended(m, "dead")
            else:
                assert outcome == "delayed"
                m.error_type = "taskq.LeaseExpired"
                m.error_message = reap_message(m.worker, m.retries, dead=False)
                m.retries += 1
                m.place, m.due = "delayed", time.monotonic() + FAST["backoff_max"] + MARGIN
            SEEN[f"reaped to {outcome}"] += 1

    @rule()
    def promote_once_retries_are_due(self) -> None:
        delayed = self.in_place("delayed")
        self.wait_until(max((self.steps[t].due for t in delayed), default=0.0))
        promoted = self.broker.promote(limit=100)
        assert sorted(promoted) == delayed
        for task_id in promoted:  # in the order they join the back of ready
            self.to_ready(self.steps[task_id])
        SEEN["promoted"] += len(promoted)
        self.events += len(promoted)

    @rule(pick=st.integers(0, 10**6))
    def retry_dead(self, pick: int) -> None:
        """Revive a dead step: it runs again, but its end was recorded at its death."""
        dead = self.in_place("dlq")
        task_id = dead[pick % len(dead)] if dead else sorted(self.steps)[pick % len(self.steps)]
        assert self.broker.retry_dead(task_id) == bool(dead)
        if dead:
            m = self.steps[task_id]
            m.retries, m.due = 0, 0.0
            self.to_ready(m)
            self.events += 1
            SEEN["revived"] += 1

    # -- cancellation -----------------------------------------------------------------

    @rule(pick=st.integers(0, 10**6), place=st.sampled_from(CANCEL_PICKS))
    def cancel(self, pick: int, place: str) -> None:
        """cancel.lua on one step in `place` (any step when none is there)."""
        choices = self.in_place(place) or sorted(self.steps)
        task_id = choices[pick % len(choices)]
        m = self.steps[task_id]
        if m.place in ("completed", "cancelled") or (m.place == "leased" and
                                                     m.cancel_requested):
            self.unchanged_by(lambda: self.broker.cancel(task_id).outcome, "unchanged",
                              f"cancel left alone of {task_id}")
            return
        got = self.broker.cancel(task_id)
        assert got.state == STATE_OF[m.place]
        SEEN[f"cancel of {m.place}"] += 1
        self.events += 1
        if m.place == "leased":
            assert got.outcome == "requested"
            m.cancel_requested = True
        else:
            assert got.outcome == "cancelled"
            self.to_cancelled(m)

    def cancellable(self) -> list[str]:
        """Running workflows that got somewhere (a step leased or ended), so that a cancel
        meets running and ended steps, not only pending ones; else the ended ones."""
        moved = [flow_id for flow_id, f in sorted(self.flows.items()) if f.state == "running"
                 and any(self.steps[t].token or self.steps[t].place in NOWHERE[:2]
                         for t in self.in_flow(flow_id))]
        return moved or [flow_id for flow_id, f in sorted(self.flows.items())
                         if f.state != "running"]

    @precondition(lambda self: self.cancellable())
    @rule(pick=st.integers(0, 10**6))
    def cancel_flow(self, pick: int) -> None:
        """cancel_flow.lua: the workflow is cancelled first, so no step ending now starts
        a stage; every step not running ends cancelled, every running one is told."""
        choices = self.cancellable()
        flow_id = choices[pick % len(choices)]
        f = self.flows[flow_id]
        if f.state != "running":
            self.unchanged_by(lambda: self.api.cancel(flow_id).outcome, "unchanged",
                              f"flow cancel left alone of {flow_id}")
            return
        got = self.api.cancel(flow_id)
        f.state = "cancelled"
        SEEN["flow cancelled"] += 1
        ended = told = 0
        for task_id in self.in_flow(flow_id):
            m = self.steps[task_id]
            if m.place == "leased" and not m.cancel_requested:
                m.cancel_requested = True
                told += 1
            elif m.place in ("waiting", "ready", "delayed", "dlq"):
                ended += 1
                self.to_cancelled(m)
            else:
                continue
            self.events += 1
        assert (got.outcome, got.state, got.ended, got.told) == ("cancelled", "running",
                                                                 ended, told)
        SEEN["flow cancel told a holder"] += told > 0

    # -- the comparison ---------------------------------------------------------------

    @invariant()
    def redis_holds_exactly_what_the_model_says(self) -> None:
        now = view(self.client, self.broker.keys)
        assert now.violations() == []  # T1
        assert set(now.records) == set(self.steps)
        for task_id, m in self.steps.items():
            record = now.records[task_id]
            assert now.where(task_id) == ([] if m.place in NOWHERE else [m.place]), task_id
            assert record["state"] == STATE_OF[m.place], task_id
            assert (int(record["retries"]), int(record["fencing_token"])) == (m.retries,
                                                                              m.token)
            assert record.get("worker", "") == m.worker, task_id
            assert ("cancel_requested" in record) == m.cancel_requested, task_id
            assert record.get("result") == m.result, task_id  # only the current ack's
            assert record.get("error_type", "") == m.error_type, task_id
            # A started step's first argument is what the stage before handed on.
            assert json.loads(record["payload"]) == {"args": m.handed + m.own_args,
                                                     "kwargs": {}}, task_id
        assert int(self.client.get(self.broker.keys.seq) or 0) == self.events
        for flow_id in self.flows:
            self.flow_agrees(flow_id)
        self.log_keeps_w1()

    def flow_agrees(self, flow_id: str) -> None:
        f = self.flows[flow_id]
        record = {text(k): text(v) for k, v in
                  self.client.hgetall(self.broker.keys.flow(flow_id)).items()}
        assert (record["state"], int(record["stage"])) == (f.state, f.stage), flow_id
        ends = {k: v for k, v in record.items() if k.startswith("end:")}
        assert ends == {f"end:{k}:{i}": how for (k, i), how in f.ends.items()}, flow_id
        handed = {k: json.loads(v) for k, v in record.items() if k.startswith("result:")}
        assert handed == {f"result:{k}:{i}": v for (k, i), v in f.handed.items()}, flow_id
        for k in range(1, len(f.shape) + 1):
            mine = [how for (stage, _), how in f.ends.items() if stage == k]
            assert int(record.get(f"ended:{k}", 0)) == len(mine), (flow_id, k)
            assert int(record.get(f"failed:{k}", 0)) == sum(h != "completed" for h in mine)
        assert (record.get("upstream", ""), record.get("error_type", "")) == (
            f.upstream, f.error_type), flow_id
        assert record.get("error_message", "").startswith(f.why), flow_id
        status = self.api.status(flow_id)
        assert status is not None
        assert (status.state, status.stage) == (f.state, f.stage)
        assert [s.state for s in status.steps] == [
            STATE_OF[self.steps[t].place] for t in self.in_flow(flow_id)]

    def log_keeps_w1(self) -> None:
        """W1 on the events since the last step: each step triggered at most once, only
        once every step of the stage before ended, never after its workflow ended; and
        exactly the steps the model started, in order."""
        rows = read_log(self.client, self.broker.keys.events)
        for seq, fields in (r for r in rows if r[0] > self.log_seq):
            task_id = fields.get("task", "")
            if fields.get("type") == "triggered":
                f = self.flows[fields["flow"]]
                assert task_id not in self.log_triggered, f"{task_id} triggered twice"
                assert f.ended_seq is None, f"{task_id} triggered after its flow ended"
                flow_id, stage, _ = task_id.rsplit(".", 2)
                before = range(1, f.shape[int(stage) - 2].size + 1) if int(stage) > 1 else ()
                assert before and all(step_id(flow_id, int(stage) - 1, i) in self.log_ended
                                      for i in before), f"{task_id} triggered too soon"
                self.log_triggered.append(task_id)
            if fields.get("state") in TERMINAL:
                self.log_ended.add(task_id)
            self.log_seq = seq
        assert self.log_triggered == self.triggered
        for f in self.flows.values():
            if f.state != "running" and f.ended_seq is None:
                f.ended_seq = self.log_seq

    def teardown(self) -> None:
        report = validate(read_log(self.client, self.broker.keys.events),
                          require_terminal=False)
        assert report.ok, report.violations[:5]
        p = report.priority
        assert (p.checked, p.unchecked, p.passed_over) == (p.leases, {}, []), p


def machine_on(client: redis.Redis) -> type[FlowMachine]:
    return type("Machine", (FlowMachine,), {"client": client})


def test_workflows_on_the_real_broker_move_exactly_as_the_model(client: redis.Redis) -> None:
    run_state_machine_as_test(
        machine_on(client),
        settings=settings(max_examples=40, stateful_step_count=40, deadline=None,
                          database=None, suppress_health_check=[HealthCheck.too_slow]),
    )


def stage(max_retries: tuple[int, ...], group: bool = True, policy: str = "fail",
          own: bool = False) -> StageShape:
    return StageShape(max_retries, (own,) * len(max_retries), group, policy)


def test_every_path_of_workflows_is_compared_with_the_model(client: redis.Redis) -> None:
    """A fixed run through the same rules, so that each path is checked in every run of
    the suite, whatever Hypothesis happens to draw."""
    SEEN.clear()
    m = machine_on(client)()
    step = Steps(m)
    for path in (a_partial_group_rerun_then_a_cancel, a_stage_ended_before_it_started,
                 a_flow_cancelled_while_a_step_runs, an_input_over_the_payload_limit):
        path(m, step)
    # f5: its one step cancelled while it is ready; then every id is taken.
    while len(m.flows) < MAX_FLOWS:
        step(m.start, [stage((0,), False)])
    step(m.cancel, m.in_place("ready").index("f5.1.1"), "ready")
    step(m.start, [stage((0,), False)])
    m.teardown()
    assert [m.flows[f].state for f in ("f1", "f2", "f3", "f4", "f5")] == [
        "failed", "completed", "cancelled", "failed", "failed"]
    assert set(+SEEN) >= PATHS, PATHS - set(+SEEN)


def a_partial_group_rerun_then_a_cancel(m: FlowMachine, step: Steps) -> None:
    """f1: a partial group: a member reaped and run again while its old holder lives on,
    one dead, revived and completed (its end was recorded at its death); then a step
    cancelled while its brief lease runs: the flow fails and its last step is skipped."""
    step(m.start, [stage((1, 0, 0), policy="partial"), stage((0,), False, own=True),
                   stage((0,), False)])
    step(m.lease, "w1", True)
    step(m.lease, "w1", False)
    step(m.lease, "w2", False)
    step(m.fail, holder(m, "f1.1.2"), "any", True)
    step(m.ack, holder(m, "f1.1.2"), "any", True)  # stale: it died
    step(m.reap_after_brief_leases_run_out)
    reaped = holder(m, "f1.1.1")
    step(m.fail, reaped, "any", False)  # stale: reaped
    step(m.promote_once_retries_are_due)
    step(m.retry_dead, 0)
    step(m.lease, "w3", False)  # f1.1.1 again
    for stale in (m.ack, m.fail):  # the reaped holder, while the rerun holds it
        step(stale, reaped, "any", True)
    step(m.ack, holder(m, "f1.1.1"), "any", True)
    step(m.run, "none")  # the revived f1.1.2
    step(m.ack, holder(m, "f1.1.3"), "any", True)  # starts f1.2.1 with a marker
    step(m.lease, "w1", True)
    step(m.cancel, m.in_place("leased").index("f1.2.1"), "leased")
    step(m.reap_after_brief_leases_run_out)


def a_stage_ended_before_it_started(m: FlowMachine, step: Steps) -> None:
    """f2: both steps of stage 2 cancelled while they wait, so stage 1's end starts
    stage 3 in the same call, with two failure markers; its step completes the flow."""
    step(m.start, [stage((0, 0), policy="partial"), stage((0, 0), policy="partial"),
                   stage((0,), False, own=True)])
    for task_id in ("f2.2.1", "f2.2.2"):
        step(m.cancel, m.in_place("waiting").index(task_id), "waiting")
    step(m.lease, "w1", False)
    step(m.lease, "w2", False)
    for task_id in ("f2.1.1", "f2.1.2"):
        step(m.cancel, m.in_place("leased").index(task_id), "leased")
    step(m.ack_cancelled, holder(m, "f2.1.1"), "any")
    step(m.ack_cancelled, holder(m, "f2.1.1"), "any")  # stale: it ended
    step(m.ack, holder(m, "f2.1.2"), "any", True)  # it finished before it heard
    step(m.run, "result")
    step(m.cancel, m.in_place("completed").index("f2.3.1"), "completed")


def a_flow_cancelled_while_a_step_runs(m: FlowMachine, step: Steps) -> None:
    """f3: a step cancelled while its retry waits, one cancelled in the DLQ, then the
    flow cancelled while its last step runs; that step's failure ends it cancelled."""
    step(m.start, [stage((1, 0, 0)), stage((0,), False)])
    step(m.lease, "w1", False)
    step(m.fail, holder(m, "f3.1.1"), "any", False)
    step(m.cancel, m.in_place("delayed").index("f3.1.1"), "delayed")
    step(m.lease, "w1", True)
    step(m.reap_after_brief_leases_run_out)
    step(m.cancel, m.in_place("dlq").index("f3.1.2"), "dlq")
    step(m.lease, "w2", False)
    step(m.cancel_flow, m.cancellable().index("f3"))
    step(m.fail, holder(m, "f3.1.3"), "any", True)
    step(m.cancel_flow, 0)  # every flow has ended: left alone


def an_input_over_the_payload_limit(m: FlowMachine, step: Steps) -> None:
    """f4: a partial group whose first step is cut off after its effect and whose other
    two die hands three failure markers on, which would take stage 2's step past the
    payload limit: stage 2 never starts, and the flow fails at it, its last stage
    skipped too."""
    step(m.start, [stage((0, 0, 0), policy="partial"), stage((0,), False, own=True),
                   stage((0,), False)])
    step(m.lease, "w1", False)
    step(m.ack_cut, holder(m, "f4.1.1"), "any")
    for task_id in ("f4.1.2", "f4.1.3"):
        step(m.lease, "w1", False)
        step(m.fail, holder(m, task_id), "any", True)
    assert m.flows["f4"].upstream == "f4.2.1"
    assert [m.steps[t].place for t in ("f4.2.1", "f4.3.1")] == ["cancelled", "cancelled"]


def holder(m: FlowMachine, task_id: str) -> int:
    """Where the last lease of `task_id` is in the machine's holders."""
    return max(n for n, (t, _) in enumerate(m.issued) if t == task_id)


class Steps:
    """Runs one rule of a machine, then its invariant, as Hypothesis would."""

    def __init__(self, machine: FlowMachine) -> None:
        self.machine = machine

    def __call__(self, rule: Callable[..., None], *args: object) -> None:
        rule(*args)
        self.machine.redis_holds_exactly_what_the_model_says()
