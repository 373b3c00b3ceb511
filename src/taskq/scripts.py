"""Loads the Lua scripts from package files and registers them once per connection."""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache
from importlib import resources

import redis
from redis.commands.core import Script

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


class Scripts:
    """One registered `Script` per operation; redis-py reloads them after NOSCRIPT."""

    def __init__(self, client: redis.Redis) -> None:
        self.enqueue = client.register_script(source("enqueue"))
        self.lease = client.register_script(source("lease"))
        self.heartbeat = client.register_script(source("heartbeat"))
        self.ack = client.register_script(source("ack"))
        self.fail = client.register_script(source("fail"))
        self.release = client.register_script(source("release"))
        self.reap = client.register_script(source("reap"))
        self.promote = client.register_script(source("promote"))
        self.retry_dead = client.register_script(source("retry_dead"))
        self.purge = client.register_script(source("purge"))
        self.snapshot = client.register_script(source("snapshot"))

    def by_name(self, name: str) -> Script:
        script: Script = getattr(self, name)
        return script
