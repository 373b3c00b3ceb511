"""`taskq serve` against hostile clients over real HTTP: made-up queue names, many
queues at once, and what a stream says when it cannot follow a queue."""

from __future__ import annotations

import contextlib
import json
import re
import socket
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from urllib.parse import quote

import httpx
import pytest
import redis
from hypothesis import HealthCheck, given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from helpers import stalling
from serve_support import TIMEOUT, FeedStream, Server, Sse, enqueue, feed, server_env
from taskq.broker import Broker, NewTask
from taskq.feed.readers import MAX_READERS
from taskq.keys import QUEUES_KEY
from taskq.tools.embedded import EmbeddedRedis
from taskq.web.state import HEAVY_AT_ONCE, HEAVY_WAITING
from waiting import wait_until


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
    wait_until(lambda: readers(server) == 0, 20, "the reader to go with its last client")


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


FEW_QUEUES = 3


@pytest.fixture(scope="module")
def narrow(redis_server: EmbeddedRedis, tmp_path_factory: pytest.TempPathFactory
           ) -> Iterator[Server]:
    """A server that follows at most FEW_QUEUES queues at once."""
    tmp = tmp_path_factory.mktemp("narrow")
    serve = Server(server_env(redis_server, tmp, TASKQ_FEED_MAX_QUEUES=str(FEW_QUEUES)),
                   tmp / "serve.log").start()
    yield serve
    serve.stop()


def test_the_number_of_readers_is_bounded_and_a_stream_past_it_is_told_to_come_back(
    narrow: Server, client: redis.Redis
) -> None:
    names = [f"many-{i}" for i in range(FEW_QUEUES + 1)]
    for name in names:
        enqueue(Broker(client, name), 1)
    with open_streams(narrow, names[:FEW_QUEUES]) as streams:
        for stream in streams:
            assert stream.next().retry == "1000"
            assert stream.next().is_row
        refused = first_block(narrow, names[-1])
        assert readers(narrow) == FEW_QUEUES
    assert isinstance(refused, Sse), refused
    assert refused.event == "unavailable" and refused.retry == "5000"
    assert f"{FEW_QUEUES} queues (TASKQ_FEED_MAX_QUEUES)" in refused.body["error"]
    wait_until(lambda: readers(narrow) == 0, 20, "every reader to go with its last client")


def test_streams_left_open_on_many_queues_hold_one_blocking_read_and_all_stay_live(
    server: Server, client: redis.Redis
) -> None:
    names = [f"idle-{i}" for i in range(24)]
    assert len(names) < MAX_READERS
    for name in names:
        enqueue(Broker(client, name), 1)
    with open_streams(server, names) as streams:
        for stream in streams:
            assert stream.next().retry == "1000"
            assert stream.next().is_row
        assert readers(server) == len(names)
        # The followed queues wait in one read, whatever their number.
        for _ in range(5):
            assert int(client.info("clients")["blocked_clients"]) <= 1
            time.sleep(0.1)
        for name in names:
            enqueue(Broker(client, name), 1, prefix="later")
        for name, stream in zip(names, streams, strict=True):
            row = stream.next()
            while not row.is_row:  # a heartbeat comment first, at most
                row = stream.next()
            assert (row.body["type"], row.body["task"]) == ("enqueued", "later-0"), name
    wait_until(lambda: readers(server) == 0, 20, "every reader to go with its last client")


# -- query parameters ----------------------------------------------------------------

BAD_LIMITS = ["0", "-1", "abc", "1e3", "", "99999999999999999999", "1001", " 5", "+5",
              "5.0", "0x10", "\u0661\u0662"]


@pytest.mark.parametrize("value", BAD_LIMITS)
def test_a_snapshot_limit_that_is_not_a_number_in_range_is_a_400_naming_it(
    server: Server, queue: Broker, value: str
) -> None:
    response = httpx.get(f"{server.url}/api/snapshot", timeout=TIMEOUT,
                         params={"queue": queue.queue, "limit": value})
    assert response.status_code == 400, response.text
    assert response.json() == {
        "error": f"limit={value!r} is not accepted: expected a whole number from 1 to 1000",
        "parameter": "limit", "value": value, "accepted": "a whole number from 1 to 1000"}


def test_a_snapshot_limit_bounds_each_list(server: Server, queue: Broker) -> None:
    for i in range(3):
        queue.enqueue(f"later-{i}", delay=3600)
    with httpx.Client(base_url=server.url, timeout=TIMEOUT) as http:
        one = http.get("/api/snapshot", params={"queue": queue.queue, "limit": "1"}).json()
        most = http.get("/api/snapshot", params={"queue": queue.queue, "limit": "1000"}).json()
    assert (len(one["delayed"]), len(most["delayed"])) == (1, 3)
    assert one["counts"]["delayed"] == 3


def test_a_parameter_given_twice_is_a_400_naming_both_values(
    server: Server, queue: Broker
) -> None:
    for path, name, values in (("/api/snapshot", "limit", ["5", "1000"]),
                               ("/api/snapshot", "queue", [queue.queue, "other"]),
                               ("/api/dlq", "queue", [queue.queue, queue.queue])):
        query = [(name, v) for v in values] + ([] if name == "queue" else [("queue", queue.queue)])
        response = httpx.get(f"{server.url}{path}", params=query, timeout=TIMEOUT)
        assert response.status_code == 400, (path, response.text)
        assert response.json() == {
            "error": f"{name}={', '.join(values)!r} is not accepted: expected one value, not 2",
            "parameter": name, "value": ", ".join(values), "accepted": "one value, not 2"}


def test_a_bad_queue_name_is_a_400_naming_the_parameter(server: Server) -> None:
    for method, path in (("GET", "/api/snapshot"), ("GET", "/api/dlq"), ("GET", "/api/tasks/x"),
                         ("GET", "/api/schedules"), ("GET", "/api/totals"),
                         ("POST", "/api/tasks/x/cancel")):
        response = httpx.request(method, f"{server.url}{path}", params={"queue": "../etc"},
                                 headers={"x-taskq-request": "1"}, timeout=TIMEOUT)
        assert response.status_code == 400, (path, response.text)
        assert (response.json()["parameter"], response.json()["value"]) == ("queue", "../etc")
    # The feed says so in an event instead: EventSource would retry an error status.
    feed = httpx.get(f"{server.url}/events", params={"queue": "../etc"}, timeout=TIMEOUT)
    assert feed.status_code == 200 and "event: invalid" in feed.text
    assert '"queue":"../etc"' in feed.text


@pytest.mark.parametrize("value", ["-1", "10001", "1e3", "", "x"])
def test_a_task_scan_out_of_range_is_a_400_naming_it(
    server: Server, queue: Broker, value: str
) -> None:
    response = httpx.get(f"{server.url}/api/tasks/x", timeout=TIMEOUT,
                         params={"queue": queue.queue, "scan": value})
    assert response.status_code == 400, response.text
    assert response.json()["accepted"] == "a whole number from 0 to 10000"


@pytest.mark.parametrize("route", [("GET", "/api/tasks/{}"), ("POST", "/api/tasks/{}/cancel"),
                                   ("POST", "/api/dlq/{}/retry")])
@pytest.mark.parametrize("task_id", ["no spaces", "a" * 129, "%00", "%F0%9F%9A%80", "%ff%fe"])
def test_an_invalid_task_id_is_a_400_naming_it(
    server: Server, queue: Broker, task_id: str, route: tuple[str, str]
) -> None:
    method, path = route
    response = httpx.request(method, server.url + path.format(task_id),
                             params={"queue": queue.queue}, headers={"x-taskq-request": "1"},
                             timeout=TIMEOUT)
    assert response.status_code == 400, response.text
    body = response.json()
    assert body["parameter"] == "task_id"
    assert body["accepted"] == ("a task id: 1-128 letters, digits, '_', '.', ':' or '-', other "
                                "than '.' and '..'")
    assert body["error"].startswith("task_id=") and "is not accepted" in body["error"]


# -- nothing a client sends gives a 500 --------------------------------------------

PATHS = ["/", "/api/queues", "/api/snapshot", "/api/tasks/x", "/api/dlq", "/api/schedules",
         "/api/totals", "/metrics",
         "/healthz", "/static/app.js", "/static/../../../etc/passwd", "/static/%2e%2e/x",
         "/api/tasks/" + "a" * 5000, "/api/tasks/%00", "/api/tasks/%F0%9F%9A%80",
         "/api/tasks/%ff%fe", "/api/dlq/%00/retry", "/api/dlq/" + "b" * 5000 + "/retry",
         "/api/tasks/x/cancel", "/api/tasks/%00/cancel", "/api/tasks/%2F/cancel",
         "/api/tasks/" + "c" * 5000 + "/cancel", "/api/tasks//cancel", "/api/tasks/x/cancel/",
         "/api/flows/x", "/api/flows/%00", "/api/flows/x.1.1", "/api/flows/" + "f" * 5000,
         "/api/flows/", "/nope", "//api/queues", "/api/queues/"]
WRITE_PATH = re.compile(r"/(retry|cancel)/?$")
QUERIES = ["", "queue=", "queue=no such!", "queue=" + "q" * 500, "queue=%00", "queue=%ff",
           "limit=-1", "limit=1e3", "limit=99999999999999999999", "limit=%00",
           "last_event_id=%ff%fe", "token=x", "token=" + "t" * 5000, "queue=a&queue=b",
           "%zz=1", "a=%", "queue=web&limit=&limit=5"]
METHODS = ["GET", "HEAD", "POST", "PUT", "DELETE", "OPTIONS", "PATCH", "TRACE"]
HEADERS: list[dict[str, str | bytes]] = [
    {}, {"cookie": "taskq_token=%00; =; ;;; a"}, {"cookie": '"' * 100},
    {"authorization": "Bearer"}, {"authorization": "Basic Zm9vOmJhcg=="},
    {"authorization": "Bearer " + "x" * 5000}, {"last-event-id": "\u00ff".encode() * 100},
    {"origin": "null", "x-taskq-request": "1"}, {"origin": "http://[::1", "x-taskq-request": "1"},
    {"x-taskq-request": "1", "content-type": "application/json"},
    {"accept": "text/event-stream"}, {"range": "bytes=-1"},
]


def status_of(http: httpx.Client, method: str, url: str,
              headers: dict[str, str | bytes] | None = None) -> int | str:
    try:
        return http.request(method, url, headers=headers).status_code
    except httpx.TransportError as e:  # a 500 may drop the connection: a failure too
        return repr(e)


def test_no_method_path_query_or_header_gets_a_500(server: Server, secured: Server) -> None:
    failures = []
    for target in (server, secured):
        with httpx.Client(base_url=target.url, timeout=TIMEOUT) as http:
            for path in PATHS:
                for query in QUERIES:
                    for method in METHODS:
                        url = f"{path}?{query}" if query else path
                        status = status_of(http, method, url)
                        if not isinstance(status, int) or status >= 500:
                            failures.append((target.url, method, url[:80], status))
                for headers in HEADERS:
                    method = "POST" if WRITE_PATH.search(path) else "GET"
                    status = status_of(http, method, path, headers)
                    if not isinstance(status, int) or status >= 500:
                        failures.append((target.url, path[:80], headers, status))
    assert failures == []
    assert server.alive() and secured.alive()


@given(path=st.sampled_from(["/api/snapshot", "/api/dlq", "/api/tasks/{}", "/api/queues",
                             "/api/schedules", "/api/totals", "/api/tasks/{}/cancel",
                             "/api/flows/{}"]),
       task_id=st.text(min_size=1, max_size=300),
       params=st.dictionaries(st.sampled_from(["queue", "limit", "last_event_id", "token",
                                               "scan"]),
                              st.text(max_size=300)))
@hypothesis_settings(max_examples=150, deadline=None,
                     suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_no_query_string_or_task_id_gets_a_500(
    server: Server, path: str, task_id: str, params: dict[str, str]
) -> None:
    url = server.url + path.format(quote(task_id, safe=""))
    method = "POST" if WRITE_PATH.search(path) else "GET"
    response = httpx.request(method, url, params=params, headers={"x-taskq-request": "1"},
                             timeout=TIMEOUT)
    assert response.status_code < 500, (url, params, response.text)
    if response.status_code == 400:
        assert response.json()["error"]


@contextlib.contextmanager
def timed_server(redis_server: EmbeddedRedis, tmp_path_factory: pytest.TempPathFactory,
                 request: str, send: str) -> Iterator[Server]:
    """A server of its own with TASKQ_REQUEST_TIMEOUT_SECONDS `request` and
    TASKQ_FEED_SEND_TIMEOUT_SECONDS `send` (the longer of the two is how long a client
    may take none of what it was sent)."""
    tmp = tmp_path_factory.mktemp("timed")
    serve = Server(server_env(redis_server, tmp, TASKQ_REQUEST_TIMEOUT_SECONDS=request,
                              TASKQ_FEED_SEND_TIMEOUT_SECONDS=send),
                   tmp / "serve.log").start()
    try:
        yield serve
    finally:
        serve.stop()


@pytest.fixture(scope="module")
def impatient(redis_server: EmbeddedRedis, tmp_path_factory: pytest.TempPathFactory
              ) -> Iterator[Server]:
    """A server that closes a connection whose request has not begun after 1 s (and
    cuts one that takes nothing of its response only after 30)."""
    with timed_server(redis_server, tmp_path_factory, "1", "30") as serve:
        yield serve


def test_a_connection_that_never_finishes_its_request_is_closed(impatient: Server) -> None:
    with socket.create_connection(("127.0.0.1", impatient.port), timeout=10) as slow:
        opened = time.monotonic()
        slow.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n")  # never ended
        time.sleep(0.5)
        slow.sendall(b"X-A: b\r\n")  # a byte now and then holds no connection for good
        assert slow.recv(1024) == b""  # closed by the server
        assert 0.9 < time.monotonic() - opened < 5
    # A request that does arrive is answered, and its connection is not cut.
    with httpx.Client(base_url=impatient.url, timeout=TIMEOUT) as http:
        assert http.get("/healthz").status_code == 200
        time.sleep(1.5)
        assert http.get("/healthz").status_code == 200


def read_response(connection: socket.socket, received: bytes = b"") -> tuple[bytes, bytes]:
    """The head and body of one response read off `connection` (after `received`),
    whole."""
    while b"\r\n\r\n" not in received:
        received += connection.recv(65536)
    head, body = received.split(b"\r\n\r\n", 1)
    length = int(re.search(rb"content-length: (\d+)", head, re.IGNORECASE)[1])
    while len(body) < length:
        more = connection.recv(65536)
        assert more, f"cut after {len(body)} of {length} bytes"
        body += more
    return head, body


def test_a_kept_alive_connections_next_request_has_the_same_deadline(
    impatient: Server,
) -> None:
    with socket.create_connection(("127.0.0.1", impatient.port), timeout=10) as slow:
        slow.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        head, _ = read_response(slow)
        assert head.startswith(b"HTTP/1.1 200")
        answered = time.monotonic()
        slow.sendall(b"GET /healthz HTTP/1.1\r\n")  # the next request, never ended
        time.sleep(0.5)
        slow.sendall(b"X-A: b\r\n")  # which stops uvicorn's keep-alive timeout
        assert slow.recv(1024) == b""  # closed by the server
        assert 0.9 < time.monotonic() - answered < 5


def with_big_result(queue: Broker, task_id: str, items: int) -> None:
    """A completed task `task_id` whose result is `items` strings of 1,000 bytes, as a
    response to take slowly or not at all."""
    big = Broker(queue.client, queue.queue, max_result_bytes=8 * 2**20)
    big.enqueue_many([NewTask(task_id, name="x")])
    token = big.lease_many("w", 30, 1).tasks[0].token
    assert big.ack(task_id, token, json.dumps(["y" * 1000] * items))


def test_a_large_response_still_being_sent_at_the_deadline_is_sent_whole(
    impatient: Server, queue: Broker
) -> None:
    with_big_result(queue, "big", 4000)  # shown: about 8 MB
    with socket.create_connection(("127.0.0.1", impatient.port), timeout=10) as slow:
        slow.sendall(f"GET /api/tasks/big?queue={queue.queue} HTTP/1.1\r\n"
                     "Host: 127.0.0.1\r\n\r\n".encode())
        time.sleep(1.5)  # not reading: more than the kernel's buffers still to send
        head, body = read_response(slow)
    assert head.startswith(b"HTTP/1.1 200")
    assert json.loads(body)["result"] == ["y" * 1000] * 4000


@pytest.fixture(scope="module")
def stingy(redis_server: EmbeddedRedis, tmp_path_factory: pytest.TempPathFactory
           ) -> Iterator[Server]:
    """A server that cuts a client that takes nothing of its responses for 1 s."""
    with timed_server(redis_server, tmp_path_factory, "1", "1") as serve:
        yield serve


def test_a_client_that_pipelines_requests_and_reads_nothing_is_cut(
    stingy: Server, queue: Broker
) -> None:
    with_big_result(queue, "unread", 4000)  # shown: about 8 MB
    request = (f"GET /api/tasks/unread?queue={queue.queue} HTTP/1.1\r\n"
               "Host: 127.0.0.1\r\n\r\n").encode()
    with socket.socket() as greedy:
        greedy.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 65536)
        greedy.connect(("127.0.0.1", stingy.port))
        greedy.sendall(request * 3)  # 24 MB asked for, none of it taken for 3 s
        time.sleep(3)
        greedy.settimeout(10)
        received, cut = 0, False
        try:
            while chunk := greedy.recv(1 << 20):
                received += len(chunk)
            cut = True
        except ConnectionResetError:
            cut = True
        except TimeoutError:
            pass
    # Cut while the first response was still in the kernel's buffers: the responses
    # it asked for are not held for it for good, however long it stays connected.
    assert cut and received < 8 * 2**20, received
    assert "Traceback" not in stingy.log.read_text()


def test_a_slow_reader_that_takes_bytes_gets_its_whole_response(
    stingy: Server, queue: Broker
) -> None:
    with_big_result(queue, "sipped", 2000)  # about 4 MB
    with socket.socket() as slow:
        slow.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 65536)
        slow.connect(("127.0.0.1", stingy.port))
        slow.sendall(f"GET /api/tasks/sipped?queue={queue.queue} HTTP/1.1\r\n"
                     "Host: 127.0.0.1\r\n\r\n".encode())
        received = b""
        began = time.monotonic()
        while time.monotonic() - began < 3:  # a sip every 0.3 s for longer than the stall wait
            time.sleep(0.3)
            received += slow.recv(32768)
        head, body = read_response(slow, received)
    assert head.startswith(b"HTTP/1.1 200")
    assert json.loads(body)["result"] == ["y" * 1000] * 2000


@pytest.mark.parametrize("path", ["/api/history", "/api/queues", "/events", "/metrics"])
def test_a_read_from_a_page_on_another_site_is_refused(server: Server, path: str) -> None:
    cross = {"Sec-Fetch-Site": "cross-site", "Origin": "https://evil.example"}
    response = httpx.get(f"{server.url}{path}", headers=cross, timeout=TIMEOUT)
    assert response.status_code == 403
    assert "cross-site read refused" in response.text
    # The dashboard's own page, and a link to it from elsewhere, still open.
    assert httpx.get(f"{server.url}/", headers=cross, timeout=TIMEOUT).status_code == 200
    same = {"Sec-Fetch-Site": "same-origin"}
    assert httpx.get(f"{server.url}/api/queues", headers=same, timeout=TIMEOUT).is_success


def test_heavy_reads_queue_behind_a_few_at_a_time_and_all_are_answered(
    server: Server, queue: Broker
) -> None:
    queue.enqueue("t1")
    with ThreadPoolExecutor(24) as pool:
        codes = list(pool.map(lambda _: httpx.get(
            f"{server.url}/api/history", params={"queue": queue.queue, "name": "zzz"},
            timeout=TIMEOUT).status_code, range(48)))
    assert codes == [200] * 48


def scripts_run(client: redis.Redis) -> int:
    """Scripts Redis has run since its start (EVALSHA calls)."""
    return int(client.info("commandstats").get("cmdstat_evalsha", {}).get("calls", 0))


def sent_reads(server: Server, path: str, count: int) -> list[socket.socket]:
    """`count` connections, each with a GET of `path` sent on it: a crowd that reaches
    the server within milliseconds, as threads of HTTP clients do not."""
    crowd = []
    for _ in range(count):
        connection = socket.create_connection(("127.0.0.1", server.port), timeout=30)
        connection.sendall(f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".encode())
        crowd.append(connection)
    return crowd


def answer_of(connection: socket.socket) -> tuple[int, bytes, bytes]:
    """The status, head and body of the response read off `connection`, then closed."""
    with connection:
        head, body = read_response(connection)
    return int(head.split()[1]), head, body


def answered(connection: socket.socket) -> int:
    return answer_of(connection)[0]


def test_heavy_reads_whose_clients_left_while_they_waited_are_not_run(
    server: Server, queue: Broker
) -> None:
    """A crowd of clients that gave up (a page's fetch timing out) must not leave the
    server their reads to work through, holding everyone after them back."""
    queue.enqueue("t1")
    path = f"/api/snapshot?queue={queue.queue}"
    assert httpx.get(server.url + path, timeout=TIMEOUT).status_code == 200  # a first look
    before = scripts_run(queue.client)
    assert httpx.get(server.url + path, timeout=TIMEOUT).status_code == 200
    one = scripts_run(queue.client) - before
    before = scripts_run(queue.client)
    stall = stalling(queue.client, 1.0)  # the reads let in wait on Redis meanwhile
    time.sleep(0.2)  # Redis is busy now
    try:
        patient = sent_reads(server, path, HEAVY_AT_ONCE)
        time.sleep(0.2)  # they hold every thread for heavy reads now
        for connection in sent_reads(server, path, 30):
            connection.close()  # given up on while it waits for a thread
        assert [answered(c) for c in patient] == [200] * HEAVY_AT_ONCE
    finally:
        stall.join()
    time.sleep(0.5)  # any read still to run would have by now
    assert scripts_run(queue.client) - before == one * HEAVY_AT_ONCE, \
        "reads nobody waits for were run"


def test_heavy_reads_past_the_line_the_server_keeps_are_told_to_come_back_at_once(
    server: Server, queue: Broker
) -> None:
    path = f"/api/snapshot?queue={queue.queue}"
    stall = stalling(queue.client, 1.0)  # the reads let in wait on Redis meanwhile
    time.sleep(0.2)  # Redis is busy now
    try:
        crowd = sent_reads(server, path, HEAVY_AT_ONCE + HEAVY_WAITING + 6)
        answers = [answer_of(c) for c in crowd]
    finally:
        stall.join()
    statuses = [status for status, _, _ in answers]
    assert (statuses.count(200), statuses.count(503)) == (HEAVY_AT_ONCE + HEAVY_WAITING, 6)
    _, head, body = answers[statuses.index(503)]
    assert b"retry-after: 1" in head.lower()
    assert "slow reads are waiting" in json.loads(body)["error"]
    last = sent_reads(server, path, 1)[0]
    assert answered(last) == 200  # the line is open again


# Both read 500 queues a round trip, so it takes a thousand of them for a read to last
# long enough to tell a probe that waited from one that did not.
@pytest.mark.parametrize(("path", "queues"), [("/api/queues", 1000), ("/metrics", 1000)])
def test_a_crowd_reading_every_queues_counts_leaves_healthz_its_thread(
    server: Server, queue: Broker, path: str, queues: int
) -> None:
    """Each of these reads every queue's counts: a crowd of them waits its turn a few at
    a time instead of taking every thread of the pool, so `/healthz` (a load balancer's
    probe) answers at once meanwhile."""
    many = [f"crowded-{n}" for n in range(queues)]
    queue.client.sadd(QUEUES_KEY, *many)
    # Twice the 40 threads of the server's pool: without the limit every one of them is
    # taken and the probe waits in line behind the other 40, about as long as a read.
    crowded = 80
    try:
        with httpx.Client(base_url=server.url, timeout=httpx.Timeout(120.0),
                          limits=httpx.Limits(max_connections=crowded + 1)) as http:
            def timed(path: str) -> float:
                began = time.monotonic()
                assert http.get(path).status_code == 200
                return time.monotonic() - began

            with ThreadPoolExecutor(crowded + 1) as pool:
                crowd = [pool.submit(timed, path) for _ in range(crowded)]
                probes = []
                while not all(call.done() for call in crowd):
                    probes.append(timed("/healthz"))
                    time.sleep(0.05)
                reads = sorted(call.result() for call in crowd)
    finally:
        queue.client.srem(QUEUES_KEY, *many)
    assert probes, "the crowd ended before a probe"
    assert max(probes) < reads[len(reads) // 2] / 2, (max(probes), reads)


def test_a_json_logging_servers_every_line_is_json_a_bad_request_too(
    redis_server: EmbeddedRedis, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """uvicorn's own handlers wrote "WARNING:  Invalid HTTP request received." as plain
    text beside the JSON lines."""
    tmp = tmp_path_factory.mktemp("json-log")
    log = tmp / "serve.log"
    serve = Server(server_env(redis_server, tmp), log, "--log-format", "json").start()
    try:
        with socket.create_connection(("127.0.0.1", serve.port), timeout=10) as conn:
            conn.sendall(b"GET /\x1b[2J HTTP/1.1\r\nHost: \x00\r\n\r\n\x00\x01garbage\r\n\r\n")
            with contextlib.suppress(OSError):
                conn.recv(4096)
        wait_until(lambda: "Invalid HTTP request" in log.read_text(), 10,
                   "uvicorn to log the bad request")
    finally:
        serve.stop()
    lines = [line for line in log.read_text().splitlines() if line.strip()]
    records = [json.loads(line) for line in lines[1:]]  # after the URL it prints
    assert any("Invalid HTTP request" in r["message"] for r in records), lines
