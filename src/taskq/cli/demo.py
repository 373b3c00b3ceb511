"""`taskq demo`: run workers and a producer on an embedded Redis and check the guarantees."""

from __future__ import annotations

import argparse
import signal
from pathlib import Path

from taskq.cli.common import settings_from
from taskq.tools.demo import DemoPlan, Terminated, default_say, report, run_demo

HELP = "run a whole demo on an embedded Redis; exits 0 only if the guarantees held"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--tasks", type=int, default=300, help="charged tasks (default 300)")
    parser.add_argument("--workers", type=int, default=3, help="worker processes (default 3)")
    parser.add_argument("--seed", type=int, default=None, help="random seed, for a replay")
    parser.add_argument("--dir", default=".taskq/demo", help="logs, ledger and Redis data "
                        "(emptied each run; one holding files no run wrote is refused)")
    parser.add_argument("--linger", type=float, default=0.0,
                        help="keep the web dashboard up this many seconds after the run")
    parser.add_argument("--port", type=int, default=0,
                        help="the web dashboard's port on 127.0.0.1 (default: a free one)")


def main(args: argparse.Namespace) -> int:
    # A small run delays and resends at most every task it has.
    sizes = {"tasks": args.tasks, "workers": args.workers,
             "delayed": min(DemoPlan.delayed, args.tasks),
             "resends": min(DemoPlan.resends, args.tasks), "linger": args.linger,
             "port": args.port}
    plan = DemoPlan(**sizes) if args.seed is None else DemoPlan(**sizes, seed=args.seed)
    default_say(f"taskq demo (seed {plan.seed})")
    try:
        result = run_demo(settings_from(args), plan, Path(args.dir), default_say)
    except Terminated:
        return 128 + signal.SIGTERM
    return report(result, default_say)
