"""A running server's databases dumped for the sandboxes: mariadb-dump (or mysqldump)
`--single-transaction --routines --triggers --events --databases …`, streamed through zstd
into one file, with the privileges it needs, the tables it cannot take consistently and the
disk it needs said before it starts.

The password reaches the dump program the way knoblab itself is given it: the environment
variable `password_env` names (as MYSQL_PWD, in the child's environment only) or the user's
own option file (`--defaults-extra-file`); never on a command line or in a file knoblab
writes.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import re
import shutil
import signal
import subprocess
import tempfile
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.filesize import decimal as format_size

from knoblab.connection import SYSTEM_DATABASES, Endpoint
from knoblab.errors import UserError
from knoblab.server.external import OWNER_TABLE

# Engines whose tables --single-transaction reads from one consistent snapshot.
TRANSACTIONAL = frozenset({"INNODB", "XTRADB", "ROCKSDB", "TOKUDB", "NDBCLUSTER", "NDB"})
MODES = ("schema", "all", "sample=N")
_SCHEMA_BYTES = 4096  # a table's CREATE statement and its comments, generously
_CHUNK = 1 << 20
_PR_SET_PDEATHSIG = 1  # linux/prctl.h


def parse_data(text: str) -> tuple[str, int | None]:
    """--data: ("schema", None), ("all", None) or ("sample", N rows per table)."""
    value = text.strip().lower()
    if value in ("schema", "all"):
        return value, None
    if value.startswith("sample="):
        rows = value[len("sample="):]
        if rows.isdigit() and 0 < int(rows) < 2**63:
            return "sample", int(rows)
    raise UserError(f"--data {text}: give schema (the tables' definitions only), all (every "
                    "row) or sample=N (at most N rows per table, N a whole number above 0)")


@dataclass
class DumpPlan:
    """What the dump takes, and what it needs, known before it starts."""

    mode: str  # schema, all or sample
    rows: int | None  # sample: rows per table
    databases: list[str] = field(default_factory=list)
    not_transactional: list[str] = field(default_factory=list)  # "db.table (Engine)"
    text_bytes: int = 0  # the dump's text, estimated from the tables' sizes
    tables: int = 0
    # Every database this user sees (the server's own and knoblab's too), and whether that is
    # every one on the server: without SHOW DATABASES (or a privilege on all of them) a user
    # sees only those it holds a privilege on, and the others would not be dumped.
    seen: frozenset[str] = frozenset()
    sees_all: bool = True

    @property
    def with_rows(self) -> bool:
        return self.mode != "schema"

    def describe(self) -> str:
        what = {"schema": "the tables' definitions, no rows", "all": "every row",
                "sample": f"at most {self.rows} rows per table"}[self.mode]
        return (f"{what} of {len(self.databases)} database(s) ({', '.join(self.databases)}), "
                f"{self.tables} table(s)")


def plan_dump(cur: Any, mode: str, rows: int | None) -> DumpPlan:
    """The databases this user sees (less the server's own and knoblab's), their tables'
    engines and sizes."""
    plan = DumpPlan(mode, rows)
    cur.execute("SELECT SCHEMA_NAME FROM information_schema.SCHEMATA ORDER BY SCHEMA_NAME")
    plan.seen = frozenset(str(r[0]) for r in cur.fetchall())
    holds, _ = _grants(cur)
    plan.sees_all = any(holds(privilege, "") for privilege in ("SHOW DATABASES", "SELECT"))
    names = sorted(name for name in plan.seen if name.lower() not in SYSTEM_DATABASES)
    # knoblab's own benchmark data, whatever [server] database named it: marked as knoblab's
    cur.execute("SELECT TABLE_SCHEMA FROM information_schema.TABLES WHERE TABLE_NAME = %s",
                (OWNER_TABLE,))
    owned = {str(r[0]) for r in cur.fetchall()}
    names = [name for name in names if name not in owned]
    plan.databases = names
    if not names:
        return plan
    marks = ", ".join(["%s"] * len(names))
    cur.execute("SELECT TABLE_SCHEMA, TABLE_NAME, ENGINE, COALESCE(DATA_LENGTH, 0), "
                "COALESCE(TABLE_ROWS, 0) FROM information_schema.TABLES WHERE TABLE_TYPE = "
                f"'BASE TABLE' AND TABLE_SCHEMA IN ({marks}) ORDER BY 1, 2", names)
    for schema, table, engine, size, count in cur.fetchall():
        plan.tables += 1
        plan.text_bytes += _SCHEMA_BYTES
        if mode == "all":
            plan.text_bytes += int(size)
        elif mode == "sample" and rows is not None:
            # TABLE_ROWS is an estimate: a table said to hold fewer is taken whole
            plan.text_bytes += int(size) if int(count) <= rows else \
                int(int(size) * rows / int(count))
        if mode != "schema" and str(engine or "").upper() not in TRANSACTIONAL:
            plan.not_transactional.append(f"{schema}.{table} ({engine})")
    return plan


# What the dump needs of a database (SHOW VIEW only where it has views).
TO_DUMP = "SELECT, SHOW VIEW, TRIGGER and EVENT"


def unseen_databases(plan: DumpPlan, used: Iterable[str | None]) -> list[str]:
    """Of the databases `used` (by the application's connections, its statements), those
    this user does not see, so the dump would not hold them: none when it sees every one (a
    database used and not seen then does not exist, or no longer does)."""
    if plan.sees_all:
        return []
    return sorted({name for name in used if name and name.lower() not in SYSTEM_DATABASES
                   and name not in plan.seen})


def missing_on(cur: Any, database: str, privileges: tuple[str, ...], why: str) -> list[str]:
    """The `privileges` this user lacks on `database`, as one "A, B on db (why)" phrase
    (empty: none)."""
    holds, _ = _grants(cur)
    lacking = [p for p in privileges if not holds(p, database)]
    return [f"{', '.join(lacking)} on {database} ({why})"] if lacking else []


def _grants(cur: Any) -> tuple[Callable[[str, str], bool], list[str]]:
    """Whether this user (or a role it has enabled) holds a privilege on a database, and
    the grantees it is known by."""
    cur.execute("SELECT CURRENT_USER()")
    user, _, host = str(cur.fetchone()[0]).rpartition("@")
    grantees = [f"'{user}'@'{host}'"]
    with contextlib.suppress(Exception):  # no roles on this server
        cur.execute("SELECT ROLE_NAME FROM information_schema.ENABLED_ROLES")
        for (role,) in cur.fetchall():
            grantees += [f"'{role}'", f"'{role}'@''", f"'{role}'@'%'"]
    marks = ", ".join(["%s"] * len(grantees))
    cur.execute("SELECT PRIVILEGE_TYPE FROM information_schema.USER_PRIVILEGES "
                f"WHERE GRANTEE IN ({marks})", grantees)
    everywhere = {str(r[0]).upper() for r in cur.fetchall()}
    cur.execute("SELECT TABLE_SCHEMA, PRIVILEGE_TYPE FROM information_schema.SCHEMA_PRIVILEGES "
                f"WHERE GRANTEE IN ({marks})", grantees)
    by_pattern = [(_grant_pattern(str(s)), str(p).upper()) for s, p in cur.fetchall()]

    def holds(privilege: str, database: str) -> bool:
        return privilege in everywhere or any(
            p == privilege and pattern.fullmatch(database) for pattern, p in by_pattern)
    return holds, grantees


def missing_privileges(cur: Any, databases: list[str]) -> list[str]:
    """What this user lacks for the dump, as "PRIVILEGE on db, db" phrases (empty: none):
    SELECT on every database, SHOW VIEW where it has views, TRIGGER and EVENT (the only way
    to see a database's triggers and events is to hold them), and for stored routines the
    right to read mysql.proc (MariaDB) unless the user defined them all."""
    if not databases:
        return []
    holds, grantees = _grants(cur)
    marks = ", ".join(["%s"] * len(grantees))
    db_marks = ", ".join(["%s"] * len(databases))
    cur.execute("SELECT DISTINCT TABLE_SCHEMA FROM information_schema.VIEWS "
                f"WHERE TABLE_SCHEMA IN ({db_marks})", databases)
    with_views = {str(r[0]) for r in cur.fetchall()}
    cur.execute("SELECT DISTINCT ROUTINE_SCHEMA FROM information_schema.ROUTINES WHERE "
                f"ROUTINE_SCHEMA IN ({db_marks}) AND DEFINER <> CURRENT_USER()", databases)
    with_routines = {str(r[0]) for r in cur.fetchall()}
    cur.execute("SELECT PRIVILEGE_TYPE FROM information_schema.TABLE_PRIVILEGES WHERE "
                f"GRANTEE IN ({marks}) AND TABLE_SCHEMA = 'mysql' AND TABLE_NAME = 'proc'",
                grantees)
    proc_readable = "SELECT" in {str(r[0]).upper() for r in cur.fetchall()}
    lacking: dict[str, list[str]] = {}
    for database in databases:
        needed = ["SELECT", "TRIGGER", "EVENT"] + (["SHOW VIEW"] if database in with_views
                                                   else [])
        for privilege in needed:
            if not holds(privilege, database):
                lacking.setdefault(privilege, []).append(database)
        if database in with_routines and not (proc_readable or holds("SELECT", "mysql")):
            lacking.setdefault("SELECT", []).append("mysql.proc (for the routines of "
                                                     f"{database})")
    return [f"{privilege} on {', '.join(where)}" for privilege, where in lacking.items()]


def _grant_pattern(text: str) -> re.Pattern[str]:
    """A database grant's name as a pattern: `_` and `%` are wildcards unless escaped."""
    out, escaped = [], False
    for char in text:
        if escaped:
            out.append(re.escape(char))
            escaped = False
        elif char == "\\":
            escaped = True
        elif char == "_":
            out.append(".")
        elif char == "%":
            out.append(".*")
        else:
            out.append(re.escape(char))
    return re.compile("".join(out), re.IGNORECASE)


def dump_program() -> str:
    found = shutil.which("mariadb-dump") or shutil.which("mysqldump")
    if found is None:
        raise UserError("neither mariadb-dump nor mysqldump is on PATH: install the server's "
                        "client programs (Debian: mariadb-client) to take the data")
    return found


def dump_command(program: str, endpoint: Endpoint, plan: DumpPlan
                 ) -> tuple[list[str], dict[str, str]]:
    """The dump's argument list and environment: the password only in the environment
    (MYSQL_PWD) or the user's own option file."""
    argv = [program]
    if endpoint.option_file:  # must come first
        argv.append(f"--defaults-extra-file={Path(endpoint.option_file).expanduser()}")
    if endpoint.socket:
        argv.append(f"--socket={endpoint.socket}")
    else:
        argv += [f"--host={endpoint.host or 'localhost'}", f"--port={endpoint.port}",
                 "--protocol=TCP"]
    argv += [f"--user={endpoint.user}", "--single-transaction", "--routines", "--triggers",
             "--events", "--hex-blob", "--default-character-set=utf8mb4"]
    if plan.mode == "schema":
        argv.append("--no-data")
    elif plan.mode == "sample":
        argv.append(f"--where=1 LIMIT {plan.rows}")
    # After "--" every word is a database's name, never an option, whatever it is called
    # (a database named "--result-file=x" is a name).
    argv += ["--databases", "--", *plan.databases]
    env = {k: v for k, v in os.environ.items() if k != "MYSQL_PWD"}
    if endpoint.password_env:
        env["MYSQL_PWD"] = os.environ.get(endpoint.password_env, "")
    return argv, env


def partial_name(name: str) -> str:
    """The name a dump has while it is written, where the file system cannot keep it
    nameless."""
    return f".{name}.partial"


def run_dump(endpoint: Endpoint, plan: DumpPlan, dest: Path,
             progress: Callable[[int], None]) -> int:
    """The dump into `dest` (zstd, made 0600); its size in bytes. `dest` appears only once
    the dump is whole: a failed or stopped dump, or a knoblab killed during it, leaves no
    file, and the dump program ends with knoblab. A file that cannot be written (a full
    disk) is a UserError."""
    import zstandard

    argv, env = dump_command(dump_program(), endpoint, plan)
    done = 0
    with tempfile.TemporaryFile() as errors:
        process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=errors, env=env,
                                   stdin=subprocess.DEVNULL, preexec_fn=ends_with_parent())
        fd, partial = -1, None
        try:
            assert process.stdout is not None
            fd, partial = _nameless(dest)
            with os.fdopen(fd, "wb", closefd=False) as raw, \
                    zstandard.ZstdCompressor(level=3).stream_writer(raw, closefd=False) \
                    as packed:
                while chunk := process.stdout.read(_CHUNK):
                    packed.write(chunk)
                    done += len(chunk)
                    progress(done)
            code = process.wait()
            if code == 0:
                _name(fd, partial, dest)
        except BaseException as exc:
            process.kill()
            process.wait()
            if partial is not None:
                with contextlib.suppress(OSError):
                    partial.unlink()
            if isinstance(exc, OSError):
                raise UserError(f"cannot write the dump to {dest}: {exc.strerror or exc}; "
                                "no dump was kept") from None
            raise
        finally:
            if fd >= 0:
                os.close(fd)
        if code != 0:
            if partial is not None:
                with contextlib.suppress(OSError):
                    partial.unlink()
            errors.seek(0)
            said = [line for line in errors.read().decode("utf-8", "replace").splitlines()
                    if line.strip()]
            raise UserError(f"{Path(argv[0]).name} failed (exit code {code}): "
                            f"{said[-1] if said else 'no message'}; no dump was kept")
    return dest.stat().st_size


def ends_with_parent() -> Callable[[], None] | None:
    """For the child, before it runs: killed when knoblab dies (Linux's parent-death signal),
    so a kill -9 of knoblab never leaves the dump running. None where there is no prctl."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        prctl = libc.prctl
    except (OSError, AttributeError):
        return None
    parent = os.getpid()

    def arm() -> None:
        prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
        if os.getppid() != parent:  # knoblab died before the signal was asked for
            os._exit(1)
    return arm


def _nameless(dest: Path) -> tuple[int, Path | None]:
    """A file for `dest` that has no name until `_name` gives it one (O_TMPFILE), so that a
    knoblab killed while it is written leaves nothing; on a file system without that, a
    hidden partial name (the next capture in the folder removes it)."""
    with contextlib.suppress(AttributeError, OSError):
        return os.open(dest.parent, os.O_TMPFILE | os.O_WRONLY, 0o600), None
    partial = dest.with_name(partial_name(dest.name))
    return os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), partial


def _name(fd: int, partial: Path | None, dest: Path) -> None:
    os.fsync(fd)
    if partial is not None:
        partial.replace(dest)
        return
    with contextlib.suppress(FileNotFoundError):
        dest.unlink()
    # linkat(AT_SYMLINK_FOLLOW), which os.link uses only when given a folder's descriptor
    folder = os.open(dest.parent, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.link(f"/proc/self/fd/{fd}", dest.name, dst_dir_fd=folder, follow_symlinks=True)
    finally:
        os.close(folder)


def disk_check(plan: DumpPlan, out: Path) -> str:
    """How much room the dump needs, as a sentence; UserError when `out`'s disk lacks it."""
    existing = out
    while not existing.exists():
        existing = existing.parent
    free = shutil.disk_usage(existing).free
    needed = plan.text_bytes  # the text, before zstd shrinks it: what it needs at most
    line = (f"the dump needs at most {format_size(needed)} on the disk under {out} "
            f"({format_size(free)} free), from the tables' sizes")
    if needed > free:
        raise UserError(f"{line}: not enough room; free some space or give --out on another "
                        "disk, or take less with --data schema or --data sample=N")
    return line
