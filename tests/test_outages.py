"""A producer's enqueue rides out a Redis that cannot answer for a while: restarting,
busy with a long script, or losing a reply; and says what it knows when it gives up."""

from __future__ import annotations

import asyncio
import re
import threading
import time
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

import pytest
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from proxy import ReplyDroppingProxy
from taskq.aio import AsyncBroker
from taskq.app import App
from taskq.boundary import MAX_CLIENTS
from taskq.broker import Broker
from taskq.calls import enqueue_errors
from taskq.canvas import chain
from taskq.connection import async_client
from taskq.errors import BrokerError, IncompleteEnqueueError
from taskq.flows import FlowCancellation, start_errors
from taskq.outages import Outage, nothing_ran, passing, ride_out
from taskq.results import NewTask
from taskq.routing import ShardedBroker
from taskq.settings import Settings
from taskq.tools.embedded import EmbeddedRedis, free_port

T = TypeVar("T")

REFUSED = redis.ConnectionError("Error 111 connecting to 127.0.0.1:6379. Connection refused.")
CUT = redis.ConnectionError("Connection closed by server.")
BUSY = redis.ResponseError("BUSY Redis is busy running a script. You can only call "
                           "SCRIPT KILL or SHUTDOWN NOSAVE.")
LOADING = redis.BusyLoadingError("Redis is loading the dataset in memory")


class TestWhichRefusalsPass:
    @pytest.mark.parametrize("error", [REFUSED, CUT, BUSY, LOADING,
                                       redis.TimeoutError("Timeout reading from socket")])
    def test_a_restart_a_load_a_busy_script_and_a_lost_reply_pass(
            self, error: redis.RedisError) -> None:
        assert passing(error)
        wrapped = BrokerError("Redis could not enqueue tasks")
        wrapped.__cause__ = error
        assert passing(wrapped)

    @pytest.mark.parametrize("error", [
        redis.AuthenticationError("invalid username-password pair"),
        redis.ConnectionError(MAX_CLIENTS),
        *(cls(MAX_CLIENTS) for cls in [getattr(redis.exceptions, "MaxClientsReachedError",
                                               redis.ConnectionError)]),
        redis.exceptions.ReadOnlyError("You can't write against a read only replica."),
        redis.exceptions.OutOfMemoryError("command not allowed when used memory > 'maxmemory'"),
        redis.ResponseError("MISCONF Redis is configured to save RDB snapshots"),
        redis.ResponseError("BUSYGROUP Consumer Group name already exists"),
    ])
    def test_a_refusal_that_lasts_until_someone_acts_does_not(
            self, error: redis.RedisError) -> None:
        assert not passing(error)

    def test_a_pool_with_no_connection_free_is_this_processs_own_and_does_not(
            self) -> None:
        for full in (redis.ConnectionError("No connection available."),
                     redis.exceptions.MaxConnectionsError()):  # the asyncio cluster's
            assert not passing(full)
            assert nothing_ran(full)

    def test_only_an_error_reply_says_nothing_ran(self) -> None:
        """The client tries each send up to four times and raises the last try's error:
        a refusal or LOADING may follow a try that was written and lost its reply."""
        assert nothing_ran(BUSY)
        assert [nothing_ran(e) for e in (REFUSED, LOADING, CUT)] == [False, False, False]
        assert not nothing_ran(redis.TimeoutError("Timeout reading from socket"))


class TestOutage:
    def test_its_pauses_double_from_a_twentieth_of_a_second_up_to_one(self) -> None:
        outage = Outage(60.0)
        pauses = [outage.pause_after(BUSY) for _ in range(8)]
        assert pauses == [0.05, 0.1, 0.2, 0.4, 0.8, 1.0, 1.0, 1.0]
        assert not outage.may_have_run

    def test_it_ends_when_its_time_failing_is_spent(self) -> None:
        """Counted from the start of the first failed send: a send that took long (the
        client's own tries) leaves less time, or none."""
        outage = Outage(0.2)
        assert outage.pause_after(REFUSED) == 0.05
        time.sleep(0.25)
        assert outage.pause_after(REFUSED) is None
        slow = Outage(0.2)
        slow.sending = time.monotonic() - 0.3
        assert slow.pause_after(BUSY) is None

    def test_healthy_sends_however_long_take_none_of_its_time(self) -> None:
        """A long enqueue_many of many batches may meet an outage at its end."""
        outage = Outage(0.2)
        assert ride_out(partial(time.sleep, 0.3), outage) is None
        outage.sending = time.monotonic()  # the next send, as ride_out marks it
        assert outage.pause_after(BUSY) == 0.05

    def test_its_time_is_spent_over_every_stretch_of_failing(self) -> None:
        outage = Outage(0.3)
        outage.sending = time.monotonic() - 0.2
        assert outage.pause_after(BUSY) == 0.05
        outage.answered()
        outage.sending = time.monotonic() - 0.15
        assert outage.pause_after(BUSY) is None

    def test_it_says_how_often_and_how_long_the_call_was_sent_again(self) -> None:
        outage = Outage(60.0)
        assert outage.waited == ""
        outage.sending = time.monotonic() - 2.0
        outage.pause_after(BUSY)
        outage.pause_after(BUSY)
        assert outage.waited == " (sent again 2 times over 2.0s)"

    def test_no_time_at_all_raises_the_first_failure(self) -> None:
        assert Outage(0.0).pause_after(LOADING) is None

    def test_a_refusal_that_does_not_pass_is_raised_at_once(self) -> None:
        assert Outage(60.0).pause_after(redis.ResponseError("NOPERM denied")) is None

    def test_a_lost_reply_is_remembered(self) -> None:
        outage = Outage(60.0)
        outage.pause_after(CUT)
        outage.pause_after(BUSY)
        assert outage.may_have_run

    @pytest.mark.parametrize("stop", [KeyboardInterrupt(), asyncio.CancelledError()])
    def test_a_stop_after_a_lost_reply_goes_on_as_it_is(
            self, stop: BaseException) -> None:
        """Ctrl-C, or a cancelled coroutine, during the ride-out: not a Redis error."""
        outage = Outage(60.0)
        outage.pause_after(CUT)
        with pytest.raises(type(stop)), enqueue_errors(0, outage, [["t"]]):
            raise stop
        with pytest.raises(type(stop)), start_errors("f", outage):
            raise stop


@pytest.fixture
def busy_server(tmp_path: Path) -> Iterator[EmbeddedRedis]:
    """A server of this test's own that answers BUSY 0.1 s into a script."""
    with EmbeddedRedis(data_dir=tmp_path, port=free_port(),
                       extra_config={"lua-time-limit": "100"}) as server:
        yield server


def run_busy_script(server: EmbeddedRedis, seconds: float) -> threading.Thread:
    """Start a script that spins until it is killed, `seconds` after Redis says BUSY."""
    spinner = redis.Redis.from_url(server.url, socket_timeout=30)
    killer = redis.Redis.from_url(server.url, socket_timeout=30)

    def spin() -> None:
        with pytest.raises(redis.ResponseError, match="killed"):
            spinner.eval("while true do end", 0)
        spinner.close()

    thread = threading.Thread(target=spin, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while True:
        try:
            killer.ping()
        except redis.ResponseError as e:
            assert str(e).startswith("BUSY")
            break
        assert time.monotonic() < deadline, "the script never made Redis busy"
        time.sleep(0.02)
    timer = threading.Timer(seconds, killer.script_kill)
    timer.start()
    return thread


def settings_for(server: EmbeddedRedis, retry: float) -> Settings:
    return Settings.from_env({}, redis_url=server.url, producer_retry_seconds=retry)


def warmed(server: EmbeddedRedis, retry: float) -> Broker:
    """A producer's broker that rides out `retry` seconds, its queue registered and one
    task enqueued, as a web app's is by its first request."""
    broker = Broker.from_settings(settings_for(server, retry), "outage")
    broker.enqueue("warm")
    return broker


def through_busy(server: EmbeddedRedis, call: Callable[[], T]) -> tuple[T, float]:
    """`call()` made while a script keeps Redis busy for 0.6 s, and how long it took."""
    spinner = run_busy_script(server, 0.6)
    started = time.monotonic()
    made = call()
    waited = time.monotonic() - started
    spinner.join(5)
    return made, waited


@pytest.fixture
def server(tmp_path: Path) -> Iterator[EmbeddedRedis]:
    """A server of this test's own, to stop and start again."""
    with EmbeddedRedis(data_dir=tmp_path, port=free_port()) as own:
        yield own


class TestBusy:
    def test_an_enqueue_waits_for_a_busy_script_to_end_and_makes_its_task_once(
            self, busy_server: EmbeddedRedis) -> None:
        broker = warmed(busy_server, 10.0)
        handle, waited = through_busy(busy_server, partial(broker.enqueue, "t"))
        assert waited >= 0.4
        assert handle.created
        assert broker.counts().ready == 2
        broker.client.close()

    def test_with_no_time_to_ride_out_it_fails_at_once_saying_nothing_was_enqueued(
            self, busy_server: EmbeddedRedis) -> None:
        broker = warmed(busy_server, 0.0)
        spinner = run_busy_script(busy_server, 0.5)
        with pytest.raises(BrokerError) as caught:
            broker.enqueue("t")
        assert not isinstance(caught.value, IncompleteEnqueueError)
        assert "BUSY" in str(caught.value)
        assert str(caught.value).endswith("; nothing was enqueued by this call: it is safe "
                                          "to send again")
        spinner.join(5)
        assert broker.counts().ready == 1
        broker.client.close()

    def test_a_cancel_waits_for_it_too_and_cancels_once(
            self, busy_server: EmbeddedRedis) -> None:
        broker = warmed(busy_server, 10.0)
        done, waited = through_busy(busy_server, partial(broker.cancel, "warm"))
        assert waited >= 0.4
        assert (done.outcome, done.state) == ("cancelled", "pending")
        assert broker.cancel("warm").outcome == "unchanged"
        broker.client.close()

    def test_a_later_batch_busy_to_the_end_names_every_id_of_the_call(
            self, busy_server: EmbeddedRedis) -> None:
        """The first batch went in and the caller has no handle of it: "nothing was
        enqueued" would have it send the call again, under new ids."""
        broker = warmed(busy_server, 0.0)
        send = broker.scripts.enqueue
        spinner: list[threading.Thread] = []

        def busy_from_the_second(**call: Any) -> Any:
            if spinner == [] and call["args"][3] == "t2":
                spinner.append(run_busy_script(busy_server, 0.5))
            return send(**call)

        broker.scripts.enqueue = busy_from_the_second  # type: ignore[method-assign]
        ids = tuple(f"t{n}" for n in range(4))
        with pytest.raises(IncompleteEnqueueError) as caught:
            broker.enqueue_many([NewTask(i) for i in ids], batch_size=2)
        spinner[0].join(5)
        assert caught.value.task_ids == ids
        assert "BUSY" in str(caught.value)
        assert "; this batch was not enqueued; the 2 task(s) of the batches before this " \
            "one were enqueued: " in str(caught.value)
        assert broker.counts().ready == 3
        broker.client.close()

    def test_an_async_enqueue_rides_it_out_too(self, busy_server: EmbeddedRedis) -> None:
        settings = settings_for(busy_server, 10.0)

        async def produce() -> tuple[bool, float]:
            broker = AsyncBroker(async_client(settings), "outage", producer_retry=10.0)
            await broker.enqueue("warm")
            spinner = await asyncio.to_thread(run_busy_script, busy_server, 0.6)
            started = time.monotonic()
            handle = await broker.enqueue("t")
            waited = time.monotonic() - started
            await asyncio.to_thread(spinner.join, 5)
            await broker.aclose()
            return handle.created, waited

        created, waited = asyncio.run(produce())
        assert created and waited >= 0.4
        with redis.Redis.from_url(busy_server.url) as client:
            assert client.llen(Broker(client, "outage").keys.ready) == 2


class TestRestart:
    def test_an_enqueue_rides_out_a_restart_and_makes_its_task_once(
            self, server: EmbeddedRedis) -> None:
        broker = warmed(server, 30.0)
        server.stop()
        sent: dict[str, Any] = {}

        def send() -> None:
            started = time.monotonic()
            sent["handle"] = broker.enqueue("t")
            sent["waited"] = time.monotonic() - started

        # Started from this thread: the server dies with the thread that started it.
        producer = threading.Thread(target=send)
        producer.start()
        time.sleep(1.0)
        server.start()
        producer.join(30)
        assert sent["waited"] >= 0.8
        assert sent["handle"].created
        assert broker.counts().ready == 2
        broker.client.close()

    def test_given_up_on_it_names_the_ids_since_a_try_may_have_run(
            self, server: EmbeddedRedis) -> None:
        """Refused at the end, but the client's earlier tries of a send may have been
        written before the server went: the error cannot say nothing ran."""
        broker = warmed(server, 2.0)
        server.stop()
        started = time.monotonic()
        with pytest.raises(IncompleteEnqueueError) as caught:
            broker.enqueue("t")
        # Two seconds from the call's start, and the send under way then (its client's
        # quick tries: under a second against a refusing port).
        assert 2.0 <= time.monotonic() - started < 4.0
        said = str(caught.value)
        assert said.startswith("cannot reach Redis to enqueue tasks: ")
        assert re.search(r" \(sent again \d+ times over \d\.\ds\); Redis may have run", said)
        assert caught.value.task_ids == ("t",)
        broker.client.close()


class TestLostReplies:
    def unretried(self, proxy: ReplyDroppingProxy, retry: float) -> Broker:
        client = redis.Redis.from_url(proxy.url, decode_responses=True,
                                      retry=Retry(NoBackoff(), 0))
        return Broker(client, "test", producer_retry=retry)

    def test_a_call_whose_reply_was_lost_is_sent_again_and_makes_nothing_twice(
            self, proxy: ReplyDroppingProxy, broker: Broker) -> None:
        producer = self.unretried(proxy, 5.0)
        producer.enqueue("warm-up")
        proxy.drop_next_reply()
        handles = producer.enqueue_many([NewTask(f"t{n}") for n in range(3)])
        assert proxy.dropped == 1
        # The second send found the tasks the first made (README, Known limitations).
        assert [h.created for h in handles] == [False] * 3
        assert broker.counts().ready == 4
        producer.client.close()

    def test_given_up_on_it_names_the_task_ids_to_send_again(
            self, proxy: ReplyDroppingProxy, broker: Broker) -> None:
        producer = self.unretried(proxy, 0.0)
        producer.enqueue("warm-up")
        proxy.drop_next_reply()
        tasks = [NewTask(f"t{n}") for n in range(12)]
        with pytest.raises(IncompleteEnqueueError) as caught:
            producer.enqueue_many(tasks)
        assert caught.value.task_ids == tuple(f"t{n}" for n in range(12))
        assert str(caught.value).endswith(
            "(this call's: t0, t1, t2, t3, t4, t5, t6, t7, t8, t9 and 2 more)")
        resent = producer.enqueue_many([NewTask(i) for i in caught.value.task_ids])
        assert [h.created for h in resent] == [False] * 12
        assert broker.counts().ready == 13
        producer.client.close()

    def test_a_batch_after_others_that_got_no_reply_names_every_id_of_the_call(
            self, proxy: ReplyDroppingProxy, broker: Broker) -> None:
        """The caller got no handle of the batches before it either: resending all the
        call's ids makes only what is missing."""
        producer = self.unretried(proxy, 0.0)
        producer.enqueue("warm-up")
        send = producer.scripts.enqueue
        sends: list[int] = []

        def second_reply_lost(**call: Any) -> Any:
            sends.append(1)
            if len(sends) == 2:
                proxy.drop_next_reply()
            return send(**call)

        producer.scripts.enqueue = second_reply_lost  # type: ignore[method-assign]
        ids = tuple(f"t{n}" for n in range(10))
        with pytest.raises(IncompleteEnqueueError) as caught:
            producer.enqueue_many([NewTask(i) for i in ids], batch_size=5)
        assert caught.value.task_ids == ids
        assert "; the 5 task(s) of the batches before this one were enqueued: " in \
            str(caught.value)
        producer.scripts.enqueue = send  # type: ignore[method-assign]
        resent = producer.enqueue_many([NewTask(i) for i in caught.value.task_ids])
        assert [h.created for h in resent] == [False] * 10
        assert broker.counts().ready == 11
        producer.client.close()


class TestWorkflowStart:
    def test_a_chains_start_waits_for_a_busy_script_to_end(
            self, busy_server: EmbeddedRedis) -> None:
        app = App(queue="outage", settings=settings_for(busy_server, 10.0))
        add = app.task("add")(lambda x, y=1: x + y)
        chain(add.s(1), add.s()).enqueue()
        flow, waited = through_busy(busy_server, chain(add.s(2), add.s()).enqueue)
        assert waited >= 0.4
        assert flow.created
        assert app.broker.counts().ready == 2  # each chain's first step
        app.broker.client.close()

    def test_given_up_on_after_a_lost_reply_it_names_the_flow_id(
            self, proxy: ReplyDroppingProxy, settings: Settings) -> None:
        app = App(queue="test", settings=Settings.from_env(
            {}, redis_url=proxy.url, producer_retry_seconds=0.0))
        add = app.task("add")(lambda x, y=1: x + y)
        app.use_broker(TestLostReplies().unretried(proxy, 0.0))
        chain(add.s(1), add.s()).enqueue()
        proxy.drop_next_reply()
        with pytest.raises(IncompleteEnqueueError) as caught:
            chain(add.s(2), add.s()).enqueue(flow_id="f-lost")
        assert caught.value.flow_id == "f-lost"
        assert str(caught.value).endswith(
            "; Redis may have started it all the same: enqueue(flow_id='f-lost') starts "
            "it only if it did not")
        again = chain(add.s(2), add.s()).enqueue(flow_id="f-lost")
        assert not again.created
        assert app.broker.counts().ready == 2
        app.broker.client.close()


class TestWorkflowCancel:
    def test_a_workflows_cancel_waits_for_a_busy_script_to_end_and_cancels_once(
            self, busy_server: EmbeddedRedis) -> None:
        app = App(queue="outage", settings=settings_for(busy_server, 10.0))
        add = app.task("add")(lambda x, y=1: x + y)
        flow = chain(add.s(1), add.s()).enqueue()
        done, waited = through_busy(busy_server, flow.cancel)
        assert waited >= 0.4
        assert (done.outcome, done.state, done.ended) == ("cancelled", "running", 2)
        assert flow.cancel().outcome == "unchanged"
        assert app.broker.counts().ready == 0
        app.broker.client.close()

    def test_an_awaited_one_rides_it_out_too(self, busy_server: EmbeddedRedis) -> None:
        app = App(queue="outage", settings=settings_for(busy_server, 10.0))
        add = app.task("add")(lambda x, y=1: x + y)
        flow_id = chain(add.s(1), add.s()).enqueue().flow_id

        async def cancel() -> tuple[FlowCancellation, float]:
            flow = app.workflow_async(flow_id)
            spinner = await asyncio.to_thread(run_busy_script, busy_server, 0.6)
            started = time.monotonic()
            done = await flow.cancel_async()
            waited = time.monotonic() - started
            await asyncio.to_thread(spinner.join, 5)
            await app.aclose()
            return done, waited

        done, waited = asyncio.run(cancel())
        assert waited >= 0.4
        assert (done.outcome, done.ended) == ("cancelled", 2)
        assert app.flows().state(flow_id) == "cancelled"
        app.broker.client.close()


class TestShardedQueue:
    def test_a_shards_lost_reply_names_every_task_of_the_call(
            self, proxy: ReplyDroppingProxy, settings: Settings, broker: Broker) -> None:
        """The caller got no handle of any shard's share: resending every id of the call
        makes only the shares that were never sent."""
        layout = App(queue="sharded", settings=settings, shards=3).layout
        assert layout is not None
        producer = TestLostReplies().unretried(proxy, 0.0)
        brokers = [Broker(producer.client, name, producer_retry=0.0) for name in layout.shards]
        sends: list[int] = []
        for shard in brokers:
            send = shard.scripts.enqueue

            def second_call_lost(send: Any = send, **call: Any) -> Any:
                sends.append(1)
                if len(sends) == 2:
                    proxy.drop_next_reply()
                return send(**call)

            shard.scripts.enqueue = second_call_lost  # type: ignore[method-assign]
        ids = [f"t{n}" for n in range(30)]
        with pytest.raises(IncompleteEnqueueError) as caught:
            ShardedBroker(layout, brokers).enqueue_many([NewTask(i) for i in ids])
        assert caught.value.task_ids == tuple(ids)
        assert "task(s) of the batches before this one were enqueued" in str(caught.value)
        made = ShardedBroker(layout, brokers).enqueue_many([NewTask(i) for i in ids])
        sent = [Broker(broker.client, name).counts().ready for name in layout.shards]
        assert sum(sent) == 30
        assert 0 < sum(h.created for h in made) < 30  # the share never sent, alone
        producer.client.close()
