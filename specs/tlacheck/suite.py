"""A check: one .tla under one .cfg, with its expected outcome and TLC's figures."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from . import cfg as cfgs
from .checker import Result, check
from .model import Model, Property

Verdict = Literal["ok", "invariant", "deadlock", "property"]


@dataclass(frozen=True)
class Expect:
    """How a check should end; `depth` is the counterexample's length in states."""

    verdict: Verdict
    name: str | None = None
    depth: int | None = None

    @classmethod
    def holds(cls) -> Expect:
        return cls("ok")

    @classmethod
    def violated(cls, invariant: str, depth: int) -> Expect:
        return cls("invariant", invariant, depth)

    @classmethod
    def property_violated(cls, prop: str, depth: int) -> Expect:
        return cls("property", prop, depth)

    @classmethod
    def deadlock(cls, depth: int) -> Expect:
        return cls("deadlock", "Deadlock", depth)

    def __str__(self) -> str:
        return describe(self.verdict, self.name, self.depth)

    def met_by(self, result: Result[Any]) -> bool:
        found = result.violation
        if found is None:
            return self.verdict == "ok"
        return (found.kind, found.name, found.depth) == (self.verdict, self.name, self.depth)


@dataclass(frozen=True)
class Figures:
    """TLC's closing counters for this check, as `source` printed them; None if not stated.

    `left` is TLC's "states left on queue". Both checkers are held to these figures:
    tlacheck by `Check.run`, TLC itself by `python -m specs.tlc`.
    """

    source: str
    distinct: int | None = None
    generated: int | None = None
    depth: int | None = None
    left: int | None = None

    @property
    def complete(self) -> bool:
        """Every counter is stated, so a run that matches them all matches any other
        run that does."""
        return None not in (self.distinct, self.generated, self.depth, self.left)

    def mismatches(self, result: Result[Any]) -> list[str]:
        return self.differences(
            {
                "distinct": result.distinct,
                "generated": result.generated,
                "depth": result.depth,
                "left": result.queued,
            }
        )

    def differences(self, got: dict[str, int]) -> list[str]:
        """`got`'s counters (named as the fields) that differ from these figures."""
        wanted = {
            "distinct": self.distinct,
            "generated": self.generated,
            "depth": self.depth,
            "left": self.left,
        }
        return [
            f"{key} {got[key]} != {self.source}'s {value}"
            for key, value in wanted.items()
            if value is not None and got[key] != value
        ]

    def __str__(self) -> str:
        parts = [f"{self.generated} generated"] if self.generated is not None else []
        if self.distinct is not None:
            parts.append(f"{self.distinct} distinct")
        if self.depth is not None:
            parts.append(f"depth {self.depth}")
        if self.left is not None:
            parts.append(f"{self.left} left")
        return ", ".join(parts)


@dataclass(frozen=True)
class Check:
    """A model checked under one configuration file, as `tlc -config` would run it.

    `spec` and `config` are paths relative to the specs directory; `build` turns
    the parsed configuration into the Python transcription of the spec.
    """

    spec: str
    config: str
    build: Callable[[cfgs.Config], Model[Any]]
    expect: Expect
    tlc: Figures | None = None

    @property
    def name(self) -> str:
        return Path(self.spec).stem

    @property
    def config_name(self) -> str:
        return Path(self.config).name

    def run(self, root: Path, watchers: Sequence[Property[Any]] = ()) -> Outcome:
        """Check the model; `watchers` are properties added to the model's own, so a
        recorder that always holds sees every step of this very search."""
        model = self.build(cfgs.load(root / self.config))
        if watchers:
            model = dataclasses.replace(model, properties=[*model.properties, *watchers])
        result = check(model)
        problems = [] if self.expect.met_by(result) else [f"expected {self.expect}"]
        if self.tlc is not None:
            problems += self.tlc.mismatches(result)
        return Outcome(self, result, tuple(problems))


@dataclass(frozen=True)
class Outcome:
    check: Check
    result: Result[Any]
    problems: tuple[str, ...]

    @property
    def passed(self) -> bool:
        return not self.problems


def describe(verdict: Verdict, name: str | None, depth: int | None) -> str:
    if verdict == "ok":
        return "ok"
    if verdict == "deadlock":
        return f"deadlock at depth {depth}"
    return f"violated {name} at depth {depth}"


def summary(result: Result[Any]) -> str:
    found = result.violation
    if found is None:
        return "ok"
    return describe(found.kind, found.name, found.depth)
