"""A captured log made ready to replay: its statements split by connection into files of their
own, each statement tagged with its class (fingerprint), and what the log holds summarised.

Reading a log and fingerprinting its statements costs far more than replaying them, and a
replay runs many times: the plan is made once per log and kept under the knoblab home (0700:
the statements hold the user's data). A log is known by its path, size, inode, modification
and change times (the change time moves with every write, and no tool sets it back) and a hash
of its first and last MiB: an edit in place is a new plan, and knowing the log costs a few
milliseconds whatever its size (a hash of a whole 1 GB log takes 0.8 s from the page cache,
1.5 s from disk: paid by every run). A log that changes while it is read is refused. The log is
streamed and the sessions' records are written out in batches, so memory stays bounded
whatever the log's size; a replay streams each session's file in turn.

A session is one captured connection, from its first statement to its Quit (a connection id
seen again after a Quit or a Connect is a new session). Statements a replay must not run —
those that change the server's global state, its accounts or its logs (`knoblab.
admin`) — are left out and counted, as are the commands that are not statements. A database
change becomes a `USE` record, and a statement that reads the clock (NOW(), CURDATE(), ...) is
preceded by the captured `SET timestamp`, so that it sees the time it saw when captured.

A statement the application prepared (an Execute in the general log: its text with its values
in place) is replayed as a prepared statement: its form (`fingerprint.prepared_form`: its
numbers and strings as placeholders) is a PREPARE record the first time the session runs it,
and each execution an EXECUTE record with the form's number in the session, the text (for a
replay as text) and the values. Its strings are read as the session's sql_mode reads them: a
`SET sql_mode` the session ran with NO_BACKSLASH_ESCAPES makes a backslash a character; an
execution whose values depend on that mode says which it was read in, and the replay runs it
as text when its connection is in the other (the server's own sql_mode said so). The log's
Prepare and Close stmt lines are not needed: a pooled connection prepared its statements before
the window, where no log saw them.

Whether a class only reads is decided conservatively, from its text: every statement in it
begins as a read does (SELECT, SHOW, SET of a variable, ...), names no writing word (INTO,
FOR UPDATE, CALL, ...) and calls no function but the server's own that change nothing. A call
of any other name (a stored function, which may write: an unqualified name is the server's own
function when it has one, so a stored one of that name is called as db.name; a UDF) counts
as writing, as does a text the fingerprint could not read.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
import re
import shutil
import struct
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import BinaryIO

import numpy as np

from knoblab.admin import forbidden
from knoblab.capture.fingerprint import (
    fingerprint,
    fingerprint_id,
    prepared_form,
    session_sql_mode,
    without_values,
)
from knoblab.capture.logs import log_kind, read_log
from knoblab.errors import UserError

FORMAT = 5  # of the plan's files: a plan made by another format is made again
# Record kinds that are not a statement class: a database change, the captured clock, a
# statement to prepare (its text), and the execution of a prepared one (_EXECUTE's fields,
# the statement's text, then its parameters: a type byte, a length and the value, each).
USE, TIMESTAMP, PREPARE, EXECUTE = -1, -2, -3, -4
_RECORD = struct.Struct("<iId")  # kind (a class, or one of the above), text length, offset
# Class, the session's prepared statement, text length, how its values read backslashes.
_EXECUTE = struct.Struct("<IIIB")
# An execution's values read the same in any sql_mode; read with backslash escapes; without.
_EITHER, _ESCAPES, _NO_ESCAPES = 0, 1, 2
_PARAMETER = struct.Struct("<cI")  # type, length
_FLUSH_BYTES = 16 << 20  # the sessions' buffered records written out above this
_EDGE = 1 << 20  # the first and last MiB of the log go into its identity
# Reads the clock: such a statement gets the captured time first.
_CLOCK = re.compile(r"\b(NOW|CURDATE|CURTIME|CURRENT_(DATE|TIME|TIMESTAMP)|SYSDATE|"
                    r"UNIX_TIMESTAMP|UTC_(DATE|TIME|TIMESTAMP)|LOCALTIME(STAMP)?)\b",
                    re.IGNORECASE)
# A statement that reads, by how it begins. Session bookkeeping (SET of a session variable,
# transaction bounds, USE) changes no data either; a function it calls is checked apart.
_READS = re.compile(r"\s*(\(\s*)*(select|with|values|table|show|explain|desc|describe|use|do|"
                    r"set|begin|start transaction|commit|rollback|savepoint|release savepoint)\b")
# Anywhere in a statement, these make it write (or lock, or write a file or a variable).
_WRITES = re.compile(r"\b(insert|update|delete|replace|truncate|alter|drop|create|load|"
                     r"rename|optimize|repair|analyze|call|handler|lock|into|for\s+update|"
                     r"for\s+share|sequence|nextval|setval|next\s+value\s+for|get_lock)\b")


def _words(text: str) -> frozenset[str]:
    return frozenset(text.split())


_NAME = r"(?:`(?:[^`]|``)+`|[\w$]+)"
# A name followed by "(": a function called, a type's length or a keyword's parenthesis.
_CALL = re.compile(rf"({_NAME}(?:\s*\.\s*{_NAME})*)\s*\(")
# A common table expression's name with its columns, `name(a, b) as (`: not a call.
_CTE = re.compile(r"(?:\bwith(?:\s+recursive)?|,)\s*([\w$]+)\s*\([^()]*\)\s*as\s*\(")
_HINT = re.compile(r"/\*\+.*?\*/", re.DOTALL)  # optimizer hints: no calls in them
# A connector's set-up of its connection (SET NAMES, SET autocommit = 1, a session variable):
# a session of nothing else did no work of its client's (a driver's probe, a pool's check),
# and is not one of the capture's sessions.
_SET_UP = re.compile(r"\s*set\s+(?!global\b|@@global\.|password\b|role\b|default\s+role\b)",
                     re.IGNORECASE)
_SET_UP_ONLY = "connections that only set up their session (SET NAMES …)"
VALUELESS = ("executions of statements prepared before the log was on (it holds no values "
             "for them)")
_UNREADABLE = "/* unreadable */"  # what the fingerprint makes of a text it cannot read
# Words a "(" follows that are no call: syntax, and the types of CAST and CONVERT.
_SYNTAX = _words("""
    all and any as by case columns distinct else exists force from group having ignore in
    index interval is join key like not on or over partition path regexp rlike row rows
    select some then union using values when where window with xor
    binary char date datetime dec decimal double float int integer json nchar numeric signed
    time timestamp unsigned varchar year
""")
# The server's own functions that change no data (MariaDB's and MySQL's alike): a lock, a
# sequence, a file or a replication wait is left out, as writing.
_PURE_FUNCTIONS = _words("""
    abs acos adddate addtime ascii asin atan atan2 avg benchmark bin bit_and bit_count
    bit_length bit_or bit_xor cast ceil ceiling char_length character_length charset
    coalesce coercibility collation compress concat concat_ws connection_id conv convert
    convert_tz cos cot count crc32 cume_dist curdate current_date current_role current_time
    current_timestamp current_user curtime database date_add date_format date_sub datediff
    day dayname dayofmonth dayofweek dayofyear default degrees dense_rank elt exp export_set
    extract field find_in_set first_value floor format found_rows from_base64 from_days
    from_unixtime greatest group_concat hex hour if ifnull inet6_aton inet6_ntoa inet_aton
    inet_ntoa instr is_ipv4 is_ipv6 isnull json_array json_arrayagg json_contains
    json_contains_path json_depth json_extract json_keys json_length json_merge_patch
    json_merge_preserve json_object json_objectagg json_overlaps json_quote json_search
    json_table json_type json_unquote json_valid json_value lag last_day last_insert_id
    last_value lcase lead least left length ln localtime localtimestamp locate log log10
    log2 lower lpad ltrim makedate maketime make_set match against max md5 microsecond mid
    min minute mod month monthname now nth_value ntile nullif oct octet_length ord
    percent_rank percentile_cont percentile_disc period_add period_diff pi position pow
    power quarter quote radians rand rank regexp_instr regexp_replace regexp_substr repeat
    reverse right round row_count row_number rpad rtrim schema sec_to_time second
    session_user sha sha1 sha2 sign sin sleep soundex space sqrt std stddev stddev_pop
    stddev_samp str_to_date strcmp subdate substr substring substring_index subtime sum
    sysdate system_user tan time_format time_to_sec timediff timestampadd timestampdiff
    to_base64 to_days to_seconds trim ucase uncompress uncompressed_length unhex
    unix_timestamp upper user utc_date utc_time utc_timestamp uuid uuid_short var_pop
    var_samp variance version week weekday weekofyear weight_string yearweek
""")
Progress = Callable[[int, int], None]  # (bytes read, bytes in all)


@dataclass(frozen=True)
class StatementClass:
    """Statements that differ only in their literals: pt-query-digest's class."""

    id: str  # fingerprint_id: 16 hex digits, as pt-query-digest's checksum
    fingerprint: str  # literals replaced by ?: what reports show, never a literal value
    count: int
    reads: bool  # changes no data
    databases: dict[str, int]  # its statements by the database they ran in, where known

    @property
    def reads_clock(self) -> bool:
        return bool(_CLOCK.search(self.fingerprint))


@dataclass(frozen=True)
class Session:
    """One captured connection: where its records are, and when it began and ended."""

    file: str
    offset: int  # of its records in the file
    length: int  # bytes
    first: float | None  # seconds from the capture's first statement; None: the log has no time
    last: float | None
    statements: int


# A plan's sessions, by when they began: numpy keeps a million of them in a few tens of MB.
# The lines of the log their first and last statements are on order the statements of one
# second (a log in whole seconds) among themselves.
_SESSION = np.dtype([("file", "<i4"), ("offset", "<i8"), ("length", "<i8"), ("first", "<f8"),
                     ("last", "<f8"), ("statements", "<i8"), ("first_line", "<i8"),
                     ("last_line", "<i8")])


@dataclass(frozen=True)
class Plan:
    folder: Path
    log: str
    classes: tuple[StatementClass, ...]  # a statement's class is its index here
    files: tuple[str, ...]  # the record files, which sessions point into
    index: np.ndarray  # of _SESSION, by when the sessions began
    statements: int
    peak: int  # the most sessions open at once in the capture
    span: float | None  # seconds from the first statement to the last
    skipped: dict[str, int]  # what was left out, by why
    databases: tuple[str, ...]  # the databases the statements ran in
    source: str  # the log's kind: "general" or "slow"
    prepared: int  # statements the application prepared, replayed as prepared statements
    clock: int  # statements preceded by their captured time (SET timestamp)
    largest: int  # bytes of the longest statement
    largest_class: int  # its class

    @property
    def writes(self) -> bool:
        return not all(c.reads for c in self.classes)

    @property
    def sessions(self) -> int:
        return int(self.index.size)

    def session(self, number: int) -> Session:
        row = self.index[number]
        return Session(self.files[int(row["file"])], int(row["offset"]), int(row["length"]),
                       None if np.isnan(row["first"]) else float(row["first"]),
                       None if np.isnan(row["last"]) else float(row["last"]),
                       int(row["statements"]))

    def records(self, session: Session) -> Iterator[tuple[int, float, bytes]]:
        """(kind, captured offset, text) of the session's records, in its order (an EXECUTE
        record's text is its fields, the statement and its parameters)."""
        with (self.folder / session.file).open("rb") as handle:
            handle.seek(session.offset)
            left = session.length
            while left > 0:
                kind, length, offset = _RECORD.unpack(handle.read(_RECORD.size))
                yield kind, offset, handle.read(length)
                left -= _RECORD.size + length

    def summary(self) -> dict[str, object]:
        """What a run keeps of the plan (no statement text: fingerprints only)."""
        return {"statements": self.statements, "sessions": self.sessions,
                "classes": len(self.classes), "peak_sessions": self.peak,
                "span_seconds": self.span, "skipped": self.skipped,
                "databases": list(self.databases), "writes": self.writes,
                "source": self.source, "prepared": self.prepared, "clock": self.clock,
                "largest_bytes": self.largest}


def plan_for(log: Path, home: Path, progress: Progress | None = None) -> Plan:
    """The replay plan of `log`, made now or found made earlier."""
    try:
        stat = log.stat()
    except OSError as exc:
        raise UserError(f"[workload] log = {str(log)!r}: cannot read it: "
                        f"{exc.strerror or exc}") from None
    if not log.is_file():
        raise UserError(f"[workload] log = {str(log)!r}: not a file; give a slow query log or "
                        "a general query log")
    key = _identity(log, stat)
    root = home / "replays"
    root.mkdir(mode=0o700, parents=True, exist_ok=True)
    folder = root / key
    if (folder / "plan.json").is_file():
        return _load(folder)
    work = root / f".{key}.{os.getpid()}"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(mode=0o700)
    try:
        _Builder(log, work, stat.st_size, progress).build()
        if _identity(log, log.stat()) != key:
            raise UserError(f"[workload] log = {str(log)!r}: it changed while it was read (a "
                            "server still writing it?); replay a copy of it, or a log the "
                            "server no longer writes")
        try:
            work.rename(folder)
        except OSError:  # another process made it first: theirs is the same
            shutil.rmtree(work, ignore_errors=True)
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise
    return _load(folder)


def _identity(log: Path, stat: os.stat_result) -> str:
    """The plan's key: the log's path, size, inode, times and a hash of its first and last
    MiB. The change time (ctime) moves with every write and no tool sets it back, so that a
    log edited in place, its size and modification time kept, is another log."""
    digest = hashlib.sha256(f"{FORMAT}\0{log.resolve()}\0{stat.st_size}\0{stat.st_mtime_ns}"
                            f"\0{stat.st_ctime_ns}\0{stat.st_dev}\0{stat.st_ino}\0".encode())
    try:
        with log.open("rb") as handle:
            ends = [(0, _EDGE)]
            if stat.st_size > _EDGE:
                ends.append((max(stat.st_size - _EDGE, _EDGE), _EDGE))
            for start, length in ends:
                handle.seek(start)
                while length > 0 and (piece := handle.read(min(length, 64 << 10))):
                    digest.update(piece)  # in pieces: planning keeps its memory small
                    length -= len(piece)
    except OSError as exc:
        raise UserError(f"[workload] log = {str(log)!r}: cannot read it: "
                        f"{exc.strerror or exc}") from None
    return digest.hexdigest()[:20]


def _load(folder: Path) -> Plan:
    raw = json.loads((folder / "plan.json").read_text())
    return Plan(folder=folder, log=raw["log"],
                classes=tuple(StatementClass(**c) for c in raw["classes"]),
                files=tuple(raw["files"]), index=np.load(folder / "sessions.npy"),
                statements=raw["statements"], peak=raw["peak"], span=raw["span"],
                skipped=raw["skipped"], databases=tuple(raw["databases"]),
                source=raw["source"], prepared=raw["prepared"], clock=raw["clock"],
                largest=raw["largest"], largest_class=raw["largest_class"])


class _Open:
    """A session being read: its records not yet written, and what is known of it so far."""

    __slots__ = ("backslash_escapes", "buffer", "database", "first", "first_line", "last",
                 "last_line", "prepared", "set_up", "spilled", "statements")

    def __init__(self) -> None:
        self.buffer = bytearray()
        # Its set-up statements, held until a statement of its client's work comes: then
        # they are its first; a session that ends without one is left out.
        self.set_up: list[tuple[str | None, float | None, int, str, bool]] | None = []
        self.database: str | None = None  # in effect on the replaying connection
        self.first: float | None = None
        self.last: float | None = None
        self.first_line = self.last_line = 0  # in the log, of its first and last statements
        self.statements = 0
        self.spilled: tuple[int, int] | None = None  # its own file, and the bytes in it
        self.prepared: dict[str, int] = {}  # its prepared statements' texts, numbered
        # Whether its sql_mode reads a backslash as an escape, as far as its SETs say (the
        # server's default until one does).
        self.backslash_escapes = True


class _Builder:
    """Sessions that end are appended whole to a shared file, and indexed; a session still
    open when the buffered records pass _FLUSH_BYTES goes on in a file of its own. Memory
    holds the open sessions' records (at most _FLUSH_BYTES), the classes and the index."""

    def __init__(self, log: Path, folder: Path, size: int, progress: Progress | None) -> None:
        self.log, self.folder, self.size, self.progress = log, folder, size, progress
        self.open: dict[int, _Open] = {}
        self.classes: dict[str, int] = {}  # fingerprint -> index
        self.counts: list[int] = []
        self.class_databases: list[dict[str, int]] = []
        self.fingerprints: list[str] = []
        self.skipped: dict[str, int] = {}
        self.databases: set[str] = set()
        self.buffered = 0
        self.statements = 0
        self.origin: float | None = None
        self.files = ["shared.bin"]
        self.shared = (folder / "shared.bin").open("ab")
        self.shared_bytes = 0
        self.index = (folder / "index.bin").open("ab")
        self.count = 0
        self.prepared = 0
        self.clock = 0
        self.largest, self.largest_class = 0, 0
        self.source = log_kind(log)

    def build(self) -> None:
        try:
            self._read()
            for thread in list(self.open):
                self._close(thread)
        finally:
            self.shared.close()
            self.index.close()
        self._write_summary()

    def _read(self) -> None:
        for event in read_log(self.log, self._told):
            if event.command == "Connect" or (event.command == "Quit"
                                              and event.thread in self.open):
                self._close(event.thread)
                if event.command == "Quit":
                    continue
            session = self.open.get(event.thread)
            if session is None:
                session = self.open[event.thread] = _Open()
            if not event.is_statement:
                # A replay prepares the statements an application prepared, and closes them
                # with their session.
                if event.command not in ("Connect", "Init DB", "Quit", "Prepare",
                                         "Close stmt"):
                    self._skip(f"{event.command} (not a statement)")
                continue
            text = event.text.strip()
            if not text:
                continue
            prepared = event.command == "Execute"
            if prepared and without_values(text):
                self._skip(VALUELESS)
                continue
            why = forbidden(text)
            if why is not None:
                self._skip(why)
                continue
            if session.set_up is not None:
                if _SET_UP.match(text):
                    session.set_up.append((event.database, event.time, event.line, text,
                                           prepared))
                    continue
                held, session.set_up = session.set_up, None
                for database, when, line, statement, was_prepared in held:
                    self._statement(session, database, when, line, statement, was_prepared)
            self._statement(session, event.database, event.time, event.line, text, prepared)

    def _told(self, done: int) -> None:
        if self.progress is not None:
            self.progress(done, self.size)

    def _close(self, thread: int) -> None:
        session = self.open.pop(thread, None)
        if session is None:
            return
        if session.set_up:  # no work came: a connection that only set itself up
            self._skip(_SET_UP_ONLY)
        self.buffered -= len(session.buffer)
        if not session.statements:
            return
        if session.spilled is not None:
            file, length = session.spilled
            with _append(self.folder / self.files[file]) as handle:
                handle.write(session.buffer)
            where = (file, 0, length + len(session.buffer))
        else:
            where = (0, self.shared_bytes, len(session.buffer))
            self.shared.write(session.buffer)
            self.shared_bytes += len(session.buffer)
        first = math.nan if session.first is None else session.first
        last = math.nan if session.last is None else session.last
        self.index.write(np.array([(*where, first, last, session.statements,
                                    session.first_line, session.last_line)],
                                  dtype=_SESSION).tobytes())
        self.count += 1

    def _skip(self, why: str) -> None:
        self.skipped[why] = self.skipped.get(why, 0) + 1

    def _statement(self, session: _Open, database: str | None, when: float | None, line: int,
                   text: str, prepared: bool) -> None:
        print_ = fingerprint(text)
        index = self.classes.get(print_)
        if index is None:
            index = self.classes[print_] = len(self.fingerprints)
            self.fingerprints.append(print_)
            self.counts.append(0)
            self.class_databases.append({})
        self.counts[index] += 1
        if when is not None and self.origin is None:
            self.origin = when
        # The slow log writes a statement when it ends: a neighbour that began earlier may
        # come after the first one; it is taken as beginning with it.
        offset = math.nan if when is None or self.origin is None else max(when - self.origin,
                                                                           0.0)
        if database and database != session.database:
            self._record(session, USE, offset, database.encode("utf-8", "surrogateescape"))
            session.database = database
        if database:
            self.databases.add(database)
        if session.database:  # in effect on the replaying connection, given here or earlier
            where = self.class_databases[index]
            where[session.database] = where.get(session.database, 0) + 1
        if when is not None and _CLOCK.search(print_):
            self._record(session, TIMESTAMP, offset, f"{when:.6f}".encode())
            self.clock += 1
        raw = text.encode("utf-8", "surrogateescape")
        if len(raw) > self.largest:
            self.largest, self.largest_class = len(raw), index
        form = prepared_form(text, session.backslash_escapes) if prepared else None
        if form is None:
            self._record(session, index, offset, raw)
        else:
            number = session.prepared.get(form.template)
            if number is None:
                number = session.prepared[form.template] = len(session.prepared)
                self._record(session, PREPARE, math.nan,
                             form.template.encode("utf-8", "surrogateescape"))
            read = _EITHER if form.backslashes is None else \
                _ESCAPES if form.backslashes else _NO_ESCAPES
            self._record(session, EXECUTE, offset, b"".join(
                [_EXECUTE.pack(index, number, len(raw), read), raw,
                 *(_PARAMETER.pack(kind, len(value)) + value for kind, value in form.parameters)]))
            self.prepared += 1
        mode = session_sql_mode(text)
        if mode is not None:
            session.backslash_escapes = "NO_BACKSLASH_ESCAPES" not in {
                word.strip().upper() for word in mode.split(",")}
        session.statements += 1
        self.statements += 1
        if not math.isnan(offset):
            if session.first is None:
                session.first, session.first_line = offset, line
            session.last, session.last_line = offset, line

    def _record(self, session: _Open, kind: int, offset: float, text: bytes) -> None:
        session.buffer += _RECORD.pack(kind, len(text), offset)
        session.buffer += text
        self.buffered += _RECORD.size + len(text)
        if self.buffered > _FLUSH_BYTES:
            self._spill()

    def _spill(self) -> None:
        """The open sessions' records to files of their own: memory is bounded, whatever
        the number of sessions open at once or their length."""
        for session in self.open.values():
            if not session.buffer:
                continue
            if session.spilled is None:
                self.files.append(f"{len(self.files):07d}.bin")
                session.spilled = (len(self.files) - 1, 0)
            file, length = session.spilled
            with _append(self.folder / self.files[file]) as handle:
                handle.write(session.buffer)
            session.spilled = (file, length + len(session.buffer))
            session.buffer = bytearray()
        self.buffered = 0

    def _write_summary(self) -> None:
        if not self.statements:
            raise UserError(f"{self.log}: the log holds no statement to replay"
                            + (f" (left out: {_said(self.skipped)})" if self.skipped else "")
                            + "; capture one with the slow log at long_query_time = 0, or the "
                            "general log")
        index = np.fromfile(self.folder / "index.bin", dtype=_SESSION)
        # By when they began; sessions without times keep the order they ended in, last.
        order = np.lexsort((np.arange(index.size), np.nan_to_num(index["first"], nan=np.inf)))
        index = index[order]
        np.save(self.folder / "sessions.npy", index)
        (self.folder / "index.bin").unlink()
        classes = [StatementClass(fingerprint_id(text), text, count, _reads(text), databases)
                   for text, count, databases in zip(self.fingerprints, self.counts,
                                                     self.class_databases, strict=True)]
        timed = index[~np.isnan(index["first"])]
        plan = {
            "format": FORMAT, "log": str(self.log),
            "classes": [asdict(c) for c in classes], "files": self.files,
            "statements": self.statements, "peak": _peak(timed),
            "span": float(timed["last"].max()) if timed.size else None,
            "skipped": self.skipped, "databases": sorted(self.databases),
            "source": self.source, "prepared": self.prepared, "clock": self.clock,
            "largest": self.largest, "largest_class": self.largest_class,
        }
        for path in self.folder.iterdir():
            path.chmod(0o600)
        path = self.folder / "plan.json"
        path.write_text(json.dumps(plan))
        path.chmod(0o600)


@contextlib.contextmanager
def _append(path: Path) -> Iterator[BinaryIO]:
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    with os.fdopen(fd, "ab") as handle:
        yield handle


def changes_no_data(statement: str) -> bool:
    """Whether a statement, as written, surely changes no data (see the module's docstring):
    a stored function it calls may write, so it does not."""
    return _reads(fingerprint(statement))


def _reads(print_: str) -> bool:
    """Whether a class surely changes no data; anything not known to be read-only writes."""
    if _UNREADABLE in print_:
        return False
    text = _HINT.sub(" ", print_)
    # The fingerprint turned every literal into ?: a ";" left separates statements.
    if not all(_READS.match(part) for part in text.split(";")) or _WRITES.search(text):
        return False
    tables = {name.lower() for name in _CTE.findall(text)}
    return all(name.lower() in _PURE_FUNCTIONS or name.lower() in _SYNTAX
               or name.lower() in tables for name in _CALL.findall(text))


def _peak(timed: np.ndarray) -> int:
    """The most sessions open at once; a session is open from its first statement to its
    last, both included. Statements are ordered by their time and, within one time, by their
    place in the log: in a log in whole seconds a client's short connections, one after the
    other in a second, are not open at once. The general log writes a statement as it
    arrives, so its order is the sessions' own; the slow log writes one as it ends, so there
    a session whose first statement began before another's last ended, and ended after it,
    is taken to have begun after it (a whole-second log cannot say more)."""
    if not timed.size:
        return 1
    ones = np.ones(timed.size)
    edges = np.concatenate([
        np.stack([timed["first"], timed["first_line"], ones], axis=1),
        np.stack([timed["last"], timed["last_line"], -ones], axis=1)])
    # By time, then line; a session of one statement opens before it closes.
    edges = edges[np.lexsort((-edges[:, 2], edges[:, 1], edges[:, 0]))]
    return max(int(np.cumsum(edges[:, 2]).max()), 1)


def _said(skipped: dict[str, int]) -> str:
    return "; ".join(f"{count} {why}" for why, count in skipped.items())
