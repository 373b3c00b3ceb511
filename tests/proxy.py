"""A TCP proxy on loopback that can lose a reply: it forwards a command to Redis and,
when told to, closes the client's connection instead of passing the reply back."""

from __future__ import annotations

import socket
import threading
from contextlib import suppress


class ReplyDroppingProxy:
    """Forwards 127.0.0.1:<port> to a Redis unix socket. `drop_next_reply()` makes the
    next reply from Redis vanish: the command has run, the client never hears so."""

    def __init__(self, redis_socket: str) -> None:
        self.redis_socket = redis_socket
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self.listener.getsockname()[1]
        self._drop = threading.Event()
        self.dropped = 0
        self._closing = False
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def drop_next_reply(self) -> None:
        self._drop.set()

    def _accept(self) -> None:
        while not self._closing:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            upstream.connect(self.redis_socket)
            threading.Thread(target=self._pump, args=(client, upstream, False), daemon=True).start()
            threading.Thread(target=self._pump, args=(upstream, client, True), daemon=True).start()

    def _pump(self, source: socket.socket, target: socket.socket, replies: bool) -> None:
        with suppress(OSError):
            while data := source.recv(65536):
                if replies and self._drop.is_set():
                    self._drop.clear()
                    self.dropped += 1
                    break
                target.sendall(data)
        for sock in (source, target):
            with suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()

    def close(self) -> None:
        self._closing = True
        self.listener.close()
