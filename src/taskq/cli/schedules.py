"""`taskq schedules`: list an app's periodic schedules, their next and last ticks; or
forget one that no worker declares any more."""

from __future__ import annotations

import argparse

from taskq.broker import Broker
from taskq.cli.common import add_queue_argument, checked, load_app, settings_from
from taskq.errors import ConfigError
from taskq.schedule_view import FORGET_AFTER_MS, forget_schedule
from taskq.schedules import Schedule, check_schedule_name
from taskq.settings import Settings
from taskq.terminal import utc_time

HELP = "list an app's periodic schedules with their next and last fired ticks"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_queue_argument(parser)
    parser.add_argument("--app", help="module:attribute of the taskq.App that declares them "
                        "(required, but with --forget)")
    parser.add_argument("--forget", metavar="NAME", type=checked(check_schedule_name),
                        help="forget schedule NAME on the queue: the dashboard and "
                        "/api/schedules stop listing it (the tasks its ticks made stay). "
                        f"Refused while its next tick is under {FORGET_AFTER_MS // 1000} s "
                        "overdue, since a worker may still declare it")
    parser.add_argument("--force", action="store_true",
                        help="with --forget: forget it however recent its ticks; a worker "
                        "that still declares it starts it again, skipping the ticks between")


def main(args: argparse.Namespace) -> int:
    settings = settings_from(args)
    if args.forget is not None:
        return forget(args, settings)
    if args.force:
        raise ConfigError("--force goes with --forget NAME")
    if not args.app:
        raise ConfigError("--app is required (or --forget NAME)")
    app = load_app(args.app, settings)
    if not app.schedules:
        print(f"{args.app} declares no periodic schedules")
        return 0
    broker = Broker.from_settings(settings, args.queue or app.schedules_queue)
    now = broker.server_time_ms()
    print(f"{len(app.schedules)} schedule(s) on queue {broker.queue!r}, by the server's "
          f"clock ({utc_time(now)}):")
    for schedule in app.schedules.values():
        state = broker.schedule_state(schedule.name)
        last = "never fired" if state is None else f"last tick {utc_time(state[0])}"
        replaced = state is not None and state[1] != schedule.version
        start = now if state is None else max(now, state[0])
        print(f"  {schedule.name}  {schedule.task}  {schedule.when}  policy={schedule.policy}")
        print(f"      next tick {next_tick(schedule, start)}, {last}"
              + ("; workers still fire an older definition" if replaced else ""))
    return 0


def forget(args: argparse.Namespace, settings: Settings) -> int:
    """Forget one schedule; 0 if it is gone, 1 if kept or unknown, with a line saying
    which and why."""
    queue = args.queue or (load_app(args.app, settings).schedules_queue if args.app else None)
    broker = Broker.from_settings(settings, queue)
    done = forget_schedule(broker, args.forget, force=args.force)
    print(f"queue {broker.queue!r}: {done.message}")
    return 0 if done.verdict == "forgotten" else 1


def next_tick(schedule: Schedule, after_ms: int) -> str:
    try:
        return utc_time(schedule.next_tick(after_ms))
    except (ValueError, OverflowError):  # a last tick past the years a datetime holds
        return "none"
