"""What the taskq command (its demo and chaos run too) shows: on a terminal, rich's
tables and live progress bars; on anything else (a pipe, a log file, CI), plain lines
with the same facts, which read well in a log and are easy to grep. The choice is made
from stdout."""

from __future__ import annotations

import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
)
from rich.table import Table


def on_terminal() -> bool:
    """Whether stdout is a terminal that can draw, as rich judges it (a TERM of dumb or
    unknown cannot)."""
    console = Console()
    return sys.stdout.isatty() and console.is_terminal and not console.is_dumb_terminal


def show_table(title: str, columns: Sequence[str], rows: Sequence[Sequence[str]],
               plain: Sequence[str]) -> None:
    """`rows` under `columns` as a table on a terminal; else the `plain` lines."""
    if not on_terminal():
        for line in plain:
            print(line)
        return
    table = Table(title=title, title_justify="left", expand=False)
    for column in columns:
        table.add_column(column, overflow="fold")
    for row in rows:
        table.add_row(*row)
    Console().print(table)


@dataclass
class Tracker:
    """A live progress bar of `total` steps on a terminal, or a plain line per update."""

    total: int
    label: str
    progress: Progress | None = None
    task: TaskID | None = None

    @property
    def live(self) -> bool:
        """Whether a bar is drawn in place, so updates may come as often as wanted."""
        return self.progress is not None

    def update(self, done: int, detail: str) -> None:
        """`done` of `total` so far; `detail` says the rest (shown beside the bar, or
        printed as the line)."""
        if self.progress is None:
            print(detail, flush=True)
            return
        assert self.task is not None
        self.progress.update(self.task, completed=done, detail=detail.strip())

    def note(self, line: str) -> None:
        """A line that stays (an event of the run), above the bar on a terminal."""
        if self.progress is None:
            print(line, flush=True)
        else:
            self.progress.console.print(line)


@contextmanager
def tracking(total: int, label: str) -> Iterator[Tracker]:
    """A `Tracker` for the length of the block: a bar that is redrawn in place on a
    terminal, left as its final state when the block ends."""
    if not on_terminal():
        yield Tracker(total, label)
        return
    progress = Progress(TextColumn("[bold]{task.description}"), BarColumn(),
                        MofNCompleteColumn(), TimeElapsedColumn(),
                        TextColumn("{task.fields[detail]}"), transient=False)
    with progress:
        task = progress.add_task(label, total=total, detail="")
        yield Tracker(total, label, progress, task)
