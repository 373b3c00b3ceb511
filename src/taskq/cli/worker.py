"""`taskq worker`: run tasks from a queue, or from several, until stopped."""

from __future__ import annotations

import argparse
import os

from taskq.broker import Broker
from taskq.cli.common import load_app
from taskq.errors import ConfigError
from taskq.limits import LEASE_COUNT, SETTINGS
from taskq.processes import taskq_command
from taskq.safety import check_server_when_free
from taskq.settings import ENVIRONMENT, Settings, variable_value
from taskq.worker import Worker
from taskq.worker.lifecycle import EarlyStop
from taskq.worker.pool import WorkerPool
from taskq.worker.queues import parse_queues

# How long a stopped worker waits for handlers still running before it ends the process.
STRAGGLERS_WAIT_SECONDS = 0.2

HELP = "run a worker: lease tasks, run their handlers, ack or fail them"

QUEUE_HELP = (
    "the queue to run tasks from (default: TASKQ_QUEUE or 'default'), or several, "
    "comma-separated, sharing the --concurrency slots: 'high,default,low' tries them in "
    "that order every time (a queue gets slots only while those before it have no ready "
    "task); with weights, 'high:3,default:1', the queue tried first is picked in "
    "proportion to them (here three times in four), so none is starved"
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--queue", default=None, metavar="QUEUE[,QUEUE...]", help=QUEUE_HELP)
    parser.add_argument("--concurrency", "-c", type=int, default=None,
                        help="handlers run at once (default: TASKQ_CONCURRENCY or 1)")
    parser.add_argument("--prefetch", type=int, default=None,
                        help="leased tasks each process holds beyond its handlers, each "
                             "started the moment a handler comes free: fewer handler "
                             "threads then keep busy (default: TASKQ_PREFETCH or 0)")
    parser.add_argument("--processes", "-p", type=int, default=None,
                        help="worker processes, each with --concurrency handlers; use "
                             "more than one to use more than one core (default: "
                             "TASKQ_WORKER_PROCESSES or 1)")
    parser.add_argument("--no-task-log", action="store_true",
                        help="no log line per finished task (default: one at INFO, with "
                             "name, id, attempt, duration and outcome; TASKQ_TASK_LOG=0)")
    parser.add_argument("--app", default=None,
                        help="module:attribute of your taskq.App (default: the built-in "
                             "simulated task)")
    # Given by a pool to each copy it runs: stop signals only drain it (see pool.py).
    parser.add_argument("--pool-copy", action="store_true", help=argparse.SUPPRESS)


def refuse_too_many_in_hand(concurrency: int | None, prefetch: int | None) -> None:
    """Refuse a --concurrency and a --prefetch (either given, the other as the
    environment or its default sets it) whose sum a lease cannot take, naming each as it
    was set. A variable the option overrides is not read; one that is not a number is
    left for the settings to refuse by name."""
    named: list[str] = []
    total = 0
    for given, flag, field in ((concurrency, "--concurrency", "concurrency"),
                               (prefetch, "--prefetch", "prefetch")):
        if given is not None:
            value, said = given, f"{flag} {given}"
        else:
            try:
                set_to = variable_value(field)
            except ConfigError:
                return
            if isinstance(set_to, int):
                value, said = set_to, f"{ENVIRONMENT[field][0]}={set_to}"
            else:
                value = int(SETTINGS[field].default)
                said = f"{flag.removeprefix('--')} {value} (its default)"
        named.append(said)
        total += value
    if total > LEASE_COUNT.high:
        raise ConfigError(f"{named[0]} and {named[1]} must be at most {LEASE_COUNT.high:,} "
                          f"together, not {total:,}")


def main(args: argparse.Namespace) -> int:
    # A stop while the app is imported and the server checked stops the worker at once.
    early = EarlyStop(pool_copy=args.pool_copy)
    overrides: dict[str, object] = {}
    # Checked here, so an error names the option given, not the variable it overrides.
    for field, flag, value in (("concurrency", "--concurrency", args.concurrency),
                               ("prefetch", "--prefetch", args.prefetch),
                               ("worker_processes", "--processes", args.processes)):
        if value is not None:
            overrides[field] = SETTINGS[field].check(value, flag, ConfigError)
    if args.concurrency is not None or args.prefetch is not None:
        refuse_too_many_in_hand(args.concurrency, args.prefetch)
    if args.no_task_log:
        overrides["task_log"] = False
    queues = parse_queues(args.queue) if args.queue else None
    if queues:
        # The first queue stands for the worker's queue where one is needed (the
        # built-in app's).
        overrides["queue"] = next(iter(queues))
    settings = Settings.from_env(None, **overrides)
    app = load_app(args.app, settings)
    if not app.tasks:
        raise ConfigError(f"--app {args.app!r} declares no tasks, so this worker would send "
                          "every task it leases to the DLQ as unknown: import the modules "
                          "that declare them where the app is made")
    broker = Broker.from_settings(settings, settings.queue if queues else app.queue)
    check_server_when_free(broker.client)
    if settings.worker_processes > 1:
        return WorkerPool(copy_argv(args), settings.worker_processes).run(early=early)
    several = queues if queues is not None and len(queues) > 1 else None
    worker = Worker(app, settings=settings, broker=broker, queues=several)
    status = worker.run(pool_copy=args.pool_copy, early=early)
    if worker.runner.join(STRAGGLERS_WAIT_SECONDS):
        # A handler that outlived the grace still runs, on a daemon thread, and ends with
        # the process, as the log has said. Left to the interpreter's shutdown, one
        # writing to a buffered stdout aborts the process (SIGABRT) after a clean stop:
        # end it here instead. Every log line is written already (each handler flushes).
        os._exit(status)
    return status


def copy_argv(args: argparse.Namespace) -> list[str]:
    """The single-process command each copy of a pool runs: this one, with --processes 1."""
    argv = ["--log-level", args.log_level, "--log-format", args.log_format, "worker",
            "--processes", "1", "--pool-copy"]
    if args.no_task_log:
        argv.append("--no-task-log")
    for flag, value in (("--queue", args.queue), ("--concurrency", args.concurrency),
                        ("--prefetch", args.prefetch), ("--app", args.app)):
        if value is not None:
            argv += [flag, str(value)]
    return taskq_command(*argv)
