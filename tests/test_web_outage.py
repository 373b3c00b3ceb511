"""`taskq serve` while its Redis is down or restarting: the API answers 503 with JSON,
the feed answers a 200 stream that tells the client when to come back, and open
streams ride out a restart. Each test has a Redis of its own, to stop and start."""

from __future__ import annotations

import contextlib
import signal
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from serve_support import HEARTBEAT, TIMEOUT, FeedStream, Server, enqueue, feed, server_env
from taskq.broker import Broker
from taskq.connection import connect
from taskq.feed.stream import StreamSettings
from taskq.settings import Settings
from taskq.tools.embedded import EmbeddedRedis

GRACE = StreamSettings().outage_grace_seconds
ROUTES = [("GET", "/api/queues"), ("GET", "/api/snapshot"), ("GET", "/api/tasks/t-0"),
          ("GET", "/api/dlq"), ("POST", "/api/dlq/t-0/retry"), ("GET", "/api/totals"),
          ("POST", "/api/tasks/t-0/cancel"), ("GET", "/metrics"), ("GET", "/healthz")]


@pytest.fixture
def own_redis(tmp_path: Path) -> Iterator[EmbeddedRedis]:
    server = EmbeddedRedis(data_dir=tmp_path / "redis")
    server.start()
    yield server
    server.stop()


@pytest.fixture
def own_queue(own_redis: EmbeddedRedis) -> Iterator[Broker]:
    client = connect(Settings.from_env({}, redis_url=own_redis.url))
    yield Broker(client, "outage")
    client.close()


def serve(own_redis: EmbeddedRedis, tmp_path: Path, redis_up: bool = True) -> Server:
    env = server_env(own_redis, tmp_path, TASKQ_QUEUE="outage")
    return Server(env, tmp_path / "serve.log").start(redis_up)


@contextlib.contextmanager
def served(own_redis: EmbeddedRedis, tmp_path: Path, redis_up: bool = True
           ) -> Iterator[Server]:
    """`serve`, stopped on the way out, whose log must then hold no traceback."""
    server = serve(own_redis, tmp_path, redis_up)
    try:
        yield server
    finally:
        server.stop()
    assert "Traceback" not in server.log.read_text()


def assert_unavailable_everywhere(server: Server) -> None:
    with httpx.Client(base_url=server.url, timeout=TIMEOUT,
                      headers={"x-taskq-request": "1"}) as http:
        for method, path in ROUTES:
            response = http.request(method, path)
            assert response.status_code == 503, (method, path, response.text)
            assert response.headers["content-type"] == "application/json"
        with http.stream("GET", "/events", params={"queue": "outage"}) as response:
            assert response.status_code == 200
            stream = FeedStream(response)
            block = stream.next()
            with pytest.raises(AssertionError, match="the server ended the stream"):
                stream.next()
    assert block.event == "unavailable" and block.retry == "5000", block
    assert "Redis" in block.body["error"]


def test_with_redis_down_the_api_answers_503_and_the_feed_says_when_to_come_back(
    own_redis: EmbeddedRedis, own_queue: Broker, tmp_path: Path
) -> None:
    enqueue(own_queue, 1)
    with served(own_redis, tmp_path) as server:
        own_redis.stop()
        assert_unavailable_everywhere(server)
        # /healthz answers anyone: it says down, and leaves where Redis is to the log.
        health = httpx.get(f"{server.url}/healthz", timeout=TIMEOUT)
        assert health.json() == {"ok": False, "redis": "down"}
    assert str(own_redis.socket_path) in server.log.read_text()


def test_healthz_answers_within_seconds_when_redis_stops_answering(
    own_redis: EmbeddedRedis, tmp_path: Path
) -> None:
    """A load balancer's probe gets its 503 before its own timeout, not the client's
    timeouts and retries (20 s)."""
    with served(own_redis, tmp_path) as server:
        own_redis.signal(signal.SIGSTOP)
        try:
            started = time.monotonic()
            health = httpx.get(f"{server.url}/healthz", timeout=30)
            waited = time.monotonic() - started
        finally:
            own_redis.signal(signal.SIGCONT)
        assert (health.status_code, health.json()) == (
            503, {"ok": False, "redis": "not answering"})
        assert waited < 6, waited
        assert httpx.get(f"{server.url}/healthz", timeout=TIMEOUT).json()["ok"] is True


def crowd(server: Server, paths: list[str]) -> list[tuple[int, str, float]]:
    """Each of `paths` asked for at once: (status, error, seconds it took)."""
    def ask(path: str) -> tuple[int, str, float]:
        started = time.monotonic()
        response = httpx.get(f"{server.url}{path}", timeout=60)
        return (response.status_code, response.json().get("error", ""),
                time.monotonic() - started)

    with ThreadPoolExecutor(max_workers=len(paths)) as pool:
        return list(pool.map(ask, paths))


def test_a_crowd_of_api_requests_in_a_silent_redis_is_answered_503_within_seconds(
    own_redis: EmbeddedRedis, tmp_path: Path
) -> None:
    """Each request would hold one of the API's forty threads for the client's timeouts
    and retries, and those after it would wait for a thread: 41 s for 60 requests with
    the default timeouts. Only those calling Redis when it went silent wait them out."""
    env = server_env(own_redis, tmp_path, TASKQ_QUEUE="outage", REDIS_TIMEOUT_SECONDS="1")
    server = Server(env, tmp_path / "serve.log").start()
    try:
        own_redis.signal(signal.SIGSTOP)
        try:
            first = crowd(server, ["/api/totals"] * 60 + ["/api/dlq"] * 20)
            then = crowd(server, ["/api/totals", "/api/workers", "/api/snapshot",
                                  "/metrics"] * 25)
        finally:
            own_redis.signal(signal.SIGCONT)
        after = httpx.get(f"{server.url}/api/totals", timeout=TIMEOUT)
    finally:
        server.stop()
    silent = "Redis is not answering: no PING came back within 2 s; try again later"
    assert {status for status, _, _ in first + then} == {503}
    # Those that had a thread when Redis went silent ran out the client's tries.
    assert sum(error != silent for _, error, _ in first) <= 40, first
    assert [error for _, error, _ in then] == [silent] * 100
    assert max(took for _, _, took in then) < 6, then
    assert after.status_code == 200, after.text


SPIN = """local t = redis.call('TIME')
local from = t[1] * 1000000 + t[2]
repeat t = redis.call('TIME') until t[1] * 1000000 + t[2] - from > tonumber(ARGV[1])
return 1"""


def test_reads_that_waited_behind_a_slow_redis_are_served_once_it_answers(
    own_redis: EmbeddedRedis, own_queue: Broker, tmp_path: Path
) -> None:
    """A script that runs 4.5 s leaves the PING asked after 2 s unanswered: Redis is
    doubted, though it is slow, not silent. The reads that waited for a thread (four run
    at once) were refused 503 just after the ones before them came back."""
    enqueue(own_queue, 1)
    with served(own_redis, tmp_path) as server:
        spinner = threading.Thread(
            target=lambda: own_queue.client.eval(SPIN, 0, 4_500_000))
        spinner.start()
        try:
            time.sleep(0.1)
            answers = crowd(server, ["/api/snapshot?queue=outage"] * 8)
        finally:
            spinner.join(30)
    assert [status for status, _, _ in answers] == [200] * 8, answers


def test_a_server_started_while_redis_is_down_serves_once_it_is_up(
    own_redis: EmbeddedRedis, own_queue: Broker, tmp_path: Path
) -> None:
    enqueue(own_queue, 1)
    own_redis.stop()
    with served(own_redis, tmp_path, redis_up=False) as server:
        assert_unavailable_everywhere(server)
        own_redis.start()
        with feed(server, own_queue) as stream:
            assert [b.seq for b in stream.rows_until_quiet() if b.is_row] == [1]


def test_an_open_stream_ends_with_an_unavailable_event_when_redis_goes(
    own_redis: EmbeddedRedis, own_queue: Broker, tmp_path: Path
) -> None:
    enqueue(own_queue, 1)
    with served(own_redis, tmp_path) as server:
        with feed(server, own_queue) as stream:
            assert [b.seq for b in stream.rows_until_quiet() if b.is_row] == [1]
            own_redis.stop()
            last = stream.until(lambda b: b.event == "unavailable")[-1]
        assert last.retry == "5000" and not last.id


def stream_served_from_memory(stream: FeedStream, queue: Broker) -> None:
    """Bring `stream` to the tail through a row its server's reader holds in memory:
    from then on the stream reads nothing of Redis itself."""
    assert [b.seq for b in stream.rows_until_quiet() if b.is_row] == [1]
    enqueue(queue, 1, "held")
    assert [b.seq for b in stream.until(lambda b: b.is_row) if b.is_row] == [2]


@pytest.mark.parametrize("outage", ["restart", "past the grace"])
def test_a_stream_served_from_memory_rides_out_a_restart_and_hears_of_a_long_outage(
    own_redis: EmbeddedRedis, own_queue: Broker, tmp_path: Path, outage: str
) -> None:
    """Such a stream reads nothing of Redis itself: the server's reader failing is how it
    learns of an outage, and it ends only once the outage outlasts the grace."""
    enqueue(own_queue, 1)
    with served(own_redis, tmp_path) as server:
        with feed(server, own_queue) as stream:
            stream_served_from_memory(stream, own_queue)
            own_redis.stop()
            stopped = time.monotonic()
            if outage == "restart":
                time.sleep(3 * HEARTBEAT)  # heartbeats go on, every one a keepalive
                own_redis.start()
                enqueue(own_queue, 1, "after")
                got = stream.until(lambda b: b.is_row)
            else:
                got = stream.until(lambda b: b.event == "unavailable", seconds=3 * GRACE)
            waited = time.monotonic() - stopped
        assert [b.comment for b in got[:-1]] == ["keepalive"] * (len(got) - 1), got
        if outage == "restart":
            assert (got[-1].event, got[-1].seq, got[-1].body["task"]) == (
                "enqueued", 3, "after-0")
        else:
            assert got[-1].retry == "5000" and not got[-1].id
            assert "Redis" in got[-1].body["error"]
            # It rode out the grace first, as a restart would need (counted by the
            # server from its first failed read, which a stopping Redis may cause a
            # little early).
            assert GRACE - HEARTBEAT <= waited < 2 * GRACE, waited


@pytest.mark.parametrize("fed", ["by its own reads", "from memory"])
def test_a_stream_hears_of_a_redis_that_stopped_answering_within_the_grace_and_a_read(
    own_redis: EmbeddedRedis, own_queue: Broker, tmp_path: Path, fed: str
) -> None:
    """A Redis paused (or cut off by the network) refuses nothing: every call waits for
    the client's timeouts and retries, half a minute, and a stream kept alive with
    keepalives meanwhile said nothing of it."""
    enqueue(own_queue, 1)
    with served(own_redis, tmp_path) as server:
        with feed(server, own_queue) as stream:
            if fed == "from memory":
                stream_served_from_memory(stream, own_queue)
            else:
                assert [b.seq for b in stream.rows_until_quiet() if b.is_row] == [1]
            own_redis.signal(signal.SIGSTOP)
            paused = time.monotonic()
            try:
                got = stream.until(lambda b: b.event == "unavailable", seconds=4 * GRACE)
                waited = time.monotonic() - paused
            finally:
                own_redis.signal(signal.SIGCONT)
        assert got[-1].retry == "5000" and "Redis" in got[-1].body["error"]
        # The grace, counted from the read Redis left unanswered, and one more read (7 s
        # here), not the client's timeouts and retries (36 s before).
        assert waited < 3 * GRACE, waited


def rows_of(server: Server, queue: Broker) -> list[tuple[str, int]]:
    """What a new stream from the start gets until it is quiet: (event, seq)."""
    with feed(server, queue) as stream:
        return [(b.event, b.seq if b.id else 0) for b in stream.rows_until_quiet() if b.event]


def rows_of_many(server: Server, queue: Broker, n: int) -> list[list[tuple[str, int]]]:
    """`rows_of` for `n` streams at once, so the server's pool holds `n` connections."""
    with ThreadPoolExecutor(max_workers=n) as pool:
        return list(pool.map(lambda _: rows_of(server, queue), range(n)))


def test_streams_ride_out_a_redis_restart(
    own_redis: EmbeddedRedis, own_queue: Broker, tmp_path: Path
) -> None:
    enqueue(own_queue, 2, "before")
    server = serve(own_redis, tmp_path)
    try:
        assert rows_of_many(server, own_queue, 8) == [[("enqueued", 1), ("enqueued", 2)]] * 8
        with feed(server, own_queue) as stream:
            assert [b.seq for b in stream.rows_until_quiet() if b.is_row] == [1, 2]
            own_redis.stop()  # graceful: the log survives in the append-only file
            # Down for several heartbeats: a stream with every row asks nothing of Redis.
            time.sleep(3 * HEARTBEAT)
            own_redis.start()
            enqueue(own_queue, 1, "after")
            got = stream.until(lambda b: b.is_row)
            # Every pooled connection died with the old server: new streams get ones
            # that are reconnected on their first error, never an `unavailable`.
            again = rows_of_many(server, own_queue, 8)
        assert [b.event for b in got if b.event] == ["enqueued"], got
        assert (got[-1].seq, got[-1].body["task"]) == (3, "after-0")
        assert again == [[("enqueued", 1), ("enqueued", 2), ("enqueued", 3)]] * 8
    finally:
        server.stop()
    log = server.log.read_text()
    # The reader's blocking read was cut by the shutdown: it is retried on a new
    # connection at once, so what it reports is the restart itself, not the cut.
    assert "Traceback" not in log and "Connection closed by server" not in log, log
