"""Hashable TLA+-like values for model states, and their TLA+ rendering."""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Iterator, Mapping
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V", bound=Hashable)


class Fn(Mapping[K, V], Generic[K, V]):
    """A TLA+ function with a finite domain, frozen so that states can hash it."""

    __slots__ = ("_hash", "_map")

    def __init__(self, pairs: Iterable[tuple[K, V]] | Mapping[K, V]) -> None:
        items = pairs.items() if isinstance(pairs, Mapping) else pairs
        self._map: dict[K, V] = dict(items)
        # Two functions are equal whatever order their domain was listed in.
        self._hash = hash(frozenset(self._map.items()))

    @classmethod
    def const(cls, domain: Iterable[K], value: V) -> Fn[K, V]:
        r"""[x \in domain |-> value]."""
        return cls((key, value) for key in domain)

    def except_(self, key: K, value: V) -> Fn[K, V]:
        """[f EXCEPT ![key] = value]; the key must already be in the domain."""
        if key not in self._map:
            raise KeyError(key)
        updated = dict(self._map)
        updated[key] = value
        return Fn(updated)

    def __getitem__(self, key: K) -> V:
        return self._map[key]

    def __iter__(self) -> Iterator[K]:
        return iter(self._map)

    def __len__(self) -> int:
        return len(self._map)

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Fn):
            return self._map == other._map
        return NotImplemented

    def __repr__(self) -> str:
        return tla(self)


def tla(value: object) -> str:
    """Render a value the way TLC prints it in a trace."""
    if isinstance(value, bool):
        text = "TRUE" if value else "FALSE"
    elif isinstance(value, str):
        text = f'"{value}"'
    elif isinstance(value, Fn):
        pairs = [f"{tla(k)} :> {tla(value[k])}" for k in _ordered(value)]
        # TLC prints the function with an empty domain as the empty sequence.
        text = "(" + " @@ ".join(pairs) + ")" if pairs else "<<>>"
    elif isinstance(value, (frozenset, set)):
        text = "{" + ", ".join(tla(v) for v in _ordered(value)) + "}"
    elif isinstance(value, tuple) and hasattr(value, "_asdict"):
        # A NamedTuple inside a state stands for a TLA+ record.
        fields = value._asdict().items()
        text = "[" + ", ".join(f"{name} |-> {tla(v)}" for name, v in fields) + "]"
    elif isinstance(value, tuple):
        text = "<<" + ", ".join(tla(v) for v in value) + ">>"
    else:
        text = repr(value)
    return text


def _ordered(values: Iterable[object]) -> list[object]:
    """Sort like TLC where the elements allow it, so traces are stable."""
    listed = list(values)
    try:
        return sorted(listed)  # type: ignore[type-var]
    except TypeError:
        return sorted(listed, key=repr)
