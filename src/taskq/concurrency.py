"""Concurrency limits: how many runs of a task may hold leases at once, across every
worker of its queue.

`@app.task(max_concurrency=5)` gives the task name five slots. lease.lua takes one for
each run it starts, in the same atomic step as the lease, and the script that ends the
lease (ack, fail, release, reap, a cancelled end) gives it back, only for the current
fencing token: a stale holder's late ack is refused before it could free a slot that
a newer run holds. A crashed worker's slots come back when its leases are reaped.

A ready task that finds every slot taken is not failed, retried or spun on: it is
parked, still pending, on its name's parked list, and the lease that next finds a slot
free moves it back to the front of its ready list (the script that frees a slot wakes
an idle worker for it). Other tasks are leased past it meanwhile.
"""

from __future__ import annotations

from dataclasses import dataclass

from taskq.errors import ConfigError
from taskq.limits import shown

# The most slots lease.lua accepts for one name (_common.lua's LIMITS.concurrency).
MAX_CONCURRENCY = 10_000


@dataclass(frozen=True)
class ConcurrencyLimit:
    """At most `most` runs of the task `name` hold leases at once."""

    name: str
    most: int


def check_concurrency(name: str, most: object) -> ConcurrencyLimit:
    """The limit `most` of task `name`, or `ConfigError` saying what is wrong with it."""
    if not isinstance(most, int) or isinstance(most, bool) or not 1 <= most <= MAX_CONCURRENCY:
        raise ConfigError(f"task {name!r}: max_concurrency must be a whole number from 1 to "
                          f"{MAX_CONCURRENCY}, not {shown(most)}")
    return ConcurrencyLimit(name, most)
