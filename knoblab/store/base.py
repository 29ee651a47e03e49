"""The store opened: a database recognised as knoblab's (or made one), and every statement
through `_tx`, a passing failure (another process's lock, a lost connection) tried again for
RETRY_FOR seconds, any other one line naming the store and what is wrong with it."""

from __future__ import annotations

import contextlib
import errno
import json
import os
import re
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import quote

import sqlalchemy as sa

from knoblab import __version__
from knoblab.errors import UserError
from knoblab.store.rows import Damaged
from knoblab.store.schema import (
    STORE_VERSION,
    _create_tables,
    _not_ours,
    marker_metadata,
    metadata,
    os_seconds,
    points,
    run_locks,
    runs,
    saved_settings,
    seconds,
    store_marker,
    trials,
)
from knoblab.store.urls import (
    _check_kind,
    _sqlite_file,
    _with_driver,
    hide_passwords,
    parse_url,
    safe_url,
)
from knoblab.vocabulary import RunStatus, SavedState, TrialState

# How long SQLite waits for another process's lock before a statement gives up, and how long
# a statement that failed for a passing reason (a lock, a lost connection) is tried again.
LOCK_WAIT = 30.0


RETRY_FOR = 60.0


# Less free space than this where a SQLite store lies, and a run is refused before it starts.
MIN_FREE = 1 << 20


T = TypeVar("T")


def _os_problem(exc: OSError) -> str:
    """What an OSError says about a place, as a clause."""
    return {errno.EROFS: "is on a read-only file system",
            errno.ENOSPC: "is on a full file system",
            errno.EDQUOT: "is over its disk quota",
            errno.EACCES: "is not writable (permission denied)",
            errno.EPERM: "is not writable (operation not permitted)",
            errno.ENOENT: "does not exist",
            errno.ENOTDIR: "is not a folder"}.get(exc.errno or 0,
                                                   (exc.strerror or str(exc)).lower())


def _try_writing(folder: Path, size: int = 0) -> OSError | None:
    """Whether a file of `size` bytes can be written in `folder` (it is removed again)."""
    try:
        fd, name = tempfile.mkstemp(dir=folder, prefix=".knoblab-probe-")
    except OSError as exc:
        return exc
    try:
        with os.fdopen(fd, "wb") as probe:
            probe.write(b"\0" * size)
            probe.flush()
            os.fsync(probe.fileno())
    except OSError as exc:
        return exc
    finally:
        with contextlib.suppress(OSError):
            os.unlink(name)
    return None


def _first_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return lines[0].strip() if lines else type(exc).__name__


def _passing(exc: sa.exc.SQLAlchemyError) -> bool:
    """Whether a failure may pass: another process's lock, a connection lost or refused (a
    server restarting, a fail-over), a conflict between transactions."""
    if isinstance(exc, sa.exc.TimeoutError):  # no connection free in the pool
        return True
    if not isinstance(exc, sa.exc.DBAPIError):
        return False
    if exc.connection_invalidated:
        return True
    orig = exc.orig
    if str(getattr(orig, "sqlite_errorname", "")).startswith(("SQLITE_BUSY", "SQLITE_LOCKED")):
        return True
    state = getattr(orig, "sqlstate", None)
    if state is not None:
        return state in ("40001", "40P01", "57P01", "57P02", "57P03") or state.startswith("08")
    # Without a state the failure is the client's: the connection, not a statement; but a
    # server that answered "no such database" or "wrong password" will answer so again.
    said = _first_line(orig) if orig is not None else ""
    return isinstance(exc, sa.exc.OperationalError) and \
        not hasattr(orig, "sqlite_errorname") and not _refused_login(said) and \
        not _no_database(said)


def _refused_login(said: str) -> bool:
    return "authentication failed" in said or "no pg_hba.conf entry" in said or \
        re.search(r'role "[^"]*" does not exist', said) is not None


def _no_database(said: str) -> bool:
    return re.search(r'database "[^"]*" does not exist', said) is not None


class Connected:
    """The results store's connection: opened, checked, and every statement through `_tx`."""

    def __init__(self, url: str | sa.URL) -> None:
        given = parse_url(url)
        _check_kind(given, hide_passwords(url.strip()) if isinstance(url, str) else
                    safe_url(given))
        self.url = _with_driver(given)
        self.path = _sqlite_file(given)
        self.name = str(self.path) if self.path else safe_url(given)
        self._secret = given.password or ""
        self._opened = False
        self._creating = False  # making knoblab's tables (not only reading them)
        self._written = False  # something this process wrote is stored
        self._gone = False  # a passing failure outlasted RETRY_FOR: no more waiting for it
        self._study: str | None = None  # runs created now are this study's (`measuring_for`)
        if self.path is not None:
            self._check_place(self.path)
        try:
            self.engine = sa.create_engine(self.url, pool_pre_ping=True,
                                           connect_args=self._connect_args())
        except (sa.exc.SQLAlchemyError, ImportError, ValueError, TypeError) as exc:
            raise UserError(f"cannot open the results store {self.name}: "
                            f"{self._scrub(_first_line(exc))}") from None
        try:
            self._prepare()
        except sa.exc.SQLAlchemyError as exc:
            raise self._failure(exc, time.monotonic(), write=self._creating) from None
        self._opened = True

    def _connect_args(self) -> dict[str, Any]:
        if self.url.drivername.startswith("sqlite"):
            return {"timeout": LOCK_WAIT}
        if self.url.drivername.startswith("postgresql") and \
                "connect_timeout" not in self.url.query:
            return {"connect_timeout": 15}  # a silent host: not the TCP timeout of minutes
        return {}

    def _check_place(self, path: Path) -> None:
        """A SQLite store's path, checked before SQLite says only "unable to open"."""
        try:
            if path.is_dir():
                raise UserError(f"the results store {path} is a folder, not a SQLite file: "
                                f"give a file in it, e.g. {path / 'knoblab.sqlite'}")
            if path.exists():
                if not path.is_file():
                    raise UserError(f"the results store {path} is not a regular file: give "
                                    "a SQLite file's path")
                return
            folder = path.parent
            existing = next(p for p in (folder, *folder.parents) if p.exists())
        except OSError as exc:
            raise UserError(f"cannot reach the results store {path}: "
                            f"{exc.strerror or exc}") from None
        if not existing.is_dir():
            raise UserError(f"cannot create the results store {path}: {existing} is a file, "
                            "not a folder")
        if existing != folder:
            raise UserError(f"cannot create the results store {path}: its folder {folder} "
                            "does not exist (create it first)")
        if (problem := _try_writing(folder)) is not None:
            raise UserError(f"cannot create the results store {path}: its folder {folder} "
                            f"{_os_problem(problem)}")

    def _prepare(self) -> None:
        """Recognise knoblab's store (or an empty database, made one now) and refuse any
        other database before writing a byte into it."""
        with self.engine.connect() as conn:
            inspector = sa.inspect(conn)
            names = {n for n in inspector.get_table_names() if not n.startswith("sqlite_")}
            columns = {n: {c["name"] for c in inspector.get_columns(n)}
                       for n in names & set(metadata.tables)}
            version = (conn.execute(sa.select(sa.func.max(store_marker.c.version))).scalar()
                       if store_marker.name in names else None)
        if version is not None and version > STORE_VERSION:
            raise UserError(f"cannot open the results store {self.name}: a newer knoblab made "
                            f"it (store layout {version}; this knoblab {__version__} knows "
                            f"{STORE_VERSION}): use that knoblab, or another store")
        if (wrong := _not_ours(names, columns)) is not None:
            raise UserError(f"cannot open the results store {self.name}: it is not a knoblab "
                            f"results store ({wrong}); give a new file or an empty database")
        self._creating = True
        _create_tables(self.engine)
        if not columns:  # knoblab made it just now: mark it so
            _create_tables(self.engine, marker_metadata)
            try:
                with self.engine.begin() as conn:
                    conn.execute(store_marker.insert().values(
                        id=1, version=STORE_VERSION, created_at=time.time(),
                        created_by=__version__))
            except sa.exc.IntegrityError:
                pass  # another process opening it at the same moment marked it

    def check_writable(self) -> None:
        """Refuse, before anything runs, a store that can be read but not written: its folder
        or file read-only, its disk full, a database user that may only read, a standby. A
        run stores every measurement the moment it exists, so it must find out now."""
        if self.path is not None:
            folder = self.path.parent
            if (problem := _try_writing(folder, 64 << 10)) is not None:
                raise UserError(f"the results store {self.path} cannot be written: its folder "
                                f"{folder} {_os_problem(problem)}")
            try:
                os.close(os.open(self.path, os.O_WRONLY))
            except OSError as exc:
                raise UserError(f"the results store {self.path} cannot be written: it "
                                f"{_os_problem(exc)}") from None
            stat = os.statvfs(folder)
            if stat.f_bavail * stat.f_frsize < MIN_FREE:
                raise UserError(f"the results store {self.path} is on a file system with "
                                f"only {stat.f_bavail * stat.f_frsize >> 10} KiB free: a run "
                                "stores every measurement there; free some space first")

        class Probed(Exception):
            """Ends the probe's transaction, so that it is rolled back."""

        def probe(conn: sa.Connection) -> None:
            # What a run writes, in every table, then rolled back.
            run_id, now = f"probe-{uuid.uuid4().hex[:16]}", time.time()
            conn.execute(runs.insert().values(id=run_id, name="probe", kind="probe",
                                              status=RunStatus.RUNNING, created_at=now,
                                              spec_source=""))
            conn.execute(points.insert().values(run_id=run_id, idx=0, requested="{}",
                                                config="{}"))
            key = conn.execute(trials.insert().values(
                run_id=run_id, point_idx=0, repetition=0, position=0,
                status=TrialState.RUNNING,
                started_at=now, finished_at=now)).inserted_primary_key
            trial_id = key[0] if key else None
            conn.execute(seconds.insert().values(trial_id=trial_id, t=0.0))
            conn.execute(os_seconds.insert().values(trial_id=trial_id, t=0.0))
            conn.execute(saved_settings.insert().values(run_id=run_id, name="probe",
                                                        server="{}", status=SavedState.CHANGED,
                                                        saved_at=now))
            conn.execute(run_locks.insert().values(run_id=run_id, token="probe", host="",
                                                   pid=0, acquired_at=now, heartbeat_at=now))
            conn.execute(runs.update().where(runs.c.id == run_id).values(
                status=RunStatus.DONE))
            conn.execute(run_locks.delete().where(run_locks.c.run_id == run_id))
            conn.execute(trials.update().where(trials.c.id == trial_id).values(value=0.0))
            raise Probed

        with contextlib.suppress(Probed):
            self._tx(probe, passing=(Probed,), probing=True)

    def _tx(self, work: Callable[[sa.Connection], T], *, write: bool = True,
            passing: tuple[type[BaseException], ...] = (), probing: bool = False) -> T:
        """`work` in one transaction (committed when `write`), tried again while its failure
        is a passing one; any other failure of the database is one line (UserError).
        Exceptions in `passing` reach the caller as they are."""
        start = time.monotonic()
        pause = 0.1
        while True:
            try:
                with self.engine.begin() if write else self.engine.connect() as conn:
                    result = work(conn)
                if write and not probing:
                    self._written = True
                self._gone = False
                return result
            except passing:
                raise
            # What the database (or the pool reaching it) said; SQLAlchemy's other errors are
            # knoblab's own mistakes, for the crash log.
            except (sa.exc.DBAPIError, sa.exc.TimeoutError, sa.exc.DisconnectionError) as exc:
                if _passing(exc) and not self._gone:
                    if time.monotonic() - start + pause < RETRY_FOR:
                        time.sleep(pause)
                        pause = min(pause * 2, 5.0)
                        continue
                    # The clean-up after this failure (the run's status, its claim) tries
                    # once each, instead of waiting as long again.
                    self._gone = True
                raise self._failure(exc, start, write=write or probing) from None

    def _scrub(self, text: str) -> str:
        """A message from the driver, with no trace of the password."""
        for secret in {self._secret, quote(self._secret, safe="")} - {""}:
            text = text.replace(secret, "***")
        return hide_passwords(text)

    def _failure(self, exc: sa.exc.SQLAlchemyError, start: float, *,
                 write: bool = False) -> UserError:
        """One line: the store, what is wrong with it in words, and the database's own."""
        orig = getattr(exc, "orig", None) or exc
        said = self._scrub(_first_line(orig))
        sqlite = "_".join(str(getattr(orig, "sqlite_errorname", "")).split("_")[:2])
        state = str(getattr(orig, "sqlstate", None) or "")
        user = self.url.username or "(the default user)"
        waited = time.monotonic() - start
        if sqlite == "SQLITE_CORRUPT":
            problem = (f"it is damaged ({said}): restore it from a backup, or save what can "
                       f"still be read with: sqlite3 {self.path} .recover")
        elif sqlite == "SQLITE_NOTADB":
            problem = (f"it is not a SQLite database, or it is damaged ({said}): give another "
                       "file, or restore it from a backup")
        elif sqlite in ("SQLITE_BUSY", "SQLITE_LOCKED"):
            problem = (f"it is locked by another process, for over {max(waited, LOCK_WAIT):.0f}"
                       f" s now ({said}): find which with: fuser {self.path}; or try again "
                       "when it is done")
        elif sqlite == "SQLITE_READONLY" or state == "25006":
            problem = (f"it is read-only ({said}): check its file's permissions and file "
                       "system" if sqlite else
                       f"it is read-only ({said}): a standby, or read-only by default; point "
                       "knoblab at the primary")
        elif sqlite in ("SQLITE_CANTOPEN", "SQLITE_PERM", "SQLITE_AUTH"):
            problem = (f"it cannot be opened ({said}): check the permissions of the file and "
                       "its folder")
        elif sqlite == "SQLITE_FULL" or state in ("53100", "53200"):
            problem = f"its disk is full ({said}): free some space"
        elif sqlite == "SQLITE_IOERR":
            problem = f"reading or writing it failed ({said}): check its disk"
        elif state == "42501":
            problem = (f"user {user} may not {'write' if write else 'read'} it ({said}): grant "
                       f"it {'INSERT, UPDATE and DELETE' if write else 'SELECT'} on knoblab's "
                       "tables, or use another user")
        elif state.startswith("28") or _refused_login(said):
            problem = (f"the login was refused ({said}): check the user and its password "
                       "(PGPASSWORD or ~/.pgpass)")
        elif state == "3D000" or _no_database(said):
            problem = f"its database does not exist ({said})"
        elif _passing(exc):
            problem = (f"the connection to it was lost, and not made again in {waited:.0f} s "
                       f"({said})" if self._opened and waited >= 1 else
                       f"it cannot be reached ({said})")
        else:
            problem = f"it failed ({said})"
        if self._written:
            problem += "; what was stored before is kept"
        return UserError(f"{'the' if self._opened else 'cannot open the'} results store "
                         f"{self.name}: {problem}")

    def run(self, run_id: str) -> dict[str, Any]:
        """A stored run, as the read side gives it (`Reads.run`): the write side reads a
        run's info before it updates it."""
        raise NotImplementedError

    @contextlib.contextmanager
    def _reading(self, what: str) -> Iterator[None]:
        """Rows becoming records: a damaged one is one line naming the store, what it belongs
        to and what is wrong in it."""
        try:
            yield
        except Damaged as exc:
            raise UserError(f"the results store {self.name} is damaged: in {what}, {exc}; "
                            "restore the store from a backup (or delete "
                            f"{'that study' if what.startswith('study') else 'that run'})"
                            ) from None

    def _json(self, text: str, what: str) -> Any:
        """A stored JSON text; one that is not (a damaged or hand-edited store) is a line."""
        try:
            return json.loads(text)
        except (ValueError, TypeError):
            raise UserError(f"the results store {self.name} is damaged: in {what}, a value "
                            "is not the JSON knoblab wrote; restore the store from a backup"
                            ) from None

    def _state(self, text: str, what: str) -> TrialState:
        try:
            return TrialState(text)
        except ValueError:
            raise UserError(f"the results store {self.name}: in {what}, a state knoblab does "
                            f"not know ({text!r}): a newer knoblab wrote it, or the store is "
                            "damaged") from None
