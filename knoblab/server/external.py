"""A running server knoblab does not own: settings changed with SET GLOBAL and always put back.

Before knoblab first changes a setting it writes the original value to the store (durably), so
the change can be undone at the end of the run, on Ctrl-C, on an exception and, after a kill -9
or a power cut, with `knoblab restore`. Passwords come from an environment variable or a MySQL
option file and are never written anywhere. Benchmark data lives only in a database knoblab
created and marked as its own.
"""

from __future__ import annotations

import configparser
import os
import subprocess
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import psutil
import pymysql

from knoblab.catalog import INTEGER_TYPES, Catalog, read_catalog
from knoblab.errors import UserError
from knoblab.server.sandbox import read_globals
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
    # For settings only a restart applies: the command that restarts the server (an argv
    # list, run without a shell) and a config file its configuration includes, owned by knoblab.
    restart_command: tuple[str, ...] | None = None
    config_include: str | None = None

    def __post_init__(self) -> None:
        if self.restart_command is not None:  # a list, when read back from the store
            object.__setattr__(self, "restart_command", tuple(self.restart_command))

    def describe(self) -> str:
        where = self.socket or f"{self.host or 'localhost'}:{self.port}"
        return f"{self.user}@{where}"

    def as_dict(self) -> dict[str, Any]:
        """As stored (JSON types), so a stored endpoint compares equal to this one."""
        found = asdict(self)
        if self.restart_command is not None:
            found["restart_command"] = list(self.restart_command)
        return found


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
            if code in (1045, 1698):  # access denied: wrong password, or no such account
                source = f"${e.password_env}" if e.password_env else \
                    e.option_file or "no password given"
                raise UserError(f"server {e.describe()} refused the login ({source}): "
                                "check the user and the password") from None
            raise UserError(f"cannot reach server {e.describe()}: {exc.args[-1]}") from None
        except (configparser.Error, UnicodeDecodeError) as exc:
            raise UserError(f"[server] option_file {e.option_file}: cannot read it: "
                            f"{str(exc).splitlines()[0]}; it needs a [client] section of "
                            "key = value lines") from None
        except (UnicodeError, ValueError, OSError) as exc:  # e.g. a host name too long for DNS
            raise UserError(f"cannot reach server {e.describe()}: {exc}") from None

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
        return read_globals(self.connect, names)


class Settings:
    """Changes settings on the server and puts them back, with the originals in the store.

    `apply(values)` sets every setting the run touches: the point's value, or the original
    for one the point does not set (a previous trial may have changed it). Settings only a
    restart applies go into the include file knoblab owns, then the server is restarted.
    """

    def __init__(self, server: ExternalServer, catalog: Catalog, store: Any, run_id: str,
                 touched: list[str]) -> None:
        self.server, self.catalog, self.store, self.run_id = server, catalog, store, run_id
        self.dynamic = [n for n in touched if catalog.knobs[n].dynamic]
        self.restart_only = [n for n in touched if not catalog.knobs[n].dynamic]
        self.originals: dict[str, str | None] = {}
        for row in store.pending_restores(run_id):
            self.originals[row["name"]] = row["original"]  # a resumed run: the true originals
        self.in_include: dict[str, str] | None = None  # unknown until first written

    def apply(self, values: Mapping[str, str]) -> None:
        self._save_originals()
        if self.restart_only:
            wanted = {n: values[n] for n in self.restart_only if n in values}
            if wanted != self.in_include:
                self.in_include = None  # unknown until the restart is known to have worked
                restart_with(self.server, wanted)
                self.in_include = wanted
                self._check_applied(wanted)
        conn = self.server.connect()
        try:
            with conn.cursor() as cur:
                for name in self.dynamic:
                    set_global(cur, self.catalog, name, values.get(name, self.originals[name]))
        finally:
            conn.close()

    def _save_originals(self) -> None:
        missing = [n for n in (*self.restart_only, *self.dynamic) if n not in self.originals]
        if not missing:
            return
        current = self.server.global_values(missing)
        for name in missing:
            # Durably first: a crash right after the change can still be undone.
            self.store.save_original(self.run_id, self.server.endpoint.as_dict(), name,
                                     current.get(name))
            self.originals[name] = current.get(name)

    def _check_applied(self, wanted: dict[str, str]) -> None:
        """A server that ignores the include file keeps its old values: say so, instead of
        measuring the same configuration under different names."""
        applied = self.server.global_values(list(wanted))
        ignored = [name for name, value in wanted.items()
                   if applied.get(name) == self.originals.get(name) != value]
        if ignored:
            raise UserError(f"after the restart the server still has its own {', '.join(ignored)}"
                            f": is {self.server.endpoint.config_include} included by its "
                            "configuration (!includedir)?")

    def restore(self) -> list[str]:
        """Put every changed setting back; the names restored."""
        return restore_settings(self.server, self.catalog, self.store, self.run_id)


INCLUDE_MARK = "# Managed by knoblab: the settings under test. Empty = the server's own.\n"


def check_include(endpoint: Endpoint) -> None:
    """The include file must be knoblab's: absent, empty, or written by knoblab."""
    assert endpoint.config_include is not None
    path = Path(endpoint.config_include).expanduser()
    if not path.parent.is_dir():
        raise UserError(f"[server] config_include = {endpoint.config_include!r}: folder "
                        f"{path.parent} does not exist")
    if path.exists():
        text = path.read_text(errors="replace")
        if text.strip() and not text.startswith(INCLUDE_MARK):
            raise UserError(f"[server] config_include: {path} exists and was not written by "
                            "knoblab, which will not overwrite it; name a new file")


def restart_with(server: ExternalServer, settings: Mapping[str, str],
                 timeout: float = 180.0) -> None:
    """Write `settings` to the include file and restart the server with them. If it does not
    come back, the include file is emptied and the server restarted again as it was."""
    endpoint = server.endpoint
    assert endpoint.restart_command and endpoint.config_include
    path = Path(endpoint.config_include).expanduser()
    body = "".join(f"{name} = {value}\n" for name, value in settings.items())
    _write(path, INCLUDE_MARK + ("[mysqld]\n" + body if body else ""))
    problem = _restart(server, timeout)
    if problem is None:
        return
    _write(path, INCLUDE_MARK)
    again = _restart(server, timeout)
    if again is not None and not _answers(server):
        raise UserError(f"{endpoint.describe()} did not come back after a restart ({again}); "
                        f"{path} is empty again; start the server by hand")
    raise ServerRefused(f"the server did not restart with {body.strip() or 'its own settings'}"
                        f" ({problem}); it runs again with its own settings")


class ServerRefused(UserError):
    """A configuration the server would not restart with: that point fails, the run goes on."""


def _restart(server: ExternalServer, timeout: float) -> str | None:
    """None when the restart command succeeded and the server answers again."""
    command = list(server.endpoint.restart_command or ())
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout,
                              check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"restart command {command[0]}: {exc}"
    if done.returncode != 0:
        tail = " | ".join((done.stdout + done.stderr).strip().splitlines()[-3:])
        return f"restart command exited with {done.returncode}: {tail}"
    deadline = time.monotonic() + timeout
    while True:
        try:
            server.connect(connect_timeout=2).close()
            server.probe()  # a new process id
            return None
        except UserError as exc:
            if time.monotonic() > deadline:
                return f"not reachable {timeout:.0f} s after the restart: {exc}"
            time.sleep(0.2)


def _answers(server: ExternalServer) -> bool:
    try:
        server.connect(connect_timeout=5).close()
    except UserError:
        return False
    return True


def _write(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".knoblab-tmp")
    tmp.write_text(text)
    tmp.replace(path)


def restore_settings(server: ExternalServer, catalog: Catalog, store: Any,
                     run_id: str) -> list[str]:
    pending = store.pending_restores(run_id)
    if not pending:
        return []
    restart_only = {row["name"]: row["original"] for row in pending
                    if not catalog.knobs[row["name"]].dynamic}
    if restart_only:
        path = Path(server.endpoint.config_include or "").expanduser()
        empty = not path.is_file() or path.read_text(errors="replace") == INCLUDE_MARK
        # No needless restart of someone's server: only when it runs with changed values.
        if not empty or server.global_values(list(restart_only)) != restart_only:
            restart_with(server, {})  # the include file emptied: the server's own settings
    conn = server.connect()
    try:
        with conn.cursor() as cur:
            for row in pending:
                if catalog.knobs[row["name"]].dynamic:
                    set_global(cur, catalog, row["name"], row["original"])
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


def set_global(cur: Any, catalog: Catalog, name: str, value: str | None) -> None:
    """SET GLOBAL name = value; None puts the server's default back."""
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
