"""The feed: event deliveries per second to 100 and 1,000 SSE clients of one `taskq serve`,
and the time to resume a client 10,000 events behind."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass

from bench.feed_clients import FeedClient, connect, ended, wait_healthy
from bench.harness import BenchError, Child, Options, Section, Server, Stat, python_module, rate
from taskq import Broker, NewTask
from taskq.keys import QUEUES_KEY, QueueKeys
from taskq.tools.embedded import free_port

RETENTION = 1_000_000
PRODUCER_RATE = 2_000.0
BEHIND = 10_000


@dataclass(frozen=True)
class Window:
    """How long the producer warms up the stream, then how long deliveries are counted."""

    warm: float
    measure: float


class Serve:
    """One `taskq serve` process on a free port, with a large feed retention."""

    def __init__(self, server: Server, queue: str) -> None:
        self.server = server
        self.port = free_port()
        self.child = Child(
            python_module("taskq", "--log-level", "WARNING", "serve", "--port", str(self.port),
                          "--queue", queue),
            server.env(TASKQ_EVENTS_RETENTION=str(RETENTION)),
            server.logs / f"serve-{queue}.log")
        try:
            wait_healthy(self.port)
        except BenchError:
            self.child.stop()
            raise

    def __enter__(self) -> Serve:
        return self

    def __exit__(self, *exc: object) -> None:
        self.child.stop()


def _sequence(server: Server, queue: str) -> int:
    return int(server.client.get(QueueKeys(queue).seq) or 0)


@dataclass(frozen=True)
class Delivered:
    """Deliveries per second to all clients, events appended per second, and the share
    of the window's events that the slowest client whose stream is still open received."""

    deliveries: float
    appended: float
    slowest: float
    ended: int


def registered(server: Server, queue: str) -> str:
    """`queue`, listed among the queues as its first producer would list it: the server
    feeds only queues it knows, and the clients connect before the producer starts."""
    server.client.sadd(QUEUES_KEY, queue)
    return queue


async def _deliveries(server: Server, port: int, queue: str, clients: int,
                      window: Window) -> Delivered:
    """What `clients` receive while a producer appends events."""
    connected = await connect(port, queue, clients)
    producer = Child(python_module("bench.feed_producer", queue, str(PRODUCER_RATE),
                                   str(window.warm + window.measure + 1.0)),
                     server.env(TASKQ_EVENTS_RETENTION=str(RETENTION)),
                     server.logs / f"producer-{queue}.log")
    try:
        await asyncio.sleep(window.warm)
        before, seq_before, start = _total(connected), _sequence(server, queue), time.perf_counter()
        each = [c.events for c in connected]
        await asyncio.sleep(window.measure)
        after, seq_after, end = _total(connected), _sequence(server, queue), time.perf_counter()
        live = [c.events - was for c, was in zip(connected, each, strict=True) if not c.ended]
        least = min(live, default=0)
        dropped = ended(connected)
    finally:
        producer.stop()
        for client in connected:
            client.close()
    if after == before:
        raise BenchError(f"no event reached {clients} clients in {window.measure:.0f}s")
    appended = seq_after - seq_before
    return Delivered((after - before) / (end - start), appended / (end - start),
                     least / appended if appended else 0.0, dropped)


def _total(clients: list[FeedClient]) -> int:
    return sum(c.events for c in clients)


def _cursor_behind(server: Server, queue: str, behind: int) -> str:
    """The feed id of the event `behind` events before the head (its epoch, seq, ts)."""
    keys = QueueKeys(queue)
    seq = _sequence(server, queue) - behind
    rows: list[tuple[str, dict[str, str]]] = server.client.xrange(  # type: ignore[assignment]
        keys.events, f"{seq}-0", f"{seq}-0")
    epoch = server.client.get(keys.epoch)
    if not rows or epoch is None:
        raise BenchError(f"event {seq} of {queue} is not in the log")
    return f"{epoch!s}.{seq}.{rows[0][1]['ts']}"


async def _resume(server: Server, port: int, queue: str, warm_hub: bool) -> float:
    """Seconds from connecting with a Last-Event-ID `BEHIND` events back until all of
    them arrived. With `warm_hub` a live client was following the log meanwhile, so the
    server's ring holds the rows; otherwise this is the queue's first client."""
    follower = await connect(port, queue, 1) if warm_hub else []
    Broker(server.client, queue, events_retention=RETENTION).enqueue_many(
        [NewTask(uuid.uuid4().hex, name="bench.noop_async") for _ in range(BEHIND + 500)])
    if follower:
        await _until(lambda: follower[0].events >= BEHIND + 500, 30, "the live follower")
    last_id = _cursor_behind(server, queue, BEHIND)
    start = time.perf_counter()
    client = (await connect(port, queue, 1, last_id))[0]
    try:
        await _until(lambda: client.events >= BEHIND or client.ended, 60, "the resumed client")
        if client.ended:
            raise BenchError(f"the server ended the resumed stream after {client.events} events")
        seconds = client.last_at - start
        await asyncio.sleep(0.3)
        if client.events != BEHIND:
            raise BenchError(f"resumed client got {client.events} events, not {BEHIND}")
        return seconds
    finally:
        for c in [client, *follower]:
            c.close()


async def _until(done: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not done():
        if time.monotonic() > deadline:
            raise BenchError(f"{what} did not receive every event within {timeout:.0f}s")
        await asyncio.sleep(0.005)


def measure(server: Server, options: Options, known: dict[str, float]) -> Section:
    window = Window(1.0, 1.0) if options.quick else Window(2.5, 4.0)
    section = Section("feed", "The feed (one `taskq serve` process, raw asyncio SSE clients)",
                      ["what", "figure (median)", "spread", "detail"])
    for clients in (100, 1000):
        label = f"{clients:,} clients, producer at {PRODUCER_RATE:,.0f} events/s"
        deliveries, produced, slowest, dropped = Stat(), Stat(), Stat(), Stat()
        try:
            for _ in range(options.repeats):
                server.flush()
                queue = registered(server, f"feed-{uuid.uuid4().hex[:8]}")
                with Serve(server, queue) as serve:
                    got = asyncio.run(_deliveries(server, serve.port, queue, clients, window))
                deliveries.add(got.deliveries)
                produced.add(got.appended)
                slowest.add(got.slowest)
                dropped.add(got.ended)
        except (BenchError, OSError) as e:
            section.fail(label, e)
            continue
        keeping_up = deliveries.median / (clients * produced.median) if produced.median else 0
        section.rows.append([label, f"{rate(deliveries.median)} deliveries",
                             deliveries.spread(),
                             f"{produced.median:,.0f} events/s appended; clients got "
                             f"{keeping_up:.0%} of them on average, the slowest open "
                             f"stream {slowest.median:.0%}"])
        section.figures[f"feed-{clients}"] = deliveries.median
        if max(dropped.values):
            section.figures[f"feed-{clients}-ended"] = dropped.median
            section.failures.append(
                f"feed, {clients} clients: the server ended {max(dropped.values):.0f} of "
                f"{clients} streams (a feed stream never ends on its own)")
            section.rows[-1][3] += (f"; **the server ended {dropped.median:.0f} of the "
                                    f"{clients} streams** (median of runs)")
    for warm in (False, True):
        label = f"resume {BEHIND:,} behind, " + ("hub following (ring)" if warm else
                                                "first client of the queue (cold)")
        seconds = Stat()
        try:
            for _ in range(options.repeats):
                server.flush()
                queue = registered(server, f"resume-{uuid.uuid4().hex[:8]}")
                with Serve(server, queue) as serve:
                    seconds.add(asyncio.run(_resume(server, serve.port, queue, warm)))
        except (BenchError, OSError) as e:
            section.fail(label, e)
            continue
        section.rows.append([label, f"{seconds.median * 1000:,.0f} ms", seconds.spread(),
                             f"{BEHIND / seconds.median:,.0f} events/s to one client"])
        section.figures[f"feed-resume-{'warm' if warm else 'cold'}"] = seconds.median
    section.notes.append(
        f"Deliveries = `id:` lines received by all clients together over {window.measure:g} s, "
        f"after {window.warm:g} s of warm-up, while a producer process appends "
        f"{PRODUCER_RATE:,.0f} events/s (`enqueue_many`, one `enqueued` event per task). "
        f"TASKQ_EVENTS_RETENTION={RETENTION:,}. Resume time runs from the client's connect "
        "to its last event; each resume is checked to deliver exactly the events missed. "
        "A stream the server ends (the chunked body's last chunk, or a closed connection) "
        "fails the run: a live feed never ends on its own, and these clients, unlike a "
        "browser's EventSource, do not reconnect.")
    return section
