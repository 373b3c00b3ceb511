"""The broker invariants of design.md section 3, checked on randomized runs on a real Redis."""

from __future__ import annotations

import random
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest
import redis

from helpers import dump, events, lease_one, leased, record_of, replay, text, view, wait_past
from taskq.broker import SIMULATE_TASK, Broker, NewTask

SEEDS = (11, 22, 33)
STEPS = 150
FAST = {"backoff_base": 0.005, "backoff_max": 0.02}


class RandomRun:
    """Applies random broker operations, often with the current token and often a stale one."""

    def __init__(self, broker: Broker, seed: int) -> None:
        self.broker, self.rng = broker, random.Random(seed)
        self.issued: list[tuple[str, int]] = []  # every (task, token) ever handed out
        self.created = 0

    def step(self) -> tuple[str, set[str]]:
        """Apply one operation; return its name and the tasks it says it extended."""
        name = self.rng.choices(
            ["enqueue", "lease", "holder", "reap", "promote", "retry_dead", "sleep"],
            weights=[5, 5, 8, 2, 3, 1, 1],
        )[0]
        if name == "holder":
            return self.as_holder()
        b, rng = self.broker, self.rng
        if name == "enqueue":
            self.created += 1
            b.enqueue(
                f"t{rng.randrange(self.created)}" if rng.random() < 0.1 else f"t{self.created}",
                delay=rng.choice([0, 0, 0, 0.01, 0.03]),
                max_retries=rng.randint(0, 2),
                idempotency_key=rng.choice([None, None, None, "k1", "k2"]),
            )
        elif name == "lease":
            batch = b.lease_many(f"w{rng.randint(1, 3)}", rng.choice([10, 0.01]), rng.randint(1, 3))
            self.issued += [(t.task_id, t.token) for t in batch.tasks]
        elif name == "reap":
            b.reap(limit=rng.randint(1, 5), **FAST)
        elif name == "promote":
            b.promote(limit=rng.randint(1, 5))
        elif name == "retry_dead":
            dead = b.dead()
            b.retry_dead(rng.choice(dead) if dead and rng.random() < 0.8 else "t1")
        else:
            time.sleep(0.015)
        return name, set()

    def as_holder(self) -> tuple[str, set[str]]:
        """Heartbeat, ack, fail or release, with the holder's token or another one."""
        b, rng = self.broker, self.rng
        name = rng.choice(["heartbeat", "ack", "fail", "release"])
        task_id, token = self.holder()
        if name == "heartbeat":
            return name, {task_id} if b.heartbeat(task_id, token, rng.choice([10, 0.01])) else set()
        if name == "ack":
            b.ack(task_id, token)
        elif name == "fail":
            b.fail(task_id, token, f"error {rng.random()}", **FAST)
        else:
            b.release(task_id, token)
        return name, set()

    def holder(self) -> tuple[str, int]:
        """The current holder of a leased task most of the time, else some other token."""
        b = self.broker
        holding = [text(t) for t in b.client.zrange(b.keys.leased, 0, -1)]
        if holding and self.rng.random() < 0.7:
            task_id = self.rng.choice(holding)
            record = b.task(task_id)
            return task_id, record.fencing_token if record else 0
        if not self.issued:
            return "t1", 1
        task_id, token = self.rng.choice(self.issued)
        return task_id, token + self.rng.choice([0, 0, -1, 1])


@pytest.mark.parametrize("seed", SEEDS)
def test_t1_every_task_is_in_exactly_one_place_and_its_record_agrees(
    broker: Broker, seed: int
) -> None:
    run = RandomRun(broker, seed)
    seen: set[str] = set()
    for step in range(STEPS):
        name, _ = run.step()
        now = view(broker.client, broker.keys)
        assert now.violations() == [], f"after {name} #{step}"
        seen |= {r["state"] for r in now.records.values()}
    # A run that never reached some state would leave part of T1 untested.
    assert seen == {"pending", "delayed", "running", "completed", "dead"}


@pytest.mark.parametrize("seed", SEEDS)
def test_t2_every_task_ends_completed_or_dead(broker: Broker, seed: int) -> None:
    rng = random.Random(seed)
    ids = [f"t{i}" for i in range(150)]
    broker.enqueue_many(
        [NewTask(t, delay=rng.choice([0, 0, 0.02]), max_retries=rng.randint(0, 3)) for t in ids]
    )
    outcomes = {"ack": 0, "fail": 0, "abandon": 0}
    deadline = time.monotonic() + 20
    while (c := broker.counts()).ready or c.leased or c.delayed:
        assert time.monotonic() < deadline, f"tasks still moving: {broker.counts()}"
        broker.promote(limit=1000)
        broker.reap(limit=1000, **FAST)
        for task in broker.lease_many("w", 0.01, 20).tasks:
            outcome = rng.choices(list(outcomes), weights=[5, 3, 2])[0]
            outcomes[outcome] += 1
            if outcome == "ack":
                assert broker.ack(task.task_id, task.token)
            elif outcome == "fail":
                assert broker.fail(task.task_id, task.token, "boom", **FAST).status != "stale"
        time.sleep(0.005)
    final = {t: broker.task(t) for t in ids}
    ends = {t: r.state if r else "lost" for t, r in final.items()}
    assert set(ends.values()) <= {"completed", "dead"}, ends
    assert sorted(broker.dead()) == sorted(t for t, s in ends.items() if s == "dead")
    assert all(r.last_error for r in final.values() if r and r.state == "dead")
    assert view(broker.client, broker.keys).violations() == []
    assert min(outcomes.values()) > 0, outcomes


def stale_cases(b: Broker) -> list[tuple[str, str, int]]:
    """(why, task, token) for tokens that are not the current holder's."""
    cases: list[tuple[str, str, int]] = []
    b.enqueue("taken")
    old = lease_one(b, "w1", 0.01)
    wait_past(0.01)
    b.reap(backoff_base=0, backoff_max=0)
    cases.append(("reaped, waiting to retry", "taken", old[1]))
    b.promote()
    new = lease_one(b, "w2")
    assert new[0] == "taken"
    cases += [("taken over by another worker", "taken", old[1]),
              ("a token from the future", "taken", new[1] + 1)]  # fmt: skip
    finishes: list[tuple[str, str, Callable[[int], object]]] = [
        ("acked", "acked", lambda t: b.ack("acked", t)),
        ("failed, waiting to retry", "failed", lambda t: b.fail("failed", t, "x").status),
        ("dead", "dead", lambda t: b.fail("dead", t, "x").status),
        ("released", "released", lambda t: b.release("released", t)),
    ]
    for why, task_id, finish in finishes:
        token = leased(b, task_id, max_retries=0 if why == "dead" else 3)
        assert finish(token) in (True, "retry", "dead")
        cases.append((why, task_id, token))
    b.enqueue("never-leased")
    cases += [("never leased", "never-leased", 0), ("no such task", "nobody", 1)]
    return cases


def test_t3_an_operation_with_a_stale_token_changes_nothing(broker: Broker) -> None:
    calls: dict[str, Callable[[str, int], object]] = {
        "heartbeat": lambda t, k: broker.heartbeat(t, k, 10),
        "ack": broker.ack,
        "fail": lambda t, k: broker.fail(t, k, "late").status,
        "release": broker.release,
    }
    for why, task_id, token in stale_cases(broker):
        for name, call in calls.items():
            before = dump(broker.client)
            assert call(task_id, token) in (False, "stale"), f"{name} when {why}"
            assert dump(broker.client) == before, f"{name} when {why} changed something"


def test_t5_a_reused_idempotency_key_returns_the_original_and_creates_nothing(
    broker: Broker,
) -> None:
    rng = random.Random(5)
    first: dict[str, str] = {}
    for i in range(60):
        key = f"k{rng.randrange(15)}"
        before = dump(broker.client)
        result = broker.enqueue(f"t{i}", delay=rng.choice([0, 5]), idempotency_key=key)
        assert result.task_id == first.setdefault(key, f"t{i}")
        assert result.created == (result.task_id == f"t{i}")
        if not result.created:
            assert dump(broker.client) == before
        if rng.random() < 0.3 and (got := broker.lease("w", 10)):
            broker.ack(*got)  # the key still names the task once it is done
    again = broker.enqueue_many([NewTask(f"x{key}", idempotency_key=key) for key in first])
    assert [r.task_id for r in again] == list(first.values()) and not any(r.created for r in again)
    assert broker.task("xk0") is None
    assert len(view(broker.client, broker.keys).records) == len(first)


@pytest.mark.parametrize("seed", SEEDS)
def test_t6_no_task_is_leased_before_its_run_at(broker: Broker, seed: int) -> None:
    rng = random.Random(seed)
    broker.enqueue_many([NewTask(f"t{i}", delay=rng.uniform(0, 0.08)) for i in range(40)])
    done, leases, deadline = 0, 0, time.monotonic() + 10
    while done < 40:
        assert time.monotonic() < deadline
        broker.promote()
        for task in broker.lease_many("w", 10, 5).tasks:
            record = record_of(broker, task.task_id)
            assert record.leased_at >= record.run_at, record
            leases += 1
            if task.retries == 0 and rng.random() < 0.5:
                broker.fail(task.task_id, task.token, "again", backoff_base=0.02)
            else:
                done += broker.ack(task.task_id, task.token)
    assert leases > 40


@pytest.mark.parametrize("seed", SEEDS)
def test_e1_each_state_change_appends_exactly_one_event(broker: Broker, seed: int) -> None:
    run = RandomRun(broker, seed)
    epoch, seen = None, 0
    for step in range(STEPS):
        before = view(broker.client, broker.keys).records
        name, extended = run.step()
        after = view(broker.client, broker.keys).records
        new = events(broker.client, broker.keys, seen)
        changed = {t for t in after if after[t] != before.get(t)} | extended
        assert sorted(e.task for e in new) == sorted(changed), f"{name} #{step}"
        assert all(e.state == after[e.task]["state"] for e in new), f"{name} #{step}"
        assert [e.id for e in new] == [f"{seen + i}-0" for i in range(1, len(new) + 1)]
        seen += len(new)
        epoch = epoch or broker.client.get(broker.keys.epoch)
        assert broker.client.get(broker.keys.epoch) == epoch
    log = events(broker.client, broker.keys)
    assert [e.id for e in log] == [f"{i}-0" for i in range(1, len(log) + 1)]
    told = replay(log)
    stored = view(broker.client, broker.keys).records
    assert told.keys() == stored.keys()
    for task_id, fields in told.items():
        assert fields.items() <= stored[task_id].items(), task_id
    # The lifetime totals behind /metrics are added once per script call: they must
    # still count every event of the (untrimmed) log by type and resulting state.
    totals = broker.client.hgetall(broker.keys.events + ":stats")
    assert {text(k): int(v) for k, v in totals.items()} == \
        dict(Counter(f"{e.type}:{e.state}" for e in log))


def test_e1_the_event_log_is_trimmed_to_its_retention(client: redis.Redis) -> None:
    broker = Broker(client, "test", events_retention=5)
    for i in range(6):
        broker.enqueue(f"t{i}")
    for _ in range(6):
        assert broker.ack(*lease_one(broker))
    assert [e.id for e in events(client, broker.keys)] == [f"{i}-0" for i in range(14, 19)]
    assert client.get(broker.keys.seq) == "18"


def test_e1_a_batch_longer_than_the_retention_leaves_only_its_newest_events(
    client: redis.Redis,
) -> None:
    """The log is trimmed once per script call, after all of the call's appends."""
    broker = Broker(client, "test", events_retention=5)
    broker.enqueue_many([NewTask(f"t{i}") for i in range(8)])
    assert [e.id for e in events(client, broker.keys)] == [f"{i}-0" for i in range(4, 9)]
    leased = broker.lease_many("w", 30, 8).tasks
    assert len(leased) == 8
    assert [(e.id, e.type) for e in events(client, broker.keys)] == \
        [(f"{i}-0", "leased") for i in range(12, 17)]
    assert broker.ack_many([(t.task_id, t.token) for t in leased]) == [True] * 8
    assert [e.id for e in events(client, broker.keys)] == [f"{i}-0" for i in range(20, 25)]
    assert client.xlen(broker.keys.events) == 5


class TestE1WhenACallIsRefused:
    """Events are written when a script's feed closes, so a script must refuse a bad
    argument before its first write: one that failed part way would keep writes whose
    events it never wrote."""

    def snapshot(self, broker: Broker) -> tuple[object, ...]:
        return dump(broker.client), tuple(events(broker.client, broker.keys))

    def test_a_batch_with_a_bad_idempotency_ttl_writes_nothing(self, broker: Broker) -> None:
        broker.enqueue("t0")
        before = self.snapshot(broker)
        k = broker.keys
        good = ["ok", SIMULATE_TASK, "{}", 0, 0, 3, "", 60, "", 5, ""]
        bad = ["bad", SIMULATE_TASK, "{}", 0, 0, 3, "key", "1.5", "", 5, ""]
        with pytest.raises(redis.ResponseError, match="idempotency_ttl must be a whole number"):
            broker.scripts.enqueue(keys=[k.ready, k.delayed, k.events, k.seq, k.epoch, k.wake],
                                   args=[k.prefix, 1000, 2, *good, *bad])
        assert self.snapshot(broker) == before

    def test_an_ack_with_a_bad_ttl_or_retention_writes_nothing(self, broker: Broker) -> None:
        broker.enqueue("t0")
        task_id, token = lease_one(broker)
        before = self.snapshot(broker)
        k = broker.keys
        keys = [k.leased, k.events, k.seq, k.epoch]
        bad_values = ((1000, "1.5", "completed_ttl"), ("many", 60_000, "retention"))
        for retention, ttl, error in bad_values:
            with pytest.raises(redis.ResponseError, match=f"{error} must be a whole number"):
                broker.scripts.ack(keys=keys,
                                   args=[k.prefix, retention, ttl, 1, task_id, token, "1"])
            assert self.snapshot(broker) == before


def raw_calls(broker: Broker, task_id: str, token: int) -> dict[str, tuple[list[str], list[Any]]]:
    """Each script's keys and good ARGV, as its Broker method would pass them."""
    k = broker.keys
    return {
        "enqueue": ([k.ready, k.delayed, k.events, k.seq, k.epoch, k.wake],
                    [k.prefix, 1000, 1, "new", SIMULATE_TASK, "{}", 0, 0, 3, "key", 60, "", 9,
                     "acct-1"]),
        "lease": ([k.ready, k.leased, k.delayed, k.events, k.seq, k.epoch, k.wake, k.rates],
                  [k.prefix, "w", 1000, 1, 1000, "req", 1, SIMULATE_TASK, 1000, 1, 2, 1]),
        "ack": ([k.leased, k.events, k.seq, k.epoch],
                [k.prefix, 1000, 60_000, 1, task_id, token, '{"a":1}']),
        "fail": ([k.leased, k.delayed, k.dlq, k.events, k.seq, k.epoch],
                 [k.prefix, task_id, token, "boom", 1000, 60_000, "0.5", 1000, "ValueError",
                  "boom", "Traceback", "backoff", 0]),
        "reap": ([k.leased, k.delayed, k.dlq, k.events, k.seq, k.epoch],
                 [k.prefix, 100, 1000, 60_000, 7, 1000]),
        "promote": ([k.delayed, k.ready, k.events, k.seq, k.epoch, k.wake], [k.prefix, 100, 1000]),
        "purge": ([k.dlq, k.events, k.seq, k.epoch], [k.prefix, 100, 1, 1000]),
        "cancel": ([k.ready, k.delayed, k.leased, k.dlq, k.events, k.seq, k.epoch],
                   [k.prefix, "ready", 1000, 60_000, ""]),
        "fire": ([k.schedules, k.ready, k.events, k.seq, k.epoch, k.wake],
                 [k.prefix, 1000, "nightly", "v1", '{"version":"v1"}', SIMULATE_TASK, "{}", 3,
                  "all", 60_000, 0, 5, 1, 5]),
    }


# (operation, ARGV index, bad value): each past its range, not a whole number, or (a
# schedule's definition) not a JSON object of the version fired.
BAD_ARGS = [
    ("enqueue", 6, 10**17), ("enqueue", 6, "1e20"), ("enqueue", 6, -1),
    ("enqueue", 7, 10**14), ("enqueue", 7, "soon"), ("enqueue", 8, 1001),
    ("enqueue", 10, 10**10), ("enqueue", 11, "1.5"), ("enqueue", 11, 10**16),
    ("enqueue", 12, 10), ("enqueue", 12, -1), ("enqueue", 12, "high"),
    ("enqueue", 1, 10**20), ("enqueue", 2, 2),
    ("lease", 2, 10**17), ("lease", 2, 0), ("lease", 3, 10**5), ("lease", 4, 10**20),
    ("lease", 6, 2), ("lease", 8, "fast"), ("lease", 8, 10**12), ("lease", 9, 0),
    ("lease", 10, -1), ("lease", 10, 10**5), ("lease", 11, 2), ("lease", 11, "yes"),
    ("ack", 2, 10**19), ("ack", 1, 10**20), ("ack", 3, 2),
    ("fail", 4, 10**15), ("fail", 5, 10**15), ("fail", 6, "1.5"), ("fail", 6, "nan"),
    ("fail", 7, 10**20), ("fail", 11, "later"), ("fail", 11, ""), ("fail", 12, -1),
    ("fail", 12, 10**15), ("fail", 12, "1.5"),
    ("reap", 1, -1), ("reap", 2, 10**15), ("reap", 3, 10**15), ("reap", 4, 2**31),
    ("reap", 5, 10**20),
    ("promote", 1, 0), ("promote", 1, 10**6), ("promote", 2, 10**20),
    ("purge", 1, -1), ("purge", 2, 10**19), ("purge", 3, 10**20),
    ("cancel", 2, "many"), ("cancel", 3, 0), ("cancel", 3, 10**20), ("cancel", 4, "done"),
    ("fire", 1, 0), ("fire", 4, "not json"), ("fire", 4, '{"version":"v2"}'),
    ("fire", 4, '{"version":"v1","pad":"' + "x" * 5000 + '"}'), ("fire", 7, 1001),
    ("fire", 9, 0), ("fire", 9, 10**15), ("fire", 10, -1), ("fire", 10, 10**14),
    ("fire", 11, 10), ("fire", 11, "high"), ("fire", 12, 10**5), ("fire", 12, 2),
    ("fire", 13, "soon"), ("fire", 13, 10**14),
]  # fmt: skip


def every_write_waiting(broker: Broker) -> tuple[str, int]:
    """A due delayed task, an expired lease, a dead task, a held lease (returned) and a
    ready task: every script has a write to make."""
    for task_id in ("due", "expired", "dead", "held", "ready"):
        broker.enqueue(task_id, delay=0.01 if task_id == "due" else 0, max_retries=0)
    lease_one(broker, seconds=0.01)  # "expired": enqueued first, so leased first
    broker.fail("dead", lease_one(broker)[1], "boom")
    held = lease_one(broker)
    wait_past(0.01)
    return held


@pytest.mark.parametrize("operation", sorted({operation for operation, _, _ in BAD_ARGS}))
def test_each_raw_call_with_good_arguments_writes(broker: Broker, operation: str) -> None:
    keys, args = raw_calls(broker, *every_write_waiting(broker))[operation]
    before = dump(broker.client)
    broker.scripts.by_name(operation)(keys=keys, args=args)
    assert dump(broker.client) != before


def test_e1_a_run_at_over_ten_years_ahead_is_refused_before_the_first_write(
    broker: Broker,
) -> None:
    keys, args = raw_calls(broker, *every_write_waiting(broker))["enqueue"]
    args[7] = broker.server_time_ms() + 3651 * 86_400_000
    before = dump(broker.client)
    with pytest.raises(redis.ResponseError, match="more than ten years after the server time"):
        broker.scripts.enqueue(keys=keys, args=args)
    assert dump(broker.client) == before


@pytest.mark.parametrize(("operation", "index", "value"), BAD_ARGS)
def test_e1_a_script_refuses_an_argument_out_of_range_before_its_first_write(
    broker: Broker, operation: str, index: int, value: object
) -> None:
    keys, args = raw_calls(broker, *every_write_waiting(broker))[operation]
    args[index] = value
    before = dump(broker.client)
    refused = r"must be (a (whole )?number|one of|a JSON object)|needs \d+ ARGV"
    with pytest.raises(redis.ResponseError, match=refused):
        broker.scripts.by_name(operation)(keys=keys, args=args)
    assert dump(broker.client) == before
