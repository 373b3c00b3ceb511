"""Read TLC .cfg files, so a transcription runs with exactly the settings TLC gets."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

from .model import Invariant, Model, Property, S, Transition

T = TypeVar("T")

_TOKEN = re.compile(r'<-|[A-Za-z_][A-Za-z0-9_]*|-?\d+|"[^"]*"|\S')
_COMMENTS = re.compile(r"\(\*.*?\*\)|\\\*[^\n]*", re.DOTALL)
_LISTS = {
    "INVARIANT": "invariants",
    "INVARIANTS": "invariants",
    "PROPERTY": "properties",
    "PROPERTIES": "properties",
    "CONSTRAINT": "constraints",
    "CONSTRAINTS": "constraints",
}
_SINGLE = {"SPECIFICATION", "INIT", "NEXT", "CHECK_DEADLOCK"}
_CONSTANTS = {"CONSTANT", "CONSTANTS"}
# Settings that change what TLC explores; honouring them silently wrong is worse
# than refusing the file.
_UNSUPPORTED = {"SYMMETRY", "VIEW", "ACTION_CONSTRAINT", "ACTION_CONSTRAINTS", "ALIAS"}


class ConfigError(ValueError):
    """Raised when a .cfg file is beyond this reader or names something untranscribed."""


@dataclass(frozen=True)
class Config:
    """The parts of a TLC model configuration that the checker honours."""

    source: str
    constants: Mapping[str, object] = field(default_factory=dict)
    specification: str | None = None
    init: str | None = None
    next: str | None = None
    invariants: tuple[str, ...] = ()
    properties: tuple[str, ...] = ()
    constraints: tuple[str, ...] = ()
    check_deadlock: bool = True

    def int_constant(self, name: str) -> int:
        value = self.constants.get(name)
        if not isinstance(value, int) or isinstance(value, bool):
            raise ConfigError(f"{self.source}: constant {name} must be an integer, got {value!r}")
        return value


def load(path: Path) -> Config:
    return parse(path.read_text(encoding="utf-8"), source=path.name)


def parse(text: str, source: str = "<cfg>") -> Config:
    tokens = _TOKEN.findall(_COMMENTS.sub(" ", text))
    constants: dict[str, object] = {}
    lists: dict[str, list[str]] = {"invariants": [], "properties": [], "constraints": []}
    single: dict[str, str] = {}
    section: str | None = None
    i = 0
    while i < len(tokens):
        token = tokens[i]
        if token in _UNSUPPORTED:
            raise ConfigError(f"{source}: {token} is not supported by tlacheck")
        if token in _CONSTANTS or token in _LISTS:
            section = token
        elif token in _SINGLE:
            if i + 1 >= len(tokens):
                raise ConfigError(f"{source}: {token} needs a value")
            single[token] = tokens[i + 1]
            section = None
            i += 1
        elif section in _CONSTANTS:
            if i + 2 >= len(tokens) or tokens[i + 1] != "=":
                raise ConfigError(f"{source}: expected `{token} = value` after CONSTANTS")
            constants[token] = _value(tokens[i + 2], source)
            i += 2
        elif section in _LISTS:
            lists[_LISTS[section]].append(token)
        else:
            raise ConfigError(f"{source}: unexpected {token!r}")
        i += 1
    deadlock = single.get("CHECK_DEADLOCK", "TRUE")
    if deadlock not in ("TRUE", "FALSE"):
        raise ConfigError(f"{source}: CHECK_DEADLOCK must be TRUE or FALSE, got {deadlock}")
    return Config(
        source=source,
        constants=constants,
        specification=single.get("SPECIFICATION"),
        init=single.get("INIT"),
        next=single.get("NEXT"),
        invariants=tuple(lists["invariants"]),
        properties=tuple(lists["properties"]),
        constraints=tuple(lists["constraints"]),
        check_deadlock=deadlock == "TRUE",
    )


def _value(token: str, source: str) -> object:
    if token in ("TRUE", "FALSE"):
        return token == "TRUE"
    if token.startswith('"'):
        return token.strip('"')
    if re.fullmatch(r"-?\d+", token):
        return int(token)
    if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", token):
        return token  # a model value: only its identity matters
    raise ConfigError(f"{source}: cannot read constant value {token!r}")


def invariants(cfg: Config, defined: Mapping[str, Callable[[S], bool]]) -> list[Invariant[S]]:
    """The cfg's INVARIANTs, in the cfg's order, which is the order TLC checks them."""
    return [Invariant(name, fn) for name, fn in _pick(cfg, cfg.invariants, defined, "invariant")]


def properties(cfg: Config, defined: Mapping[str, Property[S]]) -> list[Property[S]]:
    return [prop for _, prop in _pick(cfg, cfg.properties, defined, "property")]


def constraint(
    cfg: Config, defined: Mapping[str, Callable[[S], bool]]
) -> Callable[[S], bool] | None:
    """All of the cfg's CONSTRAINTs as one predicate, or None when there are none."""
    preds = [fn for _, fn in _pick(cfg, cfg.constraints, defined, "constraint")]
    if not preds:
        return None
    return lambda state: all(pred(state) for pred in preds)


def _pick(
    cfg: Config, names: Sequence[str], defined: Mapping[str, T], kind: str
) -> list[tuple[str, T]]:
    missing = [name for name in names if name not in defined]
    if missing:
        raise ConfigError(f"{cfg.source}: {kind} {', '.join(missing)} has no Python transcription")
    return [(name, defined[name]) for name in names]


C = TypeVar("C")


def action_model(
    name: str,
    cfg: Config,
    constants: C,
    init: S,
    actions: Sequence[Callable[[C, S], Iterator[Transition[S]]]],
    defined: Mapping[str, Callable[[S], bool]],
    defined_properties: Mapping[str, Property[S]] | None = None,
) -> Model[S]:
    """The model whose Next is `actions` tried in order, each given `constants` (the
    cfg's, read by the transcription), from `init`, checked against the cfg's
    INVARIANTs and PROPERTYs picked from `defined` and `defined_properties`, as TLC
    reads the same cfg."""

    def next_states(s: S) -> Iterator[Transition[S]]:
        for action in actions:
            yield from action(constants, s)

    return Model(
        name=name,
        init=(init,),
        next=next_states,
        invariants=invariants(cfg, defined),
        properties=properties(cfg, defined_properties or {}),
        check_deadlock=cfg.check_deadlock,
    )
