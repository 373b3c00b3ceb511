"""Security headers on every response: the page runs only its own files and is never
framed, no response is sniffed into another type, and none but the page's own files is
stored by a cache."""

from __future__ import annotations

from starlette.types import ASGIApp, Message, Receive, Scope, Send

# The page is static files from /static plus fetch and EventSource to its own origin;
# the favicon is a data: URL. No inline script or style attribute is allowed.
CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
       "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'")
HEADERS = [
    (b"content-security-policy", CSP.encode()),
    (b"x-frame-options", b"DENY"),
    (b"x-content-type-options", b"nosniff"),
    # `/?token=` puts the token in a URL: never send it on as a Referer.
    (b"referrer-policy", b"no-referrer"),
]
# The API's answers hold task payloads and results, the metrics and the page the queue's
# state: no browser or proxy cache may keep them. The page's static files may be kept.
NO_STORE = (b"cache-control", b"no-store")
STATIC = "/static/"


class SecurityHeaders:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        stored = str(scope.get("path", "")).startswith(STATIC)

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = [*message.get("headers", []), *HEADERS]
                if not stored and all(name.lower() != NO_STORE[0] for name, _ in headers):
                    headers.append(NO_STORE)
                message = {**message, "headers": headers}
            await send(message)

        await self.app(scope, receive, send_with_headers)
