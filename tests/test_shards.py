"""A sharded queue: its shards' names and slots, each task routed to one shard by its id
or idempotency key, the layout producers and workers must agree on, and workers that
drain every shard, in-process and as `taskq worker` processes. Runs on a single node
and on the local cluster (where the shards sit on different primaries)."""

from __future__ import annotations

import asyncio
import dataclasses
import math
import signal
import sqlite3
import uuid
import zlib
from collections import Counter
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
import redis
from redis.crc import REDIS_CLUSTER_HASH_SLOTS

from conftest import ON_CLUSTER
from helpers import events, in_other_processes, view
from taskq import App, Worker, current_task
from taskq.broker import Broker
from taskq.errors import BrokerError, ConfigError, InvalidTaskError, PayloadError, TaskqError
from taskq.keys import check_queue_name
from taskq.results import NewTask
from taskq.schedules import make_schedule
from taskq.settings import Settings
from taskq.shards import (
    SHARDS_KEY,
    Layout,
    layout_holding,
    layouts,
    route,
    shard_holding,
    shard_names,
    slot_of,
)
from taskq.tools.embedded import EmbeddedRedis
from taskq.tools.tracecheck import read_log, validate
from waiting import WorkerProcesses, wait_for_state, wait_until, worker_env
from worker_support import WorkerThread

CHARGE = {"args": [], "kwargs": {"charge": 1}}


@pytest.fixture
def sharded(settings: Settings, client: redis.Redis) -> Iterator[App]:
    """An App whose queue, of this test's own, has three shards."""
    app = App(queue=f"s-{uuid.uuid4().hex[:8]}", settings=settings, shards=3)
    yield app
    if app._sharded is not None:
        app._sharded.brokers[0].client.close()


def shard_brokers(client: redis.Redis, app: App) -> list[Broker]:
    assert app.layout is not None
    return [Broker(client, name) for name in app.layout.shards]


class TestTheLayout:
    def test_each_shard_lies_in_its_own_part_of_the_slot_space(self) -> None:
        for count in (2, 3, 5, 16):
            names = shard_names("emails", count)
            assert len(set(names)) == count
            parts = [slot_of(n) * count // REDIS_CLUSTER_HASH_SLOTS for n in names]
            assert parts == list(range(count)), (count, names)
            assert all(check_queue_name(n) == n and n.startswith("emails~") for n in names)

    def test_names_are_the_same_in_every_process(self) -> None:
        code = "from taskq.shards import Layout\nprint(Layout.of('emails', 3).stored)"
        assert in_other_processes(code) == {",".join(shard_names("emails", 3))}
        assert shard_names("emails", 3) == ("emails~1", "emails~0", "emails~2")

    @pytest.mark.parametrize(("queue", "count", "message"), [
        ("emails", 0, "shards"), ("emails", 65, "shards"), ("emails~3", 2, "is a shard"),
        ("bad name", 2, "invalid queue name"),
    ])
    def test_a_layout_taskq_cannot_use_is_refused(self, queue: str, count: int,
                                                  message: str) -> None:
        with pytest.raises((ConfigError, InvalidTaskError), match=message):
            shard_names(queue, count)

    def test_a_task_routes_by_its_id_and_drawn_ids_land_on_their_keys_shard(self) -> None:
        layout = Layout.of("emails", 3)
        assert route("abc", 3) == zlib.crc32(b"abc") % 3
        assert layout.shard_of("abc") == layout.shards[route("abc", 3)]
        for _ in range(50):
            assert layout.shard_of(layout.new_id("key-1")) == layout.shard_of("key-1")
        fitting = layout.matching("order-7", "key-1")
        assert fitting.startswith("order-7") and route(fitting, 3) == route("key-1", 3)

    @pytest.mark.skipif(not ON_CLUSTER, reason="a single node has no primaries to spread over")
    def test_on_the_local_cluster_three_shards_sit_on_three_primaries(
        self, client: redis.Redis
    ) -> None:
        primaries = {client.get_node_from_key(Broker(client, name).keys.ready).name  # type: ignore[attr-defined]
                     for name in shard_names("emails", 3)}
        assert len(primaries) == 3

    def test_settings_give_the_default_shard_count(self, settings: Settings) -> None:
        app = App(queue="emails", settings=dataclasses.replace(settings, shards=4))
        assert app.layout is not None and app.layout.count == 4
        assert App(queue="emails", settings=settings).layout is None
        assert App(queue="emails", settings=settings, shards=1).layout is None


class TestProducing:
    @pytest.mark.parametrize("key", [123, "\ud800", "", "k" * 513], ids=["int", "surrogate",
                                                                       "empty", "too-long"])
    def test_an_idempotency_key_routing_cannot_use_is_refused_as_unsharded(
        self, sharded: App, key: object
    ) -> None:
        @sharded.task("keyed")
        def keyed() -> None: ...

        with pytest.raises(InvalidTaskError, match="invalid idempotency key"):
            keyed.call(idempotency_key=key)

    @pytest.mark.parametrize(("task", "said"), [
        (NewTask(task_id="abc", idempotency_key="\ud800"), "invalid idempotency key"),
        (NewTask(task_id="abc", idempotency_key=5), "invalid idempotency key"),  # type: ignore[arg-type]
        (NewTask(task_id=12345), "invalid task id 12345"),  # type: ignore[arg-type]
        (NewTask(task_id="\udcff"), "invalid task id"),
    ], ids=["surrogate-key", "int-key", "int-id", "surrogate-id"])
    def test_an_id_or_key_given_to_enqueue_many_that_routing_cannot_use_is_refused_as_unsharded(
        self, sharded: App, client: redis.Redis, task: NewTask, said: str
    ) -> None:
        with pytest.raises(InvalidTaskError, match=said):
            sharded.producer.enqueue_many([task])
        assert sum(b.counts().ready for b in shard_brokers(client, sharded)) == 0

    def test_a_bad_call_of_many_is_named_by_its_place_among_them_not_on_its_shard(
        self, sharded: App, client: redis.Redis
    ) -> None:
        @sharded.task("noop")
        def noop(n: object) -> None:
            pass

        calls = [noop.call(n) for n in range(40)]
        calls[37] = noop.call([math.nan])
        with pytest.raises(PayloadError, match=r"^item 37 of 40, counted from 0 "):
            sharded.producer.enqueue_many(calls)
        calls[37] = NewTask(task_id="no spaces", name="noop")
        with pytest.raises(InvalidTaskError, match=r"^item 37 of 40, counted from 0 .*invalid "
                                                   r"task id"):
            sharded.producer.enqueue_many(calls)
        assert sum(b.counts().ready for b in shard_brokers(client, sharded)) == 0

    def test_tasks_spread_over_every_shard_and_each_is_found_by_its_id(
        self, sharded: App, client: redis.Redis
    ) -> None:
        @sharded.task("noop")
        def noop(n: int) -> int:
            return n

        handles = noop.enqueue_many([(n,) for n in range(300)])
        assert all(h.created for h in handles)
        brokers = shard_brokers(client, sharded)
        per_shard = [b.counts().ready for b in brokers]
        assert sum(per_shard) == 300 and min(per_shard) > 60, per_shard
        for handle in handles[:30]:
            assert sharded.handle(handle.task_id).status() == "pending"
            # The id alone says which shard holds the task.
            assert sharded.layout is not None
            home = sharded.layout.shard_of(handle.task_id)
            assert client.exists(Broker(client, home).keys.task(handle.task_id))
        for broker in brokers:
            assert view(client, broker.keys).violations() == []
        assert layouts(client)[sharded.queue] == sharded.layout
        client.hset(SHARDS_KEY, "junk", "junk~1,bad name")  # written by hand
        assert set(layouts(client)) == {sharded.queue}

    def test_one_idempotency_key_names_one_task_across_every_shard(
        self, sharded: App, client: redis.Redis
    ) -> None:
        @sharded.task("noop")
        def noop(n: int) -> int:
            return n

        first = [noop.enqueue(n, idempotency_key=f"order-{n}") for n in range(20)]
        again = [noop.enqueue(n, idempotency_key=f"order-{n}") for n in range(20)]
        assert all(h.created for h in first) and not any(h.created for h in again)
        assert [h.task_id for h in again] == [h.task_id for h in first]
        assert sum(b.counts().ready for b in shard_brokers(client, sharded)) == 20

    def test_an_id_given_with_a_key_of_another_shard_is_refused_sending_nothing(
        self, sharded: App, client: redis.Redis
    ) -> None:
        """Else `task_id="x"` sent bare and again with the key would make two tasks "x",
        one on each shard (the Shards model's Shards_ExplicitIds.cfg)."""
        @sharded.task("noop")
        def noop(n: int) -> int:
            return n

        assert sharded.layout is not None
        elsewhere = next(t for t in (f"id-{i}" for i in range(100))
                         if route(t, 3) != route("the-key", 3))
        with pytest.raises(InvalidTaskError, match="route to different shards"):
            noop.enqueue_many([noop.call(0), noop.call(1, task_id=elsewhere,
                                                      idempotency_key="the-key")])
        assert sum(b.counts().ready for b in shard_brokers(client, sharded)) == 0
        fitting = sharded.layout.matching("id", "the-key")
        noop.enqueue(1, task_id=fitting, idempotency_key="the-key")
        assert noop.enqueue(2, task_id=fitting).created is False
        assert Broker(client, sharded.layout.shard_of("the-key")).counts().ready == 1
        assert sharded.handle(fitting).status() == "pending"
        assert sharded.handle("no-such-task").status() == "unknown"

    def test_producers_that_count_the_shards_differently_are_refused(
        self, sharded: App, settings: Settings, client: redis.Redis
    ) -> None:
        @sharded.task("noop")
        def noop(n: int) -> int:
            return n

        noop.enqueue(1)
        other = App(queue=sharded.queue, settings=settings, shards=2)
        wrong = other.task("noop")(lambda n: n)
        with pytest.raises(ConfigError, match=r"has 3 shards in Redis.*gives it 2"):
            wrong.enqueue(2)
        assert sum(b.counts().ready for b in shard_brokers(client, sharded)) == 1
        assert client.hget(SHARDS_KEY, sharded.queue) == sharded.layout.stored  # type: ignore[union-attr]

    def test_a_producer_that_gives_a_sharded_queue_no_shards_is_refused(
        self, sharded: App, settings: Settings, client: redis.Redis
    ) -> None:
        sharded.task("noop")(lambda: None).enqueue()
        plain = App(queue=sharded.queue, settings=settings)
        with pytest.raises(ConfigError, match=r"has 3 shards in Redis.*TASKQ_SHARDS=3"):
            plain.task("noop")(lambda: None).enqueue()

        async def produce() -> None:
            try:
                await plain.task("other")(lambda: None).enqueue_async()
            finally:
                await plain.aclose()

        with pytest.raises(ConfigError, match=r"has 3 shards in Redis"):
            asyncio.run(produce())
        assert Broker(client, sharded.queue).counts().ready == 0
        assert sharded.queue.encode() not in client.smembers("taskq:queues")
        plain.broker.client.close()

    def test_a_plain_app_on_a_shards_name_is_refused_as_a_producer(
        self, sharded: App, settings: Settings, client: redis.Redis
    ) -> None:
        assert sharded.layout is not None
        shard = App(queue=sharded.layout.shards[0], settings=settings)
        with pytest.raises(ConfigError, match=r"is a shard's name.*shards=N"):
            shard.task("noop")(lambda: None).enqueue(idempotency_key="k")
        with pytest.raises(ConfigError, match=r"is a shard's name"):
            shard.flows()
        assert Broker(client, sharded.layout.shards[0]).counts().ready == 0
        # A handle on a task of the shard is still made.
        assert shard.handle("t1").status() == "unknown"
        shard.broker.client.close()

    def test_a_schedules_tick_is_found_on_the_first_shard_where_it_fires(
        self, sharded: App, client: redis.Redis
    ) -> None:
        assert sharded.layout is not None
        fires_on = Broker(client, sharded.schedules_queue)
        tick = make_schedule(name="tick", task="noop", cron=None, every=timedelta(seconds=1),
                             tz=None, args=(), kwargs={}, policy="all",
                             grace=timedelta(minutes=1), max_retries=3)
        fires_on.fire(tick)
        # Three past ticks of which one at least routes elsewhere by its id alone: the
        # latest such window in the last minute (all 60 ids route to 0 once in 3**60).
        second = fires_on.server_time_ms() // 1000 - 3
        start = next(s * 1000 for s in range(second, second - 57, -1)
                     if {route(tick.task_id((s + k) * 1000), 3) for k in (1, 2, 3)} != {0})
        client.hset(fires_on.keys.schedules, "last:tick", start)
        task_ids = fires_on.fire(tick, tick.ticks(start, start + 3000, 1000), start).task_ids
        assert len(task_ids) == 3
        assert {route(t, 3) for t in task_ids} != {0}
        assert [sharded.handle(t).status() for t in task_ids] == ["pending"] * 3
        assert shard_holding(task_ids[0], 3) == 0 and shard_holding("plain-id", 3) == route(
            "plain-id", 3)

    def test_a_plain_queue_holding_tasks_is_not_sharded_under_them(
        self, settings: Settings, client: redis.Redis
    ) -> None:
        name = f"s-{uuid.uuid4().hex[:8]}"
        Broker(client, name).enqueue("old", delay=60)
        sharded = App(queue=name, settings=settings, shards=3)
        with pytest.raises(ConfigError, match=r"holds tasks as a plain queue \(ready 0, "
                                              r"other priorities 0, delayed 1.*Drain it"):
            sharded.task("noop")(lambda: None).enqueue()

        async def produce() -> None:
            try:
                await sharded.task("other")(lambda: None).enqueue_async()
            finally:
                await sharded.aclose()

        with pytest.raises(ConfigError, match="holds tasks as a plain queue"):
            asyncio.run(produce())
        assert client.hget(SHARDS_KEY, name) is None

    def test_limits_that_cannot_hold_across_shards_are_refused(self, sharded: App) -> None:
        with pytest.raises(ConfigError, match="cannot hold across shards"):
            sharded.task("limited", rate_limit="10/s")(lambda: None)
        with pytest.raises(ConfigError, match="cannot hold across shards"):
            sharded.task("capped", max_concurrency=2)(lambda: None)
        with pytest.raises(ConfigError, match="cannot hold across shards"):
            sharded.queue_rate_limit("100/s")
        with pytest.raises(ConfigError, match="no one Broker"):
            sharded.broker  # noqa: B018

    def test_coroutines_enqueue_onto_the_shards_too(
        self, sharded: App, client: redis.Redis
    ) -> None:
        @sharded.task("noop")
        def noop(n: int) -> int:
            return n

        async def produce() -> list[str]:
            handles = await noop.enqueue_many_async([(n,) for n in range(60)])
            one = await noop.enqueue_async(7, idempotency_key="k")
            assert (await sharded.handle_async(one.task_id).status_async()) == "pending"
            await sharded.aclose()
            return [h.task_id for h in [*handles, one]]

        ids = asyncio.run(produce())
        per_shard = Counter(route(t, 3) for t in ids[:60])
        assert len(per_shard) == 3
        assert sum(b.counts().ready for b in shard_brokers(client, sharded)) == 61

    def test_handles_on_two_shards_made_outside_a_loop_belong_to_the_first_that_awaits(
        self, sharded: App
    ) -> None:
        """The shards' brokers share one client: the second shard's, first used in a
        second loop, took it for its own and failed with "Event loop is closed"."""
        @sharded.task("noop")
        def noop(n: int) -> int:
            return n

        assert sharded.layout is not None
        ids = [next(t for t in iter(sharded.layout.new_id, None) if route(t, 3) == shard)
               for shard in (0, 1)]
        noop.enqueue_many([noop.call(n, task_id=t) for n, t in enumerate(ids)])
        first, second = (sharded.handle_async(t) for t in ids)

        async def read_then_close() -> str:
            try:
                return await first.status_async()
            finally:
                await sharded.aclose()  # closes the client this loop took

        assert asyncio.run(read_then_close()) == "pending"
        with pytest.raises(TaskqError, match="first used in another"):
            asyncio.run(second.status_async())

    def test_a_shard_refused_after_others_took_their_share_says_how_many_went_in(
        self, sharded: App, client: redis.Redis
    ) -> None:
        """The caller gets no handle of the shares that went in: resent under new ids,
        they would be made twice, so the error counts them, as a plain queue's does."""
        @sharded.task("noop")
        def noop(n: int) -> int:
            return n

        shards = shard_brokers(client, sharded)
        first = route("t0", 3)  # its share is sent first
        refusing = shards[(first + 1) % 3]
        client.set(refusing.keys.events, "not a stream")

        def went_in() -> int:
            return sum(client.llen(b.keys.ready) for b in shards)

        calls = [noop.call(n, task_id=f"t{n}") for n in range(60)]
        with pytest.raises(BrokerError) as caught:
            noop.enqueue_many(calls)
        assert went_in() > 0
        assert f"; the {went_in()} task(s) of the batches before this one were enqueued: " \
            "an id that names a task is not enqueued again, so sending the same task ids " \
            "(or idempotency keys) again enqueues only what is missing (this call's: t0, " \
            in str(caught.value)
        before = went_in()
        ids = sorted((f"a{n}" for n in range(60)), key=lambda t: route(t, 3) != first)

        async def produce() -> None:
            try:
                await noop.enqueue_many_async([noop.call(0, task_id=t) for t in ids])
            finally:
                await sharded.aclose()

        with pytest.raises(BrokerError) as caught:
            asyncio.run(produce())
        assert went_in() > before
        assert f"; the {went_in() - before} task(s) of the batches" in str(caught.value)

    def test_the_layout_is_found_from_a_shard_or_the_queue(
        self, sharded: App, client: redis.Redis
    ) -> None:
        sharded.task("noop")(lambda: None).enqueue()
        assert sharded.layout is not None
        assert layout_holding(client, sharded.queue) == sharded.layout
        assert layout_holding(client, sharded.layout.shards[1]) == sharded.layout
        assert layout_holding(client, "plain") is None
        assert layout_holding(client, f"{sharded.queue}~999999") is None


class TestWorkers:
    @pytest.mark.parametrize("limit", ["rate", "concurrency", "queue rate"])
    def test_a_worker_that_names_shards_for_an_app_with_limits_is_refused(
        self, sharded: App, settings: Settings, limit: str
    ) -> None:
        """An app without the shards (TASKQ_SHARDS unset) serving them by name would hold
        each limit once per shard."""
        assert sharded.layout is not None
        plain = App(sharded.queue, settings=settings)
        if limit == "queue rate":
            plain.queue_rate_limit("1/m", queue=sharded.layout.shards[1])
        else:
            plain.task("mod.lim", **({"rate_limit": "1/m"} if limit == "rate"
                                     else {"max_concurrency": 1}))(lambda: None)
        first = sharded.layout.shards[1 if limit == "queue rate" else 0]
        with pytest.raises(ConfigError, match=f"serves '{first}', a "
                           "shard of queue .* on each shard it would hold in full"):
            Worker(plain, settings=settings, queues=list(sharded.layout.shards))

    def test_a_worker_leases_from_every_shard_in_turn_and_drains_them(
        self, sharded: App, settings: Settings, client: redis.Redis
    ) -> None:
        ran: Counter[str] = Counter()

        @sharded.task("where")
        def where(n: int) -> int:
            ran[current_task().queue] += 1
            return n * 2

        handles = where.enqueue_many([(n,) for n in range(90)])
        worker = WorkerThread(sharded, settings, concurrency=4)
        try:
            assert [q.queue for q in worker.worker.queues] == list(sharded.layout.shards)  # type: ignore[union-attr]
            assert [h.result(timeout=20) for h in handles] == [n * 2 for n in range(90)]
        finally:
            worker.close(client)
        assert set(ran) == set(sharded.layout.shards) and sum(ran.values()) == 90  # type: ignore[union-attr]
        for broker in shard_brokers(client, sharded):
            assert broker.counts().leased == 0
            report = validate(read_log(client, broker.keys.events))
            assert report.ok, report.violations[:3]
            assert {e.type for e in events(client, broker.keys)} >= {"enqueued", "leased",
                                                                    "completed"}

    def test_a_worker_given_one_queue_of_a_sharded_app_serves_that_queue_alone(
        self, sharded: App, settings: Settings, client: redis.Redis
    ) -> None:
        """`taskq worker --queue other` (or one shard by name) for a sharded app served
        the app's shards instead: the tasks on `other` never ran, and a fleet of one
        worker a shard had every worker on every shard."""
        assert sharded.layout is not None
        sharded.task("noop")(lambda: None).enqueue()
        other = Broker.from_settings(settings, "other", client=client)
        other.enqueue("elsewhere", name="noop")
        for name in ("other", sharded.layout.shards[1]):
            worker = WorkerThread(sharded, settings, concurrency=1, on=name)
            try:
                assert [q.queue for q in worker.worker.queues] == [name]
                if name == "other":
                    wait_for_state(other, "elsewhere", "completed")
            finally:
                worker.close(client)

    def test_shards_take_turns_so_a_busy_shard_starves_none(
        self, sharded: App, settings: Settings, client: redis.Redis
    ) -> None:
        """All but one task on the first shard: the last shard's task is leased within
        the first few turns, not after the first shard is drained. Judged by the lease
        times in the logs, so a slow machine cannot tip it either way."""
        @sharded.task("noop")
        def noop(n: int) -> int:
            return n

        assert sharded.layout is not None
        busy = [t for t in (sharded.layout.new_id() for _ in range(2000))
                if route(t, 3) == 0][:200]
        noop.enqueue_many([noop.call(n, task_id=t) for n, t in enumerate(busy)])
        last = next(t for t in (sharded.layout.new_id() for _ in range(100))
                    if route(t, 3) == 2)
        noop.enqueue(0, task_id=last)
        first, _, third = shard_brokers(client, sharded)
        worker = WorkerThread(sharded, settings, concurrency=1)
        try:
            wait_until(lambda: first.counts().ready == 0 or None, 30, "the busy shard to drain")
            wait_for_state(third, last, "completed")
        finally:
            worker.close(client)
        leased_at = [int(e.fields["ts"]) for e in events(client, first.keys)
                     if e.type == "leased"]
        last_at = next(int(e.fields["ts"]) for e in events(client, third.keys)
                       if e.type == "leased" and e.task == last)
        # A tie in the same millisecond counts against taking turns.
        before = sum(at <= last_at for at in leased_at)
        assert len(leased_at) == 200
        assert before < 50, f"the last shard waited for {before} of the busy shard's tasks"

    def test_a_worker_that_counts_the_shards_differently_is_refused(
        self, sharded: App, settings: Settings, client: redis.Redis
    ) -> None:
        sharded.task("noop")(lambda: None).enqueue()
        other = App(queue=sharded.queue, settings=settings, shards=4)
        with pytest.raises(ConfigError, match="has 3 shards in Redis"):
            WorkerThread(other, settings, concurrency=1)

    def test_a_worker_that_gives_a_sharded_queue_no_shards_is_refused(
        self, sharded: App, settings: Settings
    ) -> None:
        """Alone or among other queues: it would lease from the queue itself, where none
        of the shards' tasks are, and run none of them."""
        sharded.task("noop")(lambda: None).enqueue()
        plain = App(queue=sharded.queue, settings=settings)
        said = r"has 3 shards in Redis, but this worker gives it none.*TASKQ_SHARDS=3"
        with pytest.raises(ConfigError, match=said):
            WorkerThread(plain, settings, concurrency=1)
        with pytest.raises(ConfigError, match=said):
            WorkerThread(plain, settings, 1, queues=["other", sharded.queue])

    def test_a_sharded_queue_among_several_needs_weights(
        self, sharded: App, settings: Settings
    ) -> None:
        with pytest.raises(ConfigError, match="give weights"):
            WorkerThread(sharded, settings, 1, queues=[sharded.queue, "other"])


@pytest.fixture
def workers(redis_server: EmbeddedRedis, ledger_path: Path, tmp_path: Path
            ) -> Iterator[WorkerProcesses]:
    """`taskq worker` processes on a queue of three shards, four handlers each."""
    cluster = {"TASKQ_REDIS_CLUSTER": "1"} if ON_CLUSTER else {}
    env = worker_env(redis_server.url, f"s-{uuid.uuid4().hex[:8]}", ledger_path,
                     TASKQ_SHARDS="3", TASKQ_CONCURRENCY="4", **cluster)
    processes = WorkerProcesses(tmp_path, env)
    yield processes
    processes.stop_all()


@pytest.mark.processes
class TestProcesses:
    def test_a_killed_worker_loses_nothing_and_charges_nothing_twice_on_any_shard(
        self, settings: Settings, client: redis.Redis, ledger_path: Path,
        workers: WorkerProcesses,
    ) -> None:
        """Two `taskq worker` processes with TASKQ_SHARDS=3; one is SIGKILLed holding
        tasks. Every task of every shard completes, charged once in the ledger, and each
        shard's log passes the trace check."""
        queue = workers.env["TASKQ_QUEUE"]
        killed = workers.start(WORK_SECONDS="30")
        app = App(queue=queue, settings=settings, shards=3)
        assert app.layout is not None
        handles = app.producer.enqueue_many([
            NewTask(app.new_task_id(), payload=CHARGE) for _ in range(60)])
        brokers = shard_brokers(client, app)
        wait_until(lambda: sum(b.counts().leased for b in brokers) == 4)
        killed.send_signal(signal.SIGKILL)
        killed.wait(5)
        workers.start(WORK_SECONDS="0.01")
        for handle in handles:
            wait_for_state(brokers[route(handle.task_id, 3)], handle.task_id, "completed",
                           timeout=30)
        for broker in brokers:
            assert view(client, broker.keys).violations() == []
            report = validate(read_log(client, broker.keys.events))
            assert report.ok, report.violations[:3]
        with sqlite3.connect(ledger_path) as db:
            charged = Counter(t for (t,) in db.execute("SELECT task_id FROM charges"))
        db.close()
        assert charged == Counter({h.task_id: 1 for h in handles})
        assert "on queues " in workers.logs()
