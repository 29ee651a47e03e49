"""After each measurement: is the server still the one being measured?

Workload SQL is arbitrary, and some of it undoes what a measurement stands on: a SET GLOBAL
runs every later measurement with a value other than its point's, a dropped table leaves
nothing to measure, a dropped or changed root locks knoblab out. Refusing such statements in the
spec (`knoblab.admin`) cannot be complete (PREPARE, EXECUTE IMMEDIATE, stored
routines), so the server is looked at before and after each measurement instead: one that
changed it fails with the reason (`Tampered`), and global settings it changed are put back at
once (on a running server they are the user's).
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import pymysql

from knoblab.connection import ACCESS_DENIED, SYSTEM_DATABASES, Server, one
from knoblab.errors import UserError
from knoblab.server.settings import globals_on, own_session
from knoblab.server.target import Tampered

# Globals the server moves by itself as it works (the binary log's positions).
MOVING = frozenset({"gtid_binlog_pos", "gtid_binlog_state", "gtid_current_pos",
                    "gtid_slave_pos", "gtid_executed", "gtid_purged", "gtid_owned"})
_NAME = re.compile(r"^[a-z0-9_]+$")
_WRONG_TYPE = 1232  # "Incorrect argument type to variable"
_REAL = re.compile(r"-?\d+(\.\d*)?(e[-+]?\d+)?", re.IGNORECASE)
# A server that hangs (its disk full, say) must not hang knoblab's look at it.
_TIMEOUTS: dict[str, Any] = {"connect_timeout": 10, "read_timeout": 60, "write_timeout": 60}


@dataclass(frozen=True)
class State:
    """What a measurement must leave as it found it."""

    globals: dict[str, str]
    database: bool  # knoblab's database exists
    tables: frozenset[str]  # its tables (the data measured on)
    # On a sandbox every other database is data measured too (a dump's, a setup's), as
    # database names and "database.table"; None where they are not watched (a running
    # server's other databases are its users').
    others: tuple[frozenset[str], frozenset[str]] | None = None


def look(server: Server, everything: bool = False) -> State:
    conn = server.connect(**_TIMEOUTS)
    try:
        with conn.cursor() as cur:
            own_session(cur)
            cur.execute("SHOW GLOBAL VARIABLES")
            found = {str(name).lower(): str(value) for name, value in cur.fetchall()}
            database, tables = _data(cur, server.database)
            others = _others(cur, server.database) if everything else None
    finally:
        conn.close()
    return State(found, database, tables, others)


def data_tables(server: Server) -> frozenset[str] | None:
    """The tables of knoblab's database; None when there is no such database."""
    conn = server.connect()
    try:
        with conn.cursor() as cur:
            own_session(cur)
            database, tables = _data(cur, server.database)
    finally:
        conn.close()
    return tables if database else None


def _data(cur: Any, own: str) -> tuple[bool, frozenset[str]]:
    """Whether knoblab's database (`own`) exists, and its tables."""
    cur.execute("SELECT COUNT(*) FROM information_schema.SCHEMATA WHERE SCHEMA_NAME = %s",
                (own,))
    database = bool(one(cur)[0])
    cur.execute("SELECT TABLE_NAME FROM information_schema.TABLES WHERE TABLE_SCHEMA = %s "
                "AND TABLE_TYPE <> 'TEMPORARY'", (own,))
    return database, frozenset(str(row[0]) for row in cur.fetchall())


def _others(cur: Any, own: str) -> tuple[frozenset[str], frozenset[str]]:
    """The databases other than knoblab's (`own`) and the server's own, and their tables."""
    left_out = (*sorted(SYSTEM_DATABASES), own)
    cur.execute("SELECT SCHEMA_NAME FROM information_schema.SCHEMATA WHERE SCHEMA_NAME NOT IN "
                "(%s, %s, %s, %s, %s)", left_out)
    databases = frozenset(str(row[0]) for row in cur.fetchall())
    cur.execute("SELECT TABLE_SCHEMA, TABLE_NAME FROM information_schema.TABLES WHERE "
                "TABLE_SCHEMA NOT IN (%s, %s, %s, %s, %s) AND TABLE_TYPE <> 'TEMPORARY'",
                left_out)
    return databases, frozenset(f"{row[0]}.{row[1]}" for row in cur.fetchall())


def _others_gone(before: State, after: State) -> list[str]:
    """What the workload dropped of the other databases watched (a sandbox's)."""
    if before.others is None or after.others is None:
        return []
    (databases, tables), (databases_now, tables_now) = before.others, after.others
    problems = [f"the workload dropped database {name}, which holds the data being measured"
                for name in sorted(databases - databases_now)]
    gone = sorted(t for t in tables - tables_now if t.split(".", 1)[0] in databases_now)
    if gone:
        problems.append(f"the workload dropped or renamed {', '.join(gone)}, the data being "
                        "measured")
    return problems


def changes(server: Server, before: State, failed: bool = False) -> str | None:
    """Why the server is no longer the one measured (global settings the workload changed are
    put back first, and said); None when it is as it was. After a measurement that `failed`,
    a server that does not answer is left to the measurement's own error (it may have died of
    anything); a login refused is said in any case."""
    try:
        after = look(server, everything=before.others is not None)
    except (pymysql.MySQLError, UserError, OSError) as exc:
        code = exc.args[0] if isinstance(exc, pymysql.MySQLError) and exc.args else None
        text = str(exc.args[-1]) if isinstance(exc, pymysql.MySQLError) and exc.args \
            else str(exc)  # a running server's connect says it in words (UserError)
        denied = code in ACCESS_DENIED or "refused the login" in text or \
            "Access denied" in text
        if denied:
            return (f"the server now refuses knoblab's login ({text}): the workload dropped "
                    "or changed the account knoblab connects with (root, on a sandbox)")
        if failed:
            return None
        return f"the server stopped answering after the measurement ({text})"
    problems = []
    if before.database and not after.database:
        problems.append(f"the workload dropped database {server.database}, which holds the "
                        "data being measured")
    elif before.tables - after.tables:
        gone = ", ".join(f"{server.database}.{t}" for t in sorted(before.tables - after.tables))
        problems.append(f"the workload dropped or renamed {gone}, the data being measured")
    problems += _others_gone(before, after)
    changed = {name: (value, after.globals.get(name)) for name, value in before.globals.items()
               if name not in MOVING and after.globals.get(name) != value}
    if changed:
        problems.append(_put_back(server, changed))
    return "; ".join(problems) or None


def _put_back(server: Server, changed: dict[str, tuple[str, str | None]],
              when: str = "during the workload") -> str:
    """SET GLOBAL each changed setting to the value it must have; the sentence."""
    failed: dict[str, str] = {}
    try:
        conn = server.connect(**_TIMEOUTS)
    except (pymysql.MySQLError, UserError, OSError) as exc:
        failed = {name: str(exc) for name in changed}
    else:
        try:
            with conn.cursor() as cur:
                own_session(cur)
                for name, (value, _) in changed.items():
                    if not _NAME.match(name):  # names come from the server; never spliced
                        failed[name] = "not a setting name"
                        continue
                    try:
                        _set(cur, name, value)
                    except pymysql.MySQLError as exc:
                        failed[name] = str(exc.args[-1])
                # Said put back only as the server shows it afterwards.
                names = [n for n in changed if n not in failed]
                if names:
                    now = globals_on(cur, names)
                    failed.update({n: f"the server still shows {_shown(now.get(n))}"
                                   for n in names if now.get(n) != changed[n][0]})
        except (pymysql.MySQLError, OSError) as exc:  # gone away while putting back
            failed.update({n: str(exc) for n in changed if n not in failed})
        finally:
            conn.close()
    what = ", ".join(f"{name} ({_shown(old)} → {_shown(new)})"
                     for name, (old, new) in changed.items())
    # Whoever did it (the workload's SQL, an event, or on a running server another client
    # too), the measurement did not run with its point's settings alone.
    said = f"the server's global {what} changed {when}, and must stay as knoblab set them"
    back = [name for name in changed if name not in failed]
    if back:
        said += f"; knoblab put {', '.join(back)} back"
    if failed:
        said += "; could not put back " + ", ".join(
            f"{name} (to {changed[name][0]}: {why})" for name, why in failed.items()) + \
            ": set it by hand"
    return said


def _set(cur: Any, name: str, value: str) -> None:
    """SET GLOBAL name = value as read from SHOW VARIABLES: whole numbers as numbers; text
    as text, unless the setting takes only numbers (a DOUBLE: 10.000000)."""
    if re.fullmatch(r"-?\d+", value):
        cur.execute(f"SET GLOBAL {name} = %s", (int(value),))
        return
    try:
        cur.execute(f"SET GLOBAL {name} = %s", (value,))
    except pymysql.MySQLError as exc:
        if not (exc.args and exc.args[0] == _WRONG_TYPE and _REAL.fullmatch(value)):
            raise
        cur.execute(f"SET GLOBAL {name} = %s", (float(value),))


def _shown(value: str | None) -> str:
    if value is None:
        return "gone"
    if not value:
        return "''"
    return value if len(value) <= 60 else value[:57] + "..."


@contextlib.contextmanager
def watching(server: Server, *, interrupted_too: bool = False,
             expected: Mapping[str, str] | None = None,
             everything: bool = False) -> Iterator[None]:
    """Around one measurement: Tampered when it left the server other than it found it (also
    when it failed because of that: the reason is the cause, not the symptom). `expected`:
    the point's settings as knoblab set and read them back when it configured the server;
    a server that holds other values when the measurement begins (an event, or another
    client, changed them since) is not the point's, and the measurement does not run. With
    `interrupted_too` (a server that outlives the run), global settings it changed are put
    back even when the measurement is interrupted. With `everything` (a sandbox, whose every
    database is data knoblab built), a database or table dropped anywhere is noticed."""
    before = look(server, everything)
    if expected:
        wrong = {name.lower(): (value, before.globals.get(name.lower()))
                 for name, value in expected.items()
                 if before.globals.get(name.lower()) != value}
        if wrong:
            raise Tampered(_put_back(server, wrong, "after knoblab set them for this point, "
                                                    "before the measurement"))
    try:
        yield
    except Exception as exc:
        why = changes(server, before, failed=True)
        if why is not None:
            raise Tampered(why) from exc
        raise
    except BaseException:
        if interrupted_too:
            with contextlib.suppress(Exception):
                changes(server, before)
        raise
    why = changes(server, before)
    if why is not None:
        raise Tampered(why)
