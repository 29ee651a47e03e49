"""A running server's query log — the slow log at long_query_time = 0, or the general log —
turned on for a capture window and turned off again, and what it logged written out as a log
`knoblab.capture.read_log` reads.

Which log (`Source`): the slow log follows only connections opened during the window (each
connection keeps the long_query_time it opened with: the server's rule, for the slow log of
any tool) and gives each statement's time; the general log follows every connection, those an
application's pool opened hours before the window included, and gives no times. A general
log written out begins with an `Init DB` line for each connection open when the window began
whose database the server's process list named: the log itself says a database only when a
connection opens or changes it.

Every setting changed is journalled in the store before it changes (the restore journal of
`knoblab.server.external`), so the same `restore_settings` puts it back at the end, after a
signal or an error, and `knoblab restore` after a kill -9. The original of the log's switch
is journalled first, so it is the first put back: once the log is off nothing more is logged,
knoblab's own restoring statements included.

Where the log goes:

* FILE: a new file in the server's data directory, when the server runs on this machine and
  this process can write there (it can then read the file the server writes, and remove it).
  The data directory is readable only by the server's account, so the statements' literals
  are never in a place others can read; the file is removed as soon as it is copied.
* TABLE: elsewhere, `log_output` gains TABLE and the window's rows of the log's table
  (mysql.slow_log, mysql.general_log) are read over SQL and written out in its text format.

Whenever the window logs to a table (TABLE, or FILE on a server that also logs to its table),
the server's own table is set aside for it (renamed `mysql.knoblab_kept_RUN`, or
`knoblab_gkept_RUN` for the general log, an empty copy in its place) and put back after it,
so the window's statements and their literals never stay in the server's table; the rows the
server's own settings log during the window are copied back into it.

One capture at a time per server, known on the server itself: a capture holds the named lock
`LOCK` on a connection of its own for its whole length, and the server frees it when that
connection ends, a kill -9 included. A capture killed in its window leaves marks on the server
that the next one finds (`killed_capture`): the log's file named after it, or a table set
aside.

knoblab's own connections switch their own logging off, and their thread ids are left out
of what is written, whatever the server logged. So are the connections of any other knoblab
process (a second capture refused, a run or a `knoblab restore` on this server): every
connection knoblab opens runs `external.MARK` first, and a connection whose log holds it is
left out whole. (The dump's own connection cannot carry it, and needs not: it runs while its
capture holds the server's capture lock, which no other window is open without.)
"""

from __future__ import annotations

import contextlib
import datetime as dt
import os
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

import pymysql

from knoblab.capture.logs import general_line, general_statement, slow_entries, slow_statement
from knoblab.catalog import Catalog
from knoblab.connection import one
from knoblab.errors import UserError
from knoblab.server.external import (
    LOCK,
    MARK,
    ExternalServer,
    PutBack,
    lock_holder,
    refusal,
    restore_settings,
)
from knoblab.server.settings import globals_on, own_session, set_global

# The settings that make the slow log hold every statement, by the names a server may give
# them (MariaDB has both spellings as aliases; the first one the server knows is used), with
# the value for the window.
_WANTED: tuple[tuple[tuple[str, ...], str], ...] = (
    (("long_query_time", "log_slow_query_time"), "0"),
    (("min_examined_row_limit", "log_slow_min_examined_row_limit"), "0"),
    (("log_slow_rate_limit",), "1"),  # MariaDB, Percona: log 1 in N otherwise
    (("log_slow_filter",), ""),  # MariaDB: empty is no filter; the default drops plain reads
    (("log_slow_admin_statements",), "ON"),
    # MariaDB: statements inside stored procedures stay out (their CALL is logged and
    # replays them); any other kind the user left out is put in.
    (("log_slow_disabled_statements",), "sp"),
)
_SWITCH = ("slow_query_log", "log_slow_query")
_FILE = ("slow_query_log_file", "log_slow_query_file")
_LONG = ("long_query_time", "log_slow_query_time")
_THREAD = re.compile(r"# (?:User@Host:.*\bId:\s*(\d+)|Thread_id: (\d+))")
# What a capture's window leaves on the server while it runs, named after its run.
_LOG_NAME = re.compile(r"knoblab-capture-([0-9a-z]+)\.log")


@dataclass(frozen=True)
class Source:
    """One of the server's query logs, as a capture window uses it."""

    key: str  # as `knoblab capture --log` and capture.json name it
    said: str
    switch: tuple[str, ...]  # its on/off setting, by the names a server may give it
    file: tuple[str, ...]  # its file's setting
    wanted: tuple[tuple[tuple[str, ...], str], ...]  # settings for the window, as _WANTED
    table: str  # its table in the mysql database (log_output = TABLE)
    kept: str  # prefixes of the tables a window makes there: the server's own set aside,
    window: str  # and the window's
    counter: str  # a status counter that grows as it logs (the window's progress)


SLOW = Source("slow", "slow query log", _SWITCH, _FILE, _WANTED, "slow_log", "knoblab_kept_",
              "knoblab_window_", "Slow_queries")
GENERAL = Source("general", "general query log", ("general_log",), ("general_log_file",), (),
                 "general_log", "knoblab_gkept_", "knoblab_gwindow_", "Questions")
SOURCES = {source.key: source for source in (SLOW, GENERAL)}
# A table a window made in the mysql database, by its prefix: (the log's, kept or window).
_PREFIXES = {prefix: (source, role) for source in SOURCES.values()
             for prefix, role in ((source.kept, "kept"), (source.window, "window"))}
_TABLE_NAME = re.compile(rf"({'|'.join(_PREFIXES)})([0-9a-z]+)")


def _known(catalog: Catalog, names: tuple[str, ...]) -> str | None:
    return next((n for n in names if n in catalog.knobs), None)


@dataclass
class QueryLog:
    """The query log of one capture window on `server`, journalled under `run_id`."""

    server: ExternalServer
    catalog: Catalog
    store: Any
    run_id: str
    source: Source = SLOW
    mode: str = "file"  # "file" or "table"
    file: Path | None = None  # FILE: the log the server writes
    own_threads: set[int] = field(default_factory=set)
    others: set[int] = field(default_factory=set)  # another knoblab's, in the window (MARK)
    started_at: dt.datetime | None = None  # the window's start, in UTC
    outputs: frozenset[str] = frozenset()  # the server's own log_output
    aside: bool = False  # the window logs to a table: the log's own table is set aside
    set_aside: bool = False  # and it is, now
    changes: dict[str, str] = field(default_factory=dict)  # name -> value in the window
    originals: dict[str, str | None] = field(default_factory=dict)
    # name -> value in the window as the server shows it once set (what put_back expects to
    # find: anything else was set by another session meanwhile)
    applied: dict[str, str] = field(default_factory=dict)
    # The other connections open when the window began: their database, and the id of the
    # last statement each had run (MariaDB's process list; None where the server has none).
    open_before: dict[int, tuple[str | None, int | None]] = field(default_factory=dict)
    # Those of them ended in the window for their pool to reconnect (capture --reconnect
    # idle): their statements before their end are left out, as a pool's before the window.
    reconnected: set[int] = field(default_factory=set)

    @classmethod
    def plan(cls, server: ExternalServer, catalog: Catalog, store: Any,
             run_id: str, source: Source = SLOW) -> QueryLog:
        """What the window changes, and where the log goes (FILE when this process can
        write in the server's data directory here, else TABLE)."""
        switch = _known(catalog, source.switch)
        if switch is None:
            raise UserError(f"{server.endpoint.describe()} has no {source.said} "
                            f"({source.switch[0]}) to capture statements with")
        datadir = server.datadir
        local = datadir is not None and os.access(datadir, os.W_OK | os.X_OK)
        log = cls(server, catalog, store, run_id, source, mode="file" if local else "table")
        current = server.global_values(["log_output"])
        outputs = {o.strip().upper() for o in current.get("log_output", "FILE").split(",")}
        wanted = (outputs - {"NONE"}) | {"FILE" if local else "TABLE"}
        log.outputs, log.aside = frozenset(outputs), "TABLE" in wanted
        if wanted != outputs:
            log.changes["log_output"] = ",".join(sorted(wanted))
        if local:
            assert datadir is not None
            log.file = datadir / f"knoblab-capture-{run_id or 'new'}.log"
            name = _known(catalog, source.file)
            if name is None:
                raise UserError(f"{server.endpoint.describe()} has no {source.file[0]} "
                                "setting to capture statements with")
            log.changes[name] = str(log.file)
        for names, value in source.wanted:
            name = _known(catalog, names)
            if name is not None and catalog.knobs[name].dynamic:
                log.changes[name] = value
        log.changes[switch] = "ON"  # last: the log is complete before it starts
        return log

    def bind(self, run_id: str) -> None:
        """The run the window's changes are journalled under (it names the log file)."""
        self.run_id = run_id
        if self.file is not None:
            self.file = self.file.with_name(f"knoblab-capture-{run_id}.log")
            name = _known(self.catalog, self.source.file)
            assert name is not None
            self.changes[name] = str(self.file)

    def left_by_killed(self) -> list[str]:
        """Remove what captures that did not end left on the server once their settings were
        back: their logs in the data directory, their tables of the window. Called with the
        capture lock held and `killed_capture` clear, so none of it is a live capture's or
        one still in use; what was removed, as sentences."""
        removed = []
        if self.file is not None:
            for found in sorted(self.file.parent.glob("knoblab-capture-*.log")):
                if found != self.file and _LOG_NAME.fullmatch(found.name):
                    with contextlib.suppress(OSError):
                        found.unlink()
                        removed.append(f"removed {found}, the log a capture that did not end "
                                       "left on the server")
        try:
            removed += put_aside_back(self.server)
        except pymysql.MySQLError as exc:  # this user may see the tables, not rename them
            removed.append(f"a log table of the mysql database is still set aside by a "
                           f"capture that did not end ({refusal(exc)}): a capture by a user "
                           "with ALTER, CREATE, DROP and INSERT on mysql puts it back")
        return removed

    @property
    def switch(self) -> str:
        return next(reversed(self.changes))

    def describe(self) -> str:
        if self.mode == "file":
            assert self.file is not None
            return (f"a new file in the server's data directory ({self.file.parent}), removed "
                    "once copied")
        return (f"the server's mysql.{self.source.table} table (log_output = TABLE), read "
                "over SQL; its own rows are set aside for the window and put back after it")

    def may_change(self, cur: Any) -> bool:
        """Each setting set to its own value (nothing changes): False when this user lacks
        the privilege; a UserError naming a setting the server refuses for another reason."""
        for name in self.changes:
            try:
                cur.execute(f"SET GLOBAL {name} = @@GLOBAL.{name}")  # a catalog name
            except pymysql.MySQLError as exc:
                if exc.args and exc.args[0] in (1227, 1044, 1045):  # access denied
                    return False
                raise UserError(f"{name} cannot be changed on "
                                f"{self.server.endpoint.describe()}: {refusal(exc)}") from None
        return True

    def start(self, conn: pymysql.Connection) -> None:
        """Journal every original (the switch's first), then change them, the switch last.
        `conn` is knoblab's own connection for the window, kept out of the log."""
        names = [self.switch, *(n for n in self.changes if n != self.switch)]
        self.originals = self.server.global_values(names)  # type: ignore[assignment]
        for name in names:  # durably first: a crash right after a change can be undone
            self.store.save_original(self.run_id, self.server.stored(), name,
                                     self.originals.get(name))
        self.silence(conn)
        with conn.cursor() as cur:
            cur.execute("SET SESSION time_zone = '+00:00'")
            if self.file is not None and self.file.exists():
                raise UserError(f"{self.file} exists already; remove it or capture later")
            if self.aside:
                kept, window = self.tables
                table = self.source.table
                try:
                    cur.execute(f"CREATE TABLE mysql.{window} LIKE mysql.{table}")
                    # One statement: the server logs to its table throughout.
                    cur.execute(f"RENAME TABLE mysql.{table} TO mysql.{kept}, "
                                f"mysql.{window} TO mysql.{table}")
                    self.set_aside = True
                except pymysql.MySQLError as exc:
                    raise UserError(f"cannot set mysql.{table} aside for the window on "
                                    f"{self.server.endpoint.describe()}: {refusal(exc)}"
                                    ) from None
            for name in (n for n in self.changes if n != self.switch):
                set_global(cur, self.catalog, name, self.changes[name])
            cur.execute("SELECT NOW(6)")
            self.started_at = one(cur)[0]
            set_global(cur, self.catalog, self.switch, "ON")
            self.applied = self.now(cur)
            # Kept with the run, for `knoblab restore` after a kill -9 to tell the same.
            self.store.update_info(self.run_id, window_values=self.applied)
            # Read once the log is on: a connection that changes its database from now on
            # does so in the log.
            self.open_before = {thread: found for thread, found in open_connections(cur).items()
                                if thread not in self.own_threads}
        if self.file is not None and not os.access(self.file, os.R_OK):
            raise UserError(f"the server's {self.source.said} {self.file} cannot be read by "
                            "this user; run knoblab capture as the server's account or as "
                            "root")

    @property
    def tables(self) -> tuple[str, str]:
        """The names (in the mysql database) of the server's own table while it is set
        aside, and of the window's."""
        assert re.fullmatch(r"[0-9a-z]+", self.run_id), self.run_id  # spliced into SQL
        return f"{self.source.kept}{self.run_id}", f"{self.source.window}{self.run_id}"

    def silence(self, conn: pymysql.Connection) -> None:
        """knoblab's own connection: not logged (MariaDB's session switch of the slow log,
        MySQL's session long_query_time, sql_log_off for the general log), and its thread id
        left out of what is written anyway."""
        with conn.cursor() as cur:
            own_session(cur)
            cur.execute("SELECT CONNECTION_ID()")
            self.own_threads.add(int(one(cur)[0]))
            for name, value in ((_known(self.catalog, _SWITCH), 0),
                                ("long_query_time", 31536000), ("sql_log_off", 1)):
                knob = self.catalog.knobs.get(name or "")
                if knob is not None and knob.scope == "SESSION":
                    with contextlib.suppress(pymysql.MySQLError):
                        cur.execute(f"SET SESSION {knob.name} = %s", (value,))

    def connections_now(self, conn: pymysql.Connection, interrupted: bool
                        ) -> dict[int, tuple[str | None, int | None]]:
        """The server's other connections at the window's end, to set beside `open_before`.
        A stop may have landed halfway through a statement of the window's connection `conn`,
        which is then out of step with the server: the reading is taken on a new connection,
        kept out of the log as the first."""
        if not interrupted:
            with conn.cursor() as cur:
                return open_connections(cur)
        fresh = self.server.connect()
        try:
            self.silence(fresh)
            with fresh.cursor() as cur:
                return open_connections(cur)
        finally:
            fresh.close()

    def now(self, cur: Any) -> dict[str, str]:
        """The values of the settings the window changes, as the server shows them now."""
        return globals_on(cur, list(self.changes))

    def changed_by_others(self, cur: Any) -> dict[str, str]:
        """The settings of the window another session has set since it began: name -> value
        now (the window's log is thinner, or fuller, from then on)."""
        now = self.now(cur)
        return {name: value for name, value in now.items()
                if name in self.applied and value != self.applied[name]}

    def put_back(self) -> PutBack:
        """Every setting the window changed put back (`restore_settings`, on connections
        kept out of the log like the window's own), and read back; one another session
        changed during the window is left as that session set it."""
        return restore_settings(_Quiet(self), self.catalog, self.store, self.run_id,
                                self.applied)

    def written(self, cur: Any) -> int:
        """A cheap counter of what the log has taken since the server started: statements
        logged as slow, or (the general log) statements run."""
        cur.execute("SHOW GLOBAL STATUS LIKE %s", (self.source.counter,))
        row = cur.fetchone()
        return int(row[1]) if row else 0

    def write_out(self, dest: Path) -> None:
        """The window's log into `dest` (made 0600), without knoblab's own connections; a
        UserError when it cannot be read or written (a full disk), with what it left in
        `dest` removed."""
        try:
            source = self.file.open("rb") if self.file is not None else None
        except FileNotFoundError:
            source = None  # nothing was logged
        except OSError as exc:
            raise UserError(f"cannot read the server's {self.source.said} {self.file}: "
                            f"{exc.strerror}") from None
        try:
            fd = os.open(dest, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "wb") as out:
                if self.source is GENERAL:
                    out.write(self._databases_before())
                if source is not None:
                    self.others = _marked(source, self.source) - self.own_threads
                    source.seek(0)
                    copy = _copy_entries if self.source is SLOW else _copy_general
                    copy(source, out, self.own_threads | self.others | self.reconnected)
                elif self.mode == "table":
                    self._write_table(out)
        except OSError as exc:
            with contextlib.suppress(OSError):
                dest.unlink()
            raise UserError(f"cannot write the statements to {exc.filename or dest}: "
                            f"{exc.strerror or exc}") from None
        finally:
            if source is not None:
                source.close()

    def _databases_before(self) -> bytes:
        """An `Init DB` line for each connection open when the window began that had a
        database: the general log names one only when a connection opens or changes it."""
        if self.started_at is None:
            return b""
        when = self.started_at.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        return "".join(f"{when}\t{thread:>6} Init DB\t{database}\n"
                       for thread, (database, _) in sorted(self.open_before.items())
                       if database and thread not in self.reconnected
                       ).encode("utf-8", "surrogateescape")

    def _write_table(self, out: BinaryIO) -> None:
        """The window's rows of the log's table, less knoblab's own, in its text format."""
        conn = self.server.connect()
        try:
            with conn.cursor(pymysql.cursors.SSCursor) as cur:
                own_session(cur)
                cur.execute("SET SESSION time_zone = '+00:00'")
                if self.source is SLOW:
                    cur.execute("SELECT DISTINCT thread_id FROM mysql.slow_log WHERE start_time "
                                ">= %s AND sql_text = %s", (self.started_at, MARK))
                else:
                    cur.execute("SELECT DISTINCT thread_id FROM mysql.general_log WHERE "
                                "event_time >= %s AND command_type = 'Query' AND argument = %s",
                                (self.started_at, MARK))
                self.others = {int(row[0]) for row in cur.fetchall()} - self.own_threads
                skipped = sorted(self.own_threads | self.others | self.reconnected)
                marks = ", ".join(["%s"] * len(skipped))
                window = (self.started_at, *skipped)
                as_text: Callable[..., bytes]
                if self.source is SLOW:
                    cur.execute("SELECT start_time, user_host, query_time, lock_time, "
                                "rows_sent, rows_examined, db, thread_id, sql_text FROM "
                                "mysql.slow_log WHERE start_time >= %s AND thread_id NOT IN "
                                f"({marks}) ORDER BY start_time", window)
                    as_text = _entry
                else:  # without ORDER BY: the table is the log's file (CSV), as written
                    cur.execute("SELECT event_time, thread_id, command_type, argument FROM "
                                "mysql.general_log WHERE event_time >= %s AND thread_id NOT "
                                f"IN ({marks})", window)
                    as_text = _general_entry
                for row in cur:
                    out.write(as_text(*row))
        finally:
            conn.close()

    def clean_up(self, keep: bool = False) -> str | None:
        """Remove what the window left on the server once it is written out: the log file,
        the window's table (the server's own put back in its place, with the rows its own
        settings logged during the window). `keep`: the window's log was not written out, so
        the server keeps it. A sentence when something is left."""
        left = []
        if self.file is not None and self.file.exists():
            if keep:
                left.append(f"the statements are kept in {self.file} on the server (copy it "
                            "now: the next capture removes it)")
            else:
                with contextlib.suppress(FileNotFoundError):
                    self.file.unlink()
        if self.set_aside:
            keep_window = keep and self.mode == "table"
            conn = self.server.connect()
            try:
                with conn.cursor() as cur:
                    own_session(cur)
                    self._put_table_back(cur, keep_window)
                self.set_aside = False
                if keep_window:
                    left.append(f"the statements are kept in mysql.{self.tables[1]} on the "
                                "server (copy them now: the next capture drops it)")
            except pymysql.MySQLError as exc:
                left.append(f"mysql.{self.source.table} is still the window's and the "
                            f"server's own is mysql.{self.tables[0]} ({refusal(exc)}); the "
                            "next capture puts it back")
            finally:
                conn.close()
        return "; ".join(left) or None

    def _put_table_back(self, cur: Any, keep_window: bool) -> None:
        """The server's own table in its place again, with the window's rows its own settings
        would have logged (the log on, to its table; for the slow log, over its
        long_query_time and min_examined_row_limit) copied into it first."""
        kept, window = self.tables
        table = self.source.table
        switch = self.originals.get(self.switch) or "OFF"
        if switch.upper() in ("ON", "1") and "TABLE" in self.outputs:
            if self.source is SLOW:
                long = _known(self.catalog, _LONG)
                slower = float(self.originals.get(long or "") or 0)
                least = int(float(self.originals.get("min_examined_row_limit") or 0))
                cur.execute(f"INSERT INTO mysql.{kept} SELECT * FROM mysql.slow_log WHERE "
                            "query_time > SEC_TO_TIME(%s) AND rows_examined >= %s",
                            (slower, least))
            else:
                cur.execute(f"INSERT INTO mysql.{kept} SELECT * FROM mysql.{table}")
        cur.execute(f"RENAME TABLE mysql.{table} TO mysql.{window}, mysql.{kept} TO "
                    f"mysql.{table}")
        if not keep_window:
            cur.execute(f"DROP TABLE mysql.{window}")


def hold_lock(server: ExternalServer, command: str = "capture") -> pymysql.Connection:
    """A connection holding the server's capture lock (`LOCK`) for as long as it is open:
    the server frees it when the connection ends, also when knoblab is killed. A capture and
    a verify hold the same lock: one of them at a time per server. A UserError naming the
    connection that holds it already, and what `command` should do."""
    conn = server.connect()
    try:
        with conn.cursor() as cur:
            own_session(cur)
            with contextlib.suppress(pymysql.MySQLError):  # idle for the whole window
                cur.execute("SET SESSION wait_timeout = 31536000")
            cur.execute("SELECT GET_LOCK(%s, 0)", (LOCK,))
            if one(cur)[0] != 1:
                raise UserError(f"another knoblab capture is capturing, or a verify "
                                f"verifying, {server.endpoint.describe()} now "
                                f"({lock_holder(cur)}): one capture or verify at a time per "
                                f"server; {command} again once it has ended")
    except BaseException:
        conn.close()
        raise
    return conn


def lock_connection(cur: Any) -> int | None:
    """The id of the connection holding the server's capture lock, if any."""
    cur.execute("SELECT IS_USED_LOCK(%s)", (LOCK,))
    holder = one(cur)[0]
    return None if holder is None else int(holder)


def killed_capture(server: ExternalServer, catalog: Catalog) -> str | None:
    """The run of a capture killed in its window whose changes are still on the server: its
    log is one of the server's log files, or a server's own table is set aside for it."""
    names = [name for source in SOURCES.values()
             if (name := _known(catalog, source.file)) is not None]
    for current in server.global_values(names).values():
        if found := _LOG_NAME.fullmatch(Path(current or "").name):
            return found.group(1)
    return next((run for prefix, run in _capture_tables(server)
                 if _PREFIXES[prefix][1] == "kept"), None)


def _capture_tables(server: ExternalServer) -> list[tuple[str, str]]:
    """(prefix, run) of the tables captures made in the mysql database."""
    conn = server.connect()
    try:
        with conn.cursor() as cur:
            own_session(cur)
            cur.execute("SELECT TABLE_NAME FROM information_schema.TABLES WHERE TABLE_SCHEMA "
                        "= 'mysql' AND TABLE_NAME LIKE 'knoblab\\_%' ORDER BY 1")
            names = [str(row[0]) for row in cur.fetchall()]
    finally:
        conn.close()
    return [(found.group(1), found.group(2)) for n in names
            if (found := _TABLE_NAME.fullmatch(n))]


def put_aside_back(server: ExternalServer, run_id: str | None = None) -> list[str]:
    """The server's own log tables put back in place where a capture (`run_id`'s, or any)
    that did not end left them set aside, and the windows' tables dropped; what was done, as
    sentences. Only for captures whose settings are back and that no longer run."""
    done = []
    tables = [(prefix, run) for prefix, run in _capture_tables(server)
              if run_id is None or run == run_id]
    conn = server.connect()
    try:
        with conn.cursor() as cur:
            own_session(cur)
            for prefix, run in tables:
                source, role = _PREFIXES[prefix]
                table = source.table
                kept, window = f"{source.kept}{run}", f"{source.window}{run}"
                if role == "kept":
                    if (source.window, run) in tables:  # killed between the two statements
                        cur.execute(f"DROP TABLE mysql.{window}")
                    cur.execute(f"RENAME TABLE mysql.{table} TO mysql.{window}, "
                                f"mysql.{kept} TO mysql.{table}")
                    done.append(f"put back mysql.{table} as it was before capture {run} "
                                "(the rows of its window removed)")
                elif (source.kept, run) not in tables:
                    done.append(f"dropped mysql.{window}, the statements of capture {run}'s "
                                "window")
                cur.execute(f"DROP TABLE IF EXISTS mysql.{window}")
    finally:
        conn.close()
    return done


class _Quiet(ExternalServer):
    """The server with its connections silenced: a connection opened while the log is on
    logs what it runs until the log is off."""

    def __init__(self, log: QueryLog) -> None:
        super().__init__(log.server.endpoint)
        self.log = log
        self.identity = log.server.identity

    def connect(self, database: str | None = None, **kwargs: Any) -> pymysql.Connection:
        conn = super().connect(database, **kwargs)
        self.log.silence(conn)
        return conn


def _copy_entries(source: BinaryIO, out: BinaryIO, skipped: set[int]) -> None:
    """The log's lines, less the entries of connections in `skipped` (entries as
    `knoblab.capture.logs.slow_entries` tells them apart, byte for byte). A skipped entry's
    `# Time:` line dates the entries after it: it is kept for the next entry written that
    has none of its own."""
    lines = ((number, raw.decode("utf-8", "surrogateescape"))
             for number, raw in enumerate(source, start=1))
    dated: str | None = None  # a skipped entry's `# Time:` line
    for group in slow_entries(lines):
        first = group[0][1]
        thread = _thread(group)
        if thread is not None and thread in skipped:
            if first.startswith("# Time:"):
                dated = first
            continue
        if dated is not None and first.startswith("# User@Host:"):
            out.write(dated.encode("utf-8", "surrogateescape"))
        if first.startswith(("# Time:", "# User@Host:")):
            dated = None
        out.writelines(text.encode("utf-8", "surrogateescape") for _, text in group)


def _marked(source: BinaryIO, log: Source) -> set[int]:
    """The connections of the log that ran `MARK`: knoblab's, its own or another process's."""
    lines = ((number, raw.decode("utf-8", "surrogateescape"))
             for number, raw in enumerate(source, start=1))
    if log is SLOW:
        return {thread for group in slow_entries(lines)
                if slow_statement(group) == MARK and (thread := _thread(group)) is not None}
    return {found[0] for _, text in lines
            if (found := general_statement(text)) is not None and found[1] == MARK}


def _copy_general(source: BinaryIO, out: BinaryIO, skipped: set[int]) -> None:
    """The general log's lines, less the entries (a line and the lines of its statement that
    follow) of connections in `skipped`. A skipped line's time dates the lines after it: it
    goes onto the next line written that has none of its own."""
    dated: str | None = None  # a skipped line's time
    keep = True
    for raw in source:
        text = raw.decode("utf-8", "surrogateescape")
        found = general_line(text)
        if found is not None:
            when, thread = found
            keep = thread not in skipped
            if not keep:
                dated = when or dated
                continue
            if when is None and dated is not None:
                text = f"{dated}\t{text.lstrip(chr(9))}"
            dated = None
        if keep:
            out.write(text.encode("utf-8", "surrogateescape"))


def open_connections(cur: Any) -> dict[int, tuple[str | None, int | None]]:
    """The server's other connections now (not its own threads, nor this one): each one's
    database and the id of its last statement (MariaDB's QUERY_ID; None elsewhere)."""
    where = ("ID <> CONNECTION_ID() AND COMMAND NOT IN ('Daemon', 'Binlog Dump', 'Killed') "
             "AND USER NOT IN ('system user', 'event_scheduler')")
    try:
        cur.execute(f"SELECT ID, DB, QUERY_ID FROM information_schema.PROCESSLIST WHERE {where}")
    except pymysql.MySQLError:  # a server without QUERY_ID (MySQL)
        cur.execute(f"SELECT ID, DB, NULL FROM information_schema.PROCESSLIST WHERE {where}")
    return {int(thread): (None if db is None else str(db),
                          None if query is None else int(query))
            for thread, db, query in cur.fetchall()}


def _thread(group: list[tuple[int, str]]) -> int | None:
    """The connection of an entry, from its header (None: a line outside any entry)."""
    for _, text in group:
        if not text.startswith("#"):
            return None
        if found := _THREAD.match(text):
            return int(found.group(1) or found.group(2))
    return None


def _general_entry(when: dt.datetime, thread: int, command: str,
                   argument: str | bytes) -> bytes:
    """One mysql.general_log row as the general log's text writes it (its time in UTC)."""
    text = argument.decode("utf-8", "surrogateescape") if isinstance(argument, bytes) \
        else str(argument)
    return (f"{when.strftime('%Y-%m-%dT%H:%M:%S.%f')}Z\t{thread:>6} {command}\t{text}\n"
            ).encode("utf-8", "surrogateescape")


def _entry(start: dt.datetime, user_host: str, query_time: dt.timedelta,
           lock_time: dt.timedelta, rows_sent: int, rows_examined: int, db: str | None,
           thread: int, sql: str | bytes) -> bytes:
    """One mysql.slow_log row as the slow log's text writes it; `# Time:` is when it was
    logged (its start plus its query time, to the microsecond, as MySQL writes it)."""
    seconds = query_time.total_seconds()
    logged = (start + query_time).replace(tzinfo=dt.UTC)
    text = sql.decode("utf-8", "surrogateescape") if isinstance(sql, bytes) else sql
    lines = [f"# Time: {logged.strftime('%Y-%m-%dT%H:%M:%S.%f')}Z",
             f"# User@Host: {' '.join(str(user_host).split())}",
             f"# Thread_id: {thread}  Schema: {db or ''}",
             f"# Query_time: {seconds:.6f}  Lock_time: {lock_time.total_seconds():.6f}  "
             f"Rows_sent: {rows_sent}  Rows_examined: {rows_examined}",
             f"SET timestamp={int(start.replace(tzinfo=dt.UTC).timestamp())};",
             f"{text.rstrip().removesuffix(';')};", ""]
    return "\n".join(lines).encode("utf-8", "surrogateescape")

