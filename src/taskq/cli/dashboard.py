"""`taskq dashboard`: a live terminal view of every queue, its leases, delays and DLQ."""

from __future__ import annotations

import argparse
import sys
import time

from taskq.broker import Broker
from taskq.cli.common import settings_from
from taskq.snapshot import QueueSnapshot, queue_names, take_snapshot

HELP = "live terminal view of the queues (lease and run-at countdowns, DLQ errors)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--once", action="store_true", help="print one frame and exit")
    parser.add_argument("--queue", default=None, help="show only this queue")
    parser.add_argument("--interval", type=float, default=1.0, help="seconds between frames")
    parser.add_argument("--rows", type=int, default=10, help="tasks listed per section")


def main(args: argparse.Namespace) -> int:
    settings = settings_from(args)
    base = Broker.from_settings(settings)
    clear = sys.stdout.isatty() and not args.once
    brokers: dict[str, Broker] = {}  # one per queue for the whole run, not one per frame
    while True:
        names = [args.queue] if args.queue else (queue_names(base) or [settings.queue])
        for name in names:
            if name not in brokers:
                brokers[name] = Broker(base.client, name)
        frame = "\n".join(render(take_snapshot(brokers[n], args.rows)) for n in names)
        if clear:
            sys.stdout.write("\x1b[H\x1b[2J")
        print(frame, flush=True)
        if args.once:
            return 0
        time.sleep(max(0.1, args.interval))


def render(snap: QueueSnapshot) -> str:
    c = snap.counts
    lines = [
        f"queue {snap.queue}   ready {c.ready}   leased {c.leased}   delayed {c.delayed}"
        f"   dead {c.dead}   (events up to #{snap.seq})",
    ]
    if snap.leased:
        lines.append("  leased                            worker                     lease left")
        for lease in snap.leased:
            left = (lease.expires_at - snap.now_ms) / 1000
            lines.append(f"    {lease.task_id:32.32}  {lease.worker:26.26} {left:6.1f}s"
                         f"  attempt {lease.attempt} token {lease.token}")
    if snap.delayed:
        lines.append("  delayed                           runs in   retries")
        for waiting in snap.delayed:
            wait = (waiting.run_at - snap.now_ms) / 1000
            error = f"   last error: {waiting.last_error[:60]}" if waiting.last_error else ""
            lines.append(f"    {waiting.task_id:32.32}  {wait:6.1f}s   {waiting.retries}{error}")
    if snap.dead:
        lines.append("  dead letter queue (most recent first)")
        for task in snap.dead:
            lines.append(f"    {task.task_id:32.32}  retries {task.retries}  {task.name}")
            lines.append(f"      {task.last_error[:110]}")
    return "\n".join(lines)
