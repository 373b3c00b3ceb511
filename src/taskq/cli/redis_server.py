"""`taskq redis`: run the embedded redis-server in the foreground, AOF on."""

from __future__ import annotations

import argparse
import signal
import threading
from pathlib import Path

from taskq.cli.common import settings_from
from taskq.errors import ConfigError, EmbeddedRedisError
from taskq.processes import stop_signals
from taskq.tools.embedded import EmbeddedRedis

HELP = "run a private redis-server in the foreground (AOF on) until Ctrl-C"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--port", type=int, default=6379, help="loopback TCP port (default 6379)")
    parser.add_argument("--dir", default=".taskq/redis", help="data directory (AOF lives here)")
    parser.add_argument("--appendfsync", choices=["always", "everysec", "no"], default="everysec",
                        help="AOF fsync policy (default everysec: a crash may lose ~1 s)")


def main(args: argparse.Namespace) -> int:
    settings = settings_from(args)
    try:
        server = EmbeddedRedis(binary=settings.redis_server, data_dir=Path(args.dir),
                               port=args.port, appendfsync=args.appendfsync)
    except OSError as e:  # the directory cannot be made (or is a file)
        raise ConfigError(f"--dir {args.dir!r}: cannot make it Redis's data directory: "
                          f"{e.strerror or e}") from e
    stop = threading.Event()
    for signum in stop_signals():
        signal.signal(signum, lambda *_: stop.set())
    try:
        server.start()
    except OSError as e:  # its lock or config cannot be written there (read-only, full)
        server.cleanup()
        raise ConfigError(f"--dir {args.dir!r}: cannot run Redis there: "
                          f"{e.strerror or e}") from e
    except EmbeddedRedisError as e:
        server.cleanup()
        if "Address already in use" in str(e):
            raise EmbeddedRedisError(f"port {args.port} is taken (a Redis already running "
                                     "there?): pick another --port, or stop what holds it; "
                                     f"{e}") from None
        raise
    print(f"redis-server {server.binary} listening on {server.url} (data in {args.dir}); "
          "Ctrl-C stops it", flush=True)
    print(f"  export REDIS_URL={server.url}", flush=True)
    try:
        while not stop.wait(0.5):
            if server.process is None or server.process.poll() is not None:
                print(f"redis-server exited: {server.log_tail()}")
                return 1
    finally:
        server.cleanup()  # a socket directory of its own (a long --dir) goes too
    return 0
