"""A randomized soak of the SSE feed: one `taskq serve`, many clients that drop and
resume with their last id at random, two `taskq worker` processes working through
thousands of tasks, and a log trimmed to a few hundred rows, so resumes meet trims.

At the end every client's history must satisfy F1-F5: strictly increasing seqs, no
duplicate, every hole announced by a gap whose `first_available` shows the rows it
skipped were trimmed when it was sent (with exact MAXLEN trimming, the oldest row is
head - retention + 1), and every client at the head.

Sizes come from the environment: TASKQ_SOAK_CLIENTS (200), TASKQ_SOAK_SECONDS (20),
TASKQ_SOAK_TASKS (3000), TASKQ_SOAK_RETENTION (300), TASKQ_SOAK_SEED (1).
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import re
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest
import redis

from taskq.broker import Broker, NewTask
from taskq.processes import spawn, stop_all, taskq_command
from taskq.tools.embedded import EmbeddedRedis, free_port
from taskq.tools.ledger import Ledger
from waiting import worker_env

pytestmark = pytest.mark.soak

CLIENTS = int(os.environ.get("TASKQ_SOAK_CLIENTS", "200"))
SECONDS = float(os.environ.get("TASKQ_SOAK_SECONDS", "20"))
TASKS = int(os.environ.get("TASKQ_SOAK_TASKS", "3000"))
RETENTION = int(os.environ.get("TASKQ_SOAK_RETENTION", "300"))
SEED = int(os.environ.get("TASKQ_SOAK_SEED", "1"))
QUEUE = "soak"
SETTLE_SECONDS = 25.0
WIRE_ID = re.compile(rb"(\d+)\.(\d+)\.(\d+)")


@dataclass
class Gap:
    """A gap frame as one client received it, with the cursor it was sent for."""

    cursor: int  # seq of the client's last row (or resume point) when it was sent; 0: start
    requested: str
    first_available: int
    head: int
    reason: str
    resume_seq: int


@dataclass
class Client:
    """One SSE client over raw asyncio streams (HTTP/1.0, so the body is the bare event
    stream): it keeps the id of the last event it fully received and resumes with it."""

    number: int
    port: int
    rng: random.Random
    last_id: str = ""
    seq: int = 0
    epochs: set[bytes] = field(default_factory=set)
    rows: list[int] = field(default_factory=list)
    gaps: list[Gap] = field(default_factory=list)
    holes: list[tuple[int, int]] = field(default_factory=list)  # (cursor, next row seq)
    duplicates: int = 0
    connections: int = 0
    ended_by_server: int = 0

    async def session(self, until: float) -> None:
        """One connection, read until `until` (loop time) or the server ends it; then an
        abrupt drop: whatever was in flight is lost, as on a dead network."""
        self.connections += 1
        reader, writer = await asyncio.open_connection("127.0.0.1", self.port)
        resume = f"Last-Event-ID: {self.last_id}\r\n" if self.last_id else ""
        writer.write(f"GET /events?queue={QUEUE} HTTP/1.0\r\nHost: 127.0.0.1\r\n{resume}\r\n"
                     .encode())
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 30)
            assert head.startswith(b"HTTP/1.1 200 "), head
            buffer = b""
            loop = asyncio.get_running_loop()
            while (left := until - loop.time()) > 0:
                try:
                    chunk = await asyncio.wait_for(reader.read(65536), left)
                except TimeoutError:
                    break
                if not chunk:
                    self.ended_by_server += 1
                    break
                *blocks, buffer = (buffer + chunk).split(b"\n\n")
                for block in blocks:
                    self.take(block)
        finally:
            writer.transport.abort()

    async def until_seq(self, seq: int, seconds: float) -> None:
        """Stay connected until the last row held is `seq` (F5)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + seconds
        while self.seq < seq and loop.time() < deadline:
            await self.session(min(deadline, loop.time() + 2.0))

    def take(self, block: bytes) -> None:
        if not block.startswith(b"id: "):
            return  # retry advice or a heartbeat comment
        end = block.index(b"\n")
        wire = WIRE_ID.fullmatch(block, 4, end)
        assert wire is not None, block
        seq = int(wire.group(2))
        self.epochs.add(wire.group(1))
        if block.startswith(b"event: gap\n", end + 1):
            body = json.loads(block[block.index(b"data: ") + 6:])
            self.gaps.append(Gap(self.seq, body["requested"], body["first_available"],
                                 body["head"], body["reason"], seq))
        elif seq <= self.seq:
            self.duplicates += 1
        else:
            if seq != self.seq + 1:
                self.holes.append((self.seq, seq))
            self.rows.append(seq)
        self.seq = max(self.seq, seq)
        self.last_id = block[4:end].decode()

    async def wander(self, stop_at: float) -> None:
        """Until `stop_at`: connect, stay a random while, drop, stay away a random while."""
        loop = asyncio.get_running_loop()
        await asyncio.sleep(self.rng.uniform(0, SECONDS / 2))  # arrive at different times
        while (now := loop.time()) < stop_at:
            await self.session(min(stop_at, now + self.rng.expovariate(1 / 1.5)))
            away = self.rng.uniform(0, 0.4) if self.rng.random() < 0.7 else self.rng.uniform(1, 3)
            await asyncio.sleep(away)

    def gap_problems(self) -> list[str]:
        """Each gap must cover rows really trimmed when it was sent (F4), and say so
        consistently: the requested cursor is the client's, the rows after it are older
        than the oldest retained one, which exact trimming puts at head - retention + 1,
        and the client resumes at that head."""
        problems = []
        for gap in self.gaps:
            expected_first = max(1, gap.head - RETENTION + 1)
            if not (gap.reason == "trimmed" and gap.cursor < gap.first_available - 1
                    and gap.first_available == expected_first and gap.resume_seq == gap.head
                    and (gap.requested == "" if gap.cursor == 0
                         else gap.requested.split(".")[1] == str(gap.cursor))):
                problems.append(f"client {self.number}: {gap}")
        return problems

    def silent_holes(self) -> list[tuple[int, int]]:
        """Jumps between consecutive rows that no gap explains (a gap moves the cursor to
        its head, so the row after it must be head + 1): silent gaps (F1)."""
        return self.holes


@pytest.fixture
def env(redis_server: EmbeddedRedis, tmp_path: Path) -> dict[str, str]:
    ledger = tmp_path / "ledger.db"
    Ledger(ledger).close()  # the schema exists before workers race to create it
    return worker_env(redis_server.url, QUEUE, ledger, TASKQ_EVENTS_RETENTION=str(RETENTION),
                      WORK_SECONDS="0", LEASE_SECONDS="30", TASKQ_CONCURRENCY="8",
                      TASKQ_API_TOKEN="", TASKQ_FEED_HEARTBEAT_SECONDS="2")


@pytest.fixture
def processes(env: dict[str, str], tmp_path: Path) -> Iterator[list[subprocess.Popen[bytes]]]:
    started: list[subprocess.Popen[bytes]] = []
    yield started
    stop_all(started)


def start_server(env: dict[str, str], log: Path, started: list[subprocess.Popen[bytes]]) -> int:
    port = free_port()
    process = spawn(taskq_command("serve", "--port", str(port)), env, str(log))
    started.append(process)
    deadline = time.monotonic() + 30
    while process.poll() is None and time.monotonic() < deadline:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200:
                return port
        except httpx.TransportError:
            time.sleep(0.05)
    raise AssertionError(f"taskq serve did not come up:\n{log.read_text()}")


def feed_clients(port: int) -> int:
    text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=10).text
    found = re.search(rf'^taskq_feed_clients{{queue="{QUEUE}"}} (\d+)$', text, re.M)
    return int(found.group(1)) if found else -1


def completed(broker: Broker) -> int:
    return int(broker.client.hget(broker.keys.stats, "completed:completed") or 0)


async def produce(broker: Broker, stop_at: float) -> None:
    """Enqueue TASKS tasks in small batches spread over the run."""
    loop = asyncio.get_running_loop()
    batches = [list(range(i, min(TASKS, i + 25))) for i in range(0, TASKS, 25)]
    pause = max(0.0, (stop_at - loop.time()) * 0.8 / len(batches))
    for batch in batches:
        await asyncio.to_thread(broker.enqueue_many, [NewTask(f"soak-{i}") for i in batch])
        await asyncio.sleep(pause)


def test_many_clients_dropping_and_resuming_under_load_keep_f1_to_f5(
    env: dict[str, str],
    processes: list[subprocess.Popen[bytes]],
    client: redis.Redis,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    started = time.monotonic()
    port = start_server(env, tmp_path / "serve.log", processes)
    for n in range(2):
        processes.append(spawn(taskq_command("worker"), env, str(tmp_path / f"worker-{n}.log")))
    broker = Broker(client, QUEUE, events_retention=RETENTION)
    rng = random.Random(SEED)
    clients = [Client(n, port, random.Random(rng.random())) for n in range(CLIENTS)]

    async def soak() -> int:
        loop = asyncio.get_running_loop()
        stop_at = loop.time() + SECONDS
        await asyncio.gather(produce(broker, stop_at), *(c.wander(stop_at) for c in clients))
        # Let the workers finish, then everyone must reach the final head.
        deadline = loop.time() + SETTLE_SECONDS
        while completed(broker) < TASKS:
            assert loop.time() < deadline, f"only {completed(broker)} of {TASKS} completed"
            await asyncio.sleep(0.1)
        head = int(client.get(broker.keys.seq) or 0)
        await asyncio.gather(*(c.until_seq(head, SETTLE_SECONDS) for c in clients))
        return head

    head = asyncio.run(soak())
    deadline = time.monotonic() + 15
    while (connected := feed_clients(port)) != 0 and time.monotonic() < deadline:
        time.sleep(0.1)
    elapsed = time.monotonic() - started

    delivered = sum(len(c.rows) for c in clients)
    gaps = sum(len(c.gaps) for c in clients)
    on_resume = sum(1 for c in clients for g in c.gaps if g.cursor)
    duplicates = sum(c.duplicates for c in clients)
    silent = {c.number: h for c in clients if (h := c.silent_holes())}
    bad_gaps = [p for c in clients for p in c.gap_problems()]
    behind = {c.number: c.seq for c in clients if c.seq != head}
    epochs = set().union(*(c.epochs for c in clients))
    with capsys.disabled():
        print(f"\nfeed soak: {CLIENTS} clients, {sum(c.connections for c in clients)} "
              f"connections, {delivered} events delivered, {gaps} gaps ({on_resume} on "
              f"resume, {gaps - on_resume} on first connect), {duplicates} "
              f"duplicates, {sum(len(h) for h in silent.values())} silent holes, "
              f"{CLIENTS - len(behind)}/{CLIENTS} at head {head}; {TASKS} tasks, "
              f"retention {RETENTION}, {elapsed:.1f}s")

    assert duplicates == 0
    assert silent == {}, f"holes no gap announced: {dict(list(silent.items())[:5])}"
    assert bad_gaps == [], bad_gaps[:5]
    assert behind == {}, f"clients not at the head {head}: {dict(list(behind.items())[:10])}"
    assert len(epochs) == 1, epochs
    assert all(c.rows == sorted(set(c.rows)) for c in clients)
    assert head > 3 * RETENTION, "the log should have been trimmed many times over"
    assert on_resume > 0, "no resume met a trimmed log: the soak did not test F4"
    assert connected == 0, f"{connected} feed clients still counted after all left"
