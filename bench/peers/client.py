"""`python -m bench.peers.client PEER N`: enqueue N no-op tasks of PEER one call at a
time and print, as JSON, the rate and what each call cost the client's CPU and the Redis
server's, over a window from the end of the first call (so connecting is not counted) to
the end of the last. Runs in the peer's own interpreter."""

from __future__ import annotations

import importlib
import json
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import redis

from bench.peers.counter import URL

# The window's own probes: never counted among the calls' commands.
PROBES = frozenset({"info", "config"})


def _server_cpu(probe: redis.Redis) -> float:
    cpu = probe.info("cpu")
    return float(cpu["used_cpu_sys"]) + float(cpu["used_cpu_user"])


@dataclass
class Window:
    """The timed calls: wall and CPU time on both sides, and the commands Redis ran for
    them. The server is probed on a connection of its own, outside the calls' timing; its
    CPU includes its idle work, small beside the calls' at these rates."""

    probe: redis.Redis
    wall: float
    client_cpu: float
    server_cpu: float

    @classmethod
    def open(cls) -> Window:
        probe = redis.Redis.from_url(URL)
        probe.config_resetstat()
        server_cpu = _server_cpu(probe)
        return cls(probe, time.perf_counter(), time.process_time(), server_cpu)

    def close(self, calls: int) -> dict[str, Any]:
        wall = time.perf_counter() - self.wall
        client_cpu = time.process_time() - self.client_cpu
        server_cpu = _server_cpu(self.probe) - self.server_cpu
        stats = self.probe.info("commandstats")
        self.probe.close()
        # Redis 7 names subcommands `config|resetstat`; the probes' are left out.
        commands = {name.removeprefix("cmdstat_"): stat for name, stat in stats.items()
                    if name.removeprefix("cmdstat_").split("|")[0] not in PROBES}
        return {
            "rate": calls / wall,
            "calls": calls,
            "client_cpu_us": client_cpu / calls * 1e6,
            "server_cpu_us": server_cpu / calls * 1e6,
            "commands": {name: int(stat["calls"]) for name, stat in commands.items()},
            "usec": {name: float(stat["usec"]) for name, stat in commands.items()},
        }


def stamps(n: int, send: Callable[[], Any]) -> dict[str, Any]:
    send()
    window = Window.open()
    for _ in range(n - 1):
        send()
    return window.close(n - 1)


async def astamps(n: int, send: Callable[[], Awaitable[Any]]) -> dict[str, Any]:
    await send()
    window = Window.open()
    for _ in range(n - 1):
        await send()
    return window.close(n - 1)


def main(argv: list[str]) -> int:
    peer, n = argv[0], int(argv[1])
    module = importlib.import_module(f"bench.peers.{peer}_app")
    print(json.dumps(module.enqueue(n)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
