"""`taskq ledger`: summarize the SQLite ledger and list tasks charged more than once."""

from __future__ import annotations

import argparse

from taskq.cli.common import settings_from, simulation_from_env
from taskq.tools.ledger import Ledger

HELP = "summarize the ledger; exits 1 if any task was charged more than once"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--path", default=None, help="ledger file (default: LEDGER_PATH)")


def main(args: argparse.Namespace) -> int:
    settings_from(args)  # like every command, refuse a bad environment before anything
    simulation = simulation_from_env()
    ledger = Ledger(args.path or simulation.ledger_path, simulation.ledger_guard, create=False)
    summary = ledger.summary()
    print(f"ledger {ledger.path}: {summary.charges} charge(s) for {summary.tasks} task(s), "
          f"total {summary.amount}")
    if not summary.charged_twice:
        print("no task was charged more than once")
        return 0
    print(f"{len(summary.charged_twice)} task(s) charged more than once:")
    for task_id, times in summary.charged_twice:
        print(f"  {task_id}: {times} times")
    return 1
