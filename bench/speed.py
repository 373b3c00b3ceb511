"""The machine's own speed while a drain runs: a fixed piece of pure-Python work timed
every tenth of a second on its thread's CPU clock. On a shared host the same work can
take twice its usual CPU time for seconds at a time (another tenant busy on the sibling
thread of the core), so two drains a minute apart can differ by 2x with nothing in the
bench changed. The probe records when that happened; it cannot undo it."""

from __future__ import annotations

import statistics
import threading
import time
from types import TracebackType

# About half a millisecond of CPU at full speed, every PERIOD: under 1% of one core, the
# same for every entrant.
PROBE_LOOPS = 20_000
PERIOD = 0.1


def _probe() -> float:
    """The CPU seconds this thread spends on a fixed loop."""
    start = time.thread_time()
    total = 0
    for i in range(PROBE_LOOPS):
        total += i * i
    return time.thread_time() - start


class SpeedProbe:
    """A thread timing the probe every PERIOD while the `with` block runs; the samples
    are (perf_counter, CPU seconds) and belong to the probe, read under its lock."""

    def __init__(self, period: float = PERIOD) -> None:
        self._period = period
        self._samples: list[tuple[float, float]] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="speed-probe", daemon=True)

    def __enter__(self) -> SpeedProbe:
        self._thread.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._stop.wait(self._period):
            took = _probe()
            with self._lock:
                self._samples.append((time.perf_counter(), took))

    def during(self, start: float, end: float) -> float | None:
        """The median probe time between two perf_counter readings; None if no probe
        finished in between."""
        with self._lock:
            inside = [took for at, took in self._samples if start <= at <= end]
        return statistics.median(inside) if inside else None

    def fastest(self) -> float | None:
        """The quickest probe so far: the machine at full speed, as near as it showed."""
        with self._lock:
            return min((took for _, took in self._samples), default=None)

    def slowdown(self, start: float, end: float) -> float | None:
        """How many times slower than its fastest the machine ran between two readings
        (1.0: full speed)."""
        during, fastest = self.during(start, end), self.fastest()
        if during is None or not fastest:
            return None
        return during / fastest
