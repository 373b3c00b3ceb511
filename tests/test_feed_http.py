"""`taskq serve` over real HTTP: the SSE feed's wire format and resumes, hostile
`Last-Event-ID`s, heartbeats, and cutting a client that stops reading while the others
get every event. Each test uses a queue of its own on one server process."""

from __future__ import annotations

import os
import re
import signal
import socket
import threading
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from serve_support import (
    HEARTBEAT,
    TIMEOUT,
    FeedStream,
    Server,
    Sse,
    enqueue,
    feed,
    head_id,
    metric,
    server_env,
)
from taskq.broker import Broker, NewTask
from taskq.tools.embedded import EmbeddedRedis
from waiting import wait_until

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


def test_an_enqueued_events_priority_is_a_number_given_when_not_the_default(
    server: Server, queue: Broker
) -> None:
    queue.enqueue("urgent", priority=9)
    queue.enqueue("plain")
    with feed(server, queue) as stream:
        rows = [b for b in stream.rows_until_quiet() if b.is_row]
    assert [r.body.get("priority") for r in rows] == [9, None]


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
            # An event, not an error status, after which EventSource would retry at once.
            assert response.status_code == 200
            assert response.text.startswith("retry: 60000\nevent: invalid\ndata: ")
            assert "queue='no such queue!' is not accepted" in response.text
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
            wait_until(lambda: metric(server, "taskq_feed_clients", queue) == 2, 20, "two clients")
            for start in range(0, total, 1000):
                queue.enqueue_many([NewTask(f"s-{i}") for i in range(start, start + 1000)])
            wait_until(lambda: metric(server, "taskq_feed_clients", queue) == 1, 30,
                       "the slow client to be cut")
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
    wait_until(lambda: metric(server, "taskq_feed_clients", queue) == 0, 20, "no clients left")


def fd_target(fd: Path) -> str:
    """What an open file descriptor points at; '' for one closed since it was listed."""
    try:
        return os.readlink(fd)
    except FileNotFoundError:
        return ""


def connections_of(server: Server) -> int:
    """The client connections the server process holds open (its sockets on its port,
    the listening one aside; its Redis connections are on other ports)."""
    assert server.process is not None
    held = {link[len("socket:["):-1]
            for link in map(fd_target, Path(f"/proc/{server.process.pid}/fd").iterdir())
            if link.startswith("socket:[")}
    port = f":{server.port:04X}"
    count = 0
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        local, state, inode = fields[1], fields[3], fields[9]
        count += local.endswith(port) and state != "0A" and inode in held  # 0A: listening
    return count


def test_a_cut_client_that_never_reads_costs_the_server_no_connection(
    server: Server, queue: Broker
) -> None:
    enqueue(queue, 20_000)
    before = connections_of(server)
    stalled = []
    try:
        for _ in range(3):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            s.connect(("127.0.0.1", server.port))
            s.sendall(f"GET /events?queue={queue.queue} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
                      .encode())
            stalled.append(s)
        wait_until(lambda: metric(server, "taskq_feed_clients", queue) == 3, 20, "3 clients")
        wait_until(lambda: not metric(server, "taskq_feed_clients", queue), 30,
                   "the clients to be cut")
        # Not one of them has read a byte: closing would wait on them for ever.
        wait_until(lambda: connections_of(server) <= before, 10, "the server to let go of them")
    finally:
        for s in stalled:
            s.close()


def test_a_client_with_no_id_on_a_trimmed_log_gets_a_trimmed_gap_then_the_head(
    server: Server, queue: Broker
) -> None:
    short = Broker(queue.client, queue.queue, events_retention=3)
    enqueue(short, 10)
    with feed(server, queue) as stream:
        gap = stream.next()
        enqueue(queue, 1, "live")
        live = stream.until(lambda b: b.is_row)[-1]
    assert gap.event == "gap" and gap.body["reason"] == "trimmed", gap
    assert (gap.body["requested"], gap.body["head"], gap.seq) == ("", 10, 10)
    assert (live.seq, live.body["task"]) == (11, "live-0")


def test_a_server_told_to_stop_ends_its_open_streams_cleanly(
    redis_server: EmbeddedRedis, tmp_path: Path, queue: Broker
) -> None:
    """Ctrl-C with dashboards open: each stream ends within the grace, so uvicorn has no
    stream to cancel and logs no traceback for one."""
    enqueue(queue, 3)
    log = tmp_path / "serve.log"
    serve = Server(server_env(redis_server, tmp_path), log).start()
    streams = []
    try:
        for _ in range(3):
            s = socket.create_connection(("127.0.0.1", serve.port))
            s.sendall(f"GET /events?queue={queue.queue} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
                      .encode())
            streams.append(s)
        wait_until(lambda: metric(serve, "taskq_feed_clients", queue) == 3, 20, "3 clients")
        assert serve.process is not None
        serve.process.send_signal(signal.SIGINT)
        assert serve.process.wait(20) == 0
    finally:
        for s in streams:
            s.close()
        serve.stop()
    said = log.read_text(errors="replace")
    assert "Traceback" not in said and "Exception in ASGI application" not in said, said
