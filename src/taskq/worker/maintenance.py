"""Maintenance on the loop's thread: fire periodic schedules, promote due tasks, reap
expired leases, purge the dead."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Sequence

from taskq.broker import Broker
from taskq.errors import BrokerError
from taskq.registry import longest_dead_ttl, not_run
from taskq.schedules import Schedule
from taskq.settings import Settings
from taskq.worker.periodic import Periodic

log = logging.getLogger("taskq.worker")

LIMIT = 100
# Tasks a removed rate limit's line makes due a call: as many as a lease releases.
LIFT_LIMIT = 1000
# Lines of removed limits are looked for this often once lifted: a rolling deploy's
# older workers may throttle under the limit until they stop.
LIFT_EVERY_SECONDS = 10.0
# After a failed lift: soon, for a passing refusal, but not every turn of one that lasts.
LIFT_RETRY_SECONDS = 1.0
# Due tasks and expired leases are found within this long; a busy worker's loop turns
# thousands of times a second, and each turn need not ask. With a backlog in ready, a
# promoted task only joins the back of it, so looking less often costs it nothing.
EVERY_SECONDS = 0.02
EVERY_SECONDS_WITH_BACKLOG = 0.1
# Dead tasks age in days, so looking for expired ones now and then is plenty.
PURGE_EVERY_SECONDS = 10.0


class Spell:
    """A read maintenance cannot do without, failing: warned of once while the failure
    lasts, and said again when the read comes back, rather than logged each try."""

    def __init__(self, queue: str, failing: str, back: str) -> None:
        self.queue, self.failing, self.back = queue, failing, back
        self.on = False

    def failed(self, error: BrokerError) -> None:
        if not self.on:
            log.warning("queue %r: %s: %s", self.queue, self.failing, error)
        self.on = True

    def ended(self) -> None:
        if self.on:
            log.info("queue %r: %s", self.queue, self.back)
        self.on = False


class Maintenance:
    """Every worker maintains its queue, so no scheduler process is needed; each step
    runs on its own clock (the monotonic one: these are local waits)."""

    def __init__(self, broker: Broker, settings: Settings,
                 schedules: Iterable[Schedule] = (), fires_on: Broker | None = None,
                 unlimited: Sequence[str] = (), known: Sequence[str] = ()) -> None:
        self.broker = broker
        self.settings = settings
        # Rate limits this worker's leases do not apply, lifted before it promotes
        # (see Broker.lift_rate_limits): as it starts, while tasks are left, and now and
        # then after, since a worker of the deploy before may still be throttling.
        self._unlimited = tuple(unlimited)
        # The names this worker runs: a limit stored for a name that neither it nor any
        # live worker of the queue runs (a deploy removed the task) is lifted too, so
        # its throttled tasks come due and reach the DLQ as unknown, as parked ones do,
        # rather than wait out the spacing of a limit no worker applies.
        self._known = frozenset(known)
        self._next_lift = 0.0
        self._lifted_before = False
        # The registry failing to say which names no live worker runs.
        self._unrun_failing = Spell(
            broker.queue, "the rate limits of task names no live worker runs are not "
            f"lifted while the workers' task names cannot be read (tried again every "
            f"{LIFT_RETRY_SECONDS:g}s)", "the workers' task names are read again")
        # The names no live worker runs of a lift left part done (None: none).
        self._lifting: list[str] | None = None
        # `schedules` fire on `fires_on`'s queue (default: the one maintained).
        self.periodic = Periodic(fires_on or broker, schedules)
        self._fires_elsewhere = fires_on is not None and fires_on is not broker
        self._last = -1e9
        self._next_purge = 0.0
        # The retention purges apply, read from the registry once a purge interval: the
        # batches that follow a full one (a turn each) reuse it.
        self._keep = (0.0, -1e9)
        # Purges waiting for the registry to say how long dead tasks are kept.
        self._purge_failing = Spell(
            broker.queue, "dead tasks are not purged while the longest a live worker "
            f"keeps them cannot be read (tried again every {PURGE_EVERY_SECONDS:g}s)",
            "dead tasks are purged again")

    def run(self, backlog: bool, due: bool = False) -> int:
        """Fire due schedules, promote and reap if it is time (less often while ready has
        a `backlog`; at once when a lease said something is `due`), and purge now and
        then; returns how many tasks became ready. Raises BrokerError."""
        # Each turn, not on the intervals: a queue that strict order or a busy other
        # queue keeps this worker from leasing must get such tasks back all the same.
        self.broker.give_back_unanswered()
        now = time.monotonic()
        if not due and now < self._last + (EVERY_SECONDS_WITH_BACKLOG if backlog
                                           else EVERY_SECONDS):
            # Schedules a run left over go on at once, a run's worth a turn: the
            # interval would spread thousands due together over a minute of turns.
            return self._fire() if self.periodic.more else 0
        self._last = now
        s = self.settings
        fired = self._fire()
        if now >= self._next_lift:
            self._lift(now)
        promoted = len(self.broker.promote(LIMIT))
        self.broker.reap(LIMIT, s.backoff_base_seconds, s.backoff_max_seconds)
        if now >= self._next_purge:
            # Set first: a purge Redis refuses waits its turn again, not every turn.
            self._next_purge = now + PURGE_EVERY_SECONDS
            keep = self._dead_ttl(now)
            if keep is not None and len(self.broker.purge(keep, LIMIT)) == LIMIT:
                # A full batch: more may be due, and tasks that die faster than a batch
                # a turn would fill the DLQ for good. The next turn purges again.
                self._next_purge = now
        return fired + promoted

    @property
    def ran_at(self) -> float:
        """When (monotonic) a run last promoted and reaped: asked Redis, not only
        looked at its clock."""
        return self._last

    def _fire(self) -> int:
        """Fire due schedules; how many tasks became ready on this queue. Fired on a
        queue this worker does not serve, they are none of its own, and its failing
        (that queue's primary down, on a cluster) holds up no maintenance of this one."""
        if not self._fires_elsewhere:
            return self.periodic.run()
        try:
            self.periodic.run()
        except BrokerError as e:
            log.info("firing schedules on queue %r failed: %s", self.periodic.broker.queue, e)
        return 0

    def _lift(self, now: float) -> None:
        """Lift the limits no longer declared: at once again while tasks are left. Its
        failing (out of memory, a key of another type) holds up no other maintenance,
        and is tried again LIFT_RETRY_SECONDS later: every worker looks, so a failure
        that lasts would otherwise cost a call and a log line every turn. The registry
        failing to say which names no live worker runs (its index of another type)
        holds up only their lifts, warned of once, not those of this worker's own. A
        lift left part done goes on with the names it began with: the registry is
        asked once a lift, not once a turn while a long line is made due."""
        unrun = self._unrun_or_none() if self._lifting is None else self._lifting
        self._lifting = None
        try:
            names = (*self._unlimited, *(unrun or ()))
            done = self.broker.lift_rate_limits(names, LIFT_LIMIT) if names else None
        except BrokerError as e:
            self._next_lift = now + LIFT_RETRY_SECONDS
            log.info("lifting the rate limits of queue %r failed; tried again in %gs: %s",
                     self.broker.queue, LIFT_RETRY_SECONDS, e)
            return
        if done is None:
            self._next_lift = now + (LIFT_EVERY_SECONDS if unrun is not None
                                     else LIFT_RETRY_SECONDS)
            return
        if done.lifted and not self._lifted_before:
            log.info("queue %r: lifted %d rate limit(s) this worker's app no longer declares",
                     self.broker.queue, done.lifted)
        elif done.lifted:
            # Once is a redeploy; again means another worker still applies the limit, and
            # each lift lets it start a burst afresh.
            log.warning("queue %r: lifted %d rate limit(s) again that this worker's app does "
                        "not declare: a worker still declares them; every worker of a queue "
                        "must declare the same limits", self.broker.queue, done.lifted)
        self._lifted_before = self._lifted_before or done.lifted > 0
        self._lifting = unrun if done.left else None
        self._next_lift = now if done.left else now + (
            LIFT_EVERY_SECONDS if unrun is not None else LIFT_RETRY_SECONDS)

    def _unrun_or_none(self) -> list[str] | None:
        """`_unrun()`, or None when Redis cannot say (warned of once a failing spell)."""
        try:
            unrun = self._unrun()
        except BrokerError as e:
            self._unrun_failing.failed(e)
            return None
        self._unrun_failing.ended()
        return unrun

    def _dead_ttl(self, now: float) -> float | None:
        """Seconds a dead task is kept: this worker's TASKQ_DEAD_TTL_SECONDS, or a live
        worker's of the queue that keeps them longer. Each purge applies its caller's
        retention to every dead task, so one worker set shorter (a canary, a laptop
        pointed at the queue) would otherwise empty the DLQ the others keep. None when
        the registry cannot say (its index of another type, Redis away): no purge then,
        since keeping a dead task longer loses nothing and purging it early loses it."""
        keep, read_at = self._keep
        if now < read_at + PURGE_EVERY_SECONDS:
            return keep
        try:
            longest = longest_dead_ttl(self.broker)[0] / 1000
        except BrokerError as e:
            self._purge_failing.failed(e)
            return None
        self._purge_failing.ended()
        # At most DEAD_TTL.high: the script clamps what a hand-written score says.
        keep = max(self.settings.dead_ttl_seconds, longest)
        self._keep = (keep, now)
        return keep

    def _unrun(self) -> list[str]:
        """The names the queue holds a rate limit for that neither this worker nor any
        live worker of the queue runs. A worker of a deploy that still runs one is
        registered while it leases, so its limit stays."""
        stored = [n for n in self.broker.rate_limited_names()
                  if n not in self._known and n not in self._unlimited]
        return not_run(self.broker, stored)

    def wait_seconds(self) -> float | None:
        """How long an idle worker may wait before maintenance has a tick to fire (never
        less than one maintenance interval, so an overdue tick does not spin the loop);
        None when no schedule is known yet."""
        wait = self.periodic.wait_seconds()
        return None if wait is None else max(EVERY_SECONDS, wait)
