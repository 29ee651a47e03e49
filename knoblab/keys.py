"""A spec section's keys, each declared once: what it means, what it takes, its default and
what is refused. A section's reader checks the keys written against its declared set
(`section.check_keys`), and the manual's reference is generated from the declarations
(`knoblab.manual`), so that no key is read without being documented.

The readers still say themselves how a value is read; tests/test_keys.py holds each
declaration's range, choices and default to what its reader does."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Set
from dataclasses import dataclass
from typing import Any, TypeVar

_T = TypeVar("_T")


@dataclass(frozen=True)
class Key:
    name: str
    means: str  # a sentence or two, for the reference
    takes: str = "text"  # what is written: "text", "a whole number", "a size ("64M")", …
    default: str | None = None  # as written in a spec; None: none (or said in `means`)
    low: float | None = None  # the least a number may be, where there is a least
    high: float | None = None
    choices: tuple[str, ...] = ()  # the only values taken, where there is such a list
    bounds: str = ""  # the range in words, where numbers would not say it ("at least 160M")

    def allowed(self) -> str:
        """What is taken, in words: a range, the choices, or "" (any value of its type)."""
        if self.bounds:
            return self.bounds
        if self.choices:
            return ", ".join(f'"{c}"' for c in self.choices)
        if self.low is not None and self.high is not None:
            return f"{self.low:g} to {self.high:g}"
        if self.low is not None:
            return f"at least {self.low:g}"
        return ""


class Keys(Set[str]):
    """A section's keys: a set of names (for `check_keys`, `in`, set arithmetic, which gives
    plain sets) with each name's declaration, in the order declared."""

    def __init__(self, *keys: Key) -> None:
        self.declared: dict[str, Key] = {}
        for key in keys:
            if not key.means.strip():
                raise ValueError(f"key {key.name!r} declared without what it means")
            self.declared[key.name] = key
        self.names = frozenset(self.declared)

    @classmethod
    def _from_iterable(cls, names: Iterable[_T]) -> Set[_T]:
        return frozenset(names)  # the result of set arithmetic: names, not declarations

    def __contains__(self, name: object) -> bool:
        return name in self.names

    def __iter__(self) -> Iterator[str]:
        return iter(self.declared)

    def __len__(self) -> int:
        return len(self.declared)

    def __or__(self, other: Set[Any]) -> Any:
        """With other Keys: both sections' keys, declared (a name declared in both keeps this
        one's declaration); with a plain set, the names."""
        if not isinstance(other, Keys):
            return self.names | other
        return Keys(*self.declared.values(),
                    *(k for k in other.declared.values() if k.name not in self.names))

    def __getitem__(self, name: str) -> Key:
        return self.declared[name]

    def each(self) -> Iterable[Key]:
        return self.declared.values()
