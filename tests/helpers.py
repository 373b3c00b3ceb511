"""Test helpers: where a task id sits, full dumps of the keyspace, and the event log."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import redis
from mypy import api as mypy_api

import taskq
from taskq.broker import Broker
from taskq.errors import BrokerError
from taskq.keys import QueueKeys
from taskq.results import Renewal, TaskRecord

PLACES = ("ready", "leased", "delayed", "dlq", "parked")
# The state a task's record must have while its id sits in each place (T1); a task
# parked for a concurrency slot is pending, as a ready one is.
PLACE_STATE = {"ready": "pending", "leased": "running", "delayed": "delayed", "dlq": "dead",
               "parked": "pending"}


def text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def task_ids(client: redis.Redis, keys: QueueKeys) -> list[str]:
    """Every task id that has a record, sorted."""
    start = len(keys.task(""))
    return sorted(text(k)[start:] for k in client.scan_iter(match=keys.task("*"), count=1000))


@dataclass(frozen=True)
class QueueView:
    """A queue's four places and every task record, read in one round trip."""

    places: dict[str, list[str]]
    records: dict[str, dict[str, str]]
    # Each concurrency-limited group's runs holding a slot (see taskq.concurrency), its
    # tasks sent back to ready with a slot promised, and each name's runs holding a slot
    # of one of its keyed groups.
    holding: dict[str, set[str]]
    unparked: dict[str, set[str]]
    keyed: dict[str, set[str]]

    def where(self, task_id: str) -> list[str]:
        """Every place that holds `task_id`, once per occurrence, so a duplicate shows twice."""
        return [place for place in PLACES for t in self.places[place] if t == task_id]

    def violation(self, task_id: str) -> str | None:
        """Why `task_id` breaks T1 (one place, and the record agrees), or None if it holds."""
        places, current = self.where(task_id), self.records.get(task_id, {}).get("state")
        if not places:
            # A workflow's step waiting for its stage is in no place either (_flow.lua).
            return None if current in ("completed", "cancelled", "waiting") \
                else f"{task_id} is nowhere but {current!r}"
        if len(places) > 1:
            return f"{task_id} is in {places}"
        if PLACE_STATE[places[0]] != current:
            return f"{task_id} is in {places[0]} but its record says {current!r}"
        flag = self.records[task_id].get("parked")
        # Promised in its key's group, or its name's where a limit not kept per key put
        # it (see lua/_slots.lua).
        promised = [g for g in {self.group_of(task_id), self.records[task_id].get("name", "")}
                    if task_id in self.unparked.get(g, set())]
        if (places[0] == "parked") != (flag == "1") or (flag == "back") != bool(promised) \
                or len(promised) > 1:
            return f"{task_id} is in {places[0]} but its parked field says {flag!r}"
        if flag == "back" and places[0] != "ready":
            return f"{task_id} was sent back to ready but is in {places[0]}"
        return None

    def group_of(self, task_id: str) -> str:
        record = self.records.get(task_id, {})
        key = record.get("limit_key")
        return f"{record.get('name', '')}|{key}" if key else record.get("name", "")

    def slot_violations(self) -> list[str]:
        """Every run that holds a concurrency slot without holding the task's lease, and
        every leased run of a limited name that holds no slot."""
        problems = []
        for name, ids in self.holding.items():
            for task_id in sorted(ids):
                if self.records.get(task_id, {}).get("slot") != name \
                        or task_id not in self.places["leased"]:
                    problems.append(f"{task_id} holds a slot of {name} but is not its run")
        for task_id, record in self.records.items():
            slot = record.get("slot")
            if slot is not None and task_id not in self.holding.get(slot, set()):
                problems.append(f"{task_id} says it holds a slot of {slot} but does not")
            if slot is not None and slot != record.get("name") \
                    and task_id not in self.keyed.get(record.get("name", ""), set()):
                problems.append(f"{task_id} holds a keyed slot but is not among its keyed runs")
        for name, ids in self.keyed.items():
            for task_id in sorted(ids):
                slot = self.records.get(task_id, {}).get("slot", "")
                if not slot.startswith(f"{name}|"):
                    problems.append(f"{task_id} is a keyed run of {name} but holds {slot!r}")
        return problems

    def violations(self) -> list[str]:
        """Every T1 breach, including ids that sit in a place without a record."""
        problems = [p for t in self.records if (p := self.violation(t))]
        problems += self.slot_violations()
        placed = {t for ids in self.places.values() for t in ids}
        return problems + [
            f"{t} is queued but has no record" for t in sorted(placed - set(self.records))
        ]


def ready_ids(client: redis.Redis, keys: QueueKeys) -> list[str]:
    """Every ready id, in the order leases take them: highest priority first, each
    priority's list from its front (the right end)."""
    levels = {int(text(p)) for p in client.zrange(keys.ready_levels, 0, -1)} | {5}
    return [text(t) for p in sorted(levels, reverse=True)
            for t in reversed(client.lrange(keys.ready_at(p), 0, -1))]


def view(client: redis.Redis, keys: QueueKeys) -> QueueView:
    """The queue's places and records, read at rest (not in one atomic step)."""
    ids = task_ids(client, keys)
    pipe = client.pipeline(transaction=True)
    pipe.zrange(keys.leased, 0, -1)
    pipe.zrange(keys.delayed, 0, -1)
    pipe.lrange(keys.dlq, 0, -1)
    for task_id in ids:
        pipe.hgetall(keys.task(task_id))
    replies = pipe.execute()
    places = {"ready": ready_ids(client, keys)}
    places |= {p: [text(t) for t in r] for p, r in zip(PLACES[1:4], replies[:3], strict=True)}
    places["parked"] = [text(t) for name in sorted(client.smembers(keys.parked_names))
                        for t in client.lrange(keys.parked(text(name)), 0, -1)]
    records = {
        t: {text(a): text(b) for a, b in r.items()} for t, r in zip(ids, replies[3:], strict=True)
    }
    sets = [{text(k)[len(pattern("")):]: {text(t) for t in client.smembers(k)}
             for k in client.scan_iter(match=pattern("*"), count=1000)}
            for pattern in (keys.holding, keys.unparked, keys.keyed)]
    return QueueView(places, records, *sets)


def where(client: redis.Redis, keys: QueueKeys, task_id: str) -> list[str]:
    """Every place that holds `task_id`, once per occurrence, so a duplicate shows twice."""
    return view(client, keys).where(task_id)


def state(client: redis.Redis, keys: QueueKeys, task_id: str) -> str | None:
    value = client.hget(keys.task(task_id), "state")
    return None if value is None else text(value)


def _read_whole(pipe: redis.client.Pipeline, name: str, kind: str) -> None:
    if kind == "string":
        pipe.get(name)
    elif kind == "list":
        pipe.lrange(name, 0, -1)
    elif kind == "zset":
        pipe.zrange(name, 0, -1, withscores=True)
    elif kind == "hash":
        pipe.hgetall(name)
    elif kind == "set":
        pipe.smembers(name)
    else:
        pipe.xrange(name)


def dump(client: redis.Redis, match: str = "*") -> dict[str, tuple[str, Any, bool]]:
    """Every key of the database (or those `match` names) with its type, content and
    whether it expires. Contents, not DUMP's bytes: a read can step the rehashing of a
    large hash and change the order DUMP writes its fields in."""
    names = sorted(text(k) for k in client.scan_iter(match=match, count=1000))
    # Not a transaction: the dump spans slots on a cluster, and tests take it at rest.
    pipe = client.pipeline(transaction=False)
    for name in names:
        pipe.type(name)
    kinds = [text(kind) for kind in pipe.execute()]
    for name, kind in zip(names, kinds, strict=True):
        _read_whole(pipe, name, kind)
        pipe.ttl(name)
    replies = pipe.execute()
    return {
        name: (kind, replies[2 * i], replies[2 * i + 1] >= 0)
        for i, (name, kind) in enumerate(zip(names, kinds, strict=True))
    }


@dataclass(frozen=True)
class Event:
    """One row of a queue's event log."""

    id: str
    fields: dict[str, str]

    @property
    def type(self) -> str:
        return self.fields["type"]

    @property
    def task(self) -> str:
        return self.fields["task"]

    @property
    def state(self) -> str:
        return self.fields["state"]


def events(client: redis.Redis, keys: QueueKeys, after: int = 0) -> list[Event]:
    """The event log's rows, or those after sequence number `after`."""
    rows = client.xrange(keys.events, min=f"{after + 1}-0") or []
    return [Event(text(i), {text(a): text(b) for a, b in (f or {}).items()}) for i, f in rows]


HOUR_MS = 3_600_000


def this_hours_tick(now_ms: int) -> int:
    """The tick on the hour that `now_ms` is in, once that hour has 5 s left at least:
    an hourly schedule's next tick is then due in 5 s to an hour from `now_ms`."""
    left = HOUR_MS - now_ms % HOUR_MS
    if left < 5000:
        time.sleep(left / 1000)
        now_ms += left
    return now_ms // HOUR_MS * HOUR_MS


def wait_past(seconds: float) -> None:
    """Sleep a little longer than `seconds`, so a lease or delay that long has run out."""
    time.sleep(seconds + 0.02)


def lease_one(broker: Broker, worker: str = "w1", seconds: float = 10) -> tuple[str, int]:
    """Lease the task at the front of ready, which must be there: `(task_id, token)`."""
    got = broker.lease(worker, seconds)
    assert got is not None, "nothing was ready to lease"
    return got


def leased(broker: Broker, task_id: str = "t1", max_retries: int = 3) -> int:
    """Enqueue `task_id`, lease it (it must be the only ready task) and return its token."""
    broker.enqueue(task_id, max_retries=max_retries, payload={"n": 1})
    got = lease_one(broker)
    assert got[0] == task_id
    return got[1]


def record_of(broker: Broker, task_id: str) -> TaskRecord:
    """The task's record, which must exist."""
    record = broker.task(task_id)
    assert record is not None, f"{task_id} has no record"
    return record


def replay(log: list[Event]) -> dict[str, dict[str, str]]:
    """Each task's state, retries and token as its events tell them, oldest event first."""
    told: dict[str, dict[str, str]] = {}
    for event in log:
        task = told.setdefault(event.task, {"retries": "0", "fencing_token": "0"})
        task["state"] = event.state
        if "retries" in event.fields:
            task["retries"] = event.fields["retries"]
        if "token" in event.fields:
            task["fencing_token"] = event.fields["token"]
    return told


# Each cancel path of `cancel_scenario`: task id -> how its cancel ends.
CANCEL_PATHS = {
    "p": "cancelled while pending",
    "d": "cancelled while delayed",
    "x": "cancelled out of the DLQ",
    "r": "cancel requested, heard by a heartbeat, settled by ack_cancelled",
    "f": "cancel requested, the holder's failure ends it cancelled",
    "s": "cancel requested, the holder's release at shutdown ends it cancelled",
    "e": "cancel requested, the expired lease is reaped cancelled",
    "a": "cancel requested after the effect, the ack came first: completed",
    "u": "cancel requested, a heartbeat answered it, the holder acked before it heard",
    "v": "cancel requested, a heartbeat answered it, the holder failed before it heard",
}


def cancel_scenario(broker: Broker) -> None:
    """Every path of a cancel (CANCEL_PATHS) through real broker calls, one task each,
    leased one at a time; each task's `max_retries` is 1."""
    def running(task_id: str, lease_seconds: float = 10) -> int:
        broker.enqueue(task_id, max_retries=1)
        got = lease_one(broker, seconds=lease_seconds)
        assert got[0] == task_id
        return got[1]

    broker.enqueue("p", max_retries=1)
    assert broker.cancel("p").outcome == "cancelled"
    broker.enqueue("d", delay=30, max_retries=1)
    assert broker.cancel("d").outcome == "cancelled"
    assert broker.fail("x", running("x"), "UnknownTaskError", dead=True).status == "dead"
    assert broker.cancel("x").outcome == "cancelled"

    token = running("r")
    assert broker.heartbeat("r", token, 10) == Renewal.HELD
    assert broker.cancel("r").outcome == "requested"
    assert broker.heartbeat("r", token, 10) == Renewal.CANCEL
    assert broker.ack_cancelled("r", token)

    token = running("f")
    assert broker.cancel("f").outcome == "requested"
    assert broker.fail("f", token, "boom").status == "cancelled"

    token = running("s")
    assert broker.cancel("s").outcome == "requested"
    assert not broker.ack_cancelled("s", token + 1)  # a stale token writes nothing
    assert broker.release("s", token)

    running("e", lease_seconds=0.05)
    assert broker.cancel("e").outcome == "requested"
    wait_past(0.05)
    assert broker.reap() == [("e", "cancelled")]

    token = running("a")
    assert broker.heartbeat("a", token, 10) == Renewal.HELD
    assert broker.cancel("a").outcome == "requested"
    assert broker.ack("a", token)

    for task_id in ("u", "v"):
        token = running(task_id)
        assert broker.cancel(task_id).outcome == "requested"
        assert broker.heartbeat(task_id, token, 10) == Renewal.CANCEL
        if task_id == "u":
            assert broker.ack("u", token)
        else:
            assert broker.fail("v", token, "boom").status == "cancelled"
    assert broker.cancel("a").outcome == "unchanged"  # ended: no event


def no_ghost_slots(broker: Broker) -> None:
    """NoGhostSlot for each limit, and only tasks still waiting hold a slot."""
    rates = broker.client.hgetall(broker.keys.rates)
    for limit in {key.split("|")[0] for key in rates}:
        reserved = broker.client.zrange(broker.keys.reserved(limit), 0, -1, withscores=True)
        start, next_slot = int(rates[limit]), int(rates[f"{limit}|next"])
        interval = int(rates[f"{limit}|interval"])
        free = max(start, int(reserved[-1][1]) + interval) if reserved else start
        assert next_slot <= free, (limit, next_slot, free, reserved)
        for task_id, _ in reserved:
            state, slot = broker.client.hmget(broker.keys.task(task_id), "state", "rate_slot")
            assert state in ("delayed", "pending") and slot is not None, (task_id, state)


STALL_SCRIPT = """local t = redis.call('TIME')
local from = t[1] * 1000000 + t[2]
repeat t = redis.call('TIME') until t[1] * 1000000 + t[2] - from > tonumber(ARGV[1])"""


def stalling(client: redis.Redis, seconds: float) -> threading.Thread:
    """A thread, started, that holds Redis busy for `seconds` with a script (DEBUG is
    off on the test servers): every other client's call waits behind it. Join it."""
    stall = threading.Thread(target=client.eval,
                             args=(STALL_SCRIPT, 0, int(seconds * 1_000_000)))
    stall.start()
    return stall


def in_other_processes(code: str) -> set[str]:
    """What `code` prints in two fresh interpreters whose str hashes differ from each
    other's and (almost surely) from this one's: for values that must not depend on the
    process that computed them."""
    return {subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                           check=True, timeout=60,
                           env={**os.environ, "PYTHONHASHSEED": seed}).stdout.strip()
            for seed in ("1", "2")}


def overwrite(client: redis.Redis, keys: QueueKeys, written: str) -> str:
    """Put a string where the queue keeps `written` (a QueueKeys name, with a suffix
    after ':' as in 'ready:9' or 'ready:levels'), as something other than taskq might
    write it; returns the key's name."""
    name, _, suffix = written.partition(":")
    key: str = getattr(keys, name) + (f":{suffix}" if suffix else "")
    client.delete(key)
    client.set(key, "not taskq's")
    return key


def assert_refused_unchanged(client: redis.Redis, key: str, call: Callable[[], object]) -> None:
    """`call` is refused for finding a string at `key`, and every key of the database is
    as it was before: the script checked before its first write."""
    before = dump(client)
    with pytest.raises(BrokerError, match=f"WRONGTYPE {re.escape(key)} holds a string"):
        call()
    assert dump(client) == before


def assert_refused_while_overwritten(
    client: redis.Redis, key: str, call: Callable[[], object]
) -> None:
    """`call` is refused, changing nothing, while `key` holds a string where taskq keeps
    something else (see assert_refused_unchanged); then the key is put back as it was."""
    saved = client.dump(key)
    client.delete(key)
    client.set(key, "not taskq's")
    assert_refused_unchanged(client, key, call)
    client.delete(key)
    if saved is not None:
        client.restore(key, 0, saved)


def strict_mypy_errors(
    module: str, source: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> tuple[list[str], str, int]:
    """What `mypy --strict` says of a user's module of `source` type-checked against
    this taskq: its error messages, its whole output and its exit status."""
    (tmp_path / module).write_text(source)
    monkeypatch.setenv("MYPYPATH", str(Path(taskq.__file__).parent.parent))
    out, _, status = mypy_api.run([
        "--strict", "--follow-imports=silent", "--cache-dir", str(tmp_path / "cache"),
        str(tmp_path / module)])
    errors = [line.partition(": error: ")[2] for line in out.splitlines() if ": error: " in line]
    return errors, out, status


def minted(client: redis.Redis, keys: QueueKeys, task_id: str) -> list[tuple[str, int]]:
    """Each token the task's leases and reaps minted, oldest first, as their events tell:
    `(event type, token)`."""
    return [(e.type, int(e.fields["token"])) for e in events(client, keys)
            if e.task == task_id and e.type in ("leased", "reaped")]


def leased_token(before: int, token: int) -> int:
    """`token`, which a lease just gave a task whose token was `before`: it must be above
    it (one more, or the server clock's floor: lua/_common.lua's mint_token)."""
    assert token > before, f"lease token {token} not above {before}"
    return token


def reaped_token(broker: Broker, task_id: str, before: int) -> int:
    """The token a reap just gave `task_id`, whose token was `before`: above it, as a
    lease raises it, so that the lost holder's token is stale at once."""
    record = broker.task(task_id)
    assert record is not None and record.fencing_token > before, (task_id, record, before)
    return record.fencing_token
