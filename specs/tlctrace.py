"""TLC's trace validation of a real event log against TaskQueue (TaskQueueTrace.tla).

    python -m specs.tlctrace .chaos/ci/events.jsonl   # as `taskq chaos --dir .chaos/ci` left it

The log (JSON lines, as `taskq chaos` leaves it in its directory) is exported by
`taskq.tools.tlatrace`, one trace per task, into a generated TraceData module next to a
scratch copy of specs/TaskQueue; TLC then follows the traces, `--batch` of them per run
(TLC holds every trace of a run in memory: a 100,000-task log in one run outgrows its
default heap). Exit
status: 0 when TLC accepts every trace, 1 when it rejects one (the task, the entry it
could not take and why), 2 when TLC cannot run or the log is empty.
"""

from __future__ import annotations

import argparse
import re
import shutil
import sys
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from specs import tlc
from taskq.tools import tlatrace
from taskq.tools.chaos.options import ChaosOptions

MODEL = Path(__file__).resolve().parent / "TaskQueue"
# Traces per TLC run: a CI chaos run's 4,000 fit in one, in seconds and a default heap.
BATCH = 5000
# TaskQueueTrace.cfg's PROPERTY names, for tlc.parse.
PROPERTIES = {"T3_StaleChangesNothing", "CancelledIsFinal", "CancelledNeverLeased",
              "NoEffectAfterCancelSeen"}
_LAST_N = re.compile(r"^/\\ tr = (\d+)$", re.MULTILINE)
_LAST_I = re.compile(r"^/\\ pos = (\d+)$", re.MULTILINE)


@dataclass(frozen=True)
class Verdict:
    """TLC's answer for a set of traces."""

    accepted: bool
    traces: int
    steps: int
    distinct: int
    reason: str = ""
    task: str = ""
    entry: int = 0  # 1-based index of the entry TLC could not take (0: none)

    def __str__(self) -> str:
        if self.accepted:
            return (
                f"TLC accepts all {self.traces} traces ({self.steps} steps) as behaviours "
                f"of TaskQueue: {self.distinct} distinct states"
            )
        return f"TLC rejects task {self.task}'s trace at entry {self.entry}: {self.reason}"


def check(
    traces: Mapping[str, Sequence[tlatrace.Step]], max_retries: int, workdir: Path
) -> Verdict:
    """TLC on TaskQueueTrace with `traces` as its TraceData, in `workdir`."""
    for source in MODEL.glob("*.tla"):
        shutil.copy(source, workdir / source.name)
    shutil.copy(MODEL / "TaskQueueTrace.cfg", workdir / "TaskQueueTrace.cfg")
    (workdir / "TraceData.tla").write_text(
        tlatrace.module(traces, max_retries), encoding="utf-8"
    )
    output = tlc.java_run(
        workdir, "tlc2.TLC", "-workers", "1", "-metadir", str(workdir / "states"),
        "-config", "TaskQueueTrace.cfg", "TaskQueueTrace.tla",
    )
    run = tlc.parse(output, PROPERTIES)
    tasks = list(traces)
    steps = sum(len(t) for t in traces.values())
    if run.verdict == "ok":
        return Verdict(True, len(tasks), steps, run.distinct)
    ns, is_ = _LAST_N.findall(output), _LAST_I.findall(output)
    task = tasks[int(ns[-1]) - 1] if ns else "?"
    taken = int(is_[-1]) if is_ else 0
    trace = traces.get(task, [])
    if run.verdict == "deadlock":
        entry = trace[taken] if taken < len(trace) else None
        reason = f"no TaskQueue step matches {entry.tla() if entry else 'the end'}"
        return Verdict(False, len(tasks), steps, run.distinct, reason, task, taken + 1)
    reason = f"{run.verdict} {run.name} violated after it"
    return Verdict(False, len(tasks), steps, run.distinct, reason, task, taken)


def check_in_batches(
    traces: Mapping[str, Sequence[tlatrace.Step]], max_retries: int, batch: int,
    progress: TextIO | None = None,
) -> Verdict:
    """`check` on `batch` traces at a time, each run in a scratch directory of its own;
    the first rejection ends it, else the runs' figures add up."""
    tasks = list(traces)
    accepted = Verdict(True, 0, 0, 0)
    for start in range(0, len(tasks), batch):
        chunk = {task: traces[task] for task in tasks[start:start + batch]}
        with tempfile.TemporaryDirectory(prefix="taskq-tlctrace-") as tmp:
            verdict = check(chunk, max_retries, Path(tmp))
        if not verdict.accepted:
            return verdict
        accepted = Verdict(True, accepted.traces + verdict.traces,
                           accepted.steps + verdict.steps, accepted.distinct + verdict.distinct)
        if progress is not None and len(tasks) > batch:
            print(f"  {accepted.traces} of {len(tasks)} traces accepted", file=progress)
    return accepted


def main(argv: Sequence[str], out: TextIO = sys.stdout) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m specs.tlctrace",
        description="Check with TLC that each task's events are a behaviour of TaskQueue.",
    )
    parser.add_argument("log", type=Path, help="the event log as JSON lines (events.jsonl)")
    parser.add_argument(
        "--max-retries", type=int, default=ChaosOptions.max_retries,
        help="the tasks' max_retries in that run (default: the chaos run's, %(default)s)",
    )
    parser.add_argument(
        "--batch", type=int, default=BATCH,
        help="traces per TLC run (default %(default)s)",
    )
    args = parser.parse_args(argv)
    if args.batch < 1:
        parser.error(f"--batch must be at least 1, not {args.batch}")
    traces = tlatrace.per_task(tlatrace.read_log(args.log))
    if not traces:
        print(f"{args.log}: no events", file=sys.stderr)
        return 2
    try:
        tlc.jar(), tlc.java()
        verdict = check_in_batches(traces, args.max_retries, args.batch, sys.stderr)
    except (tlc.TlcUnavailable, tlc.TlcFailed) as err:
        print(f"cannot validate with TLC: {err}", file=sys.stderr)
        return 2
    print(verdict, file=out)
    return 0 if verdict.accepted else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
