"""Runs the chaos test: workers, a producer and faults, then the checks and the report."""

from __future__ import annotations

import logging
import random
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from taskq.broker import Broker
from taskq.connection import connect
from taskq.errors import BrokerError
from taskq.keys import QueueKeys
from taskq.processes import spawn, stop_all, taskq_command
from taskq.settings import Settings, child_environment
from taskq.shards import SHARDS_KEY
from taskq.terminal import Tracker, tracking
from taskq.tools.chaos.canceller import Canceller, Cancels
from taskq.tools.chaos.checks import Findings, read_logs, run_checks
from taskq.tools.chaos.faults import Injector
from taskq.tools.chaos.flows import FlowsSent, FlowStarter
from taskq.tools.chaos.options import ChaosOptions
from taskq.tools.chaos.producer import Produced, Producer
from taskq.tools.chaos.queue import QUEUE, ChaosQueue
from taskq.tools.chaos.schedules import PERIODS, Firing, period_ms
from taskq.tools.chaos.waiters import Waited, Waiter
from taskq.tools.embedded import EmbeddedRedis, given_or_embedded
from taskq.tools.ledger import Ledger
from taskq.tools.tlatrace import write_log
from taskq.tools.workdir import fresh_workdir

log = logging.getLogger("taskq.tools.chaos")
TICK = 0.05
# Ticks each schedule must fire before the faults may stop early (all tasks done).
MIN_TICKS = 3


@dataclass
class ChaosResult:
    options: ChaosOptions
    injector: Injector
    produced: Produced
    findings: Findings
    cancels: Cancels = field(default_factory=Cancels)
    flows: FlowsSent = field(default_factory=FlowsSent)
    samples: list[tuple[float, int]] = field(default_factory=list)
    fault_window: float = 0.0
    finished_at: float = 0.0
    drained: bool = False


class Monitor(threading.Thread):
    """Samples progress on its own thread with short timeouts and no retries, so a
    paused Redis delays the figures, never the faults (or their ends) on the main thread."""

    def __init__(self, url: str, queue: ChaosQueue, produced: Produced) -> None:
        super().__init__(name="chaos-monitor", daemon=True)
        self.client = redis.Redis.from_url(url, decode_responses=True, socket_timeout=0.3,
                                           socket_connect_timeout=0.3,
                                           retry=Retry(NoBackoff(), 0))
        self.queue = ChaosQueue([Broker(self.client, b.queue) for b in queue.brokers],
                                queue.layout)
        self.produced = produced
        self.started = time.monotonic()
        self.samples: list[tuple[float, int]] = []
        self.completed: int | None = None
        # When (run clock) the latest sample began that found every task sent and none
        # ready, leased or delayed; None while the latest found work left.
        self.idle_at: float | None = None
        # Each schedule's last tick as first seen, and as seen last.
        self.first_tick: dict[str, int] = {}
        self.last_tick: dict[str, int] = {}
        self.stopping = threading.Event()

    @property
    def ticked(self) -> bool:
        """Every schedule fired MIN_TICKS ticks since first seen, so the tick check
        counts something whatever the size of the run."""
        return all(self.last_tick.get(name, 0) - self.first_tick.get(name, 0)
                   >= MIN_TICKS * period_ms(name) for name in PERIODS)

    def run(self) -> None:
        while not self.stopping.wait(0.2):
            at = time.monotonic() - self.started
            try:
                self.completed = sum(int(self.client.hget(b.keys.stats,
                                                          "completed:completed") or 0)
                                     for b in self.queue.brokers)
                self.samples.append((at, self.completed))
                for name in PERIODS:
                    state = self.queue.first.schedule_state(name)
                    if state is not None:
                        self.first_tick.setdefault(name, state[0])
                        self.last_tick[name] = state[0]
                if self.produced.done.is_set():
                    counts = self.queue.counts()
                    idle = counts.ready == counts.leased == counts.delayed == 0
                    self.idle_at = at if idle else None
            except (redis.RedisError, BrokerError):
                self.completed = None


def run_chaos(options: ChaosOptions, say: Callable[[str], None]) -> ChaosResult:
    fresh_workdir(options.workdir)
    handler = logging.FileHandler(options.workdir / "chaos.log")
    log.addHandler(handler)
    log.setLevel(logging.INFO)
    log.propagate = False  # faults go to chaos.log; the terminal shows progress
    try:
        with given_or_embedded(options.redis_url or "", options.workdir / "redis",
                               appendfsync=options.appendfsync) as (url, server):
            return _run(options, url, server, say)
    finally:
        log.removeHandler(handler)
        handler.close()


def _run(options: ChaosOptions, url: str, server: EmbeddedRedis | None,
         say: Callable[[str], None]) -> ChaosResult:
    client = connect(Settings.from_env({}, redis_url=url, redis_timeout_seconds=2))
    # A run starts from nothing: the plain queue a run before may have left (which a
    # sharded run would refuse to shard), then each queue this run uses.
    client.hdel(SHARDS_KEY, QUEUE)
    for key in client.scan_iter(match=QueueKeys(QUEUE).prefix + "*", count=1000):
        client.delete(key)
    queue = ChaosQueue.open(client, options.shards, options.events_retention)
    for broker in queue.brokers:
        for key in client.scan_iter(match=broker.keys.prefix + "*", count=1000):
            client.delete(key)
    ledger = Ledger(options.workdir / "ledger.db", options.guard)
    env = child_environment(*options.worker_settings(url, Path(ledger.path)))

    firing = Firing()

    def start_worker(slot: int) -> subprocess.Popen[bytes]:
        return spawn(taskq_command("worker", *firing.worker_args()), env,
                     str(options.workdir / f"worker-{slot}.log"))

    workers = [start_worker(slot) for slot in range(options.workers)]
    produced = Produced()
    flows = FlowsSent()
    # A sharded queue refuses workflows (a workflow's keys share one slot).
    starter = None if options.shards > 1 else FlowStarter.for_run(
        *options.worker_settings(url, Path(ledger.path)), options.tasks, options.max_retries,
        flows)
    if starter is not None:
        starter.app.use_broker(queue.first)
    producer = Producer(queue, options, produced, starter)
    injector = Injector(random.Random(options.seed), options.fault_interval, options.fault_kinds,
                        options.lease_seconds, workers, start_worker, server)
    result = ChaosResult(options, injector, produced, Findings(), flows=flows)
    sharded = f" on {options.shards} shards" if options.shards > 1 else ""
    ahead = f" (+{options.prefetch} prefetched)" if options.prefetch else ""
    say(f"chaos: {options.tasks} tasks{sharded}, {options.workers} workers x "
        f"{options.concurrency}{ahead}, "
        f"faults {', '.join(options.fault_kinds)} every ~{options.fault_interval}s, "
        f"seed {options.seed}, logs in {options.workdir}/")
    waited = Waited()

    def own_queue() -> ChaosQueue:
        own = connect(Settings.from_env({}, redis_url=url, redis_timeout_seconds=2))
        return ChaosQueue([Broker(own, b.queue) for b in queue.brokers], queue.layout)

    waiter = Waiter(own_queue(), produced, options.tasks, waited)
    canceller = Canceller(own_queue(), produced, options.tasks, options.seed, result.cancels)
    producer.start()
    waiter.start()
    canceller.start()
    try:
        _drive(result, queue, url, firing, say)
    finally:
        producer.stopping.set()
        waiter.stopping.set()
        canceller.stopping.set()
        injector.settle()
        stop_all(injector.workers + firing.retired)
        waiter.join(5)
        canceller.join(5)
    crashes = [injector.started + f.at for f in injector.faults if f.kind == "redis-crash"]
    result.findings = run_checks(client, queue, produced, ledger, options.guard,
                                 options.appendfsync, crashes, waited, result.cancels,
                                 same_clock=server is not None,
                                 flows=flows if starter is not None else None)
    # Kept for TLC's trace validation: `python -m specs.tlctrace <workdir>/events.jsonl`.
    write_log([row for log in read_logs(client, queue) for row in log],
              options.workdir / "events.jsonl")
    _recoveries(result)
    return result


def _drive(result: ChaosResult, queue: ChaosQueue, url: str, firing: Firing,
           say: Callable[[str], None]) -> None:
    """Inject faults until every task is done, each schedule has ticked and the
    canceller is through, or until `max_seconds` pass; then stop the schedules and
    drain."""
    o, injector, produced = result.options, result.injector, result.produced
    monitor = Monitor(url, queue, produced)
    monitor.started = injector.started
    monitor.start()
    with tracking(o.tasks, "tasks completed") as tracker:
        _watch(result, monitor, firing, tracker, say)


def _watch(result: ChaosResult, monitor: Monitor, firing: Firing, tracker: Tracker,
           say: Callable[[str], None]) -> None:
    """`_drive`'s loop, showing progress on `tracker`: a bar redrawn every half second
    on a terminal, a line every five seconds otherwise."""
    o, injector, produced = result.options, result.injector, result.produced
    every = 0.5 if tracker.live else 5.0
    shown = -10.0
    # From when (run clock) no worker could fire a tick any more.
    quiet_since: float | None = None
    try:
        while True:
            now = injector.clock()
            if result.fault_window == 0.0:
                done = (monitor.idle_at is not None and monitor.ticked and not injector.pending
                        and result.cancels.finished.is_set())
                if done or now >= o.max_seconds:
                    result.fault_window = now
                    injector.settle()
                    firing.stop(injector.workers, injector.terminated)
                    say(f"{now:7.1f}s faults and schedules stop; draining for up to "
                        f"{o.drain_timeout:.0f}s")
            elif quiet_since is None and firing.stopped:
                quiet_since = now
            # Idle by a sample taken after the last tick could fire: nothing can follow.
            if quiet_since is not None and (monitor.idle_at or -1.0) >= quiet_since:
                result.drained, result.finished_at = True, now
                return
            if result.fault_window and now > result.fault_window + o.drain_timeout:
                result.finished_at = now
                say(f"{now:7.1f}s drain timed out")
                return
            injector.tick(injecting=result.fault_window == 0.0)
            if now - shown >= every:
                shown = now
                count = "?" if monitor.completed is None else str(monitor.completed)
                tracker.update(monitor.completed or 0,
                               f"{now:7.1f}s  completed {count:>7}/{o.tasks}  faults "
                               f"{len(injector.faults):4d}  enqueued "
                               f"{len(produced.acknowledged):7d}")
            time.sleep(TICK)
    finally:
        monitor.stopping.set()
        monitor.join(2)
        result.samples = monitor.samples


def _recoveries(result: ChaosResult) -> None:
    """For each fault: seconds from its end until the next task completed after it."""
    samples = result.samples
    for fault in result.injector.faults:
        if fault.ended is None:
            continue
        before = [count for t, count in samples if t <= fault.ended]
        base = before[-1] if before else 0
        after = [t for t, count in samples if t > fault.ended and count > base]
        if after:
            fault.recovered_after = after[0] - fault.ended
