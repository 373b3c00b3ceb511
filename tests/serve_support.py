"""What the `taskq serve` tests share: a server process on the session Redis, its
fixtures, and a client that reads the SSE stream off the wire."""

from __future__ import annotations

import json
import re
import subprocess
import time
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from taskq.broker import Broker, NewTask
from taskq.processes import spawn, stop_all, taskq_command
from taskq.settings import Settings, Simulation, child_environment
from taskq.tools.embedded import EmbeddedRedis, free_port

TOKEN = "feed-test-token-0123"
HEARTBEAT = 0.5
SEND_TIMEOUT = 1.0
TIMEOUT = httpx.Timeout(10.0)
WIRE_LINE = re.compile(
    rb"id: [0-9.]+|event: [a-z_]+|data: [\x20-\x7e]*|retry: [0-9]+|: ?[\x20-\x7e]*|"
)


# -- one `taskq serve` ---------------------------------------------------------------


class Server:
    """One `taskq serve` process on a free port; `start` waits for /healthz (to say
    Redis is up, or only to answer when `redis_up` is false)."""

    def __init__(self, env: dict[str, str], log: Path, *args: str) -> None:
        self.env, self.log, self.args = env, log, args
        self.port = 0
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, redis_up: bool = True) -> Server:
        for _ in range(3):  # another process may take the free port before we bind it
            self.port = free_port()
            argv = taskq_command("serve", "--port", str(self.port), *self.args)
            self.process = spawn(argv, self.env, str(self.log))
            if self._healthy(200 if redis_up else 503):
                return self
            stop_all([self.process])
            if "already in use" not in self.log.read_text(errors="replace"):
                break
        raise AssertionError(f"taskq serve did not come up:\n{self.log.read_text()}")

    def _healthy(self, status: int) -> bool:
        assert self.process is not None
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and self.process.poll() is None:
            try:
                if httpx.get(f"{self.url}/healthz", timeout=1).status_code == status:
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
    """The environment of a test's `taskq serve`: no token, short feed timings."""
    settings = Settings.from_env({}, redis_url=redis_server.url, api_token="",
                                 feed_heartbeat_seconds=HEARTBEAT,
                                 feed_send_timeout_seconds=SEND_TIMEOUT)
    return child_environment(settings, Simulation(ledger_path=str(tmp / "ledger.db")), **extra)


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


