"""Redis's time in the lease script when it applies a limit, one task a call: what a
change to the rate-limit or concurrency-limit path of lease.lua costs each start, apart
from the handlers, the worker and the network that a drain's figure mixes in.

`python -m bench.lease_cost [--tasks N] [--rounds R]` starts a bench Redis, registers a
worker, and leases N tasks one at a time, R rounds, of a name: limited to a million a
second (every start let through, every lease applying the limit as its own); limited to
10,000 runs at once (every run held to the end: a slot taken each start); the same kept
per key, the tasks spread over 100 accounts; and with no limit. It prints, for each
round, the lease script's microseconds a call by Redis's own count (`INFO
commandstats`), and their median."""

from __future__ import annotations

import argparse
import statistics
import sys
import uuid

import redis

from bench.harness import Server
from taskq import Broker, NewTask, registry
from taskq.concurrency import MAX_CONCURRENCY, ConcurrencyLimit
from taskq.rates import RateLimit
from taskq.registry import Presence


def script_us(broker: Broker) -> tuple[float, int]:
    """Microseconds a call and calls of EVALSHA so far (the lease is the only script run
    while it is read)."""
    stats = broker.client.info("commandstats")["cmdstat_evalsha"]
    return float(stats["usec_per_call"]), int(stats["calls"])


KINDS = ("rate", "concurrency", "keyed", "unlimited")
ACCOUNTS = 100


def lease_round(server: Server, tasks: int, kind: str) -> float:
    """Redis's microseconds for each of `tasks` lease calls, a task each, under the limit
    `kind` names (one of KINDS)."""
    server.flush()
    with redis.Redis.from_url(server.url, decode_responses=True) as client:
        broker = Broker(client, f"lc-{uuid.uuid4().hex[:8]}")
        registry.register(broker, Presence("w", "host", 1, [broker.queue], 1, ["slow"],
                                           "bench"), in_hand=0, ttl=600)
        if kind == "rate":
            broker.rate_limits = (RateLimit("slow", 1_000_000.0, 10_000),)
        elif kind in ("concurrency", "keyed"):
            broker.concurrency_limits = (
                ConcurrencyLimit("slow", MAX_CONCURRENCY, "account" if kind == "keyed" else ""),)
        keyed = kind == "keyed"
        broker.enqueue_many([NewTask(f"t{i}", name="slow",
                                     limit_key=f"acct-{i % ACCOUNTS}" if keyed else None)
                             for i in range(tasks)])
        broker.lease_many("w", 600, 1)  # loads the script; not counted
        client.config_resetstat()
        for _ in range(tasks - 1):
            broker.lease_many("w", 600, 1)
        per_call, calls = script_us(broker)
        if calls != tasks - 1:
            raise SystemExit(f"counted {calls} script calls for {tasks - 1} leases")
        if kind in ("concurrency", "keyed"):
            pipe = client.pipeline(transaction=False)
            for i in range(tasks):
                pipe.hexists(broker.keys.task(f"t{i}"), "slot")
            if (held := sum(pipe.execute())) != tasks:
                raise SystemExit(f"{held} of {tasks} runs hold a concurrency slot")
        return per_call


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.lease_cost")
    parser.add_argument("--tasks", type=int, default=5000,
                        help=f"leases a round, at most {MAX_CONCURRENCY} (every run holds "
                             "its concurrency slot to the end)")
    parser.add_argument("--rounds", type=int, default=5)
    options = parser.parse_args(argv)
    server = Server()
    try:
        print(f"Redis {server.version}, {options.tasks} leases a round", flush=True)
        figures: dict[str, list[float]] = {kind: [] for kind in KINDS}
        for _ in range(options.rounds):
            for kind, values in figures.items():
                values.append(lease_round(server, options.tasks, kind))
        for kind, values in figures.items():
            shown = ", ".join(f"{v:.1f}" for v in values)
            print(f"{kind}: {shown} us a lease call (median {statistics.median(values):.1f})")
    finally:
        server.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
