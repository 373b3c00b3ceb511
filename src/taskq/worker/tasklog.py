"""The task log: one line per finished run of a task, saying what ran and how it ended.

Logged on the `taskq.tasks` logger (INFO, WARNING for a task that died or a settle
Redis refused), with the facts also as record attributes (`task_id`, `task`, `queue`,
`attempt`, `duration_ms`, `outcome`) for a structured formatter such as the command's
`--log-format json`. Off with TASKQ_TASK_LOG=0 (`taskq worker --no-task-log`), for
volumes where a line per task costs more than it tells."""

from __future__ import annotations

import logging

from taskq.context import TaskContext

log = logging.getLogger("taskq.tasks")

FIELDS = ("task_id", "task", "queue", "attempt", "duration_ms", "outcome")


class TaskLog:
    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled

    def ended(self, context: TaskContext, outcome: str, detail: str = "",
              level: int = logging.INFO) -> None:
        """Log that the run `context` ended as `outcome` (completed, retried, dead,
        cancelled), with `detail` (an error line) if any."""
        if not self.enabled or not log.isEnabledFor(level):
            return
        ran = context.ended_at - context.started_at
        ms = round(ran * 1000, 1) if context.started_at and ran >= 0 else None
        took = "" if ms is None else f" in {ms:g} ms"
        log.log(level, "%s %s attempt %d %s%s%s", context.name, context.task_id,
                context.attempt, outcome, took, f": {detail}" if detail else "",
                extra={"task_id": context.task_id, "task": context.name,
                       "queue": context.queue, "attempt": context.attempt,
                       "duration_ms": ms, "outcome": outcome})
