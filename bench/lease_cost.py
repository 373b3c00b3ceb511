"""Redis's time in the lease script when it applies a rate limit, one task a call: what a
change to the rate-limit path of lease.lua costs each start, apart from the handlers,
the worker and the network that a drain's figure mixes in.

`python -m bench.lease_cost [--tasks N] [--rounds R]` starts a bench Redis, registers a
worker, and leases N tasks of a name limited to a million a second (every start let
through, every lease applying the limit as its own) one at a time, R rounds; it prints,
for each round, the lease script's microseconds a call by Redis's own count (`INFO
commandstats`), and their median, beside the same for tasks of a name with no limit."""

from __future__ import annotations

import argparse
import statistics
import sys
import uuid

import redis

from bench.harness import Server
from taskq import Broker, NewTask, registry
from taskq.rates import RateLimit
from taskq.registry import Presence


def script_us(broker: Broker) -> tuple[float, int]:
    """Microseconds a call and calls of EVALSHA so far (the lease is the only script run
    while it is read)."""
    stats = broker.client.info("commandstats")["cmdstat_evalsha"]
    return float(stats["usec_per_call"]), int(stats["calls"])


def lease_round(server: Server, tasks: int, limited: bool) -> float:
    """Redis's microseconds for each of `tasks` lease calls, a task each."""
    server.flush()
    with redis.Redis.from_url(server.url, decode_responses=True) as client:
        broker = Broker(client, f"lc-{uuid.uuid4().hex[:8]}")
        registry.register(broker, Presence("w", "host", 1, [broker.queue], 1, ["slow"],
                                           "bench"), in_hand=0, ttl=600)
        if limited:
            broker.rate_limits = (RateLimit("slow", 1_000_000.0, 10_000),)
        broker.enqueue_many([NewTask(f"t{i}", name="slow") for i in range(tasks)])
        broker.lease_many("w", 600, 1)  # loads the script; not counted
        client.config_resetstat()
        for _ in range(tasks - 1):
            broker.lease_many("w", 600, 1)
        per_call, calls = script_us(broker)
        if calls != tasks - 1:
            raise SystemExit(f"counted {calls} script calls for {tasks - 1} leases")
        return per_call


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.lease_cost")
    parser.add_argument("--tasks", type=int, default=5000)
    parser.add_argument("--rounds", type=int, default=5)
    options = parser.parse_args(argv)
    server = Server()
    try:
        print(f"Redis {server.version}, {options.tasks} leases a round", flush=True)
        figures: dict[str, list[float]] = {"limited": [], "unlimited": []}
        for _ in range(options.rounds):
            for kind, values in figures.items():
                values.append(lease_round(server, options.tasks, kind == "limited"))
        for kind, values in figures.items():
            shown = ", ".join(f"{v:.1f}" for v in values)
            print(f"{kind}: {shown} us a lease call (median {statistics.median(values):.1f})")
    finally:
        server.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
