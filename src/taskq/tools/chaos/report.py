"""The chaos run's Markdown report: parameters, faults, checks, throughput, recovery."""

from __future__ import annotations

import datetime
import platform
from collections import Counter

from taskq.limits import PRIORITY
from taskq.tools.chaos.canceller import CANCEL_EVERY, DOOMED_TASK
from taskq.tools.chaos.flows import CHAIN_LENGTH, CHORD_SIZE
from taskq.tools.chaos.producer import (
    DEFAULT_SHARE,
    LIMIT_KEYS,
    LIMITED_SHARE,
    THROTTLED_EVERY,
    THROTTLED_RUN,
)
from taskq.tools.chaos.run import ChaosResult
from taskq.tools.chaos.schedules import (
    LIMITED_MOST,
    LIMITED_TASK,
    POLICY,
    THROTTLED_BURST,
    THROTTLED_PER_SECOND,
    THROTTLED_TASK,
)


def render(result: ChaosResult) -> str:
    f, injector = result.findings, result.injector
    completed = sum(1 for t in result.produced.acknowledged if f.final_states.get(t) == "completed")
    rate = completed / result.finished_at if result.finished_at else 0.0
    recoveries = [x.recovered_after for x in injector.faults if x.recovered_after is not None]
    kinds = Counter(x.kind for x in injector.faults)
    verdict = "PASSED" if f.passed else "FAILED"
    lines = [
        f"# taskq chaos report: {verdict}",
        "",
        f"Run on {datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M} UTC, "
        f"{platform.node()} ({platform.machine()}, Python {platform.python_version()}).",
        "",
        "## Parameters",
        "",
        "| option | value |",
        "|---|---|",
        *[f"| {name} | {value} |" for name, value in _parameters(result).items()],
        "",
        "Sizing: the simulated work is short and each worker runs several handlers at once, "
        "so that many tasks are in flight (and between their charge and their ack) whenever "
        "a fault strikes, and a full run fits well within an hour on two cores.",
        "",
        "## Checks",
        "",
        "| check | result | detail |",
        "|---|---|---|",
        *[f"| {c.name} | {'pass' if c.ok else '**FAIL**'} | {c.detail} |" for c in f.checks],
        "",
        "## Figures",
        "",
        f"- {completed} of {len(result.produced.acknowledged)} acknowledged tasks completed in "
        f"{result.finished_at:.0f} s: {rate:.0f} tasks/s through every fault.",
        f"- Faults injected: {len(injector.faults)} "
        f"({', '.join(f'{n} {k}' for k, n in sorted(kinds.items()))}) over the first "
        f"{result.fault_window:.0f} s.",
        f"- Longest recovery after a fault (its end to the next completed task): "
        f"{max(recoveries):.2f} s; median {sorted(recoveries)[len(recoveries) // 2]:.2f} s."
        if recoveries else "- No recovery measured.",
        f"- The producer retried {result.produced.retries} batch(es) through Redis outages; "
        f"{result.produced.resends} duplicate sends.",
        *[f"- Schedule {c.schedule}, every {c.period_ms} ms (policy {POLICY}): {c.ticks} ticks "
          f"from the first fired to the last, {c.tasks} tasks, {c.effects} effects."
          for c in f.ticks],
        *_cancels(result),
        *_flows(result),
        _priorities(result),
        f"- Event log: {f.events} events; Redis memory at the end {f.used_memory / 2**20:.1f} MiB.",
        *_losses(result),
        "",
        "## Faults",
        "",
        "| # | at (s) | fault | target | ended (s) | next completion after |",
        "|---|---|---|---|---|---|",
        *[f"| {i} | {x.at:.2f} | {x.kind} | {x.target} {x.note} | "
          f"{'' if x.ended is None else f'{x.ended:.2f}'} | "
          f"{'' if x.recovered_after is None else f'{x.recovered_after:.2f} s'} |"
          for i, x in enumerate(injector.faults, 1)],
        "",
    ]
    return "\n".join(lines)


def _parameters(result: ChaosResult) -> dict[str, object]:
    o = result.options
    return {
        "tasks": o.tasks, "workers": o.workers, "concurrency per worker": o.concurrency,
        "prefetch per worker": o.prefetch,
        "resend every": o.resend_every, "fault interval (mean s)": o.fault_interval,
        "redis faults": o.redis_faults, "max seconds of faults": o.max_seconds,
        "drain timeout (s)": o.drain_timeout, "ledger guard": o.guard, "seed": o.seed,
        "simulated work (s)": f"{o.work_seconds} before the charge, "
                              f"{o.after_effect_seconds} after it",
        "lease (s)": o.lease_seconds, "appendfsync": o.appendfsync,
        "priorities": f"{DEFAULT_SHARE:.0%} at the default ({PRIORITY.default}), the others "
                      f"drawn evenly from {PRIORITY.low} to {PRIORITY.high}, by seed",
        "concurrency limit": f"{LIMITED_SHARE:.0%} of tasks sent as `{LIMITED_TASK}` (by "
                             f"seed), spread over {len(LIMIT_KEYS)} accounts, at most "
                             f"{LIMITED_MOST} of its runs at once per account"
                             if o.shards == 1 else "none: a sharded queue refuses limits",
        "rate limit": f"{THROTTLED_RUN} of every {THROTTLED_EVERY:,} tasks sent as "
                      f"`{THROTTLED_TASK}`, at once, started at most "
                      f"{THROTTLED_PER_SECOND}/s (burst {THROTTLED_BURST}) across every "
                      "worker"
                      if o.shards == 1 else "none: a sharded queue refuses limits",
        "shards": "1 (one queue)" if o.shards == 1 else
                  f"{o.shards}: each task on the shard of its key, each shard checked",
        "cancels": f"up to one task in {CANCEL_EVERY}, picked from ready, leased, delayed "
                   f"and the DLQ as the run goes; {len(result.cancels.doomed)} "
                   f"`{DOOMED_TASK}` tasks (no worker runs them: each dies at once) "
                   "cancelled out of the DLQ",
        "redis": o.redis_url or "embedded, AOF on",
        "replay": f"`taskq chaos --seed {o.seed} ...` with the same options",
    }  # fmt: skip


def _cancels(result: ChaosResult) -> list[str]:
    c = result.findings.cancels
    calls = sum(c.answers.values())
    answers = ", ".join(f"{n} {a}" for a, n in sorted(c.answers.items()))
    ended = ", ".join(f"{n} {how}" for how, n in sorted(c.ended.items()))
    timing = (f": {c.before} written before the cancel, {c.untold} after it but before a "
              f"renewal told their run, {c.let_in_before} after that but let in by a renewal "
              f"before the cancel, {len(c.told_first)} let in after their run was told"
              if c.times_compared else " (times not compared: Redis is not the run's own)")
    return [
        f"- Cancel calls: {calls} answered ({answers or 'none'}), {c.unanswered} unanswered "
        f"when the run stopped; {c.outages} cut off by Redis outages and made again.",
        f"- Tasks ended cancelled: {c.cancelled} ({ended or 'none'}); {c.acked_first} "
        "cancel-requested tasks completed, their ack first.",
        f"- Effects of tasks ended cancelled: {c.effects}; of those completed by an ack that "
        f"came first: {c.acked_first_effects}{timing}.",
    ]


def _flows(result: ChaosResult) -> list[str]:
    c = result.findings.flows
    if not c.started:
        return ["- Workflows: none (a sharded queue refuses them)."] if result.options.shards > 1 \
            else []
    return [f"- Workflows: {c.started} started ({c.chains} chains of {CHAIN_LENGTH}, "
            f"{c.chords} chords of {CHORD_SIZE} and a callback), {c.completed} completed with "
            f"the right value, {c.triggers} stages started ({len(c.triggered_not_once)} not "
            f"exactly once), {c.callbacks_charged} last-step charges; "
            f"{result.flows.retries} starts retried through Redis outages."]


def _priorities(result: ChaosResult) -> str:
    sent = result.produced.by_priority
    p = result.findings.priority
    mix = ", ".join(f"{sent[level]} at {level}" for level in sorted(sent, reverse=True))
    return (f"- Priorities of the acknowledged tasks: {mix or 'none'}. P1 checked {p.checked} "
            f"of {p.leases} leases against the ready lists the log implies: "
            f"{len(p.violations)} out of order.")


def _losses(result: ChaosResult) -> list[str]:
    lost = result.findings.lost_enqueues
    if not lost:
        return ["- Nothing acknowledged was lost."]
    return [
        f"- {len(lost)} acknowledged enqueue(s) were lost by Redis crashes: with appendfsync "
        f"{result.options.appendfsync} Redis acknowledges a write before it reaches the disk, "
        "so a SIGKILL can drop up to the last second of writes (first few: "
        f"{', '.join(lost[:5])}). Their duplicate sends, where any, re-created them.",
    ]
