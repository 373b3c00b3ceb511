"""The catalogued model checks, each run at most once per test session."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

from specs.catalog import CHECKS, ROOT
from specs.tlacheck import Result
from specs.tlacheck.suite import Check, Outcome


@functools.cache
def outcome(check: Check) -> Outcome:
    """`check` run against the specs directory; the bigger models take seconds."""
    return check.run(ROOT)


def catalogued(spec: str, config: str) -> Check:
    """The catalogue's check of `spec` (a .tla file name) under `config` (a .cfg name)."""
    for c in CHECKS:
        if Path(c.spec).name == spec and Path(c.config).name == config:
            return c
    raise LookupError(f"{spec} under {config} is not catalogued")


def result(spec: str, config: str) -> Result[Any]:
    return outcome(catalogued(spec, config)).result
