"""`taskq workers`: the workers alive on each queue, as they registered themselves."""

from __future__ import annotations

import argparse

from taskq.broker import Broker
from taskq.cli.common import queue_brokers, settings_from
from taskq.registry import MAX_LISTED, WorkerView, live_count, read_workers
from taskq.snapshot import queue_names
from taskq.terminal import show_table, some_of

HELP = "list the live workers: id, host, pid, queues, slots, tasks in hand, last beat"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--queue", default=None,
                        help="only the workers of this queue (default: of every queue)")


def main(args: argparse.Namespace) -> int:
    settings = settings_from(args)
    base = Broker.from_settings(settings)
    # A sharded queue's workers register on each of its shards.
    brokers = queue_brokers(args) if args.queue else [
        Broker(base.client, name) for name in queue_names(base) or [settings.queue]]
    seen: dict[str, WorkerView] = {}
    now = unlisted = 0
    for broker in brokers:
        now, found = read_workers(broker)
        unlisted += live_count(broker, now, len(found)) - len(found)
        for worker in found:
            seen.setdefault(worker.worker_id, worker)
    where = f"queue {args.queue!r}" if args.queue else f"{len(brokers)} queue(s)"
    if not seen:
        print(f"no live worker on {where}")
        return 0
    # A queue lists at most MAX_LISTED, those whose records expire soonest; a worker of
    # several queues counts once a queue among those left out.
    more = (f" (and up to {unlisted:,} more not listed: each queue lists the "
            f"{MAX_LISTED:,} whose records expire soonest)") if unlisted else ""
    title = f"{len(seen)} live worker(s) on {where}{more}:"
    plain = [title]
    for worker in seen.values():
        plain.append(f"  {worker.worker_id}  host {worker.host}  pid {worker.pid}  "
                     f"{worker.in_hand}/{worker.concurrency} in hand  up "
                     f"{age(now - worker.started_at)}  last beat "
                     f"{age(now - worker.last_beat)} ago  taskq {worker.version}")
        plain.append(f"      queues {some_of(worker.queues)}; tasks {some_of(worker.tasks)}")
    show_table(title, ["worker", "host", "pid", "in hand", "up", "last beat", "queues",
                       "tasks"],
               [[w.worker_id, w.host, str(w.pid), f"{w.in_hand}/{w.concurrency}",
                 age(now - w.started_at), f"{age(now - w.last_beat)} ago",
                 some_of(w.queues), some_of(w.tasks)] for w in seen.values()],
               plain)
    return 0


def age(ms: int) -> str:
    """`ms` as people read a duration: 850 ms, 12.3 s, 4 min, 2.5 h."""
    seconds = max(0, ms) / 1000
    if seconds < 1:
        return f"{max(0, ms)} ms"
    if seconds < 60:
        return f"{seconds:.1f} s"
    if seconds < 3600:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"
