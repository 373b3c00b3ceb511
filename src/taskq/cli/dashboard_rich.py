"""`taskq dashboard` on a terminal: each queue as a rich panel of tables (counts and
rates, workers, leases with their progress, delayed tasks, the DLQ, limits, schedules),
and each sharded queue's shards, redrawn in place by a live display."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from rich.console import Group, RenderableType
from rich.panel import Panel
from rich.progress_bar import ProgressBar
from rich.table import Table
from rich.text import Text

from taskq.cli.workers import age
from taskq.registry import WorkerView
from taskq.schedule_view import SchedulesView
from taskq.shard_view import ShardsView
from taskq.snapshot import QueueSnapshot
from taskq.terminal import add_row, clean, some_of
from taskq.throughput import Throughput

# The most of one value a cell of a frame shows: a frame redrawn each second must fit
# the screen, whatever a producer named a task or a handler raised.
CELL_CHARS = 120


def row(table: Table, *cells: RenderableType) -> None:
    add_row(table, *cells, limit=CELL_CHARS)


def queue_panel(snap: QueueSnapshot, schedules: SchedulesView | None,
                totals: dict[str, int] | None, throughput: Throughput | None,
                workers: tuple[int, list[WorkerView]] | None, shown_totals: Sequence[str],
                relative: Callable[[int], str]) -> Panel:
    """One queue's panel; `relative` formats a time from now (the plain view's)."""
    parts: list[RenderableType] = [_counts(snap, totals, throughput, shown_totals)]
    if workers is not None:
        parts.append(_workers(snap.queue, *workers))
    if snap.leased:
        parts.append(_leases(snap))
    parts += _waiting(snap)
    if schedules is not None and schedules.schedules:
        table = _table("schedules", "name", "task", "when", "next tick", "last tick")
        for s in schedules.schedules:
            due = "unknown" if s.next_tick_ms is None else \
                relative(s.next_tick_ms - schedules.now_ms)
            row(table, s.name, s.task, s.when, due,
                    relative(s.last_tick_ms - schedules.now_ms))
        parts.append(table)
    return Panel(Group(*parts), title=f"queue {snap.queue}", title_align="left",
                 subtitle=f"events up to #{snap.seq}", subtitle_align="right")


def _waiting(snap: QueueSnapshot) -> list[RenderableType]:
    """The delayed tasks, the concurrency limits and the DLQ, each a table if any."""
    parts: list[RenderableType] = []
    if snap.delayed:
        table = _table("delayed", "task", "runs in", "retries", "last error")
        for waiting in snap.delayed:
            error = "(waits for its rate limit)" if waiting.throttled \
                else waiting.last_error[:60]
            row(table, waiting.task_id, f"{(waiting.run_at - snap.now_ms) / 1000:.1f}s",
                str(waiting.retries), error)
        parts.append(table)
    if snap.limits:
        table = _table("concurrency limits", "name", "running", "waiting for a slot")
        for limit in snap.limits:
            name = f"{limit.name} ({limit.key})" if limit.key else limit.name
            row(table, name, f"{limit.running} / {limit.most or '?'}", str(limit.parked))
        if snap.limit_groups > len(snap.limits):
            row(table, f"... and {snap.limit_groups - len(snap.limits):,} more", "", "")
        parts.append(table)
    if snap.dead:
        table = _table("dead letter queue (most recent first)", "task", "name", "retries",
                       "error")
        for task in snap.dead:
            row(table, task.task_id, task.name, str(task.retries),
                    f"{task.error_type} {task.last_error[:90]}".strip())
        parts.append(table)
    return parts


def shards_panel(view: ShardsView) -> Panel:
    table = _table(None, "shard", "slot", "ready", "leased", "delayed", "dead")
    for s in view.shards:
        if s.error:
            row(table, s.name, str(s.slot), f"cannot be read: {s.error}", "", "", "")
        else:
            row(table, s.name, str(s.slot), str(s.ready), str(s.leased), str(s.delayed),
                str(s.dead))
    return Panel(table, title=f"sharded queue {view.queue} ({len(view.shards)} shards)",
                 title_align="left")


def _table(title: str | None, *columns: str) -> Table:
    table = Table(title=title, title_justify="left", expand=False, show_edge=False)
    for column in columns:
        table.add_column(column, overflow="fold")
    return table


def _counts(snap: QueueSnapshot, totals: dict[str, int] | None,
            throughput: Throughput | None, shown_totals: Sequence[str]) -> Table:
    c = snap.counts
    table = _table(None, "ready", "running", "delayed", "dead")
    cells = [str(c.ready), str(c.leased), str(c.delayed), str(c.dead)]
    if totals is not None:
        for name in shown_totals:
            table.add_column(f"{name} (lifetime)")
            cells.append(str(totals[name]))
    if throughput is not None:
        table.add_column(f"per min (last {age(throughput.window_ms)})")
        cells.append(f"{throughput.completed_per_min:.1f} done, "
                     f"{throughput.failed_per_min:.1f} failed")
    row(table, *cells)
    return table


def _workers(queue: str, now: int, workers: list[WorkerView]) -> RenderableType:
    if not workers:
        return Text("workers: none live", style="yellow")
    table = _table("workers", "worker", "host", "pid", "slots", "up", "last beat", "tasks")
    for w in sorted(workers, key=lambda w: (w.started_at, w.worker_id)):
        others = [q for q in w.queues if q != queue]
        row(table, w.worker_id, w.host, str(w.pid), f"{w.in_hand}/{w.concurrency}",
                age(now - w.started_at), f"{age(now - w.last_beat)} ago",
                some_of(w.tasks, none="") + (f" (also on {some_of(others)})" if others
                                             else ""))
    return table


def _leases(snap: QueueSnapshot) -> Table:
    table = _table("leased", "task", "worker", "lease left", "attempt", "progress")
    for lease in snap.leased:
        progress: RenderableType = Text("")
        if lease.progress is not None:
            bar = Table.grid(padding=(0, 1))
            bar.add_row(ProgressBar(total=1.0, completed=lease.progress, width=20),
                        Text(clean(f"{lease.progress:.0%} {lease.progress_message}".strip())))
            progress = bar
        row(table, lease.task_id, lease.worker,
                f"{(lease.expires_at - snap.now_ms) / 1000:.1f}s", str(lease.attempt),
                progress)
    return table
