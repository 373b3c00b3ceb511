"""`taskq chaos`: many tasks through crashes, pauses and Redis restarts; checks at the end."""

from __future__ import annotations

import argparse
import random
import sys
from pathlib import Path

from taskq.errors import ConfigError
from taskq.settings import LEDGER_GUARDS, Settings
from taskq.tools.chaos.options import ChaosOptions
from taskq.tools.chaos.report import render
from taskq.tools.chaos.run import run_chaos

HELP = "chaos test: tasks through worker and Redis faults; exits 0 only if every check held"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    d = ChaosOptions()
    add = parser.add_argument
    add("--tasks", type=int, default=d.tasks, help=f"unique tasks (default {d.tasks})")
    add("--workers", type=int, default=d.workers, help=f"worker processes (default {d.workers})")
    add("--concurrency", type=int, default=d.concurrency, help="handlers per worker")
    add("--prefetch", type=int, default=d.prefetch,
        help=f"tasks each worker leases beyond its handlers (default {d.prefetch})")
    add("--resend-every", type=int, default=d.resend_every,
        help="resend every Nth task with the same idempotency key (0: never)")
    add("--fault-interval", type=float, default=d.fault_interval,
        help="mean seconds between faults")
    add("--redis-faults", action="store_true", help="also pause, restart and crash Redis")
    add("--max-seconds", type=float, default=d.max_seconds,
        help="stop injecting faults after this long")
    add("--drain-timeout", type=float, default=d.drain_timeout,
        help="seconds to wait for every task after the faults stop")
    add("--guard", choices=LEDGER_GUARDS, default=d.guard,
        help="ledger guard (none makes the run fail when a task is charged twice)")
    add("--seed", type=int, default=None, help="RNG seed (default: random), to replay a run")
    add("--redis-url", default=None, help="use this Redis instead of an embedded one")
    add("--report", type=Path, default=None, help="also write the Markdown report here")
    add("--work-seconds", type=float, default=d.work_seconds, help="simulated work per task")
    add("--lease-seconds", type=float, default=d.lease_seconds, help="lease length")
    add("--appendfsync", choices=["always", "everysec"], default=d.appendfsync,
        help="AOF fsync policy of the embedded Redis")
    add("--dir", type=Path, default=d.workdir, help="logs, ledger and Redis data (emptied "
        "each run; one holding files no run wrote is refused)")
    add("--shards", type=int, default=d.shards,
        help="spread the run's queue over this many shards, every check made on each "
             f"(default {d.shards}: not sharded; limited tasks are sent only then)")


def main(args: argparse.Namespace) -> int:
    if args.redis_faults and args.redis_url:
        raise ConfigError("--redis-faults needs the run's own Redis: drop --redis-url")
    if args.redis_url:
        try:  # the URL the run's workers get as REDIS_URL, refused before the run starts
            Settings.from_env({"REDIS_URL": args.redis_url})
        except ConfigError as e:
            raise ConfigError(f"--redis-url: {e}") from e
    options = ChaosOptions(
        tasks=args.tasks, workers=args.workers, concurrency=args.concurrency,
        prefetch=args.prefetch,
        resend_every=args.resend_every, fault_interval=args.fault_interval,
        redis_faults=args.redis_faults, max_seconds=args.max_seconds,
        drain_timeout=args.drain_timeout, guard=args.guard,
        seed=random.randrange(2**31) if args.seed is None else args.seed,
        redis_url=args.redis_url, report=args.report, work_seconds=args.work_seconds,
        after_effect_seconds=args.work_seconds, lease_seconds=args.lease_seconds,
        appendfsync=args.appendfsync, workdir=args.dir, shards=args.shards,
    )  # fmt: skip
    result = run_chaos(options, lambda line: print(line, flush=True))
    text = render(result)
    (options.workdir / "report.md").write_text(text)
    if options.report:
        options.report.parent.mkdir(parents=True, exist_ok=True)
        options.report.write_text(text)
    print()
    for check in result.findings.checks:
        print(f"  [{'ok' if check.ok else 'FAILED'}] {check.name}: {check.detail}")
    print(f"report: {options.report or options.workdir / 'report.md'}", file=sys.stdout)
    return 0 if result.findings.passed else 1
