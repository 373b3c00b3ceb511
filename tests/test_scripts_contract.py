"""Each Lua script's `--[[ ]]` header against the Broker wrapper that calls it."""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Sequence
from datetime import timedelta
from importlib import resources
from typing import Any

import pytest
import redis

from helpers import Event, events, leased, text
from taskq import concurrency, limits, rates
from taskq.broker import Broker, NewTask
from taskq.concurrency import ConcurrencyLimit
from taskq.flows import Flows, StageSpec
from taskq.keys import QUEUES_KEY, QueueKeys
from taskq.rates import RateLimit
from taskq.results import Failure, Renewal
from taskq.schedules import make_schedule
from taskq.scripts import HEADER, OPERATIONS, ScriptCall, contract
from taskq.tools import tlatrace
from taskq.tools.tracecheck import ALLOWED_FROM, ALLOWED_TO

RETENTION = 777
TOKEN_USE = re.compile(r"\b(KEYS|ARGV)\[(\d+)\]")
EMITTED = re.compile(r"\{'type', '([a-z_]+)'")
TIME_CALL = re.compile(r"""redis\.p?call\(\s*['"]time['"]""", re.IGNORECASE)


def lua(name: str) -> str:
    """The file as written, before the loader splices in `_common`."""
    return resources.files("taskq").joinpath("lua", f"{name}.lua").read_text(encoding="utf-8")


def code(name: str) -> str:
    """The file's Lua with its comments (and so its header) removed."""
    return re.sub(r"--[^\n]*", "", re.sub(r"--\[\[.*?\]\]", "", lua(name), flags=re.DOTALL))


def header(name: str) -> str:
    match = HEADER.match(lua(name))
    assert match is not None, f"{name}.lua has no --[[ ]] header"
    return match.group(1)


def hash_tag(key: str) -> str:
    """The part of `key` Redis Cluster hashes: the first non-empty `{...}`, else all of it."""
    start = key.find("{")
    end = key.find("}", start + 1)
    return key[start + 1 : end] if start >= 0 and end > start + 1 else key


class Recorder:
    """Test instrumentation standing in for one `ScriptCall`: records each call, then runs it."""

    def __init__(self, script: ScriptCall, client: redis.Redis, keys: QueueKeys) -> None:
        self.script, self.client, self.keys = script, client, keys
        self.calls: list[tuple[list[str], list[Any], list[Event]]] = []

    def __call__(self, keys: Sequence[str] = (), args: Sequence[Any] = ()) -> Any:
        seen = len(events(self.client, self.keys))
        reply = self.script(keys=keys, args=args)
        emitted = events(self.client, self.keys)[seen:]
        self.calls.append((list(keys), list(args), emitted))
        return reply


def is_jitter(value: Any) -> bool:
    return 0 <= float(value) < 1


def is_seed(value: Any) -> bool:
    return str(value).isdigit() and 1 <= int(value) <= 2**31 - 2


# Each operation's setup and call, returning the ARGV values the call must pass, by name.
def call_enqueue(b: Broker) -> dict[str, Any]:
    b.enqueue_many([NewTask("t1", 2.5, 4, {"a": 1}, "idem", 99, name="mod.fn", result_ttl=30,
                            priority=8, limit_key="acct-1")])
    return {"task_id": "t1", "name": "mod.fn", "payload": '{"a":1}', "delay_ms": 2500,
            "run_at_ms": 0, "max_retries": 4, "idempotency_key": "idem",
            "idempotency_ttl": 99, "result_ttl_ms": 30000, "count": 1,
            "priority": 8, "limit_key": "acct-1"}  # fmt: skip


def call_lease(b: Broker) -> dict[str, Any]:
    b.enqueue("t1")
    b.rate_limits = (RateLimit("mod.fn", 10.0, 2),)
    b.concurrency_limits = (ConcurrencyLimit("mod.fn", 4, "account"),)
    b.lease_many("w1", 2.5, 3, request_id="req")
    return {"worker": "w1", "lease_ms": 2500, "count": 3, "request_id": "req", "limits": 1,
            "name": "mod.fn", "interval_us": 100_000, "burst": 2, "max": 4, "keyed": 1}


def call_heartbeat(b: Broker) -> dict[str, Any]:
    token = leased(b)
    b.heartbeat("t1", token, 2.5)
    return {"task_id": "t1", "token": token, "lease_ms": 2500, "count": 1}


def call_ack(b: Broker) -> dict[str, Any]:
    token = leased(b)
    b.ack("t1", token, '{"sum":3}')
    return {"task_id": "t1", "token": token, "completed_ttl": b.completed_ttl_ms, "count": 1,
            "result": '{"sum":3}'}


def call_fail(b: Broker) -> dict[str, Any]:
    token = leased(b)
    b.fail("t1", token, Failure("ValueError", "boom", "Traceback...", "ValueError: boom (at x)"),
           backoff_base=0.25, backoff_max=4)
    return {"task_id": "t1", "token": token, "error": "ValueError: boom (at x)",
            "backoff_base_ms": 250, "backoff_max_ms": 4000, "jitter": is_jitter,
            "error_type": "ValueError", "error_message": "boom",
            "traceback": "Traceback...", "mode": "backoff", "delay_ms": 0}  # fmt: skip


def call_release(b: Broker) -> dict[str, Any]:
    token = leased(b)
    b.release("t1", token)
    return {"task_id": "t1", "token": token}


def call_progress(b: Broker) -> dict[str, Any]:
    token = leased(b)
    assert b.progress("t1", token, 0.25, "a quarter")
    return {"task_id": "t1", "token": token, "permille": 250, "message": "a quarter"}


def call_reap(b: Broker) -> dict[str, Any]:
    b.enqueue("t1")
    b.lease_many("w1", 0.01, 1)
    time.sleep(0.03)
    b.reap(limit=7, backoff_base=0.25, backoff_max=4)
    return {"limit": 7, "backoff_base_ms": 250, "backoff_max_ms": 4000, "jitter_seed": is_seed}


def call_promote(b: Broker) -> dict[str, Any]:
    b.enqueue("t1", delay=0.01)
    time.sleep(0.03)
    b.promote(limit=7)
    return {"limit": 7}


def call_retry_dead(b: Broker) -> dict[str, Any]:
    b.fail("t1", leased(b, max_retries=0), "boom")
    b.retry_dead("t1")
    return {"task_id": "t1"}


def call_purge(b: Broker) -> dict[str, Any]:
    b.fail("t1", leased(b, max_retries=0), "boom")
    time.sleep(0.03)
    b.purge(dead_ttl=0.01, limit=7)
    return {"limit": 7, "dead_ttl": 10}


def call_fire(b: Broker) -> dict[str, Any]:
    schedule = make_schedule(name="nightly", task="mod.fn", cron=None,
                             every=timedelta(seconds=1), tz=None, args=(7,), kwargs={},
                             policy="all", grace=timedelta(seconds=2), max_retries=4,
                             priority=7)
    tick = b.server_time_ms() // 1000 * 1000
    b.client.hset(b.keys.schedules, "last:nightly", tick - 1000)
    b.fire(schedule, [tick], tick - 1000)
    return {"schedule": "nightly", "version": schedule.version,
            "definition": schedule.definition, "name": "mod.fn",
            "payload": '{"args":[7],"kwargs":{}}', "max_retries": 4, "policy": "all",
            "grace_ms": 2000, "after_ms": tick - 1000, "priority": 7, "count": 1,
            "tick_ms": tick}  # fmt: skip


def call_cancel(b: Broker) -> dict[str, Any]:
    b.enqueue("t1")
    b.cancel("t1", only="pending")
    return {"task_id": "t1", "completed_ttl": b.completed_ttl_ms, "only_state": "pending"}


def call_ack_cancelled(b: Broker) -> dict[str, Any]:
    token = leased(b)
    b.cancel("t1")
    b.ack_cancelled("t1", token)
    return {"task_id": "t1", "token": token}


def call_start_flow(b: Broker) -> dict[str, Any]:
    step = ("mod.fn", '{"args":[1],"kwargs":{}}', 2, 5000, 7, "")
    Flows(b).start("f1", [StageSpec((step,), group=True, policy="partial")])
    return {"flow_id": "f1", "ttl_ms": b.completed_ttl_ms,
            "max_payload": b.max_payload_bytes, "stages": 1, "size": 1,
            "group": "1", "policy": "partial", "name": "mod.fn",
            "payload": '{"args":[1],"kwargs":{}}', "max_retries": 2, "result_ttl_ms": 5000,
            "priority": 7, "limit_key": ""}  # fmt: skip


def call_cancel_flow(b: Broker) -> dict[str, Any]:
    step = ("mod.fn", '{"args":[],"kwargs":{}}', 0, "", 5, "")
    Flows(b).start("f1", [StageSpec((step,), group=False, policy="fail")])
    Flows(b).cancel("f1")
    return {"flow_id": "f1", "completed_ttl": b.completed_ttl_ms}


def call_lift_rate_limits(b: Broker) -> dict[str, Any]:
    b.rate_limits = (RateLimit("slow", 1.0),)
    b.enqueue_many([NewTask(t, name="slow") for t in ("t1", "t2")])
    assert len(b.lease_many("w", 30, 2).tasks) == 1  # t2 throttled
    b.rate_limits = ()
    b.lift_rate_limits(["slow"], limit=9)
    return {"limit": 9, "names": "slow"}


CALLS: dict[str, Callable[[Broker], dict[str, Any]]] = {
    "enqueue": call_enqueue, "lease": call_lease, "heartbeat": call_heartbeat,
    "ack": call_ack, "fail": call_fail, "release": call_release, "reap": call_reap,
    "promote": call_promote, "retry_dead": call_retry_dead, "purge": call_purge,
    "fire": call_fire, "cancel": call_cancel, "ack_cancelled": call_ack_cancelled,
    "progress": call_progress, "start_flow": call_start_flow,
    "cancel_flow": call_cancel_flow, "lift_rate_limits": call_lift_rate_limits,
}  # fmt: skip


def record(client: redis.Redis, operation: str) -> tuple[Broker, dict[str, Any], Recorder]:
    """Run `operation`'s scenario with every script recorded; return its one recorded call."""
    broker = Broker(client, "test", events_retention=RETENTION)
    recorders = {}
    for name in OPERATIONS:
        recorders[name] = Recorder(broker.scripts.by_name(name), client, broker.keys)
        setattr(broker.scripts, name, recorders[name])
    expected = CALLS[operation](broker)
    runs = len(recorders[operation].calls)
    assert runs == 1, f"the {operation} call ran its script {runs} times, not once"
    return broker, expected, recorders[operation]


def test_every_script_that_changes_state_is_an_operation_with_a_test_call() -> None:
    names = {p.name[:-4] for p in resources.files("taskq").joinpath("lua").iterdir()}
    # Files named _x hold Lua that scripts include, not scripts.
    scripts = {n for n in names if not n.startswith("_")}
    emitting = {n for n in scripts if not re.search(r"Emits:\s+nothing", header(n))}
    assert emitting == set(OPERATIONS) == set(CALLS)


def test_every_event_a_script_emits_is_known_to_the_trace_checks_and_the_dashboard() -> None:
    emitted = {kind for path in resources.files("taskq").joinpath("lua").iterdir()
               for kind in EMITTED.findall(path.read_text(encoding="utf-8"))}
    assert "rescheduled" in emitted
    assert emitted == set(ALLOWED_FROM) == set(ALLOWED_TO)
    # TLC's trace check: an action, a stutter, the end of a trace or an Enqueue.
    assert emitted == {*tlatrace.MODELLED, *tlatrace.STUTTERS, "purged", "triggered"}
    model = resources.files("taskq").joinpath("web", "static", "model.js").read_text("utf-8")
    listed = re.search(r"EVENT_TYPES = \[(.*?)\];", model, re.DOTALL)
    assert listed is not None
    assert set(re.findall(r"'([a-z_]+)'", listed.group(1))) == emitted


# Scripts that change state without an event: each call's setup and call, returning the
# KEYS and ARGV it must pass, by the header's names.
def quiet_forget_schedule(b: Broker) -> tuple[dict[str, str], dict[str, Any]]:
    b.fire(make_schedule(name="tick", task="mod.fn", cron=None, every=timedelta(hours=1),
                         tz=None, args=(), kwargs={}, policy="all",
                         grace=timedelta(minutes=1), max_retries=3))
    b.forget_schedule("tick", 5)
    return {"schedules": b.keys.schedules}, {"schedule": "tick", "last_ms": 5}


def quiet_watch(b: Broker) -> tuple[dict[str, str], dict[str, Any]]:
    b.enqueue("t1")
    b.watch("t1")
    return {"task": b.keys.task("t1"), "done": b.keys.done("t1")}, {"mark": "1"}


QUIET_CALLS: dict[str, Callable[[Broker], tuple[dict[str, str], dict[str, Any]]]] = {
    "forget_schedule": quiet_forget_schedule, "watch": quiet_watch,
}


@pytest.mark.parametrize("script", sorted(QUIET_CALLS))
def test_a_script_with_no_event_is_passed_what_its_header_names(
    client: redis.Redis, script: str
) -> None:
    broker = Broker(client, "test", events_retention=RETENTION)
    recorder = Recorder(broker.scripts.by_name(script), client, broker.keys)
    setattr(broker.scripts, script, recorder)
    keys, args = QUIET_CALLS[script](broker)
    assert len(recorder.calls) == 1
    passed_keys, passed_args, emitted = recorder.calls[0]
    names = contract(script)
    assert dict(zip(names.keys, passed_keys, strict=True)) == keys
    assert {name: str(value) for name, value in zip(names.args, passed_args, strict=True)} \
        == {name: str(value) for name, value in args.items()}
    assert emitted == []


@pytest.mark.parametrize("operation", ["enqueue", "ack", "heartbeat"])
def test_a_batch_repeats_the_per_task_group_of_args(client: redis.Redis, operation: str) -> None:
    broker = Broker(client, "test", events_retention=RETENTION)
    broker.enqueue_many([NewTask(f"t{n}") for n in range(3)])
    held = [(t.task_id, t.token) for t in broker.lease_many("w", 30, 3).tasks]
    recorder = Recorder(broker.scripts.by_name(operation), client, broker.keys)
    setattr(broker.scripts, operation, recorder)
    if operation == "enqueue":
        broker.enqueue_many([NewTask(f"u{n}") for n in range(3)])
    elif operation == "ack":
        assert broker.ack_many(held) == [True, True, True]
    else:
        assert broker.heartbeat_many(held, 30) == [Renewal.HELD] * 3
    _, args, emitted = recorder.calls[0]
    names = contract(operation).args
    group = len(names) - names.index("count") - 1
    assert args[names.index("count")] == 3
    assert len(args) == names.index("count") + 1 + 3 * group
    assert len(emitted) == 3


@pytest.mark.parametrize("operation", OPERATIONS)
class TestEachOperation:
    def test_wrapper_passes_the_keys_the_header_names(
        self, client: redis.Redis, operation: str
    ) -> None:
        broker, _, recorder = record(client, operation)
        keys, _, _ = recorder.calls[0]
        names = contract(operation).keys
        assert len(keys) == len(names)
        assert keys == [getattr(broker.keys, name) for name in names]

    def test_wrapper_passes_the_args_the_header_names(
        self, client: redis.Redis, operation: str
    ) -> None:
        broker, expected, recorder = record(client, operation)
        _, args, _ = recorder.calls[0]
        names = contract(operation).args
        assert len(args) == len(names)
        expected |= {"prefix": broker.keys.prefix, "retention": RETENTION}
        for name, value in zip(names, args, strict=True):
            assert name in expected, f"{operation}.lua names ARGV {name!r}, which no test checks"
            want = expected[name]
            ok = want(value) if callable(want) else str(value) == str(want)
            assert ok, f"{operation} ARGV {name}: passed {value!r}, expected {want!r}"

    def test_every_key_passed_shares_the_queue_hash_tag(
        self, client: redis.Redis, operation: str
    ) -> None:
        broker, _, recorder = record(client, operation)
        keys, args, _ = recorder.calls[0]
        assert {hash_tag(k) for k in keys} == {"taskq:test"}
        assert args[0] == broker.keys.prefix and hash_tag(args[0]) == "taskq:test"
        stored = {text(k) for k in client.scan_iter()} - {QUEUES_KEY}
        assert stored and {hash_tag(k) for k in stored} == {"taskq:test"}

    def test_script_emits_the_event_its_header_names(
        self, client: redis.Redis, operation: str
    ) -> None:
        _, _, recorder = record(client, operation)
        emits = re.search(r"^\s*Emits:\s+(\w+)", header(operation), re.MULTILINE)
        assert emits is not None
        _, _, emitted = recorder.calls[0]
        assert [e.type for e in emitted] == [emits.group(1)]

    def test_header_has_returns_and_emits_lines(self, operation: str) -> None:
        for label in ("Returns:", "Emits:"):
            assert re.search(rf"^\s*{label}\s+\S", header(operation), re.MULTILINE), label

    def test_script_uses_exactly_the_keys_and_args_its_header_numbers(self, operation: str) -> None:
        body = code(operation)
        used: dict[str, set[int]] = {"KEYS": set(), "ARGV": set()}
        for kind, index in TOKEN_USE.findall(body):
            used[kind].add(int(index))
        terms = contract(operation)
        assert used["KEYS"] == set(range(1, len(terms.keys) + 1))
        if "ARGV[base" not in body:
            assert used["ARGV"] == set(range(1, len(terms.args) + 1))
            return
        # A batch script reads its fixed ARGV by number, the last of them the number of
        # groups, and each group's values by offset.
        fixed = max(used["ARGV"])
        assert terms.args[fixed - 1] in ("count", "limits", "stages")
        assert used["ARGV"] == set(range(1, fixed + 1))
        group = len(terms.args) - fixed
        if operation == "start_flow":  # three values per stage, then six per step
            per_stage = terms.args.index("name") - fixed
            assert (per_stage, group - per_stage) == (3, 6)
            group = 6
        offsets = {int(n or 0) for n in re.findall(r"ARGV\[base(?: \+ (\d+))?\]", body)}
        assert offsets == set(range(group))

    def test_script_reads_the_clock_once_and_only_via_server_now_ms(self, operation: str) -> None:
        assert '--- @include "_common"' in lua(operation)
        source = code(operation)
        assert not TIME_CALL.search(source)
        assert source.count("server_now_ms()") == 1
        assert "math.random" not in source


def test_common_is_the_one_place_that_reads_time() -> None:
    common = code("_common")
    assert "local function server_now_ms()" in common
    assert len(TIME_CALL.findall(common)) == 2  # the clock, and the event log's epoch



def test_the_scripts_limits_are_taskq_limits_in_script_units() -> None:
    table = re.search(r"local LIMITS = \{(.*?)\n\}", code("_common"), re.DOTALL)
    assert table is not None
    lua_limits = {name: int(value) for name, value in re.findall(r"(\w+) = (\d+)", table[1])}
    # One Lua maximum stands for each pair of arguments that share a range.
    assert limits.BACKOFF_BASE.high == limits.BACKOFF_MAX.high
    assert limits.COMPLETED_TTL.high == limits.DEAD_TTL.high
    assert limits.LEASE_COUNT.high == limits.BATCH_SIZE.high
    assert lua_limits == {
        "delay_ms": limits.DELAY.high * 1000, "run_at_ms": limits.RUN_AT_MS_MAX,
        "lease_ms": limits.LEASE_SECONDS.high * 1000,
        "backoff_ms": limits.BACKOFF_MAX.high * 1000, "ttl_ms": limits.DEAD_TTL.high * 1000,
        "idempotency_ttl": limits.IDEMPOTENCY_TTL.high,
        "retention": limits.EVENTS_RETENTION.high, "max_retries": limits.MAX_RETRIES.high,
        "count": limits.LEASE_COUNT.high, "limit": limits.LIMIT.high, "jitter_seed": 2**31 - 2,
        "definition_bytes": limits.MAX_DEFINITION_BYTES, "priority": limits.PRIORITY.high,
        "interval_us": rates.MAX_INTERVAL_US, "burst": rates.MAX_BURST,
        "concurrency": concurrency.MAX_CONCURRENCY,
        "payload_bytes": limits.MAX_PAYLOAD_BYTES.high,
    }  # fmt: skip
    # The priority whose tasks wait on the plain ready list, as QueueKeys.ready_at has it.
    default = re.search(r"^local DEFAULT_PRIORITY = (\d+)$", code("_common"), re.MULTILINE)
    assert default is not None and int(default[1]) == limits.PRIORITY.default


HELPER_FILES = ("_slots", "_rates", "_ended", "_flow", "_cancel")
DEFINED = re.compile(r"^local (?:function )?(\w+)", re.MULTILINE)
INCLUDED = re.compile(r'^--- @include "(\w+)"$', re.MULTILINE)
SCRIPTS = sorted(p.name.removesuffix(".lua") for p in resources.files("taskq").joinpath("lua")
                 .iterdir() if p.name.endswith(".lua") and not p.name.startswith("_"))


def includes(name: str) -> set[str]:
    """The files `name` includes, directly or through another included file."""
    found = set(INCLUDED.findall(lua(name)))
    for included in list(found):
        found |= includes(included)
    return found


def calls_into(lua_code: str) -> set[str]:
    """The helper files that define a name `lua_code` uses."""
    return {f for f in HELPER_FILES
            if any(re.search(rf"\b{name}\b", lua_code) for name in DEFINED.findall(code(f)))}


@pytest.mark.parametrize("script", SCRIPTS)
def test_a_script_includes_a_helper_file_only_if_it_calls_into_it(script: str) -> None:
    # Every call of a script defines each helper its text holds, so a file of helpers it
    # never uses would cost each call for nothing (and one it uses must be there).
    wanted = calls_into(code(script))
    while True:  # and the helper files its helpers use, in turn
        more = set().union(*(calls_into(code(f)) for f in wanted)) - wanted
        if not more:
            break
        wanted |= more
    assert includes(script) & set(HELPER_FILES) == wanted
