"""Scripts on a single node: EVALSHA on direct connections, several in one write.

This module and `direct` are the only places that go past redis-py's public API
(a connection's `pack_commands`, `send_packed_command`, `read_response` and `_sock`,
the pool's `get_connection` and `release`, a `Script`'s `sha` and `script`), for the
per-call work it saves; tests/test_transport.py fails, naming what changed, when a
redis-py release no longer provides them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import redis
from redis.commands.core import Script
from redis.exceptions import NoScriptError, ResponseError

from taskq.transport.direct import Command, DirectConnections
from taskq.transport.protocol import ScriptRun, client_script


class SingleNode:
    """The transport of a `redis.Redis`: every script call is one write on a direct
    connection, and the blocking wait can carry a script behind it."""

    __slots__ = ("client", "direct")
    spans_slots = True

    def __init__(self, client: redis.Redis) -> None:
        self.client = client
        self.direct = DirectConnections.of(client)

    def script(self, source: str) -> Script:
        return client_script(self.client, source)

    def run(self, script: Script, keys: Sequence[Any], args: Sequence[Any]) -> Any:
        reply = self._send((), ((script, keys, args),))[0]
        if isinstance(reply, ResponseError):
            raise reply
        return reply

    def run_many(self, runs: Sequence[ScriptRun]) -> list[Any]:
        return self._send((), runs)

    def wait_then_run(self, key: str, timeout: float, script: Script,
                      keys: Sequence[Any], args: Sequence[Any]) -> Any:
        # Queued behind the pop on one connection, the script runs the moment a
        # producer's push wakes the pop, and both replies come back together.
        reply = self._send((("BLPOP", key, timeout),), ((script, keys, args),))[0]
        if isinstance(reply, ResponseError):
            raise reply
        return reply

    def wait(self, keys: Sequence[str], timeout: float) -> bool:
        try:
            self.client.blpop(keys, timeout)
        except redis.RedisError:
            return False
        return True

    def _send(self, commands: Sequence[Command], runs: Sequence[ScriptRun]) -> list[Any]:
        """Send `commands` and then each script run in one write on a direct connection;
        return the scripts' replies in order, a script's error reply in its place. A
        script the server no longer has (NOSCRIPT) ran nothing: it is loaded and run
        again alone, and nothing else is sent again. An error reply among `commands`
        raises."""
        calls = [("EVALSHA", script.sha, len(keys), *keys, *args) for script, keys, args in runs]
        replies = self.direct.call_many([*commands, *calls])
        for error in (r for r in replies[: len(commands)] if isinstance(r, ResponseError)):
            raise error
        results = replies[len(commands):]
        for i, ((script, _, _), call) in enumerate(zip(runs, calls, strict=True)):
            if isinstance(results[i], NoScriptError):
                self.direct.call("SCRIPT", "LOAD", script.script)
                results[i] = self.direct.call_many([call])[0]
        return results
