r"""Python transcription of Progress.tla and its two mutants.

TLA+                              taskq                                 Python
--------------------------------  ------------------------------------  -----------------
Init                              a pending task, never leased           initial(c)
Lease(w)                          lease.lua                              lease(c, s)
Report(w, v), ReportIf            progress.lua (the token check)         report(c, s)
Expire                            the lease runs out, reap.lua           expire(c, s)
Hear(w)                           a heartbeat answers stale              hear(c, s)
Ack(w)                            ack.lua                                ack(c, s)
Shown                             snapshot.py's _progress, the task view  shown(s)
NoStaleShown, ShownIsLast         the INVARIANTS table, TLA+ names

ProgressNoFence.tla               progress.lua without the token check   no_fence_report
ProgressTokenless.tla             the value shown whatever run said it   tokenless_shown

Each \E is a loop in ascending order and Next's disjuncts are tried in the order
written, which is TLC's order.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import NamedTuple

from specs.tlacheck import Fn, Model, Transition
from specs.tlacheck import cfg as cfgs


class Record(NamedTuple):
    value: int
    by: int


class State(NamedTuple):
    # Field names are the TLA+ variable names, so that traces read like TLC's.
    token: int
    state: str
    held: Fn[int, int]
    record: Record
    last: Fn[int, int]


@dataclass(frozen=True)
class Constants:
    workers: int
    steps: int
    runs: int

    @classmethod
    def from_cfg(cls, cfg: cfgs.Config) -> Constants:
        return cls(workers=cfg.int_constant("WORKERS"), steps=cfg.int_constant("STEPS"),
                   runs=cfg.int_constant("RUNS"))

    @property
    def all_workers(self) -> range:
        return range(1, self.workers + 1)

    @property
    def values(self) -> range:
        return range(1, self.steps + 1)

    @property
    def max_token(self) -> int:
        return 2 * self.runs


def initial(c: Constants) -> State:
    return State(0, "pending", Fn.const(c.all_workers, 0), Record(0, 0),
                 Fn.const(range(1, c.max_token + 1), 0))


Action = Callable[[Constants, State], Iterator[Transition[State]]]


def lease(c: Constants, s: State) -> Iterator[Transition[State]]:
    for w in c.all_workers:
        if s.state == "pending" and s.held[w] == 0 and s.token + 1 <= c.max_token:
            yield f"Lease(w={w})", s._replace(token=s.token + 1, state="running",
                                              held=s.held.except_(w, s.token + 1))


def accepts(s: State, w: int) -> bool:
    """Accepts(w): progress.lua's check, a running task and w's token the current one."""
    return s.state == "running" and s.held[w] == s.token


def report_if(name: str, check: Callable[[State, int], bool]) -> Action:
    def action(c: Constants, s: State) -> Iterator[Transition[State]]:
        for w in c.all_workers:
            for v in c.values:
                if s.held[w] != 0 and check(s, w):
                    yield f"{name}(w={w},v={v})", s._replace(
                        record=Record(v, s.held[w]), last=s.last.except_(s.held[w], v))

    return action


report = report_if("Report", accepts)
no_fence_report = report_if("NoFenceReport", lambda s, w: True)


def expire(c: Constants, s: State) -> Iterator[Transition[State]]:
    if s.state == "running" and s.token + 1 <= c.max_token:
        yield "Expire", s._replace(token=s.token + 1, state="pending")


def hear(c: Constants, s: State) -> Iterator[Transition[State]]:
    for w in c.all_workers:
        if s.held[w] not in (0, s.token):
            yield f"Hear(w={w})", s._replace(held=s.held.except_(w, 0))


def ack(c: Constants, s: State) -> Iterator[Transition[State]]:
    for w in c.all_workers:
        if accepts(s, w):
            yield f"Ack(w={w})", s._replace(state="completed", held=s.held.except_(w, 0))


NEXT: tuple[Action, ...] = (lease, report, expire, hear, ack)
NO_FENCE_NEXT: tuple[Action, ...] = (lease, no_fence_report, expire, hear, ack)


def shown(s: State) -> int:
    """Shown: the stored value while the run that said it is the current one."""
    return s.record.value if s.record.by == s.token and s.record.by != 0 else 0


def tokenless_shown(s: State) -> int:
    """TokenlessShown: the stored value, whatever run said it."""
    return s.record.value


def current(s: State) -> int:
    return 0 if s.token == 0 else s.last[s.token]


def type_ok(c: Constants, s: State) -> bool:
    return (0 <= s.token <= c.max_token and s.state in ("pending", "running", "completed")
            and all(0 <= t <= c.max_token for t in s.held.values())
            and 0 <= s.record.value <= c.steps and 0 <= s.record.by <= c.max_token
            and all(0 <= v <= c.steps for v in s.last.values()))


def invariants(c: Constants) -> dict[str, Callable[[State], bool]]:
    return {
        "TypeOK": lambda s: type_ok(c, s),
        "NoStaleShown": lambda s: shown(s) == 0 or shown(s) == current(s),
        "ShownIsLast": lambda s: not (s.state == "running" and current(s) != 0)
        or shown(s) == current(s),
        "TokenlessNoStaleShown": lambda s: tokenless_shown(s) == 0
        or tokenless_shown(s) == current(s),
    }


def model(cfg: cfgs.Config) -> Model[State]:
    return _model("Progress", NEXT, cfg)


def no_fence_model(cfg: cfgs.Config) -> Model[State]:
    return _model("ProgressNoFence", NO_FENCE_NEXT, cfg)


def tokenless_model(cfg: cfgs.Config) -> Model[State]:
    return _model("ProgressTokenless", NEXT, cfg)


def _model(name: str, actions: tuple[Action, ...], cfg: cfgs.Config) -> Model[State]:
    c = Constants.from_cfg(cfg)
    return cfgs.action_model(name, cfg, c, initial(c), actions, invariants(c))
