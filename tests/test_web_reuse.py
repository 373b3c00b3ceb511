"""A reading shared by the requests that ask for it within a moment: one read for a
crowd asking at once, however long it takes and whether it fails or not, reused until
it is old, never kept when it fails, and forgotten for the least recently asked key
past the bound."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from taskq.web.reuse import Reused


class Reads:
    """A read that counts its calls, taking `seconds` each."""

    def __init__(self, seconds: float = 0.0) -> None:
        self.calls = 0
        self.seconds = seconds
        self._lock = threading.Lock()

    def __call__(self) -> int:
        with self._lock:
            self.calls += 1
            n = self.calls
        time.sleep(self.seconds)
        return n


def test_a_crowd_asking_at_once_waits_for_one_read() -> None:
    reused: Reused[str, int] = Reused(seconds=60, keys=10)
    read = Reads(seconds=0.2)
    with ThreadPoolExecutor(16) as pool:
        got = list(pool.map(lambda _: reused.get("q", read), range(16)))
    assert read.calls == 1 and got == [1] * 16


def test_a_crowd_waits_for_one_read_that_takes_longer_than_a_reading_is_reused() -> None:
    """Each waiter found the reading old as it ended, and read again in turn: behind a
    stalled Redis, the fourth asker waited four reads."""
    reused: Reused[str, int] = Reused(seconds=0.05, keys=10)
    read = Reads(seconds=0.3)
    with ThreadPoolExecutor(4) as pool:
        got = list(pool.map(lambda _: reused.get("q", read), range(4)))
    assert read.calls == 1 and got == [1] * 4


def test_a_crowd_waiting_for_a_read_that_fails_gets_its_error_from_that_read() -> None:
    reused: Reused[str, int] = Reused(seconds=60, keys=10)
    read = Reads(seconds=0.2)

    def stalled() -> int:
        read()
        raise ConnectionError("Redis stalled")

    def ask(_: int) -> str:
        try:
            reused.get("q", stalled)
        except ConnectionError as e:
            return str(e)
        return "no error"

    with ThreadPoolExecutor(8) as pool:
        outcomes = list(pool.map(ask, range(8)))
    assert read.calls == 1 and outcomes == ["Redis stalled"] * 8


def test_a_reading_is_read_again_once_it_is_old() -> None:
    reused: Reused[str, int] = Reused(seconds=0.05, keys=10)
    read = Reads()
    assert (reused.get("q", read), reused.get("q", read)) == (1, 1)
    time.sleep(0.06)
    assert reused.get("q", read) == 2


def test_each_key_has_its_own_reading() -> None:
    reused: Reused[tuple[str, int], int] = Reused(seconds=60, keys=10)
    read = Reads()
    assert [reused.get(k, read) for k in [("a", 60), ("a", 1), ("a", 60)]] == [1, 2, 1]


def test_a_read_that_fails_is_not_kept() -> None:
    reused: Reused[str, int] = Reused(seconds=60, keys=10)

    def broken() -> int:
        raise ConnectionError("Redis went away")

    with pytest.raises(ConnectionError):
        reused.get("q", broken)
    assert reused.get("q", Reads()) == 1


def test_past_its_bound_it_forgets_the_key_asked_for_least_recently() -> None:
    reused: Reused[str, int] = Reused(seconds=60, keys=2)
    read = Reads()
    reused.get("a", read), reused.get("b", read), reused.get("a", read)
    reused.get("c", read)  # forgets b, not a
    assert (reused.get("a", read), reused.get("b", read)) == (1, 4)
