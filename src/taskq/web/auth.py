"""Access control: an API token (header, or a cookie for the browser), and no
cross-site writes."""

from __future__ import annotations

import hmac
import json
from urllib.parse import parse_qs, parse_qsl, urlencode, urlsplit

from starlette.requests import cookie_parser
from starlette.types import ASGIApp, Receive, Scope, Send

COOKIE = "taskq_token"
CSRF_HEADER = b"x-taskq-request"
OPEN_PATHS = ("/healthz",)
# What only the dashboard's own page reads: refused to a browser on another site.
DATA_PATHS = ("/api/", "/events", "/metrics")


class AccessControl:
    """With a token set, every route but /healthz needs it: `Authorization: Bearer …`
    for scripts, or the cookie a browser gets by opening `/?token=…` once (an
    `EventSource` cannot send headers). Writes need the `X-Taskq-Request` header and a
    same-origin `Origin`, which a cross-site form or image cannot provide; a browser
    says when a read of the data comes from another site (`Sec-Fetch-Site`), and it is
    refused."""

    def __init__(self, app: ASGIApp, token: str) -> None:
        self.app = app
        self.token = token

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = {k.lower(): v for k, v in scope["headers"]}
        path = scope["path"]
        if scope["method"] not in ("GET", "HEAD", "OPTIONS") and not _same_site_write(headers):
            await _reply(send, 403, "cross-site or scripted write refused: send the "
                                    "X-Taskq-Request: 1 header from the same origin")
            return
        if headers.get(b"sec-fetch-site") == b"cross-site" and path.startswith(DATA_PATHS):
            # A page on another site, which any operator may have open, reading the API
            # (or the feed) in a loop: each read costs Redis and this server.
            await _reply(send, 403, "cross-site read refused: open the dashboard itself")
            return
        if not self.token or path in OPEN_PATHS:
            await self.app(scope, receive, send)
            return
        raw_query = scope.get("query_string", b"").decode("latin-1")
        query = parse_qs(raw_query)
        offered = query.get("token", [""])[0]
        if path == "/" and offered and self._valid(offered):
            # Back to the page the link named (its queue), minus the token.
            kept = urlencode([(k, v) for k, v in parse_qsl(raw_query) if k != "token"])
            await _login(send, offered, scope.get("scheme") == "https",
                         "/" + (f"?{kept}" if kept else ""))
            return
        if self._valid(_bearer(headers)) or self._valid(_cookie(headers)):
            await self.app(scope, receive, send)
            return
        await _reply(send, 401, "this taskq server needs its API token: send "
                                "'Authorization: Bearer <token>', or open /?token=<token> once "
                                "in the browser")

    def _valid(self, offered: str) -> bool:
        return bool(offered) and hmac.compare_digest(offered.encode(), self.token.encode())


def _bearer(headers: dict[bytes, bytes]) -> str:
    value = headers.get(b"authorization", b"").decode("latin-1")
    scheme, _, credentials = value.partition(" ")
    return credentials.strip() if scheme.lower() == "bearer" else ""


def _cookie(headers: dict[bytes, bytes]) -> str:
    # Starlette's parser reads cookies as browsers send them: SimpleCookie drops the
    # whole header at the first cookie it cannot parse (`pref=dark mode`), and cookies
    # set by any other app on this host (any port) arrive here too.
    return cookie_parser(headers.get(b"cookie", b"").decode("latin-1")).get(COOKIE, "")


def _same_site_write(headers: dict[bytes, bytes]) -> bool:
    if headers.get(CSRF_HEADER) != b"1":
        return False
    origin = headers.get(b"origin")
    if origin is None:
        return True
    try:
        netloc = urlsplit(origin.decode("latin-1")).netloc
    except ValueError:  # e.g. an unclosed IPv6 bracket: not our origin
        return False
    return netloc == headers.get(b"host", b"").decode("latin-1")


async def _login(send: Send, token: str, secure: bool, location: str) -> None:
    cookie = f"{COOKIE}={token}; Path=/; HttpOnly; SameSite=Strict" + ("; Secure" if secure else "")
    await send({"type": "http.response.start", "status": 303, "headers": [
        (b"location", location.encode("latin-1")), (b"set-cookie", cookie.encode("latin-1")),
        (b"cache-control", b"no-store"), (b"content-length", b"0")]})
    await send({"type": "http.response.body", "body": b""})


async def _reply(send: Send, status: int, message: str) -> None:
    body = json.dumps({"error": message}).encode()
    await send({"type": "http.response.start", "status": status, "headers": [
        (b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})
