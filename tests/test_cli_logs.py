"""How the taskq command's log lines read: what a line quotes cannot forge a line of its
own or drive the terminal that shows it."""

from __future__ import annotations

import logging

from taskq.cli.logs import TEXT, TextFormatter


def record(message: str, *args: object, exc: BaseException | None = None) -> logging.LogRecord:
    exc_info = (type(exc), exc, exc.__traceback__) if exc is not None else None
    return logging.LogRecord("taskq.tasks", logging.WARNING, __file__, 1, message, args,
                             exc_info)


def test_an_error_text_with_a_newline_and_escapes_stays_on_its_line_and_inert() -> None:
    # The exception's text is chosen by the task's input.
    hostile = ("declined\n2026-12-06 07:09:59,000 INFO taskq.tasks: t forged-42 attempt 1 "
               "completed\x1b]0;owned\x07\x1b[2J\u202e")
    line = TextFormatter(TEXT).format(record("t %s attempt 1 dead: %s", "r1", hostile))
    assert "\n" not in line and "\x1b" not in line and "\u202e" not in line
    assert line.endswith("dead: declined\\n2026-12-06 07:09:59,000 INFO taskq.tasks: t "
                         "forged-42 attempt 1 completed\\x1b]0;owned\\x07\\x1b[2J\\u202e")


def test_a_traceback_keeps_its_lines_with_its_escapes_shown() -> None:
    try:
        raise RuntimeError("card\x1b[2J declined")
    except RuntimeError as e:
        error = e
    lines = TextFormatter(TEXT).format(record("run failed", exc=error)).splitlines()
    assert lines[0].endswith("run failed") and lines[1] == "Traceback (most recent call last):"
    assert lines[-1] == "RuntimeError: card\\x1b[2J declined"
