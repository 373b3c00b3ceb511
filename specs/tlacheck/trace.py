"""Print counterexamples as TLC does, but show each step as a diff of the state."""

from __future__ import annotations

from .checker import Violation
from .model import S, State
from .values import Fn, tla


def headline(violation: Violation[S]) -> str:
    if violation.kind == "deadlock":
        return "Deadlock reached."
    if violation.kind == "invariant":
        return f"Invariant {violation.name} is violated."
    return f"Property {violation.name} is violated."


def format_violation(violation: Violation[S]) -> str:
    """The error and its trace: the first state in full, then what each step changed."""
    lines = [f"Error: {headline(violation)}", "Error: The behavior up to this point is:"]
    previous: S | None = None
    for number, step in enumerate(violation.trace, start=1):
        if previous is None:
            lines.append(f"State {number}: <Initial predicate>")
            lines.extend(
                f"/\\ {name} = {tla(value)}" for name, value in step.state._asdict().items()
            )
        else:
            lines.append(f"State {number}: <{step.action}>")
            lines.extend(f"   {change}" for change in diff(previous, step.state))
        previous = step.state
    return "\n".join(lines)


def diff(before: State, after: State) -> list[str]:
    """`var: old -> new` for each variable that changed; a function shows per argument."""
    old, new = before._asdict(), after._asdict()
    changes: list[str] = []
    for name, value in new.items():
        was = old.get(name)
        if was == value:
            continue
        if isinstance(was, Fn) and isinstance(value, Fn) and was.keys() == value.keys():
            changes.extend(
                f"{name}[{tla(key)}]: {tla(was[key])} -> {tla(value[key])}"
                for key in value
                if was[key] != value[key]
            )
        else:
            changes.append(f"{name}: {tla(was)} -> {tla(value)}")
    return changes or ["(no variable changed: a stuttering step)"]
