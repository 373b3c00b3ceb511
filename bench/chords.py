"""`python -m bench.chords`: Celery's chord and taskq's group-then-callback, through the
same worker faults, counted by how many times each chord's callback ran.

Each system gets the same redis-server (flushed between them), the same number of
real worker processes at the same concurrency, the same chords (members that sleep
briefly and return their index, then a callback that records the results it was given)
and the same seeded schedule of faults (bench/chord_faults.py). The count comes from
the handlers' own log file (bench/chord_log.py), not from either queue. A chord's
callback should run exactly once, with every member's value exactly once.
"""

from __future__ import annotations

import argparse
import sys
import time
import uuid
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from bench import chord_faults, chord_log
from bench.harness import Child, Server

SYSTEMS = ("celery", "taskq")


@dataclass(frozen=True)
class Options:
    """What the command line asked for."""

    chords: int = 30
    members: int = 20
    workers: int = 3
    concurrency: int = 2
    member_seconds: float = 0.2
    lease_seconds: float = 3.0
    kills: int = 6
    pauses: int = 3
    fault_every: float = 3.0
    settle_seconds: float = 20.0
    stall_seconds: float = 60.0
    seed: int = 20
    systems: tuple[str, ...] = SYSTEMS

    @property
    def pause_seconds(self) -> float:
        """Long enough that the paused holder's members are redelivered meanwhile."""
        return 2.5 * self.lease_seconds


@dataclass(frozen=True)
class Run:
    """One system's run: where its workers connect and what they log to."""

    server: Server
    queue: str
    log: Path
    options: Options


@dataclass(frozen=True)
class System:
    """How to run one system: its worker command (given the worker's serial number), its
    workers' extra environment, a sender that enqueues one chord by key, its version, and
    what its broker still holds after the run (where a chord that never fired is stuck)."""

    name: str
    title: str
    worker_argv: Callable[[Run, int], list[str]]
    worker_env: Callable[[Run], dict[str, str]]
    producer: Callable[[Run], Callable[[str], None]]
    version: Callable[[], str]
    leftover: Callable[[Run], str]


@dataclass
class Outcome:
    """What one system's run came to."""

    title: str
    version: str
    fired: dict[int, int]
    wrong_inputs: int
    member_runs: int
    members_rerun: int
    members_never_run: int
    leftover: str
    seconds: float | None
    faults: list[str] = field(default_factory=list)


def run_system(server: Server, system: System, options: Options) -> Outcome:
    server.flush()
    queue = f"chords-{system.name}-{uuid.uuid4().hex[:6]}"
    run = Run(server, queue, server.logs / f"{queue}.chords", options)
    env = server.env(**system.worker_env(run), **{chord_log.LOG_ENV: str(run.log)})
    generation = iter(range(1_000_000))

    def start(slot: int) -> Child:
        n = next(generation)
        return Child(system.worker_argv(run, n), env, server.logs / f"{queue}-{slot}-{n}.log")

    workers = [start(slot) for slot in range(options.workers)]
    try:
        return _drive(run, system, workers, start)
    finally:
        for worker in workers:
            worker.stop(5.0)


def _drive(run: Run, system: System, workers: list[Child],
           start: Callable[[int], Child]) -> Outcome:
    options = run.options
    keys = [f"c{k:03d}" for k in range(options.chords)]
    send = system.producer(run)
    began = time.monotonic()
    for key in keys:
        send(key)
    faults = chord_faults.Injector(workers, start, chord_faults.schedule(
        options.seed, options.kills, options.pauses, options.fault_every,
        options.pause_seconds))
    finished: float | None = None
    settle_until = 0.0
    last_change, seen = time.monotonic(), 0
    while True:
        log = chord_log.read(run.log)
        fired = sum(1 for k in keys if log.callback_runs[k])
        faults.tick(injecting=fired < len(keys))
        now = time.monotonic()
        if fired != seen:
            last_change, seen = now, fired
        if fired == len(keys) and finished is None:
            finished = now - began
            faults.settle()
            settle_until = now + options.settle_seconds
        if finished is not None and now >= settle_until:
            break
        if finished is None and faults.quiet and now - last_change > options.stall_seconds:
            break
        time.sleep(0.1)
    log = chord_log.read(run.log)
    expected = {(k, i) for k in keys for i in range(options.members)}
    return Outcome(
        system.title, system.version(), log.fired(keys), sum(log.wrong_inputs.values()),
        sum(log.member_runs[m] for m in expected),
        sum(1 for m in expected if log.member_runs[m] > 1),
        sum(1 for m in expected if not log.member_runs[m]), system.leftover(run), finished,
        faults.done)


def _celery() -> System:
    from bench.peers import celery_chords  # noqa: PLC0415

    def argv(run: Run, n: int) -> list[str]:
        return [str(Path(sys.executable).parent / "celery"), "-A",
                "bench.peers.celery_chords:app", "worker", "-P", "prefork",
                "-c", str(run.options.concurrency), "-Q", run.queue, "-n", f"w{n}@%h",
                "--without-gossip", "--without-mingle", "--without-heartbeat", "-l", "WARNING"]

    def env(run: Run) -> dict[str, str]:
        return {"BENCH_REDIS_URL": run.server.url, "BENCH_QUEUE": run.queue,
                "BENCH_VISIBILITY_SECONDS": str(run.options.lease_seconds),
                "BENCH_MEMBER_SECONDS": str(run.options.member_seconds)}

    def producer(run: Run) -> Callable[[str], None]:
        app = celery_chords.make_app(run.server.url, run.queue, run.options.lease_seconds,
                                     run.options.member_seconds)
        return lambda key: celery_chords.send(app, key, run.options.members)

    def version() -> str:
        import celery  # type: ignore[import-untyped]  # noqa: PLC0415

        return f"Celery {celery.__version__}"

    def leftover(run: Run) -> str:
        client = run.server.client
        return (f"{client.llen(run.queue)} messages queued, {client.hlen('unacked')} "
                f"unacknowledged")

    return System("celery", "Celery (`chord`, Redis broker and result backend)", argv, env,
                  producer, version, leftover)


# ---------------------------------------------------------------------------------------
# taskq's side: `group(...).then(callback.s(...)).enqueue()` run by `taskq worker`s.
# ---------------------------------------------------------------------------------------
def _taskq() -> System:
    from bench import chord_tasks  # noqa: PLC0415
    from taskq import Settings, __version__  # noqa: PLC0415
    from taskq.processes import taskq_command  # noqa: PLC0415

    def argv(run: Run, n: int) -> list[str]:
        return taskq_command("worker", "--app", "bench.chord_tasks:app", "--queue", run.queue,
                             "-c", str(run.options.concurrency), "--no-task-log",
                             "--log-level", "WARNING")

    def env(run: Run) -> dict[str, str]:
        return {"REDIS_URL": run.server.url, "TASKQ_QUEUE": run.queue,
                "LEASE_SECONDS": str(run.options.lease_seconds),
                "BENCH_MEMBER_SECONDS": str(run.options.member_seconds)}

    def producer(run: Run) -> Callable[[str], None]:
        settings = Settings.from_env({}, redis_url=run.server.url, queue=run.queue)
        _, send = chord_tasks.make_app(settings)
        return lambda key: send(key, run.options.members)

    def leftover(run: Run) -> str:
        client = run.server.client
        states = Counter(str(client.hget(key, "state")) for key in
                         client.scan_iter(f"{{taskq:{run.queue}}}:flow:*", _type="hash"))
        return ", ".join(f"{n} flows {state}" for state, n in sorted(states.items()))

    return System("taskq", "taskq (`group(...).then(...)`)", argv, env, producer,
                  lambda: f"taskq {__version__}", leftover)


BUILDERS: dict[str, Callable[[], System]] = {"celery": _celery, "taskq": _taskq}


def render(outcomes: Sequence[Outcome], options: Options, redis_version: str) -> str:
    """The figures as a Markdown table, with the run's settings under it."""
    lines = ["| system | chords | callback ran 0 times | once | twice or more | "
             "callback runs given wrong results | member runs | members run more than once "
             "| members never run | all callbacks in |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for o in outcomes:
        twice = sum(n for times, n in o.fired.items() if times >= 2)
        wall = f"{o.seconds:.1f} s" if o.seconds is not None else "never"
        lines.append(f"| {o.title}, {o.version} | {options.chords} | {o.fired.get(0, 0)} | "
                     f"{o.fired.get(1, 0)} | {twice} | {o.wrong_inputs} | {o.member_runs} | "
                     f"{o.members_rerun} | {o.members_never_run} | {wall} |")
    lines += ["", f"{options.chords} chords of {options.members} members "
              f"({options.member_seconds} s each), {options.workers} worker processes x "
              f"{options.concurrency}, lease / visibility timeout {options.lease_seconds} s, "
              f"{options.kills} SIGKILLs and {options.pauses} pauses of "
              f"{options.pause_seconds:.1f} s (seed {options.seed}), redis-server "
              f"{redis_version}."]
    for o in outcomes:
        lines += ["", f"{o.title}: after the run its broker held {o.leftover or 'nothing'}. "
                  "Faults:", ""] + [f"    {f}" for f in o.faults]
    return "\n".join(lines)


def parse(argv: Sequence[str] | None) -> Options:
    parser = argparse.ArgumentParser(prog="python -m bench.chords", description=__doc__)
    defaults = Options()
    for name in ("chords", "members", "workers", "concurrency", "kills", "pauses", "seed"):
        parser.add_argument(f"--{name}", type=int, default=getattr(defaults, name))
    for name in ("member_seconds", "lease_seconds", "fault_every", "settle_seconds",
                 "stall_seconds"):
        parser.add_argument(f"--{name.replace('_', '-')}", type=float,
                            default=getattr(defaults, name))
    parser.add_argument("--only", choices=SYSTEMS, action="append",
                        help="run only this system (repeatable; default both)")
    args = vars(parser.parse_args(argv))
    only = args.pop("only")
    return Options(**args, systems=tuple(only) if only else SYSTEMS)


def main(argv: Sequence[str] | None = None) -> int:
    options = parse(argv)
    server = Server()
    outcomes: list[Outcome] = []
    try:
        for name in options.systems:
            print(f"-- {name}", file=sys.stderr, flush=True)
            outcomes.append(run_system(server, BUILDERS[name](), options))
        print(render(outcomes, options, server.version))
    finally:
        server.close()
    print(f"logs: {server.logs}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
