"""Redis time of the scripts a beat runs, called from the bench itself on leases it
holds: a heartbeat call with its events (the log below its retention, and at it) and
without them, and a registry write."""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from bench.harness import BenchError, Server
from bench.tasks import make_app
from taskq import Broker, NewTask
from taskq.limits import EVENTS_RETENTION
from taskq.registry import Presence, register
from taskq.scripts import source

# The heartbeat script's one event; the probe's copy without it renews the same leases
# and appends nothing (close_feed writes nothing when no event was queued).
HEARTBEAT_EVENT = ("  emit(feed, {'type', 'heartbeat', 'task', task_id, 'state', 'running',\n"
                   "    'token', renewed_with[task_id], 'at', expires})\n")
LONG_LEASE = 3600.0


@dataclass(frozen=True)
class ScriptCost:
    """Redis time (us, INFO commandstats) of one heartbeat call renewing `batch` leases:
    with its events, while the log is below its retention (nothing trimmed) and once it
    is at it (each event trims one, as on any queue that has seen that many events);
    without its events; and of one registry write."""

    batch: int
    below_retention: float
    at_retention: float
    without_events: float
    registry: float

    def event_share(self, at_retention: bool = True) -> float:
        with_events = self.at_retention if at_retention else self.below_retention
        return 1 - self.without_events / with_events


def evalsha_usec(server: Server) -> tuple[int, int]:
    stats = server.client.info("commandstats").get("cmdstat_evalsha", {})
    return int(stats.get("calls", 0)), int(stats.get("usec", 0))


def probe(server: Server, batch: int, calls: int = 20, rounds: int = 3) -> ScriptCost:
    """Hold `batch` leases and time `calls` heartbeat calls of each kind, `rounds` times
    in turn, then `calls` * 10 registry writes; the queue is flushed after."""
    text = source("heartbeat")
    if HEARTBEAT_EVENT not in text:
        raise BenchError("heartbeat.lua no longer emits its event as the probe expects: "
                         "update HEARTBEAT_EVENT in bench/heartbeat_probes.py")
    server.flush()
    queue = f"hb-{uuid.uuid4().hex[:8]}"
    # The same queue, its log trimmed to nothing / to `batch` events by the calls.
    growing = Broker(server.client, queue, events_retention=EVENTS_RETENTION.high)
    full = Broker(server.client, queue, events_retention=batch)
    growing.enqueue_many([NewTask(uuid.uuid4().hex, name="bench.noop_async")
                          for _ in range(batch)])
    held = [(t.task_id, t.token) for t in growing.lease_many("bench-probe", LONG_LEASE,
                                                             batch).tasks]
    silent = server.client.register_script(text.replace(HEARTBEAT_EVENT, ""))
    k = growing.keys
    keys = [k.leased, k.events, k.seq, k.epoch]
    args = [k.prefix, round(LONG_LEASE * 1000), 1, len(held),
            *(value for pair in held for value in pair)]
    calls_of: dict[str, Callable[[], Sequence[object]]] = {
        "below": lambda: growing.heartbeat_many(held, LONG_LEASE),
        "none": lambda: silent(keys=keys, args=args),
        "at": lambda: full.heartbeat_many(held, LONG_LEASE),
    }
    spent = dict.fromkeys(calls_of, 0.0)
    try:
        for _ in range(rounds):
            for kind, call in calls_of.items():
                call()  # untimed: the first call at retention trims what "below" added
                before = evalsha_usec(server)
                for _ in range(calls):
                    reply = call()
                    if len(reply) != len(held) or any(r != 1 for r in reply):
                        raise BenchError(f"a probe's heartbeat lost a lease: {reply[:5]}")
                after = evalsha_usec(server)
                spent[kind] += (after[1] - before[1]) / (after[0] - before[0])
        registry = registry_usec(server, growing, calls * 10)
    finally:
        server.flush()
    return ScriptCost(len(held), spent["below"] / rounds, spent["at"] / rounds,
                      spent["none"] / rounds, registry)


def registry_usec(server: Server, broker: Broker, calls: int) -> float:
    """Redis time (us) of one registry write as a worker of the bench app makes it."""
    presence = Presence(worker_id=uuid.uuid4().hex, host="bench-host", pid=os.getpid(),
                        queues=[broker.queue], concurrency=500,
                        tasks=sorted(make_app().tasks), version="0")
    register(broker, presence, 500, LONG_LEASE)
    before = evalsha_usec(server)
    for _ in range(calls):
        register(broker, presence, 500, LONG_LEASE)
    after = evalsha_usec(server)
    return (after[1] - before[1]) / (after[0] - before[0])
