"""Starting leased tasks: each is put in hand, then handed to the runner."""

from __future__ import annotations

from taskq.context import LeaseConfirmer, TaskContext
from taskq.results import LeaseBatch, LeasedTask
from taskq.worker.runner import Runner
from taskq.worker.slots import Slots


class Dispatcher:
    """Starts what a lease took, from the loop's thread or the waker's."""

    def __init__(self, queue: str, worker_id: str, slots: Slots, runner: Runner,
                 lease: LeaseConfirmer) -> None:
        self.queue = queue
        self.worker_id = worker_id
        self.slots = slots
        self.runner = runner
        self.lease = lease

    def start(self, batch: LeaseBatch, sent_at: float) -> bool:
        """Put a batch leased by a call sent at monotonic `sent_at` in hand and hand it
        to the runner; True if any of it went to a handler (the rest failed at once:
        unknown task, bad payload)."""
        if not batch.tasks:
            return False
        contexts = [self._context(task, sent_at) for task in batch.tasks]
        self.slots.hold(*contexts)
        return self.runner.submit(list(zip(batch.tasks, contexts, strict=True)))

    def _context(self, task: LeasedTask, sent_at: float) -> TaskContext:
        return TaskContext(
            task_id=task.task_id,
            name=task.name,
            queue=self.queue,
            worker_id=self.worker_id,
            token=task.token,
            attempt=task.attempt,
            max_retries=task.max_retries,
            lease=self.lease,
            confirmed_at=sent_at,  # the lease was granted no earlier than it was asked for
        )
