"""A dataset of the user's own: a mariadb-dump / mysqldump file, loaded once into a template.

`[dataset] dump = "FILE"` (plain SQL, .gz or .zst, told apart by their first bytes). The
decompressed dump is fed in chunks to the `mariadb` command-line client (the C client: far
faster than running its statements one by one from Python) over the build sandbox's private
socket, as root; the progress bar counts bytes of the dump file. The client stops at the
first failing statement and names its line: that line, the file and the server's message
become one UserError, and the half-built template is removed by its builder.

A dump made with --databases says which database it creates (CREATE DATABASE / USE at its
head); one made without loads into `[dataset] database`. The data's key is the dump's identity
(path, size, mtime, first and last MiB) and the database: an edited dump is a new template,
the same dump is loaded once.
"""

from __future__ import annotations

import contextlib
import gzip
import hashlib
import json
import re
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import pymysql

from knoblab import section
from knoblab.connection import ACCESS_DENIED, SYSTEM_DATABASES, Progress, Server
from knoblab.errors import UserError
from knoblab.units import format_size

KEYS = frozenset({"dump", "database"})
GZIP_MAGIC = b"\x1f\x8b"
ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
CHUNK = 1 << 20  # bytes fed to the client at a time: one progress step
EDGE = 1 << 20  # the first and last MiB go into the dump's identity
HEAD_BYTES = 16 << 20  # how far into the (decompressed) dump its database is looked for
# On disk, a loaded dump takes up to about twice its text (InnoDB pages, indexes, the redo
# log's share): 2.5 times is the generous estimate the disk is checked against.
DISK_FACTOR = 2.5
# When the compressed file does not say how large its text is (a .gz of 4 GiB or more: its
# size field counts modulo 2^32; a .zst written from a pipe), SQL text is assumed to
# compress this well — a dump's repetitive INSERTs do better than most text.
ASSUMED_RATIO = 8
MAX_PACKET = 1 << 30  # a dump's longest statement (a row of big BLOBs) must fit in a packet

_NAME = r"(`(?:[^`]|``)+`|[\w$]+)"
_DATABASE = re.compile(
    r"(?:CREATE\s+(?:DATABASE|SCHEMA)\s+(?:/\*!\d+\s*IF\s+NOT\s+EXISTS\s*\*/\s*|"
    r"IF\s+NOT\s+EXISTS\s+)?|USE\s+)" + _NAME, re.IGNORECASE)
# A statement that needs a database selected (a table, a view, a routine, rows), as opposed
# to users, settings and databases, which a dump may carry before its first USE.
_NEEDS_DATABASE = re.compile(
    r"(?:/\*!\d+\s*)?(?:(?:CREATE|DROP|ALTER)\s+(?!(?:OR\s+REPLACE\s+)?"
    r"(?:DATABASE|SCHEMA|USER|ROLE)\b)|INSERT\b|REPLACE\b|LOCK\s+TABLES\b|DELIMITER\b)",
    re.IGNORECASE)
# Files of a database folder that are not its data (definitions, triggers): never evicted.
_NOT_DATA = frozenset({".frm", ".opt", ".trg", ".trn", ".par"})
# What loading a dump did beyond loading it (DEFINER accounts made), by dump key: said once,
# with the data's line, by the run that built the template.
_NOTES: dict[str, str] = {}
_CLIENT_ERROR = re.compile(r"ERROR (\d+)(?: \((\w+)\))? at line (\d+)(?: in file: '.*?')?: "
                           r"(.*)")


def _unquoted(name: str) -> str:
    return name[1:-1].replace("``", "`") if name.startswith("`") else name


def quoted(name: str) -> str:
    """An identifier in backticks, any backtick in it doubled: safe to put in SQL."""
    return "`" + name.replace("`", "``") + "`"


# --- the file -------------------------------------------------------------------------------


def _compression(path: Path) -> str:
    with open(path, "rb") as raw:
        magic = raw.read(4)
    if magic.startswith(GZIP_MAGIC):
        return "gzip"
    if magic == ZSTD_MAGIC:
        return "zstd"
    return "none"


@contextlib.contextmanager
def _text_of(path: Path, compression: str) -> Iterator[tuple[Any, IO[bytes]]]:
    """(the decompressed stream, the raw file): the raw file's position is the progress."""
    with open(path, "rb") as raw:
        if compression == "gzip":
            with gzip.GzipFile(fileobj=raw, mode="rb") as text:
                yield text, raw
        elif compression == "zstd":
            import zstandard  # only for .zst dumps

            with zstandard.ZstdDecompressor().stream_reader(raw, read_across_frames=True) \
                    as stream:
                yield stream, raw
        else:
            yield raw, raw


def _text_bytes(path: Path, compression: str, size: int) -> int:
    """The size of the dump's text, exactly when the file says it, else a generous guess."""
    if compression == "gzip":
        with open(path, "rb") as raw:
            raw.seek(max(size - 4, 0))
            stored = int.from_bytes(raw.read(4), "little")  # ISIZE: the text's size mod 2^32
        # Deflate grows text that does not compress by a fraction of a percent (and a tiny
        # file by its header): text smaller than that below the file's size has wrapped round.
        lifted = stored
        while lifted < size - size // 500 - 1024:
            lifted += 1 << 32
        # A file so large that its text may pass 4 GiB: the field may have wrapped round.
        return max(lifted, size * ASSUMED_RATIO) if size * 16 >= 1 << 32 else lifted
    if compression == "zstd":
        import zstandard

        with open(path, "rb") as raw:
            header = raw.read(18)  # a frame header is at most 18 bytes
        with contextlib.suppress(zstandard.ZstdError):
            found = zstandard.frame_content_size(header)
            if found >= 0:
                return max(int(found), size)
        return size * ASSUMED_RATIO
    return size


def _head_database(path: Path, compression: str) -> str | None:
    """The database the dump's head creates or uses (CREATE DATABASE / USE, as --databases
    writes them) before any table; None when a table or rows come first, or none is named."""
    try:
        with _text_of(path, compression) as (text, _):
            head = text.read(HEAD_BYTES)
    except (OSError, EOFError, ValueError) as exc:
        raise UserError(f"[dataset] dump = {str(path)!r}: cannot read it as a "
                        f"{'SQL' if compression == 'none' else compression} dump: {exc}") \
            from None
    except Exception as exc:  # zstandard.ZstdError: a damaged or truncated .zst
        raise UserError(f"[dataset] dump = {str(path)!r}: cannot read it as a zstd dump: "
                        f"{exc}") from None
    for line in head.decode("utf-8", errors="replace").splitlines():
        line = line.strip()
        if not line or line.startswith(("--", "#")):
            continue
        found = _DATABASE.match(line)
        if found:
            return _unquoted(found.group(1))
        if _NEEDS_DATABASE.match(line):
            return None
    return None


def _edges(path: Path, size: int) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as raw:
        digest.update(raw.read(EDGE))
        if size > EDGE:
            raw.seek(max(size - EDGE, EDGE))
            digest.update(raw.read(EDGE))
    return digest.hexdigest()


# --- the dataset ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Dump:
    """A dump file and the database a workload runs in after it is loaded."""

    path: Path  # resolved
    database: str | None  # [dataset] database: where a dump without one loads, or which
    named: str | None  # the database the dump's own head creates or uses
    compression: str  # "none", "gzip" or "zstd"
    size: int
    mtime_ns: int
    edges: str  # a hash of the first and last MiB

    @classmethod
    def from_spec(cls, dataset: dict[str, Any], base_dir: Path | None) -> Dump:
        section.check_keys("[dataset] (with dump)", dataset, KEYS)
        name = section.text(dataset, "dump", "dataset", "")
        if not name.strip():
            raise UserError("[dataset] dump = \"\": give the dump file (mariadb-dump or "
                            "mysqldump output: .sql, .sql.gz or .sql.zst)")
        path = (base_dir or Path.cwd()) / name
        try:
            path = path.resolve()
            stat = path.stat()
            if not path.is_file():
                raise UserError(f"[dataset] dump = {name!r}: {path} is not a file")
            compression = _compression(path)
            edges = _edges(path, stat.st_size)
        except (OSError, ValueError) as exc:  # ValueError: a NUL in the name
            raise UserError(f"[dataset] dump = {name!r}: cannot read {path}: "
                            f"{getattr(exc, 'strerror', None) or 'not a file name'}") from None
        database = dataset.get("database")
        if database is not None:
            _check_name(database)
        named = _head_database(path, compression)
        if named is None and database is None:
            raise UserError(f"[dataset] dump = {name!r}: the dump names no database (it was "
                            "made without --databases); give the one to load it into, e.g. "
                            "[dataset] database = \"shop\"")
        return cls(path, database, named, compression, stat.st_size, stat.st_mtime_ns, edges)

    @property
    def workload_database(self) -> str:
        """The database the workload's connections use."""
        found = self.database or self.named
        assert found is not None, "from_spec refuses a dump with neither"
        return found

    @property
    def key(self) -> str:
        text = json.dumps({"v": 1, "path": str(self.path), "size": self.size,
                           "mtime_ns": self.mtime_ns, "edges": self.edges,
                           "database": self.database}, sort_keys=True)
        return "dump-" + hashlib.sha256(text.encode()).hexdigest()[:12]

    def text_bytes(self) -> int:
        return _text_bytes(self.path, self.compression, self.size)

    def estimated_bytes(self) -> int:
        return int(self.text_bytes() * DISK_FACTOR)

    def label(self, then: str = "") -> str:
        """The dump in words, `then` what follows its load; what its load did, when this
        process loaded it."""
        text = (f"the dump {self.path} ({format_size(self.size)}B"
                f"{'' if self.compression == 'none' else ', ' + self.compression}), "
                f"database {self.workload_database}{then}")
        note = _NOTES.get(self.key)
        return f"{text}; {note}" if note else text

    def check_running_server(self, where: str) -> None:
        """A dump is loaded into sandboxes only: on a running server it would land among the
        server's own data."""
        raise UserError(f"[dataset] dump: a dump is loaded into sandbox servers only, and "
                        f"{where} is a running server; load it there yourself and leave "
                        "out [dataset], or give [server] binary to measure sandboxes")

    def files(self, datadir: Path) -> list[Path]:
        """The data files of the workload's database (what the cold-cache mode evicts)."""
        folder = datadir / self.workload_database
        if not folder.is_dir():
            return []
        return sorted(p for p in folder.iterdir()
                      if p.is_file() and p.suffix.lower() not in _NOT_DATA)

    def describe(self, datadir: Path | None) -> dict[str, object]:
        folder = datadir / self.workload_database if datadir else None
        on_disk = sum(p.stat().st_size for p in folder.rglob("*") if p.is_file()) \
            if folder is not None and folder.is_dir() else None
        return {"kind": "dump", "file": str(self.path), "file_bytes": self.size,
                "compression": self.compression, "database": self.workload_database,
                "rows": None, "bytes": on_disk}

    # -- loading ----------------------------------------------------------------------------

    def build(self, server: Server, progress: Progress | None = None) -> None:
        """Load the dump (into a template being built); what it did is said by label()."""
        note = self.load(server, progress)
        if note:
            _NOTES[self.key] = note

    def load(self, server: Server, progress: Progress | None = None) -> str | None:
        """Load the dump into the server; what was done for its DEFINERs (one line), if
        anything. UserError naming the dump's line when a statement fails."""
        client = _client()
        if server.socket is None:
            raise UserError("a dump is loaded into sandbox servers only")
        conn = server.connect()
        try:
            with conn.cursor() as cur:
                before = _databases(cur)
                # The server's default (16M) refuses a dump's longer rows; this server
                # is the template's build server alone, and the setting is not kept.
                cur.execute("SET GLOBAL max_allowed_packet = %s", (MAX_PACKET,))
                if self.named is None:
                    cur.execute(f"CREATE DATABASE IF NOT EXISTS {quoted(self.workload_database)}")
        finally:
            conn.close()
        self._feed(client, server.socket, progress)
        conn = self._root_after(server)
        try:
            with conn.cursor() as cur:
                made = _databases(cur) - before
                if self.database is not None and self.named is None:
                    made.add(self.database)
                if self.workload_database not in _databases(cur):
                    raise UserError(f"[dataset] database = {self.workload_database!r}: the dump "
                                    f"{self.path} does not create it; it creates "
                                    f"{', '.join(sorted(made)) or 'no database'}")
                return _create_definers(cur, sorted(made))
        finally:
            conn.close()

    def _root_after(self, server: Server) -> Any:
        """A connection as root once the dump is in; UserError when the dump changed root (a
        dump of the mysql database itself, as --all-databases takes it)."""
        try:
            return server.connect(connect_timeout=10)
        except pymysql.MySQLError as exc:
            if exc.args and exc.args[0] in ACCESS_DENIED:
                raise UserError(f"the dump {self.path} changed root@localhost, which knoblab "
                                f"logs in as ({exc.args[-1]}): it holds the server's own mysql "
                                "database (--all-databases takes it); dump your databases "
                                "with --databases, and users with --system=users") from None
            raise

    def _feed(self, client: str, socket: Path, progress: Progress | None) -> None:
        # No option files (a user's [client] host or password must not redirect the load);
        # a dump's own SET NAMES decides its character set, and text without one is taken
        # as UTF-8 (what Debian's client configuration, skipped here, would have said).
        argv = [client, "--no-defaults", f"--socket={socket}", "--user=root",
                f"--max-allowed-packet={MAX_PACKET}", "--default-character-set=utf8mb4"]
        if self.named is None:
            argv.append(f"--database={self.workload_database}")
        with tempfile.TemporaryFile() as errors:
            process = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                                       stderr=errors)
            assert process.stdin is not None
            try:
                with _text_of(self.path, self.compression) as (text, raw):
                    while chunk := text.read(CHUNK):
                        try:
                            process.stdin.write(chunk)
                        except BrokenPipeError:
                            break  # the client stopped at an error: it says which below
                        if progress:
                            progress(raw.tell(), self.size)
                with contextlib.suppress(BrokenPipeError):
                    process.stdin.close()
                code = process.wait()
            except Exception as exc:  # a damaged .gz or .zst, found part way through
                _end(process)
                raise UserError(f"the dump {self.path} cannot be read to its end: {exc}") \
                    from None
            except BaseException:  # Ctrl-C: the client goes with the half-built template
                _end(process)
                raise
            if code != 0:
                errors.seek(0)
                raise UserError(self._failure(errors.read().decode("utf-8", errors="replace")))

    def _failure(self, said: str) -> str:
        lines = [line.strip() for line in said.splitlines() if line.strip()]
        for line in lines:
            found = _CLIENT_ERROR.search(line)
            if found:
                code, state, number, message = found.groups()
                return (f"the dump {self.path} failed at line {number}: ERROR {code}"
                        f"{f' ({state})' if state else ''}: {message}")
        return f"loading the dump {self.path} failed: {' | '.join(lines[-3:]) or 'no message'}"


def _check_name(database: object) -> None:
    if not isinstance(database, str) or not database or len(database) > 64 or \
            "\0" in database or database != database.rstrip():
        raise UserError(f"[dataset] database = {database!r}: give a database name (1 to 64 "
                        "characters, not ending in a blank)")
    if database.lower() in SYSTEM_DATABASES:
        raise UserError(f"[dataset] database = {database!r}: that is the server's own "
                        "database; name another")


def _client() -> str:
    found = shutil.which("mariadb") or shutil.which("mysql")
    if found is None:
        raise UserError("loading a dump needs the mariadb (or mysql) command-line client; "
                        "install it (Debian: apt install mariadb-client)")
    return found


def _databases(cur: Any) -> set[str]:
    cur.execute("SELECT SCHEMA_NAME FROM information_schema.SCHEMATA")
    return {str(row[0]) for row in cur.fetchall()} - SYSTEM_DATABASES


def _create_definers(cur: Any, databases: list[str]) -> str | None:
    """Accounts named as DEFINER of the dump's views, routines, triggers and events that the
    server lacks, created locked (no login, no password) with all privileges on the dump's
    databases, so that those objects run; the sentence saying so, or None."""
    cur.execute(
        "SELECT DEFINER FROM information_schema.VIEWS UNION "
        "SELECT DEFINER FROM information_schema.ROUTINES UNION "
        "SELECT DEFINER FROM information_schema.TRIGGERS UNION "
        "SELECT DEFINER FROM information_schema.EVENTS")
    definers = sorted({str(row[0]) for row in cur.fetchall() if "@" in str(row[0] or "")})
    cur.execute("SELECT User, Host FROM mysql.user")
    existing = {(str(user), str(host).lower()) for user, host in cur.fetchall()}
    missing = []
    for definer in definers:
        user, host = definer.rsplit("@", 1)
        if (user, host.lower()) in existing:
            continue
        # Harmless: a sandbox listens only on its private socket, and the account is
        # locked with no password; nobody logs in as it, the server only runs as it.
        cur.execute("CREATE USER %s@%s ACCOUNT LOCK", (user, host))
        for database in databases:
            cur.execute(f"GRANT ALL PRIVILEGES ON {quoted(database)}.* TO %s@%s",
                        (user, host))
        missing.append(f"'{user}'@'{host}'")
    if not missing:
        return None
    on = ", ".join(databases) or "no database"
    return (f"the dump names DEFINER accounts the server lacked: knoblab created "
            f"{', '.join(missing)} (locked, no password) with all privileges on {on}, so "
            "that its views, routines and triggers run")


def _end(process: subprocess.Popen[bytes]) -> None:
    process.kill()
    process.wait()
