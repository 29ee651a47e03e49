"""A dataset of the user's own: a mariadb-dump / mysqldump file, loaded once into a template.

`[dataset] dump = "FILE"` (plain SQL, .gz or .zst, told apart by their first bytes). The
decompressed dump is fed in chunks to the `mariadb` command-line client (the C client: far
faster than running its statements one by one from Python) over the build sandbox's private
socket; the progress bar counts bytes of the dump file. The client stops at the first failing
statement and names its line: that line, the statement, the file and the server's message
become one UserError, and the half-built template is removed by its builder.

A dump is untrusted text. The client reads it as SQL only (binary mode: no client commands
such as system or source; sandboxed; no LOAD DATA LOCAL), and it runs as knoblab's data account
(DATA_USER), which holds all privileges on the dump's own databases and nothing else: no
server settings, files, plugins or accounts. Those databases are granted as the text streams
to the client, before the CREATE DATABASE or USE that names them arrives; the server's own
databases are refused. The DEFINER of each view, routine, trigger and event is made
CURRENT_USER (the data account) on its way, so that they load and run. A replay connects as
the same account.

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
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, ClassVar

import pymysql

from knoblab import section
from knoblab.connection import DATABASE, SYSTEM_DATABASES, Progress, Server
from knoblab.datasets.base import Dataset
from knoblab.errors import UserError
from knoblab.keys import Key, Keys
from knoblab.units import format_size

KEYS = Keys(
    Key("dump", "Your own data: a mariadb-dump (or mysqldump) file beside the spec, plain, "
        ".gz or .zst; loaded once into a template that every sandbox starts from."),
    Key("database", "The database a dump made without --databases is loaded into (one made "
        "with it names its own)."),
)
GZIP_MAGIC = b"\x1f\x8b"
ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
# Compressions knoblab does not read, known by their first bytes: said as such, not as SQL
# that names no database.
OTHER_MAGIC = ((b"\xfd7zXZ\x00", "xz"), (b"BZh", "bzip2"), (b"PK\x03\x04", "zip"),
               (b"\x04\x22\x4d\x18", "lz4"), (b"7z\xbc\xaf\x27\x1c", "7z"))
# The account a dump is loaded and a log replayed as: all privileges on the dump's databases,
# nothing else. No password: a sandbox listens only on its private socket.
DATA_USER = "knoblab_data"
DATA_HOST = "localhost"
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
# A line longer than this is passed to the client in parts, without waiting for its end.
HOLD = 16 << 20
STATEMENT_SHOWN = 60  # characters of a failing statement in its message

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
# What loading a dump did beyond loading it (the DEFINERs it named), by dump key: said once,
# with the data's line, by the run that built the template.
_NOTES: dict[str, str] = {}
_CLIENT_ERROR = re.compile(r"ERROR (\d+)(?: \((\w+)\))? at line (\d+)(?: in file: '.*?')?: "
                           r"(.*)")
# The client's own refusal (a client command such as \! or \r in binary mode).
_CLIENT_REFUSAL = re.compile(r"ERROR at line (\d+)(?: in file: '.*?')?: (.*)")
# The server's refusals of what the data account may not do (a database, a file, a table or
# a privilege it lacks; LOAD DATA LOCAL).
_NOT_ALLOWED = frozenset({"1044", "1045", "1142", "1143", "1227", "1370", "1410", "4166"})
# The first line of a dump: a comment or an SQL statement's first word.
_SQL_START = re.compile(
    r"(?:--|#|/\*|(?:ALTER|ANALYZE|BEGIN|CALL|CHANGE|COMMIT|CREATE|DELETE|DELIMITER|DO|DROP|"
    r"FLUSH|GRANT|INSERT|LOCK|RENAME|REPLACE|REVOKE|ROLLBACK|SAVEPOINT|SELECT|SET|START|"
    r"TRUNCATE|UNLOCK|UPDATE|USE|WITH|XA)\b)", re.IGNORECASE)
_NOT_RUN = ("a command of the mariadb client, which knoblab does not run in a dump (it loads "
            "its text as SQL only); remove the line from the dump")
# The mariadb client's own commands, by name: in binary mode they reach the server as SQL,
# which refuses them as a syntax error.
_CLIENT_COMMAND = re.compile(
    r"(?:system|source|connect|tee|notee|pager|nopager|edit|ego|print|prompt|rehash|status|"
    r"charset|warnings|nowarning|clear|exit|quit|go)\b", re.IGNORECASE)
_SNIFF = 1 << 16  # bytes of the text looked at for NUL bytes (SQL text has none)

# One part of an account in a DEFINER clause: quoted any way, or bare.
_ACCOUNT_PART = (rb"(?:`(?:[^`\n]|``)*`|'(?:[^'\\\n]|\\.|'')*'|\"(?:[^\"\\\n]|\\.|\"\")*\"|"
                 rb"[\w$.%-]+)")
# A DEFINER clause in the shapes dumps write it: after CREATE, OR REPLACE, ALTER or
# ALGORITHM=..., or at the head of an executable comment (/*!50013 DEFINER=... */).
_DEFINER = re.compile(
    rb"(?P<lead>(?:\bCREATE|\bREPLACE|\bALTER|\bALGORITHM\s*=\s*\w+|/\*M?!\d*)\s*)"
    rb"DEFINER\s*=\s*(?P<user>" + _ACCOUNT_PART + rb")\s*@\s*(?P<host>" + _ACCOUNT_PART + rb")",
    re.IGNORECASE)
# A line of rows (INSERT, REPLACE, or a value list's continuation): its text is data, never
# rewritten.
_ROW_LINE = re.compile(rb"[ \t]*(?:(?:INSERT|REPLACE)\b|\()", re.IGNORECASE)
# A statement that names a database to create, drop, alter or use, at the head of a line;
# looked for after each newline (a literal the regex engine skips to quickly).
_DATABASE_STATEMENT = (
    rb"[ \t]*(?:/\*!\d+\s*)?(?:(?:CREATE(?:\s+OR\s+REPLACE)?|DROP|ALTER)\s+(?:DATABASE|SCHEMA)"
    rb"\s+(?:/\*!\d+\s*)?(?:IF\s+(?:NOT\s+)?EXISTS\s*)?(?:\*/\s*)?|USE\s+)"
    rb"(?P<name>`(?:[^`\n]|``)+`|[\w$]+)")
_DATABASE_AT = re.compile(_DATABASE_STATEMENT, re.IGNORECASE)
_DATABASE_AFTER = re.compile(rb"\n" + _DATABASE_STATEMENT, re.IGNORECASE)


def _unquoted(name: str) -> str:
    return name[1:-1].replace("``", "`") if name.startswith("`") else name


def quoted(name: str) -> str:
    """An identifier in backticks, any backtick in it doubled: safe to put in SQL."""
    return "`" + name.replace("`", "``") + "`"


# --- the file -------------------------------------------------------------------------------


def _compression(path: Path) -> str:
    """"gzip", "zstd" or "none" (text); the name of another compression, which is refused."""
    with open(path, "rb") as raw:
        magic = raw.read(8)
    if magic.startswith(GZIP_MAGIC):
        return "gzip"
    if magic.startswith(ZSTD_MAGIC) or _skippable(magic):
        return "zstd"
    return next((name for start, name in OTHER_MAGIC if magic.startswith(start)), "none")


def _skippable(magic: bytes) -> bool:
    """A zstd skippable frame (pzstd begins its files with one)."""
    return len(magic) >= 4 and 0x184D2A50 <= int.from_bytes(magic[:4], "little") <= 0x184D2A5F


def _zstd_frames(path: Path) -> tuple[str | None, int | None]:
    """What is wrong with a .zst's frames, found by walking their block headers (a truncated
    frame decompresses without complaint, to its cut), or None; and the size of its text
    when every frame says its own."""
    import zstandard

    size = path.stat().st_size
    at = 0
    text: int | None = 0
    with open(path, "rb") as raw:
        while at < size:
            raw.seek(at)
            head = raw.read(18)  # a frame header is at most 18 bytes
            if _skippable(head):  # its length follows its magic
                at += 8 + int.from_bytes(head[4:8], "little")
                continue
            if head[:4] != ZSTD_MAGIC:
                return f"damaged: byte {at} does not begin a zstd frame", None
            try:
                header = zstandard.frame_header_size(head)
                checksum = zstandard.get_frame_parameters(head).has_checksum
                found = zstandard.frame_content_size(head)
            except zstandard.ZstdError:
                return ("truncated" if at + len(head) >= size else
                        f"damaged: the zstd frame at byte {at} has no valid header"), None
            text = text + found if text is not None and found >= 0 else None
            at += header
            last = False
            while not last:
                raw.seek(at)
                block = raw.read(3)
                if len(block) < 3:
                    return "truncated", None
                value = int.from_bytes(block, "little")
                last, kind, length = bool(value & 1), (value >> 1) & 3, value >> 3
                if kind == 3:
                    return f"damaged: a zstd block at byte {at} has a reserved type", None
                at += 3 + (1 if kind == 1 else length)  # an RLE block holds one byte
            at += 4 if checksum else 0
    return ("truncated", None) if at > size else (None, text)


def _unreadable(exc: BaseException) -> str:
    """Why decompressing a dump failed part way, in words."""
    if isinstance(exc, EOFError):  # gzip's: the stream ends before its end-of-stream marker
        return f"truncated ({exc})"
    return f"damaged ({exc})"


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
        found = _zstd_frames(path)[1]  # every frame's own size, summed
        return max(found, size) if found is not None else size * ASSUMED_RATIO
    return size


def _head_database(path: Path, compression: str) -> str | None:
    """The database the dump's head creates or uses (CREATE DATABASE / USE, as --databases
    writes them) before any table; None when a table or rows come first, or none is named.
    UserError, saying what is wrong, for a file that is not a whole SQL dump."""
    what = f"[dataset] dump = {str(path)!r}"
    if compression not in ("none", "gzip", "zstd"):
        raise UserError(f"{what}: the file is {compression}-compressed, which knoblab does not "
                        "read; decompress it, or compress it with gzip or zstd")
    damage = _zstd_frames(path)[0] if compression == "zstd" else None
    if damage:
        raise UserError(f"{what}: the file cannot be read to its end: {damage}; make the dump "
                        "again, or copy it whole")
    try:
        with _text_of(path, compression) as (text, _):
            head = text.read(HEAD_BYTES)
    except (OSError, EOFError, ValueError) as exc:
        raise UserError(f"{what}: the file cannot be read to its end: {_unreadable(exc)}; "
                        "make the dump again, or copy it whole") from None
    except Exception as exc:  # zstandard.ZstdError: a damaged .zst
        raise UserError(f"{what}: the file cannot be read to its end: {_unreadable(exc)}") \
            from None
    if not head.strip():
        raise UserError(f"{what}: the file is empty" + ("" if compression == "none" else
                        f" once decompressed ({compression})") + "; give a dump that holds "
                        "the data (mariadb-dump or mysqldump output)")
    lines = head.removeprefix(b"\xef\xbb\xbf").decode("utf-8", errors="replace").splitlines()
    first = next((line.strip() for line in lines if line.strip()), "")
    if not _SQL_START.match(first) and b"\0" in head[:_SNIFF]:
        # SQL text has no NUL byte (mariadb-dump writes \0 for one): binary data.
        raise UserError(f"{what}: the file is not SQL text (it holds NUL bytes: binary data, "
                        "or a compression knoblab does not read); give mariadb-dump or "
                        "mysqldump output: .sql, .sql.gz or .sql.zst")
    if not _SQL_START.match(first):
        shown = first if len(first) <= 40 else first[:37] + "..."
        raise UserError(f"{what}: the file is not an SQL dump: it begins with {shown!r}; give "
                        "mariadb-dump or mysqldump output: .sql, .sql.gz or .sql.zst")
    for line in lines:
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
class Dump(Dataset):
    """A dump file and the database a workload runs in after it is loaded."""

    kind: ClassVar[str] = "dump"
    named_by: ClassVar[str | None] = "dump"

    path: Path  # resolved
    database: str | None  # [dataset] database: where a dump without one loads, or which
    named: str | None  # the database the dump's own head creates or uses
    compression: str  # "none", "gzip" or "zstd"
    size: int
    mtime_ns: int
    edges: str  # a hash of the first and last MiB
    # The file itself, and when it last changed: its change time moves with every write
    # (an edit in place that keeps the size and sets the modification time back included).
    identity: tuple[int, int, int] = (0, 0, 0)  # device, inode, change time (ns)

    @classmethod
    def from_spec(cls, dataset: dict[str, Any], base_dir: Path | None,
                  sweep: Mapping[str, Sequence[Any]] | None = None) -> Dump:
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
        if named is not None and named.lower() in SYSTEM_DATABASES:
            raise UserError(f"[dataset] dump = {name!r}: the dump holds the server's own "
                            f"database {named} (as --all-databases takes it), which knoblab "
                            "does not load; dump your own databases with --databases")
        if named is None and database is None:
            raise UserError(f"[dataset] dump = {name!r}: the dump names no database (it was "
                            "made without --databases); give the one to load it into, e.g. "
                            "[dataset] database = \"shop\"")
        return cls(path, database, named, compression, stat.st_size, stat.st_mtime_ns, edges,
                   (stat.st_dev, stat.st_ino, stat.st_ctime_ns))

    @property
    def workload_database(self) -> str:
        """The database the workload's connections use."""
        found = self.database or self.named
        assert found is not None, "from_spec refuses a dump with neither"
        return found

    @property
    def known_databases(self) -> frozenset[str] | None:
        """Made without --databases, the dump loads into its one database; with it, what it
        creates is known once it is loaded."""
        return frozenset({self.workload_database}) if self.named is None else None

    def pinned(self) -> dict[str, object]:
        """The dump's identity: a run resumed after the dump was edited is refused."""
        return {"dump": {"file": str(self.path), "database": self.workload_database,
                         "key": self.key}}

    @property
    def key(self) -> str:
        # v2: loaded as the data account (a template loaded as root may hold anything).
        text = json.dumps({"v": 2, "path": str(self.path), "size": self.size,
                           "mtime_ns": self.mtime_ns, "edges": self.edges,
                           "identity": list(self.identity),
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

    def files(self, datadir: Path, own: str = DATABASE) -> list[Path]:
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
        return {"kind": self.kind, "file": str(self.path), "file_bytes": self.size,
                "compression": self.compression, "database": self.workload_database,
                "rows": None, "bytes": on_disk}

    # -- loading ----------------------------------------------------------------------------

    def build(self, server: Server, progress: Progress | None = None) -> None:
        """Load the dump (into a template being built); what it did is said by label()."""
        note = self.load(server, progress)
        if note:
            _NOTES[self.key] = note

    def load(self, server: Server, progress: Progress | None = None) -> str | None:
        """Load the dump into the server as the data account; what became of its DEFINERs
        (one line), if it named any. UserError naming the dump's line and statement when one
        fails, or names a database of the server's own."""
        client = _client()
        if server.socket is None:
            raise UserError("a dump is loaded into sandbox servers only")
        conn = server.connect()  # root: the account, its grants, and the checks after
        try:
            with conn.cursor() as cur:
                before = _databases(cur)
                # The server's default (16M) refuses a dump's longer rows; this server
                # is the template's build server alone, and the setting is not kept.
                cur.execute("SET GLOBAL max_allowed_packet = %s", (MAX_PACKET,))
                _create_data_account(cur)
                if self.named is None:
                    cur.execute(f"CREATE DATABASE IF NOT EXISTS {quoted(self.workload_database)}")
                grants = _Grants(cur, self.path)
                grants.grant(self.workload_database)
                definers = self._feed(client, server.socket, progress, grants)
                # The one thing an account may change about itself is its password: put
                # back, so that a replay logs in.
                cur.execute("SET PASSWORD FOR %s@%s = ''", (DATA_USER, DATA_HOST))
                made = _databases(cur) - before
                if self.database is not None and self.named is None:
                    made.add(self.database)
                if self.workload_database not in _databases(cur):
                    raise UserError(f"[dataset] database = {self.workload_database!r}: the dump "
                                    f"{self.path} does not create it; it creates "
                                    f"{', '.join(sorted(made)) or 'no database'}")
        finally:
            conn.close()
        if not definers:
            return None
        on = ", ".join(sorted(grants.granted))
        return (f"the DEFINERs it names ({', '.join(sorted(definers))}) were made knoblab's "
                f"data account ({DATA_USER}, all privileges on {on}), so that its views, "
                "routines, triggers and events run")

    def _feed(self, client: str, socket: Path, progress: Progress | None,
              grants: Callable[[bytes, int, bytes], None]) -> set[str]:
        """The dump's text through the client, as the data account; the DEFINERs it named."""
        # No option files (a user's [client] host or password must not redirect the load);
        # a dump's own SET NAMES decides its character set, and text without one is taken
        # as UTF-8 (what Debian's client configuration, skipped here, would have said).
        # Binary mode reads the text as SQL only (no client commands: system, source,
        # connect); the sandbox refuses what would reach the file system anyway; a lost
        # connection ends the load instead of going on in another session.
        argv = [client, "--no-defaults", f"--socket={socket}", f"--user={DATA_USER}",
                "--binary-mode", "--sandbox", "--local-infile=0", "--skip-reconnect",
                f"--max-allowed-packet={MAX_PACKET}", "--default-character-set=utf8mb4"]
        if self.named is None:
            argv.append(f"--database={self.workload_database}")
        stream = _Stream(grants)
        with tempfile.TemporaryFile() as errors:
            process = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                                       stderr=errors)
            assert process.stdin is not None
            try:
                with _text_of(self.path, self.compression) as (text, raw):
                    while chunk := text.read(CHUNK):
                        if not _send(process.stdin, stream.feed(chunk)):
                            break  # the client stopped at an error: it says which below
                        if progress:
                            progress(raw.tell(), self.size)
                    else:
                        _send(process.stdin, stream.end())
                with contextlib.suppress(BrokenPipeError):
                    process.stdin.close()
                code = process.wait()
            except UserError:  # a database of the server's own, named on its way
                _end(process)
                raise
            except Exception as exc:  # a damaged .gz or .zst, found part way through
                _end(process)
                raise UserError(f"the dump {self.path} cannot be read to its end: "
                                f"{_unreadable(exc)}; nothing of it was kept") from None
            except BaseException:  # Ctrl-C: the client goes with the half-built template
                _end(process)
                raise
            if code != 0:
                errors.seek(0)
                raise UserError(self._failure(errors.read().decode("utf-8", errors="replace")))
        return stream.definers

    def _failure(self, said: str) -> str:
        lines = [line.strip() for line in said.splitlines() if line.strip()]
        statement = _statement(said)
        shown = f" ({statement})" if statement else ""
        for line in lines:
            found = _CLIENT_ERROR.search(line)
            if found:
                code, state, number, message = found.groups()
                why = ""
                if code in _NOT_ALLOWED:
                    why = ("; knoblab loads a dump as an account that holds all privileges on "
                           "the dump's own databases (those it creates or uses) and nothing "
                           "else: no server settings, files, plugins or accounts; remove the "
                           "statement from the dump")
                elif code == "1064" and statement and _CLIENT_COMMAND.match(statement):
                    why = f"; {_NOT_RUN}"
                return (f"the dump {self.path} failed at line {number}{shown}: ERROR {code}"
                        f"{f' ({state})' if state else ''}: {message}{why}")
        for line in lines:
            found = _CLIENT_REFUSAL.search(line)
            if found:
                number, message = found.groups()
                return f"the dump {self.path} failed at line {number}: " \
                    f"{message.rstrip('.')}; {_NOT_RUN}"
        return f"loading the dump {self.path} failed: {' | '.join(lines[-3:]) or 'no message'}"


class _Grants:
    """Grants the data account all privileges on each database the dump names, as its text
    streams to the client (before the statement naming it arrives); refuses the server's
    own databases, naming the line."""

    def __init__(self, cur: Any, path: Path) -> None:
        self.cur = cur
        self.path = path
        self.granted: set[str] = set()

    def __call__(self, name: bytes, line: int, statement: bytes) -> None:
        database = _unquoted(name.decode("utf-8", errors="replace"))
        if database.lower() in SYSTEM_DATABASES:
            shown = _shown(statement.decode("utf-8", errors="replace"))
            raise UserError(f"the dump {self.path} names the server's own database {database} "
                            f"at line {line} ({shown}), which knoblab does not load; dump your "
                            "own databases with --databases")
        self.grant(database)

    def grant(self, database: str) -> None:
        if database in self.granted:
            return
        # The name is a pattern in GRANT: its wildcards (_ %) and escape (\) taken literally.
        pattern = re.sub(r"([\\_%])", r"\\\1", database)
        try:
            self.cur.execute(f"GRANT ALL PRIVILEGES ON {quoted(pattern)}.* TO %s@%s",
                             (DATA_USER, DATA_HOST))
        except pymysql.MySQLError:
            return  # a name the server refuses: so will the statement, naming its line
        self.granted.add(database)


class _Stream:
    """The dump's text on its way to the client, in whole lines: each DEFINER clause of a
    definition made CURRENT_USER (rows are left as they are), and each database named at the
    head of a line granted before the line is passed on."""

    def __init__(self, grants: Callable[[bytes, int, bytes], None]) -> None:
        self.grants = grants
        self.pending = b""  # the last line, not yet whole
        self.line = 1  # the number of the line the next block begins in
        self.inside: bool | None = None  # the next block begins inside a line: a row's?
        self.definers: set[str] = set()

    def feed(self, chunk: bytes) -> bytes:
        text = self.pending + chunk
        cut = text.rfind(b"\n") + 1
        if cut == 0 and len(text) < HOLD:
            self.pending = text
            return b""
        cut = cut or len(text)  # a line longer than HOLD goes on in parts
        self.pending = text[cut:]
        return self._block(text[:cut])

    def end(self) -> bytes:
        text, self.pending = self.pending, b""
        return self._block(text)

    def _block(self, block: bytes) -> bytes:
        first = _DATABASE_AT.match(block) if self.inside is None else None
        for found in ([first] if first else []) + list(_DATABASE_AFTER.finditer(block)):
            begins = found.start() + (found.group().startswith(b"\n"))
            ends = block.find(b"\n", begins)
            self.grants(found.group("name"), self.line + block.count(b"\n", 0, begins),
                        block[begins:ends if ends >= 0 else len(block)])
        out = block
        if b"definer" in block.lower():  # rare outside definitions: the regex only then
            parts, done = [], 0
            for found in _DEFINER.finditer(block):
                begins = block.rfind(b"\n", 0, found.start()) + 1
                row = self.inside if begins == 0 and self.inside is not None else \
                    bool(_ROW_LINE.match(block, begins))
                if row:
                    continue
                self.definers.add(f"'{_account_part(found.group('user'))}'@"
                                  f"'{_account_part(found.group('host'))}'")
                parts += [block[done:found.start()], found.group("lead"),
                          b"DEFINER=CURRENT_USER"]
                done = found.end()
            out = b"".join([*parts, block[done:]])
        self.line += block.count(b"\n")
        if block.endswith(b"\n") or not block:
            self.inside = None
        else:
            begins = block.rfind(b"\n") + 1
            if begins or self.inside is None:
                self.inside = bool(_ROW_LINE.match(block, begins))
        return out


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


def _create_data_account(cur: Any) -> None:
    cur.execute("CREATE USER IF NOT EXISTS %s@%s", (DATA_USER, DATA_HOST))


def data_account(server: Server) -> str:
    """The data account's name, made on the server when it lacks it (a server without a dump
    has it with no privileges at all): what a replay connects as."""
    conn = server.connect()
    try:
        with conn.cursor() as cur:
            _create_data_account(cur)
    finally:
        conn.close()
    return DATA_USER


def _account_part(part: bytes) -> str:
    text = part.decode("utf-8", errors="replace")
    if text[:1] in ("`", "'", '"') and len(text) >= 2:
        quote = text[0]
        text = text[1:-1].replace(quote * 2, quote)
    return text


def _statement(said: str) -> str | None:
    """The failing statement the client echoes between dashed lines, shortened."""
    found = re.search(r"^-{10,}\n(.*?)\n-{10,}$", said, re.MULTILINE | re.DOTALL)
    return _shown(found.group(1)) if found else None


def _shown(statement: str) -> str:
    text = " ".join(statement.split())
    return text if len(text) <= STATEMENT_SHOWN else text[:STATEMENT_SHOWN - 3] + "..."


def _send(pipe: IO[bytes], text: bytes) -> bool:
    """Whether the client took the text (False: it stopped, at an error)."""
    try:
        pipe.write(text)
    except BrokenPipeError:
        return False
    return True


def _end(process: subprocess.Popen[bytes]) -> None:
    process.kill()
    process.wait()
