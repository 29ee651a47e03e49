"""A running server knoblab does not own: settings changed with SET GLOBAL and always put back.

Before knoblab first changes a setting it writes the original value to the store (durably), so
the change can be undone at the end of the run, on Ctrl-C, on an exception and, after a kill -9
or a power cut, with `knoblab restore`. Passwords come from an environment variable or a MySQL
option file and are never written anywhere. Benchmark data lives only in a database knoblab
created and marked as its own ([server] database, `knoblab` unless named otherwise).
"""

from __future__ import annotations

import configparser
import os
import subprocess
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil
import pymysql

from knoblab.catalog import Catalog, read_catalog
from knoblab.connection import DATABASE, Endpoint, Server, one
from knoblab.errors import UserError
from knoblab.server.guard import data_tables, watching
from knoblab.server.settings import SettingRefused, globals_on, read_globals, set_global
from knoblab.server.shape import Shape
from knoblab.server.target import Data, ServerRefused
from knoblab.vocabulary import SavedState

LOCK = "knoblab.capture"  # the named lock a capture (knoblab.server.query_log) holds
MARK = "SET @knoblab = 'knoblab'"  # each connection's first statement: a capture leaves it out

OWNER_TABLE = "knoblab_owner"  # its presence marks a database as knoblab's to change


LOOPBACK = frozenset({"localhost", "127.0.0.1", "::1"})


class ExternalServer:
    """The interface workloads use (connect, pid, datadir, global_values), on a live server."""

    def __init__(self, endpoint: Endpoint, database: str = DATABASE) -> None:
        self.endpoint = endpoint
        self.database = database  # knoblab's own there: where it builds its data
        self._pid: int | None = None
        self._datadir: Path | None = None
        self.identity: str | None = None  # known once probed

    def connect(self, database: str | None = None, **kwargs: Any) -> pymysql.Connection:
        e = self.endpoint
        options: dict[str, Any] = {"user": e.user, "database": database, "autocommit": True,
                                   "connect_timeout": 10, "init_command": MARK}
        if e.socket:
            options["unix_socket"] = e.socket
        else:
            options.update(host=e.host or "localhost", port=e.port)
        if e.option_file:
            options.update(read_default_file=str(Path(e.option_file).expanduser()),
                           read_default_group="client")
        elif e.socket or (e.host or "localhost") in LOOPBACK:
            # Nothing leaves this machine: TLS would protect nothing, and PyMySQL's attempt at
            # it costs ~40 ms of client CPU per connection. An option file may ask for TLS.
            options["ssl_disabled"] = True
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
        except pymysql.MySQLError as exc:
            # The server's own failure (seen: an internal temporary table's file gone from
            # its tmpdir under it): one line, as for a server that does not answer.
            raise UserError(f"server {self.endpoint.describe()} failed to list its settings: "
                            f"{exc.args[-1] if exc.args else exc}; run the command again, or "
                            "look in the server's error log") from None
        finally:
            conn.close()

    def probe(self) -> tuple[str, int | None, Path | None]:
        """Version, and the server's process id and data directory when they are on this
        machine (then knoblab can read its CPU and I/O, and evict its files)."""
        conn = self.connect()
        try:
            with conn.cursor() as cur:
                cur.execute("SELECT VERSION(), @@pid_file, @@datadir, @@hostname, @@port")
                version, pid_file, datadir, hostname, port = one(cur)
        finally:
            conn.close()
        # What the server says it is: the same server reached by another address (a socket
        # path spelt differently, localhost for 127.0.0.1) is recognised as the same.
        self.identity = f"{hostname}:{port}:{datadir}"
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

    def stored(self) -> dict[str, Any]:
        """How the store keeps this server: how to reach it (no password) and what it is."""
        return {**self.endpoint.as_dict(), "identity": self.identity}

    def is_same_as(self, stored: dict[str, Any]) -> bool:
        """Whether a server the store kept is this one (older records: by address only)."""
        if stored.get("identity") and self.identity:
            return bool(stored["identity"] == self.identity)
        return Endpoint.from_dict(stored) == self.endpoint

    @property
    def datadir(self) -> Path | None:
        return self._datadir

    @property
    def socket(self) -> Path | None:
        """Its socket file, when it is reached through one on this machine."""
        found = Path(self.endpoint.socket) if self.endpoint.socket else None
        return found if found is not None and found.is_socket() else None

    def drop_cache(self) -> bool:
        return False  # its page cache is the machine's, and the machine is not knoblab's

    def global_values(self, names: list[str]) -> dict[str, str]:
        return read_globals(self.connect, names)

    def watch(self, expected: Mapping[str, str] | None = None
              ) -> AbstractContextManager[None]:
        """Around one measurement: global settings the workload changed are named and put
        back (they are the user's), knoblab's data and login checked, the point's `expected`
        settings first (`guard.watching`)."""
        return watching(self, interrupted_too=True, expected=expected)


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
        self.changed: set[str] = set(self.originals)  # set at least once (or maybe, resumed)

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
                    try:
                        set_global(cur, self.catalog, name,
                                   values.get(name, self.originals[name]))
                    except pymysql.MySQLError:
                        if name not in self.changed:
                            # Refused before it ever changed: nothing to put back.
                            self.store.mark_restored(self.run_id, [name], SavedState.UNCHANGED)
                            del self.originals[name]
                        raise
                    self.changed.add(name)
        finally:
            conn.close()

    def _save_originals(self) -> None:
        missing = [n for n in (*self.restart_only, *self.dynamic) if n not in self.originals]
        if not missing:
            return
        current = self.server.global_values(missing)
        for name in missing:
            # Durably first: a crash right after the change can still be undone.
            self.store.save_original(self.run_id, self.server.stored(), name,
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

    def restore(self) -> PutBack:
        """Put every changed setting back, read back (`restore_settings`)."""
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


@dataclass(frozen=True)
class PutBack:
    """What a put-back did, as the server shows it afterwards."""

    restored: list[str]  # read back at their original values
    # left as another session set them while knoblab had them changed: name -> (now, original)
    left: dict[str, tuple[str | None, str | None]] = field(default_factory=dict)

    def said(self) -> str:
        """The put-back in words (empty when nothing was pending)."""
        if not self.left:
            return "every setting is back" if self.restored else ""
        changed = ", ".join(f"{name} = {shown(now)} (was {shown(was)})"
                            for name, (now, was) in self.left.items())
        return (f"every setting is back but {changed}, which another session changed while "
                "knoblab had it changed: left as that session set it")


def shown(value: str | None) -> str:
    return "the server's default" if value is None else value


class PutBackFailed(UserError):
    """Settings still changed on the server after a put-back: the message names them, what
    the server shows of them, and the command that puts them back."""


def restore_settings(server: ExternalServer, catalog: Catalog, store: Any, run_id: str,
                     ours: Mapping[str, str] | None = None) -> PutBack:
    """Put back what the run left changed, then read the values back: only a setting the
    server shows at its original value is marked put back. `ours` is what knoblab set (as the
    server showed it then): a setting another session changed since is left as it is now.
    A setting that cannot be put back (the server refuses it, or cannot be reached) does not
    stop the others: it stays pending, and PutBackFailed names it, what the server shows, and
    `knoblab restore RUN`, after the rest are back."""
    pending = store.pending_restores(run_id)
    if not pending:
        return PutBack([])
    originals: dict[str, str | None] = {row["name"]: row["original"] for row in pending}
    failed: dict[str, str] = {}
    left: dict[str, tuple[str | None, str | None]] = {}
    restart_only = {name: was for name, was in originals.items()
                    if name in catalog.knobs and not catalog.knobs[name].dynamic}
    if restart_only:
        path = Path(server.endpoint.config_include or "").expanduser()
        empty = not path.is_file() or path.read_text(errors="replace") == INCLUDE_MARK
        try:
            # No needless restart of someone's server: only when it runs with changed values.
            if not empty or server.global_values(list(restart_only)) != restart_only:
                restart_with(server, {})  # the include file emptied: its own settings
        except UserError as exc:
            failed.update({name: str(exc) for name in restart_only})
    dynamic = [n for n in originals if n in catalog.knobs and catalog.knobs[n].dynamic]
    failed.update({n: f"{server.endpoint.describe()} has no such setting now"
                   for n in originals if n not in catalog.knobs})
    now: dict[str, str] = {}
    try:
        conn = server.connect()
        try:
            with conn.cursor() as cur:
                before = globals_on(cur, dynamic)
                for name in dynamic:
                    mine = (ours or {}).get(name)
                    if mine is not None and before.get(name) not in (mine, originals[name]):
                        left[name] = (before.get(name), originals[name])
                        continue
                    try:
                        set_global(cur, catalog, name, originals[name])
                    except SettingRefused as exc:
                        failed[name] = refusal(exc)
                now = globals_on(cur, list(originals))
        finally:
            conn.close()
    except (UserError, pymysql.MySQLError) as exc:  # gone away mid-way, or not reachable
        why = str(exc) if isinstance(exc, UserError) else refusal(exc)
        failed.update({n: f"no answer ({why})" for n in dynamic
                       if n not in failed and n not in left})
    for name in dynamic:  # the words follow the server: what it shows now
        if name in now and name not in failed and name not in left and \
                not _same(now[name], originals[name]):
            failed[name] = f"the server still shows {now[name]!r}"
    restored = [n for n in originals if n not in failed and n not in left]
    store.mark_restored(run_id, restored)
    store.mark_restored(run_id, list(left), SavedState.LEFT)
    if failed:
        by_why: dict[str, list[str]] = {}
        for name, why in failed.items():
            by_why.setdefault(why, []).append(f"{name} (to {shown(originals[name])})")
        what = "; ".join(f"{', '.join(names)}: {why}" for why, names in by_why.items())
        done = f"put back {', '.join(restored)}; " if restored else ""
        raise PutBackFailed(
            f"{done}could not put back on {server.endpoint.describe()}: {what}; "
            f"{'it is' if len(failed) == 1 else 'they are'} still changed there: put "
            f"{'it' if len(failed) == 1 else 'them'} back with: knoblab restore {run_id} (or "
            f"set {'it' if len(failed) == 1 else 'them'} by hand, then: knoblab restore "
            f"{run_id} --forget)")
    return PutBack(restored, left)


def _same(now: str, original: str | None) -> bool:
    """Whether the server's value is the original (None: the default it was put back to)."""
    if original is None:
        return True  # SET GLOBAL … = DEFAULT: whatever the server's default is now
    return now == original or now.strip().upper() == original.strip().upper()


def refusal(exc: pymysql.MySQLError) -> str:
    """Why the server refused to change a global setting, and what would let it."""
    code = exc.args[0] if exc.args else None
    text = exc.args[-1] if exc.args else str(exc)
    if code == 1227:
        return (f"{text} (the user needs the SUPER or SYSTEM_VARIABLES_ADMIN privilege to "
                "change global settings)")
    return f"({code}) {text}" if code else str(text)


@contextmanager
def restoring(settings: Settings) -> Iterator[Settings]:
    """Whatever happens inside (an error, Ctrl-C), the settings are put back on the way out."""
    try:
        yield settings
    finally:
        settings.restore()


def ensure_data(server: ExternalServer, key: str, build: Callable[[Any], None], *,
                fresh: bool = False) -> None:
    """The benchmark data `key` in knoblab's own database, built only when it is not there
    (or `fresh`, for workloads that write). A database of that name knoblab did not create is
    never touched."""
    own = server.database  # a plain name ([server] database is checked): spliced as it is
    conn = server.connect()
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT COUNT(*) FROM information_schema.SCHEMATA "
                        "WHERE SCHEMA_NAME = %s", (own,))
            if one(cur)[0]:
                cur.execute("SELECT COUNT(*) FROM information_schema.TABLES "
                            "WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s", (own, OWNER_TABLE))
                if not one(cur)[0]:
                    raise UserError(
                        f"database {own} on {server.endpoint.describe()} was not created "
                        "by knoblab, which will not change it; rename it or tune another server")
            else:
                cur.execute(f"CREATE DATABASE {own}")
                cur.execute(f"CREATE TABLE {own}.{OWNER_TABLE} (data_key VARCHAR(100), "
                            "created_at TIMESTAMP DEFAULT CURRENT_TIMESTAMP) ENGINE=InnoDB")
                cur.execute(f"INSERT INTO {own}.{OWNER_TABLE} (data_key) VALUES ('')")
            cur.execute(f"SELECT data_key FROM {own}.{OWNER_TABLE}")
            if one(cur)[0] == key and not fresh:
                return
            cur.execute("SELECT TABLE_NAME FROM information_schema.TABLES "
                        "WHERE TABLE_SCHEMA = %s AND TABLE_NAME <> %s", (own, OWNER_TABLE))
            for (table,) in cur.fetchall():
                cur.execute(f"DROP TABLE {own}.`{table.replace('`', '``')}`")
            cur.execute(f"UPDATE {own}.{OWNER_TABLE} SET data_key = ''")
    finally:
        conn.close()
    with watching(server):  # a setup's SET GLOBAL would change the user's server: put back
        build(server)
    conn = server.connect()
    try:
        with conn.cursor() as cur:
            cur.execute(f"UPDATE {own}.{OWNER_TABLE} SET data_key = %s", (key,))
    finally:
        conn.close()


def forget_pending(store: Any, run_id: str | None = None) -> list[tuple[str, str, dict[str, str]]]:
    """Give up putting back what runs left changed (the user did it by hand, or the server is
    gone): (run, server, original values) per run, so the user knows what they were."""
    by_run: dict[str, list[dict[str, Any]]] = {}
    for row in store.pending_restores(run_id):
        by_run.setdefault(row["run_id"], []).append(row)
    forgotten = []
    for run, rows in by_run.items():
        store.mark_restored(run, [r["name"] for r in rows], SavedState.FORGOTTEN)
        forgotten.append((run, Endpoint.from_dict(rows[0]["server"]).describe(),
                          {r["name"]: r["original"] for r in rows}))
    return forgotten


def restore_pending(store: Any, run_id: str | None = None
                    ) -> tuple[list[tuple[str, str, PutBack]], list[str]]:
    """Put back what runs left changed (all runs, or one): (run, server, put-back) per run, and
    what could not be put back, per run (one run's trouble does not stop the others)."""
    by_run: dict[str, dict[str, Any]] = {}
    for row in store.pending_restores(run_id):
        by_run.setdefault(row["run_id"], row["server"])
    restored, problems = [], []
    for run, where in by_run.items():
        server = ExternalServer(Endpoint.from_dict(where))
        try:
            catalog = server.catalog()
        except UserError as exc:
            still = ", ".join(f"{r['name']} (to {shown(r['original'])})"
                              for r in store.pending_restores(run))
            problems.append(f"run {run}: {exc}; still changed there: {still}; run knoblab "
                            f"restore {run} again once it answers")
            continue
        try:
            # What the run set, where it kept it: a setting changed since by someone else
            # is theirs now.
            done = restore_settings(server, catalog, store, run, _set_by(store, run))
        except UserError as exc:
            problems.append(f"run {run}: {exc}")
            continue
        restored.append((run, server.endpoint.describe(), done))
    return restored, problems


def _set_by(store: Any, run_id: str) -> dict[str, str] | None:
    """What a run set on the server, as it kept it (a capture's window values), if it did."""
    try:
        found = store.run(run_id)["info"].get("window_values")
    except UserError:  # journal rows without their run
        return None
    return found if isinstance(found, dict) else None


# --- the target -----------------------------------------------------------------------------


class RunningTarget:
    """A running server: settings changed in place for each measurement, the originals
    stored first and always put back; data in a database knoblab created and marked."""

    def __init__(self, endpoint: Endpoint, database: str = DATABASE) -> None:
        self.label = ""
        self.server = ExternalServer(endpoint, database)
        self.version_line, _, _ = self.server.probe()
        self.catalog = self.server.catalog()
        self.settings: Settings | None = None  # during a run's session
        self.tables: dict[str, frozenset[str]] = {}  # the data's tables, by key, once built

    @property
    def where(self) -> str:
        return self.server.endpoint.describe()

    @property
    def version(self) -> str:
        return self.catalog.server_version

    @property
    def local(self) -> bool:
        return self.server.pid is not None

    def describe(self) -> dict[str, object]:
        return {"label": self.label, "binary": None, "endpoint": self.where,
                "version": self.version, "version_line": self.version, "compile": {}}

    def check(self, names: list[str], store: Any, resuming: str | None) -> None:
        """Nothing left changed by another run; restart-only settings only with a way to
        restart it."""
        conn = self.server.connect()
        try:
            with conn.cursor() as cur:
                capturing = lock_holder(cur)
        finally:
            conn.close()
        if capturing is not None:  # its window's settings would be taken for the originals
            raise UserError(f"a knoblab capture is capturing {self.where} now ({capturing}): "
                            "measure on it once the capture has ended")
        for row in store.pending_restores():
            # Another run's changes would be taken for this server's originals; a resumed run
            # takes its own originals from the store.
            if self.server.is_same_as(row["server"]) and row["run_id"] != resuming:
                raise UserError(f"run {row['run_id']} left {row['name']} changed on "
                                f"{self.where}; put it back first with: knoblab restore "
                                f"{row['run_id']}")
        restart = [n for n in names if not self.catalog.knobs[n].dynamic]
        endpoint = self.server.endpoint
        if restart and not (endpoint.restart_command and endpoint.config_include):
            raise UserError(f"{', '.join(restart)} can only be set at start-up: to let knoblab "
                            f"restart {self.where} give [server] restart_command (e.g. "
                            "[\"systemctl\", \"restart\", \"mariadb\"]) and config_include (a "
                            "file its configuration includes, which knoblab owns), or measure "
                            "them on sandbox servers")
        if restart:
            check_include(endpoint)
        self._check_changeable([n for n in names if self.catalog.knobs[n].dynamic])

    def _check_changeable(self, names: list[str]) -> None:
        """Each setting set to the value it has: proof, before the run, that this user may
        change it and the server lets it be changed globally (nothing changes)."""
        conn = self.server.connect()
        try:
            with conn.cursor() as cur:
                for name in names:
                    knob = self.catalog.knobs[name].name  # a catalog name, never input
                    try:
                        cur.execute(f"SET GLOBAL {knob} = @@GLOBAL.{knob}")
                    except pymysql.MySQLError as exc:
                        raise UserError(f"{name} cannot be changed on {self.where}: "
                                        f"{refusal(exc)}") from None
        finally:
            conn.close()

    def check_workload(self, check_running_server: Callable[[str, Path | None], None],
                       data_keys: set[str]) -> None:
        check_running_server(self.where, self.server.datadir)
        if len(data_keys) > 1:
            raise UserError("a running server holds one dataset at a time; sweep rows, engine "
                            "or slack_type on sandbox servers")

    def defaults(self, names: list[str]) -> dict[str, str | None]:
        found: dict[str, str | None] = {}
        # The baseline is what the server runs now, not its compiled-in default.
        found.update(self.server.global_values(names))
        return found

    def prepare(self, data: Data) -> Path | None:
        ensure_data(self.server, data.key, data.build)
        self.tables[data.key] = data_tables(self.server) or frozenset()
        return self.server.datadir

    def data_message(self, label: str) -> str:
        return (f"data: {label}, in database {self.server.database} on {self.where}, which "
                "knoblab owns")

    @contextmanager
    def session(self, store: Any, run_id: str, touched: list[str]) -> Iterator[None]:
        self.settings = Settings(self.server, self.catalog, store, run_id, touched)
        try:
            with restoring(self.settings):
                yield
        finally:
            self.settings = None

    def check_shape(self, shape: Shape) -> None:
        raise UserError(f"{self.where}: a running server runs on its own machine; [machine] "
                        "shapes the sandboxes knoblab starts")

    @contextmanager
    def configured(self, settings: Mapping[str, str], data: Data, shape: Shape | None = None
                   ) -> Iterator[tuple[Server, dict[str, object]]]:
        assert self.settings is not None, "configured() runs inside session()"
        assert shape is None, "the spec refuses [machine] for a running server"
        # Every measurement of a workload that writes starts from freshly built data; so
        # does the one after a measurement that dropped some of it (it failed, saying so).
        if data.changed_by_measuring or not self.tables.get(data.key, frozenset()) <= (
                data_tables(self.server) or frozenset()):
            ensure_data(self.server, data.key, data.build, fresh=True)
        self.settings.apply(settings)
        yield self.server, {}


def lock_holder(cur: Any) -> str | None:
    """The connection holding the server's capture lock, described; None when it is free."""
    cur.execute("SELECT IS_USED_LOCK(%s)", (LOCK,))
    holder = one(cur)[0]
    if holder is None:
        return None
    cur.execute("SELECT USER, HOST FROM information_schema.PROCESSLIST WHERE ID = %s",
                (holder,))
    found = cur.fetchone()  # another user's connection is seen with PROCESS only
    return f"connection {holder}" + (f" of {found[0]}@{found[1]}" if found else "")
