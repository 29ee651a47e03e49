"""Reading a captured log: MariaDB's and MySQL's slow query log (written with
long_query_time = 0) and their general query log, as a stream of events.

`read_log(path)` is a generator over the file's lines: memory holds one entry at a time,
whatever the log's size. Which log it is comes from its first line (the server's start banner,
`# Time:`, `# User@Host:` or an `Id Command Argument` line). Anything else, a binary file, an
entry cut short or a header this reader does not know stops it with one UserError naming the
file, the line and what was expected there.

A slow log writes a statement as it came, so a statement may hold a line that looks like an
entry's start (`# Time: …` inside a string) or a start banner: inside a statement such a line
starts a new entry only when a whole header follows it (`slow_entries`), and a banner only
with its `Tcp port:` line.

Texts are decoded as UTF-8 with undecodable bytes kept as surrogates
(`text.encode("utf-8", "surrogateescape")` gives back the server's bytes). They are the
user's data: nothing here logs or prints them.
"""

from __future__ import annotations

import math
import re
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import BinaryIO

from knoblab.errors import UserError

STATEMENTS = frozenset({"Query", "Execute"})  # commands whose text is a statement to run
# The first line is read with this limit: a binary file without line breaks is refused
# instead of read whole.
_FIRST_LINE_LIMIT = 1 << 16

_BANNER = re.compile(r"\S.*, Version: .* started with:\Z")
_BANNER_REST = re.compile(r"Tcp port: \d+|Time\s+Id\s+Command\s+Argument\Z")
_OLD_TIME = r"\d{6}\s+\d{1,2}:\d\d:\d\d"  # MariaDB, MySQL 5.6: 261125  2:45:08 (local)
_ISO_TIME = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?(?:Z|[+-]\d\d:\d\d)?"  # MySQL 5.7+
_GENERAL = re.compile(rf"(?P<time>{_OLD_TIME}|{_ISO_TIME})?\t+ *(?P<id>\d+) "
                      r"(?P<command>[A-Z][A-Za-z_]*(?: [A-Za-z]+)?)(?:\t(?P<arg>.*))?\Z",
                      re.DOTALL)
_SLOW_START = ("# Time:", "# User@Host:")
_FIELD = re.compile(r"(\w+): (\S*)")
_HOST_ID = re.compile(r"\bId:\s*(\d+)")
_THREAD_ID = re.compile(r"\bThread_id: (\d+)")
_USE = re.compile(r"use (`(?:[^`]|``)+`|\S+);\Z", re.IGNORECASE)
_SET_TIMESTAMP = re.compile(r"SET (?:\w+=\d+,)*timestamp=(\d+(?:\.\d+)?)(?:,\w+=\d+)*;\Z")
_ADMIN = re.compile(r"# administrator command: ([A-Za-z][A-Za-z_ ]*);\Z")
_CONNECT_DB = re.compile(r".* on (\S*)(?: using .*)?\Z", re.DOTALL)
_USE_STATEMENT = re.compile(r"\s*use\s+(`(?:[^`]|``)+`|[^\s;]+)\s*;?\s*\Z", re.IGNORECASE)
# The figures line that ends an entry's header, as the server writes it.
_FIGURES = re.compile(r"# Query_time: \d+(?:\.\d+)?\s+Lock_time: \d+(?:\.\d+)?\s+"
                      r"Rows_sent: \d+\s+Rows_examined: \d+(?:\s|\Z)")
_TCP_PORT = re.compile(r"Tcp port: \d+")
_TIME_LINE = re.compile(rf"# Time:\s+(?:{_OLD_TIME}|{_ISO_TIME})\s*")
_HEADER_MOST = 32  # lines a header may have (MariaDB's explain lines and all)
_QUERY_FIELDS = "'# Query_time: SECONDS  Lock_time: SECONDS  Rows_sent: N  Rows_examined: N'"
_TIME_FORMATS = "'# Time: YYMMDD H:MM:SS' or '# Time: YYYY-MM-DDTHH:MM:SS.ffffffZ'"


@dataclass(frozen=True, slots=True)
class Event:
    """One thing a connection did, as the log tells it.

    `command` is "Query" for a statement (the slow log's entries, the general log's Query
    lines), else the general log's command ("Connect", "Init DB", "Quit", "Prepare",
    "Execute", "Close stmt", ...) or the slow log's administrator command. `time` is when it
    began, in seconds since the epoch: whole seconds where the log has no more (MariaDB); the
    general log's old format is in the server's local time, read in this machine's. `database`
    is the one in effect: the slow log's `Schema:` (MariaDB) or its last `use` line (MySQL,
    which writes one when the database differs from its previous entry's); the general log's
    per connection, from Connect, Init DB and USE (whose own events have the new one, as in
    the slow log, which logs a statement after it ran). The
    figures are the slow log's; None in a general log. `line` is where it starts in the log.

    Events come in the log's order. The general log writes a command when it arrives; the slow
    log writes a statement when it has ended (after its client has the answer), so there two
    connections' neighbouring statements may come swapped, and MariaDB's whole seconds cannot
    put them back in order. A banner in the middle (FLUSH LOGS, or a restart, after which
    connection ids start again) is passed over."""

    thread: int
    time: float | None
    database: str | None
    command: str
    text: str
    line: int
    query_time: float | None = None
    lock_time: float | None = None
    rows_sent: int | None = None
    rows_examined: int | None = None

    @property
    def is_statement(self) -> bool:
        """Is `text` a statement the server ran (as opposed to a connection's bookkeeping)?"""
        return self.command in STATEMENTS


def read_log(path: Path, progress: Callable[[int], None] | None = None) -> Iterator[Event]:
    """The log's events in the log's order (a generator: the file is read as it is asked);
    `progress` is told the bytes read so far, now and then."""
    with _open(path) as handle:
        lines = _lines(path, handle, progress)
        first = _first(path, lines)
        if first is None:
            return
        number, text = first
        if text.startswith(_SLOW_START):
            yield from _SlowLog(path).read(_chain(number, text, lines))
        elif _starts_entry(text):
            yield from _GeneralLog(path).read(_chain(number, text, lines))
        else:
            raise _bad(path, number, "neither a slow query log nor a general query log",
                       "the server's start banner, '# Time:', '# User@Host:' or an "
                       "'Id Command Argument' line")


def log_kind(path: Path) -> str:
    """"slow" or "general": which log the file is (read_log says why it is neither)."""
    with _open(path) as handle:
        first = _first(path, _lines(path, handle))
    return "slow" if first is not None and first[1].startswith(_SLOW_START) else "general"


def _open(path: Path) -> BinaryIO:
    try:
        return path.open("rb")
    except OSError as exc:
        raise UserError(f"cannot read the log {path}: {exc.strerror or exc}") from None


def _bad(path: Path, number: int, problem: str, expected: str) -> UserError:
    return UserError(f"{path}, line {number}: {problem}; expected {expected}")


def _lines(path: Path, handle: BinaryIO,
           progress: Callable[[int], None] | None = None) -> Iterator[tuple[int, str]]:
    """(line number, text without its line break); the first line is checked for binary."""
    head = handle.readline(_FIRST_LINE_LIMIT)
    whole = head.endswith(b"\n") or len(head) < _FIRST_LINE_LIMIT
    if b"\0" in head or not (whole or _starts_entry(head.decode("utf-8", "surrogateescape"))):
        raise _bad(path, 1, "binary data, not a text log", "a slow query log or a general "
                   "query log")
    if not whole:  # a long first statement (the log's banner rotated away)
        head += handle.readline()
    if head:
        yield 1, _chomp(head.decode("utf-8", "surrogateescape"))
    for number, raw in enumerate(handle, start=2):
        if progress is not None and number % 8192 == 0:
            progress(handle.tell())
        yield number, _chomp(raw.decode("utf-8", "surrogateescape"))
    if progress is not None:
        progress(handle.tell())


def general_line(text: str) -> tuple[str | None, int] | None:
    """A general log line that starts an entry: its time as written (None when the line has
    none: the one above it holds), and its connection; None for any other line (a banner, a
    statement's next line)."""
    found = _GENERAL.match(_chomp(text))
    return None if found is None else (found.group("time"), int(found.group("id")))


def general_statement(text: str) -> tuple[int, str] | None:
    """A general log line that starts a Query: its connection and the statement's first
    line; None for any other line."""
    found = _GENERAL.match(_chomp(text))
    if found is None or found.group("command") != "Query":
        return None
    return int(found.group("id")), found.group("arg") or ""


def slow_statement(group: list[tuple[int, str]]) -> str | None:
    """The statement of a slow log's entry as `slow_entries` groups it (its `use` and `SET
    timestamp` lines and the `;` the server adds left off); None for a group that is no
    entry."""
    if not group or not group[0][1].startswith(_SLOW_START):
        return None
    lines = [_chomp(text) for _, text in group]
    header = next((n for n, text in enumerate(lines) if not text.startswith("#")), len(lines))
    body = lines[header:]
    if len(body) > 1 and _USE.match(body[0]) and _SET_TIMESTAMP.match(body[1]):
        body = body[1:]
    if body and _SET_TIMESTAMP.match(body[0]):
        body = body[1:]
    while body and not body[-1]:
        body.pop()
    return "\n".join(body).removesuffix(";")


def _starts_entry(text: str) -> bool:
    return text.startswith(_SLOW_START) or _GENERAL.match(text) is not None


def _chomp(text: str) -> str:
    if text.endswith("\n"):
        text = text[:-1]
    return text[:-1] if text.endswith("\r") else text


def _first(path: Path, lines: Iterator[tuple[int, str]]) -> tuple[int, str] | None:
    """The first entry's line, past a start banner; None for a log with nothing logged."""
    seen = False
    for number, text in lines:
        seen = True
        if not text.strip() or _BANNER.match(text) or _BANNER_REST.match(text):
            continue
        return number, text
    if not seen:
        raise UserError(f"{path} is empty: expected a slow query log or a general query log")
    return None


def _parse_time(text: str) -> float | None:
    """Seconds since the epoch from either log's time format; None when it is neither."""
    text = text.strip()
    try:
        if re.fullmatch(_ISO_TIME, text):
            return datetime.fromisoformat(text).timestamp()
        if re.fullmatch(_OLD_TIME, text):
            day, clock = text.split()
            hours, minutes, seconds = (int(part) for part in clock.split(":"))
            return datetime(2000 + int(day[:2]), int(day[2:4]), int(day[4:]), hours, minutes,
                            seconds).timestamp()
    except (ValueError, OverflowError, OSError):  # a 13th month, a 25th hour
        return None
    return None


def slow_entries(lines: Iterable[tuple[int, str]]) -> Iterator[list[tuple[int, str]]]:
    """A slow log's (number, line)s grouped: an entry's lines (its header, then its
    statement), or one line outside any entry (a start banner, a blank line) alone. A line
    may keep its line break. Inside a statement, a line that looks like an entry's start
    starts one only when the rest of a header follows it (`# User@Host:`, `#` lines, the
    figures), and a start banner ends it only when its `Tcp port:` line follows: else they
    are the statement's own lines."""
    source = iter(lines)
    back: deque[tuple[int, str]] = deque()  # lines read ahead and given back

    def take() -> tuple[int, str] | None:
        return back.popleft() if back else next(source, None)

    entry: list[tuple[int, str]] | None = None
    in_body = False
    while (line := take()) is not None:
        text = _chomp(line[1])
        if entry is None:
            if text.startswith(_SLOW_START):
                entry, in_body = [line], False
            else:
                yield [line]
            continue
        if _BANNER.match(text):
            after = take()
            if after is not None:
                back.appendleft(after)
            if after is not None and _TCP_PORT.match(_chomp(after[1])):
                yield entry
                entry = None
                yield [line]
                continue
        elif in_body and text.startswith(_SLOW_START):
            header = _header(line, take)
            if header[-1] is not None:
                yield entry
                entry, in_body = [h for h in header if h is not None], False
                continue
            back.extendleft(reversed([h for h in header[1:] if h is not None]))
        in_body = in_body or not text.startswith("#")
        entry.append(line)
    if entry is not None:
        yield entry


def _header(first: tuple[int, str], take: Callable[[], tuple[int, str] | None]
            ) -> list[tuple[int, str] | None]:
    """The lines read from `first` on while they make an entry's header: the whole header
    when it ends with its figures, else the lines read, the one that broke it included, and
    None last."""
    read: list[tuple[int, str] | None] = [first]
    opening = _chomp(first[1])
    has_user = opening.startswith("# User@Host:")
    # A statement's last line ends with the `;` the server adds: never a time alone.
    if not has_user and not _TIME_LINE.fullmatch(opening):
        return [*read, None]
    while len(read) < _HEADER_MOST and (line := take()) is not None:
        read.append(line)
        text = _chomp(line[1])
        if has_user and _FIGURES.match(text):
            return read
        if text.startswith("# User@Host:") and not has_user and len(read) == 2:
            has_user = True
        elif not (has_user and text.startswith("#") and not text.startswith(_SLOW_START)):
            break
    return [*read, None]


class _SlowLog:
    """The slow log's entries: `#` header lines, `use db;`, `SET timestamp=N;`, then the
    statement up to the next entry (the server adds the final `;`)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.database: str | None = None  # the last `use` line's (MySQL's way)
        self.time: float | None = None

    def read(self, lines: Iterator[tuple[int, str]]) -> Iterator[Event]:
        entry: _SlowEntry | None = None  # read, finished when the next group begins
        for group in slow_entries(lines):
            number, text = group[0]
            if entry is not None:
                yield from self._finish(entry, number)
                entry = None
            if not text.startswith(_SLOW_START):
                if text.strip() and not _BANNER.match(text) and not _BANNER_REST.match(text):
                    raise _bad(self.path, number, "a line outside any entry",
                               "'# Time:' or '# User@Host:'")
                continue
            entry = _SlowEntry(number)
            for number, text in group:
                self._add(entry, number, text)
        if entry is not None:
            yield from self._finish(entry, None)

    def _add(self, entry: _SlowEntry, number: int, text: str) -> None:
        if entry.body is not None:
            entry.body.append(text)
        elif text.startswith("#"):
            entry.header.append((number, text))
        elif (use := _USE.match(text)) and entry.timestamp is None:
            self.database = _unquote(use.group(1))
        elif (stamp := _SET_TIMESTAMP.match(text)) and math.isfinite(float(stamp.group(1))):
            entry.timestamp = float(stamp.group(1))
            entry.body = []
        else:
            entry.body = [text]  # no SET timestamp line (not written by every version)

    def _finish(self, entry: _SlowEntry, next_line: int | None) -> Iterator[Event]:
        if entry.body is None:
            where = entry.header[-1][0]
            problem = ("the log ends inside an entry's header" if next_line is None
                       else "an entry's header without its statement")
            raise _bad(self.path, where, problem, "'SET timestamp=N;' and the statement")
        figures, schema = self._fields(entry)
        thread = self._thread(entry)
        while entry.body and not entry.body[-1]:
            entry.body.pop()
        text = "\n".join(entry.body)
        command = "Query"
        if admin := _ADMIN.match(text):
            command, text = admin.group(1), ""
        elif text.endswith(";"):
            text = text[:-1]
        query_time, lock_time, rows_sent, rows_examined = figures
        database = schema if schema is not None else self.database
        yield Event(thread=thread, time=self._start(entry, query_time),
                    database=database or None, command=command, text=text, line=entry.line,
                    query_time=query_time, lock_time=lock_time, rows_sent=rows_sent,
                    rows_examined=rows_examined)

    def _fields(self, entry: _SlowEntry) -> tuple[tuple[float, float, int, int], str | None]:
        """The four figures (checked) and the `Schema:` field (None when there is none)."""
        found: dict[str, str] = {}
        figures_line = None
        for number, text in entry.header:
            if text.startswith(_SLOW_START):
                continue
            pairs = dict(_FIELD.findall(text))
            if "Query_time" in pairs:
                figures_line = number
            found.update(pairs)
        if figures_line is None:
            raise _bad(self.path, entry.header[-1][0], "an entry without its figures",
                       _QUERY_FIELDS)
        try:
            figures = (float(found["Query_time"]), float(found["Lock_time"]),
                       int(found["Rows_sent"]), int(found["Rows_examined"]))
        except (KeyError, ValueError):
            figures = (-1.0, 0.0, 0, 0)
        if not all(math.isfinite(f) and f >= 0 for f in figures):  # nan, inf, -1
            raise _bad(self.path, figures_line, "figures this reader does not know",
                       _QUERY_FIELDS)
        return figures, found.get("Schema")

    def _thread(self, entry: _SlowEntry) -> int:
        for _number, text in entry.header:
            if text.startswith("# User@Host:") and (found := _HOST_ID.search(text)):
                return int(found.group(1))
            if not text.startswith(_SLOW_START) and (found := _THREAD_ID.search(text)):
                return int(found.group(1))
        raise _bad(self.path, entry.line, "an entry without its connection",
                   "'Id: N' on its '# User@Host:' line or a '# Thread_id: N' line")

    def _start(self, entry: _SlowEntry, query_time: float) -> float | None:
        """When the statement began: MySQL's `# Time:` (when it was logged, to the
        microsecond) less its query time, else `SET timestamp` (whole seconds)."""
        for number, text in entry.header:
            if text.startswith("# Time:"):
                logged = _parse_time(text[len("# Time:"):])
                if logged is None:
                    raise _bad(self.path, number, "a time this reader does not know",
                               _TIME_FORMATS)
                if "." in text:
                    self.time = logged - query_time
                    return self.time
                if entry.timestamp is None:
                    self.time = logged
        if entry.timestamp is not None:
            self.time = entry.timestamp
        return self.time


@dataclass(slots=True)
class _SlowEntry:
    line: int
    header: list[tuple[int, str]]
    timestamp: float | None
    body: list[str] | None  # None while the header is read

    def __init__(self, line: int) -> None:
        self.line, self.header, self.timestamp, self.body = line, [], None, None


class _GeneralLog:
    """The general log's `[time] Id Command Argument` lines; an argument goes on over the
    lines that follow until the next such line (a multi-line statement)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.databases: dict[int, str | None] = {}
        self.time: float | None = None

    def read(self, lines: Iterator[tuple[int, str]]) -> Iterator[Event]:
        current: tuple[int, re.Match[str], list[str]] | None = None
        after_banner = False
        for number, text in lines:
            found = _GENERAL.match(text)
            if found:
                if current is not None:
                    yield self._event(*current)
                current = (number, found, [found.group("arg") or ""])
                after_banner = False
            elif _BANNER.match(text):
                if current is not None:
                    yield self._event(*current)
                current, after_banner = None, True
            elif after_banner and _BANNER_REST.match(text):
                continue
            elif current is None:
                raise _bad(self.path, number, "a line outside any entry",
                           "an 'Id Command Argument' line")
            else:
                current[2].append(text)
        if current is not None:
            yield self._event(*current)

    def _event(self, number: int, found: re.Match[str], argument: list[str]) -> Event:
        if found.group("time"):
            self.time = _parse_time(found.group("time"))
            if self.time is None:  # its format, with a day or an hour that does not exist
                raise _bad(self.path, number, "a time this reader does not know",
                           "'YYMMDD H:MM:SS' or 'YYYY-MM-DDTHH:MM:SS.ffffffZ'")
        thread = int(found.group("id"))
        command = found.group("command")
        text = "\n".join(argument)
        database = self.databases.get(thread)
        if command in ("Connect", "Change user"):
            target = _CONNECT_DB.match(text)
            database = target.group(1) or None if target else None
            self.databases[thread] = database
        elif command == "Init DB":
            database = text.strip() or None
            self.databases[thread] = database
        elif command == "Quit":
            self.databases.pop(thread, None)
        elif command == "Query" and (use := _USE_STATEMENT.match(text)):
            database = self.databases[thread] = _unquote(use.group(1))
        return Event(thread=thread, time=self.time, database=database, command=command,
                     text=text, line=number)


def _chain(number: int, text: str,
           lines: Iterator[tuple[int, str]]) -> Iterator[tuple[int, str]]:
    yield number, text
    yield from lines


def _unquote(name: str) -> str:
    if len(name) > 1 and name.startswith("`") and name.endswith("`"):
        return name[1:-1].replace("``", "`")
    return name
