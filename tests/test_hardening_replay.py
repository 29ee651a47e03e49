"""The replay of a captured log, hardened: statements never run in another database than
their own, a log that may write is taken as writing, what the sandbox cannot take (more
sessions than max_connections, a log longer than the timeout at its own pace) is refused
before anything runs, and a log edited in place is planned again."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from knoblab.capture.fingerprint import fingerprint
from knoblab.capture.plan import _reads, plan_for
from knoblab.datasets.dump import DATA_USER
from knoblab.errors import UserError
from knoblab.workloads.base import WorkloadError
from knoblab.workloads.replay import ReplayWorkload
from tests.test_replay import GENERAL

HEAD = GENERAL.split("261125")[0]


def _general(tmp_path: Path, body: str, name: str = "general.log") -> Path:
    log = tmp_path / name
    log.write_text(HEAD + body)
    return log


def _workload(log: Path, **workload: object) -> ReplayWorkload:
    return ReplayWorkload.from_spec({"log": str(log), **workload}, {}, {}, None)


def _shop(server, *statements: str) -> None:
    """The database `shop` with a table t of three rows, which a replay's sessions may use."""
    _sql(server, "CREATE DATABASE shop", "CREATE TABLE shop.t (id INT PRIMARY KEY, a INT)",
         "INSERT INTO shop.t VALUES (1, 7), (2, 14), (3, 21)",
         f"CREATE USER IF NOT EXISTS {DATA_USER}@localhost",
         f"GRANT ALL ON shop.* TO {DATA_USER}@localhost", *statements)


def _sql(server, *statements: str) -> list[tuple[object, ...]]:
    conn = server.connect()
    try:
        with conn.cursor() as cur:
            for statement in statements:
                cur.execute(statement)
            return list(cur.fetchall())
    finally:
        conn.close()


# --- databases the data lacks -----------------------------------------------------------------

SWITCHING = """\
261125  5:00:00\t    10 Connect\troot@localhost on shop using Socket
\t\t    10 Query\tSELECT a FROM t WHERE id = 1
\t\t    10 Init DB\telsewhere
\t\t    10 Query\tUPDATE t SET a = 999 WHERE id = 1
\t\t    10 Init DB\tshop
\t\t    10 Query\tSELECT a FROM t WHERE id = 2
\t\t    10 Quit\t
"""


@pytest.mark.server
def test_a_statement_of_a_database_the_data_lacks_fails_rather_than_run_elsewhere(
        sandbox, tmp_path: Path):
    _shop(sandbox)
    log = _general(tmp_path, SWITCHING)
    # The UPDATE ran in `elsewhere`, which the sandbox lacks: refused before any statement.
    with pytest.raises(UserError) as refused:
        _workload(log).replay(sandbox)
    said = str(refused.value)
    assert "\n" not in said
    assert "the data lacks databases the log's statements run in: `elsewhere` (1 statement)" \
        in said
    assert "100% of 'update t set a = ? where id = ?'" in said
    assert "max_failing = 1 to replay without them" in said
    # Allowed to fail, the UPDATE fails unsent: shop's row is untouched, and the session goes
    # on in shop once it is back there.
    measured = _workload(log, max_failing=1.0).replay(sandbox)
    assert _sql(sandbox, "SELECT a FROM shop.t WHERE id = 1") == [(7,)]
    classes = {c.fingerprint: measured.details["classes"][c.id]
               for c in _workload(log).plan.classes}
    # The USE's own error (1049, or 1044 to an account without rights there) is its error.
    assert list(classes["update t set a = ? where id = ?"]["errors"].values()) == [1]
    assert classes["update t set a = ? where id = ?"]["n"] == 1
    assert classes["select a from t where id = ?"]["errors"] == {}
    assert classes["select a from t where id = ?"]["rows"] == 2
    assert measured.details["missing_databases"] == {"elsewhere": 1}


def test_a_dump_without_its_databases_is_known_to_lack_the_logs_others(tmp_path: Path):
    # Made without --databases, the dump loads into [dataset] database alone: a log that ran
    # elsewhere is refused before anything is loaded, with the database to load it into.
    (tmp_path / "shop.sql").write_text(
        "CREATE TABLE `t` (`id` int NOT NULL, `a` int, PRIMARY KEY (`id`));\n"
        "INSERT INTO `t` VALUES (1,7);\n")
    log = _general(tmp_path, SWITCHING.replace("on shop using", "on shop2 using")
                   .replace("Init DB\tshop\n", "Init DB\tshop2\n"))
    dataset = {"dump": "shop.sql", "database": "shop"}
    with pytest.raises(UserError) as refused:
        ReplayWorkload.from_spec({"log": log.name}, dataset, {}, tmp_path)
    said = str(refused.value)
    assert "`shop2` (2 statements)" in said and "`elsewhere` (1 statement)" in said
    assert "mariadb-dump --databases shop shop2 elsewhere" in said
    # One database only, and not the dump's: the dump is loaded into it.
    only = _general(tmp_path, SWITCHING.replace("on shop using", "on shop2 using")
                    .replace("Init DB\telsewhere", "Init DB\tshop2")
                    .replace("Init DB\tshop\n", "Init DB\tshop2\n"), "only.log")
    with pytest.raises(UserError, match='load the dump into the log\'s database: '
                                        r'\[dataset\] database = "shop2"'):
        ReplayWorkload.from_spec({"log": only.name}, dataset, {}, tmp_path)
    # Within max_failing, said before the run.
    work = ReplayWorkload.from_spec({"log": log.name, "max_failing": 1.0}, dataset, {},
                                    tmp_path)
    assert any(w.startswith("the data lacks databases the log's statements run in:")
               for w in work.warnings)


# --- what writes ----------------------------------------------------------------------------

@pytest.mark.parametrize("statement", [
    "SELECT f(1)", "SELECT shop.f(1)", "SELECT `my-f`(1)", "SELECT a FROM t WHERE f(a) > 1",
    "SELECT a FROM t FOR UPDATE", "SELECT a FROM t LOCK IN SHARE MODE",
    "SELECT a INTO @x FROM t", "SELECT a FROM t INTO OUTFILE '/tmp/x'", "CALL p(1)",
    "DO f(1)", "SET @a = f(1)", "SELECT NEXT VALUE FOR s", "SELECT GET_LOCK('x', 1)",
    "SELECT 1; UPDATE t SET a = 1", "SELECT 1; FLUSH TABLES", "SELECT 'cut short",
    "XA START 'x'",
])
def test_anything_not_known_to_be_read_only_writes(statement: str):
    assert not _reads(fingerprint(statement))


@pytest.mark.parametrize("statement", [
    "SELECT a FROM t WHERE id IN (1, 2) AND EXISTS (SELECT 1 FROM u WHERE u.a = t.a) "
    "GROUP BY a ORDER BY COUNT(*) DESC LIMIT 10",
    "SELECT CAST(a AS DECIMAL(10, 2)), CONVERT(a, CHAR(3)), IF(a > 1, NOW(), NULL) FROM t",
    "WITH c(a, b) AS (SELECT 1, 2) SELECT * FROM c",
    "SELECT /*+ NO_INDEX(t i) */ a FROM t USE INDEX (i) JOIN u USING (id)",
    "SELECT ROW_NUMBER() OVER (PARTITION BY a ORDER BY b) FROM t",
    "SELECT 1; SELECT 2", "SET NAMES utf8mb4", "SHOW TABLES", "DO SLEEP(1)", "BEGIN",
])
def test_what_surely_only_reads_still_does(statement: str):
    assert _reads(fingerprint(statement))


@pytest.mark.server
def test_a_replay_taken_to_only_read_that_changes_rows_stops(sandbox, tmp_path: Path):
    # A view calling a stored function that writes: its SELECT reads as text, yet writes.
    _shop(sandbox, "CREATE TABLE shop.hits (n INT)",
         "CREATE FUNCTION shop.counted(x INT) RETURNS INT MODIFIES SQL DATA "
         "BEGIN INSERT INTO shop.hits VALUES (x); RETURN x; END",
         "CREATE VIEW shop.v AS SELECT shop.counted(a) AS a FROM shop.t")
    reads = ["SELECT a FROM t WHERE id = 1", "SELECT DISTINCT a FROM t ORDER BY a DESC",
             "SELECT a, COUNT(*) FROM t GROUP BY a ORDER BY 2",
             "SELECT a FROM t UNION SELECT a + 1 FROM t",
             "SELECT * FROM (SELECT a FROM t ORDER BY a LIMIT 2) x"]
    body = "261125  5:00:00\t    10 Connect\troot@localhost on shop using Socket\n" + "".join(
        f"\t\t    10 Query\t{statement}\n" for statement in reads)
    plain = _general(tmp_path, body, "plain.log")
    work = _workload(plain)
    assert not work.writes_data
    work.replay(sandbox)  # reads only, temporary tables and all: no rows changed
    viewing = _general(tmp_path, body + "\t\t    10 Query\tSELECT a FROM v\n", "view.log")
    work = _workload(viewing)
    assert not work.writes_data  # the text cannot tell
    with pytest.raises(UserError, match=r"the log was taken to only read, but its replay "
                                        r"changed 3 rows .*design = \"restarts\""):
        work.replay(sandbox)
    # Measured on starts of their own, nothing is refused.
    _workload(viewing, design="restarts").replay(sandbox)


# --- speed = "original" --------------------------------------------------------------------

TWO_HOURS = """\
261125  5:00:00\t    10 Connect\troot@localhost on  using Socket
\t\t    10 Query\tSELECT 1
261125  7:00:00\t    10 Query\tSELECT 2
"""


def test_original_speed_says_how_long_and_refuses_a_log_beyond_the_timeout(tmp_path: Path):
    log = _general(tmp_path, TWO_HOURS)
    with pytest.raises(UserError) as refused:
        _workload(log, speed="original")
    said = str(refused.value)
    assert "lasts its span, 2 h" in said and "timeout = 3600 s" in said
    assert "use speed = \"max\"" in said and "\n" not in said
    work = _workload(log, speed="original", timeout=9000)
    assert any("each measurement keeps the log's pace and lasts its span, 2 h" in w
               for w in work.warnings)
    assert work.least_seconds == 7200.0  # what budgets are checked against
    assert _workload(log).least_seconds == 0.0


def test_original_speed_beyond_the_budget_is_refused_before_anything_runs(
        tmp_path: Path, knoblab_home: Path):
    log = _general(tmp_path, TWO_HOURS)
    spec = tmp_path / "replay.toml"
    spec.write_text(f"""\
name = "long"
[workload]
kind = "replay"
log = "{log.name}"
speed = "original"
timeout = 9000
budget = "3h"
[sweep]
div_precision_increment = [4, 9]
""")
    env = {k: v for k, v in os.environ.items() if k != "KNOBLAB_STORE"}
    env["KNOBLAB_HOME"] = str(knoblab_home)
    out = subprocess.run(
        [sys.executable, "-m", "knoblab.cli", "--store", f"sqlite:///{tmp_path / 's.sqlite'}",
         "run", str(spec), "--out", str(tmp_path / "out")],
        env=env, capture_output=True, text=True, timeout=120, check=False)
    assert out.returncode == 2, out.stderr
    assert "[workload] budget = 3 h" in out.stderr and "cannot hold" in out.stderr, out.stderr
    assert "Traceback" not in out.stderr


# --- sessions and max_connections ------------------------------------------------------------


def _sessions_log(tmp_path: Path, sessions: int) -> Path:
    body = "261125  5:00:00\t     1 Query\tSELECT 0\n" + "".join(
        f"\t\t{100 + n:6d} Query\tSELECT {n}\n" for n in range(sessions))
    return _general(tmp_path, body, "sessions.log")


def test_more_sessions_than_max_connections_are_refused_before_anything_runs(
        tmp_path: Path, catalog):
    log = _sessions_log(tmp_path, 300)
    work = _workload(log, sessions=300)
    with pytest.raises(UserError) as refused:  # the server's default: 151
        work.check(catalog, {})
    said = str(refused.value)
    assert "300 sessions replayed at once ([workload] sessions) and knoblab's own 2 " \
           "connections need max_connections = 302" in said
    assert "lower [workload] sessions to 149, or give max_connections = 302 or more" in said
    work.check(catalog, {"max_connections": "302"})
    swept = ReplayWorkload.from_spec({"log": str(log), "sessions": 300}, {},
                                     {"max_connections": [302, 200]}, None)
    with pytest.raises(UserError, match=r"the sandbox takes 200 \(\[sweep\]\)"):
        swept.check(catalog, {"max_connections": "400"})
    # Swept, the base's value (here the default, 151) is never used.
    ReplayWorkload.from_spec({"log": str(log), "sessions": 300}, {},
                             {"max_connections": [302, 400]}, None).check(catalog, {})
    # No more sessions than the log holds are replayed at once.
    _workload(_sessions_log(tmp_path, 10), sessions=300).check(catalog, {})


@pytest.mark.server
def test_a_configuration_whose_max_connections_is_too_low_is_refused_unmeasured(
        binary, knoblab_home: Path, tmp_path: Path):
    from knoblab.server.sandbox import Sandbox, base_template

    work = _workload(_sessions_log(tmp_path, 30), sessions=30)
    refused = pytest.raises(UserError, match=r"the sandbox takes 20 \(this configuration's "
                                             r"max_connections\): lower \[workload\] sessions")
    with Sandbox(binary, base_template(binary, knoblab_home) / "data",
                 {"max_connections": "20"}, home=knoblab_home) as server, refused:
        work.replay(server)


# --- max_allowed_packet and secure_timestamp --------------------------------------------------


def _big_statement_log(tmp_path: Path) -> Path:
    big = "SELECT LENGTH('" + "x" * (2 << 20) + "')"  # 2 MiB
    return _general(tmp_path, "261125  5:00:00\t    10 Connect\troot@localhost on shop using "
                              f"Socket\n\t\t    10 Query\tSELECT 1\n\t\t    10 Query\t{big}\n")


@pytest.mark.server
def test_a_statement_longer_than_max_allowed_packet_is_refused_saying_why(
        sandbox, tmp_path: Path, catalog):
    from knoblab.workloads.replay import _Replay

    _shop(sandbox, "SET GLOBAL max_allowed_packet = 1048576")
    work = _workload(_big_statement_log(tmp_path), max_failing=1.0)
    size = r"a statement of 2\.0 MiB \('select length\(\?\)'\), longer than max_allowed_packet"
    with pytest.raises(UserError, match=size + r" = 1\.0 MiB \(this configuration's\): the "
                       r"server drops the connection .*give max_allowed_packet = \"3M\" or more"):
        work.replay(sandbox)
    # Known from the spec before anything runs, when the spec says it (the default is 16M).
    with pytest.raises(UserError, match=size + r" = 1\.0 MiB \(\[server.config\]\)"):
        work.check(catalog, {"max_allowed_packet": "1M"})
    work.check(catalog, {})
    # The client says why a connection went away on it, rather than "server has gone away".
    run = _Replay(work, str(sandbox.socket), sandbox, 1 << 20)
    try:
        with pytest.raises(WorkloadError, match=r"dropped a replay connection on a statement of "
                                                r"2\.0 MiB .*give max_allowed_packet = \"3M\""):
            run.go()
    finally:
        run.shut_down()


def _clock_log(tmp_path: Path) -> Path:
    return _general(tmp_path, "261125  5:00:00\t    10 Connect\troot@localhost on shop using "
                              "Socket\n\t\t    10 Query\tSELECT NOW()\n"
                              "261125  5:00:01\t    10 Query\tSELECT UNIX_TIMESTAMP()\n")


def test_a_secure_timestamp_that_keeps_the_captured_clock_is_refused_from_the_spec(
        tmp_path: Path, catalog):
    work = _workload(_clock_log(tmp_path))
    assert work.plan.clock == 2
    with pytest.raises(UserError, match=r"secure_timestamp = YES \(\[server.config\]\) refuses "
                       r"the replay's SET timestamp, .* the 2 statements that read the clock .*"
                       r"set secure_timestamp = \"NO\" in \[server.config\]"):
        work.check(catalog, {"secure_timestamp": "YES"})
    work.check(catalog, {})
    # A log whose statements never read the clock needs none.
    _workload(_sessions_log(tmp_path, 2)).check(catalog, {"secure_timestamp": "YES"})


@pytest.mark.server
def test_a_secure_timestamp_that_keeps_the_captured_clock_is_refused_unmeasured(
        binary, knoblab_home: Path, tmp_path: Path):
    from knoblab.server.sandbox import Sandbox, base_template
    from knoblab.workloads.replay import _Replay

    work = _workload(_clock_log(tmp_path))
    with Sandbox(binary, base_template(binary, knoblab_home) / "data",
                 {"secure_timestamp": "YES"}, home=knoblab_home) as server:
        _shop(server)
        with pytest.raises(UserError, match=r"secure_timestamp = YES \(this configuration's\)"):
            work.replay(server)
        # Each SET timestamp refused is counted, by its error, rather than lost.
        run = _Replay(work, str(server.socket), server, 1 << 24)
        try:
            run.go()
        finally:
            run.shut_down()
        assert sum(run.clock_errors.values()) == 2
    with pytest.raises(UserError, match=r"SET timestamp failed before 2 of the 2 statements "
                                        r"that read the clock \(error \d+ x2\)"):
        work._refuse_unset_clock(run.clock_errors, first=True)


# --- the plan's key --------------------------------------------------------------------------


def test_a_log_edited_in_place_with_its_size_and_time_kept_is_planned_again(tmp_path: Path):
    log = _general(tmp_path, SWITCHING)
    plan = plan_for(log, tmp_path / "home")
    before = log.stat()
    # The same length, in the middle: neither the size nor the first and last MiB would
    # tell on a large log; the change time does.
    log.write_text(log.read_text().replace("id = 1\n", "id = 3\n"))
    os.utime(log, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert log.stat().st_size == before.st_size
    assert log.stat().st_mtime_ns == before.st_mtime_ns
    again = plan_for(log, tmp_path / "home")
    assert again.folder != plan.folder
    texts = [text for kind, _, text in again.records(again.session(0)) if kind >= 0]
    assert b"SELECT a FROM t WHERE id = 3" in texts


def test_a_log_that_changes_while_it_is_read_is_refused(tmp_path: Path):
    log = _general(tmp_path, SWITCHING)

    def told(done: int, total: int) -> None:
        if done >= total:  # the end reached: a server writes one more entry
            with log.open("a") as more:
                more.write("\t\t    11 Query\tSELECT 5\n")

    with pytest.raises(UserError, match="it changed while it was read"):
        plan_for(log, tmp_path / "home", told)
    assert not list((tmp_path / "home" / "replays").iterdir())
    assert plan_for(log, tmp_path / "home").statements == 4  # read again, whole
