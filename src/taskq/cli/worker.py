"""`taskq worker`: run tasks from a queue until stopped."""

from __future__ import annotations

import argparse

from taskq.broker import Broker
from taskq.cli.common import add_queue_argument, load_app, settings_from
from taskq.processes import taskq_command
from taskq.safety import check_server
from taskq.worker import Worker
from taskq.worker.pool import WorkerPool

HELP = "run a worker: lease tasks, run their handlers, ack or fail them"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_queue_argument(parser)
    parser.add_argument("--concurrency", "-c", type=int, default=None,
                        help="handlers run at once (default: TASKQ_CONCURRENCY or 1)")
    parser.add_argument("--processes", "-p", type=int, default=None,
                        help="worker processes, each with --concurrency handlers; use "
                             "more than one to use more than one core (default: "
                             "TASKQ_WORKER_PROCESSES or 1)")
    parser.add_argument("--app", default=None,
                        help="module:attribute of your taskq.App (default: the built-in "
                             "simulated task)")


def main(args: argparse.Namespace) -> int:
    overrides: dict[str, object] = {}
    if args.concurrency is not None:
        overrides["concurrency"] = args.concurrency
    if args.processes is not None:
        overrides["worker_processes"] = args.processes
    settings = settings_from(args, **overrides)
    app = load_app(args.app, settings)
    broker = Broker.from_settings(settings, args.queue or app.queue)
    check_server(broker.client)
    if settings.worker_processes > 1:
        return WorkerPool(copy_argv(args), settings.worker_processes).run()
    return Worker(app, settings=settings, broker=broker).run()


def copy_argv(args: argparse.Namespace) -> list[str]:
    """The single-process command each copy of a pool runs: this one, with --processes 1."""
    argv = ["--log-level", args.log_level, "worker", "--processes", "1"]
    for flag, value in (("--queue", args.queue), ("--concurrency", args.concurrency),
                        ("--app", args.app)):
        if value is not None:
            argv += [flag, str(value)]
    return taskq_command(*argv)
