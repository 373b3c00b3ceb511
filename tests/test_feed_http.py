"""`taskq serve` over real HTTP: the SSE feed's wire format and resumes, hostile
`Last-Event-ID`s, heartbeats, cutting a client that stops reading, access control,
the JSON API and /metrics. Each test uses a queue of its own on one server process."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis

from taskq.broker import Broker, NewTask
from taskq.embedded import EmbeddedRedis, free_port
from taskq.processes import spawn, stop_all, taskq_command

TOKEN = "feed-test-token-0123"
HEARTBEAT = 0.5
SEND_TIMEOUT = 1.0
TIMEOUT = httpx.Timeout(10.0)
WIRE_LINE = re.compile(
    rb"id: [0-9.]+|event: [a-z_]+|data: [\x20-\x7e]*|retry: [0-9]+|: ?[\x20-\x7e]*|"
)


# -- one `taskq serve` ---------------------------------------------------------------


class Server:
    """One `taskq serve` process on a free port; `start` waits for /healthz."""

    def __init__(self, env: dict[str, str], log: Path, *args: str) -> None:
        self.env, self.log, self.args = env, log, args
        self.port = 0
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> Server:
        for _ in range(3):  # another process may take the free port before we bind it
            self.port = free_port()
            argv = taskq_command("serve", "--port", str(self.port), *self.args)
            self.process = spawn(argv, self.env, str(self.log))
            if self._healthy():
                return self
            stop_all([self.process])
            if "already in use" not in self.log.read_text(errors="replace"):
                break
        raise AssertionError(f"taskq serve did not come up:\n{self.log.read_text()}")

    def _healthy(self) -> bool:
        assert self.process is not None
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and self.process.poll() is None:
            try:
                if httpx.get(f"{self.url}/healthz", timeout=1).status_code == 200:
                    return True
            except httpx.TransportError:
                time.sleep(0.05)
        return False

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def stop(self) -> None:
        if self.process is not None:
            stop_all([self.process])


def server_env(redis_server: EmbeddedRedis, tmp: Path, **extra: str) -> dict[str, str]:
    return {
        **os.environ, "REDIS_URL": redis_server.url, "LEDGER_PATH": str(tmp / "ledger.db"),
        "TASKQ_API_TOKEN": "", "TASKQ_FEED_HEARTBEAT_SECONDS": str(HEARTBEAT),
        "TASKQ_FEED_SEND_TIMEOUT_SECONDS": str(SEND_TIMEOUT), **extra,
    }  # fmt: skip


@pytest.fixture(scope="module")
def server(
    redis_server: EmbeddedRedis, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Server]:
    tmp = tmp_path_factory.mktemp("serve")
    serve = Server(server_env(redis_server, tmp), tmp / "serve.log").start()
    yield serve
    serve.stop()


@pytest.fixture(scope="module")
def secured(
    redis_server: EmbeddedRedis, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Server]:
    tmp = tmp_path_factory.mktemp("secured")
    env = server_env(redis_server, tmp, TASKQ_API_TOKEN=TOKEN)
    serve = Server(env, tmp / "serve.log").start()
    yield serve
    serve.stop()


@pytest.fixture
def queue(client: redis.Redis) -> Broker:
    """A queue of this test's own, on the (flushed) session Redis."""
    return Broker(client, f"h-{uuid.uuid4().hex[:10]}")


# -- reading the stream off the wire -----------------------------------------------


@dataclass(frozen=True)
class Sse:
    """One block of the stream: an event, a comment (heartbeat) or the retry advice."""

    event: str = ""
    id: str = ""
    data: str = ""
    comment: str | None = None
    retry: str = ""

    @property
    def body(self) -> dict[str, Any]:
        value: dict[str, Any] = json.loads(self.data)
        return value

    @property
    def seq(self) -> int:
        return int(self.id.split(".")[1])

    @property
    def is_row(self) -> bool:
        return bool(self.id) and self.event != "gap"


class FeedStream:
    """Splits the raw bytes of an SSE response into blocks, and checks every line on the
    way: no CR or NUL anywhere, ids only digits and dots, event names only lower-case
    letters and '_', data one line of printable ASCII (JSON)."""

    def __init__(self, response: httpx.Response) -> None:
        self.response = response
        self._chunks = response.iter_bytes()
        self._buffer = b""
        self._blocks: deque[bytes] = deque()

    def next(self) -> Sse:
        while not self._blocks:
            chunk = next(self._chunks, None)
            assert chunk is not None, "the server ended the stream"
            assert b"\r" not in chunk and b"\x00" not in chunk, chunk
            *blocks, self._buffer = (self._buffer + chunk).split(b"\n\n")
            self._blocks.extend(blocks)
        return parse_block(self._blocks.popleft())

    def until(self, done: Callable[[Sse], bool], seconds: float = 15.0) -> list[Sse]:
        """Blocks up to and including the first that is `done`; heartbeats keep it moving."""
        deadline = time.monotonic() + seconds
        got: list[Sse] = []
        while time.monotonic() < deadline:
            got.append(self.next())
            if done(got[-1]):
                return got
        raise AssertionError(f"not done within {seconds}s; got {got[-5:]}")

    def rows_until_quiet(self) -> list[Sse]:
        """Every block up to the next heartbeat, i.e. all the server had to send."""
        return self.until(lambda block: block.comment is not None)


def parse_block(block: bytes) -> Sse:
    fields: dict[str, str] = {}
    comment = None
    for line in block.split(b"\n"):
        assert WIRE_LINE.fullmatch(line), f"a line no SSE client should see: {line!r}"
        text = line.decode("ascii")
        if text.startswith(":"):
            comment = text[1:].strip()
            continue
        name, _, value = text.partition(": ")
        assert name not in fields, f"field {name} twice in one event: {block!r}"
        fields[name] = value
    return Sse(fields.get("event", ""), fields.get("id", ""), fields.get("data", ""),
               comment, fields.get("retry", ""))


@contextmanager
def feed(
    server: Server,
    queue: Broker,
    last_event_id: str | None = None,
    *,
    query: str | None = None,
    headers: dict[str, str] | None = None,
) -> Iterator[FeedStream]:
    """An open `/events` stream of `queue`, resumed by the `Last-Event-ID` header (sent
    as UTF-8 bytes, as a browser would pass them on) or by the query parameter."""
    params = {"queue": queue.queue}
    if query is not None:
        params["last_event_id"] = query
    sent = [(k.encode(), v.encode()) for k, v in (headers or {}).items()]
    if last_event_id is not None:
        sent.append((b"last-event-id", last_event_id.encode()))
    with httpx.Client(timeout=TIMEOUT) as http, http.stream(
        "GET", f"{server.url}/events", params=params, headers=sent
    ) as response:
        assert response.status_code == 200, response.read()
        stream = FeedStream(response)
        assert stream.next().retry == "1000"
        yield stream


def enqueue(queue: Broker, n: int, prefix: str = "t") -> list[str]:
    ids = [f"{prefix}-{i}" for i in range(n)]
    queue.enqueue_many([NewTask(task_id) for task_id in ids])
    return ids


def head_id(queue: Broker) -> str:
    """The wire id of the queue log's last row."""
    client = queue.client
    last = client.xrevrange(queue.keys.events, count=1) or []
    fields = last[0][1] if last else None
    assert fields is not None, "the log is empty"
    seq = str(last[0][0]).split("-")[0]
    return f"{client.get(queue.keys.epoch)!s}.{seq}.{fields['ts']!s}"


def metric(server: Server, name: str, queue: Broker) -> float | None:
    text = httpx.get(f"{server.url}/metrics", timeout=TIMEOUT).text
    found = re.search(rf'^{name}{{queue="{re.escape(queue.queue)}"}} (\S+)$', text, re.M)
    return float(found.group(1)) if found else None


def wait_for(check: Callable[[], bool], what: str, seconds: float = 20.0) -> None:
    deadline = time.monotonic() + seconds
    while not check():
        assert time.monotonic() < deadline, f"timed out after {seconds}s waiting for {what}"
        time.sleep(0.05)


# -- the stream ----------------------------------------------------------------------


def test_the_feed_is_an_uncached_unbuffered_event_stream(server: Server, queue: Broker) -> None:
    enqueue(queue, 2)
    with feed(server, queue) as stream:
        headers = stream.response.headers
        assert headers["content-type"].startswith("text/event-stream")
        assert headers["cache-control"] == "no-store"
        assert headers["x-accel-buffering"] == "no"
        rows = [b for b in stream.rows_until_quiet() if b.is_row]
    assert [(r.event, r.seq, r.body["task"]) for r in rows] == [
        ("enqueued", 1, "t-0"), ("enqueued", 2, "t-1")]
    assert all(r.body["id"] == r.id and r.body["seq"] == r.seq for r in rows)


@pytest.mark.parametrize("how", ["header", "query"])
def test_a_client_resumes_with_its_last_event_id(
    server: Server, queue: Broker, how: str
) -> None:
    enqueue(queue, 3, "before")
    with feed(server, queue) as stream:
        first = [b for b in stream.rows_until_quiet() if b.is_row]
    last = first[-1].id
    enqueue(queue, 2, "after")
    header, query = (last, None) if how == "header" else (None, last)
    with feed(server, queue, header, query=query) as stream:
        missed = stream.rows_until_quiet()
        enqueue(queue, 1, "live")
        live = stream.until(lambda b: b.is_row)
    assert [b.seq for b in first] == [1, 2, 3]
    assert [(b.event, b.seq) for b in missed if b.id] == [("enqueued", 4), ("enqueued", 5)]
    assert [(b.seq, b.body["task"]) for b in live if b.is_row] == [(6, "live-0")]


def test_event_fields_with_cr_lf_nul_and_unicode_stay_inside_one_data_line(
    server: Server, queue: Broker
) -> None:
    nasty = "boom\r\nid: 666\n\nevent: evil\x00 ✓ 🚀"
    queue.enqueue("n", max_retries=0)
    got = queue.lease("w", 30)
    assert got is not None
    queue.fail(*got, error=nasty)
    with feed(server, queue) as stream:
        rows = [b for b in stream.rows_until_quiet() if b.is_row]
    assert [r.event for r in rows] == ["enqueued", "leased", "failed"]
    assert rows[-1].body["error"] == nasty


# -- hostile Last-Event-IDs ----------------------------------------------------------

# label -> (the value, given the log's head as epoch and seq; the gap reasons it may get)
HOSTILE: dict[str, tuple[Callable[[str, int], str], set[str]]] = {
    "garbage": (lambda e, h: "hello", {"malformed"}),
    "4kb": (lambda e, h: "7" * 4096, {"malformed"}),
    "4kb-dotted": (lambda e, h: "1." * 2048, {"malformed"}),
    "30-digits": (lambda e, h: "1" * 30, {"malformed"}),
    "30-digit-seq": (lambda e, h: f"{e}.{'9' * 30}.1", {"malformed"}),
    "negative": (lambda e, h: "-1", {"malformed"}),
    "negative-seq": (lambda e, h: f"{e}.-{h}.0", {"malformed"}),
    "another-epoch": (lambda e, h: f"{int(e) + 1}.{h}.0", {"epoch"}),
    "ahead": (lambda e, h: f"{e}.{h + 1000}.0", {"ahead"}),
    "wrong-fingerprint": (lambda e, h: f"{e}.{h}.1", {"diverged"}),
    "too-many-parts": (lambda e, h: f"{e}.{h}.0.1", {"malformed"}),
    "dots": (lambda e, h: "...", {"malformed"}),
    "unicode": (lambda e, h: "ünïcødé ✓ 🚀", {"malformed"}),
    # Arabic-Indic digits: Python's \d takes them, Redis's epoch never equals them.
    "unicode-digits": (lambda e, h: "\u0661\u0662.\u0664.\u0665", {"malformed", "epoch"}),
    "nul": (lambda e, h: f"{e}.{h}.0\x00", {"malformed"}),
    "crlf-injection": (lambda e, h: "1.2.3\r\nevent: evil\r\n\r\ndata: {}", {"malformed"}),
    "lf-inside": (lambda e, h: f"{e}.\n{h}.0", {"malformed"}),
}
SENDABLE_AS_HEADER = {k for k in HOSTILE if k not in ("nul", "crlf-injection", "lf-inside")}
CASES = [(k, "query") for k in HOSTILE] + [(k, "header") for k in sorted(SENDABLE_AS_HEADER)]


@pytest.mark.parametrize(("label", "how"), CASES, ids=[f"{k}-{h}" for k, h in CASES])
def test_a_hostile_last_event_id_gets_a_gap_and_then_live_rows(
    server: Server, queue: Broker, label: str, how: str
) -> None:
    enqueue(queue, 3)
    epoch, head = head_id(queue).split(".")[:2]
    make, reasons = HOSTILE[label]
    value = make(epoch, int(head))
    header, query = (value, None) if how == "header" else (None, value)  # percent-encoded
    with feed(server, queue, header, query=query) as stream:
        gap = stream.next()
        enqueue(queue, 1, "live")
        live = stream.until(lambda b: b.is_row)[-1]
    assert gap.event == "gap", gap
    assert gap.body["reason"] in reasons, gap.body
    assert (gap.body["head"], gap.seq, gap.body["resume_id"]) == (3, 3, gap.id)
    assert len(gap.body["requested"]) <= 120
    if how == "query" and gap.body["reason"] == "malformed":
        assert gap.body["requested"] == value[:120]
    assert (live.seq, live.body["task"]) == (4, "live-0")


def test_a_barrage_of_hostile_ids_does_not_disturb_other_clients(
    server: Server, queue: Broker
) -> None:
    enqueue(queue, 2)
    epoch, head = head_id(queue).split(".")[:2]
    with feed(server, queue) as bystander:
        assert [b.seq for b in bystander.rows_until_quiet() if b.is_row] == [1, 2]
        for make, _ in HOSTILE.values():
            with feed(server, queue, query=make(epoch, int(head))) as stream:
                assert stream.next().event == "gap"
            response = httpx.get(f"{server.url}/events", timeout=TIMEOUT,
                                 params={"queue": "no such queue!"})
            assert response.status_code == 400  # a bad queue name is a plain error
        enqueue(queue, 1, "after")
        after = bystander.until(lambda b: b.is_row)[-1]
    assert (after.seq, after.body["task"]) == (3, "after-0")
    assert server.alive()
    assert httpx.get(f"{server.url}/healthz", timeout=TIMEOUT).json()["ok"] is True


# -- heartbeats and slow clients -----------------------------------------------------


def test_an_idle_stream_gets_comment_heartbeats(server: Server, queue: Broker) -> None:
    enqueue(queue, 1)
    with feed(server, queue, head_id(queue)) as stream:
        started = time.monotonic()
        comments = [b for b in stream.until(lambda b: b.comment is not None) if b.comment]
        stream.until(lambda b: b.comment is not None)
        stream.until(lambda b: b.comment is not None)
        took = time.monotonic() - started
    assert comments and not any(b.id for b in comments)
    assert took < 3 * HEARTBEAT + 2.0, f"three heartbeats took {took:.1f}s"


def read_all(stream: FeedStream, n: int, out: list[Sse], errors: list[BaseException]) -> None:
    try:
        while len(out) < n:
            block = stream.next()
            if block.id:
                out.append(block)
    except BaseException as e:  # reported by the test thread
        errors.append(e)


def dechunk(raw: bytes) -> bytes:
    """The body of a chunked HTTP/1.1 response, as far as it got."""
    _, _, body = raw.partition(b"\r\n\r\n")
    out = bytearray()
    while body:
        size_line, sep, rest = body.partition(b"\r\n")
        if not sep or int(size_line, 16) == 0:
            break
        size = int(size_line, 16)
        out += rest[:size]
        body = rest[size + 2:]
    return bytes(out)


def test_a_client_that_stops_reading_is_cut_while_others_get_every_event(
    server: Server, queue: Broker
) -> None:
    total = 20_000
    slow = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    slow.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    slow.connect(("127.0.0.1", server.port))
    slow.sendall(f"GET /events?queue={queue.queue} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".encode())
    received: list[Sse] = []
    errors: list[BaseException] = []
    try:
        with feed(server, queue) as normal:
            reader = threading.Thread(target=read_all, args=(normal, total, received, errors))
            reader.start()
            wait_for(lambda: metric(server, "taskq_feed_clients", queue) == 2, "two clients")
            for start in range(0, total, 1000):
                queue.enqueue_many([NewTask(f"s-{i}") for i in range(start, start + 1000)])
            wait_for(lambda: metric(server, "taskq_feed_clients", queue) == 1,
                     "the slow client to be cut", seconds=30)
            reader.join(60)
            assert not reader.is_alive(), f"the normal client got {len(received)} events"
        assert errors == []
        assert [b.seq for b in received] == list(range(1, total + 1))
        assert all(b.event == "enqueued" for b in received)
        # The slow client was sent what its buffers held, then the server closed.
        slow.settimeout(1.0)
        raw = b""
        deadline = time.monotonic() + 30
        while chunk := slow.recv(65536):
            raw += chunk
            assert time.monotonic() < deadline, "the cut client's socket never reached EOF"
    finally:
        slow.close()
    assert raw.startswith(b"HTTP/1.1 200")
    ids = re.findall(rb"^id: [0-9]+\.([0-9]+)\.", dechunk(raw), re.M)
    assert 0 < len(ids) < total
    assert [int(i) for i in ids] == list(range(1, len(ids) + 1))
    wait_for(lambda: metric(server, "taskq_feed_clients", queue) == 0, "no clients left")


# -- access control ------------------------------------------------------------------


def test_with_a_token_everything_but_healthz_needs_it(secured: Server, queue: Broker) -> None:
    bearer = {"authorization": f"Bearer {TOKEN}"}
    wrong = {"authorization": "Bearer not-the-token-at-all"}
    with httpx.Client(base_url=secured.url, timeout=TIMEOUT) as http:
        assert http.get("/healthz").status_code == 200
        for path in ("/events", "/api/queues", "/api/dlq", "/metrics", "/"):
            assert http.get(path).status_code == 401, path
            assert http.get(path, headers=wrong).status_code == 401, path
        assert http.get("/api/queues", headers=bearer).status_code == 200
        with http.stream("GET", "/events", headers=bearer,
                         params={"queue": queue.queue}) as response:
            assert response.status_code == 200
            assert FeedStream(response).next().retry == "1000"


def test_opening_the_page_with_the_token_sets_a_cookie_that_opens_the_feed(
    secured: Server, queue: Broker
) -> None:
    enqueue(queue, 1)
    with httpx.Client(base_url=secured.url, timeout=TIMEOUT) as http:
        login = http.get("/", params={"token": TOKEN})
        assert login.status_code == 303 and login.headers["location"] == "/"
        cookie = login.headers["set-cookie"]
        assert cookie.startswith(f"taskq_token={TOKEN};")
        assert "HttpOnly" in cookie and "SameSite=Strict" in cookie
    with httpx.Client(base_url=secured.url, timeout=TIMEOUT) as http:  # no cookie yet
        assert http.get("/", params={"token": "wrong-token-123"}).status_code == 401
    with feed(secured, queue, headers={"cookie": f"taskq_token={TOKEN}"}) as stream:
        assert [b.seq for b in stream.rows_until_quiet() if b.is_row] == [1]
    with httpx.Client(base_url=secured.url, timeout=TIMEOUT) as http:
        stale = http.get("/api/queues", headers={"cookie": "taskq_token=wrong-token-123"})
        assert stale.status_code == 401


def test_writes_need_the_request_header_and_the_same_origin(
    secured: Server, queue: Broker
) -> None:
    bearer = {"authorization": f"Bearer {TOKEN}"}
    path = f"/api/dlq/x/retry?queue={queue.queue}"
    with httpx.Client(base_url=secured.url, timeout=TIMEOUT) as http:
        assert http.post(path, headers=bearer).status_code == 403
        foreign = {**bearer, "x-taskq-request": "1", "origin": "http://evil.example"}
        assert http.post(path, headers=foreign).status_code == 403
        own = {**bearer, "x-taskq-request": "1", "origin": secured.url}
        assert http.post(path, headers=own).status_code == 404  # allowed; x is not dead
        assert http.post(path, headers={"x-taskq-request": "1"}).status_code == 401


def test_serving_beyond_loopback_without_a_token_is_refused(
    redis_server: EmbeddedRedis, tmp_path: Path
) -> None:
    env = server_env(redis_server, tmp_path)
    argv = taskq_command("serve", "--host", "0.0.0.0", "--port", str(free_port()))
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 2, done
    assert "refusing to serve on '0.0.0.0' without TASKQ_API_TOKEN" in done.stderr
    assert "Traceback" not in done.stderr


# -- the JSON API and /metrics -------------------------------------------------------


def fill(queue: Broker) -> None:
    """One dead task, two ready, one leased, one delayed."""
    queue.enqueue("dead-1", max_retries=0)
    got = queue.lease("w", 30)
    assert got is not None and got[0] == "dead-1"
    assert queue.fail(*got, error="it broke").status == "dead"
    enqueue(queue, 3, "ready")
    assert queue.lease("w", 30) is not None
    queue.enqueue("later", delay=3600)


def test_api_queues_counts_each_structure(server: Server, queue: Broker) -> None:
    fill(queue)
    listed = httpx.get(f"{server.url}/api/queues", timeout=TIMEOUT).json()["queues"]
    mine = [q for q in listed if q["name"] == queue.queue]
    assert mine == [{"name": queue.queue, "ready": 2, "leased": 1, "delayed": 1, "dead": 1}]


def test_api_tasks_shows_a_record_and_404s_a_missing_one(server: Server, queue: Broker) -> None:
    fill(queue)
    with httpx.Client(base_url=server.url, params={"queue": queue.queue},
                      timeout=TIMEOUT) as http:
        record = http.get("/api/tasks/dead-1").json()
        assert (record["task_id"], record["state"], record["last_error"]) == (
            "dead-1", "dead", "it broke")
        assert http.get("/api/tasks/later").json()["state"] == "delayed"
        missing = http.get("/api/tasks/nope")
        assert missing.status_code == 404 and "nope" in missing.json()["error"]


def test_api_dlq_lists_the_dead_and_retry_revives_them_once(
    server: Server, queue: Broker
) -> None:
    fill(queue)
    write = {"x-taskq-request": "1"}
    with httpx.Client(base_url=server.url, params={"queue": queue.queue},
                      timeout=TIMEOUT) as http:
        dead = http.get("/api/dlq").json()["dead"]
        assert [(d["task_id"], d["last_error"]) for d in dead] == [("dead-1", "it broke")]
        assert http.post("/api/dlq/dead-1/retry").status_code == 403  # no request header
        assert http.post("/api/dlq/dead-1/retry", headers=write).json() == {"retried": "dead-1"}
        assert http.get("/api/tasks/dead-1").json()["state"] == "pending"
        assert http.post("/api/dlq/dead-1/retry", headers=write).status_code == 404
        assert http.post("/api/dlq/ready-0/retry", headers=write).status_code == 404
        assert http.get("/api/dlq").json()["dead"] == []


def test_a_snapshot_position_resumes_the_feed_exactly_after_it(
    server: Server, queue: Broker
) -> None:
    enqueue(queue, 5, "seen")
    snap = httpx.get(f"{server.url}/api/snapshot", params={"queue": queue.queue},
                     timeout=TIMEOUT).json()
    assert snap["counts"]["ready"] == 5 and snap["seq"] == 5
    enqueue(queue, 3, "new")
    with feed(server, queue, query=snap["position"]) as stream:
        after = stream.rows_until_quiet()
    assert [(b.event, b.seq, b.body["task"]) for b in after if b.id] == [
        ("enqueued", 6, "new-0"), ("enqueued", 7, "new-1"), ("enqueued", 8, "new-2")]


METRICS = (
    "taskq_tasks", "taskq_completions_total", "taskq_failures_total", "taskq_retries_total",
    "taskq_reaps_total", "taskq_dead_total", "taskq_enqueued_total", "taskq_feed_clients",
    "taskq_feed_deliveries_total",
)


def test_metrics_has_the_documented_names_and_counts(server: Server, queue: Broker) -> None:
    fill(queue)
    with feed(server, queue) as stream:
        stream.rows_until_quiet()
        text = httpx.get(f"{server.url}/metrics", timeout=TIMEOUT).text
        clients = metric(server, "taskq_feed_clients", queue)
    for name in METRICS:
        assert f"# TYPE {name} " in text, name
    assert f'taskq_tasks{{queue="{queue.queue}",structure="ready"}} 2' in text
    assert f'taskq_tasks{{queue="{queue.queue}",structure="dead"}} 1' in text
    assert metric(server, "taskq_enqueued_total", queue) == 5
    assert metric(server, "taskq_dead_total", queue) == 1
    assert clients == 1
    delivered = metric(server, "taskq_feed_deliveries_total", queue)
    assert delivered is not None and delivered >= 8
