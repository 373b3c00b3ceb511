"""The soonest moment a worker's leases said something comes due."""

from __future__ import annotations

import time

from taskq.worker.due import Due


def test_a_sooner_moment_replaces_a_later_one_and_says_so() -> None:
    due = Due()
    assert due.note(None) is False and due.left() is None
    assert due.note(60.0) is True
    assert due.note(120.0) is False  # later than what is known: nothing to look at sooner
    assert due.note(30.0) is True
    left = due.left()
    assert left is not None and 29.0 < left <= 30.0


def test_a_moment_is_taken_once_it_has_come_and_then_forgotten() -> None:
    due = Due()
    due.note(60.0)
    assert due.take() is False  # not yet
    due.note(0.01)
    time.sleep(0.02)
    assert due.left() == 0.0
    assert due.take() is True
    assert due.take() is False and due.left() is None


def test_a_moment_that_has_come_gives_way_to_the_next_one_noted() -> None:
    # A lease made after it came found nothing due then: what it says comes next must
    # not be lost when the loop takes the moment that came.
    due = Due()
    due.note(0.01)
    time.sleep(0.02)
    assert due.note(60.0) is True
    assert due.take() is False
    left = due.left()
    assert left is not None and 59.0 < left <= 60.0
