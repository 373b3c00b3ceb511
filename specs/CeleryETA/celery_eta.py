r"""Python transcription of CeleryETA_faulty.tla and CeleryETA_idempotent.tla.

TLA+ action            Python
---------------------  ---------------------------------------------
Init                   initial()
PublishTask            publish_task(c, s)
PickupTask             pickup_task(c, s)
ExecuteTask (faulty)   execute_task(c, s)
ExecuteTask (fixed)    execute_task_guarded(c, s)
AckWithoutExecute      ack_without_execute(c, s)    (idempotent only)
AckTask                ack_task(c, s)
VisTimeoutExpired      vis_timeout_expired(c, s)
Next                   FAULTY_NEXT / IDEMPOTENT_NEXT, tried in that order
InvariantNoDoubleExecution  invariant_no_double_execution(s)

Each \E id binding is enumerated in ascending order and the disjuncts of Next
in the order written, which is TLC's order; it does not change what is
reachable, but it fixes which violation TLC meets first and its counters.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import NamedTuple

from specs.tlacheck import Fn, Model, Transition
from specs.tlacheck import cfg as cfgs


class State(NamedTuple):
    # Field names are the TLA+ variable names, so that traces read like TLC's.
    tasks: frozenset[int]
    readySet: frozenset[int]
    activeSet: frozenset[int]
    execCount: Fn[int, int]


@dataclass(frozen=True)
class Constants:
    max_tasks: int

    @property
    def all_ids(self) -> range:
        return range(self.max_tasks + 1)


def initial(c: Constants) -> State:
    return State(frozenset(), frozenset(), frozenset(), Fn.const(c.all_ids, 0))


def publish_task(c: Constants, s: State) -> Iterator[Transition[State]]:
    if len(s.tasks) < c.max_tasks:
        for i in c.all_ids:
            if i not in s.tasks:
                yield (
                    f"PublishTask(id={i})",
                    s._replace(tasks=s.tasks | {i}, readySet=s.readySet | {i}),
                )


def pickup_task(_: Constants, s: State) -> Iterator[Transition[State]]:
    for i in sorted(s.readySet):
        yield (
            f"PickupTask(id={i})",
            s._replace(readySet=s.readySet - {i}, activeSet=s.activeSet | {i}),
        )


def execute_task(_: Constants, s: State) -> Iterator[Transition[State]]:
    for i in sorted(s.activeSet):
        yield (
            f"ExecuteTask(id={i})",
            s._replace(execCount=s.execCount.except_(i, s.execCount[i] + 1)),
        )


def execute_task_guarded(_: Constants, s: State) -> Iterator[Transition[State]]:
    for i in sorted(s.activeSet):
        if s.execCount[i] == 0:
            yield f"ExecuteTask(id={i})", s._replace(execCount=s.execCount.except_(i, 1))


def ack_without_execute(_: Constants, s: State) -> Iterator[Transition[State]]:
    for i in sorted(s.activeSet):
        if s.execCount[i] > 0:
            yield f"AckWithoutExecute(id={i})", s._replace(activeSet=s.activeSet - {i})


def ack_task(_: Constants, s: State) -> Iterator[Transition[State]]:
    for i in sorted(s.activeSet):
        yield f"AckTask(id={i})", s._replace(activeSet=s.activeSet - {i})


def vis_timeout_expired(_: Constants, s: State) -> Iterator[Transition[State]]:
    for i in sorted(s.activeSet):
        yield (
            f"VisTimeoutExpired(id={i})",
            s._replace(activeSet=s.activeSet - {i}, readySet=s.readySet | {i}),
        )


Action = Callable[[Constants, State], Iterator[Transition[State]]]

FAULTY_NEXT: tuple[Action, ...] = (
    publish_task,
    pickup_task,
    execute_task,
    ack_task,
    vis_timeout_expired,
)
IDEMPOTENT_NEXT: tuple[Action, ...] = (
    publish_task,
    pickup_task,
    execute_task_guarded,
    ack_without_execute,
    ack_task,
    vis_timeout_expired,
)


def invariant_no_double_execution(s: State) -> bool:
    return all(s.execCount[i] <= 1 for i in s.tasks)


INVARIANTS = {"InvariantNoDoubleExecution": invariant_no_double_execution}


def faulty_model(cfg: cfgs.Config) -> Model[State]:
    return _model("CeleryETA_faulty", FAULTY_NEXT, cfg)


def idempotent_model(cfg: cfgs.Config) -> Model[State]:
    return _model("CeleryETA_idempotent", IDEMPOTENT_NEXT, cfg)


def _model(name: str, actions: tuple[Action, ...], cfg: cfgs.Config) -> Model[State]:
    c = Constants(max_tasks=cfg.int_constant("MaxTasks"))

    def next_states(s: State) -> Iterator[Transition[State]]:
        for action in actions:
            yield from action(c, s)

    return Model(
        name=name,
        init=(initial(c),),
        next=next_states,
        invariants=cfgs.invariants(cfg, INVARIANTS),
        check_deadlock=cfg.check_deadlock,
    )
