"""Single-call enqueue, taskq beside every peer: each system's client in a process of its
own (the same start-up and import for all), run in interleaved rounds on a flushed
server, with what each call costs the client's CPU and the Redis server's."""

from __future__ import annotations

import random
import sys
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from bench.harness import BenchError, Options, Section, Server, Stat, rate
from bench.peers import driver
from taskq import Broker

# What each system's `enqueue(n)` calls once per task (bench/peers/<name>_app.py).
CALLS = {
    "taskq": "`Task.enqueue()`",
    "celery": "`noop.delay()`",
    "rq": "`Queue.enqueue(noop)`",
    "dramatiq": "`noop.send()`",
    "arq": "`ArqRedis.enqueue_job('noop')`",
    "huey": "`noop()`",
    "taskiq": "`noop.kiq()` (list broker)",
    "bare_script": "EVALSHA of `enqueue.lua`, one task",
    "bare_lpush": "LPUSH of a 200-byte message",
}
# The floor, run in the same rounds but judged against nothing: the thinnest client
# (hiredis on a bare socket) sending what taskq's call sends, and what a peer's does.
FLOORS = (("bare_script", "taskq's script from a bare socket (floor)"),
          ("bare_lpush", "one LPUSH from a bare socket (floor)"))
# Rounds when the command line asks for fewer: a peer's single-call rate swings from one
# run to the next by more than the margin judged, so only a median over rounds can be.
MIN_ROUNDS = 3
FULL_ROUNDS = 5
# Commands named per call in the table, the most frequent first.
SHOWN_COMMANDS = 6
# Whatever takes part in a round (a client here, a worker command in drain_duel).
Entry = TypeVar("Entry")


@dataclass(frozen=True)
class System:
    """A client to time: `bench.peers.<name>_app` run by the interpreter in `bin_dir`,
    with its first worker configuration's environment (taskiq's picks its broker)."""

    name: str
    title: str
    bin_dir: Path
    env: tuple[tuple[str, str], ...] = ()
    floor: bool = False


@dataclass
class Runs:
    """One system's runs: per call, the rate and the CPU on each side; the commands Redis
    ran for the calls (summed over the runs), and each round's rate by round."""

    rate: Stat = field(default_factory=Stat)
    client_us: Stat = field(default_factory=Stat)
    redis_us: Stat = field(default_factory=Stat)
    calls: int = 0
    commands: dict[str, int] = field(default_factory=dict)
    usec: dict[str, float] = field(default_factory=dict)
    by_round: dict[int, float] = field(default_factory=dict)

    def add(self, round_: int, window: dict[str, Any]) -> None:
        self.rate.add(float(window["rate"]))
        self.client_us.add(float(window["client_cpu_us"]))
        self.redis_us.add(float(window["server_cpu_us"]))
        self.by_round[round_] = float(window["rate"])
        self.calls += int(window["calls"])
        for name, calls in window["commands"].items():
            self.commands[name] = self.commands.get(name, 0) + int(calls)
            self.usec[name] = self.usec.get(name, 0.0) + float(window["usec"][name])

    def script_us(self) -> float | None:
        """Redis's own time in EVALSHA per call of it (INFO commandstats usec_per_call,
        over every run): the time the script takes, its own commands included."""
        calls = self.commands.get("evalsha", 0)
        return self.usec["evalsha"] / calls if calls else None

    def commands_text(self) -> str:
        """Commands per call, e.g. `lpush 1.00`; with EVALSHA's µs per call of it."""
        if not self.calls:
            return ""
        shown = sorted(self.commands.items(), key=lambda item: (-item[1], item[0]))
        parts = []
        for name, calls in shown[:SHOWN_COMMANDS]:
            text = f"{name} {calls / self.calls:.2f}"
            if name == "evalsha" and (script := self.script_us()) is not None:
                text += f" ({script:.1f} µs)"
            parts.append(text)
        more = len(shown) - SHOWN_COMMANDS
        return ", ".join(parts) + (f", {more} more" if more > 0 else "")


def rounds(options: Options) -> int:
    """Rounds of a duel, this one's or a drain duel's: a drain's rate swings within
    minutes as much as a single call's does."""
    return max(options.repeats, MIN_ROUNDS if options.quick else FULL_ROUNDS)


def order(systems: list[Entry], round_: int) -> list[Entry]:
    """The round's running order: shuffled, so that no system always runs first, last or
    after the same one; seeded by the round, so a rerun runs the same orders."""
    shuffled = list(systems)
    random.Random(round_).shuffle(shuffled)
    return shuffled


def _systems(server: Server, section: Section) -> list[System]:
    systems = [System("taskq", "**taskq**", Path(sys.executable).parent)]
    for peer in driver.PEERS:
        try:
            directory = driver.ready_dir(server, peer, section)
        except driver.SETUP_ERRORS as e:
            section.rows.append([peer.title, CALLS[peer.name], "", "", "", "", "", "",
                                 f"**not run**: {e}"])
            continue
        systems.append(System(peer.name, peer.title, directory, peer.configs[0].env))
    here = Path(sys.executable).parent
    return systems + [System(name, title, here, floor=True) for name, title in FLOORS]


def _run(server: Server, system: System, n: int) -> dict[str, Any]:
    """One client process, N calls on a flushed server; taskq's tasks are then counted in
    its ready list (the peers' clients each check they made every call)."""
    server.flush()
    queue = f"duel-{system.name}-{uuid.uuid4().hex[:8]}"
    env = server.env(BENCH_REDIS_URL=server.url, BENCH_QUEUE=queue, **dict(system.env))
    window = driver.run_client(system.bin_dir, system.name, n, env)
    if system.name in ("taskq", "bare_script"):
        ready = Broker(server.client, queue).counts().ready
        if ready != n:
            raise BenchError(f"{ready} tasks ready after {n} calls of {CALLS[system.name]}")
    return window


def _duel(server: Server, systems: list[System], n: int, count: int,
          section: Section) -> dict[str, Runs]:
    runs = {system.name: Runs() for system in systems}
    live = list(systems)
    for round_ in range(count):
        print(f"   round {round_ + 1} of {count}", file=sys.stderr, flush=True)
        for system in order(live, round_):
            try:
                runs[system.name].add(round_, _run(server, system, n))
            except BenchError as e:
                section.fail(f"{system.title} ({CALLS[system.name]})", e)
                live.remove(system)
                del runs[system.name]
    return runs


def _row(system: System, n: int, runs: Runs) -> list[str]:
    return [system.title, CALLS[system.name], f"{n:,}",
            f"**{rate(runs.rate.median)}**" if system.name == "taskq" else rate(runs.rate.median),
            runs.rate.spread(), f"{runs.client_us.median:,.1f} µs",
            f"{runs.redis_us.median:,.1f} µs", runs.commands_text(), ""]


def _figures(section: Section, runs: dict[str, Runs], titles: dict[str, str],
             floors: set[str]) -> None:
    for name, got in runs.items():
        section.figures[f"duel-{name}"] = got.rate.median
        section.figures[f"duel-{name}-client-us"] = got.client_us.median
        section.figures[f"duel-{name}-redis-us"] = got.redis_us.median
    taskq = runs.get("taskq")
    if taskq is not None and (script := taskq.script_us()) is not None:
        section.figures["duel-taskq-script-us"] = script
    peers = {name: got for name, got in runs.items() if name != "taskq" and name not in floors}
    if not peers:
        return
    best = max(peers, key=lambda name: peers[name].rate.median)
    section.figures["duel-best-peer"] = peers[best].rate.median
    section.figures["duel-best-peer-client-us"] = peers[best].client_us.median
    section.figures["duel-best-peer-redis-us"] = peers[best].redis_us.median
    section.labels["duel-best-peer"] = titles[best]
    if taskq is not None:
        ratios = [taskq.by_round[r] / peers[best].by_round[r]
                  for r in sorted(taskq.by_round) if r in peers[best].by_round]
        section.notes.append(
            f"taskq / {titles[best]} (the fastest peer by median), round by round: "
            + ", ".join(f"{ratio:.2f}x" for ratio in ratios) + ".")


def measure(server: Server, options: Options, known: dict[str, float]) -> Section:
    n = options.scaled(1 / 4)
    count = rounds(options)
    section = Section("duel", f"Single-call enqueue beside the peers ({count} interleaved "
                      f"rounds, each client a process of its own)",
                      ["queue", "call (one task each)", "calls per run", "calls/s (median)",
                       "spread", "client CPU per call", "Redis CPU per call",
                       "Redis commands per call", "note"])
    systems = _systems(server, section)
    runs = _duel(server, systems, n, count, section)
    titles = {system.name: system.title.strip("*") for system in systems}
    section.rows[:0] = [_row(system, n, runs[system.name]) for system in systems
                        if system.name in runs]
    section.notes.append(
        f"Each round runs every system once, in an order shuffled per round, each on a "
        f"flushed server with no worker running: its client (bench/peers/client.py, in the "
        f"peer's own interpreter; arq's venv for arq) starts, imports, makes one call to "
        f"connect and warm up, then times the next {n - 1:,}, all with the same task and no "
        f"arguments. Client CPU is the client process's `time.process_time()` over those "
        f"calls. Redis CPU is INFO cpu (`used_cpu_sys + used_cpu_user`), read by the "
        f"client on a connection of its own just before its first timed call and just "
        f"after its last: the timed calls and the server's idle work meanwhile, not the "
        f"client's start-up or connect. Commands per call are INFO commandstats after a "
        f"CONFIG RESETSTAT at the window's start, over every round; Redis 7 counts the "
        f"commands a script runs too, and EVALSHA's µs is its usec_per_call (the script's "
        f"time in Redis, its commands included, on the server's wall clock). taskq's runs "
        f"check that its ready list holds every task; the peers' clients that they made "
        f"every call. The figure is the median of the rounds; the spread is the slowest "
        f"and fastest round.")
    section.notes.append(
        "The two floor rows are no queue: taskq's enqueue script with one task's arguments "
        "built in advance (a fresh id each call), and an LPUSH of a message the size of "
        "Huey's, each sent by hiredis on a bare socket with no library code between calls "
        "(bench/peers/bare.py). The LPUSH row is the round trip itself, which every peer's "
        "one-command enqueue pays; the script row is the least a call of taskq's atomic "
        "enqueue (record, event, idempotency check and wake-up) can cost here, whatever "
        "the client.")
    _figures(section, runs, titles, {system.name for system in systems if system.floor})
    return section
