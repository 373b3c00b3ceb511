"""Readings that every request asking within a moment shares: the first asker reads,
those asking while it reads wait for its outcome (its value, or its error) rather than
read again, and those after it are given its value until it is `seconds` old. A
reading that costs the server tens of ms then costs it that once a moment, however
many dashboards poll it, and a reading that hangs on a stalled Redis is waited for
once, not once per asker in turn."""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Hashable
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


@dataclass
class _Slot(Generic[V]):
    """One key's last reading (or the one under way) and when it was begun (monotonic s)."""

    reading: Future[V] = field(default_factory=Future)
    begun: float = -float("inf")


class Reused(Generic[K, V]):
    """Readings by key, each given to the askers that came while it was made and reused
    for `seconds` after it was begun, for at most `keys` keys (the least recently asked
    for is forgotten past that). A reading that raised is given to those who waited for
    it, never reused: the next asker reads again."""

    def __init__(self, seconds: float, keys: int) -> None:
        self.seconds = seconds
        self.keys = keys
        self._slots: OrderedDict[K, _Slot[V]] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: K, read: Callable[[], V]) -> V:
        """The reading of `key`: one under way, a fresh enough one, or `read()` made now."""
        with self._lock:
            slot = self._slots.get(key)
            if slot is None:
                slot = self._slots[key] = _Slot()
                if len(self._slots) > self.keys:
                    self._slots.popitem(last=False)
            else:
                self._slots.move_to_end(key)
            reading, now = slot.reading, time.monotonic()
            stale = reading.done() and (reading.exception() is not None
                                        or now - slot.begun >= self.seconds)
            mine = slot.begun == -float("inf") or stale
            if mine:
                reading = slot.reading = Future()
                slot.begun = now
        if mine:
            try:
                reading.set_result(read())
            except BaseException as e:
                reading.set_exception(e)
        return reading.result()
