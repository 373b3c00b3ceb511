"""The worker: runs an App's tasks from a queue, with leases, heartbeats and shutdown."""

from taskq.worker.loop import Worker, make_worker_id
from taskq.worker.slots import Stats

__all__ = ["Stats", "Worker", "make_worker_id"]
