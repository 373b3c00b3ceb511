"""`taskq dashboard`: a live terminal view of every queue, its live workers, leases,
delays, DLQ, periodic schedules, lifetime totals and recent throughput, and of each
sharded queue's shards."""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass

from rich.console import Console, Group
from rich.live import Live
from rich.text import Text

from taskq.boundary import unusable_as_stored
from taskq.broker import Broker
from taskq.cli.common import settings_from
from taskq.cli.dashboard_rich import queue_panel, shards_panel
from taskq.cli.workers import age
from taskq.errors import BrokerError, ConfigError
from taskq.limits import DASHBOARD_INTERVAL, DASHBOARD_ROWS
from taskq.registry import WorkerView, read_workers
from taskq.schedule_view import SchedulesView, read_schedules
from taskq.settings import Settings
from taskq.shard_view import ShardsView, shards_of
from taskq.shards import Layout, layout_holding, layouts
from taskq.snapshot import QueueSnapshot, queue_names, take_snapshot
from taskq.terminal import on_terminal, one_line, some_of
from taskq.throughput import Throughput, read_throughput
from taskq.web.totals import read_totals

# The lifetime totals a frame shows, in this order.
SHOWN_TOTALS = ("enqueued", "completed", "failed", "dead", "cancelled")

HELP = ("live terminal view of the queues (workers, countdowns, DLQ errors, concurrency "
        "limits, schedules, lifetime totals and rates, shards)")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--once", action="store_true", help="print one frame and exit")
    parser.add_argument("--queue", default=None, help="show only this queue")
    parser.add_argument("--interval", type=float, default=1.0, help="seconds between frames")
    parser.add_argument("--rows", type=int, default=10, help="tasks listed per section")


def main(args: argparse.Namespace) -> int:
    DASHBOARD_INTERVAL.check(args.interval, error=ConfigError)
    DASHBOARD_ROWS.check(args.rows, error=ConfigError)
    settings = settings_from(args)
    base = Broker.from_settings(settings)
    brokers: dict[str, Broker] = {}  # one per queue for the whole run, not one per frame

    def broker(name: str) -> Broker:
        if name not in brokers:
            brokers[name] = Broker(base.client, name)
        return brokers[name]

    def read() -> tuple[list[Views | Unreadable], list[ShardsView]]:
        names, sharded = shown(base, settings, args.queue)
        return ([read_queue(broker(n), args.rows) for n in names],
                [shards_of(layout, broker) for layout in sharded])

    if on_terminal():
        return _live(read, args.once, args.interval)
    shown_one = False
    while True:
        try:
            queues, shards = read()
        except BrokerError as e:
            if args.once or not shown_one:
                raise
            print(away(e), file=sys.stderr, flush=True)
        else:
            shown_one = True
            print("\n".join([views.line if isinstance(views, Unreadable) else render(*views)
                             for views in queues]
                            + [render_shards(view) for view in shards]), flush=True)
        if args.once:
            return 0
        time.sleep(max(0.1, args.interval))


def away(error: BrokerError) -> str:
    """What a live view says of a frame Redis did not answer. Once it has shown one, a
    Redis away or refusing for a while (restarting, loading, running a long script,
    unable to save) ends no watch: the next frame tries again."""
    return f"taskq dashboard: {error}; the next frame tries again"


# What a frame reads of one queue, in `render`'s order.
Views = tuple[QueueSnapshot, SchedulesView, dict[str, int], Throughput,
              tuple[int, list[WorkerView]]]


def read_queue(queue: Broker, rows: int) -> Views | Unreadable:
    """What a frame shows of `queue`; Unreadable when a key of it holds what taskq never
    writes there, which hides no other queue."""
    try:
        return (take_snapshot(queue, rows, rows), read_schedules(queue), read_totals(queue),
                read_throughput(queue), read_workers(queue))
    except BrokerError as e:
        if not unusable_as_stored(e):
            raise
        return Unreadable(queue.queue, e)


@dataclass(frozen=True)
class Unreadable:
    """A queue a frame could not read: a key of it holds what taskq never writes there."""

    queue: str
    error: BrokerError

    @property
    def line(self) -> str:
        return one_line(f"queue {self.queue}: cannot be read: {self.error}")


def _live(read: Callable[[], tuple[list[Views | Unreadable], list[ShardsView]]], once: bool,
          interval: float) -> int:
    """Frames as rich panels, redrawn in place until Ctrl-C (one, with `once`)."""
    def frame() -> Group:
        queues, shards = read()
        return Group(*[Text(views.line, style="bold red") if isinstance(views, Unreadable)
                       else queue_panel(*views, SHOWN_TOTALS, _relative) for views in queues],
                     *[shards_panel(view) for view in shards])

    console = Console()
    if once:
        console.print(frame())
        return 0
    last = frame()
    with Live(last, console=console, refresh_per_second=4, screen=False) as live:
        while True:
            time.sleep(max(0.1, interval))
            try:
                last = frame()
            except BrokerError as e:
                live.update(Group(last, Text(away(e), style="bold red")))
            else:
                live.update(last)


def shown(base: Broker, settings: Settings, queue: str | None
          ) -> tuple[list[str], list[Layout]]:
    """The queues a frame shows, and the sharded queues whose shards it shows: every one,
    or `queue` and the sharded queue it is a shard of. A sharded queue's own name holds
    no tasks (its shards do), so it only has its shards shown."""
    if queue is None:
        return queue_names(base) or [settings.queue], list(layouts(base.client).values())
    held = layout_holding(base.client, queue)
    if held is None:
        return [queue], []
    return ([] if queue == held.queue else [queue]), [held]


def render(snap: QueueSnapshot, schedules: SchedulesView | None = None,
           totals: dict[str, int] | None = None, throughput: Throughput | None = None,
           workers: tuple[int, list[WorkerView]] | None = None) -> str:
    c = snap.counts
    lines = [
        f"queue {snap.queue}   ready {c.ready}   leased {c.leased}   delayed {c.delayed}"
        f"   dead {c.dead}   (events up to #{snap.seq})",
    ]
    if totals is not None:
        lines.append("  lifetime  " + "   ".join(f"{name} {totals[name]}"
                                                 for name in SHOWN_TOTALS))
    if throughput is not None:
        lines.append(_rate_line(throughput))
    if workers is not None:
        lines += _worker_lines(snap.queue, *workers)
    lines += _lease_lines(snap) + _delay_lines(snap) + _limit_lines(snap)
    if snap.dead:
        lines.append("  dead letter queue (most recent first)")
        for task in snap.dead:
            lines.append(f"    {task.task_id:32.32}  retries {task.retries}  "
                         f"{task.name:.60}  {task.error_type:.60}".rstrip())
            lines.append(f"      {task.last_error[:110]}")
    if schedules is not None:
        lines += _schedule_lines(schedules)
    return "\n".join(one_line(line) for line in lines)


def render_shards(view: ShardsView) -> str:
    """A sharded queue's counts, summed over its shards, then each shard's on a line."""
    total = [sum(getattr(s, kind) for s in view.shards)
             for kind in ("ready", "leased", "delayed", "dead")]
    lines = [f"sharded queue {view.queue}   {len(view.shards)} shards   ready {total[0]}   "
             f"leased {total[1]}   delayed {total[2]}   dead {total[3]}",
             "  shard                                slot    ready   leased  delayed     dead"]
    for s in view.shards:
        lines.append(f"    {s.name:32.32}  {s.slot:>5}  cannot be read: {s.error}" if s.error
                     else f"    {s.name:32.32}  {s.slot:>5}  {s.ready:>7}  {s.leased:>7}"
                     f"  {s.delayed:>7}  {s.dead:>7}")
    return "\n".join(lines)


def _rate_line(seen: Throughput) -> str:
    def per_min(rate: float) -> str:
        return f"{rate:.1f}" if rate < 10 else f"{rate:.0f}"

    return (f"  rate      completed {per_min(seen.completed_per_min)}/min   "
            f"failed {per_min(seen.failed_per_min)}/min   over the last {age(seen.window_ms)}")


def _worker_lines(queue: str, now: int, workers: list[WorkerView]) -> list[str]:
    """One line per live worker of `queue`: its slots in use, how long it has been up,
    its last beat, the task names it runs, and its other queues."""
    if not workers:
        return ["  workers   none live"]
    lines = [f"  {'workers':34}  {'host':20} {'pid':>6}  {'slots':7}  {'up':8}  last beat"]
    # By start, not as the registry lists them (by when each record expires, which each
    # beat changes): lines keep their places from frame to frame.
    for w in sorted(workers, key=lambda w: (w.started_at, w.worker_id)):
        others = [q for q in w.queues if q != queue]
        also = f"   also on {some_of(others)}" if others else ""
        slots = f"{w.in_hand}/{w.concurrency}"
        lines.append(f"    {w.worker_id:32.32}  {w.host:20.20} {w.pid:>6}  {slots:<7}  "
                     f"{age(now - w.started_at):<8}  {age(now - w.last_beat) + ' ago':<12}"
                     f"  tasks {some_of(w.tasks)}{also}")
    return lines


def _lease_lines(snap: QueueSnapshot) -> list[str]:
    if not snap.leased:
        return []
    lines = ["  leased                            worker                     lease left"]
    for lease in snap.leased:
        left = (lease.expires_at - snap.now_ms) / 1000
        progress = "" if lease.progress is None else \
            f"  {lease.progress:.0%} {lease.progress_message}".rstrip()
        lines.append(f"    {lease.task_id:32.32}  {lease.worker:26.26} {left:6.1f}s"
                     f"  attempt {lease.attempt} token {lease.token}{progress}")
    return lines


def _delay_lines(snap: QueueSnapshot) -> list[str]:
    if not snap.delayed:
        return []
    lines = ["  delayed                           runs in   retries"]
    for waiting in snap.delayed:
        wait = (waiting.run_at - snap.now_ms) / 1000
        error = f"   last error: {waiting.last_error[:60]}" if waiting.last_error else ""
        why = "   waits for its rate limit" if waiting.throttled else ""
        lines.append(f"    {waiting.task_id:32.32}  {wait:6.1f}s   {waiting.retries}{why}"
                     f"{error}")
    return lines


def _limit_lines(snap: QueueSnapshot) -> list[str]:
    if not snap.limits:
        return []
    lines = ["  concurrency limits                running    waiting for a slot"]
    for limit in snap.limits:
        most = str(limit.most) if limit.most else "?"
        # Escaped before it is padded: an escape widens it past its column.
        shown = one_line(f"{limit.name} ({limit.key})" if limit.key else limit.name)
        lines.append(f"    {shown:32.32}  {limit.running:>3} / {most:<4}  {limit.parked}")
    if snap.limit_groups > len(snap.limits):
        lines.append(f"    ... and {snap.limit_groups - len(snap.limits):,} more")
    return lines


def _schedule_lines(schedules: SchedulesView) -> list[str]:
    if not schedules.schedules:
        return []
    lines = ["  schedules                         task                        next tick"]
    for s in schedules.schedules:
        due = "unknown" if s.next_tick_ms is None else \
            _relative(s.next_tick_ms - schedules.now_ms)
        stored = "" if s.definition == "current" else f"   (definition {s.definition})"
        lines.append(f"    {s.name:32.32}  {s.task:26.26}  {due}{stored}")
        lines.append(f"      {s.when}  policy {s.policy or '?'}  last tick "
                     f"{_relative(s.last_tick_ms - schedules.now_ms)}")
    return lines


def _relative(ms: int) -> str:
    """A time `ms` from now as `in 3.2s`, `in 6h 05m` or `4m 10s ago`."""
    span = abs(ms) / 1000
    if span < 60:
        text = f"{span:.1f}s"
    else:
        big, small, units = ((span // 60, span % 60, "ms") if span < 3600 else
                             (span // 3600, span % 3600 // 60, "hm") if span < 86400 else
                             (span // 86400, span % 86400 // 3600, "dh"))
        text = f"{big:.0f}{units[0]} {small:02.0f}{units[1]}"
    return f"in {text}" if ms > 0 else f"{text} ago"
