"""Firing periodic schedules, a step of every worker's maintenance: no scheduler process.

Which ticks are due is decided by fire.lua against the Redis server's clock. The local
monotonic clock only says when asking is worth a round trip: from the server time the
last reply carried, this worker can tell when the next tick should have come. A tick
is not proposed while a live worker of the queue does not run the schedule's task, as
the workers registry says: that worker could lease it and find no function for it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable
from dataclasses import dataclass

from taskq.boundary import refused_by_script, refused_for_a_key, unusable_as_stored
from taskq.broker import Broker
from taskq.errors import BrokerError, ConfigError
from taskq.registry import lacking
from taskq.schedules import MAX_CATCH_UP, Schedule

log = logging.getLogger("taskq.worker")

# Ask again this often even when no tick should be due: another worker may have fired,
# a definition may have been replaced, or Redis may have come back with other state.
REFRESH_SECONDS = 5.0
# Schedules asked of Redis in one run: a run is a step of the worker loop's turn, which
# settles finished tasks and leases between turns, so an app with thousands of
# schedules due at once fires them over several turns, not in one that holds up acks
# and leases for seconds. The next run goes on from the first one left.
FIRES_PER_RUN = 100
# How often a worker says, at most, that another keeps firing a schedule of the same name
# under another definition.
REPLACED_SAY_SECONDS = 60.0


@dataclass
class _Seen:
    """What the last reply said about one schedule, and when (monotonic) it came."""

    last_tick_ms: int
    server_ms: int
    at: float
    next_tick_ms: int


class Periodic:
    """Fires each of an app's schedules whenever a tick may be due."""

    def __init__(self, broker: Broker, schedules: Iterable[Schedule]) -> None:
        self.broker = broker
        self.schedules = tuple(schedules)
        self._seen: dict[str, _Seen] = {}
        # Schedules whose ticks could not be computed: named in the log once, then left
        # out, so one bad declaration never stops a worker's maintenance.
        self._broken: set[str] = set()
        # Schedules a key of another type keeps from firing, or a live worker that does
        # not run their task, and until when (monotonic) they are left alone: the key
        # may be mended, the worker stop, and then the tick still fires.
        self._held: dict[str, float] = {}
        # Schedules held for a live worker of the queue that does not run their task, by
        # that worker: it would lease their ticks and send them to the DLQ as unknown (a
        # rolling deploy that adds the task, whose new workers fire it at once).
        self._unrun: dict[str, str] = {}
        # The registry's answer this run (None: not asked yet): task name -> a live
        # worker that does not run it. Asked once a run for every schedule's task, and
        # only by a run with a tick to propose.
        self._lacking: dict[str, str] | None = None
        # Whether Redis refused the last ask: warned of once while the refusal lasts.
        self._registry_refused = False
        # Where the next run starts, and whether the last stopped at FIRES_PER_RUN with
        # schedules left to look at.
        self._next = 0
        self._fired = 0
        self.more = False
        # How often this worker's firing found another definition of a schedule stored
        # (its own written over it), and when (monotonic) it last said so.
        self._replaced: dict[str, int] = {}
        self._replaced_said: dict[str, float] = {}

    def run(self) -> int:
        """Fire the schedules that may have a due tick, at most FIRES_PER_RUN asked of
        Redis (`more` says whether some were left for the next run); returns how many
        tasks were made. Raises BrokerError."""
        made, self._fired, self.more = 0, 0, False
        self._lacking = None
        count = len(self.schedules)
        for step in range(count):
            at = (self._next + step) % count
            if self._fired >= FIRES_PER_RUN:
                self._next, self.more = at, True
                break
            made += self._run_guarded(self.schedules[at])
        return made

    def _run_guarded(self, schedule: Schedule) -> int:
        """Fire `schedule` if it may have a due tick; one that fails for good is left
        out, one a key of another type stops is held back. Raises BrokerError."""
        name = schedule.name
        if name in self._broken or time.monotonic() < self._held.get(name, 0.0):
            return 0
        try:
            made = self._run_one(schedule)
        except BrokerError as e:
            if refused_for_a_key(e):
                self._hold(schedule, e)
                return 0
            if not refused_by_script(e):
                raise
            self._leave_out(schedule)
            log.error("schedule %r (%s): Redis refuses to fire it, so this worker no "
                      "longer fires it: %s", name, schedule.when, e)
        except ConfigError as e:  # the queue cannot take it as this app sees it
            self._leave_out(schedule)
            log.error("schedule %r (%s): this worker no longer fires it: %s",
                      name, schedule.when, e)
        except Exception:
            self._leave_out(schedule)
            log.exception("schedule %r (%s): its ticks cannot be computed, so this "
                          "worker no longer fires it", name, schedule.when)
        else:
            if name not in self._unrun and self._held.pop(name, None) is not None:
                log.warning("schedule %r (%s): fires again", name, schedule.when)
            return made
        return 0

    def _hold(self, schedule: Schedule, error: BrokerError) -> None:
        if schedule.name not in self._held:
            log.warning("schedule %r (%s): not fired until Redis takes it, asking every "
                        "%g s: %s", schedule.name, schedule.when, REFRESH_SECONDS, error)
        self._held[schedule.name] = time.monotonic() + REFRESH_SECONDS

    def _leave_out(self, schedule: Schedule) -> None:
        self._broken.add(schedule.name)
        self._seen.pop(schedule.name, None)  # its last due tick must not hurry the wait

    def _run_one(self, schedule: Schedule) -> int:
        now = time.monotonic()
        seen = self._seen.get(schedule.name)
        if seen is None:
            return self._fire(schedule, [])
        server_now = seen.server_ms + int((now - seen.at) * 1000)
        if server_now < seen.next_tick_ms and now < seen.at + REFRESH_SECONDS:
            return 0
        limit = MAX_CATCH_UP if schedule.policy == "all" else 1
        ticks = schedule.ticks(seen.last_tick_ms, server_now, limit)
        if ticks and self._unrun_by_a_worker(schedule):
            return 0
        return self._fire(schedule, ticks, seen.last_tick_ms)

    def _unrun_by_a_worker(self, schedule: Schedule) -> bool:
        """Whether `schedule` is held, a live worker of its queue not running its task:
        said once when the hold starts and once when it ends, and asked again every
        REFRESH_SECONDS meanwhile. Its ticks are not lost: once released, the next
        firing proposes every tick since its last, and its policy says which run."""
        name = schedule.name
        worker = self._lacking_now().get(schedule.task)
        if worker is None:
            if self._unrun.pop(name, None) is not None:
                self._held.pop(name, None)
                log.warning("schedule %r (%s): every live worker of queue %r runs task %r "
                            "now: fires again", name, schedule.when, self.broker.queue,
                            schedule.task)
            return False
        if name not in self._unrun:
            log.warning("schedule %r (%s): not fired while live worker %r of queue %r does "
                        "not run task %r (it would lease the ticks and send them to the "
                        "DLQ as unknown); ticks resume when every live worker of the "
                        "queue runs it, and its policy (%s) then says which of the held "
                        "ones run", name, schedule.when, worker, self.broker.queue,
                        schedule.task, schedule.policy)
        self._unrun[name] = worker
        self._held[name] = time.monotonic() + REFRESH_SECONDS
        return True

    def _lacking_now(self) -> dict[str, str]:
        """This run's answer from the registry, asked for at its first use. A registry
        Redis cannot read as taskq keeps it (a key of another type) holds nothing back:
        warned of once, schedules fire as if every worker ran their tasks, since holding
        them until someone mends the key would stop them all. Raises BrokerError."""
        if self._lacking is None:
            tasks = sorted({s.task for s in self.schedules})
            try:
                self._lacking = lacking(self.broker, tasks)
            except BrokerError as e:
                if not (refused_by_script(e) or unusable_as_stored(e)):
                    raise
                if not self._registry_refused:
                    log.warning("queue %r: schedules fire without asking whether every "
                                "live worker runs their task, while the workers registry "
                                "cannot be read: %s", self.broker.queue, e)
                self._registry_refused, self._lacking = True, {}
            else:
                self._registry_refused = False
        return self._lacking

    def _note_replaced(self, schedule: Schedule) -> None:
        """Once, this worker's definition replaced an older deploy's; again, another live
        worker writes its own back in between: each fires its own ticks, and the task
        runs on the ticks of both. Said at most once a REPLACED_SAY_SECONDS."""
        name = schedule.name
        times = self._replaced[name] = self._replaced.get(name, 0) + 1
        now = time.monotonic()
        if times == 1:
            log.info("schedule %r: this worker's definition (%s) replaced the one stored "
                     "for it, keeping its last tick", name, schedule.when)
        elif now - self._replaced_said.get(name, float("-inf")) >= REPLACED_SAY_SECONDS:
            self._replaced_said[name] = now
            log.warning("schedule %r: another worker of queue %r fires it under another "
                        "definition (this worker wrote its own, %s, back over it %d times): "
                        "while both run, the ticks of both definitions fire. Finish the "
                        "deploy, or give the two schedules different names", name,
                        self.broker.queue, schedule.when, times - 1)

    def wait_seconds(self) -> float | None:
        """Seconds until the next tick of any schedule should have come, by the server's
        clock as the last replies carried it (0 if one is overdue, or the last run left
        schedules to the next); None before the first firing, or with no schedules."""
        now = time.monotonic()
        waits = [self._held[name] - now if name in self._held
                 else (seen.next_tick_ms - seen.server_ms) / 1000 - (now - seen.at)
                 for name, seen in self._seen.items()]
        waits += [until - now for name, until in self._held.items() if name not in self._seen]
        if self.more:
            return 0.0
        return max(0.0, min(waits)) if waits else None

    def _fire(self, schedule: Schedule, ticks: list[int], after_ms: int = 0) -> int:
        self._fired += 1
        fired = self.broker.fire(schedule, ticks, after_ms)
        if fired.definition == "replaced":
            self._note_replaced(schedule)
        # Taken after the reply, so the estimate of the server's clock runs behind it
        # rather than ahead: a tick is asked for a round trip late, never early.
        self._seen[schedule.name] = _Seen(fired.last_tick_ms, fired.server_ms,
                                          time.monotonic(),
                                          schedule.next_tick(fired.last_tick_ms))
        return len(fired.task_ids)
