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

`@app.task(max_concurrency=2, concurrency_key="account")` keeps the slots per value of
the task's `account` argument: at most two runs per account. The producer puts the
value in the task's record (`limit_key`); lease.lua keeps each (name, key) pair's slots
and parked tasks apart, under the name's limit.
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from taskq.errors import ConfigError, InvalidTaskError
from taskq.keys import check_limit_key
from taskq.limits import plain_number, shown

# The most slots lease.lua accepts for one name (_common.lua's LIMITS.concurrency).
MAX_CONCURRENCY = 10_000


@dataclass(frozen=True)
class ConcurrencyLimit:
    """At most `most` runs of the task `name` hold leases at once; with `key` (the name
    of one of its parameters), at most `most` per value of that argument."""

    name: str
    most: int
    key: str = ""


def check_concurrency(name: str, most: object, key: object = None,
                      signature: inspect.Signature | None = None) -> ConcurrencyLimit:
    """The limit `most` of task `name`, kept per the argument `key` (a parameter of
    `signature`) when given, or `ConfigError` saying what is wrong with it."""
    most = plain_number(most)
    if not isinstance(most, int) or isinstance(most, bool) or not 1 <= most <= MAX_CONCURRENCY:
        raise ConfigError(f"task {name!r}: max_concurrency must be a whole number from 1 to "
                          f"{MAX_CONCURRENCY}, not {shown(most)}")
    if key is None:
        return ConcurrencyLimit(name, most)
    named = {} if signature is None else {
        p.name for p in signature.parameters.values()
        if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}
    if not isinstance(key, str) or key not in named:
        raise ConfigError(f"task {name!r}: concurrency_key must name one of its parameters "
                          f"({', '.join(sorted(named)) or 'it has none'}), not {shown(key)}")
    return ConcurrencyLimit(name, most, key)


def limit_key_of(limit: ConcurrencyLimit, signature: inspect.Signature,
                 args: Sequence[Any], kwargs: dict[str, Any]) -> str | None:
    """The value a call's keyed limit is kept per: its `limit.key` argument (given or
    defaulted) as text, or `InvalidTaskError` unless it is a string or an integer that
    can be part of a key name (see check_limit_key), for an enqueue and a workflow's
    step alike."""
    if not limit.key:
        return None
    bound = signature.bind(*args, **kwargs)
    bound.apply_defaults()
    value = bound.arguments.get(limit.key)
    if isinstance(value, bool) or not isinstance(value, str | int):
        raise InvalidTaskError(f"cannot enqueue {limit.name}: its concurrency_key "
                               f"{limit.key!r} must be a string or an integer, not "
                               f"{shown(value)}")
    try:
        text = str(plain_number(value))  # an (int, Enum) member by its value, not its name
    except ValueError as e:  # an integer past Python's int-to-text digit limit
        raise InvalidTaskError(f"cannot enqueue {limit.name}: its concurrency_key "
                               f"{limit.key!r} is an integer too long to be a key: {e}") from e
    return check_limit_key(text)
