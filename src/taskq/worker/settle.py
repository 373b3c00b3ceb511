"""Finishing tasks: acks for every handler that returned, in one call (carrying the next
lease with it when the loop asks); fails one by one."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from taskq.broker import Broker
from taskq.errors import BrokerError
from taskq.results import LeaseBatch, LeasedTask
from taskq.settings import Settings
from taskq.worker.outage import retry_for
from taskq.worker.runner import Outcome

log = logging.getLogger("taskq.worker")


@dataclass
class Stats:
    """What this worker did, for its final log line and for tests."""

    leased: int = 0
    acked: int = 0
    retried: int = 0
    dead: int = 0
    stale: int = 0
    released: int = 0


class Settler:
    """Reports finished handlers to Redis, retrying through an outage for up to one
    lease: a lost ack means the task runs again, which is worth a long wait."""

    def __init__(self, broker: Broker, settings: Settings, stats: Stats,
                 forget: Callable[[LeasedTask], None], worker_id: str) -> None:
        self.broker = broker
        self.settings = settings
        self.stats = stats
        self.forget = forget
        self.worker_id = worker_id

    def settle(self, outcomes: Sequence[Outcome], lease: int = 0) -> LeaseBatch | None:
        """Report `outcomes`. With `lease` > 0 the acks carry a lease of that many tasks
        in the same round trip, and its batch is returned; None when no lease was made
        (no acks to carry it, or the round trip or its lease step failed)."""
        for outcome in outcomes:
            outcome.context.finished = True  # no more heartbeats for it
        for outcome in outcomes:
            if outcome.error is not None:
                self._fail(outcome.task, outcome.error)
        # Acks last: a lease they carry goes straight back to the loop to be put in
        # hand, not held up by fails retried through an outage while its clock runs.
        done = [o.task for o in outcomes if o.error is None]
        batch = self._ack(done, lease) if done else None
        for outcome in outcomes:
            self.forget(outcome.task)
        return batch

    def _ack(self, tasks: list[LeasedTask], lease: int) -> LeaseBatch | None:
        held = [(t.task_id, t.token) for t in tasks]
        acked: list[bool] | None = None
        batch: LeaseBatch | None = None
        if lease > 0:
            try:
                acks, batch = self.broker.ack_and_lease(held, self.worker_id,
                                                        self.settings.lease_seconds, lease)
            except BrokerError as e:
                acks = e
            if isinstance(acks, BrokerError):
                log.info("%s; sending the acks alone", acks)
            else:
                acked = acks
        if acked is None:
            acked = retry_for(self.settings.lease_seconds, f"ack of {len(tasks)} task(s)",
                              lambda: self.broker.ack_many(held))
        if acked is None:
            # Redis stayed away a whole lease: these tasks will be reaped and rerun. A
            # lease made beside the refused acks still goes to the loop to run.
            return batch
        for task, ok in zip(tasks, acked, strict=True):
            if ok or self._acked_before(task):
                self.stats.acked += 1
            else:
                self._stale(task, "ack")
        return batch

    def _fail(self, task: LeasedTask, error: str) -> None:
        log.info("task %s attempt %d failed: %s", task.task_id, task.attempt, error)
        s = self.settings
        result = retry_for(s.lease_seconds, f"fail {task.task_id}", lambda: self.broker.fail(
            task.task_id, task.token, error, s.backoff_base_seconds, s.backoff_max_seconds))
        if result is None or result.status == "stale":
            self._stale(task, "fail")
        elif result.status == "dead":
            self.stats.dead += 1
            log.warning("task %s is dead after %d retries: %s", task.task_id, result.retries,
                        error)
        else:
            self.stats.retried += 1

    def _acked_before(self, task: LeasedTask) -> bool:
        """Whether a refused ack was our own earlier one, whose reply the client lost and
        whose retry then found the task already completed with our token."""
        try:
            record = self.broker.task(task.task_id)
        except BrokerError:
            return False
        return record is not None and record.state == "completed" \
            and record.fencing_token == task.token

    def _stale(self, task: LeasedTask, operation: str) -> None:
        self.stats.stale += 1
        log.warning("%s of task %s refused: token %d is stale (lease lost or reaped)",
                    operation, task.task_id, task.token)
