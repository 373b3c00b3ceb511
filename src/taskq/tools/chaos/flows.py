"""The chaos run's workflows: chains of CHAIN_LENGTH steps and chords of CHORD_SIZE
members and a callback, started among the run's tasks and run through every fault; at
the end each must have completed with the value its shape implies, each later stage
triggered exactly once, and each step's charge applied once."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from taskq.app import App
from taskq.canvas import Chain, chain, group
from taskq.context import current_task
from taskq.errors import BrokerError
from taskq.keys import flow_step_id
from taskq.settings import Settings, Simulation
from taskq.tools.ledger import Ledger

CHAIN_LENGTH = 5
CHORD_SIZE = 20
FLOW_STEP = "chaos.flow_step"
FLOW_CALLBACK = "chaos.flow_callback"
# One workflow per this many tasks of the run, half chains and half chords.
TASKS_PER_FLOW = 200


def flow_tasks(app: App, simulation: Simulation) -> None:
    """Register the workflows' two tasks on `app`: a step adds one to its input, a
    callback sums its members' results; each works WORK_SECONDS and charges the ledger
    (keyed by its task id) in an effect block, as the simulated task does."""
    lock = threading.Lock()
    ledgers: list[Ledger] = []

    def charge() -> None:
        with lock:
            if not ledgers:
                ledgers.append(Ledger(simulation.ledger_path, simulation.ledger_guard))
        task = current_task()
        time.sleep(simulation.work_seconds)
        if task.cancelled:
            return
        with task.effect():
            ledgers[0].charge(task.task_id, task.token, "flows", 1)

    @app.task(FLOW_STEP)
    def flow_step(value: int = 0) -> int:
        charge()
        return value + 1

    @app.task(FLOW_CALLBACK)
    def flow_callback(values: list[int]) -> int:
        charge()
        return sum(values)


def flow_ids(tasks: int) -> list[str]:
    """The run's workflow ids: chains and chords in turn, one per TASKS_PER_FLOW tasks
    (two at least)."""
    count = max(2, tasks // TASKS_PER_FLOW)
    return [f"{'chain' if n % 2 == 0 else 'chord'}-{n:05d}" for n in range(count)]


def is_flow_step(task_id: str) -> bool:
    """Whether `task_id` is a step of one of the run's workflows."""
    return task_id.startswith(("chain-", "chord-"))


def build(app: App, flow_id: str, max_retries: int) -> Chain[Any]:
    step, callback = app.tasks[FLOW_STEP], app.tasks[FLOW_CALLBACK]
    if flow_id.startswith("chain"):
        return chain(step.s(0, max_retries=max_retries),
                     *(step.s(max_retries=max_retries) for _ in range(CHAIN_LENGTH - 1)))
    return group(step.s(n, max_retries=max_retries) for n in range(CHORD_SIZE)).then(
        callback.s(max_retries=max_retries))


def expected(flow_id: str) -> tuple[str, int]:
    """The task id of a workflow's last step and the value it must return."""
    if flow_id.startswith("chain"):
        return flow_step_id(flow_id, CHAIN_LENGTH, 1), CHAIN_LENGTH
    return flow_step_id(flow_id, 2, 1), sum(n + 1 for n in range(CHORD_SIZE))


def triggers_expected(flow_id: str) -> int:
    """How many `triggered` events a workflow that completes has: one per step after the
    first stage."""
    return CHAIN_LENGTH - 1 if flow_id.startswith("chain") else 1


@dataclass
class FlowsSent:
    """The workflows Redis acknowledged starting, and the starts retried through outages."""

    acknowledged: list[str] = field(default_factory=list)
    retries: int = 0


class FlowStarter:
    """Starts the run's workflows a share at a time, from the producer's thread, each
    sent again after an error until Redis answers (its id makes that safe)."""

    def __init__(self, app: App, ids: list[str], max_retries: int, sent: FlowsSent) -> None:
        self.app, self.ids, self.max_retries, self.sent = app, ids, max_retries, sent
        self.next = 0

    @classmethod
    def for_run(cls, settings: Settings, simulation: Simulation, tasks: int, max_retries: int,
                sent: FlowsSent) -> FlowStarter:
        app = App(queue=settings.queue, settings=settings)
        flow_tasks(app, simulation)
        return cls(app, flow_ids(tasks), max_retries, sent)

    def start_share(self, done: int, total: int, stopping: threading.Event) -> None:
        """Start the workflows due once `done` of `total` tasks are sent."""
        due = len(self.ids) if done >= total else len(self.ids) * done // max(total, 1)
        while self.next < due and not stopping.is_set():
            flow_id = self.ids[self.next]
            try:
                build(self.app, flow_id, self.max_retries).enqueue(flow_id=flow_id)
            except BrokerError:
                self.sent.retries += 1
                time.sleep(0.1)
                continue
            self.sent.acknowledged.append(flow_id)
            self.next += 1


@dataclass
class FlowCount:
    """The run's workflows as the event log tells them."""

    started: int = 0
    chains: int = 0
    chords: int = 0
    completed: int = 0
    triggers: int = 0
    wrong_value: list[str] = field(default_factory=list)
    unfinished: list[str] = field(default_factory=list)
    triggered_not_once: list[str] = field(default_factory=list)
    callbacks_charged: int = 0
    callbacks_not_charged_once: list[str] = field(default_factory=list)
    lost: list[str] = field(default_factory=list)


@dataclass
class FlowLog:
    """What the log says of workflows: the ids it names, each one's `triggered` events,
    and each completed step's result."""

    seen: set[str] = field(default_factory=set)
    triggered: dict[str, int] = field(default_factory=dict)
    results: dict[str, object] = field(default_factory=dict)

    @classmethod
    def read(cls, rows: list[tuple[int, dict[str, str]]]) -> FlowLog:
        log = cls()
        for _, fields in rows:
            flow, kind = fields.get("flow", ""), fields.get("type", "")
            if flow:
                log.seen.add(flow)
            if kind == "triggered":
                log.triggered[flow] = log.triggered.get(flow, 0) + 1
            elif kind == "completed" and "result" in fields:
                log.results[fields.get("task", "")] = json.loads(fields["result"])
        return log


def count_flows(rows: list[tuple[int, dict[str, str]]], sent: FlowsSent,
                charges: Mapping[str, int]) -> FlowCount:
    """Each acknowledged workflow's end, its triggers and its last step's charges, from
    the log's rows (in order) and the ledger's charges per task id."""
    log = FlowLog.read(rows)
    count = FlowCount(started=len(sent.acknowledged), triggers=sum(log.triggered.values()))
    for flow_id in sent.acknowledged:
        count.chains += flow_id.startswith("chain")
        count.chords += flow_id.startswith("chord")
        if flow_id not in log.seen:
            count.lost.append(flow_id)
            continue
        last, value = expected(flow_id)
        if last not in log.results:
            count.unfinished.append(flow_id)
        elif log.results[last] != value:
            count.wrong_value.append(flow_id)
        else:
            count.completed += 1
        if log.triggered.get(flow_id, 0) != triggers_expected(flow_id):
            count.triggered_not_once.append(flow_id)
        charged = charges.get(last, 0)
        count.callbacks_charged += charged
        if charged != 1:
            count.callbacks_not_charged_once.append(flow_id)
    return count
