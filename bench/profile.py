"""Where a `taskq worker` spends its time during a drain: py-spy, top functions."""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

from bench.drain import check_drained, fill, stats_field, worker_argv
from bench.harness import BenchError, Child, Options, Section, Server, drain_timeout, time_drain

TOP = 20
RATE_HZ = 250
# Frames every stack of a thread passes through: they say nothing about where time goes.
SCAFFOLDING = ("<frozen runpy>", "threading.py)", "(taskq/cli/", "(taskq/__main__.py)")


def py_spy() -> str | None:
    beside = Path(sys.executable).parent / "py-spy"
    return str(beside) if beside.exists() else shutil.which("py-spy")


def _frame_label(frame: dict[str, Any]) -> str:
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
    labels = [_frame_label(frame) for frame in frames]
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


def _record(server: Server, name: str, n: int, concurrency: int,
            spy: str) -> tuple[dict[str, Any], float]:
    server.flush()
    queue = f"profile-{uuid.uuid4().hex[:8]}"
    broker = fill(server, queue, name, n)
    out = server.logs / f"{queue}.speedscope.json"
    worker = Child(worker_argv(queue, concurrency), server.env(), server.logs / f"{queue}.log")
    count = stats_field(server, queue, "completed:completed")
    recorder: subprocess.Popen[bytes] | None = None
    try:
        deadline = time.monotonic() + 30
        while count() == 0 and time.monotonic() < deadline:
            time.sleep(0.002)
        recorder = subprocess.Popen(
            [spy, "record", "--pid", str(worker.pid), "--rate", str(RATE_HZ), "--nonblocking",
             "--format", "speedscope", "--output", str(out)],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        drained = time_drain(count, n, [worker], drain_timeout(n))
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
    return data, drained.rate


def measure(server: Server, options: Options, known: dict[str, float]) -> Section:
    # The handler kind and concurrency the drain found fastest: the worker at its best.
    is_async = known.get("drain-best-async", 1.0) >= 0.5
    name, kind = ("bench.noop_async", "async def") if is_async else ("bench.noop_sync", "def")
    concurrency = int(known.get("drain-best-concurrency", 64))
    section = Section("profile", f"Profile: one `taskq worker` (concurrency {concurrency}) "
                      f"draining {options.n:,} `{kind}` no-op tasks, py-spy at {RATE_HZ} Hz",
                      ["function (file)", "cumulative", "own"])
    spy = py_spy()
    if spy is None:
        section.notes.append("Not run: py-spy is not installed (`pip install -e '.[bench]'`).")
        return section
    try:
        data, drained = _record(server, name, options.n, concurrency, spy)
    except (BenchError, OSError, subprocess.TimeoutExpired) as e:
        section.fail("py-spy record", BenchError(str(e)))
        return section
    total, cumulative, own, threads = summarize(data)
    if not total:
        section.notes.append("py-spy recorded no active samples.")
        return section
    shown = [(label, samples) for label, samples in cumulative.most_common()
             if not any(mark in label for mark in SCAFFOLDING)][:TOP]
    for label, samples in shown:
        section.rows.append([f"`{label}`", f"{samples / total:.1%}", f"{own[label] / total:.1%}"])
    section.notes.append(
        f"{total:,} active samples (py-spy skips threads it sees idle; a thread blocked "
        "in a socket read or `epoll` can still count as active) while the worker drained "
        f"at {drained:,.0f} tasks/s under the profiler. Share of samples by thread: "
        + ", ".join(f"{name} {samples / total:.0%}" for name, samples in threads.most_common(6))
        + ". Top by own samples: "
        + ", ".join(f"`{label.split(' (')[0]}` {samples / total:.1%}"
                    for label, samples in own.most_common(8)) + ".")
    return section
