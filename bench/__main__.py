"""`python -m bench`: run the measurements, print the tables, write docs/benchmarks.md."""

from __future__ import annotations

import argparse
import datetime
import functools
import os
import shutil
import sys
import time
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path

from bench import (
    ceiling,
    drain,
    drain_duel,
    duel,
    enqueue,
    feed,
    heartbeats,
    latency,
    limits,
    memory,
    profile,
    profile_incr,
    results,
    shards,
    targets,
)
from bench.harness import ROOT, Options, Section, Server
from bench.peers import driver as peers
from bench.report import (
    Machine,
    cpu_seconds,
    old_server_warning,
    render_markdown,
    render_text,
)

Measure = Callable[[Server, Options, dict[str, float]], Section]

MEASUREMENTS: dict[str, Measure] = {
    "enqueue": enqueue.measure,
    "drain": drain.measure,
    "latency": latency.measure,
    "results": results.measure,
    "limits": limits.measure,
    "feed": feed.measure,
    "ceiling": ceiling.measure,
    "shards": shards.measure,
    "heartbeats": heartbeats.measure,
    "peers": peers.measure,
    "duel": duel.measure,
    "drainduel": drain_duel.measure,
    "tallyduel": drain_duel.measure_tally,
    "memory": memory.measure,
}
PROFILES = ("profile", "profile-incr")
NAMES = (*MEASUREMENTS, *PROFILES)
QUICK_N = 400


def parse(argv: Sequence[str] | None) -> Options:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument("--quick", action="store_true",
                        help=f"a smoke run: --n {QUICK_N} unless given, fewer levels")
    parser.add_argument("--only", action="append", default=[], metavar="NAME",
                        help=f"run only these (repeatable or comma-separated): "
                             f"{', '.join(NAMES)}")
    parser.add_argument("--n", type=int, default=None,
                        help="tasks per drain (default 20000; others scale from it)")
    parser.add_argument("--repeats", type=int, default=3, help="runs per figure (default 3)")
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "benchmarks.md",
                        help="the Markdown report (default docs/benchmarks.md)")
    args = parser.parse_args(argv)
    only = frozenset(name.strip() for value in args.only for name in value.split(",") if name)
    unknown = only - set(NAMES)
    if unknown:
        parser.error(f"unknown measurement(s): {', '.join(sorted(unknown))}; "
                     f"choose from {', '.join(NAMES)}")
    n = args.n if args.n is not None else (QUICK_N if args.quick else 20_000)
    if n < 20 or args.repeats < 1:
        parser.error("--n must be at least 20 and --repeats at least 1")
    return Options(n=n, repeats=args.repeats, quick=args.quick, only=only, out=args.out)


def _guarded(name: str, measure: Measure, server: Server, options: Options,
             figures: dict[str, float]) -> Section:
    """The measurement's section, or one that says how it broke: one failure must not
    cost the figures the other measurements took."""
    try:
        return measure(server, options, figures)
    except Exception as e:
        traceback.print_exc()
        broken = Section(name, f"{name}: broken", ["what", "error"])
        broken.fail(name, e)
        return broken


def main(argv: Sequence[str] | None = None) -> int:
    options = parse(argv)
    started = time.monotonic()
    server = Server()
    machine = Machine(server.version, "TCP (127.0.0.1)", os.getloadavg(),
                      datetime.datetime.now(datetime.UTC), cpu_before=cpu_seconds(),
                      redis_binary=server.embedded.binary)
    warning = old_server_warning(server.version)
    if warning:
        print(f"warning: Redis {server.version} at {server.embedded.binary} is {warning}",
              file=sys.stderr, flush=True)
    sections: list[Section] = []
    figures: dict[str, float] = {}
    labels: dict[str, str] = {}
    try:
        for name, measure in MEASUREMENTS.items():
            if not options.wants(name):
                continue
            print(f"-- {name}", file=sys.stderr, flush=True)
            began = time.monotonic()
            section = _guarded(name, measure, server, options, figures)
            print(f"   {name} took {time.monotonic() - began:.0f} s", file=sys.stderr, flush=True)
            sections.append(section)
            figures.update(section.figures)
            labels.update(section.labels)
        judged, missed = targets.section(figures, labels)
        sections.append(judged)
        profiles: dict[str, Measure] = {
            "profile": profile.measure,
            "profile-incr": functools.partial(profile_incr.measure, labels=labels)}
        for name, measure in profiles.items():
            # `--only profile` asks for every profile; a full run profiles a miss.
            asked = name in options.only or "profile" in options.only
            if asked or (missed and not options.only and not options.quick):
                print(f"-- {name}", file=sys.stderr, flush=True)
                sections.append(_guarded(name, measure, server, options, figures))
    finally:
        server.close()
    machine.load_after = os.getloadavg()
    machine.cpu_after = cpu_seconds()
    machine.elapsed = time.monotonic() - started
    versions = {k: v for section in sections for k, v in section.versions.items()}
    options.out.parent.mkdir(parents=True, exist_ok=True)
    options.out.write_text(render_markdown(machine, options, sections, versions))
    print(render_text(sections))
    print(f"\nwrote {options.out}")
    failures = [f for section in sections for f in section.failures]
    for failure in failures:
        print(f"FAILED: {failure}", file=sys.stderr)
    if failures:
        print(f"logs of workers and servers: {server.logs}", file=sys.stderr)
    else:
        shutil.rmtree(server.logs, ignore_errors=True)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
