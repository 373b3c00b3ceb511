"""`taskq worker`: run tasks from a queue until stopped."""

from __future__ import annotations

import argparse

from taskq.broker import Broker
from taskq.cli.common import add_queue_argument, load_app, settings_from
from taskq.safety import check_server
from taskq.worker import Worker

HELP = "run a worker: lease tasks, run their handlers, ack or fail them"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_queue_argument(parser)
    parser.add_argument("--concurrency", "-c", type=int, default=None,
                        help="handlers run at once (default: TASKQ_CONCURRENCY or 1)")
    parser.add_argument("--app", default=None,
                        help="module:attribute of your taskq.App (default: the built-in "
                             "simulated task)")


def main(args: argparse.Namespace) -> int:
    overrides: dict[str, object] = {}
    if args.concurrency is not None:
        overrides["concurrency"] = args.concurrency
    settings = settings_from(args, **overrides)
    app = load_app(args.app, settings)
    broker = Broker.from_settings(settings, args.queue or app.queue)
    check_server(broker.client)
    return Worker(app, settings=settings, broker=broker).run()
