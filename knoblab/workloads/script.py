"""A built-in SQL-script workload: K connections each run a body of SQL N times, timed together.

For write-heavy loads the article measured by hand, e.g. single-row INSERTs in autocommit or in
transactions of N rows. `setup` runs once into a template datadir (DDL, seed rows); `body` is
one iteration and may hold several statements. The server splits the statements
(CLIENT.MULTI_STATEMENTS): a Python split on ';' would break on quoted semicolons and compound
statements. The body's placeholders `{connection}` (1..K), `{iteration}` (0..N-1) and `{row}`
(unique across connections: (connection - 1) * N + iteration + 1) become integers by plain text
replacement, not str.format, so SQL braces stay as they are.

The client is Python: `client_cpu_seconds` in the details is the workers' own CPU time. When it
comes near wall time x connections, knoblab's client (not the server) may be the bottleneck and
the measured rate says little about the setting under test.
"""

from __future__ import annotations

import contextlib
import hashlib
import math
import re
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, ClassVar

import pymysql
from pymysql.constants import CLIENT

from knoblab import datasets, section
from knoblab.admin import refuse_admin
from knoblab.capture.plan import changes_no_data
from knoblab.connection import DATABASE, Progress, Server
from knoblab.datasets import Dataset
from knoblab.datasets.dump import quoted
from knoblab.datasets.scan import ScanTable
from knoblab.errors import UserError
from knoblab.keys import Key, Keys
from knoblab.observe import Observation, SecondSampler
from knoblab.workloads.base import (
    Measured,
    Recorder,
    Rounds,
    WorkloadError,
)
from knoblab.workloads.timed import LEADING_COMMENTS, Measurement, Timed, regime

# After a failure or the timeout: how long workers get to stop once their connections are
# killed, and the margin on pymysql's socket timeouts (a backstop if KILL never arrives).
STOP_GRACE = 10.0
_PLACEHOLDER = re.compile(r"\{(connection|iteration|row)\}")
READING = re.compile(r"(SELECT|WITH|SHOW|EXPLAIN|DESC|DESCRIBE)\b", re.IGNORECASE)
WRITING = re.compile(r"\b(INSERT|UPDATE|DELETE|REPLACE|TRUNCATE|ALTER|DROP|CREATE|LOAD|"
                     r"INTO\s+(OUT|DUMP)FILE)\b", re.IGNORECASE)


# --- placeholders ---------------------------------------------------------------------------


class BodyTemplate:
    """The body split once on its placeholders, so each iteration only joins strings."""

    def __init__(self, body: str) -> None:
        parts = _PLACEHOLDER.split(body)  # literal, name, literal, name, ..., literal
        self._literals = parts[0::2]
        self._names = parts[1::2]

    def render(self, connection: int, iteration: int, row: int) -> str:
        if not self._names:
            return self._literals[0]
        values = {"connection": str(connection), "iteration": str(iteration), "row": str(row)}
        out = [self._literals[0]]
        for name, literal in zip(self._names, self._literals[1:], strict=True):
            out.append(values[name])
            out.append(literal)
        return "".join(out)


# --- a best-effort SQL lexer ----------------------------------------------------------------


def reads_only(body: str) -> bool:
    """Every statement of the body only reads (SELECT, WITH, SHOW, EXPLAIN), none names a
    writing word anywhere (a CTE can end in a DELETE; a word in a string literal errs on the
    safe side), and none calls a function that is not the server's own and known to change
    nothing (a stored function may write); anything else (a CALL, a SET) counts as writing."""
    statements = [LEADING_COMMENTS.sub("", _PLACEHOLDER.sub("1", s))
                  for s in split_statements(body)]
    return bool(statements) and all(
        READING.match(s) and not WRITING.search(s) and changes_no_data(s) for s in statements)


def split_statements(sql: str) -> list[str]:
    """Top-level statements, best-effort: quotes and comments are honoured; compound
    statements (BEGIN ... END) are split on their inner ';' too. Comment-only pieces dropped.

    Only for counting and describing: the server itself splits what is sent.
    """
    return [sql[start:end].strip() for start, end in _statement_spans(sql)]


def _statement_spans(sql: str) -> list[tuple[int, int]]:
    """(start, end) of each piece holding SQL; end is its ';' or the end of the text."""
    spans: list[tuple[int, int]] = []
    start, content, i, n = 0, False, 0, len(sql)
    while i < n:
        ch = sql[i]
        if ch in "'\"`":
            i = _end_of_quote(sql, i)
            content = True
            continue
        if ch == "#" or (sql.startswith("--", i) and (i + 2 == n or sql[i + 2] in " \t\r\n")):
            end = sql.find("\n", i)
            i = n if end < 0 else end + 1
            continue
        if sql.startswith("/*", i):
            # /*! and /*M! are executable comments: the server runs what they hold.
            if sql.startswith("/*!", i) or sql.startswith("/*M!", i):
                content = True
            end = sql.find("*/", i + 2)
            i = n if end < 0 else end + 2
            continue
        if ch == ";":
            if content:
                spans.append((start, i))
            start, content = i + 1, False
        elif not ch.isspace():
            content = True
        i += 1
    if content:
        spans.append((start, n))
    return spans


def _end_of_quote(sql: str, i: int) -> int:
    """Index just past the quoted string starting at i (doubled quotes and backslashes)."""
    quote, i, n = sql[i], i + 1, len(sql)
    while i < n:
        ch = sql[i]
        if ch == "\\" and quote != "`":
            i += 2
        elif ch == quote:
            if i + 1 < n and sql[i + 1] == quote:
                i += 2
            else:
                return i + 1
        else:
            i += 1
    return n


def trim_comment_tail(sql: str) -> str:
    """The SQL without the comments and blanks after its last statement's ';'.

    MariaDB answers a comment after the last ';' with one more, empty, result, which would
    count as a statement; nothing the server runs is lost by leaving it out.
    """
    spans = _statement_spans(sql)
    if spans and spans[-1][1] < len(sql):
        return sql[:spans[-1][1] + 1]
    return sql


# --- the data -------------------------------------------------------------------------------


@dataclass(frozen=True)
class ScriptSetup(Dataset):
    """A script's data: its setup run in knoblab's own database, or over the data of
    [dataset] (a dump), in that data's database."""

    setup: str  # SQL run once into the data template (DDL, seed rows); may be ""
    base: Dataset | None = None  # [dataset]: built first, the setup after it

    @property
    def key(self) -> str:
        """Names the template datadir: the setup text (and the data under it, when there is
        any) determines its data."""
        setup = hashlib.sha256(self.setup.encode()).hexdigest()[:12]
        if self.base is None:
            return "script-" + setup
        return self.base.key + ("-setup-" + setup if self.setup.strip() else "")

    @property
    def workload_database(self) -> str | None:
        return self.base.workload_database if self.base else DATABASE

    def label(self, then: str = "") -> str:
        if self.base is None:
            return f"the script's setup{then}"
        return self.base.label((", then the script's setup" if self.setup.strip() else "")
                               + then)

    def estimated_bytes(self) -> int:
        # A setup's tables: unknown, and small in every use seen so far.
        return self.base.estimated_bytes() if self.base else 0

    def describe(self, datadir: Path | None) -> dict[str, object] | None:
        # Without data under it the setup makes the tables; the workload's description holds
        # its text.
        return self.base.describe(datadir) if self.base else None

    def check_running_server(self, where: str) -> None:
        """A script runs on a running server too (its tables live in knoblab's database);
        the data under it may not."""
        if self.base is not None:
            self.base.check_running_server(where)

    def pinned(self) -> dict[str, object]:
        return self.base.pinned() if self.base else {}

    def build(self, server: Server, progress: Progress | None = None) -> None:
        """The data under it, then the database (the data's exists) and `setup` in it;
        UserError naming the failing statement."""
        if self.base is not None:
            self.base.build(server, progress)
        conn = server.connect(client_flag=CLIENT.MULTI_STATEMENTS)
        try:
            with conn.cursor() as cur:
                if self.base is None:  # knoblab's own there (a plain name)
                    cur.execute(f"CREATE DATABASE IF NOT EXISTS `{server.database}`")
                database = self.database_on(server)
                if database is not None:
                    cur.execute(f"USE {quoted(database)}")
                if not split_statements(self.setup):
                    return  # sending only comments/blanks gets "Query was empty"
                done = 0
                try:
                    cur.execute(trim_comment_tail(self.setup))
                    done = 1
                    while cur.nextset():
                        done += 1
                except pymysql.MySQLError as exc:
                    raise UserError(f"script setup failed at statement {done + 1}: "
                                    f"{_error_text(exc)}") from None
        finally:
            conn.close()


# --- the workload ---------------------------------------------------------------------------


def _whole(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


@dataclass(frozen=True)
class ScriptWorkload(Timed):
    """A SQL body run by K connections, N times each; the measurement is its wall time."""

    kind: ClassVar[str] = "script"
    parameters: ClassVar[tuple[str, ...]] = ()
    keys: ClassVar[Keys] = Keys(
        Key("kind", "A SQL body run by several connections, many times each; the measurement "
            "is its wall time.", "text", choices=("script",)),
        Key("setup", "SQL run once into the data template: tables, seed rows."),
        Key("body", "SQL one iteration runs, one or several statements; {connection} (1..K), "
            "{iteration} (0..N-1) and {row} (unique across connections) become numbers."),
        Key("setup_file", "A file holding the setup, beside the spec (instead of setup)."),
        Key("body_file", "A file holding the body, beside the spec (instead of body)."),
        Key("connections", "Connections running the body at once.", "a whole number", "1", 1,
            10_000),
        Key("iterations", "Times each connection runs the body.", "a whole number", "1000", 1,
            10**9),
        Key("transaction", "Iterations committed together in one transaction (1: "
            "autocommit).", "a whole number", "1", 1, 10**9),
        Key("timeout", "Seconds one run may take before it is stopped and the measurement "
            "failed.", "a number of seconds", "3600", 0.001, 7 * 86400),
    ) | Rounds.KEYS

    setup: str  # SQL run once into the data template (DDL, seed rows); may be ""
    body: str  # SQL one iteration runs; may hold several statements
    connections: int = 1  # K concurrent connections
    iterations: int = 1000  # per connection
    transaction: int = 1  # iterations per transaction; 1 = autocommit
    timeout: float = 3600.0  # seconds for the whole timed body
    rounds: Rounds = Rounds()
    data: Dataset | None = None  # [dataset] (a dump): built before the setup, which may be ""
    # A body that may write: every measurement starts from freshly set-up tables (a server
    # start each, or a rebuild on a running server). One that only reads shares a start.
    writes_data: bool = True

    def __post_init__(self) -> None:
        if not isinstance(self.setup, str):
            raise UserError("[workload] setup must be SQL text (a string); use \"\" for none")
        if not isinstance(self.body, str) or not self.body.strip():
            raise UserError("[workload] body is empty: give the SQL one iteration runs, e.g. "
                            "body = \"INSERT INTO t (id) VALUES ({row})\"")
        if not split_statements(self.body):
            raise UserError("[workload] body holds only comments: give at least one SQL "
                            "statement")
        for key, least in (("connections", 1), ("iterations", 1), ("transaction", 1)):
            value = getattr(self, key)
            if not _whole(value) or value < least:
                raise UserError(f"[workload] {key} = {value!r}: must be a whole number of at "
                                f"least {least}")
        if isinstance(self.timeout, bool) or not isinstance(self.timeout, int | float) \
                or not math.isfinite(self.timeout) or self.timeout <= 0:
            raise UserError(f"[workload] timeout = {self.timeout!r}: must be a number of "
                            "seconds above 0")

    # -- the spec -----------------------------------------------------------------------------

    @classmethod
    def from_spec(cls, workload: dict[str, Any], dataset: dict[str, Any],
                  sweep: dict[str, list[Any]], base_dir: Path | None) -> ScriptWorkload:
        data = datasets.read(dataset, base_dir, sweep, refused={ScanTable.kind: (
            "[dataset]: a script makes its own tables in its setup, or runs on a dump "
            "([dataset] dump = \"FILE\"); remove the other keys of [dataset]")}) \
            if dataset else None
        texts = {}
        for part in ("setup", "body"):
            if part in workload and f"{part}_file" in workload:
                raise UserError(f"[workload] give {part} or {part}_file, not both")
            if f"{part}_file" in workload:
                name = section.text(workload, f"{part}_file", "workload", "")
                path = (base_dir or Path.cwd()) / name
                try:
                    texts[part] = path.read_text(encoding="utf-8")
                except (OSError, UnicodeDecodeError, ValueError) as exc:
                    reason = getattr(exc, "strerror", None) or (
                        "not UTF-8 text" if isinstance(exc, UnicodeDecodeError)
                        else "not a file name")
                    raise UserError(f"[workload] {part}_file = {name!r}: cannot read {path}: "
                                    f"{reason}") from None
            else:
                texts[part] = section.text(workload, part, "workload", "")
            refuse_admin(texts[part], f"[workload] {part}" +
                         ("_file" if f"{part}_file" in workload else ""))

        def whole(key: str, default: int, high: int) -> int:
            return int(section.number(workload, key, "workload", default, int, 1, high))

        return cls(
            setup=texts["setup"], body=texts["body"],
            connections=whole("connections", 1, 10_000),
            iterations=whole("iterations", 1000, 10**9),
            transaction=whole("transaction", 1, 10**9),
            timeout=section.number(workload, "timeout", "workload", 3600.0, float, 0.001,
                                   7 * 86400.0),
            rounds=Rounds.from_spec(workload),
            data=data,
            writes_data=not reads_only(texts["body"]),
        )

    def parameter_axis(self, name: str, values: list[Any]) -> list[str]:
        raise UserError(f"[sweep] {name}: a script sweeps server settings only")

    def dataset(self, requested: Mapping[str, str]) -> ScriptSetup:
        return ScriptSetup(self.setup, self.data)

    def connections_for(self, requested: Mapping[str, str]) -> int:
        return self.connections + 2  # its own, and knoblab's for counters and settings

    # -- the measurement ----------------------------------------------------------------------

    def measure(self, server: Server, requested: Mapping[str, str], session_knobs: list[str],
                recorder: Recorder) -> Measured:
        with SecondSampler(server.pid) as sampler:
            measurement = self.run_body(server)
        recorder.os_seconds(sampler.take())
        return Measured(measurement.seconds, {**measurement.details, "rows": measurement.rows})

    def warm_up(self, server: Server, requested: Mapping[str, str],
                session_knobs: list[str]) -> None:
        """The body's work, not kept: when every iteration does the same work (no {iteration}
        or {row} in it), one transaction's worth on each connection touches what all of them
        touch; otherwise the whole of it."""
        varies = {"iteration", "row"} & set(_PLACEHOLDER.findall(self.body))
        once = self if varies else replace(
            self, iterations=min(self.iterations, self.transaction))
        once.run_body(server)

    def run_body(self, server: Server) -> Measurement:
        """Run the body on K connections at once; seconds from the common start to the last
        worker's finish. WorkloadError on any SQL error (all workers stop) or the timeout.

        details["statements"] counts the result sets the server returned for the body (BEGIN
        and COMMIT left out): exact for plain statements, one per result inside a compound
        block. details["client_cpu_seconds"] near seconds x connections means the Python
        client, not the server, set the pace.
        """
        run = _Run(self, server)
        try:
            run.open()
            run.start()
            with Observation(server) as seen:
                run.go()
        finally:
            run.shut_down()
        seconds = run.seconds
        figures = seen.result["os"]
        # As in query.py: the server's CPU time against the wall clock says whether it kept a
        # core busy; the machine's iowait whether it waited for the disk (fsyncs) instead.
        cpu_share = figures["server_cpu_seconds"] / seconds if seconds > 0 else 0.0
        rows = self.connections * self.iterations
        statements = sum(w.statements for w in run.workers)
        transactions = sum(w.commits for w in run.workers) if self.transaction > 1 else rows
        return Measurement(seconds, rows, {
            "statements": statements,
            "statements_per_iteration": round(statements / rows, 3),
            "transactions": transactions,
            "per_connection_seconds": [round(w.finished - run.began, 6) for w in run.workers],
            "iterations_per_second": round(rows / seconds, 3) if seconds > 0 else None,
            "client_cpu_seconds": round(sum(w.cpu_seconds for w in run.workers), 4),
            "cpu_seconds": figures["server_cpu_seconds"],
            "cpu_share": round(cpu_share, 3),
            "iowait_share": figures["cpu_iowait"],
            "read_bytes": figures["server_read_bytes"],
            "write_bytes": figures["server_write_bytes"],
            "regime": regime(cpu_share, figures["cpu_iowait"],
                             figures["server_read_bytes"] + figures["server_write_bytes"]),
            "os": figures,
            "status": seen.result["status"],
            "levels": seen.result["levels"],
        })

    def describe(self) -> dict[str, object]:
        """A plain dict for the results JSON."""
        return {
            "kind": "script",
            "connections": self.connections,
            "iterations": self.iterations,
            "transaction": self.transaction,
            "statements_per_iteration": len(split_statements(self.body)),  # best-effort
            "timeout": self.timeout,
            "setup": self.setup,
            "body": self.body,
            **self.dataset({}).pinned(),
        }


def _error_text(exc: BaseException) -> str:
    if isinstance(exc, pymysql.MySQLError) and len(exc.args) >= 2:
        text = f"({exc.args[0]}) {exc.args[1]}"
    else:
        text = f"{type(exc).__name__}: {exc}"
    return " ".join(text.split())  # one line: a 1064 quotes the SQL near the error, newlines too


@dataclass
class _Worker:
    connection: int  # 1-based, as in {connection}
    conn: pymysql.Connection
    thread_id: int  # the server's connection id, for KILL
    thread: threading.Thread | None = None
    statements: int = 0
    commits: int = 0
    finished: float = 0.0
    cpu_seconds: float = 0.0
    completed: bool = False


class _Run:
    """One measurement's workers, their shared signals, and the clean-up after them."""

    def __init__(self, workload: ScriptWorkload, server: Server) -> None:
        self.workload = workload
        self.server = server
        self.template = BodyTemplate(trim_comment_tail(workload.body))
        self.workers: list[_Worker] = []
        self.stop = threading.Event()  # checked between iterations
        self.wake = threading.Event()  # the main thread: all done, or a failure
        self.lock = threading.Lock()
        self.failure: str | None = None
        self.done = 0
        self.began = 0.0
        self.seconds = 0.0
        # The main thread is a party too: it releases the workers once Observation has read
        # the counters, so the observed interval holds the timed part and little else.
        self.barrier = threading.Barrier(workload.connections + 1, action=self._release)

    def _release(self) -> None:
        self.began = time.perf_counter()

    def open(self) -> None:
        """All K connections before the clock: connecting is not part of the measurement."""
        socket_timeout = math.ceil(self.workload.timeout) + STOP_GRACE
        # where the setup ran: the data's database, else knoblab's own there
        database = self.workload.dataset({}).database_on(self.server)
        for connection in range(1, self.workload.connections + 1):
            try:
                conn = self.server.connect(database,
                                           client_flag=CLIENT.MULTI_STATEMENTS,
                                           read_timeout=socket_timeout,
                                           write_timeout=socket_timeout)
            except pymysql.MySQLError as exc:
                raise WorkloadError(f"script connection {connection} failed: "
                                    f"{_error_text(exc)}") from None
            self.workers.append(_Worker(connection, conn, conn.thread_id()))

    def start(self) -> None:
        for worker in self.workers:
            worker.thread = threading.Thread(target=self._work, args=(worker,), daemon=True,
                                             name=f"knoblab-script-{worker.connection}")
            worker.thread.start()

    def go(self) -> None:
        """Release the workers and wait for them, the first failure, or the timeout."""
        self.barrier.wait()
        remaining = self.workload.timeout - (time.perf_counter() - self.began)
        self.wake.wait(max(remaining, 0.0))
        with self.lock:
            if self.failure is not None:
                raise WorkloadError(self.failure)
            if self.done < len(self.workers):
                self.stop.set()  # from here on the workers' errors are the kill's echo
                raise WorkloadError(
                    f"script body exceeded the timeout of {self.workload.timeout:g} s")
        self.seconds = max(w.finished for w in self.workers) - self.began

    def shut_down(self) -> None:
        """Stop every worker and close every connection, whatever happened."""
        if not all(w.completed for w in self.workers):
            self.stop.set()
            self.barrier.abort()  # workers still at the barrier leave at once
            self._kill([w for w in self.workers if w.thread and w.thread.is_alive()])
        deadline = time.monotonic() + STOP_GRACE
        for worker in self.workers:
            if worker.thread is None:
                _close(worker.conn)  # never handed to a thread
            else:
                worker.thread.join(max(deadline - time.monotonic(), 0.0))
        # A thread still alive here is stuck on a dead socket: its read_timeout ends it, and it
        # closes its connection itself.

    def _kill(self, workers: list[_Worker]) -> None:
        # A statement in progress (a SLEEP, a lock wait) only ends when the server ends it.
        if not workers:
            return
        try:
            conn = self.server.connect(connect_timeout=5)
        except pymysql.MySQLError:
            return  # the server is gone, and the workers' sockets with it
        try:
            with conn.cursor() as cur:
                for worker in workers:
                    # 1094 unknown thread: it already ended.
                    with contextlib.suppress(pymysql.MySQLError):
                        cur.execute(f"KILL CONNECTION {worker.thread_id}")
        finally:
            conn.close()

    def _fail(self, worker: _Worker, where: str, exc: BaseException) -> None:
        with self.lock:
            if self.failure is None and not self.stop.is_set():
                self.failure = (f"script body failed on connection {worker.connection}, {where}: "
                                f"{_error_text(exc)}")
            self.stop.set()
        self.wake.set()

    def _work(self, worker: _Worker) -> None:
        conn, workload = worker.conn, self.workload
        per_txn, total = workload.transaction, workload.iterations
        first_row = (worker.connection - 1) * total + 1
        try:
            cur = conn.cursor()
            try:
                self.barrier.wait()
            except threading.BrokenBarrierError:
                return  # the run was called off before the start
            cpu = time.thread_time()
            where = "iteration 0"
            try:
                for iteration in range(total):
                    if self.stop.is_set():
                        return
                    if per_txn > 1 and iteration % per_txn == 0:
                        where = f"BEGIN before iteration {iteration}"
                        cur.execute("BEGIN")
                    where = f"iteration {iteration}"
                    cur.execute(self.template.render(worker.connection, iteration,
                                                     first_row + iteration))
                    worker.statements += 1
                    while cur.nextset():  # an error in a later statement surfaces here
                        worker.statements += 1
                    if per_txn > 1 and (iteration % per_txn == per_txn - 1
                                        or iteration == total - 1):
                        where = f"COMMIT after iteration {iteration}"
                        cur.execute("COMMIT")
                        worker.commits += 1
            except Exception as exc:  # any failure stops the run; its message is the result
                self._fail(worker, where, exc)
                return
            finally:
                worker.finished = time.perf_counter()
                worker.cpu_seconds = time.thread_time() - cpu
            with self.lock:
                worker.completed = True
                self.done += 1
                if self.done == len(self.workers):
                    self.wake.set()
        finally:
            _close(conn)


def _close(conn: pymysql.Connection) -> None:
    with contextlib.suppress(pymysql.MySQLError):  # already closed
        conn.close()
