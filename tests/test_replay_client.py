"""The replay's client (sysbench's LuaJIT threads playing a plan through libmariadb): what it
plays and counts, and how it stops."""

from __future__ import annotations

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
    # Beyond 64 bits, or not whole: the number's text, read by the server as a decimal.
    ("SELECT 18446744073709551616, 1.50, -2e3",
     "SELECT ?, ?, -?", [(b"d", b"18446744073709551616"), (b"d", b"1.50"), (b"d", b"2e3")]),
    # The server's escapes: \n a line break, \% kept for LIKE, a doubled quote one quote.
    ("SELECT 'a\\'b''c\\n\\%', \"d\"", "SELECT ?, ?", [(b"s", b"a'b'c\n\\%"), (b"s", b"d")]),
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
