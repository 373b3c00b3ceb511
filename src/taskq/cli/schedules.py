"""`taskq schedules`: list an app's periodic schedules, their next and last ticks."""

from __future__ import annotations

import argparse
import datetime

from taskq.broker import Broker
from taskq.cli.common import add_queue_argument, load_app, settings_from
from taskq.schedules import Schedule

HELP = "list an app's periodic schedules with their next and last fired ticks"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_queue_argument(parser)
    parser.add_argument("--app", required=True,
                        help="module:attribute of the taskq.App that declares them")


def main(args: argparse.Namespace) -> int:
    settings = settings_from(args)
    app = load_app(args.app, settings)
    if not app.schedules:
        print(f"{args.app} declares no periodic schedules")
        return 0
    broker = Broker.from_settings(settings, args.queue or app.schedules_queue)
    now = broker.server_time_ms()
    print(f"{len(app.schedules)} schedule(s) on queue {broker.queue!r}, by the server's "
          f"clock ({shown(now)}):")
    for schedule in app.schedules.values():
        state = broker.schedule_state(schedule.name)
        last = "never fired" if state is None else f"last tick {shown(state[0])}"
        replaced = state is not None and state[1] != schedule.version
        start = now if state is None else max(now, state[0])
        print(f"  {schedule.name}  {schedule.task}  {schedule.when}  policy={schedule.policy}")
        print(f"      next tick {next_tick(schedule, start)}, {last}"
              + ("; workers still fire an older definition" if replaced else ""))
    return 0


def next_tick(schedule: Schedule, after_ms: int) -> str:
    try:
        return shown(schedule.next_tick(after_ms))
    except (ValueError, OverflowError):  # a last tick past the years a datetime holds
        return "none"


def shown(ms: int) -> str:
    try:
        when = datetime.datetime.fromtimestamp(ms / 1000, datetime.UTC)
    except (ValueError, OverflowError, OSError):
        return f"{ms} ms (past the years a date holds)"
    return f"{when:%Y-%m-%d %H:%M:%S}Z"
