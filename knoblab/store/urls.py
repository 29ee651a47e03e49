"""A store's address: a SQLite file or a PostgreSQL database, parsed and checked before
anything opens it, its password never shown (`safe_url`, `hide_passwords`)."""

from __future__ import annotations

import os
import re
from pathlib import Path
from urllib.parse import unquote

import sqlalchemy as sa

from knoblab.errors import UserError

_SCHEME = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*)://(.*)", re.DOTALL)


# A password in a URL: from the user name's colon to the last "@" before another URL begins.
_PASSWORD = re.compile(r"([A-Za-z][\w+.-]*://[^\s:/@]*):(?:(?!\s\S*://)[^\n])*@")


_QUERY_PASSWORD = re.compile(r"([?&](?:ssl)?pass(?:word|wd)=)[^&\s]*", re.IGNORECASE)


_PERCENT_HINT = ("percent-encode the user name and password (@ as %40, : as %3A, / as %2F, "
                 "# as %23, % as %25), or leave the password out and give it in PGPASSWORD "
                 "or ~/.pgpass")


def storable(text: str | None) -> str | None:
    """A message as the store can keep it: bytes of a log or a name that were not UTF-8 (kept
    as lone surrogates) written as escapes, which no database encoding refuses."""
    if text is None or text.isascii():
        return text
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def hide_passwords(text: str) -> str:
    """`text` (a command line, a traceback) with the password of every URL in it masked."""
    return _QUERY_PASSWORD.sub(r"\1***", _PASSWORD.sub(r"\1:***@", text))


def _masked(text: str) -> str:
    """A URL that could not be read, for a message: everything before its last "@" (where a
    user name and password would be) hidden."""
    head, at, tail = text.rpartition("@")
    if not at:
        return hide_passwords(text)
    scheme = re.match(r"[A-Za-z][\w+.-]*:/*", head)
    return hide_passwords(f"{scheme.group(0) if scheme else ''}***@{tail}")


def parse_url(url: str | sa.URL, what: str = "the results store") -> sa.URL:
    """A database URL as the user meant it, or a UserError naming what is wrong in it without
    ever showing its password. The user name and password end at the one "@" (anything may
    stand in them but "@"; %XX is decoded there, as in any URL); `what` names the URL's role
    in messages."""
    if isinstance(url, sa.URL):
        return url
    text = url.strip()
    found = _SCHEME.fullmatch(text)
    if found is None:
        raise UserError(f"{what}: {_masked(text)!r} is not a database URL; give "
                        "sqlite:///PATH or postgresql://USER@HOST/DATABASE")
    scheme, rest = found.groups()
    if scheme.split("+")[0] == "sqlite":
        options = rest.partition("?")[2]
        if "?" in rest and not all("=" in o for o in options.split("&")):
            raise UserError(f"{what}: in {text}, a '?' in the path begins options; write a "
                            "'?' that is part of the path as %3F")
        parsed_sqlite = sa.engine.make_url(text)
        _not_a_mistaken_absolute_path(parsed_sqlite, text, what)
        return parsed_sqlite
    user = password = None
    if "@" in rest:
        if rest.count("@") > 1:
            raise UserError(f"{what}: the URL {_masked(text)} holds more than one '@', so "
                            f"where its password ends is unclear: {_PERCENT_HINT}")
        credentials, rest = rest.split("@")
        name, colon, secret = credentials.partition(":")
        user, password = unquote(name), unquote(secret) if colon else None
    shown = f"{scheme}://{'***@' if user is not None else ''}{rest}"
    host_port = re.match(r"(\[[^\]]*\]|[^/:?]*)(?::([^/?]*))?", rest)
    port = host_port.group(2) if host_port else None
    if "," in (host_port.group(0) if host_port else ""):
        raise UserError(f"{what}: the URL {shown} names several hosts; give them as options "
                        "instead: ...@/DATABASE?host=HOST1:PORT1&host=HOST2:PORT2")
    if port and not port.isdigit():
        raise UserError(f"{what}: in the URL {shown}, the port {port!r} is not a number")
    if port and not 1 <= int(port) <= 65535:
        raise UserError(f"{what}: in the URL {shown}, port {port} is out of range: give 1 to "
                        "65535")
    try:
        parsed = sa.engine.make_url(f"{scheme}://{rest}")
    except (sa.exc.ArgumentError, ValueError):
        raise UserError(f"{what}: {shown!r} is not a database URL; give sqlite:///PATH or "
                        "postgresql://USER@HOST/DATABASE") from None
    return parsed.set(username=user, password=password) if user is not None else parsed


def _not_a_mistaken_absolute_path(url: sa.URL, text: str, what: str) -> None:
    """sqlite:///PATH names PATH relative to the current folder (SQLAlchemy's and Optuna's
    convention; sqlite:////PATH is absolute). A relative path whose first folder is missing
    here but exists under / (sqlite:///tmp/x) was meant absolute: said, before a store or a
    study lands in a folder nobody looks in, or a missing one is blamed."""
    database = url.database or ""
    if in_memory(url) or database.startswith(("/", "file:")):
        return
    first, _, rest = database.partition("/")
    if not rest or first in ("", ".", ".."):
        return
    if not os.path.lexists(first) and os.path.isdir(os.path.join("/", first)):
        raise UserError(f"{what}: {_masked(text)} names {database} relative to the current "
                        f"folder (three slashes: a relative path); for /{database} write "
                        f"sqlite:////{database}")


def _with_driver(url: sa.URL) -> sa.URL:
    """A plain postgresql:// URL means psycopg 3, the driver knoblab installs."""
    if url.drivername in ("postgresql", "postgres"):
        return url.set(drivername="postgresql+psycopg")
    return url


def driver_url(url: str, what: str = "the database") -> str:
    """The URL to give SQLAlchemy (and Optuna): read as `parse_url` does, with its driver."""
    return _with_driver(parse_url(url, what)).render_as_string(hide_password=False)


def safe_url(url: str | sa.URL) -> str:
    """The URL without its password, for messages."""
    try:
        parsed = parse_url(url)
    except UserError:
        return _masked(url) if isinstance(url, str) else "(a database URL)"
    return hide_passwords(parsed.render_as_string(hide_password=True))


def sqlite_url(path: Path) -> str:
    """The URL of a SQLite file, whatever its path holds (?, %, #, spaces)."""
    return sa.URL.create("sqlite", database=str(path)).render_as_string()


def default_url(home: Path) -> str:
    return sqlite_url(home / "knoblab.sqlite")


KINDS = ("a SQLite file (sqlite:///PATH) or a PostgreSQL database "
         "(postgresql://USER@HOST/DATABASE)")


def _check_kind(url: sa.URL, shown: str) -> None:
    """Only a store that keeps what is written in it, in a database knoblab supports: a
    SQLite file, or PostgreSQL (MySQL and MariaDB keep FLOAT in single precision, and the
    driver may be missing)."""
    backend = url.get_backend_name()
    if backend not in ("sqlite", "postgresql"):
        raise UserError(f"cannot open the results store {shown}: knoblab keeps its results "
                        f"in {KINDS}, not in {backend}")
    if names_no_database(url):
        # Without one, the server's default database for the user would take the tables.
        raise UserError(f"the results store {shown} names no database; name one of its own: "
                        "postgresql://USER@HOST/DATABASE")
    if in_memory(url):
        raise UserError(f"the results store {shown} is in memory: every measurement would be "
                        "lost when knoblab exits; give a file (sqlite:///PATH)")


def names_no_database(url: sa.URL) -> bool:
    """A server's URL (not SQLite's) that names no database: its tables would go into the
    server's default database for the user."""
    return url.get_backend_name() != "sqlite" and not url.database and \
        not url.query.get("dbname")


def in_memory(url: sa.URL) -> bool:
    """A SQLite URL of a database in memory, which is gone when the process exits."""
    database = url.database or ""
    return url.get_backend_name() == "sqlite" and (
        database in ("", ":memory:") or ":memory:" in database or
        url.query.get("mode") == "memory" or "mode=memory" in database)


def _sqlite_file(url: sa.URL) -> Path | None:
    """The file of a SQLite store (None for one in memory)."""
    database = url.database or ""
    if not url.drivername.startswith("sqlite") or database in ("", ":memory:") \
            or database.startswith("file:") or url.query.get("mode") == "memory":
        return None
    return Path(os.path.abspath(database))
