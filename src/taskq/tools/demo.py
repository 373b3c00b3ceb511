"""`taskq demo`: a whole run on an embedded Redis, ending in a summary of the guarantees."""

from __future__ import annotations

import dataclasses
import os
import random
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType

import redis

from taskq.broker import Broker, NewTask
from taskq.errors import BrokerError, ConfigError
from taskq.limits import DAY, PORT, Range
from taskq.processes import spawn, stop_all, taskq_command
from taskq.registry import read_workers
from taskq.settings import Settings, Simulation, child_environment
from taskq.terminal import Tracker, tracking
from taskq.tools.embedded import free_port, given_or_embedded
from taskq.tools.ledger import Ledger
from taskq.tools.workdir import fresh_workdir

UNKNOWN_TASK = "demo.no_such_task"
# How long a run may go with no task ending before it stops and says why: a healthy
# one ends tasks every second, through its worker's kill and the reap that follows.
STALL_SECONDS = 20.0
# The sizes a run takes, by their command-line options: every task is tracked in memory
# by the checks, and every worker is a process of its own.
SIZES: dict[str, Range[int] | Range[float]] = {
    "tasks": Range("--tasks", 1, 1_000_000, 300, "tasks", whole=True),
    "workers": Range("--workers", 1, 64, 3, "processes", whole=True),
    "linger": Range("--linger", 0.0, float(DAY), 0.0, "seconds"),
    "port": Range("--port", PORT.low, PORT.high, 0, whole=True),
}


@dataclass(frozen=True)
class DemoPlan:
    """What the demo sends and runs; the defaults take about twenty seconds."""

    tasks: int = 300
    delayed: int = 40
    unknown: int = 10
    resends: int = 30
    workers: int = 3
    concurrency: int = 4
    fail_rate: float = 0.15
    seed: int = field(default_factory=lambda: random.randrange(1_000_000))
    linger: float = 0.0
    # The dashboard's port; 0: a free one.
    port: int = 0

    def __post_init__(self) -> None:
        for name, rule in SIZES.items():
            rule.check(getattr(self, name), error=ConfigError)


@dataclass
class DemoResult:
    checks: list[tuple[str, bool, str]]
    seconds: float

    @property
    def passed(self) -> bool:
        return all(ok for _, ok, _ in self.checks)


def worker_env(
    settings: Settings, url: str, queue: str, ledger: Path, plan: DemoPlan
) -> dict[str, str]:
    """The demo's worker and dashboard processes: short leases and backoffs, so its faults
    play out in seconds, and the plan's failure rate."""
    workers = dataclasses.replace(
        settings, redis_url=url, redis_url_given=True, queue=queue, lease_seconds=2.0,
        backoff_base_seconds=0.1, backoff_max_seconds=1.0, shutdown_grace_seconds=5.0,
        concurrency=plan.concurrency)
    return child_environment(workers, Simulation(
        work_seconds=0.05, fail_rate=plan.fail_rate, ledger_path=str(ledger)))


class Terminated(KeyboardInterrupt):
    """SIGTERM arrived: the run unwinds as for Ctrl-C, and exits as a command killed by
    SIGTERM would (143), so a supervisor tells the two apart."""


@contextmanager
def interrupts_as_keyboard_interrupt() -> Iterator[None]:
    """SIGTERM unwinds like Ctrl-C, so every child is stopped on the way out."""
    def raise_interrupt(signum: int, frame: FrameType | None) -> None:
        raise Terminated

    previous = signal.signal(signal.SIGTERM, raise_interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def run_demo(settings: Settings, plan: DemoPlan, workdir: Path,
             say: Callable[[str], None]) -> DemoResult:
    fresh_workdir(workdir)
    rng = random.Random(plan.seed)
    started = time.monotonic()
    workers: list[subprocess.Popen[bytes]] = []
    services: list[subprocess.Popen[bytes]] = []
    given = settings.redis_url if settings.redis_url_given else ""
    redis = given_or_embedded(given, workdir / "redis", binary=settings.redis_server)
    with interrupts_as_keyboard_interrupt(), redis as (url, server):
        # A given server may hold other queues: the demo takes a fresh one there.
        queue = "demo" if server else f"demo-{uuid.uuid4().hex[:8]}"
        broker = Broker.from_settings(Settings.from_env({}, redis_url=url), queue)
        ledger_path = workdir / "ledger.db"
        Ledger(ledger_path)  # create the schema before workers race to
        env = worker_env(settings, url, queue, ledger_path, plan)
        say(f"redis {url}, queue {queue!r}, {plan.workers} workers x {plan.concurrency}, "
            f"logs in {workdir}")

        def start_worker(n: int) -> None:
            workers.append(spawn(taskq_command("worker"), env, str(workdir / f"worker-{n}.log")))

        try:
            port = plan.port or free_port()
            services.append(spawn(taskq_command("serve", "--port", str(port)), env,
                                  str(workdir / "serve.log")))
            kept = (f"kept {plan.linger:g}s after it" if plan.linger > 0
                    else "add --linger 600 to keep it 10 minutes after")
            problem = dashboard_problem(services[-1], port, workdir / "serve.log")
            say(f"live dashboard: http://127.0.0.1:{port}/?queue={queue} (up while the demo "
                f"runs; {kept})" if problem is None else
                f"no live dashboard: {problem} (the demo runs on without it)")
            for n in range(plan.workers):
                start_worker(n)
            charged, unknown = send(broker, plan, rng, say)
            with tracking(len(charged + unknown), "tasks ended") as tracker:
                watch(broker, plan, charged + unknown, workers, start_worker, rng, tracker,
                      workdir)
            if plan.linger > 0:
                say(f"done; the dashboard stays up for {plan.linger:.0f}s (Ctrl-C ends it)")
                try:
                    time.sleep(plan.linger)
                except Terminated:
                    raise  # a supervisor's stop: 143, as anywhere else in the run
                except KeyboardInterrupt:
                    pass  # the end it offers: a summary
        finally:
            stop_all(workers + services)
        return DemoResult(summarize(broker, ledger_path, plan, charged, unknown, say),
                          time.monotonic() - started)


def dashboard_problem(serve: subprocess.Popen[bytes], port: int, log: Path,
                      timeout: float = 10.0) -> str | None:
    """Why `taskq serve` is not answering on `port` within `timeout` seconds (the last
    line of its log, where it exited), or None once /healthz answers."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if serve.poll() is not None:
            lines = log.read_text(errors="replace").strip().splitlines()
            return lines[-1] if lines else f"taskq serve exited with {serve.returncode}"
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=1):
                return None
        except urllib.error.HTTPError:
            return None  # it answers (a 503 while Redis is away is an answer)
        except OSError:
            time.sleep(0.1)
    return f"taskq serve did not answer on port {port} within {timeout:g}s (see {log})"


def send(broker: Broker, plan: DemoPlan, rng: random.Random,
         say: Callable[[str], None]) -> tuple[list[str], list[str]]:
    """Enqueue the charged tasks (some delayed), tasks no worker knows, and resends."""
    delayed = set(rng.sample(range(plan.tasks), plan.delayed))
    tasks = [
        NewTask(uuid.uuid4().hex, delay=rng.uniform(1, 3) if i in delayed else 0,
                max_retries=5, payload={"args": [], "kwargs": {"charge": 1}},
                idempotency_key=f"demo-{i}")
        for i in range(plan.tasks)
    ]
    unknown = [NewTask(uuid.uuid4().hex, max_retries=1, name=UNKNOWN_TASK)
               for _ in range(plan.unknown)]
    results = broker.enqueue_many(tasks + unknown)
    say(f"enqueued {sum(r.created for r in results)} tasks ({plan.delayed} delayed, "
        f"{plan.unknown} named {UNKNOWN_TASK!r} that no worker knows)")
    resent = [NewTask(uuid.uuid4().hex, payload=t.payload, idempotency_key=t.idempotency_key)
              for t in rng.sample(tasks, plan.resends)]
    duplicates = broker.enqueue_many(resent)
    created = sum(r.created for r in duplicates)
    say(f"resent {plan.resends} tasks with their idempotency keys: {created} created a task")
    broker.client.set(f"{broker.keys.prefix}demo:resends_created", created)
    return [r.task_id for r in results[: plan.tasks]], [r.task_id for r in results[plan.tasks :]]


def watch(broker: Broker, plan: DemoPlan, task_ids: list[str],
          workers: list[subprocess.Popen[bytes]], start_worker: Callable[[int], None],
          rng: random.Random, tracker: Tracker, workdir: Path) -> None:
    """Show progress until every task is completed or dead; kill one worker on the way.
    A run where no task ends for STALL_SECONDS stops, saying what it found wrong; one
    that goes on ending tasks is waited for, however many it was given."""
    killed = False
    ended, progressed = -1, time.monotonic()
    while True:
        done, dead = terminal_counts(broker, task_ids)
        c = broker.counts()
        tracker.update(done + dead, f"  completed {done:4d}/{len(task_ids)}  dead {dead:3d}  "
                       f"ready {c.ready:4d}  running {c.leased:3d}  waiting {c.delayed:3d}")
        if done + dead == len(task_ids):
            return
        if done + dead != ended:
            ended, progressed = done + dead, time.monotonic()
        elif time.monotonic() - progressed > STALL_SECONDS:
            tracker.note(f"  no task ended for {STALL_SECONDS:.0f}s: "
                         f"{stall_reason(broker, workers, workdir)}")
            return
        if not killed and done > len(task_ids) // 3:
            victim, held = busiest(broker, workers, rng)
            os.kill(workers[victim].pid, signal.SIGKILL)
            tracker.note(f"  killed worker {victim} (SIGKILL) mid-run, {held}; "
                         "starting a replacement")
            start_worker(len(workers))
            killed = True
        time.sleep(0.5)


def busiest(broker: Broker, workers: list[subprocess.Popen[bytes]],
            rng: random.Random) -> tuple[int, str]:
    """The worker to kill: the one that held the most tasks at its last heartbeat (any,
    when none is known to hold one), and what the kill does to them, in words."""
    try:
        in_hand = {w.pid: w.in_hand for w in read_workers(broker)[1]}
    except BrokerError:
        in_hand = {}
    order = list(range(len(workers)))
    rng.shuffle(order)
    victim = max(order, key=lambda i: in_hand.get(workers[i].pid, 0))
    held = in_hand.get(workers[victim].pid, 0)
    if held == 0:
        return victim, "holding no task at its last heartbeat"
    return victim, (f"holding {held} task(s) at its last heartbeat: their leases will "
                    "run out, and the tasks be reaped and retried elsewhere")


def stall_reason(broker: Broker, workers: list[subprocess.Popen[bytes]],
                 workdir: Path) -> str:
    """What keeps the run's tasks from ending, as far as the demo can tell: Redis
    refusing writes (a full disk, out of memory), every worker gone, or the last line a
    worker logged."""
    try:
        broker.client.set(f"{broker.keys.prefix}demo:probe", "1")
    except redis.RedisError as e:
        return f"Redis refuses writes: {e}"
    logs = sorted(workdir.glob("worker-*.log"), key=lambda p: p.stat().st_mtime)
    last = next((line for log in reversed(logs)
                 for line in reversed(log.read_text(errors="replace").splitlines())
                 if line.strip()), "")
    if all(w.poll() is not None for w in workers):
        return f"every worker has exited; the last logged: {last}"
    return f"the workers' last word: {last}" if last else "the workers logged nothing"


def terminal_counts(broker: Broker, task_ids: list[str]) -> tuple[int, int]:
    pipe = broker.client.pipeline(transaction=False)
    for task_id in task_ids:
        pipe.hget(broker.keys.task(task_id), "state")
    states = pipe.execute()
    return states.count("completed"), states.count("dead")


def summarize(broker: Broker, ledger_path: Path, plan: DemoPlan, charged: list[str],
              unknown: list[str], say: Callable[[str], None]) -> list[tuple[str, bool, str]]:
    """The checks whose conjunction is the demo's exit status."""
    done, dead = terminal_counts(broker, charged)
    unknown_done, unknown_dead = terminal_counts(broker, unknown)
    events = [fields or {} for _, fields in broker.client.xrange(broker.keys.events) or []]
    retried = sum(e.get("state") == "delayed" and e.get("type") != "enqueued" for e in events)
    reaped = sum(e.get("type") == "reaped" for e in events)
    summary = Ledger(ledger_path).summary()
    resends_created = int(broker.client.get(f"{broker.keys.prefix}demo:resends_created") or 0)
    lost = len(charged) + len(unknown) - done - dead - unknown_done - unknown_dead
    records = [broker.task(t) for t in unknown]
    errors = [r.last_error if r else "" for r in records]
    say("")
    say(f"summary: completed {done + unknown_done}, dead {dead + unknown_dead}, "
        f"retried {retried} time(s) ({reaped} after a lease expired), "
        f"charged twice {len(summary.charged_twice)}, duplicates that created a task "
        f"{resends_created}")
    return [
        ("nothing lost: every task ended completed or dead", lost == 0, f"{lost} unfinished"),
        ("no task charged twice", not summary.charged_twice,
         f"{len(summary.charged_twice)} charged twice"),
        ("every completed task charged exactly once", summary.tasks == done == summary.charges,
         f"{summary.charges} charges for {done} completed tasks"),
        ("resends with an idempotency key created nothing", resends_created == 0,
         f"{resends_created} created"),
        ("tasks no worker knows ended dead with a clear error",
         unknown_dead == len(unknown) and all("unknown task" in e for e in errors),
         f"{unknown_dead}/{len(unknown)} dead"),
    ]


def report(result: DemoResult, say: Callable[[str], None]) -> int:
    for name, ok, detail in result.checks:
        say(f"  [{'ok' if ok else 'FAILED'}] {name}" + ("" if ok else f" ({detail})"))
    verdict = "held" if result.passed else "DID NOT hold"
    say(f"the guarantees {verdict} ({result.seconds:.1f}s)")
    return 0 if result.passed else 1


def default_say(line: str) -> None:
    print(line, flush=True, file=sys.stdout)
