"""The Lua scripts: loaded from package files, their headers read, and each one called."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

import redis
from redis.cluster import RedisCluster
from redis.commands.core import Script
from redis.exceptions import NoScriptError, ResponseError

from taskq.direct import Command, DirectConnections

OPERATIONS = (
    "enqueue",
    "lease",
    "heartbeat",
    "ack",
    "fail",
    "release",
    "reap",
    "promote",
    "retry_dead",
    "purge",
)

INCLUDE = re.compile(r'^--- @include "(\w+)"$', re.MULTILINE)
HEADER = re.compile(r"\A--\[\[(.*?)\]\]", re.DOTALL)
KEY_LINE = re.compile(r"^\s*KEYS\[(\d+)\]\s+(\w+)", re.MULTILINE)
ARG_LINE = re.compile(r"^\s*ARGV\[(\d+)\]\s+(\w+)", re.MULTILINE)


def _lua_file(name: str) -> str:
    return resources.files("taskq").joinpath("lua").joinpath(f"{name}.lua").read_text("utf-8")


@cache
def source(name: str) -> str:
    """The Lua text of `name` with its `--- @include` lines replaced by the included files."""
    text = _lua_file(name)
    return INCLUDE.sub(lambda m: source(m.group(1)), text)


@dataclass(frozen=True)
class Contract:
    """What a script's header promises: the names of its KEYS and ARGV, in order."""

    keys: tuple[str, ...]
    args: tuple[str, ...]


def contract(name: str) -> Contract:
    """Parse the KEYS/ARGV lines of a script's `--[[ ]]` header."""
    text = _lua_file(name)
    header = HEADER.match(text)
    if header is None:
        raise ValueError(f"{name}.lua has no --[[ ]] contract header")
    body = header.group(1)
    keys = [(int(i), n) for i, n in KEY_LINE.findall(body)]
    args = [(int(i), n) for i, n in ARG_LINE.findall(body)]
    for label, entries in (("KEYS", keys), ("ARGV", args)):
        if [i for i, _ in entries] != list(range(1, len(entries) + 1)):
            raise ValueError(f"{name}.lua numbers its {label} out of order")
    return Contract(tuple(n for _, n in keys), tuple(n for _, n in args))


class ScriptCall:
    """One operation's script, called as redis-py's `Script` is (`keys=`, `args=`).

    On a single node its EVALSHA goes out on a direct connection (see `taskq.direct`);
    on a cluster, or for an explicit `client`, the `Script` sends it. A server that no
    longer has the script (NOSCRIPT, after a restart or SCRIPT FLUSH) ran nothing: it is
    loaded and run again with the same arguments."""

    def __init__(self, script: Script, direct: DirectConnections | None) -> None:
        self.script = script
        self.direct = direct

    @property
    def sha(self) -> str:
        sha: str = self.script.sha
        return sha

    def __call__(
        self,
        keys: Sequence[Any] = (),
        args: Sequence[Any] = (),
        client: redis.Redis | None = None,
    ) -> Any:
        if self.direct is None or client is not None:
            return self.script(keys=keys, args=args, client=client)
        return self.after(self.direct, (), keys, args)

    def after(
        self,
        direct: DirectConnections,
        commands: Sequence[Command],
        keys: Sequence[Any],
        args: Sequence[Any],
    ) -> Any:
        """Send `commands` and then this script in one write on a direct connection, and
        return the script's reply; an error reply raises."""
        reply = in_one_write(direct, commands, [(self, keys, args)])[0]
        if isinstance(reply, ResponseError):
            raise reply
        return reply


ScriptRun = tuple[ScriptCall, Sequence[Any], Sequence[Any]]


def in_one_write(direct: DirectConnections, commands: Sequence[Command],
                 runs: Sequence[ScriptRun]) -> list[Any]:
    """Send `commands` and then each script run (script, keys, args) in one write on a
    direct connection; return the scripts' replies in order, a script's error reply in
    its place: each script is its own atomic step, and one may fail where another ran.
    A script the server no longer has (NOSCRIPT) ran nothing: it is loaded and run
    again alone, and nothing else is sent again. An error reply among `commands` raises."""
    calls = [("EVALSHA", script.sha, len(keys), *keys, *args) for script, keys, args in runs]
    replies = direct.call_many([*commands, *calls])
    for error in (r for r in replies[: len(commands)] if isinstance(r, ResponseError)):
        raise error
    results = replies[len(commands):]
    for i, ((script, _, _), call) in enumerate(zip(runs, calls, strict=True)):
        if isinstance(results[i], NoScriptError):
            direct.call("SCRIPT", "LOAD", script.script.script)
            results[i] = direct.call_many([call])[0]
    return results


class Scripts:
    """One `ScriptCall` per operation, all on one client and its direct connections."""

    def __init__(self, client: redis.Redis) -> None:
        self.direct = None if isinstance(client, RedisCluster) else DirectConnections.of(client)

        def load(name: str) -> ScriptCall:
            return ScriptCall(client.register_script(source(name)), self.direct)

        self.enqueue = load("enqueue")
        self.lease = load("lease")
        self.heartbeat = load("heartbeat")
        self.ack = load("ack")
        self.fail = load("fail")
        self.release = load("release")
        self.reap = load("reap")
        self.promote = load("promote")
        self.retry_dead = load("retry_dead")
        self.purge = load("purge")
        self.snapshot = load("snapshot")

    def by_name(self, name: str) -> ScriptCall:
        script: ScriptCall = getattr(self, name)
        return script
