"""`taskq serve` against hostile clients over real HTTP: made-up queue names, many
queues at once, and what a stream says when it cannot follow a queue."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import httpx
import redis

from serve_support import TIMEOUT, FeedStream, Server, Sse, enqueue, feed, wait_for
from taskq.broker import Broker
from taskq.feed.readers import MAX_READERS
from taskq.keys import QUEUES_KEY


def readers(server: Server) -> int:
    text = httpx.get(f"{server.url}/metrics", timeout=TIMEOUT).text
    line = next(x for x in text.splitlines() if x.startswith("taskq_feed_readers "))
    return int(line.split()[1])


def first_block(server: Server, queue: str) -> Sse | BaseException:
    """The first block of `/events?queue=…`, read with a short timeout."""
    try:
        with httpx.stream("GET", f"{server.url}/events", params={"queue": queue},
                          timeout=httpx.Timeout(3.0)) as response:
            assert response.status_code == 200, response.status_code
            return FeedStream(response).next()
    except Exception as e:
        return e


# -- queues that do not exist --------------------------------------------------------


def test_a_stream_for_a_missing_queue_says_so_first_and_starts_no_reader(
    server: Server,
) -> None:
    block = first_block(server, "never-enqueued")
    assert isinstance(block, Sse), block
    assert block.event == "missing" and not block.id
    assert block.body["queue"] == "never-enqueued" and "no queue" in block.body["error"]
    assert block.retry == "10000"
    assert readers(server) == 0


def test_made_up_queue_names_leave_the_feed_of_a_real_queue_alone(
    server: Server, queue: Broker
) -> None:
    with ThreadPoolExecutor(max_workers=50) as pool:
        blocks = list(pool.map(lambda i: first_block(server, f"made-up-{i}"), range(200)))
    assert all(isinstance(b, Sse) and b.event == "missing" for b in blocks), [
        b for b in blocks if not (isinstance(b, Sse) and b.event == "missing")][:3]
    assert readers(server) == 0
    enqueue(queue, 2)
    with feed(server, queue) as stream:
        assert [b.seq for b in stream.rows_until_quiet() if b.is_row] == [1, 2]
        assert readers(server) == 1
    wait_for(lambda: readers(server) == 0, "the reader to go with its last client")


def test_a_queue_appears_for_a_stream_that_comes_back_after_its_first_enqueue(
    server: Server, client: redis.Redis, queue: Broker
) -> None:
    client.srem(QUEUES_KEY, queue.queue)
    first = first_block(server, queue.queue)
    assert isinstance(first, Sse) and first.event == "missing"
    enqueue(queue, 1)
    with feed(server, queue) as stream:
        assert [b.seq for b in stream.rows_until_quiet() if b.is_row] == [1]


@contextlib.contextmanager
def open_streams(server: Server, queues: list[str]) -> Iterator[list[FeedStream]]:
    with contextlib.ExitStack() as stack:
        http = stack.enter_context(httpx.Client(timeout=TIMEOUT, limits=httpx.Limits(
            max_connections=len(queues) + 1)))
        streams = []
        for name in queues:
            response = stack.enter_context(
                http.stream("GET", f"{server.url}/events", params={"queue": name}))
            streams.append(FeedStream(response))
        yield streams


def test_the_number_of_readers_is_bounded_and_a_stream_past_it_is_told_to_come_back(
    server: Server, client: redis.Redis
) -> None:
    names = [f"many-{i}" for i in range(MAX_READERS + 1)]
    for name in names:
        enqueue(Broker(client, name), 1)
    with open_streams(server, names[:MAX_READERS]) as streams:
        for stream in streams:
            assert stream.next().retry == "1000"
            assert stream.next().is_row
        refused = first_block(server, names[-1])
        assert readers(server) == MAX_READERS
    assert isinstance(refused, Sse), refused
    assert refused.event == "unavailable" and refused.retry == "5000"
    assert str(MAX_READERS) in refused.body["error"]
    wait_for(lambda: readers(server) == 0, "every reader to go with its last client")
