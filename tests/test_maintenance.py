"""Maintenance on the worker loop's thread: promoting, reaping and purging on their own
clocks, and at once when a lease said something is due; lifting the rate limits its app
no longer declares."""

from __future__ import annotations

import logging
import time

import pytest
import redis

from taskq.broker import Broker, NewTask
from taskq.errors import BrokerError
from taskq.rates import RateLimit
from taskq.registry import MAX_LISTED, Presence, register, unregister
from taskq.settings import Settings
from taskq.worker import maintenance as module
from taskq.worker.maintenance import EVERY_SECONDS, Maintenance


def test_promotes_within_its_interval_only_when_a_lease_said_something_is_due(
    broker: Broker, settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(module, "EVERY_SECONDS", 60.0)  # no interval passes in the test
    maintenance = Maintenance(broker, settings)
    assert maintenance.run(backlog=False) == 0  # its first look: nothing delayed yet
    broker.enqueue("soon", delay=0.002, name="x")
    time.sleep(0.005)
    # Due, but looked for a moment ago: left to the next interval...
    assert maintenance.run(backlog=False) == 0
    assert broker.counts().delayed == 1
    # ...unless a lease found it due, which cannot wait for the interval.
    assert maintenance.run(backlog=False, due=True) == 1
    assert broker.counts().ready == 1


def test_looks_again_once_its_interval_has_passed(broker: Broker, settings: Settings) -> None:
    maintenance = Maintenance(broker, settings)
    maintenance.run(backlog=False)
    broker.enqueue("soon", delay=0.002, name="x")
    time.sleep(EVERY_SECONDS + 0.005)
    assert maintenance.run(backlog=False) == 1


def throttled(broker: Broker, ids: str) -> None:
    """Tasks of "slow" (`ids`, one a letter) leased under a limit of one an hour, as a
    worker of a deploy that declares it leases them: the first starts, the rest wait."""
    old = Broker(broker.client, broker.queue)
    old.rate_limits = (RateLimit("slow", 1 / 3600),)
    old.enqueue_many([NewTask(t, name="slow") for t in ids])
    assert len(old.lease_many("w-old", 30, len(ids)).tasks) == 1


def test_lifts_a_removed_limit_as_it_starts_and_again_now_and_then(
    broker: Broker, settings: Settings, monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(module, "LIFT_EVERY_SECONDS", 1.0)
    throttled(broker, "abc")
    maintenance = Maintenance(broker, settings, unlimited=("slow",))
    assert maintenance.run(backlog=False) == 2  # b and c: lifted, then promoted
    assert len(broker.lease_many("w", 30, 10).tasks) == 2
    # A worker of the deploy before, not yet stopped, throttles under the limit again.
    throttled(broker, "def")
    assert maintenance.run(backlog=False, due=True) == 0  # lifted under a second ago
    time.sleep(1.05)
    with caplog.at_level(logging.INFO, logger="taskq.worker"):
        assert maintenance.run(backlog=False, due=True) == 2  # e and f
    assert broker.counts().delayed == 0
    # A limit lifted again means a worker still applies it: the operator is told.
    (warning,) = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert "lifted 1 rate limit(s) again" in warning.getMessage()
    assert "every worker of a queue must declare the same limits" in warning.getMessage()


def test_lifts_the_limit_of_a_task_no_live_worker_runs_any_more(
    broker: Broker, settings: Settings
) -> None:
    throttled(broker, "abc")  # b and c wait an hour each for a slot
    # The deploy that declared "slow" has gone, and this worker runs no such task.
    maintenance = Maintenance(broker, settings)
    assert maintenance.run(backlog=False) == 2  # lifted, then promoted: on to the DLQ
    assert broker.rate_limited_names() == []


def test_a_lift_of_a_long_line_asks_the_registry_once_not_once_a_turn(
    broker: Broker, settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each look walks the live workers when a name is unrun; a line of 200,000 tasks
    is made due over 200 turns."""
    monkeypatch.setattr(module, "LIFT_LIMIT", 2)
    asked: list[int] = []
    read = module.not_run
    monkeypatch.setattr(module, "not_run", lambda *args: asked.append(1) or read(*args))
    throttled(broker, "abcdef")  # b to f wait an hour each for a slot
    maintenance = Maintenance(broker, settings)
    promoted = 0
    for _ in range(20):  # three lifts; a task made due this ms may be promoted the next
        promoted += maintenance.run(backlog=False, due=True)
        if promoted == 5:
            break
        time.sleep(0.005)
    assert promoted == 5 and broker.counts().delayed == 0
    assert broker.rate_limited_names() == [] and len(asked) == 1


def test_keeps_the_limit_of_a_task_a_live_worker_of_the_deploy_before_runs(
    broker: Broker, settings: Settings
) -> None:
    throttled(broker, "abc")
    old = Presence(worker_id="w-old", host="box", pid=1, queues=(broker.queue,),
                   concurrency=1, tasks=("slow",), version="0")
    register(broker, old, in_hand=1, ttl=30)
    maintenance = Maintenance(broker, settings)
    assert maintenance.run(backlog=False) == 0
    assert broker.counts().delayed == 2 and broker.rate_limited_names() == ["slow"]


def test_keeps_the_limit_of_a_task_a_live_worker_past_a_listing_of_workers_runs(
    broker: Broker, settings: Settings
) -> None:
    """With more live workers than one read of the registry lists, the one that runs the
    task may be any of them."""
    throttled(broker, "abc")
    for n in range(MAX_LISTED + 1):
        # The last to beat expires last: a listing of the soonest to expire leaves it out.
        presence = Presence(worker_id=f"w-{n:04}", host="box", pid=n, queues=(broker.queue,),
                            concurrency=1, tasks=("slow",) if n == MAX_LISTED else ("fast",),
                            version="0")
        register(broker, presence, in_hand=0, ttl=30)
    maintenance = Maintenance(broker, settings, known=("fast",))
    assert maintenance.run(backlog=False) == 0
    assert broker.counts().delayed == 2 and broker.rate_limited_names() == ["slow"]


def test_a_lift_that_fails_holds_up_no_other_maintenance(
    broker: Broker, settings: Settings, client: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(module, "LIFT_RETRY_SECONDS", 0.05)
    throttled(broker, "ab")  # b waits an hour for a slot
    broker.enqueue("soon", delay=0.002)
    time.sleep(0.005)
    maintenance = Maintenance(broker, settings, unlimited=("slow",))
    client.config_set("maxmemory", 1)  # the lift's writes are refused
    try:
        assert maintenance.run(backlog=False) == 1  # "soon" promoted all the same
    finally:
        client.config_set("maxmemory", 0)
    assert maintenance.run(backlog=False, due=True) == 0  # not every turn
    time.sleep(0.06)
    assert maintenance.run(backlog=False, due=True) == 1  # tried again: b


def test_a_lift_that_keeps_failing_is_tried_and_logged_once_a_retry_interval(
    broker: Broker, settings: Settings, client: redis.Redis,
    caplog: pytest.LogCaptureFixture
) -> None:
    client.hset(broker.keys.rates, "slow", "1")
    client.rpush(broker.keys.prefix + "released_at", "x")  # so every lift is refused
    maintenance = Maintenance(broker, settings, unlimited=("slow",))
    with caplog.at_level("INFO", logger="taskq.worker"):
        for _ in range(5):
            maintenance.run(backlog=False, due=True)
    said = [r.getMessage() for r in caplog.records if "lifting the rate limits" in r.getMessage()]
    assert len(said) == 1 and "tried again in 1s" in said[0], said


def test_an_index_of_another_type_holds_up_only_the_lifts_it_decides_warned_once(
    broker: Broker, settings: Settings, client: redis.Redis,
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The limits this worker's own leases do not apply are lifted all the same."""
    monkeypatch.setattr(module, "LIFT_RETRY_SECONDS", 0.0)
    throttled(broker, "abc")  # b and c wait an hour for a slot of "slow"
    client.hset(broker.keys.rates, "gone", "1")  # a limit of a name no worker runs
    client.set(broker.keys.runners, "not taskq's")  # so every look at it is refused
    maintenance = Maintenance(broker, settings, unlimited=("slow",))
    with caplog.at_level("INFO", logger="taskq.worker"):
        assert maintenance.run(backlog=False, due=True) == 2  # "slow" lifted: b and c
        for _ in range(3):
            maintenance.run(backlog=False, due=True)
        client.delete(broker.keys.runners)
        maintenance.run(backlog=False, due=True)
    said = [(r.levelname, r.getMessage()) for r in caplog.records
            if "task names" in r.getMessage()]
    assert [level for level, _ in said] == ["WARNING", "INFO"], said
    assert "WRONGTYPE" in said[0][1]
    assert broker.rate_limited_names() == []  # "gone" lifted once the index reads


def test_a_purge_redis_refuses_waits_its_own_interval_not_every_turn(
    broker: Broker, settings: Settings, client: redis.Redis
) -> None:
    maintenance = Maintenance(broker, settings)
    client.set(broker.keys.dlq, "not taskq's")  # every purge is refused
    with pytest.raises(BrokerError, match="WRONGTYPE"):
        maintenance.run(backlog=False)
    broker.enqueue("soon", delay=0.002)
    time.sleep(0.005)
    assert maintenance.run(backlog=False, due=True) == 1  # no purge until its next turn


def test_a_full_purge_batch_is_followed_by_another_the_next_turn(
    broker: Broker, settings: Settings
) -> None:
    """Tasks dying faster than a batch a purge interval must not fill the DLQ for good."""
    broker.enqueue_many([NewTask(f"t{n}", max_retries=0) for n in range(2 * module.LIMIT + 50)])
    for leased in broker.lease_many("w", 30, 1000).tasks:
        broker.fail(leased.task_id, leased.token, "boom")
    time.sleep(0.01)
    maintenance = Maintenance(broker, Settings.from_env({}, redis_url=settings.redis_url,
                                                        dead_ttl_seconds=0.001))
    dead = []
    for _ in range(3):
        time.sleep(EVERY_SECONDS + 0.005)
        maintenance.run(backlog=False)
        dead.append(broker.counts().dead)
    assert dead == [module.LIMIT + 50, 50, 0]


def test_a_purge_keeps_the_dead_tasks_a_live_worker_keeps_longer(
    broker: Broker, settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One worker set to keep dead tasks a millisecond must not empty the others' DLQ."""
    broker.enqueue_many([NewTask(f"t{n}", max_retries=0) for n in range(3)])
    for leased in broker.lease_many("w", 30, 10).tasks:
        broker.fail(leased.task_id, leased.token, "boom")
    time.sleep(0.01)
    keeper = Presence(worker_id="w-keeps", host="box", pid=1, queues=(broker.queue,),
                      concurrency=1, tasks=(), version="0", dead_ttl_seconds=604800)
    register(broker, keeper, in_hand=0, ttl=30)
    monkeypatch.setattr(module, "PURGE_EVERY_SECONDS", 0.0)
    short = Settings.from_env({}, redis_url=settings.redis_url, dead_ttl_seconds=0.001)
    maintenance = Maintenance(broker, short)
    maintenance.run(backlog=False)
    assert broker.counts().dead == 3
    unregister(broker, "w-keeps")  # gone: this worker's own retention holds
    time.sleep(EVERY_SECONDS + 0.005)
    maintenance.run(backlog=False)
    assert broker.counts().dead == 0


def test_a_registry_record_that_keeps_dead_tasks_beyond_any_bound_stops_no_purge(
    broker: Broker, settings: Settings, client: redis.Redis
) -> None:
    """Written by hand: register_worker refuses more than ten years, the purge too."""
    keeper = Presence(worker_id="w-odd", host="box", pid=1, queues=(broker.queue,),
                      concurrency=1, tasks=(), version="0", dead_ttl_seconds=60)
    register(broker, keeper, in_hand=0, ttl=30)
    client.zadd(broker.keys.dead_ttls, {"w-odd": 1e300})
    broker.enqueue("t", max_retries=0)
    (leased,) = broker.lease_many("w", 30, 1).tasks
    broker.fail(leased.task_id, leased.token, "boom")
    Maintenance(broker, settings).run(backlog=False)  # purged nothing, raised nothing
    assert broker.counts().dead == 1


def test_a_retention_index_of_another_type_holds_the_purge_back_with_one_warning(
    broker: Broker, settings: Settings, client: redis.Redis,
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Whether a live worker keeps dead tasks longer cannot be read then: a purge by
    this worker's retention alone could empty a DLQ the others keep for a week."""
    monkeypatch.setattr(module, "PURGE_EVERY_SECONDS", 0.0)
    broker.enqueue("t", max_retries=0)
    (leased,) = broker.lease_many("w", 30, 1).tasks
    broker.fail(leased.task_id, leased.token, "boom")
    time.sleep(0.01)
    client.set(broker.keys.dead_ttls, "not taskq's")
    maintenance = Maintenance(broker, Settings.from_env({}, redis_url=settings.redis_url,
                                                        dead_ttl_seconds=0.001))
    with caplog.at_level(logging.INFO, logger="taskq.worker"):
        for _ in range(2):
            time.sleep(EVERY_SECONDS + 0.005)
            maintenance.run(backlog=False)  # raises nothing
        assert broker.counts().dead == 1
        client.delete(broker.keys.dead_ttls)
        time.sleep(EVERY_SECONDS + 0.005)
        maintenance.run(backlog=False)
    assert broker.counts().dead == 0
    said = [(r.levelname, r.getMessage()) for r in caplog.records if "purged" in r.getMessage()]
    assert [level for level, _ in said] == ["WARNING", "INFO"], said
    assert "cannot be read" in said[0][1] and "WRONGTYPE" in said[0][1]


def register_many(broker: Broker, count: int, ttl: float, dead_ttl_seconds: float = 0) -> None:
    """`count` live workers of the queue that run no task, each registered for `ttl`."""
    for n in range(count):
        worker = Presence(worker_id=f"w{n}", host="box", pid=n, queues=(broker.queue,),
                          concurrency=1, tasks=(), version="0",
                          dead_ttl_seconds=dead_ttl_seconds)
        register(broker, worker, in_hand=0, ttl=ttl)


def test_keeps_the_limit_a_live_worker_runs_beyond_the_thousand_a_listing_shows(
    broker: Broker, settings: Settings
) -> None:
    throttled(broker, "abc")
    register_many(broker, MAX_LISTED, ttl=20)  # listed first: their records expire sooner
    old = Presence(worker_id="w-old", host="box", pid=1, queues=(broker.queue,),
                   concurrency=1, tasks=("slow",), version="0")
    register(broker, old, in_hand=1, ttl=30)
    assert Maintenance(broker, settings).run(backlog=False) == 0
    assert broker.counts().delayed == 2 and broker.rate_limited_names() == ["slow"]


def test_keeps_the_dead_tasks_a_live_worker_keeps_beyond_the_thousand_a_listing_shows(
    broker: Broker, settings: Settings
) -> None:
    broker.enqueue_many([NewTask(f"t{n}", max_retries=0) for n in range(3)])
    for leased in broker.lease_many("w", 30, 10).tasks:
        broker.fail(leased.task_id, leased.token, "boom")
    time.sleep(0.01)
    register_many(broker, MAX_LISTED, ttl=20, dead_ttl_seconds=0.001)
    keeper = Presence(worker_id="w-keeps", host="box", pid=1, queues=(broker.queue,),
                      concurrency=1, tasks=(), version="0", dead_ttl_seconds=604800)
    register(broker, keeper, in_hand=0, ttl=30)
    short = Settings.from_env({}, redis_url=settings.redis_url, dead_ttl_seconds=0.001)
    Maintenance(broker, short).run(backlog=False)
    assert broker.counts().dead == 3


def test_the_batches_after_a_full_purge_batch_read_the_registry_no_more(
    broker: Broker, settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The registry is asked once a purge interval, not once a turn while a backlog of
    dead tasks lasts."""
    broker.enqueue_many([NewTask(f"t{n}", max_retries=0) for n in range(2 * module.LIMIT + 50)])
    for leased in broker.lease_many("w", 30, 1000).tasks:
        broker.fail(leased.task_id, leased.token, "boom")
    time.sleep(0.01)
    reads: list[int] = []
    read = module.longest_dead_ttl
    monkeypatch.setattr(module, "longest_dead_ttl",
                        lambda *args: reads.append(1) or read(*args))
    maintenance = Maintenance(broker, Settings.from_env({}, redis_url=settings.redis_url,
                                                        dead_ttl_seconds=0.001))
    for _ in range(3):
        time.sleep(EVERY_SECONDS + 0.005)
        maintenance.run(backlog=False)
    assert broker.counts().dead == 0 and len(reads) == 1
def test_a_purge_keeps_the_dead_tasks_of_a_live_worker_past_a_listing_of_workers(
    broker: Broker, settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With more live workers than one read of the registry lists, the one that keeps
    dead tasks longest may be any of them."""
    broker.enqueue("t", max_retries=0)
    leased = broker.lease("w", 30)
    assert leased is not None
    broker.fail(leased[0], leased[1], "boom")
    time.sleep(0.01)
    for n in range(MAX_LISTED + 1):
        # The last to beat expires last: a listing of the soonest to expire leaves it out.
        presence = Presence(worker_id=f"w-{n:04}", host="box", pid=n, queues=(broker.queue,),
                            concurrency=1, tasks=(), version="0",
                            dead_ttl_seconds=604800 if n == MAX_LISTED else 0.001)
        register(broker, presence, in_hand=0, ttl=30)
    monkeypatch.setattr(module, "PURGE_EVERY_SECONDS", 0.0)
    short = Settings.from_env({}, redis_url=settings.redis_url, dead_ttl_seconds=0.001)
    Maintenance(broker, short).run(backlog=False)
    assert broker.counts().dead == 1
