"""The web routes' query and path parameters, checked: a bad one is a 400 that names it, its
value and what is accepted, never a 500."""

from __future__ import annotations

import re

from starlette.requests import Request

from taskq.errors import InvalidTaskError, TaskqError
from taskq.keys import FLOW_ID, FLOW_ID_RULE, QUEUE_NAME, QUEUE_NAME_RULE, TASK_ID, TASK_ID_RULE
from taskq.limits import HISTORY_SCAN
from taskq.schedules import SCHEDULE_NAME_RULE, check_schedule_name

DIGITS = re.compile(r"[0-9]{1,9}", re.ASCII)
MAX_ECHO = 120
SNAPSHOT_LIMIT = (1, 1000)
# Seconds of recent throughput a client may ask for: up to an hour.
THROUGHPUT_WINDOW = (1, 3600)
# A task view reads at most the default scan: a client cannot make the server read more.
TASK_SCAN = (0, HISTORY_SCAN.default)


class BadParameter(TaskqError):
    """Raised when a query parameter of a web route has a value the route cannot take."""

    def __init__(self, name: str, value: str, accepted: str) -> None:
        self.name, self.value, self.accepted = name, value[:MAX_ECHO], accepted
        super().__init__(f"{name}={self.value!r} is not accepted: expected {accepted}")

    @property
    def body(self) -> dict[str, str]:
        return {"error": str(self), "parameter": self.name, "value": self.value,
                "accepted": self.accepted}


def one_value(request: Request, name: str) -> str | None:
    """The query parameter `name` (None when not given); given twice or more, it is a
    400: which of them a route took would otherwise be Starlette's choice, unseen."""
    values = request.query_params.getlist(name)
    if len(values) > 1:
        raise BadParameter(name, ", ".join(values), f"one value, not {len(values)}")
    return values[0] if values else None


def queue_param(request: Request, default: str) -> str:
    raw = one_value(request, "queue")
    if raw is None or raw == "":
        return default
    if not QUEUE_NAME.fullmatch(raw):
        raise BadParameter("queue", raw, f"a queue name: {QUEUE_NAME_RULE}")
    return raw


def task_id_param(request: Request) -> str:
    """The `{task_id}` of the route's path, checked before anything is read."""
    raw: str = request.path_params["task_id"]
    if not TASK_ID.fullmatch(raw):
        raise BadParameter("task_id", raw, f"a task id: {TASK_ID_RULE}")
    return raw


def flow_id_param(request: Request) -> str:
    """The `{flow_id}` of the route's path, checked before anything is read."""
    raw: str = request.path_params["flow_id"]
    if not FLOW_ID.fullmatch(raw):
        raise BadParameter("flow_id", raw, f"a workflow id: {FLOW_ID_RULE}")
    return raw


def schedule_name_param(request: Request) -> str:
    """The `{name}` of the route's path, a schedule's name, checked before anything is read."""
    raw: str = request.path_params["name"]
    try:
        return check_schedule_name(raw)
    except InvalidTaskError:
        raise BadParameter("name", raw, f"a schedule name: {SCHEDULE_NAME_RULE}") from None


def flag_param(request: Request, name: str) -> bool:
    """The flag `name`: `1` sets it, `0` or leaving it out does not."""
    given = one_value(request, name)
    raw = "0" if given is None else given
    if raw not in ("0", "1"):
        raise BadParameter(name, raw, "1 or 0")
    return raw == "1"


def text_param(request: Request, name: str, most: int) -> str:
    """The text `name` ('' when not given), at most `most` characters."""
    given = one_value(request, name)
    raw = "" if given is None else given
    if len(raw) > most:
        raise BadParameter(name, raw, f"text of at most {most} characters")
    return raw


def choice_param(request: Request, name: str, choices: tuple[str, ...]) -> list[str]:
    """The comma-separated `name`, each one of `choices` (all of them when not given)."""
    raw = one_value(request, name)
    if raw is None or raw == "":
        return list(choices)
    picked = raw.split(",")
    if not all(p in choices for p in picked):
        raise BadParameter(name, raw, f"some of {', '.join(choices)}, comma-separated")
    return picked


def int_param(request: Request, name: str, default: int, bounds: tuple[int, int]) -> int:
    """The whole number `name` in `bounds` (inclusive), written in plain ASCII digits."""
    raw = one_value(request, name)
    if raw is None:
        return default
    low, high = bounds
    if not DIGITS.fullmatch(raw) or not low <= int(raw) <= high:
        raise BadParameter(name, raw, f"a whole number from {low} to {high}")
    return int(raw)
