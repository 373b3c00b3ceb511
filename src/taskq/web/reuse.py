"""Readings that every request asking within a moment shares: the first asker reads,
the others asking meanwhile wait for that reading rather than make their own, and
those after it are given it until it is `seconds` old. A reading that costs the server
tens of ms then costs it that once a moment, however many dashboards poll it."""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


@dataclass
class _Slot(Generic[V]):
    """One key's reading and when it was begun (monotonic s); its lock is held while
    it is read."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    value: V | None = None
    begun: float = -float("inf")


class Reused(Generic[K, V]):
    """Readings by key, each reused for `seconds` after it was begun, for at most `keys`
    keys (the least recently asked for is forgotten past that). A reading that raises
    is not kept: the next asker reads again."""

    def __init__(self, seconds: float, keys: int) -> None:
        self.seconds = seconds
        self.keys = keys
        self._slots: OrderedDict[K, _Slot[V]] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: K, read: Callable[[], V]) -> V:
        """The reading of `key`: a fresh enough one, or `read()` made now."""
        with self._lock:
            slot = self._slots.get(key)
            if slot is None:
                slot = self._slots[key] = _Slot()
                if len(self._slots) > self.keys:
                    self._slots.popitem(last=False)
            else:
                self._slots.move_to_end(key)
        with slot.lock:
            now = time.monotonic()
            if slot.value is not None and now - slot.begun < self.seconds:
                return slot.value
            value = read()
            slot.value, slot.begun = value, now
            return value
