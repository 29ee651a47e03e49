"""A running server's slow query log, turned on for a capture window at long_query_time = 0
and turned off again, and what it logged written out as a slow log `knoblab.capture.read_log`
reads.

Every setting changed is journalled in the store before it changes (the restore journal of
`knoblab.server.external`), so the same `restore_settings` puts it back at the end, after a
signal or an error, and `knoblab restore` after a kill -9. The original of `slow_query_log`
is journalled first, so it is the first put back: once the slow log is off nothing more is
logged, knoblab's own restoring statements included.

Where the log goes:

* FILE: a new file in the server's data directory, when the server runs on this machine and
  this process can write there (it can then read the file the server writes, and remove it).
  The data directory is readable only by the server's account, so the statements' literals
  are never in a place others can read; the file is removed as soon as it is copied.
* TABLE: elsewhere, `log_output` gains TABLE and the window's rows of `mysql.slow_log` are
  read over SQL and written out in the slow log's text format.

Connections keep the long_query_time they opened with: only statements of connections
opened during the window are all logged (the server's rule, for the slow log of any tool).
knoblab's own connections switch their own logging off, and their thread ids are left out
of what is written, whatever the server logged.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

import pymysql

from knoblab.catalog import Catalog
from knoblab.connection import one
from knoblab.errors import UserError
from knoblab.server.external import ExternalServer, refusal, restore_settings
from knoblab.server.settings import own_session, set_global

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
_THREAD = re.compile(rb"^# (?:User@Host:.*\bId:\s*(\d+)|Thread_id: (\d+))")
_ENTRY_START = (b"# Time:", b"# User@Host:")


def _known(catalog: Catalog, names: tuple[str, ...]) -> str | None:
    return next((n for n in names if n in catalog.knobs), None)


@dataclass
class SlowLog:
    """The slow log of one capture window on `server`, journalled under `run_id`."""

    server: ExternalServer
    catalog: Catalog
    store: Any
    run_id: str
    mode: str = "file"  # "file" or "table"
    file: Path | None = None  # FILE: the log the server writes
    own_threads: set[int] = field(default_factory=set)
    started_at: dt.datetime | None = None  # TABLE: the window's start, in UTC
    table_was_empty: bool = False
    changes: dict[str, str] = field(default_factory=dict)  # name -> value in the window
    originals: dict[str, str | None] = field(default_factory=dict)

    @classmethod
    def plan(cls, server: ExternalServer, catalog: Catalog, store: Any,
             run_id: str) -> SlowLog:
        """What the window changes, and where the log goes (FILE when this process can
        write in the server's data directory here, else TABLE)."""
        switch = _known(catalog, _SWITCH)
        if switch is None:
            raise UserError(f"{server.endpoint.describe()} has no slow query log "
                            "(slow_query_log) to capture statements with")
        datadir = server.datadir
        local = datadir is not None and os.access(datadir, os.W_OK | os.X_OK)
        log = cls(server, catalog, store, run_id, mode="file" if local else "table")
        current = server.global_values(["log_output"])
        outputs = {o.strip().upper() for o in current.get("log_output", "FILE").split(",")}
        wanted = (outputs - {"NONE"}) | {"FILE" if local else "TABLE"}
        if wanted != outputs:
            log.changes["log_output"] = ",".join(sorted(wanted))
        if local:
            assert datadir is not None
            log.file = datadir / f"knoblab-capture-{run_id or 'new'}.log"
            name = _known(catalog, _FILE)
            if name is None:
                raise UserError(f"{server.endpoint.describe()} has no slow_query_log_file "
                                "setting to capture statements with")
            log.changes[name] = str(log.file)
        for names, value in _WANTED:
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
            name = _known(self.catalog, _FILE)
            assert name is not None
            self.changes[name] = str(self.file)

    def left_by_killed(self, store: Any) -> list[Path]:
        """Remove the log files of captures of this store that were killed (the settings
        are back: a capture is refused until they are); the files removed."""
        if self.file is None:
            return []
        removed = []
        for found in sorted(self.file.parent.glob("knoblab-capture-*.log")):
            run_id = found.stem.removeprefix("knoblab-capture-")
            with contextlib.suppress(UserError):
                if found != self.file and store.run(run_id)["status"] != "done" and \
                        not store.pending_restores(run_id):
                    found.unlink(missing_ok=True)
                    removed.append(found)
        return removed

    @property
    def switch(self) -> str:
        return next(reversed(self.changes))

    def describe(self) -> str:
        if self.mode == "file":
            assert self.file is not None
            return (f"a new file in the server's data directory ({self.file.parent}), removed "
                    "once copied")
        return "the server's mysql.slow_log table (log_output = TABLE), read over SQL"

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
            if self.mode == "table":
                cur.execute("SET SESSION time_zone = '+00:00'")
                cur.execute("SELECT COUNT(*) FROM mysql.slow_log")
                self.table_was_empty = not one(cur)[0]
            if self.file is not None and self.file.exists():
                raise UserError(f"{self.file} exists already; remove it or capture later")
            for name in (n for n in self.changes if n != self.switch):
                set_global(cur, self.catalog, name, self.changes[name])
            if self.mode == "table":
                cur.execute("SELECT NOW(6)")
                self.started_at = one(cur)[0]
            set_global(cur, self.catalog, self.switch, "ON")
        if self.file is not None and not os.access(self.file, os.R_OK):
            raise UserError(f"the server's slow log {self.file} cannot be read by this user; "
                            "run knoblab capture as the server's account or as root")

    def silence(self, conn: pymysql.Connection) -> None:
        """knoblab's own connection: not logged (MariaDB's session switch, MySQL's session
        long_query_time), and its thread id left out of what is written anyway."""
        with conn.cursor() as cur:
            own_session(cur)
            cur.execute("SELECT CONNECTION_ID()")
            self.own_threads.add(int(one(cur)[0]))
            for name, value in ((_known(self.catalog, _SWITCH), 0),
                                ("long_query_time", 31536000)):
                knob = self.catalog.knobs.get(name or "")
                if knob is not None and knob.scope == "SESSION":
                    with contextlib.suppress(pymysql.MySQLError):
                        cur.execute(f"SET SESSION {knob.name} = %s", (value,))

    def put_back(self) -> list[str]:
        """Every setting the window changed put back (`restore_settings`, on connections
        kept out of the log like the window's own); the names put back."""
        return restore_settings(_Quiet(self), self.catalog, self.store, self.run_id)

    def written(self, cur: Any) -> int:
        """Statements the server has logged as slow since it started (a cheap counter)."""
        cur.execute("SHOW GLOBAL STATUS LIKE 'Slow_queries'")
        row = cur.fetchone()
        return int(row[1]) if row else 0

    def write_out(self, dest: Path) -> None:
        """The window's log into `dest` (made 0600), without knoblab's own connections."""
        fd = os.open(dest, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "wb") as out:
            if self.mode == "file":
                assert self.file is not None
                try:
                    with self.file.open("rb") as source:
                        _copy_entries(source, out, self.own_threads)
                except FileNotFoundError:
                    pass  # nothing was logged
                except OSError as exc:
                    raise UserError(f"cannot read the server's slow log {self.file}: "
                                    f"{exc.strerror}") from None
            else:
                self._write_table(out)

    def _write_table(self, out: BinaryIO) -> None:
        conn = self.server.connect()
        try:
            with conn.cursor(pymysql.cursors.SSCursor) as cur:
                own_session(cur)
                cur.execute("SET SESSION time_zone = '+00:00'")
                marks = ", ".join(["%s"] * len(self.own_threads))
                cur.execute("SELECT start_time, user_host, query_time, lock_time, rows_sent, "
                            "rows_examined, db, thread_id, sql_text FROM mysql.slow_log "
                            f"WHERE start_time >= %s AND thread_id NOT IN ({marks}) "
                            "ORDER BY start_time",
                            (self.started_at, *sorted(self.own_threads)))
                for row in cur:
                    out.write(_entry(*row))
        finally:
            conn.close()

    def clean_up(self) -> str | None:
        """Remove what the window left on the server's side once it is written out: the log
        file, or the table's rows when the table held none before. A sentence when
        something is left (the table's rows beside older ones)."""
        if self.mode == "file":
            if self.file is not None:
                with contextlib.suppress(FileNotFoundError):
                    self.file.unlink()
            return None
        if not self.table_was_empty:
            return ("mysql.slow_log held rows before the window, so the window's rows are "
                    "left beside them (TRUNCATE mysql.slow_log removes them all)")
        conn = self.server.connect()
        try:
            with conn.cursor() as cur:
                cur.execute("TRUNCATE TABLE mysql.slow_log")
        except pymysql.MySQLError as exc:
            return f"the window's rows are left in mysql.slow_log ({refusal(exc)})"
        finally:
            conn.close()
        return None


class _Quiet(ExternalServer):
    """The server with its connections silenced: a connection opened while the slow log is
    on logs what it runs until the log is off."""

    def __init__(self, log: SlowLog) -> None:
        super().__init__(log.server.endpoint)
        self.log = log
        self.identity = log.server.identity

    def connect(self, database: str | None = None, **kwargs: Any) -> pymysql.Connection:
        conn = super().connect(database, **kwargs)
        self.log.silence(conn)
        return conn


def _copy_entries(source: BinaryIO, out: BinaryIO, skipped: set[int]) -> None:
    """The log's lines, less the entries of connections in `skipped` (an entry runs from its
    `# Time:` or `# User@Host:` line to the next). A skipped entry's `# Time:` line dates the
    entries after it: it is kept for the next entry written that has none of its own."""
    entry: list[bytes] = []
    thread: int | None = None
    in_body = False
    dated: bytes | None = None  # a skipped entry's `# Time:` line

    def flush() -> None:
        nonlocal dated
        if not entry:
            return
        if thread is None or thread not in skipped:
            if dated is not None and not entry[0].startswith(b"# Time:"):
                out.write(dated)
            out.writelines(entry)
            dated = None
        elif entry[0].startswith(b"# Time:"):
            dated = entry[0]

    for line in source:
        starts = line.startswith(_ENTRY_START)
        if starts and (in_body or (line.startswith(b"# Time:") and entry)):
            flush()
            entry, thread, in_body = [], None, False
        if not entry and not starts:
            out.write(line)  # the server's banner
            continue
        entry.append(line)
        if line.startswith(b"#"):
            if thread is None and (found := _THREAD.match(line)):
                thread = int(found.group(1) or found.group(2))
        else:
            in_body = True
    flush()


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

