"""What several commands share: the queue option, Settings with options applied, and
the one line a failed command prints."""

from __future__ import annotations

import argparse
import importlib
import os
import re
import sys
import traceback
from collections.abc import Callable
from types import ModuleType

import redis
from redis.exceptions import RedisClusterException

from taskq.app import App
from taskq.boundary import redis_errors, refusal_at_connect
from taskq.broker import Broker
from taskq.errors import BrokerError, ConfigError, InvalidTaskError, TaskqError
from taskq.keys import check_queue_name, check_task_id
from taskq.settings import Settings, Simulation, redacted_url
from taskq.shards import layout_holding, shard_holding
from taskq.snapshot import queue_names
from taskq.tools.simulation import builtin_app

# redis-py says "Error 111 connecting to host:6379. Connection refused."; the host is
# in the URL the message names, so only the reason is kept.
CONNECT_REASON = re.compile(r"connecting to .+?\. (.+)")


def add_queue_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--queue", default=None, help="queue name (default: TASKQ_QUEUE or 'default')"
    )


def add_queue_after_action(parser: argparse.ArgumentParser) -> None:
    """`--queue` after the action as well as before it (`taskq dlq retry --queue emails
    --all`); given in both places, the later wins."""
    parser.add_argument("--queue", default=argparse.SUPPRESS,
                        help="queue name (default: TASKQ_QUEUE or 'default')")


def add_task_ids(parser: argparse.ArgumentParser, nargs: str, help: str | None = None
                 ) -> None:
    """The task ids a command acts on, each checked as argparse reads it: a bad one
    stops the command before it acts on any of the others."""
    parser.add_argument("task_ids", nargs=nargs, metavar="ID", type=checked(check_task_id),
                        help=help)


def checked(check: Callable[[str], str]) -> Callable[[str], str]:
    """An argparse `type` that runs `check` and turns its InvalidTaskError into argparse's
    own error, so a bad value stops the command before it does anything."""

    def argument(text: str) -> str:
        try:
            return check(text)
        except InvalidTaskError as e:
            raise argparse.ArgumentTypeError(str(e)) from e

    return argument



def settings_from(args: argparse.Namespace, **overrides: object) -> Settings:
    queue = getattr(args, "queue", None)
    if queue is not None:
        # Checked here, so the error names the option given, not TASKQ_QUEUE.
        try:
            overrides["queue"] = check_queue_name(queue)
        except InvalidTaskError as e:
            raise ConfigError(f"--queue: {e}") from None
    return Settings.from_env(None, **overrides)


def simulation_from_env() -> Simulation:
    """The simulated task's knobs (WORK_SECONDS, FAIL_RATE, the ledger...), read once."""
    return Simulation.from_env(None)


def queue_brokers(args: argparse.Namespace) -> list[Broker]:
    """The queue `--queue` (or TASKQ_QUEUE) names, as brokers: one per shard, in routing
    order, when Redis holds a layout for it (whatever TASKQ_SHARDS says here: an
    operator's shell need not set it), else the one. A shard named itself (`orders~2`)
    is that shard alone."""
    settings = settings_from(args)
    base = Broker.from_settings(settings)
    layout = layout_holding(base.client, settings.queue)
    if layout is None:
        note_if_unknown(base)
    if layout is None or layout.queue != settings.queue:
        return [base]
    return [Broker.from_settings(settings, shard, base.client) for shard in layout.shards]


def note_if_unknown(broker: Broker) -> None:
    """Say on stderr when Redis knows no queue of `broker`'s name (none was sent a task,
    none has a worker): a typo in --queue or TASKQ_QUEUE then reads as a queue that is
    merely empty. A note, not an error: a queue comes to exist with its first task."""
    queues = queue_names(broker)
    if broker.queue in queues:
        return
    with redis_errors("read the queue's workers"):
        workers = broker.client.zcard(broker.keys.workers)
    if not workers:
        known = ", ".join(queues[:20]) + (", ..." if len(queues) > 20 else "")
        print(f"taskq: note: no task was ever sent to queue {broker.queue!r} and no worker "
              f"serves it (queues: {known or 'none'}); check --queue or TASKQ_QUEUE",
              file=sys.stderr)


def task_router(brokers: list[Broker]) -> Callable[[str], Broker]:
    """For a task id, which of `brokers` (as `queue_brokers` gives them) holds it: a
    task's id alone says which shard it is on (see shard_holding)."""
    return lambda task_id: brokers[shard_holding(task_id, len(brokers))]


def load_app(spec: str | None, settings: Settings) -> App:
    """`module:attribute` naming an App, or the built-in app with the simulated task.
    The module is looked for in the current directory first, as `python -m` would (and
    Celery, RQ and Dramatiq do), so `taskq worker --app mytasks:app` works from the
    folder of mytasks.py without PYTHONPATH."""
    if not spec:
        return builtin_app(settings, simulation_from_env())
    module_name, _, attribute = spec.partition(":")
    if not module_name or not attribute:
        raise ConfigError(f"--app {spec!r} must look like 'package.module:app'")
    if not all(part.isidentifier() for part in module_name.split(".")):
        raise ConfigError(f"--app {spec!r}: {module_name!r} is no module name: give the "
                          "module's dotted name ('package.module'), not a file path, and "
                          "run the command from the folder it is imported from")
    here = os.getcwd()
    if here not in sys.path and "" not in sys.path:
        sys.path.insert(0, here)
    app = _read_attribute(spec, _imported(spec, module_name), attribute)
    if not isinstance(app, App):
        raise ConfigError(f"--app {spec!r}: {attribute!r} is not a taskq.App")
    return app


def _imported(spec: str, module_name: str) -> ModuleType:
    """The module `--app spec` names, imported; what stopped it, in one line."""
    try:
        return importlib.import_module(module_name)
    except ImportError as e:
        raise ConfigError(f"--app {spec!r}: cannot import {module_name!r}: {e}") from e
    except SystemExit as e:
        # A module that runs its own command line as it is imported: left to exit, the
        # worker would end (0, as often as not) with no word of why.
        raise ConfigError(f"--app {spec!r}: importing {module_name!r} called sys.exit"
                          f"({e.code!r}) at {failed_at(e)}: an app module must not run "
                          "a program of its own when imported (guard it with "
                          "`if __name__ == '__main__':`)") from e
    except Exception as e:
        # The user's module failed as it ran: where, and how, in one line.
        raise ConfigError(f"--app {spec!r}: importing {module_name!r} raised "
                          f"{type(e).__name__} at {failed_at(e)}: {e}") from e


def _read_attribute(spec: str, module: ModuleType, attribute: str) -> object:
    try:
        return getattr(module, attribute)
    except AttributeError:
        raise ConfigError(f"--app {spec!r}: module {module.__name__!r} has no attribute "
                          f"{attribute!r}") from None
    except Exception as e:  # a module's __getattr__, or a property, that fails
        raise ConfigError(f"--app {spec!r}: reading {attribute!r} of {module.__name__!r} "
                          f"raised {type(e).__name__} at {failed_at(e)}: {e}") from e


def failed_at(error: BaseException) -> str:
    """`file:line` where `error` was raised (a SyntaxError: where the bad code is)."""
    if isinstance(error, SyntaxError) and error.filename:
        return f"{error.filename}:{error.lineno}"
    frames = traceback.extract_tb(error.__traceback__)
    return f"{frames[-1].filename}:{frames[-1].lineno}" if frames else "an unknown place"


def error_line(error: BaseException, args: argparse.Namespace) -> str:
    """The one line a command that failed prints: for an unreachable Redis, the URL it
    tried (password masked) and what to do, rather than the call that noticed."""
    cause = error.__cause__ if isinstance(error, BrokerError) else error
    if not isinstance(cause, redis.ConnectionError | redis.TimeoutError | RedisClusterException):
        return str(error) if isinstance(error, TaskqError) else f"{type(error).__name__}: {error}"
    named = redis_named(args)
    if named is None:
        return str(error)
    name, url = named
    shown = f"{name}={redacted_url(url)!r}"
    if isinstance(cause, redis.AuthenticationError):
        return (f"Redis at {shown} refused the credentials ({cause}): put the right user "
                f"and password in {name}")
    if (answer := refusal_at_connect(cause)) is not None:
        # Redis runs there: starting one, or looking elsewhere, is no remedy.
        return f"Redis at {shown} answered but would not run the command: {answer}"
    found = CONNECT_REASON.search(str(cause))
    reason = (found.group(1) if found else str(cause)).rstrip(".")
    if url.startswith("rediss://") and isinstance(cause, redis.TimeoutError):
        # A Redis without TLS reads the handshake as the start of a command and waits
        # for its end, so the connection times out rather than fail.
        return (f"cannot reach Redis at {shown} ({reason}): a Redis without TLS never "
                f"answers a rediss:// handshake, so if that one has none use redis:// in "
                f"{name}; else start Redis there or set {name} to where it runs")
    return (f"cannot reach Redis at {shown} ({reason}): start Redis there, run `taskq "
            f"redis` for a local one, or set {name} to where Redis runs")


def redis_named(args: argparse.Namespace) -> tuple[str, str] | None:
    """The option or variable that told the command where Redis is, and its value;
    None when the command ran its own (demo and chaos do unless given one)."""
    if args.command == "chaos":
        return ("--redis-url", args.redis_url) if args.redis_url else None
    try:
        settings = settings_from(args)
    except TaskqError:
        return None
    if args.command == "demo" and not settings.redis_url_given:
        return None
    return "REDIS_URL", settings.redis_url
