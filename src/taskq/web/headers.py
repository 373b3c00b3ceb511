"""Security headers on every response: the page runs only its own files and is never
framed, and no response is sniffed into another type."""

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


class SecurityHeaders:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                message = {**message, "headers": [*message.get("headers", []), *HEADERS]}
            await send(message)

        await self.app(scope, receive, send_with_headers)
