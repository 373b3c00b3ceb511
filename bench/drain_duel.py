"""`def` handlers draining the counted no-op: taskq's recommended worker command beside
every fast peer's worker command, in interleaved rounds. On this machine the same
command's rate drifts by a third within minutes, so a ratio of two figures taken minutes
apart (as the peers table's are) can say more about the drift than about the queues; a
round runs every system within about a minute, and the verdict is the median of the
rounds' ratios. Issue 21's drain target is judged on the no-op counted by a Redis INCR,
issue 7's on the same no-op counted by a tally-file append (`tallyduel`)."""

from __future__ import annotations

import statistics
import subprocess
import sys
from dataclasses import dataclass, field

from bench.cpu_drain import HANDLER, RECOMMENDED, TALLY, Window, command, peer_drain, taskq_drain
from bench.duel import order, rounds
from bench.harness import BenchError, Options, Section, Server, Stat, rate
from bench.peers import driver
from bench.speed import SpeedProbe


@dataclass(frozen=True)
class Counting:
    """How a duel's no-op counts its runs: taskq's handler and the peers' body for it,
    the words the section uses, and the prefix of its figures' keys."""

    handler: str
    body: str
    words: str
    key: str


INCR = Counting(HANDLER, "incr", "the no-op counted by one Redis INCR", "drain-duel")
TALLY_COUNT = Counting(TALLY, "tally", "the no-op counted by a one-byte tally-file append",
                       "tally-duel")


@dataclass(frozen=True)
class Entrant:
    """A worker command in the duel: taskq's (`peer` None) or one of a peer's."""

    key: str
    title: str
    command: str
    peer: driver.Peer | None = None
    config: driver.Config | None = None


@dataclass
class Drains:
    """One entrant's drains: the rate of each round by round, and the CPU per task."""

    by_round: dict[int, float] = field(default_factory=dict)
    rate: Stat = field(default_factory=Stat)
    worker_us: Stat = field(default_factory=Stat)
    redis_us: Stat = field(default_factory=Stat)
    spans: dict[int, tuple[float, float]] = field(default_factory=dict)
    slowdown: dict[int, float] = field(default_factory=dict)

    def add(self, round_: int, measured: Window) -> None:
        self.by_round[round_] = measured.rate
        self.spans[round_] = (measured.first.wall, measured.last.wall)
        self.rate.add(measured.rate)
        self.worker_us.add(measured.tree_us)
        self.redis_us.add(measured.redis_us)


def entrants(server: Server, shape: tuple[int, int, int], section: Section,
             quick: bool = False) -> list[Entrant]:
    """taskq, then every peer configuration that drains thousands of tasks a second
    (those whose interpreter can import the peer); a `quick` run takes each peer's
    last such configuration only (its most processes)."""
    chosen = [Entrant("taskq", "**taskq**", command(shape))]
    for peer in driver.PEERS:
        fast = [config for config in peer.configs if config.scale == driver.FAST]
        if not fast:
            continue
        if quick:
            fast = fast[-1:]
        try:
            driver.ready_dir(server, peer, section)
        except driver.SETUP_ERRORS as e:
            section.rows.append([peer.title, "", "", "", "", "", "", f"**not run**: {e}"])
            continue
        chosen += [Entrant(f"{peer.name}: {config.label}", f"{peer.title} ({config.label})",
                           "its worker command in the peers table", peer, config)
                   for config in fast]
    return chosen


def _drain(server: Server, entrant: Entrant, shape: tuple[int, int, int],
           n: int, counting: Counting) -> Window:
    if entrant.peer is None or entrant.config is None:
        return taskq_drain(server, n, shape, None, counting.handler).window
    return peer_drain(server, entrant.peer, entrant.config, n, counting.body)


def duel(server: Server, chosen: list[Entrant], shape: tuple[int, int, int], n: int,
         count: int, section: Section, counting: Counting) -> dict[str, Drains]:
    """`count` rounds, each draining `n` tasks with every entrant still in, in an order
    shuffled per round; an entrant whose drain fails leaves the duel, said in the
    section."""
    drains = {entrant.key: Drains() for entrant in chosen}
    live = list(chosen)
    with SpeedProbe() as probe:
        for round_ in range(count):
            print(f"   round {round_ + 1} of {count}", file=sys.stderr, flush=True)
            for entrant in order(live, round_):
                try:
                    measured = _drain(server, entrant, shape, n, counting)
                    drains[entrant.key].add(round_, measured)
                except (BenchError, OSError, subprocess.TimeoutExpired) as e:
                    section.fail(entrant.title.strip("*"), BenchError(str(e)))
                    live.remove(entrant)
                    del drains[entrant.key]
    for entry in drains.values():
        for round_, span in entry.spans.items():
            slowdown = probe.slowdown(*span)
            if slowdown is not None:
                entry.slowdown[round_] = slowdown
    return drains


@dataclass(frozen=True)
class Pairing:
    """One round's verdict: taskq's rate and the round's fastest peer's, each with the
    machine's slowdown in its window (None when no probe landed in it)."""

    taskq: float
    peer: float
    taskq_slowdown: float | None
    peer_slowdown: float | None

    @property
    def ratio(self) -> float:
        return self.taskq / self.peer

    @property
    def at_full_speed(self) -> float | None:
        """The ratio with each rate scaled up by its window's slowdown: what the round
        would have read had the machine run both at the same speed, if a drain's rate
        scales with the machine's speed."""
        if self.taskq_slowdown is None or self.peer_slowdown is None:
            return None
        return self.ratio * self.taskq_slowdown / self.peer_slowdown


def pairings(taskq: Drains, peers: list[Drains]) -> list[Pairing]:
    """taskq beside the fastest peer of the same round, for each round that every one of
    them finished."""
    rounds = [r for r in sorted(taskq.by_round) if all(r in p.by_round for p in peers)]
    paired = []
    for r in rounds:
        fastest = max(peers, key=lambda p: p.by_round[r])
        paired.append(Pairing(taskq.by_round[r], fastest.by_round[r],
                              taskq.slowdown.get(r), fastest.slowdown.get(r)))
    return paired


def _speeds(paired: list[Pairing]) -> str:
    def shown(slowdown: float | None) -> str:
        return "?" if slowdown is None else f"{slowdown:.2f}"

    return ", ".join(f"{shown(p.taskq_slowdown)} / {shown(p.peer_slowdown)}" for p in paired)


def _row(entrant: Entrant, n: int, drains: Drains, fastest: bool) -> list[str]:
    shown = f"**{rate(drains.rate.median)}**" if entrant.peer is None or fastest \
        else rate(drains.rate.median)
    return [entrant.title, entrant.command, f"{n:,}", shown, drains.rate.spread(),
            f"{drains.worker_us.median:,.1f} µs", f"{drains.redis_us.median:,.1f} µs",
            "fastest peer by median" if fastest else ""]


def measure(server: Server, options: Options, known: dict[str, float]) -> Section:
    """The duel on the INCR-counted no-op: issue 21's `def` drain verdict."""
    return _measure(server, options, INCR)


def measure_tally(server: Server, options: Options, known: dict[str, float]) -> Section:
    """The duel on the tally-counted no-op: issue 7's drain verdict."""
    return _measure(server, options, TALLY_COUNT)


def _measure(server: Server, options: Options, counting: Counting) -> Section:
    n = options.scaled(driver.FAST)
    count = rounds(options)
    shape = RECOMMENDED
    section = Section(counting.key, f"`def` handlers, {counting.words}: "
                      f"taskq beside the peers in {count} interleaved rounds",
                      ["queue", "worker command", "tasks per drain",
                       "tasks/s (median of rounds)", "spread",
                       "worker processes' CPU per task", "Redis CPU per task", "note"])
    chosen = entrants(server, shape, section, options.quick)
    drains = duel(server, chosen, shape, n, count, section, counting)
    peers = [e for e in chosen if e.peer is not None and e.key in drains]
    fastest = max(peers, key=lambda e: drains[e.key].rate.median, default=None)
    section.rows[:0] = [_row(e, n, drains[e.key], e is fastest) for e in chosen
                        if e.key in drains]
    section.notes.append(
        f"Each round drains {n:,} tasks with every worker command once, in an order "
        f"shuffled per round, each on a flushed server: taskq's queue filled by "
        f"`enqueue_many`, each peer's by its client one call a task, as in the peers "
        f"table. The rate and the CPU per task (the worker command's whole process tree "
        f"and Redis, as in the `def` profile) are taken between the drain's 5% and 95% "
        f"marks by its count, and each drain then checks the count ends at exactly "
        f"N. The verdict is taskq's rate over the fastest peer's of the same round, the "
        f"median over the rounds.")
    taskq = drains.get("taskq")
    if taskq is None or fastest is None:
        return section
    paired = pairings(taskq, [drains[e.key] for e in peers])
    ratios = [pairing.ratio for pairing in paired]
    if not ratios:
        return section
    median = statistics.median(ratios)
    section.figures[f"{counting.key}-taskq"] = taskq.rate.median
    section.figures[f"{counting.key}-best-peer"] = drains[fastest.key].rate.median
    section.figures[f"{counting.key}-ratio"] = median
    section.labels[f"{counting.key}-taskq"] = command(shape)
    section.labels[f"{counting.key}-best-peer"] = fastest.title
    section.notes.append(
        "taskq over the fastest peer of each round, round by round: "
        + ", ".join(f"{ratio:.2f}x" for ratio in ratios) + f"; median {median:.2f}x.")
    section.notes.append(
        "The machine's speed in each drain's window, taskq / the round's fastest peer, "
        "round by round, as how many times its fastest the CPU time of a fixed "
        "pure-Python probe ran (timed every 0.1 s on its thread's CPU clock; 1.00 is "
        f"full speed; bench/speed.py): {_speeds(paired)}. On a shared host the probe "
        "reads twice its usual time for seconds at a time with the bench idle, so a "
        "drain that lands in such a stretch reads half its rate.")
    adjusted = [p.at_full_speed for p in paired if p.at_full_speed is not None]
    if adjusted:
        section.notes.append(
            "With each rate scaled by its window's slowdown (a reference, not the "
            "verdict): " + ", ".join(f"{ratio:.2f}x" for ratio in adjusted)
            + f"; median {statistics.median(adjusted):.2f}x.")
    return section
