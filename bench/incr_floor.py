"""What the `def` profile's handler costs with no queue at all: one Redis INCR through
redis-py, the call every queue's counted no-op makes. Timed one at a time on one
connection, and from processes of handler threads shaped like a worker command's (each
thread INCRs in a loop), since threads that share a GIL pay more for each call than one
thread alone does.

`python -m bench.incr_floor URL THREADS CALLS` is one such process: THREADS threads on
one client, CALLS INCRs in all; it prints its CPU seconds over the calls as JSON."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from dataclasses import dataclass

import redis

from bench.harness import ROOT, BenchError, Server
from bench.profile import redis_cpu_seconds

CORES = len(os.sched_getaffinity(0))
# The INCRs run on a key of their own, so no drain's count can see them.
FLOOR_KEY = "bench:floor"


@dataclass(frozen=True)
class Floor:
    """INCRs a second, and the CPU of one INCR on each side."""

    rate: float
    client_us: float
    redis_us: float

    @property
    def both_us(self) -> float:
        return self.client_us + self.redis_us

    @property
    def cap(self) -> float:
        """Tasks a second a drain whose queue cost nothing could reach: the INCR's CPU on
        both sides over the cores, and Redis's one thread for its part."""
        return min(CORES * 1e6 / self.both_us, 1e6 / self.redis_us)


def alone(server: Server, n: int) -> Floor:
    """Timed in this process (nothing else runs meanwhile): one connection, one INCR at
    a time, with no thread hand-off and no contention."""
    server.flush()
    with redis.Redis.from_url(server.url) as client:
        client.incr(FLOOR_KEY)
        wall, cpu, server_cpu = time.perf_counter(), time.process_time(), \
            redis_cpu_seconds(server)
        for _ in range(n):
            client.incr(FLOOR_KEY)
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        server_cpu = redis_cpu_seconds(server) - server_cpu
    return Floor(n / wall, cpu / n * 1e6, server_cpu / n * 1e6)


def threaded(server: Server, n: int, processes: int, threads: int) -> Floor:
    """`processes` processes of `threads` threads each, all INCRing at once, `n` calls
    in all: the client CPU is what the processes report over their calls (start-up
    left out), Redis's is over the whole run."""
    server.flush()
    calls = max(threads, n // processes)
    argv = [sys.executable, "-m", "bench.incr_floor", server.url, str(threads), str(calls)]
    env = server.env()
    before, began = redis_cpu_seconds(server), time.perf_counter()
    children = [subprocess.Popen(argv, cwd=ROOT, env=env, stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, text=True)
                for _ in range(processes)]
    reports = []
    for child in children:
        out, err = child.communicate(timeout=max(60.0, n / 1000))
        if child.returncode != 0:
            raise BenchError(f"an INCR process failed: {err[-500:]}")
        reports.append(json.loads(out))
    wall = time.perf_counter() - began
    server_cpu = redis_cpu_seconds(server) - before
    done = int(server.client.get(FLOOR_KEY) or 0)
    total = sum(report["calls"] for report in reports)
    if done != total:
        raise BenchError(f"{done} INCRs counted for {total} made")
    client_cpu = sum(report["cpu"] for report in reports)
    return Floor(total / wall, client_cpu / total * 1e6, server_cpu / total * 1e6)


def _main(url: str, threads: int, calls: int) -> None:
    client = redis.Redis.from_url(url)
    client.ping()
    share = calls // threads

    def loop() -> None:
        for _ in range(share):
            client.incr(FLOOR_KEY)

    workers = [threading.Thread(target=loop) for _ in range(threads)]
    cpu = time.process_time()
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    print(json.dumps({"calls": share * threads, "cpu": time.process_time() - cpu}))


if __name__ == "__main__":
    _main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]))
