"""taskq: a Redis task queue that loses no task and applies no effect twice."""
