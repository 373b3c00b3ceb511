"""A queue's snapshot: what a caller may ask it to list."""

from __future__ import annotations

from typing import Any

import pytest

from taskq.broker import Broker
from taskq.errors import InvalidTaskError
from taskq.snapshot import take_snapshot


@pytest.mark.parametrize(("limit", "groups", "said"), [
    (-1, 0, "limit must be a whole number of tasks between 0 and 100000, not -1"),
    (None, 0, "limit must be a whole number of tasks between 0 and 100000, not None"),
    (2.5, 0, "limit must be a whole number of tasks between 0 and 100000, not 2.5"),
    (10, 10**6, "groups must be a whole number of groups between 0 and 100000, not 1000000"),
])  # fmt: skip
def test_a_count_outside_its_range_is_refused_naming_it(
    broker: Broker, limit: Any, groups: Any, said: str
) -> None:
    with pytest.raises(InvalidTaskError, match=said):
        take_snapshot(broker, limit=limit, groups=groups)


def test_a_limit_of_zero_counts_and_lists_nothing(broker: Broker) -> None:
    broker.enqueue("t1", delay=60)
    snap = take_snapshot(broker, limit=0, groups=0)
    assert snap.counts.delayed == 1 and snap.delayed == []
