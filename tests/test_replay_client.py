"""The replay's client (sysbench's LuaJIT threads playing a plan through libmariadb): what it
plays and counts, and how it stops."""

from __future__ import annotations

import struct
import threading
import time
from pathlib import Path

import psutil
import pytest

from knoblab.capture.fingerprint import fingerprint_id
from knoblab.errors import UserError
from knoblab.workloads.base import WorkloadError
from tests.test_hardening_replay import _general, _shop, _sql, _workload

pytestmark = pytest.mark.server

CONNECT = "261125  5:00:00\t    {thread} Connect\troot@localhost on shop using Socket\n"


def _session(thread: int, *statements: str) -> str:
    return CONNECT.format(thread=thread) + "".join(
        f"\t\t    {thread} Query\t{statement}\n" for statement in statements)


def _class(measured, statement: str) -> dict:
    from knoblab.capture.fingerprint import fingerprint

    return measured.details["classes"][fingerprint_id(fingerprint(statement))]


def test_long_sessions_multiple_results_and_nulls_are_played_whole(sandbox, tmp_path: Path):
    _shop(sandbox, "CREATE PROCEDURE shop.two() BEGIN SELECT 1; SELECT a FROM t; END")
    # 3,000 statements of 1 KiB: a session's records span several of the client's reads.
    padded = [f"SELECT a FROM t WHERE id = {i % 3 + 1} /* {'x' * 1000} */" for i in range(3000)]
    log = _general(tmp_path, _session(10, *padded, "SELECT 1; SELECT a FROM t", "CALL two()",
                                      "SELECT NULL, a FROM t WHERE id = 2")
                   + _session(11, "SELECT a FROM t WHERE id = 5"))
    measured = _workload(log).replay(sandbox)
    details = measured.details
    assert details["statements"] == 3004 and details["errors"] == 0
    # Session 11's statement is of the same class (comments are no part of it); its id has no row.
    assert _class(measured, padded[0])["n"] == 3001
    assert _class(measured, padded[0])["rows"] == 3000
    # Every result of a statement is read: the one after it runs, unhindered.
    assert _class(measured, "SELECT 1; SELECT a FROM t")["rows"] == 4
    assert _class(measured, "CALL two()")["rows"] == 4
    assert _class(measured, "SELECT NULL, a FROM t WHERE id = 2")["rows"] == 1
    assert details["client_cpu_seconds"] > 0 and details["wall_seconds"] > 0


def test_the_rows_checksum_is_the_rows_whatever_their_order(sandbox, tmp_path: Path):
    _shop(sandbox)

    def checksum(statement: str, name: str) -> str:
        log = _general(tmp_path, _session(10, statement), name)
        return _class(_workload(log).replay(sandbox), statement)["checksum"]

    up = checksum("SELECT id, a FROM t ORDER BY a", "up.log")
    assert up == checksum("SELECT id, a FROM t ORDER BY a DESC", "down.log")
    assert up != checksum("SELECT id, a + 1 FROM t ORDER BY a", "plus.log")
    # A NULL is not an empty string.
    assert checksum("SELECT NULL", "null.log") != checksum("SELECT ''", "empty.log")


def _replay_connections(server) -> list[tuple[object, ...]]:
    return _sql(server, "SELECT ID FROM information_schema.PROCESSLIST "
                        "WHERE USER = 'knoblab_data'")


def _clients() -> list[psutil.Process]:
    return [p for p in psutil.Process().children(recursive=True) if p.name() == "sysbench"]


def test_a_replay_past_its_timeout_is_stopped_in_the_client_and_on_the_server(
        sandbox, tmp_path: Path, knoblab_home: Path):
    _shop(sandbox)
    log = _general(tmp_path, _session(10, "SELECT SLEEP(60)") + _session(11, "SELECT SLEEP(60)"))
    began = time.monotonic()
    with pytest.raises(WorkloadError, match="exceeded the timeout of 1 s"):
        _workload(log, timeout=1).replay(sandbox)
    assert time.monotonic() - began < 20
    assert _replay_connections(sandbox) == [] and _clients() == []
    assert not list(knoblab_home.glob("replay-*"))  # its folder is gone


def test_a_connection_the_server_kills_stops_the_replay_saying_so(sandbox, tmp_path: Path):
    _shop(sandbox)
    log = _general(tmp_path, _session(10, "SELECT SLEEP(30)", "SELECT 1"))

    def kill() -> None:
        for _ in range(200):
            found = _replay_connections(sandbox)
            if found:
                _sql(sandbox, f"KILL CONNECTION {int(found[0][0])}")  # type: ignore[call-overload]
                return
            time.sleep(0.05)

    killer = threading.Thread(target=kill)
    killer.start()
    try:
        with pytest.raises(WorkloadError, match=r"the server dropped a replay connection: "
                                                r"\((2013|1927|2006)\)"):
            _workload(log).replay(sandbox)
    finally:
        killer.join()
    assert _clients() == []


# --- statements the application prepared --------------------------------------------------------

def _executes(thread: int, *statements: str) -> str:
    return CONNECT.format(thread=thread) + "".join(
        f"\t\t    {thread} Execute\t{statement}\n" for statement in statements)


def _statement_counters(server) -> dict[str, int]:
    return {name.lower(): int(value) for name, value in _sql(
        server, "SHOW GLOBAL STATUS WHERE Variable_name IN ('Com_stmt_prepare', "
                "'Com_stmt_execute')")}  # type: ignore[misc]


def test_what_the_application_prepared_is_replayed_prepared_with_its_values(
        sandbox, tmp_path: Path):
    _shop(sandbox, "CREATE TABLE shop.notes (id INT PRIMARY KEY, body TEXT)")
    # An Execute shows the statement with its values in place, quoted and escaped; no Prepare
    # line is needed (a pooled connection prepared its statements before the window).
    executes = ["SELECT a FROM t WHERE id = 2", "SELECT a FROM t WHERE id = 3",
                r"INSERT INTO notes VALUES (1, 'it''s \\ a\nnote')",
                "SELECT id, body FROM notes WHERE body LIKE 'it%' ORDER BY 1",
                "SELECT CAST(a AS CHAR(1)) FROM t WHERE id BETWEEN 1 AND 2",
                "SELECT NULL, a FROM t WHERE id = -1 + 2"]
    log = _general(tmp_path, _executes(10, *executes) + _session(11, "SELECT a FROM t"))
    workload = _workload(log, design="restarts")
    assert workload.plan.prepared == 6 and workload.plan.summary()["source"] == "general"
    before = _statement_counters(sandbox)
    measured = workload.replay(sandbox)
    after = _statement_counters(sandbox)
    assert measured.details["errors"] == 0 and "prepared_as_text" not in measured.details
    # One statement prepared per form, in its session; each execution executes it.
    assert after["com_stmt_execute"] - before["com_stmt_execute"] == 6
    assert after["com_stmt_prepare"] - before["com_stmt_prepare"] == 5
    assert _class(measured, executes[0])["n"] == 2 and _class(measured, executes[0])["rows"] == 2
    # The string went in as written: its quote, backslash and line break were values.
    assert _sql(sandbox, "SELECT body FROM shop.notes") == [("it's \\ a\nnote",)]
    assert _class(measured, executes[3])["rows"] == 1
    assert _class(measured, executes[4])["rows"] == 2  # CHAR(1): a length, not a value
    assert _class(measured, executes[5])["rows"] == 1
    # Told not to, it runs them as text.
    _sql(sandbox, "DELETE FROM shop.notes")
    before = _statement_counters(sandbox)
    again = _workload(log, design="restarts", prepared=False)
    assert any("are replayed as text" in note for note in again.warnings)
    again.replay(sandbox)
    assert _statement_counters(sandbox) == before


def test_a_statement_the_server_will_not_prepare_runs_as_text_and_is_counted(
        sandbox, tmp_path: Path):
    _shop(sandbox)
    # SHOW takes no placeholder: its prepared form is refused; its executions run as text.
    log = _general(tmp_path, _executes(10, "SHOW TABLES LIKE 't'", "SHOW TABLES LIKE 'u'",
                                       "SELECT a FROM t WHERE id = 1"))
    measured = _workload(log).replay(sandbox)
    assert measured.details["errors"] == 0 and measured.details["prepared_as_text"] == 2
    assert _class(measured, "SHOW TABLES LIKE 't'")["as_text"] == 2
    assert _class(measured, "SHOW TABLES LIKE 't'")["rows"] == 1


def test_a_slow_log_cannot_tell_what_was_prepared_and_says_so(tmp_path: Path):
    log = tmp_path / "slow.log"
    log.write_text("# Time: 261125  5:00:00\n# User@Host: root[root] @ localhost []  Id:    10\n"
                   "# Query_time: 0.000100  Lock_time: 0.000000 Rows_sent: 1  Rows_examined: 1\n"
                   "SET timestamp=1764046800;\nSELECT 1;\n")
    workload = _workload(log)
    assert workload.plan.source == "slow" and workload.plan.prepared == 0
    assert any("a slow log does not say which statements the application prepared" in note
               for note in workload.warnings)


@pytest.mark.parametrize(("sql", "template", "values"), [
    ("SELECT c FROM t WHERE id BETWEEN 5 AND 9 ORDER BY c",
     "SELECT c FROM t WHERE id BETWEEN ? AND ? ORDER BY c",
     [(b"i", (5).to_bytes(8, "little")), (b"i", (9).to_bytes(8, "little"))]),
    # Positions, type lengths, NULL, TRUE, hex and introduced strings stay as written.
    ("SELECT a FROM t GROUP BY 1, 2 ORDER BY 2 DESC, 1 LIMIT 10",
     "SELECT a FROM t GROUP BY 1, 2 ORDER BY 2 DESC, 1 LIMIT ?",
     [(b"i", (10).to_bytes(8, "little"))]),
    ("SELECT CAST(a AS DECIMAL(10, 2)), NULL, TRUE, 0x1F, _binary'x' FROM t",
     "SELECT CAST(a AS DECIMAL(10, 2)), NULL, TRUE, 0x1F, _binary'x' FROM t", []),
    # Typed as the server types the literal: beyond 64 bits or not whole, the number's text
    # (a DECIMAL); in exponent form, a DOUBLE; up to 2^64 - 1, a BIGINT UNSIGNED.
    ("SELECT 18446744073709551616, 1.50, -2e3, .5, 18446744073709551615",
     "SELECT ?, ?, -?, ?, ?",
     [(b"d", b"18446744073709551616"), (b"d", b"1.50"), (b"f", struct.pack("<d", 2000.0)),
      (b"d", b".5"), (b"u", (2**64 - 1).to_bytes(8, "little"))]),
    # The server's escapes: \n a line break, \% kept for LIKE, a doubled quote one quote;
    # strings side by side are one. A double-quoted string is a name under ANSI_QUOTES (and
    # a logged value is always single-quoted): it stays, as does an empty one.
    ("SELECT 'a\\'b''c\\n\\%' 'd', \"e\", ''", "SELECT ?, \"e\", ''",
     [(b"s", b"a'b'c\n\\%d")]),
    # Typed literals, aliases and collations are syntax; a number after a name's dot is one.
    ("SELECT DATE '2025-11-25', a AS 'x', b COLLATE 'utf8mb4_bin', t.5 FROM t",
     "SELECT DATE '2025-11-25', a AS 'x', b COLLATE 'utf8mb4_bin', t.5 FROM t", []),
])
def test_a_prepared_statements_form_takes_its_literals_as_parameters(sql, template, values):
    from knoblab.capture.fingerprint import prepared_form

    form = prepared_form(sql)
    assert form is not None and form.template == template
    assert list(form.parameters) == values


def test_executions_without_their_values_are_left_out_and_counted(tmp_path: Path):
    from knoblab.capture.plan import VALUELESS

    # A statement prepared before the log was on: the log shows ? for its values.
    log = _general(tmp_path, _executes(10, "SELECT a FROM t WHERE id = ?",
                                       "SELECT a FROM t WHERE id = 2", "SELECT '?' FROM t"))
    plan = _workload(log).plan
    assert plan.skipped == {VALUELESS: 1} and plan.statements == 2 and plan.prepared == 2


# --- slices of a capture -------------------------------------------------------------------------

def _timed(seconds: int, threads: tuple[int, ...], late: tuple[int, ...] = (),
           joining: int = 0) -> str:
    """A connection for each thread, then one statement a second from each, for `seconds`;
    the `late` threads connect at `joining` seconds and go on alike."""
    lines = []
    for second in range(seconds):
        entries = [f"{t} Connect\troot@localhost on shop using Socket"
                   for t in (threads if second == 0 else late if second == joining else ())]
        entries += [f"{t} Query\tSELECT a FROM t WHERE id = {second % 3 + 1}"
                    for t in threads + (late if second >= joining else ())]
        for index, entry in enumerate(entries):
            head = f"261125  5:00:{second:02d}\t" if index == 0 else "\t\t"
            lines.append(f"{head}    {entry}\n")
    return "".join(lines)


def test_a_slice_replays_the_first_seconds_or_a_share_of_the_sessions(sandbox, tmp_path: Path):
    _shop(sandbox)
    # Four connections from the start for 10 s; two more that begin at 6 s.
    log = _general(tmp_path, _timed(10, (10, 11, 12, 13), late=(20, 21), joining=6))
    whole = _workload(log)
    assert whole.plan.sessions == 6 and whole.plan.statements == 48
    first = _workload(log, slice="3s")
    assert first.slice is not None and len(first.replayed_sessions()) == 4
    assert any("the first 3 s (4 of its 6 sessions)" in note for note in first.warnings)
    # The sessions begun by then, each up to then: 0, 1, 2 and 3 s.
    assert first.replay(sandbox).details["statements"] == 4 * 4
    half = _workload(log, slice="50%")
    assert list(half.replayed_sessions()) == [0, 2, 5]  # spread over the capture, whole
    assert half.replay(sandbox).details["statements"] == 10 + 10 + 4
    assert half.describe()["slice"] == {"share": 0.5}
    # The tune's cheap measurement: the same replay, sliced.
    assert whole.sliced(first.slice).replay(sandbox).details["statements"] == 16


@pytest.mark.parametrize(("raw", "said"), [
    ("0%", "a share of the sessions is a percentage above 0 and at most 100"),
    ("150%", "a share of the sessions is a percentage above 0 and at most 100"),
    ("half", "is not a duration"),
    (-3, "is not a duration"),
])
def test_a_bad_slice_is_one_line(tmp_path: Path, raw: object, said: str):
    log = _general(tmp_path, _timed(3, (10,)))
    with pytest.raises(UserError, match=said):
        _workload(log, slice=raw)


def test_a_log_without_times_is_sliced_by_its_sessions_only(tmp_path: Path):
    log = tmp_path / "untimed.log"
    log.write_text("/usr/sbin/mariadbd, Version: 10.11.19-MariaDB. started with:\n"
                   "Tcp port: 0  Unix socket: /tmp/x.sock\nTime\t\t    Id Command\tArgument\n"
                   "\t\t    10 Query\tSELECT 1\n\t\t    11 Query\tSELECT 2\n")
    with pytest.raises(UserError, match="the log holds no times to cut it by; give a share"):
        _workload(log, slice="10s")
    assert len(_workload(log, slice="50%").replayed_sessions()) == 1


# --- what a prepared replay reads and sends ------------------------------------------------------

def _commands(thread: int, *commands: tuple[str, str]) -> str:
    """A session of (command, argument) lines: Execute, Query, ..."""
    return CONNECT.format(thread=thread) + "".join(
        f"\t\t    {thread} {command}\t{argument}\n" for command, argument in commands)


def _replayed_both_ways(sandbox, log: Path, reset: str | None = None):
    """The log replayed prepared, then as text (after `reset`): both measurements."""
    prepared = _workload(log, design="restarts").replay(sandbox)
    assert "prepared_as_text" not in prepared.details
    if reset:
        _sql(sandbox, reset)
    return prepared, _workload(log, design="restarts", prepared=False).replay(sandbox)


def test_rows_are_counted_and_summed_alike_whatever_protocol_carried_them(
        sandbox, tmp_path: Path):
    # Values of every kind, two texts alike in their first 300 bytes, a procedure of two
    # results.
    _shop(sandbox, "CREATE TABLE shop.kinds (id INT PRIMARY KEY, f FLOAT, d DOUBLE, "
                   "n DECIMAL(20, 5), dt DATETIME(6), tm TIME(3), y YEAR, bits BIT(10), "
                   "z INT(6) ZEROFILL, u BIGINT UNSIGNED, e ENUM('a', 'b'), body TEXT, "
                   "bin VARBINARY(20))",
          "INSERT INTO shop.kinds VALUES (1, 123456789, 0.1 + 0.2e0, -12345.678, "
          "'2024-01-02 03:04:05.123456', '-838:59:59', 2024, b'1010101010', 42, "
          f"18446744073709551615, 'b', '{'x' * 300}a', x'00ff00'), (2, NULL, 1.5e300, 0, "
          f"'2024-02-29 00:00:00', '00:00:00.5', NULL, b'1', 7, 0, 'a', '{'x' * 300}b', '')",
          "CREATE PROCEDURE shop.two(k INT) BEGIN SELECT id, body FROM kinds WHERE id = k; "
          "SELECT id FROM kinds; END")
    statements = ["SELECT * FROM kinds WHERE id = 1", "SELECT * FROM kinds WHERE id >= 2",
                  "SELECT body FROM kinds WHERE id = 1", "SELECT body FROM kinds WHERE id + 0 = 2",
                  "CALL two(1)", "SELECT f * 2, d / 3, n + 1.5, 1e0 / 3 FROM kinds"]
    prepared, text = _replayed_both_ways(sandbox, _general(tmp_path, _executes(10, *statements)))
    for statement in statements:
        assert _class(prepared, statement)["rows"] == _class(text, statement)["rows"] > 0
        assert _class(prepared, statement)["checksum"] == _class(text, statement)["checksum"]
    # Every result of a procedure is read; a value is read whole, past its first bytes.
    assert _class(prepared, "CALL two(1)")["rows"] == 3
    assert _class(prepared, statements[2])["checksum"] != \
        _class(prepared, statements[3])["checksum"]


def test_prepared_values_are_those_the_text_means_in_its_sql_mode(sandbox, tmp_path: Path):
    _shop(sandbox, "CREATE TABLE shop.notes (id INT PRIMARY KEY, body VARCHAR(100), f DOUBLE, "
                   "big BIGINT UNSIGNED)")
    # The log shows a value as the session's sql_mode reads it: with backslash escapes by
    # default, as written under NO_BACKSLASH_ESCAPES.
    log = _general(tmp_path, _commands(
        10, ("Execute", "INSERT INTO notes VALUES (1, 'x', 1.5e300, 18446744073709551615)"),
        ("Execute", r"INSERT INTO notes VALUES (2, 'C:\\new', -1e-300, 0)"),
        ("Query", "SET SESSION sql_mode = 'NO_BACKSLASH_ESCAPES'"),
        ("Execute", r"INSERT INTO notes VALUES (3, 'C:\new', 1, 1)"),
        ("Execute", r"INSERT INTO notes VALUES (4, 'it''s \', .5, 2)"),
        # A name in double quotes (a logged value is always in single ones).
        ("Query", "SET sql_mode = 'ANSI_QUOTES'"),
        ("Execute", "SELECT \"body\", 'a\\\\b' FROM notes WHERE id = 2"),
        ("Query", "SET sql_mode = DEFAULT"),
        ("Execute", r"SELECT id FROM notes WHERE body = 'C:\\new' AND f < 1e300"),
        ("Execute", "SELECT X'41', _latin1 0x42, b'1000011', N'd', 0x45 + 0, 1e1 / 3, "
                    "18446744073709551615 DIV 3, .5 * 3, 'a' 'b', DATE '2025-11-25' + "
                    "INTERVAL 1 DAY, _utf8mb4'c' COLLATE utf8mb4_bin, 1. + 0, 1.e1 * 2")))
    everything = "SELECT id, body, f, big FROM shop.notes ORDER BY id"
    prepared, text = _replayed_both_ways(sandbox, log, "DELETE FROM shop.notes")
    # What each statement returned is what its text returns.
    for kind, figures in prepared.details["classes"].items():
        assert (figures["rows"], figures["checksum"]) == \
            (text.details["classes"][kind]["rows"], text.details["classes"][kind]["checksum"])
    stored = _sql(sandbox, everything)
    assert stored == [(1, "x", 1.5e300, 2**64 - 1), (2, "C:\\new", -1e-300, 0),
                      (3, "C:\\new", 1.0, 1), (4, "it's \\", 0.5, 2)]
    _sql(sandbox, "DELETE FROM shop.notes")
    _workload(log, design="restarts").replay(sandbox)
    assert _sql(sandbox, everything) == stored
    select = r"SELECT id FROM notes WHERE body = 'C:\\new' AND f < 1e300"
    assert _class(prepared, select)["rows"] == _class(text, select)["rows"] == 2
    # A server whose own sql_mode has NO_BACKSLASH_ESCAPES: the session's text means other
    # values than the plan read, and it runs as text.
    _sql(sandbox, "DELETE FROM shop.notes",
         "SET GLOBAL sql_mode = CONCAT(@@GLOBAL.sql_mode, ',NO_BACKSLASH_ESCAPES')")
    other = _general(tmp_path, _executes(11, r"INSERT INTO notes VALUES (5, 'D:\new', 0, 0)"),
                     "other.log")
    measured = _workload(other, design="restarts").replay(sandbox)
    assert measured.details["prepared_as_text"] == 1
    assert _sql(sandbox, "SELECT body FROM shop.notes") == [("D:\\new",)]


@pytest.mark.parametrize(("sql", "escapes", "template", "values"), [
    (r"SELECT 'C:\new', 'a\''", True, "SELECT ?, ?", [b"C:\new", b"a'"]),
    (r"SELECT 'C:\new', 'a\'", False, "SELECT ?, ?", [b"C:\\new", b"a\\"]),
    ("SELECT 'plain'", False, "SELECT ?", [b"plain"]),
])
def test_a_prepared_form_reads_strings_in_the_sessions_sql_mode(sql, escapes, template, values):
    from knoblab.capture.fingerprint import prepared_form

    form = prepared_form(sql, escapes)
    assert form is not None and form.template == template
    assert [value for _, value in form.parameters] == values
    # Whether its values depend on the mode, and on which.
    assert form.backslashes == (escapes if "\\" in sql else None)


def test_a_prepared_select_goes_on_after_its_table_changes(sandbox, tmp_path: Path):
    _shop(sandbox, "CREATE TABLE shop.made (id INT AUTO_INCREMENT PRIMARY KEY, a INT)")
    # The application's driver reads the new columns; its executions all succeeded.
    log = _general(tmp_path, _commands(
        10, ("Execute", "SELECT * FROM t WHERE id = 1"),
        ("Execute", "SELECT * FROM t WHERE id = 2"),
        ("Query", "ALTER TABLE t ADD COLUMN b INT DEFAULT 5"),
        ("Execute", "SELECT * FROM t WHERE id = 3"), ("Execute", "SELECT * FROM t WHERE id = 1"),
        ("Execute", "INSERT INTO made (a) VALUES (1) RETURNING *"),
        ("Query", "ALTER TABLE made ADD COLUMN c INT"),
        ("Execute", "INSERT INTO made (a) VALUES (2) RETURNING *")))
    measured = _workload(log, design="restarts").replay(sandbox)
    select = _class(measured, "SELECT * FROM t WHERE id = 1")
    assert select["n"] == 4 and select["errors"] == {} and select["rows"] == 4
    assert select["reprepared"] == 1 and measured.details["prepared_again"] == 2
    # A statement that writes is never run twice: the rows are those the application made.
    assert measured.details["errors"] == 0
    assert _sql(sandbox, "SELECT id, a FROM shop.made ORDER BY id") == [(1, 1), (2, 2)]


def test_the_replay_never_sends_a_file_of_this_machine(sandbox, tmp_path: Path):
    secret = tmp_path / "secret.txt"
    secret.write_text("not for the server\n")
    # A server that asks for local files (the spec refuses local_infile; a server may still).
    _shop(sandbox, "CREATE TABLE shop.files (line TEXT)", "SET GLOBAL local_infile = ON")
    statement = f"LOAD DATA LOCAL INFILE '{secret}' INTO TABLE files"
    log = _general(tmp_path, _session(10, statement, "SELECT 1"))
    measured = _workload(log, max_failing=1.0).replay(sandbox)
    assert _class(measured, statement)["errors"]  # refused by the client
    assert _sql(sandbox, "SELECT COUNT(*) FROM shop.files") == [(0,)]
