"""Memory: Redis bytes per queued task (ready, delayed) and per completed task kept for
its TTL, for taskq and each peer on the same server, and taskq's event log apart."""

from __future__ import annotations

import contextlib
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass

import redis

from bench.drain import stats_field, worker_argv
from bench.harness import (
    BenchError,
    Child,
    Options,
    Section,
    Server,
    drain_timeout,
    per_task,
    run_all,
    used_memory,
)
from bench.peers import arq_env
from bench.peers.driver import bin_dir
from bench.peers.fill import ARGUMENT, chunks
from bench.peers.memory import (
    DELAY_SECONDS,
    PRODUCERS,
    SYSTEMS,
    System,
    peer_completed,
    peer_queued,
)
from bench.tasks import make_app
from taskq import App, Settings
from taskq.keys import QueueKeys

# The facts a task record can keep; no peer keeps a fencing token, so the target's
# comparison asks a peer for the other three.
SAME_FACTS = frozenset({"state", "retries", "times"})
FACTS = ("state", "retries", "token", "times")
KEPT = "bench.keep_sync"
# Calls per `enqueue_many`: its handles are held until it returns.
TASKQ_CALLS = 10_000
# Handlers of the worker that drains the completed run.
CONCURRENCY = 16
# Redis keeps a hash as a compact listpack only while every value is at most
# hash-max-listpack-value bytes (64 by default); a record holding a task's JSON arguments
# passes that with a 100-byte argument. This is the operator's setting the bench also tries.
LISTPACK_VALUE = 256


def facts_text(facts: frozenset[str]) -> str:
    """The facts a system keeps, in a fixed order, or `none`."""
    kept = [name for name in FACTS if name in facts]
    return ", ".join(kept) or "none"


def sizing_bytes(tasks: int, retention: int, per_task: float, per_event: float) -> float:
    """Redis memory for `tasks` queued tasks with a full event log of `retention` events
    (the log holds at most that many, however many tasks made them)."""
    return tasks * per_task + retention * per_event


def _usage(server: Server, key: str) -> int:
    return int(server.client.memory_usage(key, samples=0) or 0)


@dataclass(frozen=True)
class Queued:
    """One taskq run: bytes per task in all, the event log's bytes and events, and the
    MEMORY USAGE of the parts of one task."""

    per_task: float
    log_bytes: int
    log_events: int
    parts: dict[str, float]
    n: int

    @property
    def per_event(self) -> float:
        return self.log_bytes / self.log_events if self.log_events else 0.0

    @property
    def beyond_log(self) -> float:
        return self.per_task - self.log_bytes / self.n


def _taskq_app(server: Server, queue: str) -> App:
    return make_app(queue, Settings.from_env({}, redis_url=server.url))


def _log(server: Server, keys: QueueKeys) -> tuple[int, int]:
    return _usage(server, keys.events), int(server.client.xlen(keys.events))


def taskq_queued(server: Server, n: int, delay: float) -> Queued:
    """N tasks of the bench's one-argument task through `enqueue_many`."""
    server.flush()
    queue = f"mem-{uuid.uuid4().hex[:8]}"
    app = _taskq_app(server, queue)
    keys = QueueKeys(queue)
    task = app.tasks[KEPT]
    app.broker.counts()  # the scripts are loaded before the first figure
    before = used_memory(server)
    first = ""
    for size in chunks(n, TASKQ_CALLS):
        handles = task.enqueue_many([task.call(ARGUMENT, delay=delay) for _ in range(size)])
        first = first or handles[0].task_id
    # A connection's buffers count in used_memory: only the tasks' bytes may be left.
    app.broker.client.close()
    after = used_memory(server)
    log_bytes, log_events = _log(server, keys)
    index = keys.delayed if delay else keys.ready
    parts = {"record": float(_usage(server, f"{keys.prefix}task:{first}")),
             "index": _usage(server, index) / n}
    idempotent = task.enqueue(ARGUMENT, idempotency_key=uuid.uuid4().hex)
    idem = str(server.client.hget(f"{keys.prefix}task:{idempotent.task_id}", "idempotency_key"))
    parts["idempotency key"] = float(_usage(server, f"{keys.prefix}idem:{idem}"))
    app.broker.client.close()
    return Queued(per_task(before, after, n), log_bytes, log_events, parts, n)


def taskq_completed(server: Server, n: int) -> Queued:
    """N tasks drained by one `taskq worker`, each record kept for completed_ttl."""
    server.flush()
    queue = f"mem-{uuid.uuid4().hex[:8]}"
    app = _taskq_app(server, queue)
    keys = QueueKeys(queue)
    task = app.tasks[KEPT]
    app.broker.counts()
    before = used_memory(server)
    first = ""
    for size in chunks(n, TASKQ_CALLS):
        handles = task.enqueue_many([task.call(ARGUMENT) for _ in range(size)])
        first = first or handles[0].task_id
    worker = Child(worker_argv(queue, CONCURRENCY), server.env(), server.logs / f"{queue}.log")
    try:
        run_all(stats_field(server, queue, "completed:completed"), n, worker,
                drain_timeout(n))
    finally:
        worker.stop()
    app.broker.client.close()
    after = used_memory(server)
    log_bytes, log_events = _log(server, keys)
    record = float(_usage(server, f"{keys.prefix}task:{first}"))
    state = server.client.hget(f"{keys.prefix}task:{first}", "state")
    if state != "completed":
        raise BenchError(f"the first task's record is {state!r} after the drain, not completed")
    return Queued(per_task(before, after, n), log_bytes, log_events, {"record": record}, n)


@contextlib.contextmanager
def listpack_values(client: redis.Redis, limit: int) -> Iterator[None]:
    """The server's hash-max-listpack-value set to `limit` for the block, then restored;
    by its name before Redis 7.0, hash-max-ziplist-value, where the server knows only
    that one."""
    for name in ("hash-max-listpack-value", "hash-max-ziplist-value"):
        found = client.config_get(name)
        if name in found:
            break
    else:
        raise BenchError("the server has neither hash-max-listpack-value nor "
                         "hash-max-ziplist-value")
    before = str(found[name])
    client.config_set(name, limit)
    try:
        yield
    finally:
        client.config_set(name, before)


def _listpack_rows(server: Server, n: int, section: Section) -> Queued | None:
    """taskq and RQ, whose records are hashes, with the operator's listpack setting raised;
    taskq's run, for the sizing advice."""
    rq = next(s for s in SYSTEMS if s.name == "rq")
    try:
        with listpack_values(server.client, LISTPACK_VALUE):
            taskq = taskq_queued(server, n, 0.0)
            peer = peer_queued(server, rq, bin_dir(rq.own_venv), n, 0.0)
    except (BenchError, OSError, subprocess.TimeoutExpired, redis.RedisError) as e:
        section.fail(f"hash-max-listpack-value {LISTPACK_VALUE}", BenchError(str(e)))
        return None
    setting = f"Redis with `hash-max-listpack-value {LISTPACK_VALUE}`"
    section.rows.append([f"taskq, {setting}", facts_text(frozenset(FACTS)),
                         _b(taskq.per_task), "", ""])
    section.rows.append([f"RQ, {setting}", facts_text(rq.facts), _b(peer), "", ""])
    section.notes.append(
        f"With `hash-max-listpack-value {LISTPACK_VALUE}` a ready taskq record is "
        f"{taskq.parts['record']:,.0f} B by MEMORY USAGE (a listpack), where the default "
        f"64 makes it a hashtable.")
    for line in (*(" | ".join(row) for row in section.rows[-2:]), section.notes[-1]):
        print(f"   {line}", file=sys.stderr, flush=True)
    return taskq


def _b(value: float | None) -> str:
    return "" if value is None else f"{value:,.0f} B"


def _peer_row(server: Server, system: System, n: int, done: int, section: Section) -> float | None:
    """The peer's row; its ready bytes per task, or None if it could not be measured."""
    try:
        directory = bin_dir(system.own_venv)
        if system.own_venv:
            section.versions[system.name] = arq_env.version(directory)
        ready = peer_queued(server, system, directory, n, 0.0)
        delayed = (None if system.delayed_elsewhere
                   else peer_queued(server, system, directory, n, DELAY_SECONDS))
        completed = (peer_completed(server, system, directory, done)
                     if system.completed else None)
    except (BenchError, OSError, subprocess.TimeoutExpired, redis.RedisError) as e:
        section.fail(system.title, BenchError(str(e)))
        return None
    section.rows.append([system.title, facts_text(system.facts), _b(ready),
                         system.delayed_elsewhere or _b(delayed),
                         _b(completed) if system.completed else "nothing kept"])
    print(f"   {' | '.join(section.rows[-1])}", file=sys.stderr, flush=True)
    return ready


def _taskq_rows(server: Server, n: int, done: int, section: Section) -> Queued | None:
    try:
        ready = taskq_queued(server, n, 0.0)
        delayed = taskq_queued(server, n, DELAY_SECONDS)
        completed = taskq_completed(server, done)
    except (BenchError, redis.RedisError) as e:
        section.fail("taskq", e)
        return None
    facts = facts_text(frozenset(FACTS))
    section.rows.append(["**taskq**, all of it", facts, f"**{_b(ready.per_task)}**",
                         _b(delayed.per_task), _b(completed.per_task)])
    section.rows.append(["taskq, beyond its event log", facts, _b(ready.beyond_log),
                         _b(delayed.beyond_log), _b(completed.beyond_log)])
    section.rows.append(["taskq's event log, per event held", "", _b(ready.per_event),
                         _b(delayed.per_event), _b(completed.per_event)])
    section.notes.append(
        f"taskq's parts, by MEMORY USAGE: a ready task's record (hash) "
        f"{ready.parts['record']:,.0f} B, its entry in the ready list "
        f"{ready.parts['index']:,.0f} B, in the delayed ZSET {delayed.parts['index']:,.0f} B; "
        f"an idempotency key, when a task has one, {ready.parts['idempotency key']:,.0f} B "
        f"more; a completed record {completed.parts['record']:,.0f} B; the event log held "
        f"{ready.log_events:,} events after {n:,} enqueues "
        f"({ready.log_bytes / 1e6:,.1f} MB, {ready.per_event:,.0f} B each), "
        f"{completed.log_events:,} after the drain of {done:,}.")
    for line in (*(" | ".join(row) for row in section.rows[-3:]), section.notes[-1]):
        print(f"   {line}", file=sys.stderr, flush=True)
    return ready


def _verdict(taskq: Queued | None, peers: dict[str, float], section: Section) -> None:
    if taskq is None:
        return
    section.figures["memory-taskq-ready"] = taskq.per_task
    same = {s.title: peers[s.title] for s in SYSTEMS
            if s.title in peers and s.facts >= SAME_FACTS}
    if same:
        title = min(same, key=lambda t: same[t])
        section.figures["memory-peer-ready"] = same[title]
        section.labels["memory-peer-ready"] = title
    if peers:
        title = min(peers, key=lambda t: peers[t])
        section.figures["memory-leanest-ready"] = peers[title]
        section.labels["memory-leanest-ready"] = title


def measure(server: Server, options: Options, known: dict[str, float]) -> Section:
    n, done = options.scaled(50), options.scaled(1)
    section = Section("memory", f"Redis memory per task ({n:,} queued, {done:,} completed)",
                      ["system", "facts kept per task", "ready bytes/task",
                       "delayed bytes/task", "completed bytes/task"])
    print("   taskq", file=sys.stderr, flush=True)
    taskq = _taskq_rows(server, n, done, section)
    peers: dict[str, float] = {}
    for system in SYSTEMS:
        print(f"   {system.title}", file=sys.stderr, flush=True)
        ready = _peer_row(server, system, n, done, section)
        if ready is not None:
            peers[system.title] = ready
    print(f"   hash-max-listpack-value {LISTPACK_VALUE}", file=sys.stderr, flush=True)
    compact = _listpack_rows(server, n, section)
    _verdict(taskq, peers, section)
    section.notes.extend(_notes(n, done, taskq))
    if taskq is not None:
        section.notes.append(_sizing(taskq, compact))
    return section


def _notes(n: int, done: int, taskq: Queued | None) -> list[str]:
    notes = [
        f"Each figure is `used_memory` (INFO memory) after minus before, divided by the "
        f"tasks, on a server flushed before each run: {n:,} tasks each carrying one "
        f"{len(ARGUMENT)}-byte string argument, ready, then (a fresh run) delayed "
        f"{DELAY_SECONDS:,.0f} s; completed: {done:,} such tasks drained by the system's "
        f"worker, its workers stopped, so what is left is what it keeps of finished jobs. "
        f"Each peer is filled by {PRODUCERS} producer processes at once, each sending its "
        f"share. "
        f"taskq enqueues through `Task.enqueue_many` (1,000 per script call) and drains "
        f"with `taskq worker -c {CONCURRENCY}`, results kept (the default, for "
        f"TASKQ_COMPLETED_TTL_SECONDS).",
        "Facts: state (a field saying pending, running, done), retries (a count of tries "
        "kept with the task), token (a fencing token per lease, which only taskq keeps), "
        "times (when it was created, enqueued or run). The target compares taskq with the "
        "leanest peer that keeps state, retries and times.",
    ]
    for system in SYSTEMS:
        kept = system.completed[1] if system.completed else "nothing by default"
        notes.append(f"{system.title}: filled by {system.bulk}; delayed tasks: "
                     f"{system.delayed}; a finished job: {kept}.")
    notes.append("Dramatiq (Results middleware off), Huey (a None return is not stored) "
                 "and taskiq (no result backend) keep nothing of a finished job by default. "
                 "The completed runs drain with the peers' worker commands of the peers "
                 "section (RQ's SimpleWorker).")
    return notes


def _sizing(taskq: Queued, compact: Queued | None) -> str:
    retention = Settings.from_env({}).events_retention
    log = retention * taskq.per_event
    million = sizing_bytes(1_000_000, retention, taskq.beyond_log, taskq.per_event)
    text = (f"Sizing: N queued tasks need about N x {taskq.beyond_log:,.0f} B, plus the "
            f"event log's {taskq.per_event:,.0f} B per event held, at most "
            f"TASKQ_EVENTS_RETENTION events ({retention:,} by default: {log / 1e6:,.0f} MB); "
            f"1,000,000 queued tasks with the default retention: {million / 1e6:,.0f} MB")
    if compact is None:
        return text + "."
    lean = sizing_bytes(1_000_000, retention, compact.beyond_log, taskq.per_event)
    return (text + f"; with `hash-max-listpack-value {LISTPACK_VALUE}`, N x "
            f"{compact.beyond_log:,.0f} B: {lean / 1e6:,.0f} MB.")
