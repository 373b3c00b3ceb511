"""`taskq serve`: the SSE feed, the web dashboard, the JSON API and metrics over HTTP."""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import ipaddress
import re
import socket
from urllib.parse import quote

from taskq.cli.common import add_queue_argument, settings_from
from taskq.errors import ConfigError
from taskq.limits import PORT

HELP = "serve the web dashboard, the live SSE feed, the JSON API and /metrics"

TOKEN = re.compile(r"[A-Za-z0-9._~\-]{8,256}")
# A host name's labels (RFC 1123), which is what --host takes besides an IP address.
HOST_NAME = re.compile(r"(?!-)[A-Za-z0-9-]{1,63}(?<!-)(\.(?!-)[A-Za-z0-9-]{1,63}(?<!-))*\.?")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--host", default="127.0.0.1", type=unbracketed,
                        help="address to bind (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=8000, help="port (default 8000)")
    parser.add_argument("--allowed-host", action="append", default=[], metavar="NAME",
                        help="a name clients reach this server by, besides the loopback "
                             "names and --host (repeatable; adds to TASKQ_ALLOWED_HOSTS)")
    add_queue_argument(parser)


def unbracketed(host: str) -> str:
    """`host` as it is bound: an IPv6 address written as in a URL (`[::1]`) without its
    brackets."""
    return host[1:-1] if host.startswith("[") and host.endswith("]") else host


def is_loopback(host: str) -> bool:
    if host.lower().rstrip(".") == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def is_host(host: str) -> bool:
    """Whether `host` is an IP address or a host name."""
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return len(host) <= 253 and HOST_NAME.fullmatch(host) is not None
    return True


def check_exposure(host: str, token: str, allowed_hosts: str = "") -> None:
    """Refuse a host that is no name or address, to serve beyond this machine without a
    token, or to any Host without one, and odd tokens."""
    if not is_host(host):
        raise ConfigError(f"--host {host!r} is no host name or IP address")
    if token and not TOKEN.fullmatch(token):
        raise ConfigError("TASKQ_API_TOKEN must be 8-256 characters of letters, digits, "
                          "'.', '_', '~' or '-'")
    if not is_loopback(host) and not token:
        raise ConfigError(f"refusing to serve on {host!r} without TASKQ_API_TOKEN: anyone who "
                          "can reach it could read tasks and retry dead ones; set a token or "
                          "bind 127.0.0.1")
    # Without a token the Host check is all that keeps a page whose name was rebound to
    # this machine's address (DNS rebinding) from reading tasks and retrying dead ones.
    if not token and "*" in (name.strip() for name in allowed_hosts.split(",")):
        raise ConfigError("refusing TASKQ_ALLOWED_HOSTS / --allowed-host '*' without "
                          "TASKQ_API_TOKEN: with no Host check and no token, a web page "
                          "whose name is made to point at this machine could read tasks and "
                          "retry or cancel them; set a token, or list the names clients use")


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
    check_exposure(args.host, settings.api_token, settings.allowed_hosts)
    app = create_app(settings, args.host)  # a bad allowed host name fails here
    # Bound here, before the URL is printed: a port in use or a host that names no
    # address is one line, not another server's URL and then uvicorn's error.
    listening = listen(args.host, args.port)
    port = listening[0].getsockname()[1]  # --port 0: the one the system picked
    where = f"[{args.host}]" if ":" in args.host else args.host
    print(f"taskq dashboard on http://{where}:{port}/?queue={quote(settings.queue)} "
          f"(queue {settings.queue!r})", flush=True)
    # uvicorn's own lines go through the command's logging (log_config=None: uvicorn
    # sets no handlers of its own), so `--log-format json` holds for them too and a
    # client's bytes in them are escaped; a line per request is not kept.
    config = uvicorn.Config(app, host=args.host, port=port, log_level="warning",
                            log_config=None, access_log=False,
                            timeout_graceful_shutdown=2,
                            http=aborting_protocol(
                                settings.request_timeout_seconds,
                                # The feed cuts its own non-readers at its send timeout.
                                max(settings.request_timeout_seconds,
                                    settings.feed_send_timeout_seconds)))
    # uvicorn raises the stop signal again once it has shut down: a stop asked for is a
    # clean exit, as uvicorn.run makes it.
    with contextlib.suppress(KeyboardInterrupt):
        uvicorn.Server(config).run(sockets=listening)
    return 0


def listen(host: str, port: int) -> list[socket.socket]:
    """Sockets bound to every address `host` names, on `port` (as asyncio binds them for
    uvicorn: address reuse on, an IPv6 one for IPv6 only); for port 0, the port the
    first was given, on all. ConfigError saying why one cannot be bound."""
    try:
        found = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM,
                                   flags=socket.AI_PASSIVE)
    except socket.gaierror as e:
        raise ConfigError(f"--host {host!r} names no address this machine can bind: "
                          f"{e.strerror}") from None
    bound: list[socket.socket] = []
    for family, kind, proto, _, given in dict.fromkeys(found):
        one = socket.socket(family, kind, proto)
        bound.append(one)
        one.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if family == socket.AF_INET6:
            one.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
        address = (given[0], bound[0].getsockname()[1], *given[2:]) \
            if port == 0 and len(bound) > 1 else given
        try:
            one.bind(address)
        except OSError as e:
            for each in bound:
                each.close()
            raise ConfigError(f"cannot listen on {address[0]} port {address[1]}: "
                              f"{e.strerror}; pick another --port, or stop what holds "
                              "it") from None
        one.set_inheritable(True)
    return bound
