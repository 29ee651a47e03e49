"""Reading and setting a server's global variables, the same way on every kind of server."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import pymysql

from knoblab.catalog import INTEGER_TYPES, Catalog


def read_globals(connect: Callable[[], pymysql.Connection], names: list[str]) -> dict[str, str]:
    """SHOW GLOBAL VARIABLES for `names`, on a new connection; lower-case names."""
    if not names:
        return {}
    conn = connect()
    try:
        with conn.cursor() as cur:
            marks = ", ".join(["%s"] * len(names))
            cur.execute(f"SHOW GLOBAL VARIABLES WHERE Variable_name IN ({marks})", names)
            return {name.lower(): value for name, value in cur.fetchall()}
    finally:
        conn.close()


def set_global(cur: Any, catalog: Catalog, name: str, value: str | None) -> None:
    """SET GLOBAL name = value; None puts the server's default back."""
    knob = catalog.knobs[name]  # names come from the catalog: never spliced from input
    if value is None:
        cur.execute(f"SET GLOBAL {name} = DEFAULT")
        return
    literal: Any = int(value) if knob.type in INTEGER_TYPES and _is_int(value) else value
    cur.execute(f"SET GLOBAL {name} = %s", (literal,))


def set_globals(connect: Callable[[], Any], catalog: Catalog,
                settings: Mapping[str, str]) -> None:
    """SET GLOBAL each of `settings`, in order, on one new connection."""
    if not settings:
        return
    conn = connect()
    try:
        with conn.cursor() as cur:
            for name, value in settings.items():
                set_global(cur, catalog, name, value)
    finally:
        conn.close()


def _is_int(text: str) -> bool:
    try:
        int(text)
    except ValueError:
        return False
    return True
