"""The Host check: a page on another site that rebinds its name to this machine's
address (DNS rebinding) sends its own name as `Host`, so only ours are answered."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable

from starlette.types import ASGIApp, Receive, Scope, Send

from taskq.errors import ConfigError

LOOPBACK_NAMES = ("localhost", "127.0.0.1", "[::1]")
# Load balancers probe with whatever Host they like; /healthz says only whether Redis is up.
OPEN_PATHS = ("/healthz",)
HOST_NAME = re.compile(r"\*|\[[0-9a-f:.]+\]|[a-z0-9]([a-z0-9.\-]{0,252})?", re.ASCII)


PORT = re.compile(r"(:[0-9]{0,5})?", re.ASCII)


def host_name(host: str) -> str:
    """The name in a Host header value or an address to bind: lower case, no port,
    an IPv6 address in brackets. A value that is not a name and an optional port
    (`[::1`, `localhost:x`) comes back whole, so it matches no allowed name."""
    host = host.strip().lower()
    if host.startswith("["):
        name, bracket, port = host.partition("]")
    elif host.count(":") > 1:  # a bare IPv6 address, as given to --host
        return f"[{host}]"
    else:
        name, bracket, port = host.partition(":")
        port = bracket + port
        bracket = ""
    if not PORT.fullmatch(port):
        return host
    return name + bracket


def allowed_names(bound: str, configured: Iterable[str]) -> frozenset[str]:
    """The loopback names, the bound address, and the configured names; `*` allows any."""
    names = {host_name(n) for n in configured if n.strip()}
    bad = sorted(n for n in names if not HOST_NAME.fullmatch(n))
    if bad:
        raise ConfigError(f"TASKQ_ALLOWED_HOSTS / --allowed-host: {bad[0]!r} is not a host "
                          "name or address (give names like dash.example.com, comma-separated)")
    return frozenset({*LOOPBACK_NAMES, host_name(bound), *names})


class AllowedHosts:
    """Answers 421 to a request whose Host is not one of `names`."""

    def __init__(self, app: ASGIApp, names: frozenset[str]) -> None:
        self.app = app
        self.names = names
        self.any = "*" in names

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or self.any or scope["path"] in OPEN_PATHS:
            await self.app(scope, receive, send)
            return
        host = dict(scope["headers"]).get(b"host", b"").decode("latin-1")
        if host_name(host) in self.names:
            await self.app(scope, receive, send)
            return
        body = json.dumps({"error": (
            f"Host {host[:200]!r} is not served here: taskq serve answers to "
            f"{', '.join(sorted(self.names))}; add the name it is reached by with "
            "TASKQ_ALLOWED_HOSTS or --allowed-host")}).encode()
        await send({"type": "http.response.start", "status": 421, "headers": [
            (b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]})
        await send({"type": "http.response.body", "body": body})
