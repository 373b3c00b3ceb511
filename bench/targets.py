"""The targets of issues 7, 16, 18 and 21, judged on figures taken in this same run."""

from __future__ import annotations

from dataclasses import dataclass

from bench.harness import Section, rate

DRAIN_FACTOR = 3.0
ENQUEUE_FACTOR = 3.0
P50_MS = 2.0
P99_MS = 10.0
FEED_DELIVERIES = 20_000.0
RESULTS_COST = 0.10
RATE_LIMIT_SHARE = 0.95
RESULT_P50_MS = 2.0
MEMORY_FACTOR = 1.5
SINGLE_ENQUEUE_FACTOR = 1.2
DEF_INCR_DRAIN_FACTOR = 2.5


@dataclass(frozen=True)
class Target:
    what: str
    measured: str
    required: str
    factor: float | None  # >= 1 means met; None when not measured in this run
    reference: bool = False  # shown beside a target, judged on nothing

    @property
    def missed(self) -> bool:
        return not self.reference and self.factor is not None and self.factor < 1

    def row(self) -> list[str]:
        if self.factor is None:
            return [self.what, self.measured, self.required, "", "not measured in this run"]
        verdict = "**met**" if self.factor >= 1 else "**missed**"
        return [self.what, self.measured, self.required, f"{self.factor:.2f}",
                "reference" if self.reference else verdict]


def _ratio(what: str, top: float | None, bottom: float | None, factor: float,
           names: tuple[str, str], reference: bool = False) -> Target:
    if top is None or bottom is None or not bottom:
        return Target(what, "", f">= {factor:g}x", None, reference)
    ratio = top / bottom
    measured = f"{ratio:.2f}x ({names[0]} {rate(top)} vs {names[1]} {rate(bottom)})"
    return Target(what, measured, f">= {factor:g}x", ratio / factor, reference)


def _round_ratio(what: str, ratio: float | None, top: float | None, bottom: float | None,
                 factor: float, names: tuple[str, str]) -> Target:
    """A ratio judged as the median of interleaved rounds' ratios, shown with the two
    medians it sits between (their own ratio may differ a little)."""
    if ratio is None or top is None or bottom is None:
        return Target(what, "", f">= {factor:g}x", None)
    measured = f"{ratio:.2f}x ({names[0]} {rate(top)} vs {names[1]} {rate(bottom)}, medians)"
    return Target(what, measured, f">= {factor:g}x", ratio / factor)


def _at_most(what: str, value: float | None, limit: float) -> Target:
    if value is None:
        return Target(what, "", f"< {limit:g} ms", None)
    return Target(what, f"{value:.2f} ms", f"< {limit:g} ms", limit / value if value else 99.0)


def _at_least(what: str, value: float | None, limit: float, ended: float | None) -> Target:
    if value is None:
        return Target(what, "", f">= {limit:,.0f}/s", None)
    if ended:
        # Deliveries to the streams left are no measure of a feed that drops clients.
        return Target(what, f"{rate(value)}, but {ended:.0f} streams ended by the server",
                      f">= {limit:,.0f}/s to every client", 0.0)
    return Target(what, rate(value), f">= {limit:,.0f}/s", value / limit)


def _cost_at_most(what: str, value: float | None, limit: float) -> Target:
    if value is None:
        return Target(what, "", f"<= {limit:.0%} slower", None)
    # A run that keeps results as fast as one that does not meets it with room to spare.
    factor = limit / value if value > 0 else 99.0
    return Target(what, f"{value:+.1%}", f"<= {limit:.0%} slower", factor)


def _share_at_least(what: str, value: float | None, limit: float) -> Target:
    if value is None:
        return Target(what, "", f">= {limit:.0%} of it", None)
    return Target(what, f"{value:.1%}", f">= {limit:.0%} of it", value / limit)


def _bytes_within(what: str, top: float | None, bottom: float | None, factor: float,
                  names: tuple[str, str], reference: bool = False) -> Target:
    if top is None or bottom is None or bottom <= 0:
        return Target(what, "", f"<= {factor:g}x", None, reference)
    ratio = top / bottom
    measured = f"{ratio:.2f}x ({names[0]} {top:,.0f} B vs {names[1]} {bottom:,.0f} B)"
    return Target(what, measured, f"<= {factor:g}x", factor / ratio, reference)


def _taskq_named(command: str) -> str:
    """taskq's side of a drain ratio: the worker command that reached it, when known."""
    return command or "taskq"


def _duel(what: str, key: str, factor: float, figures: dict[str, float],
          labels: dict[str, str]) -> Target:
    """A drain duel's verdict (bench/drain_duel.py), from its figures named `key`-*."""
    return _round_ratio(what, figures.get(f"{key}-ratio"), figures.get(f"{key}-taskq"),
                        figures.get(f"{key}-best-peer"), factor,
                        (_taskq_named(labels.get(f"{key}-taskq", "")),
                         labels.get(f"{key}-best-peer", "fastest peer")))


def judge(figures: dict[str, float], labels: dict[str, str]) -> list[Target]:
    get = figures.get
    peer_drain = labels.get("peer-best-drain", "fastest peer")
    peer_drain_incr = labels.get("peer-best-drain-incr", "fastest peer")
    peer_enqueue = labels.get("peer-best-enqueue", "fastest peer")
    duel_peer = labels.get("duel-best-peer", "fastest peer")
    def_command = labels.get("peer-taskq-drain-incr-def", "")
    async_command = labels.get("peer-taskq-drain-incr-async", "")
    peer_memory = labels.get("memory-peer-ready", "leanest peer")
    leanest = labels.get("memory-leanest-ready", "leanest peer")
    return [
        _duel("Drain, one `taskq worker` command, the same counted no-op as the peers (a "
              "tally-file append), interleaved rounds (median of the rounds' ratios)",
              "tally-duel", DRAIN_FACTOR, figures, labels),
        _ratio("Drain, one `taskq worker` command, the same counted no-op as the peers "
               "(a tally-file append), the peers table's best figures (reference)",
               get("peer-taskq-drain"), get("peer-best-drain"), DRAIN_FACTOR,
               ("taskq", peer_drain), reference=True),
        _ratio("Drain, the same no-op counted by one Redis INCR through redis-py, either "
               "handler kind (reference)",
               get("peer-taskq-drain-incr"), get("peer-best-drain-incr"), DRAIN_FACTOR,
               ("taskq", peer_drain_incr), reference=True),
        _ratio("Drain, taskq's uncounted no-op vs the peers' counted one (reference)",
               get("drain-one-command", get("drain-best")), get("peer-best-drain"), DRAIN_FACTOR,
               ("taskq", peer_drain), reference=True),
        _ratio("Single-call enqueue (`Task.enqueue`) vs the fastest peer's one call, "
               "interleaved rounds", get("duel-taskq"), get("duel-best-peer"),
               SINGLE_ENQUEUE_FACTOR, ("taskq", duel_peer)),
        _duel("Drain, `def` handler, the no-op counted by one Redis INCR, one `taskq worker` "
              "command, interleaved rounds (median of the rounds' ratios)",
              "drain-duel", DEF_INCR_DRAIN_FACTOR, figures, labels),
        _ratio("Drain, `def` handler, the no-op counted by one Redis INCR, one `taskq worker` "
               "command, the peers table's best figures (reference)",
               get("peer-taskq-drain-incr-def"), get("peer-best-drain-incr"),
               DEF_INCR_DRAIN_FACTOR, (_taskq_named(def_command), peer_drain_incr),
               reference=True),
        _ratio("Drain, `async def` handler, the no-op counted by one Redis INCR, one "
               "`taskq worker` command (reference)", get("peer-taskq-drain-incr-async"),
               get("peer-best-drain-incr"), DEF_INCR_DRAIN_FACTOR,
               (_taskq_named(async_command), peer_drain_incr), reference=True),
        _ratio("`enqueue_many` vs the fastest peer's enqueue (one call per task)",
               get("enqueue-many"), get("peer-best-enqueue"), ENQUEUE_FACTOR,
               ("taskq", peer_enqueue)),
        _at_most("Pickup latency p50, `async def` handler", get("latency-p50-async"), P50_MS),
        _at_most("Pickup latency p99, `async def` handler", get("latency-p99-async"), P99_MS),
        _at_most("Pickup latency p50, `def` handler", get("latency-p50-sync"), P50_MS),
        _at_most("Pickup latency p99, `def` handler", get("latency-p99-sync"), P99_MS),
        _cost_at_most("Drain of the `def` no-op with results kept, vs results off",
                      get("results-cost-sync"), RESULTS_COST),
        _cost_at_most("Drain of the `async def` no-op with results kept, vs results off",
                      get("results-cost-async"), RESULTS_COST),
        _at_most("`result()` p50 after the handler returned, `def`", get("result-p50-sync"),
                 RESULT_P50_MS),
        _at_most("`result()` p50 after the handler returned, `async def`",
                 get("result-p50-async"), RESULT_P50_MS),
        _share_at_least("A rate-limited drain against its configured rate",
                        get("rate-limit-share"), RATE_LIMIT_SHARE),
        _bytes_within("Redis memory per ready task vs the leanest peer keeping state, "
                      "retries and times", get("memory-taskq-ready"),
                      get("memory-peer-ready"), MEMORY_FACTOR, ("taskq", peer_memory)),
        _bytes_within("Redis memory per ready task vs the leanest peer, whatever it keeps "
                      "(reference)", get("memory-taskq-ready"), get("memory-leanest-ready"),
                      MEMORY_FACTOR, ("taskq", leanest), reference=True),
        _at_least("Feed deliveries, 100 clients, one `taskq serve`", get("feed-100"),
                  FEED_DELIVERIES, get("feed-100-ended")),
        _at_least("Feed deliveries, 1,000 clients, one `taskq serve`", get("feed-1000"),
                  FEED_DELIVERIES, get("feed-1000-ended")),
    ]


def section(figures: dict[str, float], labels: dict[str, str]) -> tuple[Section, bool]:
    """The targets table, and whether any measured target was missed."""
    targets = judge(figures, labels)
    result = Section("targets", "Targets (issues 7, 16, 18 and 21)",
                     ["target", "measured", "required", "factor (>= 1 is met)", "verdict"],
                     rows=[t.row() for t in targets])
    result.notes.append(
        "The factor is how far the figure is from its target in the good direction: "
        "measured / required for rates and ratios, limit / measured for latencies. "
        "The rows marked reference are shown beside a target and judged on nothing. "
        "Issue 7's drain verdict is the like-for-like row: taskq and the "
        "peers each run the same handler body, a no-op that appends one byte to a tally "
        "file so a lost or doubled run fails the bench, judged in interleaved rounds (the "
        "README's recommended command against every fast peer command, the median of the "
        "rounds' ratios) as issue 21's `def` drain is; its references are the peers "
        "table's figures for it, the same no-op "
        "counted by a Redis INCR (which costs the workers more than the queue under test "
        "does) and taskq's no-op with no count in the handler at all (the queue's own "
        "completed total counts it). Issue 21 made the INCR-counted no-op the verdict for "
        "its targets: the `def`-handler drain is judged on it in interleaved rounds (the "
        "README's recommended command against every fast peer command, the median of the "
        "rounds' ratios), the peers table's best figures and the `async def` drain beside "
        "it are reference; single-call enqueue is judged on the interleaved rounds' "
        "medians. Rates on this machine drift from one minute to the next, so only "
        "figures taken in the same rounds are judged against each other.")
    missed = any(t.missed for t in targets)
    return result, missed
