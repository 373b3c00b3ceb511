"""Appends events to a queue's feed at a steady rate: `python -m bench.feed_producer Q RATE S`.

Each enqueued task is one `enqueued` event. Runs in its own process so the feed clients
and the server do not share its interpreter.
"""

from __future__ import annotations

import argparse
import sys
import time
import uuid

from taskq import Broker, NewTask, Settings

TICK_SECONDS = 0.05


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.feed_producer")
    parser.add_argument("queue")
    parser.add_argument("rate", type=float, help="events per second")
    parser.add_argument("seconds", type=float)
    args = parser.parse_args(argv)
    broker = Broker.from_settings(Settings.from_env(), args.queue)
    per_tick = max(1, round(args.rate * TICK_SECONDS))
    start = time.monotonic()
    ticks = 0
    while time.monotonic() - start < args.seconds:
        broker.enqueue_many([NewTask(uuid.uuid4().hex, name="bench.noop_async")
                             for _ in range(per_tick)])
        ticks += 1
        time.sleep(max(0.0, start + ticks * TICK_SECONDS - time.monotonic()))
    print(ticks * per_tick)
    return 0


if __name__ == "__main__":
    sys.exit(main())
