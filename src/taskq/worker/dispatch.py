"""Starting leased tasks: each is put in hand, then handed to the runner."""

from __future__ import annotations

from collections.abc import Mapping

from taskq.context import LeaseConfirmer, TaskContext
from taskq.results import LeaseBatch, LeasedTask
from taskq.worker.runner import Runner
from taskq.worker.slots import Slots


class Dispatcher:
    """Starts what a lease took, from the loop's thread or the waker's. `leases` confirms
    the leases of each queue (by name) when a handler's `effect()` asks."""

    def __init__(self, worker_id: str, slots: Slots, runner: Runner,
                 leases: Mapping[str, LeaseConfirmer]) -> None:
        self.worker_id = worker_id
        self.slots = slots
        self.runner = runner
        self.leases = leases

    def start(self, queue: str, batch: LeaseBatch, sent_at: float) -> bool | None:
        """Put a batch leased from `queue` by a call sent at monotonic `sent_at` in hand
        and hand it to the runner; True if any of it went to a handler (the rest failed
        at once: unknown task, bad payload); None if the worker has closed its slots
        (see Slots.close): nothing was taken, and the caller gives the batch back."""
        if not batch.tasks:
            return False
        lease = self.leases[queue]
        contexts = [self._context(queue, lease, task, sent_at) for task in batch.tasks]
        if not self.slots.hold(*contexts):
            return None
        return self.runner.submit(list(zip(batch.tasks, contexts, strict=True)))

    def _context(self, queue: str, lease: LeaseConfirmer, task: LeasedTask,
                 sent_at: float) -> TaskContext:
        return TaskContext(
            task_id=task.task_id,
            name=task.name,
            queue=queue,
            worker_id=self.worker_id,
            token=task.token,
            attempt=task.attempt,
            max_retries=task.max_retries,
            lease=lease,
            confirmed_at=sent_at,  # the lease was granted no earlier than it was asked for
        )
