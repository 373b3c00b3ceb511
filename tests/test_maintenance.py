"""Maintenance on the worker loop's thread: promoting, reaping and purging on their own
clocks, and at once when a lease said something is due."""

from __future__ import annotations

import time

import pytest

from taskq.broker import Broker
from taskq.settings import Settings
from taskq.worker import maintenance as module
from taskq.worker.maintenance import EVERY_SECONDS, Maintenance


def test_promotes_within_its_interval_only_when_a_lease_said_something_is_due(
    broker: Broker, settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(module, "EVERY_SECONDS", 60.0)  # no interval passes in the test
    maintenance = Maintenance(broker, settings)
    assert maintenance.run(backlog=False) == 0  # its first look: nothing delayed yet
    broker.enqueue("soon", delay=0.002, name="x")
    time.sleep(0.005)
    # Due, but looked for a moment ago: left to the next interval...
    assert maintenance.run(backlog=False) == 0
    assert broker.counts().delayed == 1
    # ...unless a lease found it due, which cannot wait for the interval.
    assert maintenance.run(backlog=False, due=True) == 1
    assert broker.counts().ready == 1


def test_looks_again_once_its_interval_has_passed(broker: Broker, settings: Settings) -> None:
    maintenance = Maintenance(broker, settings)
    maintenance.run(backlog=False)
    broker.enqueue("soon", delay=0.002, name="x")
    time.sleep(EVERY_SECONDS + 0.005)
    assert maintenance.run(backlog=False) == 1
