"""How the taskq command logs: a plain line per record, or (`--log-format json`) one JSON
object per line, for log shippers, with the task log's facts as fields of their own.

Written here rather than taken from a package (python-json-logger): it is one small
formatter over the standard library's `logging`, and the core keeps no dependency
beyond redis-py."""

from __future__ import annotations

import datetime
import json
import logging
import sys
from typing import Any

from taskq.terminal import clean, one_line
from taskq.worker.tasklog import FIELDS

FORMATS = ("text", "json")
TEXT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


class TextFormatter(logging.Formatter):
    """TEXT, with what a log line quotes made safe for a terminal: a handler's error
    text is chosen by its task's input, and a newline or an escape in it could forge a
    line of its own ("... completed") or drive the operator's terminal. The message
    keeps to its line; a traceback keeps its lines."""

    def formatMessage(self, record: logging.LogRecord) -> str:
        return one_line(super().formatMessage(record))

    def formatException(self, ei: Any) -> str:
        return clean(super().formatException(ei))

    def formatStack(self, stack_info: str) -> str:
        return clean(super().formatStack(stack_info))


class JsonFormatter(logging.Formatter):
    """`{"ts", "level", "logger", "message"}`, the task log's fields when the record
    has them, and `exc_info` with the traceback when it carries one."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, object] = {
            "ts": datetime.datetime.fromtimestamp(record.created, datetime.UTC)
            .isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for name in FIELDS:
            if name in record.__dict__:
                entry[name] = record.__dict__[name]
        if record.exc_info:
            entry["exc_info"] = self.formatException(record.exc_info)
        return json.dumps(entry, default=str)


def configure(level: str, log_format: str) -> None:
    """Log to stderr at `level`, as `log_format` ("text" or "json") says."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if log_format == "json" else TextFormatter(TEXT))
    logging.basicConfig(level=level, handlers=[handler])
