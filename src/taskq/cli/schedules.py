"""`taskq schedules`: list an app's periodic schedules, their next and last ticks; or
forget one that no worker declares any more."""

from __future__ import annotations

import argparse
from datetime import timedelta

from taskq.broker import Broker
from taskq.cli.common import add_queue_argument, checked, load_app, settings_from
from taskq.errors import ConfigError
from taskq.schedule_view import FORGET_AFTER_MS, forget_schedule, schedules_queue
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
    broker = schedules_broker(settings, args.queue or app.schedules_queue)
    now = broker.server_time_ms()
    print(f"{len(app.schedules)} schedule(s) on queue {broker.queue!r}, by the server's "
          f"clock ({utc_time(now)}):")
    for schedule in app.schedules.values():
        state = broker.schedule_state(schedule.name)
        last = "never fired" if state is None else f"last tick {utc_time(state[0])}"
        replaced = state is not None and state[1] != schedule.version
        print(f"  {schedule.name}  {schedule.task}  {schedule.when}  policy={schedule.policy}")
        # A schedule never fired starts at its first firing; one fired owes the first
        # tick after its last, however long ago that fell (no worker fires it).
        print(f"      next tick {next_tick(schedule, now if state is None else state[0], now)}"
              f", {last}" + ("; the definition workers last fired differs from this "
                             "app's (an older or a newer deploy)" if replaced else ""))
    return 0


def forget(args: argparse.Namespace, settings: Settings) -> int:
    """Forget one schedule; 0 if it is gone, 1 if kept or unknown, with a line saying
    which and why."""
    queue = args.queue or (load_app(args.app, settings).schedules_queue if args.app else None)
    broker = schedules_broker(settings, queue)
    done = forget_schedule(broker, args.forget, force=args.force)
    print(f"queue {broker.queue!r}: {done.message}")
    return 0 if done.verdict == "forgotten" else 1


def schedules_broker(settings: Settings, queue: str | None) -> Broker:
    """The broker of `queue` (else TASKQ_QUEUE's), but for a sharded queue named as a
    whole of the shard its schedules fire on (see `schedules_queue`)."""
    base = Broker.from_settings(settings, queue)
    name = schedules_queue(base.client, base.queue)
    return base if name == base.queue else Broker.from_settings(settings, name, base.client)


def next_tick(schedule: Schedule, after_ms: int, now_ms: int) -> str:
    """The first tick after `after_ms` as UTC text, said to be overdue when it is before
    `now_ms` (Redis time)."""
    try:
        tick = schedule.next_tick(after_ms)
        shown = utc_time(tick)
    except (ValueError, OverflowError):  # a last tick past the years a datetime holds
        return "none"
    if tick >= now_ms:
        return shown
    return f"{shown} (overdue by {timedelta(seconds=(now_ms - tick) // 1000)})"
