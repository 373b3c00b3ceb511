"""Heartbeats at scale: `taskq worker` processes holding thousands of long-running tasks,
and what their beats cost Redis (CPU, round trips, event log) and the workers."""

from __future__ import annotations

import hashlib
import math
import os
import time
import uuid
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from bench.harness import BenchError, Child, Options, Section, Server, Stat, python_module
from bench.heartbeat_probes import ScriptCost, probe
from taskq import Broker, NewTask
from taskq.codec import args_payload
from taskq.keys import QueueKeys
from taskq.limits import EVENTS_RETENTION, HISTORY_SCAN
from taskq.limits import LEASE_SECONDS as DEFAULT_LEASE
from taskq.scripts import source

# A short lease makes a beat (lease/3) a second, so a window of many beats is short.
LEASE_SECONDS = 3.0
BEAT_SECONDS = LEASE_SECONDS / 3
WINDOW_BEATS = 10
QUICK_WINDOW_BEATS = 3
# Beats whose top-level commands are logged one by one (SLOWLOG at 0 us), after the
# timed window so that the log's own cost is not in its CPU figures.
CENSUS_BEATS = 2
IDLE_BEATS = 2
START_TIMEOUT = 60.0
KINDS = {"async": ("bench.hold_async", "`async def`"), "sync": ("bench.hold_sync", "`def`")}


@dataclass(frozen=True)
class Config:
    """One worker command: its handler kind and `--processes`; `--concurrency` is the
    held tasks' share of each process."""

    kind: str
    processes: int


CONFIGS = (Config("async", 4), Config("async", 1), Config("sync", 4))
QUICK_CONFIGS = (Config("async", 2),)


@dataclass(frozen=True)
class Window:
    """What `held` leases in hand cost over `beats` beat intervals."""

    held: int
    beats: float
    redis_cpu: float  # seconds
    worker_cpu: float  # seconds, every process of the worker command
    renewals: int  # heartbeat events appended
    commands: dict[str, tuple[int, int]]  # command -> (calls, usec), nested ones included
    stream_bytes: int
    stream_length: int
    idle_cpu: float  # Redis CPU seconds a beat interval costs with nothing running

    @property
    def seconds(self) -> float:
        return self.beats * BEAT_SECONDS

    @property
    def renewal_cpu(self) -> float:
        """Redis CPU seconds per renewal, above what the idle server spends."""
        return (self.redis_cpu - self.idle_cpu * self.beats) / max(1, self.renewals)

    def usec(self, *commands: str) -> int:
        return sum(self.commands.get(c, (0, 0))[1] for c in commands)


@dataclass(frozen=True)
class Census:
    """The top-level commands (round trips) of `beats` beat intervals, by script or
    command. Only counted: a SLOWLOG that logs every command logs the scripts' own too,
    which slows the scripts it times."""

    beats: float
    calls: Counter[str]


@dataclass(frozen=True)
class Run:
    window: Window
    census: Census


def script_names() -> dict[str, str]:
    """SHA1 -> operation name of every script taskq loads."""
    names = {}
    for entry in resources.files("taskq").joinpath("lua").iterdir():
        name = Path(entry.name).stem
        if entry.name.endswith(".lua") and not name.startswith("_"):
            names[hashlib.sha1(source(name).encode()).hexdigest()] = name
    return names


def tree_cpu_seconds(root: int) -> float:
    """User + system CPU seconds of `root` and every live process descended from it (a
    worker pool's copies run in sessions of their own, so their parent links find them)."""
    parents: dict[int, int] = {}
    spent: dict[int, float] = {}
    ticks = 1.0 / os.sysconf("SC_CLK_TCK")
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        pid = int(stat.parent.name)
        parents[pid] = int(fields[1])
        spent[pid] = (int(fields[11]) + int(fields[12])) * ticks
    family, grew = {root}, True
    while grew:
        more = {pid for pid, parent in parents.items() if parent in family} - family
        family |= more
        grew = bool(more)
    return sum(spent.get(pid, 0.0) for pid in family)


def redis_cpu_seconds(server: Server) -> float:
    cpu = server.client.info("cpu")
    return float(cpu["used_cpu_sys"]) + float(cpu["used_cpu_user"])


def command_stats(server: Server) -> dict[str, tuple[int, int]]:
    stats = server.client.info("commandstats")
    return {k.removeprefix("cmdstat_"): (int(v["calls"]), int(v["usec"]))
            for k, v in stats.items()}


def hold(server: Server, queue: str, name: str, n: int, seconds: float) -> Broker:
    broker = Broker(server.client, queue)
    payload = args_payload((seconds,), {})
    broker.enqueue_many([NewTask(uuid.uuid4().hex, name=name, payload=payload)
                         for _ in range(n)])
    return broker


def wait_held(server: Server, keys: QueueKeys, n: int, worker: Child) -> None:
    deadline = time.monotonic() + START_TIMEOUT
    while (held := int(server.client.zcard(keys.leased))) < n:
        if not worker.alive():
            raise BenchError(f"worker exited with {worker.process.returncode} holding "
                             f"{held} of {n}: {worker.tail()}")
        if time.monotonic() > deadline:
            raise BenchError(f"only {held} of {n} tasks leased after {START_TIMEOUT:.0f}s: "
                             f"{worker.tail()}")
        time.sleep(0.05)


def _renewals(server: Server, keys: QueueKeys) -> int:
    return int(server.client.hget(keys.events + ":stats", "heartbeat:running") or 0)


def idle_cpu(server: Server) -> float:
    """Redis CPU seconds of one beat interval with no client but this one (its cron)."""
    before = redis_cpu_seconds(server)
    began = time.monotonic()
    time.sleep(IDLE_BEATS * BEAT_SECONDS)
    spent = redis_cpu_seconds(server) - before
    return spent / ((time.monotonic() - began) / BEAT_SECONDS)


def measure_window(server: Server, keys: QueueKeys, n: int, worker: Child,
                   beats: int, idle: float) -> Window:
    """Deltas over `beats` beat intervals with every task in hand."""
    commands, renewals = command_stats(server), _renewals(server, keys)
    redis_cpu, worker_cpu = redis_cpu_seconds(server), tree_cpu_seconds(worker.pid)
    began = time.monotonic()
    time.sleep(beats * BEAT_SECONDS)
    redis_cpu = redis_cpu_seconds(server) - redis_cpu
    worker_cpu = tree_cpu_seconds(worker.pid) - worker_cpu
    elapsed = time.monotonic() - began
    renewals = _renewals(server, keys) - renewals
    after = command_stats(server)
    deltas = {k: (calls - commands.get(k, (0, 0))[0], usec - commands.get(k, (0, 0))[1])
              for k, (calls, usec) in after.items()}
    memory = int(server.client.memory_usage(keys.events, samples=0) or 0)
    return Window(n, elapsed / BEAT_SECONDS, redis_cpu, worker_cpu, renewals, deltas,
                  memory, int(server.client.xlen(keys.events)), idle)


def take_census(server: Server, shas: dict[str, str]) -> Census:
    """Every top-level command of CENSUS_BEATS beats, from a SLOWLOG that logs all of
    them (the scripts' own commands, logged too, are told apart by their client)."""
    client = server.client
    before = client.config_get("slowlog-*")
    client.config_set("slowlog-max-len", 1_000_000)
    client.slowlog_reset()
    client.config_set("slowlog-log-slower-than", 0)
    began = time.monotonic()
    time.sleep(CENSUS_BEATS * BEAT_SECONDS)
    client.config_set("slowlog-log-slower-than", str(before["slowlog-log-slower-than"]))
    beats = (time.monotonic() - began) / BEAT_SECONDS
    entries = client.slowlog_get(-1)
    client.config_set("slowlog-max-len", str(before["slowlog-max-len"]))
    client.slowlog_reset()
    calls: Counter[str] = Counter()
    for entry in entries:
        if entry["client_address"] in (b"?:0", "?:0"):
            continue  # run by a script
        words = _text(entry["command"]).split()
        verb = words[0].lower()
        if verb in ("evalsha", "evalsha_ro") and len(words) > 1:
            verb = shas.get(words[1], f"evalsha {words[1][:8]}")
        elif verb in ("config", "slowlog", "info", "memory"):
            continue  # the bench's own
        calls[verb] += 1
    return Census(beats, calls)


def _text(value: bytes | str) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else value


def run_one(server: Server, config: Config, n: int, beats: int, shas: dict[str, str]) -> Run:
    server.flush()
    queue = f"hb-{uuid.uuid4().hex[:8]}"
    keys = QueueKeys(queue)
    name = KINDS[config.kind][0]
    concurrency = math.ceil(n / config.processes)
    # Long enough to outlast the start, the window and the census; the worker is
    # stopped (with a short grace) once they are done.
    hold(server, queue, name, n, START_TIMEOUT + (beats + CENSUS_BEATS + 10) * BEAT_SECONDS)
    idle = idle_cpu(server)
    # A retention the start overflows (n enqueued and n leased events): the window sees
    # the log at its retention, each event trimming one, as on any queue that has seen
    # that many events; what trimming costs does not depend on the retention.
    env = server.env(LEASE_SECONDS=str(LEASE_SECONDS), SHUTDOWN_GRACE_SECONDS="1",
                     TASKQ_TASK_LOG="0", TASKQ_EVENTS_RETENTION=str(n))
    worker = Child(python_module("taskq", "--log-level", "WARNING", "worker", "--app",
                                 "bench.tasks:app", "--queue", queue, "--concurrency",
                                 str(concurrency), "--processes", str(config.processes)),
                   env, server.logs / f"{queue}.log")
    try:
        wait_held(server, keys, n, worker)
        time.sleep(BEAT_SECONDS)  # every process has beaten once with all it holds
        window = measure_window(server, keys, n, worker, beats, idle)
        census = take_census(server, shas)
        check_held(server, keys, n, window, worker)
    finally:
        worker.stop()
    return Run(window, census)


def check_held(server: Server, keys: QueueKeys, n: int, window: Window,
               worker: Child) -> None:
    """Every task still in hand, leased once, and renewed at (about) every beat."""
    leased = int(server.client.zcard(keys.leased))
    taken = int(server.client.hget(keys.events + ":stats", "leased:running") or 0)
    if leased != n or taken != n:
        raise BenchError(f"{leased} tasks in hand and {taken} leases for {n} tasks: a "
                         f"lease was lost during the window; {worker.tail()}")
    expected = n * window.beats
    if not 0.8 * expected <= window.renewals <= 1.2 * expected + n:
        raise BenchError(f"{window.renewals} renewals over {window.beats:.1f} beats of {n} "
                         f"leases (expected about {expected:.0f})")


def measure(server: Server, options: Options, known: dict[str, float]) -> Section:
    section = Section("heartbeats", f"Heartbeats at scale: long-running tasks in hand "
                      f"(lease {LEASE_SECONDS:g} s, a beat every {BEAT_SECONDS:g} s)",
                      ["worker command", "handler", "tasks in hand",
                       "round trips per beat (heartbeat + registry + other)",
                       "Redis CPU per beat", "Redis CPU per renewal, above idle",
                       "heartbeat events/s", "workers' CPU (per renewal)"])
    n = options.scaled(1 / 10)
    configs = QUICK_CONFIGS if options.quick else CONFIGS
    beats = QUICK_WINDOW_BEATS if options.quick else WINDOW_BEATS
    shas = script_names()
    runs: dict[Config, list[Run]] = {c: [] for c in configs}
    try:
        for _ in range(1 if options.quick else options.repeats):
            for config in configs:  # interleaved, so drift hits each alike
                runs[config].append(run_one(server, config, n, beats, shas))
    except BenchError as e:
        section.fail("heartbeats", e)
        return section
    for config in configs:
        _row(section, config, n, runs[config])
    try:
        costs = [probe(server, batch)
                 for batch in sorted({math.ceil(n / c.processes) for c in configs})]
    except BenchError as e:
        section.fail("heartbeat script probe", e)
        return section
    _notes(section, runs, n, beats, costs)
    return section


def _row(section: Section, config: Config, n: int, runs: Sequence[Run]) -> None:
    trips, redis_ms, redis_us, events, worker, worker_us = (Stat() for _ in range(6))
    split: list[str] = []
    for run in runs:
        w, c = run.window, run.census
        trips.add(sum(c.calls.values()) / c.beats)
        heartbeat = c.calls["heartbeat"] / c.beats
        registry = c.calls["register_worker"] / c.beats
        split.append(f"{heartbeat:.1f} + {registry:.1f} + "
                     f"{trips.values[-1] - heartbeat - registry:.1f}")
        redis_ms.add(w.redis_cpu / w.beats * 1e3)
        redis_us.add(w.renewal_cpu * 1e6)
        events.add(w.renewals / w.seconds)
        worker.add(w.worker_cpu / w.seconds)
        worker_us.add(w.worker_cpu / max(1, w.renewals) * 1e6)
    middle = sorted(range(len(runs)), key=lambda i: trips.values[i])[len(runs) // 2]
    section.rows.append([
        f"`--processes {config.processes} -c {math.ceil(n / config.processes)}`",
        KINDS[config.kind][1], f"{n:,}", f"{trips.median:.1f} ({split[middle]})",
        f"{redis_ms.median:.1f} ms {redis_ms.spread()}".strip(),
        f"{redis_us.median:.1f} us {redis_us.spread()}".strip(),
        f"{events.median:,.0f}/s",
        f"{worker.median:.1%} of a core ({worker_us.median:.1f} us)",
    ])
    key = f"heartbeats-{config.kind}-{config.processes}"
    section.figures[f"{key}-redis-us-per-renewal"] = redis_us.median
    section.figures[f"{key}-round-trips-per-beat"] = trips.median


def _notes(section: Section, runs: dict[Config, list[Run]], n: int, beats: int,
           costs: Sequence[ScriptCost]) -> None:
    every = [run for config_runs in runs.values() for run in config_runs]
    idle = sum(r.window.idle_cpu for r in every) / len(every)
    section.notes.append(
        f"{n:,} tasks that sleep (`asyncio.sleep` or `time.sleep`) held by one `taskq worker "
        f"--processes P --concurrency {n:,}/P` command with LEASE_SECONDS={LEASE_SECONDS:g}: "
        f"every {BEAT_SECONDS:g} s each process renews all it holds in one heartbeat call "
        f"and rewrites its registry record in one more. Once every task is in hand, Redis "
        f"CPU (`used_cpu_sys + used_cpu_user`), the workers' CPU (every process of the "
        f"command, from /proc) and the heartbeat events appended are taken over {beats} "
        f"beat intervals; then, for {CENSUS_BEATS} more, a SLOWLOG at 0 us lists every "
        f"top-level command, which is what the round trips count. Per renewal, Redis CPU "
        f"is net of the idle server's ({idle * 1e3:.2f} ms a beat interval, measured "
        f"before each run). The workers' TASKQ_EVENTS_RETENTION is {n:,}, which the start "
        f"overflows, so that the window sees the event log at its retention, as any queue "
        f"that has seen that many events has it (each event then trims one; the probes "
        f"below show what that costs). The run fails if a lease is lost or a beat is "
        f"missed. Median of the runs; the spread beside it.")
    for config, config_runs in runs.items():
        section.notes.append("")
        section.notes.append(f"`--processes {config.processes}`, {KINDS[config.kind][1]}: "
                             f"{_where(config, config_runs, n)}")
    per_event = sum(r.window.stream_bytes for r in every) / max(
        1, sum(r.window.stream_length for r in every))
    rate = n / (DEFAULT_LEASE.default / 3)  # renewals a second at the default lease
    retention = EVENTS_RETENTION.default
    section.notes.append("")
    section.notes.append(_probed(costs))
    section.notes.append("")
    section.notes.append(
        f"The event stream holds {per_event:.0f} bytes per heartbeat "
        f"event. At the default lease ({DEFAULT_LEASE.default:g} s) and retention "
        f"({retention:,} events), {n:,} tasks in hand append {rate:,.0f} heartbeat events a "
        f"second: every older event leaves the log within {retention / rate:.0f} s, and "
        f"the newest {HISTORY_SCAN.default:,} events, which `taskq history` and a task's "
        f"event list read, span {HISTORY_SCAN.default / rate:.0f} s.")


def _where(config: Config, runs: Sequence[Run], n: int) -> str:
    """Where one configuration's Redis time goes: the scripts, and the event log in them."""
    calls = Counter[str]()
    for run in runs:
        calls.update(run.census.calls)
    beats = sum(r.census.beats for r in runs)
    renewals = sum(r.window.renewals for r in runs)
    cpu = sum(r.window.redis_cpu - r.window.idle_cpu * r.window.beats for r in runs)
    scripts = sum(r.window.usec("evalsha") for r in runs)
    log = sum(r.window.usec("xadd", "hincrby", "incrby") for r in runs)
    others = [f"{k} {v / beats:.1f}" for k, v in calls.most_common()
              if k not in ("heartbeat", "register_worker")]
    return (f"{n / config.processes:,.0f} leases a heartbeat call; the scripts (every "
            f"EVALSHA, the heartbeats' almost all) took {scripts / max(1, renewals):.1f} us "
            f"of Redis time per renewal (INFO commandstats, which counts wall time) against "
            f"{cpu / max(1, renewals) * 1e6:.1f} us of Redis CPU above idle; the event "
            f"log's own XADD, HINCRBY and INCRBY were {log / max(1, scripts):.0%} of the "
            f"scripts' time; other round trips per beat: {', '.join(others) or 'none'}.")


def _probed(costs: Sequence[ScriptCost]) -> str:
    """What the script probes found: the events' share of a heartbeat call, and what a
    registry write riding in it would save."""
    calls = "; ".join(
        f"{c.batch:,} leases: {c.at_retention:,.0f} us with the log at its retention "
        f"({c.at_retention / c.batch:.1f} us a lease), {c.below_retention:,.0f} us below "
        f"it, {c.without_events:,.0f} us without events ({c.event_share():.0%} less than "
        f"at retention, {c.event_share(at_retention=False):.0%} less than below it)"
        for c in costs)
    registry = sum(c.registry for c in costs) / len(costs)
    biggest = max(costs, key=lambda c: c.batch)
    return (f"Probed from the bench on leases it holds (no workers running; Redis time "
            f"from INFO commandstats, three rounds of 20 calls each way): a heartbeat call "
            f"renewing {calls}. A registry write takes {registry:.1f} us, "
            f"{registry / biggest.at_retention:.1%} of a heartbeat call of "
            f"{biggest.batch:,} leases: riding in that call it would save one round trip "
            f"per process per beat and at most that.")
