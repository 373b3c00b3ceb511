"""The catalogued model checks, each run at most once per test session.

A test that walks a model's state graph watches the catalogued run itself instead of
searching the model again: `watch` and `walk` register recorders at import, and pytest
imports every test module before it runs a test, so the one search that gives the
catalogue's verdict is also the one the recorders see.
"""

from __future__ import annotations

import functools
from collections.abc import Set as AbstractSet
from pathlib import Path
from typing import Any

from specs.catalog import CHECKS, ROOT
from specs.tlacheck import Property, Result, StepProperty
from specs.tlacheck.suite import Check, Outcome

Step = tuple[Any, str, Any]

_watchers: dict[Check, list[Property[Any]]] = {}
_walked: dict[Check, set[Step]] = {}
_started: set[Check] = set()


@functools.cache
def outcome(check: Check) -> Outcome:
    """`check` run against the specs directory; the bigger models take seconds."""
    _started.add(check)
    return check.run(ROOT, _watchers.get(check, ()))


def catalogued(spec: str, config: str) -> Check:
    """The catalogue's check of `spec` (a .tla file name) under `config` (a .cfg name)."""
    for c in CHECKS:
        if Path(c.spec).name == spec and Path(c.config).name == config:
            return c
    raise LookupError(f"{spec} under {config} is not catalogued")


def result(spec: str, config: str) -> Result[Any]:
    return outcome(catalogued(spec, config)).result


def watch(spec: str, config: str, *recorders: Property[Any]) -> None:
    """Have the catalogued run of `spec` under `config` check `recorders` too: properties
    that always hold and keep what they see. Call at import, before that run."""
    c = catalogued(spec, config)
    if c in _started:
        raise RuntimeError(f"{spec} under {config} has run: watch it at import")
    _watchers.setdefault(c, []).extend(recorders)


def walk(spec: str, config: str) -> None:
    """Keep every step of the catalogued run of `spec` under `config` for `steps`."""
    seen: set[Step] = set()

    def record(s: Any, label: str, t: Any) -> bool:
        seen.add((s, label, t))
        return True

    watch(spec, config, StepProperty("Steps", record))
    _walked[catalogued(spec, config)] = seen


def steps(spec: str, config: str) -> AbstractSet[Step]:
    """Every step s -[label]-> t of the state graph of `spec` under `config`, a check
    that holds and that `walk` registered."""
    c = catalogued(spec, config)
    if c not in _walked:
        raise LookupError(f"{spec} under {config} is not walked: call walk() at import")
    found = outcome(c).result
    assert found.ok, found.violation
    # The set the run filled, read-only by its type: a frozen copy of millions of steps
    # would hash every one of them again.
    return _walked[c]
