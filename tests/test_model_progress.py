"""progress.lua on the real broker under random interleavings, drawn by Hypothesis: runs
of a few tasks report progress as current and as stale holders (reaped, or done),
leases brief enough to run out are reaped and leased again, and runs are acked. After
every step a task's record shows what the Progress model says a reader sees: the last
word of its current run, or nothing (NoStaleShown, ShownIsLast); a stale holder's
report changes nothing and appends no event (E1)."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
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

from helpers import leased_token, reaped_token
from taskq.broker import Broker
from taskq.tools.tracecheck import read_log, validate

BRIEF = 0.05  # a lease that runs out during the run
FAST = {"backoff_base": 0.001, "backoff_max": 0.002}


@dataclass
class Run:
    """The model's view of one task: its place, its token, the run's lease expiry."""

    place: str = "ready"
    token: int = 0
    expires: float = 0.0


class ProgressMachine(RuleBasedStateMachine):
    client: redis.Redis

    def __init__(self) -> None:
        super().__init__()
        self.broker = Broker(self.client, f"p-{uuid.uuid4().hex[:10]}")
        self.tasks: dict[str, Run] = {}
        self.issued: list[tuple[str, int]] = []  # every (task, token) a lease handed out
        self.said: dict[tuple[str, int], int] = {}  # each run's last word, in permille
        self.events = 0

    @initialize()
    def three_tasks(self) -> None:
        for n in range(3):
            self.broker.enqueue(f"t{n}", max_retries=1000)
            self.tasks[f"t{n}"] = Run()
            self.events += 1

    @rule(brief=st.booleans())
    def lease(self, brief: bool) -> None:
        batch = self.broker.lease_many("w", BRIEF if brief else 30, 1)
        ready = [t for t, run in self.tasks.items() if run.place == "ready"]
        assert len(batch.tasks) == min(1, len(ready))
        for task in batch.tasks:
            run = self.tasks[task.task_id]
            run.place, run.token = "leased", leased_token(run.token, task.token)
            run.expires = time.monotonic() + (BRIEF if brief else 30) + 0.02
            self.issued.append((task.task_id, task.token))
            self.events += 1

    @precondition(lambda self: self.issued)
    @rule(pick=st.integers(0, 10**6), permille=st.integers(0, 1000))
    def report(self, pick: int, permille: int) -> None:
        """A run says how far it has got: kept only from the task's current holder."""
        task_id, token = self.issued[pick % len(self.issued)]
        run = self.tasks[task_id]
        current = run.place == "leased" and run.token == token
        assert self.broker.progress(task_id, token, permille / 1000, f"at {permille}") \
            == current
        if current:
            self.said[(task_id, token)] = permille
            self.events += 1

    @precondition(lambda self: any(r.place == "leased" for r in self.tasks.values()))
    @rule(pick=st.integers(0, 10**6))
    def ack(self, pick: int) -> None:
        held = sorted(t for t, r in self.tasks.items() if r.place == "leased")
        task_id = held[pick % len(held)]
        assert self.broker.ack(task_id, self.tasks[task_id].token)
        self.tasks[task_id].place = "completed"
        self.events += 1

    @rule()
    def reap_once_brief_leases_run_out(self) -> None:
        due = [t for t, r in self.tasks.items()
               if r.place == "leased" and r.expires - time.monotonic() < 1]
        time.sleep(max((self.tasks[t].expires - time.monotonic() for t in due), default=0.0)
                   if due else 0.0)
        reaped = dict(self.broker.reap(**FAST))
        assert sorted(reaped) == sorted(due)
        for task_id in due:
            run = self.tasks[task_id]
            run.place = "delayed"
            run.token = reaped_token(self.broker, task_id, run.token)  # stale at once
            self.events += 1
        time.sleep(FAST["backoff_max"] + 0.01)
        promoted = self.broker.promote()
        assert sorted(promoted) == sorted(t for t, r in self.tasks.items()
                                          if r.place == "delayed")
        for task_id in promoted:
            self.tasks[task_id].place = "ready"
            self.events += 1

    @invariant()
    def a_reader_sees_the_current_runs_last_word_or_nothing(self) -> None:
        for task_id, run in self.tasks.items():
            record = self.broker.task(task_id)
            assert record is not None
            said = self.said.get((task_id, run.token))
            assert record.progress == (None if said is None else said / 1000), task_id
            assert record.progress_message == ("" if said is None else f"at {said}")
        assert int(self.client.get(self.broker.keys.seq) or 0) == self.events

    def teardown(self) -> None:
        report = validate(read_log(self.client, self.broker.keys.events),
                          require_terminal=False)
        assert report.ok, report.violations[:5]


@pytest.fixture
def machine(client: redis.Redis) -> Iterator[type[ProgressMachine]]:
    yield type("Machine", (ProgressMachine,), {"client": client})


def test_a_reader_sees_only_the_current_runs_progress(
    machine: type[ProgressMachine],
) -> None:
    run_state_machine_as_test(
        machine,
        settings=settings(max_examples=20, stateful_step_count=25, deadline=None,
                          database=None, suppress_health_check=[HealthCheck.too_slow]),
    )


def test_a_run_leased_again_starts_at_nothing_and_its_stale_holder_is_refused(
    machine: type[ProgressMachine],
) -> None:
    """A fixed run through the paths: said, reaped, leased again, the stale holder's
    report refused, the new run's kept, acked."""
    m = machine()
    m.three_tasks()
    m.lease(True)
    m.report(0, 250)
    m.a_reader_sees_the_current_runs_last_word_or_nothing()
    m.reap_once_brief_leases_run_out()
    m.a_reader_sees_the_current_runs_last_word_or_nothing()  # a reaped run shows nothing
    for _ in range(3):  # t1 and t2, then t0 again from the back of ready
        m.lease(False)
    assert [task for task, _ in m.issued] == ["t0", "t1", "t2", "t0"]
    assert m.issued[3][1] > m.issued[0][1]  # t0 again, above its first token and the reap's
    m.report(0, 900)  # the first run's stale token: refused
    m.report(3, 600)
    m.a_reader_sees_the_current_runs_last_word_or_nothing()
    assert m.broker.task("t0").progress == 0.6
    m.ack(0)
    m.a_reader_sees_the_current_runs_last_word_or_nothing()
    m.teardown()
