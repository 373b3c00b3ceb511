"""The chord comparison's faults: worker processes killed and paused on a seeded schedule.

Each system runs the same schedule against its own worker processes: a SIGKILL of a
whole worker (its process group: a Celery prefork worker's pool children die with it,
as they would with their machine) while it holds members, after which a fresh worker
takes its slot, and a SIGSTOP of a whole worker for longer than the lease (Celery's
visibility timeout), then SIGCONT: the stale holder resumes and finishes members that
were redelivered to the others meanwhile.
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from bench.harness import Child


@dataclass(frozen=True)
class Fault:
    """One fault: seconds into the run, `kill` or `pause`, which live worker (`pick`
    modulo their number), for how long."""

    at: float
    kind: str
    pick: int
    seconds: float = 0.0


def schedule(seed: int, kills: int, pauses: int, every: float, pause: float) -> list[Fault]:
    """`kills` + `pauses` faults in a seeded order, one every `every` seconds or so."""
    rng = random.Random(seed)
    kinds = ["kill"] * kills + ["pause"] * pauses
    rng.shuffle(kinds)
    return [Fault(every * (k + 1) + rng.uniform(-every / 4, every / 4), kind,
                  rng.randrange(1 << 16), pause if kind == "pause" else 0.0)
            for k, kind in enumerate(kinds)]


@dataclass
class Injector:
    """Applies a schedule to `workers` (index = slot): `start(slot)` makes a worker for a
    slot; a killed one is replaced at once. Call `tick` often from the thread that started
    the workers (their parent-death signal is tied to it)."""

    workers: list[Child]
    start: Callable[[int], Child]
    faults: list[Fault]
    started: float = field(default_factory=time.monotonic)
    done: list[str] = field(default_factory=list)
    # (due, slot's child) of paused workers to continue.
    paused: list[tuple[float, Child]] = field(default_factory=list)

    def clock(self) -> float:
        return time.monotonic() - self.started

    @property
    def quiet(self) -> bool:
        """No fault left to inject and none in progress."""
        return not self.faults and not self.paused

    def tick(self, injecting: bool = True) -> None:
        now = self.clock()
        for item in [p for p in self.paused if p[0] <= now]:
            self.paused.remove(item)
            _group_signal(item[1], signal.SIGCONT)
        if injecting and self.faults and self.faults[0].at <= now:
            self._inject(self.faults.pop(0))

    def settle(self) -> None:
        """Continue every paused worker now; drop the faults not yet injected."""
        for _, child in self.paused:
            _group_signal(child, signal.SIGCONT)
        self.paused.clear()
        self.faults.clear()

    def _inject(self, fault: Fault) -> None:
        held = {id(child) for _, child in self.paused}
        live = [i for i, w in enumerate(self.workers) if w.alive() and id(w) not in held]
        if not live:
            return
        slot = live[fault.pick % len(live)]
        child = self.workers[slot]
        if fault.kind == "kill":
            _group_signal(child, signal.SIGKILL)
            child.process.wait()
            self.workers[slot] = self.start(slot)
            what = f"SIGKILL worker {slot} (pid {child.pid}), a new one started"
        else:
            _group_signal(child, signal.SIGSTOP)
            self.paused.append((self.clock() + fault.seconds, child))
            what = f"SIGSTOP worker {slot} (pid {child.pid}) for {fault.seconds:.1f} s"
        line = f"{self.clock():6.1f} s  {what}"
        self.done.append(line)
        print(f"     {line}", file=sys.stderr, flush=True)


def _group_signal(child: Child, signum: int) -> None:
    """Signal the worker's whole process group: the pool children with the parent."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(child.pid, signum)
