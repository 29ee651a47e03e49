"""Reading captured logs (knoblab.capture): logs a real server wrote, hand-written logs in
MySQL's formats and odd cases, bad input, and the fingerprints, against pt-query-digest's
where it is installed."""

from __future__ import annotations

import json
import shutil
import subprocess
import time
import tracemalloc
from collections import Counter, defaultdict
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


@pytest.fixture(scope="module")
def captured(binary: ServerBinary, knoblab_home: Path,
             tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, dict[str, int]]:
    """A real server's slow and general logs of SESSION, and each connection's id. FLUSH LOGS
    puts a start banner in the middle of both."""
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
            cursor.execute("FLUSH LOGS")
            cursor.execute(f"SELECT '{END}'")
        _written(server.datadir, ids)
        for name in ("slow.log", "general.log"):
            shutil.copy(server.datadir / name, folder / name)
    return folder / "slow.log", folder / "general.log", ids


END = "end of the capture"


def _written(datadir: Path, ids: dict[str, int]) -> None:
    """Wait until both logs hold everything: the slow log writes an entry after the client
    has its answer, and a connection's Quit after its last entry."""
    quits = [f"{thread} Quit" for thread in ids.values()]
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        general = (datadir / "general.log").read_text(errors="replace")
        slow = (datadir / "slow.log").read_text(errors="replace")
        if all(quit_ in general for quit_ in quits) and f"SELECT '{END}';\n" in slow:
            return
        time.sleep(0.05)
    raise AssertionError("the server did not write its logs within 10 s")


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
    # The general log interleaves the two connections as they ran (the slow log writes an
    # entry when its statement has ended, so it may swap two connections' neighbours).
    order = [(e.thread, e.text) for e in events if e.text in {s for _, s, _ in SESSION}]
    if log == 1:
        assert order == [(ids[who], statement) for who, statement, _ in SESSION]
    else:
        assert sorted(order) == sorted((ids[who], statement) for who, statement, _ in SESSION)
    assert [e.text for e in events if e.is_statement][-2:] == ["FLUSH LOGS", f"SELECT '{END}'"]
    if log == 0:
        counted = sessions["a"][5]  # SELECT * ... LIMIT 10, 20 on three rows
        assert counted.rows_sent == 0 and counted.rows_examined == 3
        assert all(e.query_time is not None and e.lock_time is not None for e in events)
    else:
        commands = [e.command for e in events if e.thread == ids["a"]]
        assert commands[0] == "Connect" and commands[-1] == "Quit"


@pytest.mark.server
@pytest.mark.parametrize("log", [0, 1], ids=["slow", "general"])
def test_classes_agree_with_pt_query_digest(captured, log):
    """Every event's class, by pt-query-digest (its own fingerprint, printed event by event
    with --filter) and by knoblab, partition the log's statements alike, except:

    - PT_SPLITS: pt-query-digest makes `LIMIT 10, 20` and `LIMIT 10` one class, `limit ?`;
    - PT_MERGES: pt-query-digest keeps the spacing as written (`id=?` and `id = ?`);
    - a start banner in the middle of a slow log (FLUSH LOGS, a restart: the fixture flushes)
      is read by pt-query-digest as part of the entries around it: it is given a copy of the
      log without the banner's three lines;
    - the administrator commands pt-query-digest makes of the general log's Connect and Quit
      lines are not statements to knoblab (its events' command, not a class).

    Texts differ otherwise without changing the classes: pt-query-digest drops hints, turns
    digits inside names into `?` (`utf?m?`) and a `+ 1` into `? ?`."""
    path = captured[log].with_name("no-banner.log")
    lines = captured[log].read_bytes().splitlines(keepends=True)
    banner = [n for n, line in enumerate(lines) if n and b", Version: " in line]
    assert len(banner) == 1
    path.write_bytes(b"".join(lines[:banner[0]] + lines[banner[0] + 3:]))
    kind = "slowlog" if log == 0 else "genlog"
    printed = subprocess.run(
        ["pt-query-digest", "--type", kind, "--no-version-check", "--no-report", "--filter",
         'print "$event->{fingerprint}\\n"', str(path)],
        capture_output=True, text=True, check=True, timeout=60)
    theirs = [line for line in printed.stdout.splitlines()
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
    # Its report counts the classes as its events said, so the counts agree as well.
    report = subprocess.run(
        ["pt-query-digest", "--type", kind, "--no-version-check", "--output", "json",
         "--limit", "100%:100000", str(path)], capture_output=True, text=True, check=True,
        timeout=60)
    counts = {c["fingerprint"]: c["query_count"] for c in json.loads(report.stdout)["classes"]
              if not c["fingerprint"].startswith("administrator command: ")}
    assert counts == Counter(theirs)


# --------------------------------------------------------------------------- hand-written logs

MYSQL_SLOW = """\
/usr/sbin/mysqld, Version: 8.0.36 (MySQL Community Server - GPL). started with:
Tcp port: 3306  Unix socket: /var/run/mysqld/mysqld.sock
Time                 Id Command    Argument
# Time: 2024-01-02T03:04:05.500000Z
# User@Host: app[app] @ localhost []  Id:     8
# Query_time: 0.250000  Lock_time: 0.000010 Rows_sent: 1  Rows_examined: 100
use shop;
SET timestamp=1704164645;
SELECT c FROM t
WHERE id = 1;
# Time: 2024-01-02T03:04:06.000000Z
# User@Host: app[app] @ localhost []  Id:     9
# Query_time: 0.000100  Lock_time: 0.000000 Rows_sent: 0  Rows_examined: 0 Thread_id: 9 \
Errno: 0 Killed: 0 Bytes_received: 0 Bytes_sent: 0
SET timestamp=1704164646;
# administrator command: Quit;
/usr/sbin/mysqld, Version: 8.0.36 (MySQL Community Server - GPL). started with:
Tcp port: 3306  Unix socket: /var/run/mysqld/mysqld.sock
Time                 Id Command    Argument
# Time: 2024-01-02T03:05:00.000000Z
# User@Host: app[app] @ localhost []  Id:    10
# Query_time: 0.000000  Lock_time: 0.000000 Rows_sent: 0  Rows_examined: 0
SET last_insert_id=5,insert_id=5,timestamp=1704164700;
SET timestamp=5;
"""

MYSQL_GENERAL = """\
/usr/sbin/mysqld, Version: 8.0.36 (MySQL Community Server - GPL). started with:
Tcp port: 3306  Unix socket: /var/run/mysqld/mysqld.sock
Time                 Id Command    Argument
2024-01-02T03:04:05.250000Z\t    8 Connect\tapp@localhost on shop using Socket
2024-01-02T03:04:05.260000Z\t    8 Query\tSELECT 'multi
line', 2
2024-01-02T03:04:05.270000Z\t    8 Init DB\tother
2024-01-02T03:04:05.280000Z\t    8 Prepare\tSELECT * FROM u WHERE id = ?
2024-01-02T03:04:05.290000Z\t    8 Execute\tSELECT * FROM u WHERE id = 42
2024-01-02T03:04:05.300000Z\t    8 Close stmt\t
2024-01-02T03:04:05.310000Z\t    8 Quit
"""


def _write(tmp_path: Path, text: str | bytes, name: str = "some.log") -> Path:
    path = tmp_path / name
    path.write_bytes(text.encode() if isinstance(text, str) else text)
    return path


def test_mysql_slow_log(tmp_path):
    events = list(read_log(_write(tmp_path, MYSQL_SLOW)))
    select, quit_, late = events
    assert (select.thread, select.database, select.command) == (8, "shop", "Query")
    assert select.text == "SELECT c FROM t\nWHERE id = 1"
    # MySQL's `# Time:` is when the entry was written: it began its query time earlier.
    assert select.time == pytest.approx(1704164645.25)
    assert (select.query_time, select.lock_time, select.rows_sent,
            select.rows_examined) == (0.25, 0.00001, 1, 100)
    assert (quit_.thread, quit_.command, quit_.text, quit_.is_statement) == (9, "Quit", "",
                                                                             False)
    # A banner between entries; a statement that looks like the header's SET line.
    assert (late.thread, late.text, late.time, late.line) == (10, "SET timestamp=5",
                                                              1704164700.0, 19)


def test_mysql_general_log(tmp_path):
    events = list(read_log(_write(tmp_path, MYSQL_GENERAL)))
    assert [e.command for e in events] == ["Connect", "Query", "Init DB", "Prepare", "Execute",
                                           "Close stmt", "Quit"]
    assert [e.database for e in events] == ["shop", "shop", "other", "other", "other",
                                            "other", "other"]
    assert events[1].text == "SELECT 'multi\nline', 2"
    assert events[1].time == pytest.approx(1704164645.26)
    assert [e.is_statement for e in events] == [False, True, False, False, True, False, False]
    assert fingerprint(events[4].text) == "select * from u where id = ?"


def test_mariadb_slow_log_without_banner_and_odd_entries(tmp_path):
    """A log whose banner was rotated away; an empty Schema; extra header lines
    (log_slow_verbosity = query_plan,explain,innodb, as MariaDB 10.11 writes them); a
    statement with its own `;`, one with `#` lines inside, and bytes that are not UTF-8, kept
    as they were."""
    log = (b"# Time: 241125 14:05:09\n"
           b"# User@Host: root[root] @ localhost []\n"
           b"# Thread_id: 31  Schema:   QC_hit: No\n"
           b"# Query_time: 0.000072  Lock_time: 0.000000  Rows_sent: 0  Rows_examined: 0\n"
           b"# Rows_affected: 0  Bytes_sent: 11\n"
           b"# Pages_accessed: 1  Pages_read: 0  Pages_prefetched: 0  Pages_updated: 0  "
           b"Old_rows_read: 0\n# Pages_read_time: 0.0000  Engine_time: 0.0075\n"
           b"# Full_scan: No  Full_join: No  Tmp_table: No  Tmp_table_on_disk: No\n"
           b"#\n# explain: id\tselect_type\ttable\ttype\tpossible_keys\tkey\tkey_len\tref\t"
           b"rows\tr_rows\tfiltered\tr_filtered\tExtra\n"
           b"# explain: 1\tSIMPLE\tt\tALL\tPRIMARY\tNULL\tNULL\tNULL\t3\t3.00\t100.00\t"
           b"100.00\tUsing where\n#\n"
           b"SET timestamp=1732543509;\n"
           b"SELECT 1;;\n"
           b"# User@Host: root[root] @ localhost []\n"
           b"# Thread_id: 32  Schema: db  QC_hit: No\n"
           b"# Query_time: 0.1  Lock_time: 0.0  Rows_sent: 1  Rows_examined: 1\n"
           b"SET timestamp=1732543510;\n"
           b"SELECT x\n# a comment line\nFROM t WHERE b = '\xff\xfe';\n")
    first, second = read_log(_write(tmp_path, log))
    assert (first.thread, first.database, first.text, first.time) == (31, None, "SELECT 1;",
                                                                     1732543509.0)
    assert (second.thread, second.database, second.line) == (32, "db", 15)
    assert second.text.encode("utf-8", "surrogateescape") == \
        b"SELECT x\n# a comment line\nFROM t WHERE b = '\xff\xfe'"
    assert fingerprint(second.text) == "select x from t where b = ?"


def test_reading_and_fingerprinting_say_nothing(tmp_path, capsys, caplog):
    """Statement texts are the user's data: reading a log and fingerprinting it print and log
    nothing, even where the module gives up on a statement."""
    caplog.set_level("DEBUG")
    for event in read_log(_write(tmp_path, MYSQL_GENERAL)):
        fingerprint(event.text)
    fingerprint("SELECT 'secret")
    assert capsys.readouterr() == ("", "") and caplog.records == []


def test_a_log_with_nothing_logged_has_no_events(tmp_path):
    banner = MYSQL_SLOW.split("# Time:")[0]
    assert list(read_log(_write(tmp_path, banner))) == []


def test_reading_is_streamed(tmp_path):
    """Memory holds an entry, not the log: 2.5 MB read with a peak under 200 KB."""
    entry = ("# User@Host: a[a] @ localhost []\n# Thread_id: {n}  Schema: db  QC_hit: No\n"
             "# Query_time: 0.000050  Lock_time: 0.000010  Rows_sent: 1  Rows_examined: 1\n"
             "SET timestamp=1700000000;\nSELECT c FROM sbtest1 WHERE id = {n};\n")
    path = tmp_path / "big.log"
    with path.open("w") as out:
        for n in range(12_000):
            out.write(entry.format(n=n))
    assert path.stat().st_size > 2_000_000
    tracemalloc.start()
    try:
        count = sum(1 for _ in read_log(path))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert count == 12_000
    assert peak < 200_000


def test_a_long_first_line_is_read_when_it_starts_an_entry(tmp_path):
    statement = "SELECT '" + "x" * 100_000 + "'"
    log = f"2024-01-02T03:04:05.250000Z\t    8 Query\t{statement}\n"
    (event,) = read_log(_write(tmp_path, log))
    assert (event.thread, event.text) == (8, statement)


def test_a_10_mb_statement_is_one_event(tmp_path):
    rows = ",".join(f"({n}, 'row {n}')" for n in range(600_000))
    statement = f"INSERT INTO t VALUES {rows}"
    assert len(statement) > 10_000_000
    log = (f"# User@Host: a[a] @ localhost []  Id: 4\n# Query_time: 2.5  Lock_time: 0  "
           f"Rows_sent: 0  Rows_examined: 0\nSET timestamp=1700000000;\n{statement};\n")
    (event,) = read_log(_write(tmp_path, log))
    assert event.text == statement and event.query_time == 2.5


# --------------------------------------------------------------------------- bad input

@pytest.mark.parametrize(("content", "said"), [
    (b"", "is empty: expected a slow query log or a general query log"),
    (b"\x7fELF\x02\x01\x01\x00\x00\x00\x00\n", "line 1: binary data, not a text log"),
    (b"\x89PNG" + b"\xff" * 70_000, "line 1: binary data, not a text log"),
    (b"\xff\xfe\n", "line 1: neither a slow query log nor a general query log"),
    (b"SELECT 1;\n", "line 1: neither a slow query log nor a general query log; expected the "
                     "server's start banner"),
    (b"# Time: 241125 14:05:09\n# User@Host: root[root] @ localhost []\n",
     "line 2: the log ends inside an entry's header; expected 'SET timestamp=N;' and the "
     "statement"),
    (b"# User@Host: root[root] @ localhost []\n# Thread_id: 3  Schema:   QC_hit: No\n"
     b"SET timestamp=1;\nSELECT 1;\n",
     "line 2: an entry without its figures; expected '# Query_time: SECONDS"),
    (b"# User@Host: root[root] @ localhost []\n# Thread_id: 3  Schema:   QC_hit: No\n"
     b"# Query_time: fast  Lock_time: 0  Rows_sent: 0  Rows_examined: 0\n"
     b"SET timestamp=1;\nSELECT 1;\n",
     "line 3: figures this reader does not know; expected '# Query_time: SECONDS"),
    (b"# User@Host: root[root] @ localhost []\n"
     b"# Query_time: 1.0  Lock_time: 0  Rows_sent: 0  Rows_examined: 0\n"
     b"SET timestamp=1;\nSELECT 1;\n",
     "line 1: an entry without its connection; expected 'Id: N'"),
    (b"# Time: Tue Nov 25 14:05:09 2024\n# User@Host: root[root] @ localhost []  Id: 3\n"
     b"# Query_time: 1.0  Lock_time: 0  Rows_sent: 0  Rows_examined: 0\n"
     b"SET timestamp=1;\nSELECT 1;\n",
     "line 1: a time this reader does not know; expected '# Time: YYMMDD H:MM:SS'"),
    (b"# User@Host: root[root] @ localhost []  Id: 3\n"
     b"# Query_time: 1.0  Lock_time: 0  Rows_sent: 0  Rows_examined: 0\n"
     b"SET timestamp=1;\nSELECT 1;\n/usr/sbin/mysqld, Version: 8.0 (x). started with:\n"
     b"Tcp port: 3306  Unix socket: /x.sock\nstray\n",
     "line 7: a line outside any entry; expected '# Time:' or '# User@Host:'"),
], ids=["empty", "elf", "no-newline", "not-utf8", "sql", "truncated", "no-figures",
        "bad-figures", "no-thread", "other-time", "stray"])
def test_bad_logs_are_one_line(tmp_path, content, said):
    path = _write(tmp_path, content)
    with pytest.raises(UserError) as caught:
        list(read_log(path))
    message = str(caught.value)
    assert message.startswith(str(path)) and said in message and "\n" not in message


def test_a_missing_log_is_one_line(tmp_path):
    with pytest.raises(UserError, match="cannot read the log .*absent.log"):
        list(read_log(tmp_path / "absent.log"))


# --------------------------------------------------------------------------- fingerprints

@pytest.mark.parametrize(("sql", "expected"), [
    ("SELECT * FROM t WHERE a = 'x' AND b = \"y\" AND c = 3.5e-2 AND d = -4",
     "select * from t where a = ? and b = ? and c = ? and d = ?"),
    ("select a-1, a - -1, (+2) from t", "select a - ?, a - ?, (?) from t"),
    ("SELECT x'0f', 0x1f, b'01', _utf8mb4'z', N'n', TRUE, NULL",
     "select ?, ?, ?, ?, ?, ?, ?"),
    ("select 1 from t where a is null or b is not null", "select ? from t where a is null or "
                                                          "b is not null"),
    ("SELECT a FROM `T` JOIN `my table` USING (id)", "select a from t join `my table` using "
                                                     "(id)"),
    ("select a from t where b in ( 1,2 , 3) and c not in ('x')",
     "select a from t where b in(?+) and c not in(?+)"),
    ("select a from t where b in (select c from u where d in (1, 2))",
     "select a from t where b in(select c from u where d in(?+))"),
    ("INSERT INTO t (a, b) VALUES (1, 'x'), (2, 'y'),(3,'z')", "insert into t(a, b) values(?+)"),
    ("insert into t values (1, now()), (2, now())", "insert into t values(?, now())"),
    ("insert into t values (1, now()), (2, 5)", "insert into t values(?, now()), (?, ?)"),
    ("SELECT a FROM t LIMIT 10, 20", "select a from t limit ?, ?"),
    ("SELECT a FROM t LIMIT 10 OFFSET 20", "select a from t limit ? offset ?"),
    ("SELECT a FROM t ORDER BY a ASC, b DESC", "select a from t order by a, b desc"),
    ("select a from t -- one\n# two\n/* three */ where a=1;", "select a from t where a = ?"),
    ("SELECT /*+ BKA(t) MAX_EXECUTION_TIME(1000) */ a FROM t",
     "select /*+ bka(t) max_execution_time(?) */ a from t"),
    ("/*!40101 SET character_set_client = utf8 */", "set character_set_client = utf8"),
    ("/*M!100100 SET @x = 5 */", "set @x = ?"),
    ("SELECT @@global.max_connections, @v := 2, ?", "select @@global.max_connections, @v := ?, "
                                                    "?"),
    ("USE `my db`", "use ?"),
    ("SELECT a FROM t WHERE b = 1 UNION SELECT a FROM t WHERE b = 2 UNION SELECT a FROM t "
     "WHERE b = 3", "select a from t where b = ? /*repeat union*/"),
    ("(SELECT 1) UNION ALL (SELECT 2)", "(select ?) /*repeat union all*/"),
    ("SELECT a FROM t UNION SELECT b FROM t", "select a from t union select b from t"),
    ("SELECT 1 UNION SELECT 2 UNION ALL SELECT 3", "select ? union select ? union all select ?"),
    ("CALL p(1, 'x')", "call p(?, ?)"),
    ("REPLACE INTO t VALUES (1, 2), (3, 4)", "replace into t values(?+)"),
    ("EXECUTE s USING @a", "execute s using @a"),
    ("PREPARE s FROM 'SELECT 1'", "prepare s from ?"),
    ("select 1; select 2;", "select ?; select ?"),
    ("SELECT 'unterminated", "select /* unreadable */"),
])
def test_fingerprint(sql, expected):
    assert fingerprint(sql) == expected


def test_fingerprint_holds_no_literal_and_has_a_stable_id():
    secret = "SELECT * FROM users WHERE email = 'alice@example.com' AND pin = 90210"
    text = fingerprint(secret)
    assert "alice" not in text and "90210" not in text
    assert fingerprint_id(text) == fingerprint_id(fingerprint(secret.replace("90210", "7")))
    assert len(fingerprint_id(text)) == 16 and int(fingerprint_id(text), 16) >= 0
    assert fingerprint_id(text) != fingerprint_id("select ?")
    assert fingerprint_id("select ?") == "b9a4c90ce4157373"


def test_one_clients_short_connections_in_one_second_are_one_session_at_a_time(tmp_path):
    """A general log in whole seconds: a client connecting, running a statement and quitting
    again and again in one second never had two connections at once; a pool's connections
    whose statements come between each other's did."""
    from knoblab.capture.plan import plan_for

    one_after_another = ["261125  5:00:00\t    20 Connect\troot@localhost on app using Socket"]
    for thread in range(20, 44):
        if thread > 20:
            one_after_another.append(f"\t\t    {thread} Connect\troot@localhost on app using "
                                     "Socket")
        one_after_another += [f"\t\t    {thread} Query\tSELECT COUNT(*) FROM items WHERE id < 50",
                              f"\t\t    {thread} Quit\t"]
    log = tmp_path / "short.log"
    log.write_text("\n".join(one_after_another) + "\n")
    plan = plan_for(log, tmp_path / "home")
    assert plan.sessions == 24 and plan.peak == 1

    pool = ["261125  5:00:00\t    50 Connect\troot@localhost on app using Socket",
            "\t\t    51 Connect\troot@localhost on app using Socket",
            "\t\t    52 Connect\troot@localhost on app using Socket"]
    for n in range(3):
        pool += [f"\t\t    {thread} Query\tSELECT {n} FROM items" for thread in (50, 51, 52)]
    pool += ["\t\t    50 Quit\t", "\t\t    51 Quit\t", "\t\t    52 Quit\t"]
    log = tmp_path / "pool.log"
    log.write_text("\n".join(pool) + "\n")
    assert plan_for(log, tmp_path / "home").peak == 3


def test_a_setting_the_replays_sessions_do_not_fit_under_is_left_out(tmp_path, catalog):
    """Production's max_connections below what a replay of its load opens at once (its
    sessions and knoblab's own connections) is left out of the captured baseline, in the
    replay's own words; what fits is kept."""
    from knoblab.capture.plan import plan_for
    from knoblab.capturing import baseline
    from knoblab.workloads.replay import ReplayWorkload

    threads = range(50, 59)  # nine connections at once
    pool = ["261125  5:00:00\t    49 Connect\troot@localhost on app using Socket"]
    pool += [f"\t\t    {thread} Connect\troot@localhost on app using Socket"
             for thread in threads]
    pool += [f"\t\t    {thread} Query\tSELECT {n} FROM items" for n in range(2)
             for thread in threads]
    log = tmp_path / "pool.log"
    log.write_text("\n".join(pool) + "\n")
    plan = plan_for(log, tmp_path / "home")
    assert plan.peak == 9
    judged = baseline(catalog, {"max_connections": "10", "sort_buffer_size": "1048576"},
                      ReplayWorkload(log=log, plan=plan, sessions=plan.peak))
    assert judged.settings == {"sort_buffer_size": "1048576"}
    assert judged.refused["max_connections"]["value"] == "10"
    assert "need max_connections = 11" in judged.refused["max_connections"]["why"]
    assert judged.not_here is None and judged.durability == {}
