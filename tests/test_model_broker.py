"""The real broker on the real Redis, driven by Hypothesis against TaskQueue's model.

Each rule is one broker operation or the passing of real time (a 50 ms lease running
out, a 30 ms delay coming due), cancellation included (TaskQueue's CANCELS: a task that
is not running ends cancelled at once; a running one is flagged, its holder told by the
heartbeat, and its fail, release or reap ends it cancelled, an ack that came first
completes it), and priorities (a lease must take the highest priority ready, the oldest
within it, a release putting a task back at its level's front). After every step the
queue in Redis must be exactly what the model says: where each task is, its state,
retries and fencing token, and how many events the log holds, the result and error each
record keeps (R1: only the current token's ack stores a result) and whether a waiting
producer's done list is there; T1, T3, T5 and T6 are checked on the way, and every run's
event log must pass taskq.tools.tracecheck, whose P1 replay checks every lease. Holders
are kept for the whole run, so a paused holder comes back with its old token as often as
a current one acts.
"""

from __future__ import annotations

import json
import math
import time
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

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

from helpers import PLACE_STATE, dump, leased_token, reaped_token, view
from taskq.broker import Broker, Enqueued, FailResult
from taskq.results import Failure, Renewal
from taskq.tools.tracecheck import read_log, validate

BRIEF = 0.05  # a lease that runs out during the run
LONG = 30.0  # a lease or delay that does not
SHORT_DELAY = 0.03
FAST = {"backoff_base": 0.001, "backoff_max": 0.002}
MARGIN = 0.015  # client clock vs Redis TIME, and ms rounding
STATE_OF = {**PLACE_STATE, "completed": "completed", "cancelled": "cancelled"}
ENDED = ("completed", "cancelled")  # places that are no structure
# What the runs did, summed over every example, so a test can show it covered them.
SEEN: Counter[str] = Counter()
PATHS = {
    "duplicate key", "heartbeat", "ack", "fail", "release", "stale heartbeat", "stale ack",
    "stale fail", "stale release", "fail to retry", "fail to dead", "reaped to delayed",
    "reaped to dead", "promoted", "long delay left alone", "revived", "watched running",
    "watched ended", "woken", "fail to retry after a delay", "fail to dead at once",
    "cancel of ready", "cancel of delayed", "cancel of dlq", "cancel of leased",
    "cancel left alone", "cancel of unknown", "heartbeat told cancel", "ack_cancelled",
    "stale ack_cancelled", "fail to cancelled", "release to cancelled",
    "reaped to cancelled", "ack after cancel requested", "leased over a lower priority",
    "key bound to a known id", "purged",
}  # fmt: skip
CANCEL_PICKS = ("ready", "delayed", "leased", "dlq", "completed", "cancelled", "unknown")
FAIL_MODES = ("backoff", "delay", "dead")
BOOM = Failure("ValueError", "boom", "Traceback (most recent call last):\n  ...\nValueError: boom")


@dataclass
class Task:
    """The model's view of one task. `expires`/`due` are monotonic times after which the
    lease has surely run out / the task is surely due (inf: not during this run)."""

    place: str
    max_retries: int
    retries: int = 0
    token: int = 0
    worker: str = ""
    expires: float = math.inf
    due: float = 0.0
    result: str | None = None  # what the record keeps: set by the current ack only
    error_type: str = ""  # of the last failed attempt
    watched: bool = False  # a producer marked it while it had not ended
    woken: bool = False  # its done list was filled, and no revival dropped it since
    cancel_requested: bool = False  # cancelled while leased; the record keeps the flag
    priority: int = 5
    # Its place in its priority's ready list: lower is nearer the front (a release puts
    # it before every other, anything else after).
    stamp: int = 0

    @property
    def ended(self) -> bool:
        return self.place in ("completed", "dlq", "cancelled")

    def end(self) -> None:
        """It reached completed, cancelled or the DLQ: a waiting producer is woken."""
        if self.watched:
            self.woken = True
            SEEN["woken"] += 1


class BrokerMachine(RuleBasedStateMachine):
    client: redis.Redis

    def __init__(self) -> None:
        super().__init__()
        self.broker = Broker(self.client, f"m-{uuid.uuid4().hex[:10]}")
        self.tasks: dict[str, Task] = {}
        self.keys: dict[str, str] = {}
        self.issued: list[tuple[str, int]] = []  # every (task, token) a lease handed out
        self.events = 0  # rows the event log must hold (E1: one per state change)
        self.sends = 0
        self.backs = 0  # stamps for the back of a ready list, counting up
        self.fronts = 0  # and for its front, counting down

    # -- helpers ----------------------------------------------------------------------

    def in_place(self, place: str) -> list[str]:
        return sorted(t for t, m in self.tasks.items() if m.place == place)

    def to_ready(self, m: Task, front: bool = False) -> None:
        """It joins its priority's ready list: at the back, or the front."""
        if front:
            self.fronts -= 1
            m.stamp = self.fronts
        else:
            self.backs += 1
            m.stamp = self.backs
        m.place = "ready"

    def next_lease(self) -> str | None:
        """The task a lease takes: the highest priority ready, the front of its list."""
        ready = self.in_place("ready")
        return min(ready, key=lambda t: (-self.tasks[t].priority, self.tasks[t].stamp),
                   default=None)

    def holder(self, pick: int, current: bool) -> tuple[str, int]:
        """The current holder of a leased task, or any holder the run has seen (stale
        ones among them: reaped, taken over, finished)."""
        held = self.in_place("leased")
        if current and held:
            task_id = held[pick % len(held)]
            return task_id, self.tasks[task_id].token
        return self.issued[pick % len(self.issued)]

    def holds(self, task_id: str, token: int) -> bool:
        m = self.tasks[task_id]
        return m.place == "leased" and m.token == token

    def snapshot(self) -> dict[str, object]:
        """Every key of this queue and its content; lease request ids expire on their
        own."""
        return {k: v for k, v in dump(self.client, self.broker.keys.prefix + "*").items()
                if ":lreq:" not in k}

    def send_fail(self, task_id: str, token: int, mode: str) -> FailResult:
        """fail.lua in `mode`: after the backoff, after SHORT_DELAY, or dead at once."""
        if mode == "delay":
            return self.broker.fail(task_id, token, BOOM, **FAST, delay=SHORT_DELAY)
        return self.broker.fail(task_id, token, BOOM, **FAST, dead=mode == "dead")

    def retry_or_die(self, m: Task) -> str:
        if m.retries >= m.max_retries:
            m.place = "dlq"
            m.end()
            return "dead"
        m.retries += 1
        m.place, m.due = "delayed", time.monotonic() + FAST["backoff_max"] + MARGIN
        return "delayed"

    @staticmethod
    def wait_until(moment: float) -> None:
        if math.isfinite(moment):
            time.sleep(max(0.0, moment - time.monotonic()))

    # -- producer ---------------------------------------------------------------------

    @initialize()
    def two_ready_tasks(self) -> None:
        """Every run starts with work to lease, so its steps reach the holder scripts."""
        for max_retries in (0, 1):
            self.enqueue(None, 0.0, max_retries)

    @rule(
        key=st.sampled_from([None, None, None, None, "k1"]),
        delay=st.sampled_from([0.0, 0.0, 0.0, SHORT_DELAY, LONG]),
        max_retries=st.integers(0, 2),
        priority=st.sampled_from([5, 5, 0, 9, 3]),
    )
    def enqueue(self, key: str | None, delay: float, max_retries: int,
                priority: int = 5) -> None:
        self.sends += 1
        task_id = f"t{self.sends}"
        got = self.broker.enqueue(task_id, delay, max_retries, idempotency_key=key,
                                  priority=priority)
        if key in self.keys:  # T5: the original, and nothing written
            assert got == Enqueued(self.keys[key], False)
            SEEN["duplicate key"] += 1
            return
        assert got == Enqueued(task_id, True)
        due = {0.0: 0.0, LONG: math.inf}.get(delay, time.monotonic() + delay + MARGIN)
        m = self.tasks[task_id] = Task("delayed", max_retries, due=due, priority=priority)
        if not delay:
            self.to_ready(m)
        if key is not None:
            self.keys[key] = task_id
        self.events += 1

    @precondition(lambda self: self.tasks)
    @rule(pick=st.integers(0, 10**6), key=st.sampled_from([None, None, "k1", "k2"]))
    def enqueue_an_existing_id_again(self, pick: int, key: str | None) -> None:
        task_id = sorted(self.tasks)[pick % len(self.tasks)]
        before = self.snapshot()
        got = self.broker.enqueue(task_id, idempotency_key=key)
        if key is None or key in self.keys:  # T5: the task the id or key names
            assert got == Enqueued(self.keys.get(key or "", task_id), False)
            assert self.snapshot() == before
            return
        # A key that named no task now names the one the send was answered with.
        assert got == Enqueued(task_id, False)
        self.keys[key] = task_id
        assert self.client.get(self.broker.keys.idem(key)) == task_id
        SEEN["key bound to a known id"] += 1

    # -- workers ----------------------------------------------------------------------

    @rule(worker=st.sampled_from(["w1", "w2", "w3"]), brief=st.booleans())
    def lease(self, worker: str, brief: bool) -> None:
        expected = self.next_lease()
        batch = self.broker.lease_many(worker, BRIEF if brief else LONG, 1)
        if expected is None:
            assert batch.tasks == []
            return
        (got,) = batch.tasks
        assert got.task_id == expected  # the highest priority ready, its list's front
        SEEN["leased over a lower priority"] += any(
            self.tasks[t].priority < self.tasks[expected].priority
            for t in self.in_place("ready"))
        m = self.tasks[got.task_id]
        m.token = leased_token(m.token, got.token)
        assert (got.retries, got.max_retries) == (m.retries, m.max_retries)
        m.place, m.worker = "leased", worker
        m.expires = time.monotonic() + BRIEF + MARGIN if brief else math.inf
        self.issued.append((got.task_id, got.token))
        self.events += 1

    @precondition(lambda self: self.issued)
    @rule(pick=st.integers(0, 10**6), current=st.booleans())
    def heartbeat(self, pick: int, current: bool) -> None:
        task_id, token = self.holder(pick, current)
        self.holder_op(task_id, token, "heartbeat")

    @precondition(lambda self: self.issued)
    @rule(pick=st.integers(0, 10**6), current=st.booleans())
    def ack(self, pick: int, current: bool) -> None:
        task_id, token = self.holder(pick, current)
        self.holder_op(task_id, token, "ack")

    @precondition(lambda self: self.issued)
    @rule(pick=st.integers(0, 10**6), current=st.booleans(), mode=st.sampled_from(FAIL_MODES))
    def fail(self, pick: int, current: bool, mode: str) -> None:
        task_id, token = self.holder(pick, current)
        self.holder_op(task_id, token, "fail", mode)

    @precondition(lambda self: self.issued)
    @rule(pick=st.integers(0, 10**6), current=st.booleans())
    def release(self, pick: int, current: bool) -> None:
        task_id, token = self.holder(pick, current)
        self.holder_op(task_id, token, "release")

    @precondition(lambda self: self.issued)
    @rule(pick=st.integers(0, 10**6), current=st.booleans())
    def ack_cancelled(self, pick: int, current: bool) -> None:
        """ack_cancelled.lua: only the current holder of a cancel-requested task ends it;
        any other call changes nothing."""
        task_id, token = self.holder(pick, current)
        m = self.tasks[task_id]
        if not (self.holds(task_id, token) and m.cancel_requested):
            before = self.snapshot()
            assert not self.broker.ack_cancelled(task_id, token)
            assert self.snapshot() == before
            SEEN["stale ack_cancelled"] += 1
            return
        assert self.broker.ack_cancelled(task_id, token)
        self.to_cancelled(m)
        self.events += 1
        SEEN["ack_cancelled"] += 1

    # -- cancellation -----------------------------------------------------------------

    @rule(pick=st.integers(0, 10**6), place=st.sampled_from(CANCEL_PICKS))
    def cancel(self, pick: int, place: str) -> None:
        """cancel.lua on a task in `place` (an unknown id when none is there)."""
        choices = self.in_place(place)
        task_id = choices[pick % len(choices)] if choices else "no-such-task"
        m = self.tasks.get(task_id)
        if m is None or m.place in ENDED or (m.place == "leased" and m.cancel_requested):
            before = self.snapshot()
            got = self.broker.cancel(task_id)
            assert got.outcome == ("unknown" if m is None else "unchanged"), task_id
            assert self.snapshot() == before
            SEEN["cancel of unknown" if m is None else "cancel left alone"] += 1
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

    def to_cancelled(self, m: Task) -> None:
        m.place, m.expires, m.due = "cancelled", math.inf, math.inf
        m.end()

    def holder_op(self, task_id: str, token: int, op: str, mode: str = "backoff") -> None:
        """One of the four holder scripts (a fail in one of its `FAIL_MODES`); with a
        stale token it must say so and change nothing (T3)."""
        b, m = self.broker, self.tasks[task_id]
        if not self.holds(task_id, token):
            before = self.snapshot()
            answers: dict[str, Callable[[], object]] = {
                "heartbeat": lambda: b.heartbeat(task_id, token, LONG),
                "ack": lambda: b.ack(task_id, token, json.dumps({"token": token})),
                "fail": lambda: self.send_fail(task_id, token, mode).status,
                "release": lambda: b.release(task_id, token),
            }
            assert answers[op]() in (False, "stale"), f"stale {op} of {task_id}"
            assert self.snapshot() == before, f"stale {op} of {task_id} changed something"
            SEEN[f"stale {op}"] += 1
            return
        SEEN[op] += 1
        self.events += 1
        if op == "heartbeat":
            told = Renewal.CANCEL if m.cancel_requested else Renewal.HELD
            assert b.heartbeat(task_id, token, LONG) is told
            SEEN["heartbeat told cancel"] += told is Renewal.CANCEL
            m.expires = math.inf
        elif op == "ack":
            m.result = json.dumps({"token": token})
            assert b.ack(task_id, token, m.result)
            m.place = "completed"
            m.end()
            SEEN["ack after cancel requested"] += m.cancel_requested
        elif op in ("fail", "release") and m.cancel_requested:
            # Its cancel was asked for: it ends cancelled, neither retried nor readied.
            if op == "fail":
                assert self.send_fail(task_id, token, mode) == FailResult("cancelled",
                                                                         m.retries, 0.0)
                m.error_type = BOOM.error_type
            else:
                assert b.release(task_id, token)
            self.to_cancelled(m)
            SEEN[f"{op} to cancelled"] += 1
        elif op == "fail":
            result = self.send_fail(task_id, token, mode)
            if mode == "dead":
                SEEN["fail to dead at once"] += 1
                assert (result.status, result.retries) == ("dead", m.retries)
                m.place = "dlq"
                m.end()
            else:
                expected = "dead" if m.retries >= m.max_retries else "retry"
                SEEN[f"fail to {expected}" + (" after a delay" if mode == "delay" and
                                               expected == "retry" else "")] += 1
                assert (result.status, result.retries) == (expected,
                                                           min(m.retries + 1, m.max_retries))
                if self.retry_or_die(m) == "delayed" and mode == "delay":
                    m.due = time.monotonic() + SHORT_DELAY + MARGIN
            m.error_type = BOOM.error_type
        else:
            assert b.release(task_id, token)
            self.to_ready(m, front=True)

    # -- maintenance and time ---------------------------------------------------------

    @rule()
    def reap_after_brief_leases_run_out(self) -> None:
        brief = [t for t in self.in_place("leased") if math.isfinite(self.tasks[t].expires)]
        self.wait_until(max((self.tasks[t].expires for t in brief), default=0.0))
        reaped = dict(self.broker.reap(limit=100, **FAST))
        expected = {}
        for task_id in brief:
            m = self.tasks[task_id]
            m.token = reaped_token(self.broker, task_id, m.token)  # stale at once
            m.expires = math.inf
            if m.cancel_requested:
                self.to_cancelled(m)
                expected[task_id] = "cancelled"
                SEEN["reaped to cancelled"] += 1
                continue
            m.error_type = "taskq.LeaseExpired"
            expected[task_id] = self.retry_or_die(m)
            SEEN[f"reaped to {expected[task_id]}"] += 1
        assert reaped == expected
        self.events += len(reaped)

    @rule()
    def promote_once_short_delays_are_due(self) -> None:
        delayed = [t for t in self.in_place("delayed") if math.isfinite(self.tasks[t].due)]
        self.wait_until(max((self.tasks[t].due for t in delayed), default=0.0))
        promoted = self.broker.promote(limit=100)
        assert sorted(promoted) == delayed  # T6: none with a long delay
        for task_id in promoted:  # in the order they join the back of their lists
            self.to_ready(self.tasks[task_id])
        SEEN["promoted"] += len(delayed)
        SEEN["long delay left alone"] += len(self.in_place("delayed"))
        self.events += len(delayed)

    @rule(pick=st.integers(0, 10**6), dead=st.booleans())
    def retry_dead(self, pick: int, dead: bool) -> None:
        choices = self.in_place("dlq") if dead else sorted(self.tasks)
        task_id = choices[pick % len(choices)] if choices else "no-such-task"
        revived = task_id in self.tasks and self.tasks[task_id].place == "dlq"
        assert self.broker.retry_dead(task_id) == revived
        if revived:
            m = self.tasks[task_id]
            m.retries, m.due = 0, 0.0
            self.to_ready(m)
            m.woken = False  # its next run's waiters must block again
            SEEN["revived"] += 1
            self.events += 1

    @rule()
    def purge_the_dlq(self) -> None:
        """purge.lua with a retention of a millisecond: every dead task leaves the DLQ
        with its record, but one an idempotency key still names (T5 keeps answering it)."""
        time.sleep(0.002)
        named = set(self.keys.values())
        expected = [t for t in self.in_place("dlq") if t not in named]
        assert sorted(self.broker.purge(dead_ttl=0.001, limit=100)) == expected
        for task_id in expected:
            del self.tasks[task_id]
        self.issued = [(t, token) for t, token in self.issued if t not in expected]
        SEEN["purged"] += len(expected)
        SEEN["kept for its key"] += len(self.in_place("dlq"))
        self.events += len(expected)

    # -- producers waiting for results --------------------------------------------------

    @precondition(lambda self: self.tasks)
    @rule(pick=st.integers(0, 10**6), mark=st.booleans())
    def watch(self, pick: int, mark: bool) -> None:
        """A producer reads a task's outcome (marking it, as result() does, or not, as
        status() does): the state, result and error the model holds, and no event."""
        task_id = sorted(self.tasks)[pick % len(self.tasks)]
        m = self.tasks[task_id]
        watched = self.broker.watch(task_id, mark)
        assert watched is not None
        assert (watched.state, watched.result, watched.error_type, watched.fencing_token) == (
            STATE_OF[m.place], m.result, m.error_type, m.token)
        if mark and not m.ended:
            m.watched = True
        SEEN["watched ended" if m.ended else "watched running"] += 1

    # -- the comparison ---------------------------------------------------------------

    @invariant()
    def redis_holds_exactly_what_the_model_says(self) -> None:
        now = view(self.client, self.broker.keys)
        assert now.violations() == []  # T1
        assert set(now.records) == set(self.tasks)  # T5: nothing else was created
        for task_id, m in self.tasks.items():
            record = now.records[task_id]
            assert now.where(task_id) == ([] if m.place in ENDED else [m.place])
            assert ("cancel_requested" in record) == m.cancel_requested, task_id
            assert record["state"] == STATE_OF[m.place], task_id
            assert (int(record["retries"]), int(record["fencing_token"])) == (m.retries, m.token)
            assert record.get("worker", "") == m.worker
            # R1: a result only on a completed task, from its current token's ack.
            assert record.get("result") == m.result, task_id
            assert record.get("error_type", "") == m.error_type, task_id
            woken = self.client.exists(self.broker.keys.done(task_id)) == 1
            assert woken == m.woken, task_id
        seq = self.client.get(self.broker.keys.seq)
        assert int(seq or 0) == self.events  # E1: one event per state change

    def teardown(self) -> None:
        log = read_log(self.client, self.broker.keys.events)
        report = validate(log, require_terminal=False)
        assert report.ok, report.violations[:5]
        # The whole log is here: P1 checks every lease, and no task is passed over.
        p = report.priority
        assert (p.checked, p.unchecked, p.passed_over) == (p.leases, {}, []), p


def machine_on(client: redis.Redis) -> type[BrokerMachine]:
    return type("Machine", (BrokerMachine,), {"client": client})


def test_the_real_broker_on_redis_moves_exactly_as_the_taskqueue_model(
    client: redis.Redis,
) -> None:
    run_state_machine_as_test(
        machine_on(client),
        settings=settings(
            max_examples=40,
            stateful_step_count=30,
            deadline=None,
            database=None,
            suppress_health_check=[HealthCheck.too_slow],
        ),
    )


def test_every_path_of_the_protocol_is_compared_with_the_model(client: redis.Redis) -> None:
    """A fixed run through the same rules, so that each path is checked in every run of
    the suite, whatever Hypothesis happens to draw."""
    SEEN.clear()
    m = machine_on(client)()
    step = Steps(m)
    step(m.two_ready_tasks)
    step(m.enqueue, "k1", 0.0, 2)
    step(m.enqueue, "k1", 0.0, 2)
    step(m.enqueue, None, SHORT_DELAY, 1)
    step(m.enqueue, None, LONG, 0)
    step(m.enqueue_an_existing_id_again, 0, None)
    step(m.enqueue_an_existing_id_again, 0, "k2")
    step(m.enqueue_an_existing_id_again, 1, "k2")
    for i in range(30):  # lease, act and let time pass until every outcome was seen
        if set(+SEEN) >= PATHS - {"purged"}:  # the purge comes last, below
            break
        step(m.enqueue, None, 0.0, i % 3, (5, 9, 0)[i % 3])
        step(m.watch, i, True)
        mode = FAIL_MODES[i % 3]
        for op in ("heartbeat", "fail", "ack", "release"):
            step(m.lease, "w1", False)
            if m.in_place("leased"):
                step(m.holder_op, *m.holder(0, current=True), op, mode)
            step(m.holder_op, *m.issued[0], op, mode)  # the first holder, stale after its turn
        step(m.lease, "w2", True)
        step(m.reap_after_brief_leases_run_out)
        if i % 2:
            step(m.retry_dead, 0, True)
        step(m.promote_once_short_delays_are_due)
        step(m.watch, i, False)
    cancel_each_way(m, step)
    step(m.purge_the_dlq)
    m.teardown()
    assert set(+SEEN) >= PATHS, PATHS - set(+SEEN)


def cancel_each_way(m: BrokerMachine, step: Steps) -> None:
    """Cancel a task in each place, and settle a cancel-requested task each way."""
    for place, delay in (("ready", 0.0), ("delayed", LONG)):
        step(m.enqueue, None, delay, 1)
        step(m.cancel, m.in_place(place).index(f"t{m.sends}"), place)
    step(m.enqueue, None, 0.0, 0)
    step(m.watch, len(m.tasks) - 1, True)
    for op in ("heartbeat", "release", "fail", "ack", "ack_cancelled", "heartbeat"):
        brief = op == "heartbeat" and SEEN["heartbeat told cancel"] > 0  # reaped instead
        step(m.enqueue, None, 0.0, 1)
        step(m.lease, "w1", brief)
        task_id, token = m.issued[-1]
        step(m.cancel, m.in_place("leased").index(task_id), "leased")
        step(m.cancel, m.in_place("leased").index(task_id), "leased")  # left alone
        if brief:
            step(m.reap_after_brief_leases_run_out)
        elif op == "ack_cancelled":
            step(m.ack_cancelled, len(m.issued) - 1, False)
        else:
            step(m.holder_op, task_id, token, op, "dead")
            if op == "heartbeat":
                step(m.ack_cancelled, len(m.issued) - 1, False)
        step(m.ack_cancelled, len(m.issued) - 1, False)  # stale now
    dead = m.in_place("dlq")
    if not dead:
        step(m.enqueue, None, 0.0, 0)
        step(m.lease, "w1", False)
        step(m.holder_op, *m.issued[-1], "fail", "dead")
    step(m.cancel, 0, "dlq")
    step(m.cancel, 0, "cancelled")
    step(m.cancel, 0, "unknown")


class Steps:
    """Runs one rule of a machine, then its invariant, as Hypothesis would."""

    def __init__(self, machine: BrokerMachine) -> None:
        self.machine = machine

    def __call__(self, rule: Callable[..., None], *args: object) -> None:
        rule(*args)
        self.machine.redis_holds_exactly_what_the_model_says()
