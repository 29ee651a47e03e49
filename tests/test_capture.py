"""Reading captured logs (knoblab.capture): logs a real server wrote, hand-written logs in
MySQL's formats and odd cases, bad input, and the fingerprints, against pt-query-digest's
where it is installed."""

from __future__ import annotations

import re
import shutil
import subprocess
import tracemalloc
from collections import defaultdict
from pathlib import Path

import pytest

from knoblab.capture import Event, fingerprint, fingerprint_id, read_log
from knoblab.errors import UserError
from knoblab.server.binary import ServerBinary
from knoblab.server.sandbox import Sandbox, base_template

LOGS = {"slow_query_log": "1", "long_query_time": "0", "general_log": "1",
        "slow_query_log_file": "slow.log", "general_log_file": "general.log"}

# (connection, statement, fingerprint): two connections, interleaved.
SESSION = [
    ("a", "CREATE DATABASE shop", "create database shop"),
    ("a", "USE shop", "use ?"),
    ("a", "CREATE TABLE t (id INT PRIMARY KEY, name VARCHAR(50), price DECIMAL(8,2))",
     "create table t(id int primary key, name varchar(?), price decimal(?, ?))"),
    ("b", "CREATE DATABASE other", "create database other"),
    ("b", "USE other", "use ?"),
    ("b", "CREATE TABLE u (id INT)", "create table u(id int)"),
    ("a", "INSERT INTO t VALUES (1, 'it''s', 1.50), (2, 'two\nlines; # User@Host: no', 2.00),"
          "\n (3, \"dq\", -3e2)", "insert into t values(?+)"),
    ("b", "SET SESSION sort_buffer_size = 262144", "set session sort_buffer_size = ?"),
    ("a", "/* a comment */ SELECT name\n  FROM t\n  WHERE id IN (1, 2, 3) -- trailing",
     "select name from t where id in(?+)"),
    ("b", "SELECT /*+ MAX_EXECUTION_TIME(1000) */ COUNT(*) FROM u WHERE id = 5",
     "select /*+ max_execution_time(?) */ count(*) from u where id = ?"),
    ("a", "SELECT * FROM t WHERE name = 'a;b' LIMIT 10, 20",
     "select * from t where name = ? limit ?, ?"),
    ("a", "SELECT * FROM t WHERE name = 'c' LIMIT 10", "select * from t where name = ? limit ?"),
    ("b", "INSERT INTO u VALUES (1),(2),(3)", "insert into u values(?+)"),
    ("a", "UPDATE t SET price = price + 1 WHERE id = 2",
     "update t set price = price + ? where id = ?"),
    ("b", "SELECT * FROM shop.t WHERE id IN (7)", "select * from shop.t where id in(?+)"),
    ("b", "SELECT * FROM shop.t WHERE id=8", "select * from shop.t where id = ?"),
    ("b", "SELECT * FROM shop.t WHERE id = 9", "select * from shop.t where id = ?"),
]
# Where pt-query-digest groups the session's statements otherwise, and why:
PT_SPLITS = {  # one pt-query-digest class, two of knoblab's
    # `LIMIT m, n` is another statement than `LIMIT n` to the server (pt: both `limit ?`)
    "select * from t where name = ? limit ?": {"select * from t where name = ? limit ?, ?",
                                               "select * from t where name = ? limit ?"},
}
PT_MERGES = {  # one knoblab class, two of pt-query-digest's
    # knoblab spaces operators itself; pt-query-digest keeps the spacing as written
    "select * from shop.t where id = ?": {"select * from shop.t where id=?",
                                          "select * from shop.t where id = ?"},
}
_BANNER_READ_AS_SQL = re.compile(r"; \S+, version: .* started with:.*\Z")


@pytest.fixture(scope="module")
def captured(binary: ServerBinary, knoblab_home: Path,
             tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, dict[str, int]]:
    """A real server's slow and general logs of SESSION, and each connection's id."""
    folder = tmp_path_factory.mktemp("capture")
    with Sandbox(binary, base_template(binary, knoblab_home) / "data", LOGS,
                 home=knoblab_home) as server:
        connections = {name: server.connect() for name in ("a", "b")}
        ids = {name: connection.thread_id() for name, connection in connections.items()}
        for name, statement, _ in SESSION:
            with connections[name].cursor() as cursor:
                cursor.execute(statement)
        for connection in connections.values():
            connection.close()
        with server.connect() as connection, connection.cursor() as cursor:
            cursor.execute("FLUSH LOGS")  # written out before they are copied
        for name in ("slow.log", "general.log"):
            shutil.copy(server.datadir / name, folder / name)
    return folder / "slow.log", folder / "general.log", ids


def _statements(events: list[Event], ids: dict[str, int]) -> dict[str, list[Event]]:
    """Each session connection's statements, the client library's own left out."""
    by_thread: dict[str, list[Event]] = defaultdict(list)
    names = {thread: name for name, thread in ids.items()}
    for event in events:
        if event.is_statement and event.thread in names and event.text != "SET NAMES utf8mb4":
            by_thread[names[event.thread]].append(event)
    return by_thread


def _expected(name: str) -> list[tuple[str, str]]:
    return [(statement, fp) for who, statement, fp in SESSION if who == name]


@pytest.mark.server
@pytest.mark.parametrize("log", [0, 1], ids=["slow", "general"])
def test_real_logs_read_back(captured, log):
    path, ids = captured[log], captured[2]
    events = list(read_log(path))
    sessions = _statements(events, ids)
    for name in ("a", "b"):
        assert [(e.text, fingerprint(e.text)) for e in sessions[name]] == _expected(name)
        times = [e.time for e in sessions[name]]
        assert all(t is not None and t > 1.6e9 for t in times)
        assert times == sorted(times)
    # The database in effect: none before USE, then the connection's own (USE's own
    # event already in the new one, as the slow log says).
    assert [e.database for e in sessions["a"]] == [None] + ["shop"] * 7
    assert [e.database for e in sessions["b"]] == [None] + ["other"] * 8
    # The log's order interleaves the two connections as they ran.
    order = [(e.thread, e.text) for e in events if e.text in {s for _, s, _ in SESSION}]
    assert order == [(ids[who], statement) for who, statement, _ in SESSION]
    if log == 0:
        counted = sessions["a"][5]  # SELECT * ... LIMIT 10, 20 on three rows
        assert counted.rows_sent == 0 and counted.rows_examined == 3
        assert all(e.query_time is not None and e.lock_time is not None for e in events)
    else:
        commands = [e.command for e in events if e.thread == ids["a"]]
        assert commands[0] == "Connect" and commands[-1] == "Quit"


@pytest.mark.server
@pytest.mark.skipif(shutil.which("pt-query-digest") is None, reason="percona-toolkit absent")
@pytest.mark.parametrize("log", [0, 1], ids=["slow", "general"])
def test_classes_agree_with_pt_query_digest(captured, log):
    """Every event's class, by pt-query-digest (its own fingerprint, printed event by event
    with --filter) and by knoblab, partition the log's statements alike, except:

    - PT_SPLITS: pt-query-digest makes `LIMIT 10, 20` and `LIMIT 10` one class, `limit ?`;
    - PT_MERGES: pt-query-digest keeps the spacing as written (`id=?` and `id = ?`);
    - a start banner in the middle of a slow log (FLUSH LOGS, a restart: the fixture flushes)
      is read by pt-query-digest as the end of the statement before it; cut off here;
    - the administrator commands pt-query-digest makes of the general log's Connect and Quit
      lines are not statements to knoblab (its events' command, not a class).

    Texts differ otherwise without changing the classes: pt-query-digest drops hints, turns
    digits inside names into `?` (`utf?m?`) and a `+ 1` into `? ?`."""
    path, ids = captured[log], captured[2]
    kind = "slowlog" if log == 0 else "genlog"
    printed = subprocess.run(
        ["pt-query-digest", "--type", kind, "--no-version-check", "--no-report", "--filter",
         'print "$event->{fingerprint}\\n"', str(path)],
        capture_output=True, text=True, check=True, timeout=60)
    theirs = [_BANNER_READ_AS_SQL.sub("", line) for line in printed.stdout.splitlines()
              if not line.startswith("administrator command: ")]
    ours = [fingerprint(e.text) for e in read_log(path) if e.is_statement]
    assert len(theirs) == len(ours)
    to_ours: dict[str, set[str]] = defaultdict(set)
    to_theirs: dict[str, set[str]] = defaultdict(set)
    for pt, knoblab in zip(theirs, ours, strict=True):
        to_ours[pt].add(knoblab)
        to_theirs[knoblab].add(pt)
    assert {pt: found for pt, found in to_ours.items() if len(found) > 1} == PT_SPLITS
    assert {k: found for k, found in to_theirs.items() if len(found) > 1} == PT_MERGES
