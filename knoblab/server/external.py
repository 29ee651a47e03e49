"""A running server knoblab does not own: settings changed with SET GLOBAL and always put back.

Before knoblab first changes a setting it writes the original value to the store (durably), so
the change can be undone at the end of the run, on Ctrl-C, on an exception and, after a kill -9
or a power cut, with `knoblab restore`. Passwords come from an environment variable or a MySQL
option file and are never written anywhere. Benchmark data lives only in a database knoblab
created and marked as its own.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import psutil
import pymysql

from knoblab.catalog import INTEGER_TYPES, Catalog, read_catalog
from knoblab.errors import UserError
from knoblab.workloads.dataset import DATABASE

OWNER_TABLE = "knoblab_owner"  # its presence marks a database as knoblab's to change


@dataclass(frozen=True)
class Endpoint:
    """How to reach the server; what the store keeps of it (no password, ever)."""

    host: str | None = None
    port: int = 3306
    socket: str | None = None
    user: str = "root"
    password_env: str | None = None  # the name of the variable holding the password
    option_file: str | None = None  # a my.cnf-style file with a [client] password

    def describe(self) -> str:
        where = self.socket or f"{self.host or 'localhost'}:{self.port}"
        return f"{self.user}@{where}"

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


class ExternalServer:
    """The interface workloads use (connect, pid, datadir, global_values), on a live server."""

    def __init__(self, endpoint: Endpoint) -> None:
        self.endpoint = endpoint
        self._pid: int | None = None
        self._datadir: Path | None = None

    def connect(self, database: str | None = None, **kwargs: Any) -> pymysql.Connection:
        e = self.endpoint
        options: dict[str, Any] = {"user": e.user, "database": database, "autocommit": True,
                                   "connect_timeout": 10}
        if e.socket:
            options["unix_socket"] = e.socket
        else:
            options.update(host=e.host or "localhost", port=e.port)
        if e.option_file:
            options.update(read_default_file=str(Path(e.option_file).expanduser()),
                           read_default_group="client")
        if e.password_env:
            options["password"] = os.environ.get(e.password_env, "")
        options.update(kwargs)
        try:
            return pymysql.connect(**options)
        except pymysql.err.OperationalError as exc:
            code = exc.args[0] if exc.args else None
            if code == 1045:
                source = f"${e.password_env}" if e.password_env else \
                    e.option_file or "no password given"
                raise UserError(f"server {e.describe()} refused the login ({source}): "
                                "check the user and the password") from None
            raise UserError(f"cannot reach server {e.describe()}: {exc.args[-1]}") from None

    def catalog(self) -> Catalog:
        conn = self.connect()
        try:
            return read_catalog(conn)
        finally:
            conn.close()

    def probe(self) -> tuple[str, int | None, Path | None]:
        """Version, and the server's process id and data directory when they are on this
        machine (then knoblab can read its CPU and I/O, and evict its files)."""
        conn = self.connect()
        try:
            with conn.cursor() as cur:
                cur.execute("SELECT VERSION(), @@pid_file, @@datadir")
                version, pid_file, datadir = cur.fetchone()
        finally:
            conn.close()
        pid = None
        try:
            pid = int(Path(pid_file).read_text().strip())
            if not psutil.pid_exists(pid):
                pid = None
        except (OSError, ValueError, TypeError):
            pid = None
        folder = Path(datadir) if datadir and Path(datadir).is_dir() else None
        self._pid, self._datadir = pid, folder
        return version, pid, folder

    @property
    def pid(self) -> int | None:
        return self._pid

    @property
    def datadir(self) -> Path | None:
        return self._datadir

    def global_values(self, names: list[str]) -> dict[str, str]:
        if not names:
            return {}
        conn = self.connect()
        try:
            with conn.cursor() as cur:
                marks = ", ".join(["%s"] * len(names))
                cur.execute(f"SHOW GLOBAL VARIABLES WHERE Variable_name IN ({marks})", names)
                return {name.lower(): value for name, value in cur.fetchall()}
        finally:
            conn.close()


class Settings:
    """Changes settings on the server and puts them back, with the originals in the store.

    `apply(values)` sets every setting the run touches: the point's value, or the original
    for one the point does not set (a previous trial may have changed it).
    """

    def __init__(self, server: ExternalServer, catalog: Catalog, store: Any, run_id: str,
                 touched: list[str]) -> None:
        self.server, self.catalog, self.store, self.run_id = server, catalog, store, run_id
        self.touched = touched
        self.originals: dict[str, str | None] = {}
        for row in store.pending_restores(run_id):
            self.originals[row["name"]] = row["original"]  # a resumed run: the true originals

    def apply(self, values: Mapping[str, str]) -> None:
        conn = self.server.connect()
        try:
            with conn.cursor() as cur:
                for name in self.touched:
                    if name not in self.originals:
                        cur.execute(f"SELECT @@GLOBAL.{name}")
                        original = cur.fetchone()[0]
                        original = None if original is None else str(original)
                        # Durably first: a crash right after the SET can still be undone.
                        self.store.save_original(self.run_id, self.server.endpoint.as_dict(),
                                                 name, original)
                        self.originals[name] = original
                    target = values.get(name, self.originals[name])
                    _set_global(cur, self.catalog, name, target)
        finally:
            conn.close()

    def restore(self) -> list[str]:
        """Put every changed setting back; the names restored."""
        return restore_settings(self.server, self.catalog, self.store, self.run_id)


def restore_settings(server: ExternalServer, catalog: Catalog, store: Any,
                     run_id: str) -> list[str]:
    pending = store.pending_restores(run_id)
    if not pending:
        return []
    conn = server.connect()
    try:
        with conn.cursor() as cur:
            for row in pending:
                _set_global(cur, catalog, row["name"], row["original"])
    finally:
        conn.close()
    names = [row["name"] for row in pending]
    store.mark_restored(run_id, names)
    return names


@contextmanager
def restoring(settings: Settings) -> Iterator[Settings]:
    """Whatever happens inside (an error, Ctrl-C), the settings are put back on the way out."""
    try:
        yield settings
    finally:
        settings.restore()


def _set_global(cur: Any, catalog: Catalog, name: str, value: str | None) -> None:
    knob = catalog.knobs[name]  # names come from the catalog: never spliced from input
    if value is None:
        cur.execute(f"SET GLOBAL {name} = DEFAULT")
        return
    literal: Any = int(value) if knob.type in INTEGER_TYPES and _is_int(value) else value
    cur.execute(f"SET GLOBAL {name} = %s", (literal,))


def _is_int(text: str) -> bool:
    try:
        int(text)
    except ValueError:
        return False
    return True


def ensure_data(server: ExternalServer, key: str, build: Callable[[Any], None], *,
                fresh: bool = False) -> None:
    """The benchmark data `key` in knoblab's own database, built only when it is not there
    (or `fresh`, for workloads that write). A database of that name knoblab did not create is
    never touched."""
    conn = server.connect()
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT COUNT(*) FROM information_schema.SCHEMATA "
                        "WHERE SCHEMA_NAME = %s", (DATABASE,))
            if cur.fetchone()[0]:
                cur.execute("SELECT COUNT(*) FROM information_schema.TABLES "
                            "WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s",
                            (DATABASE, OWNER_TABLE))
                if not cur.fetchone()[0]:
                    raise UserError(
                        f"database {DATABASE} on {server.endpoint.describe()} was not created "
                        "by knoblab, which will not change it; rename it or tune another server")
            else:
                cur.execute(f"CREATE DATABASE {DATABASE}")
                cur.execute(f"CREATE TABLE {DATABASE}.{OWNER_TABLE} (data_key VARCHAR(100), "
                            "created_at TIMESTAMP DEFAULT CURRENT_TIMESTAMP) ENGINE=InnoDB")
                cur.execute(f"INSERT INTO {DATABASE}.{OWNER_TABLE} (data_key) VALUES ('')")
            cur.execute(f"SELECT data_key FROM {DATABASE}.{OWNER_TABLE}")
            if cur.fetchone()[0] == key and not fresh:
                return
            cur.execute("SELECT TABLE_NAME FROM information_schema.TABLES "
                        "WHERE TABLE_SCHEMA = %s AND TABLE_NAME <> %s", (DATABASE, OWNER_TABLE))
            for (table,) in cur.fetchall():
                cur.execute(f"DROP TABLE {DATABASE}.`{table.replace('`', '``')}`")
            cur.execute(f"UPDATE {DATABASE}.{OWNER_TABLE} SET data_key = ''")
    finally:
        conn.close()
    build(server)
    conn = server.connect()
    try:
        with conn.cursor() as cur:
            cur.execute(f"UPDATE {DATABASE}.{OWNER_TABLE} SET data_key = %s", (key,))
    finally:
        conn.close()


def restore_pending(store: Any, run_id: str | None = None) -> list[tuple[str, str, list[str]]]:
    """Put back what runs left changed (all runs, or one): (run, server, names) per run."""
    by_run: dict[str, dict[str, Any]] = {}
    for row in store.pending_restores(run_id):
        by_run.setdefault(row["run_id"], row["server"])
    restored = []
    for run, where in by_run.items():
        server = ExternalServer(Endpoint(**where))
        names = restore_settings(server, server.catalog(), store, run)
        restored.append((run, server.endpoint.describe(), names))
    return restored
