"""Where the time goes when `def` handlers drain the no-op counted by one Redis INCR (issue
21's drain target): CPU per task of one `taskq worker` command's whole process tree and of
Redis, the same for the fastest peer's worker command, py-spy's GIL samples of taskq's
tree split between the handler body and taskq's own code, and the task's cost taken
apart: the queue alone (the same command on the uncounted no-op, and Redis's time in
taskq's scripts), the INCR alone (bench/incr_floor.py), and the hand-offs between."""

from __future__ import annotations

import subprocess
import sys
from collections import Counter
from dataclasses import dataclass
from typing import Any

from bench import incr_floor
from bench.cpu_drain import (
    HANDLER,
    NOOP,
    RECOMMENDED,
    Window,
    command,
    peer_drain,
    taskq_drain,
)
from bench.harness import (
    BenchError,
    Options,
    Section,
    Server,
    rate,
)
from bench.incr_floor import CORES, Floor
from bench.peers import driver
from bench.profile import RATE_HZ, frame_label, is_bench_handler, py_spy

FACTOR = 2.5  # issue 21's drain target over the fastest peer
# A share of a task's cost that figures measured in separate drains cannot resolve here.
NOISE = 0.1


def gil_shares(speedscope: dict[str, Any]) -> tuple[int, Counter[str]]:
    """GIL samples of all the command's processes, each put in one part: `handler` (the
    no-op's body; `redis-py` when inside redis-py under it), `taskq` (a taskq frame on
    the stack), or `other` (interpreter and threading scaffolding)."""
    labels = [frame_label(frame) for frame in speedscope["shared"]["frames"]]
    parts: Counter[str] = Counter()
    for profile in speedscope["profiles"]:
        samples = profile.get("samples", [])
        weights = profile.get("weights") or [1] * len(samples)
        for stack, weight in zip(samples, weights, strict=False):
            if not stack:
                continue
            names = [labels[i] for i in stack]
            parts[_part(names)] += round(weight) if profile.get("unit") == "none" else 1
    return sum(parts.values()), parts


def _part(names: list[str]) -> str:
    for depth, name in enumerate(names):
        if is_bench_handler(name, HANDLER):
            below = names[depth + 1:]
            return "redis-py" if any("(redis/" in label for label in below) else "handler"
    return "taskq" if any("(taskq/" in label for label in names) else "other"


def peer_candidates(known: dict[str, float], labels: dict[str, str]
                    ) -> list[tuple[driver.Peer, driver.Config]]:
    """The fastest peer of this run's INCR drains: the drain duel's (its rounds
    interleaved), else the peers table's; when neither ran, every configuration the
    peers table gives thousands of tasks a second."""
    configs = [(peer, config) for peer in driver.PEERS for config in peer.configs]
    for figure in ("drain-duel-best-peer", "peer-best-drain-incr"):
        best = labels.get(figure)
        chosen = [(p, c) for p, c in configs if f"{p.title} ({c.label})" == best]
        if chosen and known.get(figure):
            return chosen
    return [(p, c) for p, c in configs if c.scale == driver.FAST]


def _cpu_row(what: str, command: str, measured: Window) -> list[str]:
    both = measured.tree_us + measured.redis_us
    return [what, command, rate(measured.rate), str(measured.first.processes),
            f"{measured.tree_us:,.1f} µs", f"{measured.redis_us:,.1f} µs",
            rate(CORES * 1e6 / both)]


def _record_window(section: Section, name: str, measured: Window) -> None:
    section.figures[f"{name}-rate"] = measured.rate
    section.figures[f"{name}-worker-us"] = measured.tree_us
    section.figures[f"{name}-redis-us"] = measured.redis_us


def _peers(server: Server, options: Options, section: Section, known: dict[str, float],
           labels: dict[str, str]) -> tuple[str, Window] | None:
    """Each candidate peer's drain; the fastest of them, named."""
    fastest: tuple[str, Window] | None = None
    for peer, config in peer_candidates(known, labels):
        title = f"{peer.title} ({config.label})"
        print(f"   {title}", file=sys.stderr, flush=True)
        try:
            measured = peer_drain(server, peer, config, options.n)
        except (BenchError, OSError, subprocess.TimeoutExpired) as e:
            section.fail(title, BenchError(str(e)))
            continue
        section.rows.append(_cpu_row(title, "its worker command in the peers table", measured))
        if fastest is None or measured.rate > fastest[1].rate:
            fastest = (title, measured)
    return fastest


def _shares_note(section: Section, speedscope: dict[str, Any]) -> None:
    total, parts = gil_shares(speedscope)
    if not total:
        section.notes.append("py-spy recorded no samples.")
        return
    handler = (parts["handler"] + parts["redis-py"]) / total
    section.figures["profile-incr-handler-share"] = handler
    section.figures["profile-incr-redis-py-share"] = parts["redis-py"] / total
    section.figures["profile-incr-taskq-share"] = parts["taskq"] / total
    section.notes.append(
        f"GIL samples of taskq's worker processes ({total:,}, py-spy --subprocesses --gil "
        f"at {RATE_HZ} Hz over the window): the handler body {handler:.0%} (redis-py's "
        f"INCR under it {parts['redis-py'] / total:.0%}), taskq's own code "
        f"{parts['taskq'] / total:.0%}, the rest (interpreter, threading) "
        f"{parts['other'] / total:.0%}. A thread waiting on a socket holds no GIL, so the "
        f"samples are CPU in Python, not the time the round trips take.")


@dataclass(frozen=True)
class Parts:
    """What one INCR-counted `def` task costs, both sides together (µs of CPU), and its
    parts: the same command's queue alone (the uncounted no-op drain), of which Redis's
    CPU; the INCR alone from threads shaped like the command's. `script_us` is Redis's
    wall-clock time inside taskq's scripts in the INCR drain (EVALSHA's usec, which
    counts the time the server's thread waits for a core too)."""

    drain_us: float
    queue_us: float
    queue_redis_us: float
    script_us: float
    incr_us: float

    @property
    def hand_offs_us(self) -> float:
        """What neither part accounts for: handler threads that wait on a socket and the
        loop thread passing tasks and the GIL between them."""
        return self.drain_us - self.queue_us - self.incr_us


def _rest(parts: Parts) -> str:
    """What the two parts leave of the drain's cost, said as what it is."""
    rest = parts.hand_offs_us
    if abs(rest) < NOISE * parts.drain_us:
        return (f"the two measured apart come to the drain's cost within this machine's "
                f"noise ({rest:+.1f} µs).")
    return (f"the rest, {rest:.1f} µs, is what the two cost more together than apart "
            f"(handler threads waiting on sockets beside the loop thread)." if rest > 0 else
            f"together they cost {-rest:.1f} µs less than apart.")


def _floor_note(section: Section, floor: Floor, alone: Floor, parts: Parts,
                peer: tuple[str, float] | None) -> None:
    """`alone`: the INCR from as many processes of one thread each, no GIL shared; `peer`:
    the fastest peer and the rate the target is judged against."""
    section.figures["profile-incr-floor"] = floor.cap
    section.figures["profile-incr-incr-client-us"] = floor.client_us
    section.figures["profile-incr-incr-redis-us"] = floor.redis_us
    section.figures["profile-incr-incr-threaded-us"] = parts.incr_us
    section.figures["profile-incr-incr-one-thread-us"] = alone.both_us
    section.figures["profile-incr-queue-us"] = parts.queue_us
    section.figures["profile-incr-script-us"] = parts.script_us
    section.figures["profile-incr-queue-redis-us"] = parts.queue_redis_us
    section.figures["profile-incr-hand-offs-us"] = parts.hand_offs_us
    text = (f"Where a task's {parts.drain_us:.1f} µs (both sides) go: the INCR from threads "
            f"shaped like the worker command's, with no queue, {parts.incr_us:.1f} µs; the "
            f"same command draining the uncounted no-op, the queue alone, "
            f"{parts.queue_us:.1f} µs, of which Redis's CPU {parts.queue_redis_us:.1f} µs "
            f"(the lease and the ack scripts, with their records and events, and their "
            f"calls; inside the scripts, Redis's clock read {parts.script_us:.1f} µs a task "
            f"in the INCR drain); {_rest(parts)} The INCR "
            f"costs {alone.both_us:.1f} µs from as many processes of one thread each (no "
            f"GIL shared), and {floor.both_us:.1f} µs on one connection, one at a time.")
    if peer is not None:
        needed = FACTOR * peer[1]
        budget = CORES * 1e6 / needed
        section.figures["profile-incr-needed"] = needed
        section.figures["profile-incr-budget-us"] = budget
        text += (f" {FACTOR:g}x {peer[0]}'s {rate(peer[1])} is {rate(needed)}: on "
                 f"{CORES} cores a task may then cost {budget:.1f} µs of CPU on both sides. "
                 f"The INCR at its cheapest and taskq's Redis work take "
                 f"{alone.both_us + parts.queue_redis_us:.1f} µs together, ")
        least = alone.both_us + parts.queue_redis_us
        text += ("more than that: no worker can reach it with this Redis work."
                 if least >= budget else
                 f"which leaves {budget - least:.1f} µs a task for everything the worker "
                 f"processes do, where the no-op drain's spend "
                 f"{parts.queue_us - parts.queue_redis_us:.1f} µs, and handler threads sharing a "
                 f"GIL add {parts.incr_us - alone.both_us:.1f} µs to the INCR.")
    section.notes.append(text)


def measure(server: Server, options: Options, known: dict[str, float],
            labels: dict[str, str] | None = None) -> Section:
    shape = RECOMMENDED
    processes, concurrency, _ = shape
    section = Section("profile-incr", f"Profile: `def` handlers counting each task with one "
                      f"Redis INCR, {command(shape)} beside the fastest peer, "
                      f"{options.n:,} tasks",
                      ["run", "worker command", "tasks/s (5%-95%)", "processes",
                       "worker processes' CPU per task", "Redis CPU per task",
                       f"rate the two allow on {CORES} cores"])
    spy = py_spy()
    try:
        floor = incr_floor.alone(server, options.scaled(1 / 4))
        threaded = incr_floor.threaded(server, options.n, processes, concurrency)
        one_thread = incr_floor.threaded(server, options.n, processes, 1)
        plain = taskq_drain(server, options.n, shape, None)
        queue = taskq_drain(server, options.n, shape, None, handler=NOOP)
        profiled = taskq_drain(server, options.n, shape, spy) if spy else None
    except (BenchError, OSError, subprocess.TimeoutExpired) as e:
        section.fail("taskq", BenchError(str(e)))
        return section
    section.rows.append(_cpu_row("**taskq**", command(shape), plain.window))
    _record_window(section, "profile-incr-taskq", plain.window)
    if profiled is not None:
        section.rows.append(_cpu_row("taskq under py-spy", command(shape), profiled.window))
    section.rows.append(_cpu_row("taskq, the uncounted `def` no-op (the queue alone)",
                                 command(shape), queue.window))
    peer = _peers(server, options, section, known, labels or {})
    if peer is not None:
        _record_window(section, "profile-incr-peer", peer[1])
        section.labels["profile-incr-peer"] = peer[0]
    section.rows.append([f"the INCR from {processes} processes x {concurrency} threads, no "
                         f"queue", "", rate(threaded.rate), str(processes),
                         f"{threaded.client_us:,.1f} µs", f"{threaded.redis_us:,.1f} µs",
                         rate(threaded.cap)])
    section.rows.append([f"the INCR from {processes} processes x 1 thread, no queue", "",
                         rate(one_thread.rate), str(processes),
                         f"{one_thread.client_us:,.1f} µs", f"{one_thread.redis_us:,.1f} µs",
                         rate(one_thread.cap)])
    section.rows.append(["the INCR alone (redis-py, one connection, one at a time)", "",
                         rate(floor.rate), "1", f"{floor.client_us:,.1f} µs",
                         f"{floor.redis_us:,.1f} µs", f"**{rate(floor.cap)}**"])
    section.notes.append(
        "CPU per task is each process's user + system time (/proc: the worker command and "
        "every process under it, children they reaped included) and Redis's "
        "`used_cpu_sys + used_cpu_user`, both between the drain's 5% and 95% marks by its "
        "count (the INCRs; the queue's completed total for the uncounted no-op), divided "
        "by the tasks counted between them; each drain then checks the count ends at "
        "exactly N. taskq's queue is filled by `enqueue_many`, each peer's by its client "
        "one call a task, as in the peers table. The INCR rows run no queue: the threaded "
        "one starts that many processes of that many threads, each thread INCRing in a "
        "loop (bench/incr_floor.py), its client CPU what the processes report over their "
        "calls. The cap is the machine's cores over the two CPU figures together (also "
        "Redis's one thread over its part).")
    if profiled is not None and profiled.speedscope is not None:
        _shares_note(section, profiled.speedscope)
    else:
        section.notes.append("No GIL shares: py-spy is not installed "
                             "(`pip install -e '.[bench]'`).")
    parts = Parts(plain.window.tree_us + plain.window.redis_us,
                  queue.window.tree_us + queue.window.redis_us, queue.window.redis_us,
                  plain.script_us, threaded.both_us)
    judged = ((labels or {}).get("drain-duel-best-peer", ""), known["drain-duel-best-peer"]) \
        if known.get("drain-duel-best-peer") else None
    if judged is not None:
        section.notes.append(f"The target is judged on the drain duel's interleaved rounds: "
                             f"its fastest peer, {judged[0]}, drained {rate(judged[1])} "
                             f"there (median of the rounds).")
    _floor_note(section, floor, one_thread, parts,
                judged or (None if peer is None else (peer[0], peer[1].rate)))
    return section
