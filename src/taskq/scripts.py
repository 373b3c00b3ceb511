"""The Lua scripts: loaded from package files, their headers read, and each one called."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

from redis.commands.core import Script

from taskq.transport import Transport

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
    "fire",
    "cancel",
    "ack_cancelled",
    "progress",
    "start_flow",
    "cancel_flow",
    "lift_rate_limits",
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


# The words a script's code quotes in capitals: every command it calls (however it
# calls it: redis.call, a helper, a table unpacked) and the options it passes them,
# which can_run.lua passes over as no command. The container command the scripts use
# is checked with the subcommand they give it.
QUOTED = re.compile(r"'([A-Z]{2,})'")
CONTAINERS = {"XINFO": "XINFO STREAM"}

# The scripts that write which each role runs, whose commands its ACL user must be
# allowed (a script that only reads writes nothing when refused): every producer's,
# and every worker's (a workflow's next stage is started by ack.lua, a periodic task
# by fire.lua). Starting a workflow calls nothing enqueue does not, so it is asked about
# with them; a producer that cancels or revives tasks runs more, asked about before the
# first such call (see Broker.permit).
PRODUCER_SCRIPTS = ("enqueue", "watch", "start_flow")
WORKER_SCRIPTS = ("lease", "heartbeat", "ack", "fail", "release", "reap", "promote",
                  "purge", "fire", "ack_cancelled", "progress", "lift_rate_limits",
                  "register_worker", "unregister_worker")


@cache
def commands_called(scripts: tuple[str, ...]) -> tuple[str, ...]:
    """The Redis commands `scripts` (their included helpers too) may call, sorted, among
    the options they pass (see QUOTED): what the connection's ACL user must be allowed
    to run them (see can_run.lua)."""
    found: set[str] = set()
    for name in scripts:
        code = "\n".join(line for line in source(name).splitlines()
                         if not line.lstrip().startswith("--"))
        found.update(CONTAINERS.get(word, word) for word in QUOTED.findall(code))
    return tuple(sorted(found))


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
    """One operation's script, called as redis-py's `Script` is (`keys=`, `args=`), on
    its client's transport."""

    __slots__ = ("script", "transport")

    def __init__(self, script: Script, transport: Transport) -> None:
        self.script = script
        self.transport = transport

    def __call__(self, keys: Sequence[Any] = (), args: Sequence[Any] = ()) -> Any:
        return self.transport.run(self.script, keys, args)


class Scripts:
    """One `ScriptCall` per operation, all on one transport."""

    def __init__(self, transport: Transport) -> None:
        def load(name: str) -> ScriptCall:
            return ScriptCall(transport.script(source(name)), transport)

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
        self.fire = load("fire")
        self.forget_schedule = load("forget_schedule")
        self.lift_rate_limits = load("lift_rate_limits")
        self.cancel = load("cancel")
        self.ack_cancelled = load("ack_cancelled")
        self.progress = load("progress")
        self.snapshot = load("snapshot")
        self.watch = load("watch")
        self.read_events = load("read_events")
        self.register_worker = load("register_worker")
        self.unregister_worker = load("unregister_worker")
        self.workers = load("workers")
        self.longest_dead_ttl = load("longest_dead_ttl")
        self.not_run = load("not_run")
        self.lacking = load("lacking")
        self.live_workers = load("live_workers")
        self.recent = load("recent")
        self.start_flow = load("start_flow")
        self.cancel_flow = load("cancel_flow")
        self.flow_status = load("flow_status")
        self.can_run = load("can_run")

    def by_name(self, name: str) -> ScriptCall:
        script: ScriptCall = getattr(self, name)
        return script
