"""What the taskq command (its demo and chaos run too) shows: on a terminal, rich's
tables and live progress bars; on anything else (a pipe, a log file, CI), plain lines
with the same facts, which read well in a log and are easy to grep. The choice is made
from stdout."""

from __future__ import annotations

import datetime
import re
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

from rich.console import Console, RenderableType
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
)
from rich.table import Table
from rich.text import Text

# What a worker, a handler or a hand-edited record wrote is printed as text: control
# characters other than tab and newline would be run by the terminal as escape sequences
# (clear the screen, retitle the window, hide what follows), and Unicode's bidirectional
# controls would show other text than Redis holds ("report\u202efdp.exe" read as
# "reportexe.pdf"). Unicode's line and paragraph separators would split a value in
# two for a reader that splits lines as Python does. Each is printed as its escape.
CONTROL = re.compile(
    r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028-\u202e\u2066-\u2069]")


# The most of one value a line or a table cell shows. Stored values have no length limit
# a hostile producer must keep to (a record written by hand, a handler's megabyte
# message): shown whole, one would fill the terminal, and a rich table would fold it
# into tens of thousands of lines a frame. `--json` shows a task's record whole.
SHOWN_CHARS = 4000


def shortened(text: str, limit: int = SHOWN_CHARS) -> str:
    """`text`, or its first `limit` characters and how many more there are."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}… [{len(text) - limit:,} more characters]"


# The most names of a list (a worker's tasks, its queues) a line or a cell shows; a
# worker registers whatever it is given.
NAMES_SHOWN = 20


def some_of(names: Sequence[str], most: int = NAMES_SHOWN, none: str = "-") -> str:
    """`names` joined by commas, the first `most` of them and how many more; `none`
    for no names."""
    if not names:
        return none
    shown = ", ".join(names[:most])
    return shown if len(names) <= most else f"{shown} and {len(names) - most:,} more"


def clean(text: str) -> str:
    """`text` safe to print: every control character in it (but tab and newline) as
    its escape, `\\x1b` or `\\u202e`."""
    return CONTROL.sub(_escape, text)


def utc_time(ms: float, milliseconds: bool = False) -> str:
    """A Redis time in ms as UTC text (`2026-12-04 07:28:35Z`, or ISO 8601 with its
    milliseconds); a time past the years a date holds (a field changed by hand) as its
    number, rather than an error that ends the listing it is in."""
    try:
        when = datetime.datetime.fromtimestamp(ms / 1000, datetime.UTC)
    except (ValueError, OverflowError, OSError):
        return f"{ms} ms (past the years a date holds)"
    if milliseconds:
        return when.isoformat(timespec="milliseconds").replace("+00:00", "Z")
    return f"{when:%Y-%m-%d %H:%M:%S}Z"


def one_line(text: str, limit: int = SHOWN_CHARS) -> str:
    """`text` as `clean` gives it, on one line: a newline in it is printed as `\\n`, so
    a value cannot start a line of its own in a listing read line by line; cut to
    `limit` characters (see `shortened`)."""
    return clean(shortened(text, limit)).replace("\n", "\\n")


def add_row(table: Table, *cells: RenderableType, limit: int = SHOWN_CHARS) -> None:
    """A row of `cells` at the end of `table`, each string as `clean` text (as a str,
    rich would read "[/]" or "[link=...]" in a value as its markup), cut to `limit`
    characters."""
    table.add_row(*(Text(clean(shortened(cell, limit))) if isinstance(cell, str) else cell
                    for cell in cells))


def _escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


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
            print(one_line(line))
        return
    table = Table(title=Text(one_line(title)), title_justify="left", expand=False)
    for column in columns:
        table.add_column(column, overflow="fold")
    for row in rows:
        add_row(table, *row)
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
