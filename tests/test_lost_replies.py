"""A reply lost after Redis ran the command: retrying must not create or lease twice."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from conftest import ON_CLUSTER
from helpers import leased_token, stalling
from proxy import ReplyDroppingProxy
from taskq.app import App
from taskq.broker import Broker, NewTask
from taskq.calls import enqueue_calls
from taskq.connection import connect
from taskq.errors import BrokerError
from taskq.keys import QueueKeys
from taskq.settings import Settings
from taskq.tools.embedded import EmbeddedRedis


def unretried(url: str, **options: Any) -> Broker:
    """A broker on a client that sends each call once, and an enqueue that is not sent
    again (see taskq.outages): a failed round trip raises."""
    return Broker(redis.Redis.from_url(url, decode_responses=True,
                                       retry=Retry(NoBackoff(), 0), **options), "test",
                  producer_retry=0)


@pytest.fixture
def proxied(proxy: ReplyDroppingProxy) -> Iterator[Broker]:
    """A broker whose connection (with taskq's usual client retries) runs through the proxy."""
    r = connect(Settings.from_env({}, redis_url=proxy.url))
    yield Broker(r, "test")
    r.close()


class TestEnqueueWithoutAKey:
    def test_retried_enqueue_whose_reply_was_lost_creates_one_task(
        self, proxy: ReplyDroppingProxy, proxied: Broker, broker: Broker
    ) -> None:
        proxied.enqueue("warm-up")  # connected and registered: the next reply is the enqueue's
        proxy.drop_next_reply()
        result = proxied.enqueue("chosen-by-the-client")
        assert proxy.dropped == 1
        assert result.task_id == "chosen-by-the-client"
        assert broker.counts().ready == 2
        events = broker.client.xrange(broker.keys.events) or []
        tasks = [(fields or {}).get("task") for _, fields in events]
        assert tasks == ["warm-up", "chosen-by-the-client"]

    def test_a_task_function_enqueue_whose_reply_was_lost_creates_one_task(
        self, proxy: ReplyDroppingProxy, proxied: Broker, broker: Broker
    ) -> None:
        app = App(settings=Settings.from_env({}))
        app.use_broker(proxied)

        @app.task("mail.send")
        def send(to: str) -> None: ...

        send.enqueue("warm-up")
        proxy.drop_next_reply()
        result = send.enqueue("ada@example.com")
        assert proxy.dropped == 1
        assert broker.counts().ready == 2
        assert broker.payload(result.task_id) == {"args": ["ada@example.com"], "kwargs": {}}

    def test_a_producer_that_picks_a_new_id_per_attempt_creates_two(
        self, proxy: ReplyDroppingProxy, broker: Broker
    ) -> None:
        # The seed's failure mode, shown so the test above has something to beat.
        naive = unretried(proxy.url)
        naive.enqueue("warm-up")
        proxy.drop_next_reply()
        with pytest.raises(BrokerError):
            naive.enqueue(uuid.uuid4().hex)
        naive.enqueue(uuid.uuid4().hex)
        assert broker.counts().ready == 3
        naive.client.close()


    def test_an_enqueue_that_got_no_reply_says_it_may_have_run_and_a_resend_tells(
        self, proxy: ReplyDroppingProxy, broker: Broker
    ) -> None:
        no_retries = unretried(proxy.url)
        no_retries.enqueue("warm-up")
        tasks = [NewTask(f"t{n}") for n in range(3)]
        proxy.drop_next_reply()
        with pytest.raises(BrokerError, match=r"cannot reach Redis to enqueue tasks: .*; "
                           "Redis may have run the call all the same"):
            no_retries.enqueue_many(tasks)
        assert [h.created for h in no_retries.enqueue_many(tasks)] == [False] * 3
        assert broker.counts().ready == 4
        no_retries.client.close()


class TestBatches:
    def test_payloads_past_a_calls_bytes_go_in_calls_of_their_own(self) -> None:
        def task(n: int, size: int) -> list[Any]:
            return [f"t{n}", "n", "x" * size, 0, 0, 3, "", 86400, "", 5, ""]

        def sizes(fields: list[list[Any]], batch_size: int = 1000) -> list[int]:
            return [args[2] for _, args in enqueue_calls(QueueKeys("q"), 100, fields,
                                                         batch_size)]

        mib = 1024 * 1024
        assert sizes([task(n, 200) for n in range(2500)]) == [1000, 1000, 500]
        assert sizes([task(n, mib) for n in range(10)]) == [4, 4, 2]
        assert sizes([task(0, 5 * mib), task(1, mib), task(2, mib)]) == [1, 2]
        assert sizes([task(n, mib) for n in range(3)], batch_size=2) == [2, 1]
        assert sizes([]) == []
        # Bytes, not characters: a third of a MiB of three-byte characters is 1 MiB.
        wide = [[*task(n, 0)[:2], "\u4e2d" * (mib // 3), *task(n, 0)[3:]] for n in range(10)]
        assert sizes(wide) == [4, 4, 2]

    def test_a_batch_of_large_payloads_is_enqueued_whole_over_several_calls(
        self, broker: Broker
    ) -> None:
        payload = {"blob": "x" * 1_000_000}
        handles = broker.enqueue_many([NewTask(f"t{n}", payload=payload) for n in range(9)])
        assert [h.created for h in handles] == [True] * 9
        stats = broker.client.info("commandstats")
        assert stats["cmdstat_evalsha"]["calls"] >= 3
        assert broker.counts().ready == 9


class TestLeaseRetry:
    def test_retried_lease_whose_reply_was_lost_returns_the_same_task(
        self, proxy: ReplyDroppingProxy, proxied: Broker, broker: Broker
    ) -> None:
        for n in range(3):
            broker.enqueue(f"t{n}")
        proxied.counts()  # connected: the next reply is the lease's
        proxy.drop_next_reply()
        batch = proxied.lease_many("w1", 30, 1)
        assert proxy.dropped == 1
        assert [t.task_id for t in batch.tasks] == ["t0"]
        counts = broker.counts()
        assert (counts.leased, counts.ready) == (1, 2), "the retry leased a second task"
        # The lost reply's lease, not a second one over it: the record holds its token.
        record = broker.task("t0")
        assert record is not None and record.fencing_token == leased_token(0, batch.tasks[0].token)

    def test_a_waiting_lease_whose_reply_was_lost_returns_the_same_task(
        self, proxy: ReplyDroppingProxy, proxied: Broker, broker: Broker
    ) -> None:
        # The wait and the lease travel in one pipeline: its retry repeats both, and the
        # lease's request id makes the repeat return what the lost reply held.
        for n in range(3):
            broker.enqueue(f"t{n}")
        proxied.counts()
        proxy.drop_next_reply()
        batch = proxied.wait_and_lease("w1", 30, 1, timeout=1)
        assert proxy.dropped == 1
        assert batch is not None and [t.task_id for t in batch.tasks] == ["t0"]
        counts = broker.counts()
        assert (counts.leased, counts.ready) == (1, 2), "the retry leased a second task"

    def test_an_ack_and_lease_whose_reply_was_lost_completes_once_and_leases_the_same(
        self, proxy: ReplyDroppingProxy, proxied: Broker, broker: Broker
    ) -> None:
        # Both steps are sent again: the repeated ack finds the task completed (refused,
        # nothing written), and the lease's request id returns what the lost reply held.
        for n in range(3):
            broker.enqueue(f"t{n}")
        (held,) = broker.lease_many("w1", 30, 1).tasks
        proxied.counts()
        # The server has the ack script, as for any worker that acked before: a first
        # ack answered NOSCRIPT ran nothing, and its resend would be accepted.
        assert not proxied.ack("t2", 99)
        proxy.drop_next_reply()
        acks, batch = proxied.ack_and_lease([(held.task_id, held.token)], "w1", 30, 1)
        assert proxy.dropped == 1
        assert acks == [False] and [t.task_id for t in batch.tasks] == ["t1"]
        counts = broker.counts()
        assert (counts.leased, counts.ready) == (1, 1), "the retry leased a second task"
        types = [(f or {}).get("type") for _, f in broker.client.xrange(broker.keys.events)]
        assert types.count("completed") == 1

    @pytest.mark.parametrize("call", ["lease_many", "wait_and_lease", "ack_and_lease"])
    def test_the_next_lease_gives_back_what_a_call_that_got_no_reply_took(
        self, proxy: ReplyDroppingProxy, broker: Broker, call: str
    ) -> None:
        """Every retry of the call failed too (here: none allowed), so the worker moved
        on with a new request; Redis had run the call. Without the give-back its tasks
        sat leased by no one, and were reaped as an attempt they never made."""
        no_retries = unretried(proxy.url)
        for n in range(4):
            broker.enqueue(f"t{n}")
        (held,) = broker.lease_many("w1", 30, 1).tasks  # t0, for the ack to carry
        assert not no_retries.ack("t3", 99)  # the server has the ack script (see above)
        proxy.drop_next_reply()
        with pytest.raises(BrokerError, match="cannot reach Redis"):
            if call == "lease_many":
                no_retries.lease_many("w1", 30, 2)
            elif call == "wait_and_lease":
                no_retries.wait_and_lease("w1", 30, 2, timeout=1)
            else:
                no_retries.ack_and_lease([(held.task_id, held.token)], "w1", 30, 2)
        assert broker.counts().leased == (3 if call != "ack_and_lease" else 2)
        batch = no_retries.lease_many("w1", 30, 3)
        assert [t.task_id for t in batch.tasks] == ["t1", "t2", "t3"]  # none passed over
        assert all(broker.task(t.task_id).retries == 0 for t in batch.tasks)
        types = [f["type"] for _, f in broker.client.xrange(broker.keys.events)]
        assert types.count("released") == 2
        no_retries.client.close()

    @pytest.mark.skipif(ON_CLUSTER, reason="one node stalled by a script")
    def test_a_lease_redis_ran_after_a_stall_longer_than_the_lease_is_given_back(
        self, broker: Broker, client: redis.Redis, redis_server: EmbeddedRedis
    ) -> None:
        """The call was sent into the stall and given up on after 0.3 s; Redis ran it
        when the stall ended, 2.5 s later, a lease and more after the client gave up."""
        impatient = unretried(redis_server.url, socket_timeout=0.3)
        assert impatient.lease_many("w1", 1, 1).tasks == []  # connected, script loaded
        broker.enqueue("t0", max_retries=0)
        stall = stalling(client, 2.5)
        time.sleep(0.1)
        with pytest.raises(BrokerError, match="cannot reach Redis to lease tasks"):
            impatient.lease_many("w1", 1, 1)
        stall.join()
        batch = impatient.lease_many("w1", 30, 1)
        assert [t.task_id for t in batch.tasks] == ["t0"]
        assert broker.task("t0").retries == 0
        logged = [f for _, f in broker.client.xrange(broker.keys.events)]
        assert [f["type"] for f in logged] == ["enqueued", "leased", "released", "leased"]
        # Leased again above the token of the lease the stall gave back.
        lost = leased_token(0, int(logged[1]["token"]))
        assert logged[3]["token"] == str(leased_token(lost, batch.tasks[0].token))
        impatient.client.close()

    def test_a_lease_with_a_request_id_given_is_left_to_its_caller_to_send_again(
        self, proxy: ReplyDroppingProxy, broker: Broker
    ) -> None:
        no_retries = unretried(proxy.url)
        assert no_retries.lease_many("w0", 30, 1).tasks == []  # the server has the script
        for n in range(3):
            broker.enqueue(f"t{n}")
        proxy.drop_next_reply()
        with pytest.raises(BrokerError):
            no_retries.lease_many("w1", 30, 2, request_id="req-1")
        assert broker.counts().leased == 2  # it ran
        again = no_retries.lease_many("w1", 30, 2, request_id="req-1")
        assert [t.task_id for t in again.tasks] == ["t0", "t1"]  # README: what it leased
        assert broker.counts().leased == 2
        no_retries.client.close()

    def test_a_lease_retried_with_a_new_request_would_orphan_a_task(
        self, broker: Broker
    ) -> None:
        # The seed's behaviour: the first lease's task sits in leased with nobody to run it.
        broker.enqueue("t0")
        broker.enqueue("t1")
        first = broker.lease_many("w1", 30, 1, request_id="attempt-1")
        second = broker.lease_many("w1", 30, 1, request_id="attempt-2")
        assert first.tasks[0].task_id != second.tasks[0].task_id
        assert broker.counts().leased == 2
