"""Command line: check the catalogued models and print TLC-style figures as a table."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TextIO

from .suite import Check, Outcome, summary
from .trace import format_violation

_COLUMNS = (
    "model",
    "config",
    "distinct",
    "generated",
    "depth",
    "left",
    "result",
    "expected",
    "TLC",
)


def main(argv: Sequence[str], checks: Sequence[Check], root: Path, out: TextIO = sys.stdout) -> int:
    """Run the selected checks; 0 when every one ends as expected and matches TLC."""
    parser = argparse.ArgumentParser(
        prog="python -m specs.tlacheck",
        description="Model-check the specs/ models and their mutants.",
    )
    parser.add_argument("models", nargs="*", help="module or .cfg names to check (default: all)")
    parser.add_argument("-q", "--quiet", action="store_true", help="omit counterexample traces")
    args = parser.parse_args(argv)

    chosen = select(checks, args.models)
    if not chosen:
        known = sorted({c.name for c in checks} | {Path(c.config).stem for c in checks})
        print(
            f"no model named {', '.join(args.models)}; known: {', '.join(known)}", file=sys.stderr
        )
        return 2

    outcomes = [c.run(root) for c in chosen]
    print(table(outcomes), file=out)
    if not args.quiet:
        for outcome in outcomes:
            if outcome.result.violation is not None:
                print(f"\n== {outcome.check.name} under {outcome.check.config_name}", file=out)
                print(format_violation(outcome.result.violation), file=out)
    failed = [o for o in outcomes if not o.passed]
    print(file=out)
    for outcome in failed:
        print(
            f"FAILED {outcome.check.name} ({outcome.check.config_name}):",
            "; ".join(outcome.problems),
            file=out,
        )
    print(f"{len(outcomes) - len(failed)} of {len(outcomes)} checks as expected", file=out)
    return 1 if failed else 0


def select(checks: Sequence[Check], names: Sequence[str]) -> list[Check]:
    if not names:
        return list(checks)
    wanted = set(names)
    return [
        c
        for c in checks
        if c.name in wanted or Path(c.config).stem in wanted or c.config_name in wanted
    ]


def table(outcomes: Sequence[Outcome]) -> str:
    rows = [_COLUMNS] + [_row(o) for o in outcomes]
    widths = [max(len(row[i]) for row in rows) for i in range(len(_COLUMNS))]
    numeric = {2, 3, 4, 5}
    lines = []
    for row in rows:
        cells = [
            cell.rjust(w) if i in numeric else cell.ljust(w)
            for i, (cell, w) in enumerate(zip(row, widths, strict=True))
        ]
        lines.append("  ".join(cells).rstrip())
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def _row(outcome: Outcome) -> tuple[str, ...]:
    result, c = outcome.result, outcome.check
    tlc = ""
    if c.tlc is not None:
        tlc = "; ".join(c.tlc.mismatches(result)) or f"{c.tlc.source}: match"
    return (
        c.name,
        c.config_name,
        str(result.distinct),
        str(result.generated),
        str(result.depth),
        str(result.queued),
        summary(result),
        "yes" if c.expect.met_by(result) else f"NO, wanted {c.expect}",
        tlc,
    )
