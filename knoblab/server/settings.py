"""Reading and setting a server's global variables, the same way on every kind of server.

knoblab's own statements run free of the limits the spec sets for the workload's sessions
(max_statement_time, say): a limit meant for the workload must not stop knoblab reading back
what it set. A value the server refuses is `SettingRefused`, naming the setting and the
server's reason: that configuration fails, not knoblab.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import pymysql

from knoblab.catalog import INTEGER_TYPES, Catalog
from knoblab.server.target import ServerRefused

# Session limits a spec may set globally for the workload, lifted for knoblab's own session.
_OWN_SESSION = ("max_statement_time", "max_execution_time")
_UNKNOWN_VARIABLE = 1193


class SettingRefused(ServerRefused, pymysql.MySQLError):
    """The server refused a value of a setting (SET GLOBAL failed). Also a MySQLError with
    the server's (code, message), for code that handles the server's errors as such."""

    def __init__(self, name: str, value: str | None, code: Any, reason: str) -> None:
        Exception.__init__(self, code, reason)
        shown = "DEFAULT" if value is None else value
        self.message = f"{name} = {shown}: the server refused it ({reason})"
        self.name = name
        self.value = value

    def __str__(self) -> str:
        return self.message


def own_session(cur: Any) -> None:
    """Lift the workload's statement time limits for this (knoblab's own) session; a server
    that lacks a limit has nothing to lift."""
    for name in _OWN_SESSION:
        try:
            cur.execute(f"SET SESSION {name} = 0")
        except pymysql.MySQLError as exc:
            if not exc.args or exc.args[0] != _UNKNOWN_VARIABLE:
                raise


def read_globals(connect: Callable[[], pymysql.Connection], names: list[str]) -> dict[str, str]:
    """SHOW GLOBAL VARIABLES for `names`, on a new connection; lower-case names."""
    if not names:
        return {}
    conn = connect()
    try:
        with conn.cursor() as cur:
            own_session(cur)
            return globals_on(cur, names)
    finally:
        conn.close()


def globals_on(cur: Any, names: list[str]) -> dict[str, str]:
    """SHOW GLOBAL VARIABLES for `names`, on an open connection; lower-case names."""
    if not names:
        return {}
    marks = ", ".join(["%s"] * len(names))
    cur.execute(f"SHOW GLOBAL VARIABLES WHERE Variable_name IN ({marks})", names)
    return {name.lower(): value for name, value in cur.fetchall()}


def set_global(cur: Any, catalog: Catalog, name: str, value: str | None) -> None:
    """SET GLOBAL name = value; None puts the server's default back. SettingRefused when the
    server refuses the value (an error of the connection itself stays what it is)."""
    knob = catalog.knobs[name]  # names come from the catalog: never spliced from input
    try:
        if value is None:
            cur.execute(f"SET GLOBAL {name} = DEFAULT")
            return
        cur.execute(f"SET GLOBAL {name} = %s", (literal(knob.type, value),))
    except (pymysql.OperationalError, pymysql.InternalError, pymysql.ProgrammingError,
            pymysql.DataError, pymysql.NotSupportedError, pymysql.IntegrityError) as exc:
        if _connection_lost(exc):
            raise
        raise SettingRefused(name, value, exc.args[0] if exc.args else None,
                             str(exc.args[-1]) if exc.args else str(exc)) from None


def literal(type_: str, value: str) -> Any:
    """The value as SET GLOBAL takes it: numbers of numeric settings as numbers (a quoted
    number is refused: "Incorrect argument type"), anything else as text."""
    if type_ in INTEGER_TYPES:
        try:
            return int(value)
        except ValueError:
            return value
    if type_ == "DOUBLE":
        try:
            return float(value)
        except ValueError:
            return value
    return value


def _connection_lost(exc: pymysql.MySQLError) -> bool:
    # 2006: gone away, 2013: lost during the query, 2003/2002: cannot connect.
    return bool(exc.args) and exc.args[0] in (2002, 2003, 2006, 2013, 2055)


def set_globals(connect: Callable[[], Any], catalog: Catalog,
                settings: Mapping[str, str]) -> None:
    """SET GLOBAL each of `settings`, in order, on one new connection."""
    if not settings:
        return
    conn = connect()
    try:
        with conn.cursor() as cur:
            own_session(cur)
            for name, value in settings.items():
                set_global(cur, catalog, name, value)
    finally:
        conn.close()
