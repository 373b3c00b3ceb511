"""What several commands share: the queue option, and Settings with options applied."""

from __future__ import annotations

import argparse
import importlib

from taskq.app import App
from taskq.broker import Broker
from taskq.builtin import builtin_app
from taskq.errors import ConfigError
from taskq.settings import Settings


def add_queue_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--queue", default=None, help="queue name (default: TASKQ_QUEUE or 'default')"
    )


def settings_from(args: argparse.Namespace, **overrides: object) -> Settings:
    if getattr(args, "queue", None):
        overrides["queue"] = args.queue
    return Settings.from_env(None, **overrides)


def broker_from(args: argparse.Namespace) -> Broker:
    return App(settings=settings_from(args)).broker


def load_app(spec: str | None, settings: Settings) -> App:
    """`module:attribute` naming an App, or the built-in app with the simulated task."""
    if not spec:
        return builtin_app(settings)
    module_name, _, attribute = spec.partition(":")
    if not module_name or not attribute:
        raise ConfigError(f"--app {spec!r} must look like 'package.module:app'")
    try:
        module = importlib.import_module(module_name)
    except ImportError as e:
        raise ConfigError(f"--app {spec!r}: cannot import {module_name!r}: {e}") from e
    app = getattr(module, attribute, None)
    if not isinstance(app, App):
        raise ConfigError(f"--app {spec!r}: {attribute!r} is not a taskq.App")
    return app
