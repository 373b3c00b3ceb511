"""The Redis ceiling on the bench's server, and what taskq asks of Redis per task."""

from __future__ import annotations

import json
import os
import signal
import time
import uuid
from collections.abc import Callable
from typing import Any

from bench.drain import check_drained, fill, stats_field
from bench.harness import (
    BenchError,
    Child,
    Options,
    Section,
    Server,
    Stat,
    drain_timeout,
    python_module,
    rate,
    time_drain,
)
from taskq.limits import EVENTS_RETENTION

PIPELINE = 100
DEFAULT_CONCURRENCY = 64
# Tasks per lease and per ack call in the script timing: what a process of the README's
# `def` command leases a turn (half its prefetch of 112).
SCRIPT_BATCH = 56
# A log this short is at its retention from the first thousand events on.
SHORT_RETENTION = 1000


def _noop_rates(server: Server, n: int) -> tuple[float, float, float]:
    """PING and no-op EVALSHA one at a time, and no-op EVALSHA pipelined, per second."""
    client = server.client
    sha = client.script_load("return 1")
    start = time.perf_counter()
    for _ in range(n):
        client.ping()
    ping = n / (time.perf_counter() - start)
    start = time.perf_counter()
    for _ in range(n):
        client.evalsha(sha, 0)
    single = n / (time.perf_counter() - start)
    start = time.perf_counter()
    batches = max(1, n * 10 // PIPELINE)
    for _ in range(batches):
        pipe = client.pipeline(transaction=False)
        for _ in range(PIPELINE):
            pipe.evalsha(sha, 0)
        pipe.execute()
    piped = batches * PIPELINE / (time.perf_counter() - start)
    return ping, single, piped


def _delta(before: dict[str, Any], after: dict[str, Any]) -> dict[str, tuple[int, int]]:
    """Calls and microseconds per command between two `INFO all` replies."""
    found: dict[str, tuple[int, int]] = {}
    for key, stats in after.items():
        if key.startswith("cmdstat_") and isinstance(stats, dict):
            old = before.get(key, {"calls": 0, "usec": 0})
            calls = int(stats["calls"]) - int(old["calls"])
            if calls:
                found[key.removeprefix("cmdstat_")] = (calls, int(stats["usec"]) - int(old["usec"]))
    return found


def _counted(read: Callable[[], int]) -> tuple[Callable[[], int], list[int]]:
    calls = [0]

    def counting() -> int:
        calls[0] += 1
        return read()

    return counting, calls


def _per_task(server: Server, n: int, concurrency: int) -> dict[str, Any]:
    """Drain `n` no-op tasks through one counting worker; what Redis and the client saw."""
    server.flush()
    queue = f"ceiling-{uuid.uuid4().hex[:8]}"
    broker = fill(server, queue, "bench.noop_async", n)
    out = server.logs / f"{queue}-counts.json"
    before = server.client.info("all")
    worker = Child(python_module("bench.counting_worker", str(out), "--app", "bench.tasks:app",
                                 "--queue", queue, "--concurrency", str(concurrency)),
                   server.env(), server.logs / f"{queue}.log")
    after: dict[str, Any] = {}

    def snapshot() -> None:
        after.update(server.client.info("all"))
        os.kill(worker.pid, signal.SIGUSR1)

    count, polls = _counted(stats_field(server, queue, "completed:completed"))
    try:
        time_drain(count, n, [worker], drain_timeout(n), on_done=snapshot)
        check_drained(server, broker, n)
        deadline = time.monotonic() + 10
        while not out.exists() and time.monotonic() < deadline:
            time.sleep(0.01)
        if not out.exists():
            raise BenchError(f"the counting worker wrote no counts: {worker.tail()}")
        client_side: dict[str, Any] = json.loads(out.read_text())
    finally:
        worker.stop()
    commands = _delta(before, after)
    # Our own reads during the drain: the polls (HGET) and the first INFO.
    own = polls[0] - 1
    commands["hget"] = (commands.get("hget", (0, 0))[0] - own, commands.get("hget", (0, 0))[1])
    commands.pop("info", None)
    total = int(after["total_commands_processed"]) - int(before["total_commands_processed"])
    cpu = sum(float(after[k]) - float(before[k]) for k in ("used_cpu_sys", "used_cpu_user"))
    return {"client": client_side, "commands": commands, "total": total - own - 1,
            "cpu": cpu}


def measure(server: Server, options: Options, known: dict[str, float]) -> Section:
    section = Section("ceiling", "The Redis ceiling, and taskq's Redis work per task",
                      ["what", "figure (median)", "spread"])
    n = options.scaled(1 / 4, floor=200)
    ping, single, piped = Stat(), Stat(), Stat()
    for _ in range(options.repeats):
        a, b, c = _noop_rates(server, n)
        ping.add(a)
        single.add(b)
        piped.add(c)
    section.rows.append(["PING, one at a time (redis-py)", rate(ping.median), ping.spread()])
    section.rows.append(["no-op EVALSHA, one at a time", rate(single.median), single.spread()])
    section.rows.append([f"no-op EVALSHA, pipelined by {PIPELINE}", rate(piped.median),
                         piped.spread()])
    section.figures["redis-evalsha"] = single.median
    section.figures["redis-evalsha-pipelined"] = piped.median
    concurrency = int(known.get("drain-best-concurrency", DEFAULT_CONCURRENCY))
    try:
        _per_task_rows(section, server, options, concurrency)
    except BenchError as e:
        section.fail("per-task counts", e)
    try:
        _script_rows(section, server, options)
    except BenchError as e:
        section.fail("script time", e)
    return section


def script_us(server: Server, n: int, retention: int) -> tuple[float, float]:
    """Redis time inside the lease and inside the ack script per task (EVALSHA usec),
    one client leasing `n` tasks SCRIPT_BATCH at a time and then acking them likewise,
    on a queue whose event log keeps `retention` events."""
    server.flush()
    broker = fill(server, f"scripts-{uuid.uuid4().hex[:8]}", "bench.noop_sync", n, retention)

    def usec() -> int:
        stats = server.client.info("commandstats").get("cmdstat_evalsha", {})
        return int(stats.get("usec", 0))

    server.client.config_resetstat()
    held: list[tuple[str, int]] = []
    while len(held) < n:
        batch = broker.lease_many("bench", 300.0, SCRIPT_BATCH).tasks
        if not batch:
            raise BenchError(f"only {len(held)} of {n} tasks could be leased")
        held += [(task.task_id, task.token) for task in batch]
    lease = usec()
    server.client.config_resetstat()
    for i in range(0, n, SCRIPT_BATCH):
        if not all(broker.ack_many(held[i:i + SCRIPT_BATCH])):
            raise BenchError("an ack of a task just leased was refused")
    ack = usec()
    kept = server.client.xlen(broker.keys.events)
    if kept != min(retention, 3 * n):
        raise BenchError(f"the log kept {kept} events of {3 * n}, retention {retention}")
    return lease / n, ack / n


def _script_rows(section: Section, server: Server, options: Options) -> None:
    # At least a full short log's worth: the enqueues alone then bring it to its retention.
    n = options.scaled(1 / 2, floor=SHORT_RETENTION)
    for title, retention in (("below its retention", EVENTS_RETENTION.default),
                             (f"at its retention ({SHORT_RETENTION:,} events kept)",
                              SHORT_RETENTION)):
        lease, ack = Stat(), Stat()
        for _ in range(options.repeats):
            a, b = script_us(server, n, retention)
            lease.add(a)
            ack.add(b)
        section.rows.append([
            f"Redis time in the lease + ack scripts per task, the log {title}",
            f"{lease.median:.1f} + {ack.median:.1f} µs", f"{lease.spread()} / {ack.spread()}"])
    section.notes.append(
        f"The script rows time the two scripts alone: one client leases {n:,} no-op "
        f"tasks {SCRIPT_BATCH} at a time, then acks them likewise, on a flushed server. "
        f"Each script appends its events and then trims the log once per call.")


def _per_task_rows(section: Section, server: Server, options: Options, concurrency: int) -> None:
    n = options.n
    runs = [_per_task(server, n, concurrency) for _ in range(options.repeats)]

    def median_of(get: Callable[[dict[str, Any]], float]) -> Stat:
        stat = Stat()
        for run in runs:
            stat.add(get(run) / n)
        return stat

    trips = median_of(lambda r: r["client"]["round_trips"])
    sent = median_of(lambda r: sum(r["client"]["commands"].values()))
    evalsha = median_of(lambda r: r["commands"].get("evalsha", (0, 0))[0])
    total = median_of(lambda r: r["total"])
    # A script's usec includes the commands it calls, which commandstats also lists.
    usec = median_of(lambda r: r["commands"].get("evalsha", (0, 0))[1])
    cpu = median_of(lambda r: r["cpu"] * 1e6)
    where = f"one `taskq worker`, {n:,} `async def` no-op tasks, concurrency {concurrency}"
    section.rows.extend([
        [f"round trips per task (client side; {where})", f"{trips.median:.3f}", trips.spread()],
        ["commands sent per task (client side)", f"{sent.median:.3f}", sent.spread()],
        ["EVALSHA calls per task (INFO commandstats)", f"{evalsha.median:.3f}",
         evalsha.spread()],
        ["commands processed per task, script calls included (INFO stats)",
         f"{total.median:.1f}", total.spread()],
        ["Redis time in scripts per task (EVALSHA usec)", f"{usec.median:.1f} µs",
         usec.spread()],
        ["Redis CPU per task (used_cpu_sys + user)", f"{cpu.median:.1f} µs", cpu.spread()],
        ["taskq's Redis-bound ceiling on one queue (1 / CPU per task)",
         rate(1e6 / cpu.median) if cpu.median else "", ""],
    ])
    section.figures["per-task-round-trips"] = trips.median
    section.figures["per-task-evalsha"] = evalsha.median
    last = runs[-1]
    sent_by = sorted(last["client"]["commands"].items(), key=lambda kv: -kv[1])
    inside = sorted(last["commands"].items(), key=lambda kv: -kv[1][0])
    section.notes.append(
        "Client side (one run): " + ", ".join(f"{name} {calls / n:.3f}" for name, calls in
                                               sent_by[:8]) + " per task.")
    section.notes.append(
        "Server side, every command including those scripts call (one run): "
        + ", ".join(f"{name} {calls / n:.2f}" for name, (calls, _) in inside[:14])
        + " per task.")
    section.notes.append(
        "Client side counts come from the worker's own redis-py (`bench/counting_worker.py` "
        "runs the same `taskq worker` CLI in-process and counts each send); the server "
        "side from `INFO` before the worker starts and the moment the last task completes, "
        "less the bench's own polling reads. Worker start-up is included.")
