"""The worker: runs an App's tasks from a queue, with leases, heartbeats and shutdown."""

from taskq.worker.loop import Stats, Worker, make_worker_id

__all__ = ["Stats", "Worker", "make_worker_id"]
