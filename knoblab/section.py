"""Reading one section of a spec: typed values with one-line errors that say how to fix them.

Shared by the spec and by each workload kind, which reads its own [workload] section.
"""

from __future__ import annotations

import difflib
from collections.abc import Collection
from typing import Any

from knoblab.errors import UserError


def check_keys(where: str, data: dict[str, Any], allowed: Collection[str]) -> None:
    for key in data:
        if key not in allowed:
            close = difflib.get_close_matches(key, sorted(allowed), n=1)
            hint = f"; did you mean {close[0]!r}?" if close else \
                f"; allowed: {', '.join(sorted(allowed))}"
            raise UserError(f"{where}: unknown key {key!r}{hint}")


def flag(section: dict[str, Any], key: str, where: str) -> bool:
    value = section.get(key, False)
    if not isinstance(value, bool):
        raise UserError(f"[{where}] {key} = {value!r}: must be true or false")
    return value


def text(section: dict[str, Any], key: str, where: str, default: str) -> str:
    value = section.get(key, default)
    if not isinstance(value, str):
        raise UserError(f"[{where}] {key} = {value!r}: must be text (in quotes)")
    return value


def number(section: dict[str, Any], key: str, where: str, default: Any, kind: type,
           low: float, high: float) -> Any:
    value = section.get(key, default)
    ok = isinstance(value, int | float) and not isinstance(value, bool)
    if kind is int and not isinstance(value, int):
        ok = False
    if not ok or not low <= value <= high:
        kind_name = "a whole number" if kind is int else "a number"
        raise UserError(
            f"[{where}] {key} = {value!r}: must be {kind_name} from {low:g} to {high:g}")
    return kind(value)


def as_text(raw: Any) -> str:
    """A value as the spec means it: true/false are ON/OFF, as in my.cnf."""
    if isinstance(raw, bool):
        return "ON" if raw else "OFF"
    return str(raw)
