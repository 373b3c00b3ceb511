"""Finishing tasks: fails one by one, then each queue's acks in one call (the first queue
of the turn's carrying the lease that refills the freed slots when the loop asks for
one); at shutdown, the tasks left over. Each task is settled on its own queue."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from taskq.broker import Broker
from taskq.context import TaskContext
from taskq.errors import BrokerError
from taskq.results import FailResult, Failure, LeaseBatch, LeasedTask, Released, TaskRecord
from taskq.retry import Decision
from taskq.settings import Settings
from taskq.worker.inbox import Outcome
from taskq.worker.outage import Outage, T
from taskq.worker.queues import Queues
from taskq.worker.slots import Slots
from taskq.worker.tasklog import TaskLog

log = logging.getLogger("taskq.worker")

# How long a shutdown waits for the outcome of a handler it saw return (see _reported).
REPORT_WAIT_SECONDS = 1.0


@dataclass(frozen=True)
class Settled:
    """What settling a turn's outcomes came to.

    `acks` has one entry per handler that returned, queue by queue, True where Redis
    took the ack (or had taken our own earlier one), and none for a queue where Redis
    stayed away a whole lease; `ack_error` is why the acks that carried the lease had
    to be sent again alone, if they did; `refill` is the lease that travelled with
    them, None when none was asked for or made."""

    acks: list[bool] = field(default_factory=list)
    ack_error: BrokerError | None = None
    refill: LeaseBatch | None = None


class Settler:
    """Reports finished handlers to Redis, retrying through an outage for up to one
    lease: a lost ack means the task runs again, which is worth a long wait."""

    def __init__(self, queues: Queues, settings: Settings, slots: Slots,
                 worker_id: str, stopping: Callable[[], bool] = lambda: False) -> None:
        self.queues = queues
        # Whether the worker's stop has begun: what `left` counts from.
        self.stopping = stopping
        self.settings = settings
        self.slots = slots
        self.worker_id = worker_id
        self.task_log = TaskLog(settings.task_log)
        # One per queue: on a cluster one queue's primary may be down while the others
        # answer, and its outage must not hold back (or drop) their calls.
        self._outages: dict[str, Outage] = {}
        # Runs `fence` cut off at the end of the grace, each with whether its effect was
        # applied: `abandon` gives them back.
        self._cut: list[tuple[TaskContext, bool]] = []
        # Tasks whose ack, fail, release or cancel gave up, once the stop had begun, on a
        # Redis away past their leases: left to be reaped, and run again or ended there.
        self.left = 0

    def settle(self, outcomes: Sequence[Outcome], refill: int = 0,
               lease_from: Broker | None = None) -> Settled:
        """Report `outcomes` and let them go. With `refill` > 0 the acks of `lease_from`'s
        queue (default: the first queue) carry a lease of that many tasks from it in the
        same round trip, sent after the other queues' acks."""
        # How each ends is read once, before any call: a heartbeat may yet say one was
        # cancelled. Each lease is renewed until its own call goes (`finished` stops its
        # heartbeats then), since a fail retried through one queue's outage may hold the
        # others' calls up for as long as a lease.
        # A run that learned of its task's cancel ends it cancelled, however the handler
        # ended (returned, raised, cut off at its time limit).
        cancelled: list[Outcome] = []
        unstarted: list[Outcome] = []
        cut: list[Outcome] = []
        failed: list[Outcome] = []
        done: list[Outcome] = []
        # A run already settled (given back at the end of the grace) whose handler
        # reported afterwards: its task is no longer this worker's to settle.
        outcomes = [o for o in outcomes if not o.context.finished]
        for outcome in outcomes:
            (cancelled if outcome.context.cancelled else unstarted if not outcome.started
             else cut if self._cut_off(outcome)
             else failed if outcome.failure is not None else done).append(outcome)
        for outcome in cancelled:
            outcome.context.finished = True  # no more heartbeats for it
            self._ack_cancelled(outcome.context)
        # Newest first: each goes to the front of ready, so the one leased first is
        # back in front, and the tasks run in the order they waited.
        for outcome in reversed(unstarted):
            outcome.context.finished = True
            self._release(outcome.context, "had not started when the worker began to "
                          "stop or its lease was lost, and is")
        # Fenced as the grace ended (see TimeLimits), then failed, by the fence most
        # likely: given back as a run cut off at shutdown is, its attempt not counted
        # (newest first, as the unstarted).
        for outcome in reversed(cut):
            outcome.context.finished = True
            self._end_cut(outcome.context, outcome.context.abandon())
        for outcome in failed:
            outcome.context.finished = True
            assert outcome.failure is not None
            self._fail(self.queues.broker(outcome.context.queue), outcome.task,
                       outcome.context, outcome.failure, outcome.decision)
        # Acks last: a lease they carry goes straight back to the loop to be put in
        # hand, not held up by fails retried through an outage while its clock runs.
        settled = self._ack(done, refill, lease_from or self.queues.first) if done \
            else Settled()
        self.slots.let_go(*(o.context for o in outcomes))
        return settled

    def fence(self, contexts: Sequence[TaskContext]) -> None:
        """At the end of the grace, before any call to Redis: fence every run still going
        but those inside an effect() block (`abandon` waits for each, after giving the
        others back), and take it as settled here, to be given back by `abandon`. A
        call to Redis may be held for as long as a lease by an outage, while each
        handler not yet fenced passes effect() on its lease's last renewal: then reaped
        and run again, its task would apply its effect twice. (The time-limit thread
        fences them too, as the loop may be held up by Redis before it gets here.) A run
        that ended, or timed out (its give-up decides how it ends), is left to
        `abandon`; one that never started is only kept from starting, and given back as
        its report says (newest first: see settle)."""
        for context in contexts:
            if context.finished or context.ended_at or context.timed_out \
                    or not context.fence_now():
                continue
            # Fenced with no block under way, none can start: what it applied is final.
            applied = context.effect_applied
            if not context.started_at:
                continue
            context.finished = True  # its report, if it makes one now, is passed over
            self._cut.append((context, applied))

    def abandon(self, contexts: Sequence[TaskContext], arrived: Callable[[], list[Outcome]],
                give_up: Callable[[TaskContext], Outcome | None]) -> None:
        """Settle tasks whose handlers outlived the shutdown grace. Each is fenced first
        (waiting for an effect under way), so a handler that goes on cannot apply an
        effect afterwards. One past its time limit has its attempt failed under its
        retry policy, as without the stop (TaskQueue's TimedOutNeverAcks): `give_up`
        makes that outcome unless the run's report was claimed. Released, it would run
        again whatever its retries, and apply an effect it had applied a second time. A
        task whose effect was applied is acked: run again, it would apply its effect
        twice wherever the effect is not guarded; the rest of its handler is cut off.
        Any other is released for another worker, and one whose task was cancelled ends
        cancelled. A handler that returned meanwhile (each give-back is a Redis call),
        or a give-up the time-limit thread made, is settled with the outcome it
        reported, which `arrived` takes from the inbox."""
        cut, self._cut = self._cut, []
        # Newest first, as in settle: each released one goes to the front of ready.
        for context, applied in reversed(cut):
            self._give_back(context, applied)
        # Those inside no effect() block first: none of them waits behind a block that
        # takes long (or never ends) to be given back.
        for context in sorted(reversed(contexts), key=lambda c: c.in_effect):
            if context.finished:
                continue  # settled meanwhile, with an outcome taken for another
            applied = context.abandon()
            if context.timed_out:
                given_up = give_up(context)
                self.settle([given_up] if given_up else self._reported(context, arrived))
                if context.finished:
                    continue
            elif context.ended_at:
                self.settle(self._reported(context, arrived))
                if context.finished:
                    continue
            context.finished = True  # settled here: its lease ends by design
            self._give_back(context, applied)

    def _give_back(self, context: TaskContext, applied: bool) -> None:
        """End a run cut off at shutdown, fenced, and let its slot go."""
        self._end_cut(context, applied)
        self.slots.let_go(context)

    def _end_cut(self, context: TaskContext, applied: bool) -> None:
        """End a run cut off at shutdown, fenced: its task cancelled if it was, acked
        (with no result) if its effect was applied, else released."""
        if context.cancelled:
            self._ack_cancelled(context)
        elif applied and not context.timed_out:
            self._ack_abandoned(context)
        else:
            self._release(context, "abandoned at shutdown and")

    @staticmethod
    def _cut_off(outcome: Outcome) -> bool:
        """Whether `outcome` is a failure of a run fenced at the end of a stop's grace,
        not one past its time limit (its retry policy judges that, as without the stop)."""
        context = outcome.context
        return outcome.failure is not None and context.abandoned and not context.timed_out

    @staticmethod
    def _reported(context: TaskContext, arrived: Callable[[], list[Outcome]]) -> list[Outcome]:
        """The outcomes in the inbox once `context`'s, which its handler is sending, is
        among them (its thread marks the run ended just before it sends); at most a
        second, as one given up on at its time limit sends none."""
        outcomes, deadline = arrived(), time.monotonic() + REPORT_WAIT_SECONDS
        while not any(o.context is context for o in outcomes) and time.monotonic() < deadline:
            time.sleep(0.001)
            outcomes += arrived()
        return outcomes

    def _ack(self, done: list[Outcome], refill: int, lease_from: Broker) -> Settled:
        if len(self.queues) == 1:
            return self._ack_queue(lease_from, done, refill)
        by_queue = self.queues.by_queue(done, lambda o: o.context.queue)
        carrying = by_queue.pop(lease_from.queue, None) if refill > 0 else None
        acks: list[bool] = []
        for queue, outcomes in by_queue.items():
            acks += self._ack_queue(self.queues.broker(queue), outcomes, 0).acks
        if carrying is None:
            return Settled(acks)
        carried = self._ack_queue(lease_from, carrying, refill)
        return Settled(acks + carried.acks, carried.ack_error, carried.refill)

    def _ack_queue(self, broker: Broker, done: list[Outcome], refill: int) -> Settled:
        """Ack `done`, tasks of `broker`'s queue, in one call: with `refill` > 0 carrying
        a lease of that many from the same queue."""
        tasks = [o.task for o in done]
        contexts = [o.context for o in done]
        for context in contexts:
            context.finished = True  # as its own call goes: no more heartbeats for it
        held = [(t.task_id, t.token) for t in tasks]
        results = [o.result for o in done]
        error: BrokerError | None = None
        batch: LeaseBatch | None = None
        if refill > 0:
            try:
                acks, batch = broker.ack_and_lease(held, self.worker_id,
                                                   self.settings.lease_seconds, refill,
                                                   results)
            except BrokerError as e:
                acks = e
            if isinstance(acks, BrokerError):
                error = acks
                log.info("%s; sending the acks alone", acks)
            else:
                return Settled(self._count_acks(broker, tasks, contexts, acks), None, batch)
        acked = self._retry(broker, f"ack of {len(tasks)} task(s)",
                            lambda: broker.ack_many(held, results),
                            self._held_until(*contexts), len(tasks))
        if acked is None:
            # Redis stayed away a whole lease: these tasks will be reaped and rerun. A
            # lease made beside the refused acks still goes to the loop to run.
            return Settled([], error, batch)
        return Settled(self._count_acks(broker, tasks, contexts, acked), error, batch)

    def _count_acks(self, broker: Broker, tasks: list[LeasedTask],
                    contexts: list[TaskContext], acked: list[bool]) -> list[bool]:
        taken = [ok or self._ended_before(broker, task.task_id, task.token, "completed")
                 is not None for task, ok in zip(tasks, acked, strict=True)]
        self.slots.count("acked", sum(taken))
        for task, context, ok in zip(tasks, contexts, taken, strict=True):
            if ok:
                self.task_log.ended(context, "completed")
            else:
                self._stale(task.task_id, task.token, "ack")
        return taken

    def _fail(self, broker: Broker, task: LeasedTask, context: TaskContext, error: Failure,
              decision: Decision) -> None:
        s = self.settings
        base = s.backoff_base_seconds if decision.backoff_base is None else decision.backoff_base
        # A policy's own base above the settings' cap raises the cap to it: the policy's
        # base replaces the setting, and is never cut down by a cap it did not choose.
        cap = max(s.backoff_max_seconds, base) if decision.backoff_max is None \
            else decision.backoff_max
        dead, delay = decision.mode == "dead", decision.delay if decision.mode == "delay" else None
        result = self._retry(broker, f"fail {task.task_id}", lambda: broker.fail(
            task.task_id, task.token, error, base, cap, delay=delay, dead=dead),
            self._held_until(context))
        if result is None:
            log.warning("fail of task %s not recorded: Redis stayed away (its lease runs out "
                        "and it is reaped as a failed attempt); its run failed with %s",
                        task.task_id, error.line)
        elif result.status == "stale" and (landed := self._ended_before(
                broker, task.task_id, task.token, "delayed", "pending", "dead",
                "cancelled")) is not None:
            # Our own fail went through and its reply was lost: the client's resend found
            # the task already out of leased. Reported as what it did.
            self._failed(context, error, dead, FailResult(
                "dead" if landed.state == "dead" else "cancelled"
                if landed.state == "cancelled" else "retry", landed.retries, 0.0))
        elif result.status == "stale":
            self._stale(task.task_id, task.token, "fail", error.line)
        else:
            self._failed(context, error, dead, result)

    def _failed(self, context: TaskContext, error: Failure, dead: bool,
                result: FailResult) -> None:
        if result.status == "cancelled":
            self.slots.count("cancelled")
            self.task_log.ended(context, "cancelled", "its cancel came before its failure "
                                f"was recorded ({error.line})")
        elif result.status == "dead":
            self.slots.count("dead")
            why = "at once, its failure not worth a retry" if dead \
                else f"after {result.retries} retries"
            self.task_log.ended(context, "dead", f"{why}: {error.line}", logging.WARNING)
        else:
            self.slots.count("retried")
            self.task_log.ended(context, "retried", error.line)

    def _ack_cancelled(self, context: TaskContext) -> None:
        broker = self._broker(context)
        ended = self._retry(
            broker, f"cancel {context.task_id}",
            lambda: broker.ack_cancelled(context.task_id, context.token),
            self._held_until(context))
        if ended or (ended is False and self._ended_before(
                broker, context.task_id, context.token, "cancelled") is not None):
            self.slots.count("cancelled")
            self.task_log.ended(context, "cancelled")
        elif ended is None:
            log.warning("cancel of task %s not recorded: Redis stayed away (its lease runs "
                        "out and it is reaped, ending cancelled)", context.task_id)
        else:
            self._stale(context.task_id, context.token, "cancel")

    def _ack_abandoned(self, context: TaskContext) -> None:
        broker = self._broker(context)
        acked = self._retry(
            broker, f"ack {context.task_id}",
            lambda: broker.ack_cut(context.task_id, context.token), self._held_until(context))
        log.warning("task %s outlived the grace period after its effect was applied: %s",
                    context.task_id, "acked with no result (a workflow step fails its "
                    "flow), and the rest of its handler cut off" if acked
                    else "its ack was refused or lost (another worker may run it)")
        if acked:
            self.slots.count("acked")

    def _release(self, context: TaskContext, why: str) -> None:
        """Hand a task back to ready for another worker, saying `why` in the log."""
        broker = self._broker(context)
        released = self._retry(
            broker, f"release {context.task_id}",
            lambda: broker.release(context.task_id, context.token), self._held_until(context))
        if released == Released.STALE and (landed := self._ended_before(
                broker, context.task_id, context.token, "pending", "cancelled")) is not None:
            released = Released.CANCELLED if landed.state == "cancelled" else Released.RELEASED
        if released == Released.CANCELLED:
            log.warning("task %s %s and ended cancelled (its cancel had been requested)",
                        context.task_id, why)
            self.slots.count("cancelled")
            self.task_log.ended(context, "cancelled")
            return
        log.warning("task %s %s %s", context.task_id, why,
                    "released" if released else "left to be reaped" if released is None
                    else "not released: this worker no longer holds it")
        if released:
            self.slots.count("released")

    def _held_until(self, *contexts: TaskContext) -> float:
        """When the last of these runs' leases ends, by the renewals Redis accepted (the
        time each was sent: Redis counts from no earlier)."""
        return max(c.confirmed_at for c in contexts) + self.settings.lease_seconds

    def _broker(self, context: TaskContext) -> Broker:
        return self.queues.broker(context.queue)

    def _retry(self, broker: Broker, what: str, call: Callable[[], T], held_until: float,
               tasks: int = 1) -> T | None:
        """`call`, settling `tasks` tasks of `broker`'s queue, through an outage of it (see
        Outage.retry); given up on once the stop has begun (whenever it was sent), they
        are counted in `left`."""
        result = self._outage(broker).retry(what, call, held_until)
        if result is None and self.stopping():
            self.left += tasks
        return result

    def _outage(self, broker: Broker) -> Outage:
        outage = self._outages.get(broker.queue)
        if outage is None:
            outage = self._outages[broker.queue] = Outage()
        return outage

    def _ended_before(self, broker: Broker, task_id: str, token: int,
                      *states: str) -> TaskRecord | None:
        """The record, if a call refused as stale was our own earlier one, whose reply
        the client lost and whose resend then found the task already moved on with our
        token: in one of `states`, its token still ours (a reap or a new lease would
        have bumped it)."""
        try:
            record = broker.task(task_id)
        except BrokerError:
            return None
        if record is None or record.state not in states or record.fencing_token != token:
            return None
        return record

    def _stale(self, task_id: str, token: int, operation: str, error: str = "") -> None:
        self.slots.count("stale")
        log.warning("%s of task %s refused: token %d is stale (lease lost or reaped)%s",
                    operation, task_id, token, f"; its run failed with {error}" if error
                    else "")
