"""Where a `taskq worker` spends its time while it drains the peers' counted no-op (a
tally-file append, the drain target's workload): CPU per task in the worker and in
Redis, and py-spy's top functions by samples taken while a thread held the GIL (Python
work, not waits)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.drain import check_drained, fill, stats_field, worker_argv
from bench.harness import BenchError, Child, Options, Section, Server, drain_timeout, time_drain
from bench.tally import TALLY_ENV

TOP = 20
RATE_HZ = 250
# Frames every stack of a thread passes through: they say nothing about where time goes.
SCAFFOLDING = ("<frozen runpy>", "threading.py)", "(taskq/cli/", "(taskq/__main__.py)")


def py_spy() -> str | None:
    beside = Path(sys.executable).parent / "py-spy"
    return str(beside) if beside.exists() else shutil.which("py-spy")


def frame_label(frame: dict[str, Any]) -> str:
    path = str(frame.get("file", ""))
    for marker in ("site-packages/", "/src/", "/lib/python3"):
        if marker in path:
            path = path.split(marker, 1)[1]
            break
    # py-spy's line is the line executing in that frame; group by function instead.
    return f"{frame.get('name', '?')} ({path})"


def summarize(speedscope: dict[str, Any]) -> tuple[int, Counter[str], Counter[str], Counter[str]]:
    """Samples, and per function its cumulative and own samples, and per thread its samples."""
    frames = speedscope["shared"]["frames"]
    labels = [frame_label(frame) for frame in frames]
    cumulative: Counter[str] = Counter()
    own: Counter[str] = Counter()
    threads: Counter[str] = Counter()
    total = 0
    for profile in speedscope["profiles"]:
        samples = profile.get("samples", [])
        weights = profile.get("weights") or [1] * len(samples)
        name = str(profile.get("name", "?"))
        quoted = name.split('"')[1] if name.count('"') >= 2 else ""
        thread = quoted or name
        for stack, weight in zip(samples, weights, strict=False):
            if not stack:
                continue
            count = round(weight) if profile.get("unit") == "none" else 1
            total += count
            threads[thread] += count
            for label in {labels[i] for i in stack}:
                cumulative[label] += count
            own[labels[stack[-1]]] += count
    return total, cumulative, own, threads


def is_bench_handler(label: str, name: str) -> bool:
    """Whether a frame label is bench/tasks.py's handler `name`, wherever `make_app`
    defines it (py-spy names a function by its qualified name)."""
    function, _, where = label.partition(" (")
    return function.rsplit(".", 1)[-1] == name and where.endswith("bench/tasks.py)")


def process_cpu_seconds(pid: int) -> float:
    """User + system CPU seconds a process has used (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def redis_cpu_seconds(server: Server) -> float:
    cpu = server.client.info("cpu")
    return float(cpu["used_cpu_sys"]) + float(cpu["used_cpu_user"])


@dataclass(frozen=True)
class Recorded:
    profile: dict[str, Any]
    rate: float
    worker_us: float  # worker process CPU per task
    redis_us: float  # Redis CPU per task


def _record(server: Server, name: str, n: int, concurrency: int, spy: str) -> Recorded:
    server.flush()
    queue = f"profile-{uuid.uuid4().hex[:8]}"
    broker = fill(server, queue, name, n)
    out = server.logs / f"{queue}.speedscope.json"
    tally_env = {TALLY_ENV: str(server.logs / f"{queue}.tally")}
    worker = Child(worker_argv(queue, concurrency), server.env(**tally_env),
                   server.logs / f"{queue}.log")
    count = stats_field(server, queue, "completed:completed")
    recorder: subprocess.Popen[bytes] | None = None
    try:
        deadline = time.monotonic() + 30
        while count() == 0 and time.monotonic() < deadline:
            time.sleep(0.002)
        first, worker_cpu, redis_cpu = count(), process_cpu_seconds(worker.pid), \
            redis_cpu_seconds(server)
        recorder = subprocess.Popen(
            [spy, "record", "--pid", str(worker.pid), "--rate", str(RATE_HZ), "--nonblocking",
             "--gil", "--format", "speedscope", "--output", str(out)],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        drained = time_drain(count, n, [worker], drain_timeout(n))
        done = count() - first
        worker_us = (process_cpu_seconds(worker.pid) - worker_cpu) / done * 1e6
        redis_us = (redis_cpu_seconds(server) - redis_cpu) / done * 1e6
        recorder.send_signal(signal.SIGINT)
        _, err = recorder.communicate(timeout=30)
        check_drained(server, broker, n)
    finally:
        if recorder is not None and recorder.poll() is None:
            recorder.kill()
            recorder.wait()
        worker.stop()
    if not out.exists():
        raise BenchError(f"py-spy wrote no profile: {err.decode(errors='replace')[-300:]}")
    data: dict[str, Any] = json.loads(out.read_text())
    return Recorded(data, drained.rate, worker_us, redis_us)


def measure(server: Server, options: Options, known: dict[str, float]) -> Section:
    # The peers' counted no-op, as an `async def` handler (taskq's faster kind for it),
    # at the concurrency the drain found best for async handlers; one process, so one
    # profile holds all of it.
    name = "bench.tally_async"
    concurrency = int(known.get("drain-bench.noop_async-concurrency", 64))
    section = Section("profile", f"Profile: one `taskq worker` process (concurrency "
                      f"{concurrency}) draining {options.n:,} `async def` tasks that each append "
                      f"a byte to a tally file (the peers' counted no-op), py-spy at "
                      f"{RATE_HZ} Hz",
                      ["function (file)", "cumulative", "own"])
    spy = py_spy()
    if spy is None:
        section.notes.append("Not run: py-spy is not installed (`pip install -e '.[bench]'`).")
        return section
    try:
        recorded = _record(server, name, options.n, concurrency, spy)
    except (BenchError, OSError, subprocess.TimeoutExpired) as e:
        section.fail("py-spy record", BenchError(str(e)))
        return section
    total, cumulative, own, threads = summarize(recorded.profile)
    if not total:
        section.notes.append("py-spy recorded no samples.")
        return section
    shown = [(label, samples) for label, samples in cumulative.most_common()
             if not any(mark in label for mark in SCAFFOLDING)][:TOP]
    for label, samples in shown:
        section.rows.append([f"`{label}`", f"{samples / total:.1%}", f"{own[label] / total:.1%}"])
    handler = sum(samples for label, samples in cumulative.items()
                  if is_bench_handler(label, "tally_async"))
    section.figures["profile-worker-us"] = recorded.worker_us
    section.figures["profile-redis-us"] = recorded.redis_us
    section.notes.append(
        f"CPU per task while it drained at {recorded.rate:,.0f} tasks/s under the profiler: "
        f"the worker process {recorded.worker_us:,.0f} µs, Redis {recorded.redis_us:,.0f} µs "
        f"(the machine has 2 cores, so the two together cap the rate at about "
        f"{2e6 / (recorded.worker_us + recorded.redis_us):,.0f} tasks/s). The handler "
        f"body itself (one `os.write`) holds {handler / total:.0%} of the worker's GIL "
        f"samples; the rest is taskq's.")
    section.notes.append(
        f"{total:,} samples taken while a thread held the GIL. Share by thread: "
        + ", ".join(f"{name} {samples / total:.0%}" for name, samples in threads.most_common(4))
        + ". Top by own samples: "
        + ", ".join(f"`{label.split(' (')[0]}` {samples / total:.1%}"
                    for label, samples in own.most_common(8)) + ".")
    return section
