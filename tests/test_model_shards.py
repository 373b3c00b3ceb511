"""A sharded queue on the real broker under random interleavings, drawn by Hypothesis:
enqueues through the app's router (idempotency keys reused, task ids given or drawn,
given ids that route elsewhere than their key refused whole), leases by three workers through the
real several-queues leaser with the shards taking turns (some leases brief enough to
run out), settles by current and stale holders, reaps and promotions. After every
step: T1 on each shard, every idempotency key names one task across all shards (each
shard's record of it on the key's own shard), every task sits on the shard its key or
id routes to, and the app's handle finds every task from its id. In the end every task
has ended and each shard's log passes tracecheck."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from helpers import task_ids, text, view
from taskq import App
from taskq.broker import Broker
from taskq.errors import InvalidTaskError
from taskq.settings import Settings
from taskq.shards import route
from taskq.tools.tracecheck import read_log, validate
from taskq.worker.queues import Leaser, Queues

BRIEF = 0.05  # a lease that runs out during the run
FAST = {"backoff_base": 0.001, "backoff_max": 0.002}
KEYS = [None, None, "k0", "k1", "k2"]
SHARDS = 3


class ShardMachine(RuleBasedStateMachine):
    client: redis.Redis
    settings: Settings

    def __init__(self) -> None:
        super().__init__()
        self.app = App(queue=f"m-{uuid.uuid4().hex[:8]}", settings=self.settings,
                       shards=SHARDS)
        self.noop = self.app.task("noop")(lambda n: n)
        assert self.app.layout is not None
        self.layout = self.app.layout
        self.brokers = [Broker(self.client, name) for name in self.layout.shards]
        self.queues = Queues(self.brokers, [1] * SHARDS)
        self.leasers = {w: Leaser(w, 30) for w in ("w1", "w2", "w3")}
        self.created: dict[str, str | None] = {}  # task id -> its key
        self.by_key: dict[str, str] = {}
        self.holders: list[tuple[Broker, str, int]] = []
        self.sent = 0

    @rule(n=st.integers(1, 4), key=st.sampled_from(KEYS), given_id=st.booleans())
    def enqueue(self, n: int, key: str | None, given_id: bool) -> None:
        calls = []
        for i in range(n):
            options: dict[str, Any] = {}
            if key is not None:
                options["idempotency_key"] = key
            if given_id:
                options["task_id"] = f"t{self.sent + i}"
            calls.append(self.noop.call(self.sent + i, **options))
        self.sent += n
        if any(c.idempotency_key is not None
               and route(c.task_id, SHARDS) != route(c.idempotency_key, SHARDS)
               for c in calls):
            before = self.totals()
            with pytest.raises(InvalidTaskError, match="route to different shards"):
                self.noop.enqueue_many(calls)
            assert self.totals() == before  # refused whole: nothing was sent
            return
        handles = self.noop.enqueue_many(calls)
        for handle in handles:
            if key is not None and key in self.by_key:
                assert (handle.created, handle.task_id) == (False, self.by_key[key])
                continue
            if handle.created:
                self.created[handle.task_id] = key
                if key is not None:
                    self.by_key[key] = handle.task_id

    @rule(worker=st.sampled_from(["w1", "w2", "w3"]), n=st.integers(1, 6),
          brief=st.booleans())
    def lease(self, worker: str, n: int, brief: bool) -> None:
        leaser = self.leasers[worker]
        leaser.lease_seconds = BRIEF if brief else 30
        leases = leaser.fill(n, self.queues.order())
        assert leases is not None
        self.holders += [(leased.broker, t.task_id, t.token)
                         for leased in leases.taken for t in leased.batch.tasks]

    @precondition(lambda self: self.holders)
    @rule(pick=st.integers(0, 1000), how=st.sampled_from(["ack", "fail", "release"]))
    def settle(self, pick: int, how: str) -> None:
        broker, task_id, token = self.holders[pick % len(self.holders)]
        if how == "ack":
            broker.ack(task_id, token)
        elif how == "fail":
            broker.fail(task_id, token, "boom", **FAST)
        else:
            broker.release(task_id, token)

    @rule()
    def time_passes(self) -> None:
        time.sleep(BRIEF + 0.02)
        for broker in self.brokers:
            broker.reap(**FAST)
        time.sleep(0.005)  # past the retry's backoff, so a reaped task is ready again
        for broker in self.brokers:
            broker.promote()

    def totals(self) -> list[int]:
        return [len(task_ids(self.client, b.keys)) for b in self.brokers]

    @invariant()
    def every_task_is_on_its_shard_and_every_key_names_one(self) -> None:
        found: dict[str, int] = {}
        for shard, broker in enumerate(self.brokers):
            assert view(self.client, broker.keys).violations() == []  # T1, per shard
            for task_id in task_ids(self.client, broker.keys):
                assert task_id not in found, f"{task_id} on shards {found[task_id]}, {shard}"
                found[task_id] = shard
            for idem in self.client.scan_iter(match=broker.keys.idem("*"), count=1000):
                key = text(idem)[len(broker.keys.idem("")):]
                assert route(key, SHARDS) == shard, f"key {key} recorded on shard {shard}"
                assert text(self.client.get(idem)) == self.by_key[key]
        for task_id, key in self.created.items():
            assert found.get(task_id) == route(task_id, SHARDS)
            assert key is None or route(key, SHARDS) == found[task_id]
            assert self.app.handle(task_id).status() != "unknown"

    def teardown(self) -> None:
        for broker, task_id, token in self.holders:
            broker.ack(task_id, token)
        drain = Leaser("drain", 30)
        deadline = time.monotonic() + 20
        while any((c := b.counts()).ready or c.leased or c.delayed for b in self.brokers):
            assert time.monotonic() < deadline
            leases = drain.fill(10, self.queues.order())
            assert leases is not None
            for leased in leases.taken:
                leased.broker.ack_many([(t.task_id, t.token) for t in leased.batch.tasks])
            for broker in self.brokers:
                broker.reap(**FAST)
                broker.promote()
            if not leases.count:
                time.sleep(0.01)
        for task_id in self.created:
            assert self.app.handle(task_id).status() in ("completed", "dead")
        for broker in self.brokers:
            report = validate(read_log(self.client, broker.keys.events))
            assert report.ok, (report.violations[:5], report.unfinished[:5])
        if self.app._sharded is not None:
            self.app._sharded.brokers[0].client.close()


@pytest.fixture
def machine(client: redis.Redis, settings: Settings) -> Iterator[type[ShardMachine]]:
    yield type("Machine", (ShardMachine,), {"client": client, "settings": settings})


def test_the_real_broker_keeps_every_task_on_its_shard(machine: type[ShardMachine]) -> None:
    run_state_machine_as_test(
        machine,
        settings=settings(max_examples=15, stateful_step_count=30, deadline=None,
                          database=None, suppress_health_check=[HealthCheck.too_slow]),
    )


def test_a_key_given_with_ids_of_its_own_and_other_shards_stays_one_task(
    machine: type[ShardMachine],
) -> None:
    """A fixed run through the cases routing decides: the key with a given id of another
    shard (refused), with one of its own shard (created), then with drawn ids."""
    m = machine()
    other = next(i for i in range(100) if route(f"t{i}", SHARDS) != route("k0", SHARDS))
    mine = next(i for i in range(100) if route(f"t{i}", SHARDS) == route("k0", SHARDS))
    m.sent = other
    m.enqueue(1, "k0", True)
    assert m.created == {}
    m.sent = mine
    m.enqueue(1, "k0", True)
    m.enqueue(3, "k0", False)
    m.every_task_is_on_its_shard_and_every_key_names_one()
    assert len(m.created) == 1 and m.by_key["k0"] == f"t{mine}"
    m.lease("w1", 6, True)
    m.time_passes()
    m.lease("w2", 6, False)
    m.every_task_is_on_its_shard_and_every_key_names_one()
    m.teardown()


def test_every_settle_by_a_current_or_stale_holder_keeps_every_task_on_its_shard(
    machine: type[ShardMachine],
) -> None:
    """A fixed run through the settles, which the drawn runs reach only once a lease has
    taken something: a stale holder's ack, fail and release change nothing, the current
    holder's release, fail and ack move the task on."""
    m = machine()
    m.enqueue(1, None, False)
    (task_id,) = m.created
    handle = m.app.handle(task_id)
    m.lease("w1", 1, True)
    m.time_passes()
    for how, status in (("release", "pending"), ("fail", "pending"), ("ack", "completed")):
        m.lease("w2", 1, False)
        stale, current = len(m.holders) - 2, len(m.holders) - 1
        for stale_how in ("ack", "fail", "release"):
            m.settle(stale, stale_how)
            assert handle.status() == "running"
        m.settle(current, how)
        m.time_passes()
        assert handle.status() == status, how
        m.every_task_is_on_its_shard_and_every_key_names_one()
    m.teardown()
