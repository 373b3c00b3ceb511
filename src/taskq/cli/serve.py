"""`taskq serve`: the SSE feed, the web dashboard, the JSON API and metrics over HTTP."""

from __future__ import annotations

import argparse
import dataclasses
import ipaddress
import re
from urllib.parse import quote

from taskq.cli.common import add_queue_argument, settings_from
from taskq.errors import ConfigError
from taskq.limits import PORT

HELP = "serve the web dashboard, the live SSE feed, the JSON API and /metrics"

TOKEN = re.compile(r"[A-Za-z0-9._~\-]{8,256}")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=8000, help="port (default 8000)")
    parser.add_argument("--allowed-host", action="append", default=[], metavar="NAME",
                        help="a name clients reach this server by, besides the loopback "
                             "names and --host (repeatable; adds to TASKQ_ALLOWED_HOSTS)")
    add_queue_argument(parser)


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_exposure(host: str, token: str) -> None:
    """Refuse to serve beyond this machine without a token, and refuse odd tokens."""
    if token and not TOKEN.fullmatch(token):
        raise ConfigError("TASKQ_API_TOKEN must be 8-256 characters of letters, digits, "
                          "'.', '_', '~' or '-'")
    if not is_loopback(host) and not token:
        raise ConfigError(f"refusing to serve on {host!r} without TASKQ_API_TOKEN: anyone who "
                          "can reach it could read tasks and retry dead ones; set a token or "
                          "bind 127.0.0.1")


def main(args: argparse.Namespace) -> int:
    PORT.check(args.port, error=ConfigError)
    # Imported here: the core install has no HTTP server, and every other command works.
    try:
        import uvicorn  # noqa: PLC0415

        from taskq.web.app import create_app  # noqa: PLC0415
        from taskq.web.protocol import aborting_protocol  # noqa: PLC0415
    except ImportError as e:
        raise ConfigError(f"taskq serve needs the web extra ({e.name} is not installed): "
                          "pip install 'taskq-redis[web]'") from e
    settings = settings_from(args)
    if args.allowed_host:
        hosts = ",".join([settings.allowed_hosts, *args.allowed_host]).strip(",")
        settings = dataclasses.replace(settings, allowed_hosts=hosts)
    check_exposure(args.host, settings.api_token)
    app = create_app(settings, args.host)  # a bad allowed host name fails here
    print(f"taskq dashboard on http://{args.host}:{args.port}/?queue={quote(settings.queue)} "
          f"(queue {settings.queue!r})", flush=True)
    uvicorn.run(app, host=args.host, port=args.port, log_level="warning",
                timeout_graceful_shutdown=2,
                http=aborting_protocol(settings.request_timeout_seconds))
    return 0
