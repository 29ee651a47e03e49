"""The replay workload: a captured log made into a plan (sessions, classes, what is left out),
and replayed on real sandboxes over a dump, with per-class evidence compared between
configurations."""

from __future__ import annotations

import json
import os
import struct
import subprocess
from pathlib import Path

import pytest

from knoblab.capture.plan import EXECUTE, PREPARE, TIMESTAMP, USE, plan_for
from knoblab.errors import UserError
from tests.fakes import cli_env, knoblab_here

GENERAL = """\
/usr/sbin/mariadbd, Version: 10.11.19-MariaDB-log (Debian 12). started with:
Tcp port: 0  Unix socket: /tmp/x/mysqld.sock
Time\t\t    Id Command\tArgument
261125  5:00:00\t    10 Connect\troot@localhost on shop using Socket
\t\t    10 Query\tSELECT a FROM t WHERE id = 1
\t\t    11 Connect\troot@localhost on  using Socket
\t\t    11 Init DB\tshop
\t\t    11 Query\tSELECT a FROM t WHERE id = 2
261125  5:00:01\t    10 Prepare\tSELECT a FROM t WHERE id = ?
\t\t    10 Execute\tSELECT a FROM t WHERE id = 3
\t\t    10 Query\tSET GLOBAL max_connections = 10
\t\t    11 Query\tSELECT NOW(), a FROM t WHERE id = 4
\t\t    10 Quit\t
261125  5:00:03\t    10 Connect\troot@localhost on shop using Socket
\t\t    10 Query\tUPDATE t SET a = a + 1 WHERE id = 5
\t\t    10 Quit\t
\t\t    11 Quit\t
"""


def _plan(tmp_path: Path, text: str, name: str = "general.log"):
    log = tmp_path / name
    log.write_text(text)
    return plan_for(log, tmp_path / "home")


def test_a_general_log_becomes_sessions_classes_and_what_is_left_out(tmp_path: Path):
    plan = _plan(tmp_path, GENERAL)
    # Connection 10 quit and came back: three sessions, in the order they began.
    sessions = [plan.session(n) for n in range(plan.sessions)]
    assert [s.statements for s in sessions] == [2, 2, 1]
    assert plan.statements == 5
    assert plan.peak == 2  # 10 and 11 overlapped; the second 10 began after the first quit
    assert plan.span == 3.0
    prints = {c.fingerprint: c for c in plan.classes}
    assert prints["select a from t where id = ?"].count == 3  # the Execute is a statement
    assert prints["select a from t where id = ?"].reads
    assert not prints["update t set a = a + ? where id = ?"].reads
    assert plan.writes
    # The Prepare is left to the replay, which prepares the Execute's statement itself.
    assert list(plan.skipped) == [next(why for why in plan.skipped
                                       if why.startswith("it changes the server's global"))]
    assert plan.prepared == 1
    # Each session sets its database first; the clock is set before a statement reading it.
    first, second, _ = sessions
    kinds = [kind for kind, _, _ in plan.records(second)]
    assert kinds[0] == USE and TIMESTAMP in kinds
    records = list(plan.records(second))
    assert records[0][2] == b"shop"
    stamp = next(text for kind, _, text in records if kind == TIMESTAMP)
    assert float(stamp) > 1.7e9
    assert [text for kind, _, text in plan.records(first) if kind >= 0] == [
        b"SELECT a FROM t WHERE id = 1"]
    # The Execute: its statement prepared with a placeholder for its value, then executed
    # (its class, the statement's number in the session, its text's length, whether its
    # values depend on how backslashes read (0: not), its text, its value).
    kinds = [kind for kind, _, _ in plan.records(first)]
    assert kinds[-2:] == [PREPARE, EXECUTE]
    _, prepare, execute = [text for kind, _, text in plan.records(first)][-3:]
    assert prepare == b"SELECT a FROM t WHERE id = ?"
    text = b"SELECT a FROM t WHERE id = 3"
    assert execute == struct.pack("<IIIB", kinds[-3], 0, len(text), 0) + text + \
        struct.pack("<cI", b"i", 8) + (3).to_bytes(8, "little")
    # Kept under the home, private: the statements hold the user's data.
    assert (tmp_path / "home" / "replays").stat().st_mode & 0o777 == 0o700
    summary = json.dumps(plan.summary())
    assert "id = 1" not in summary and "SELECT a" not in summary


def test_a_plan_is_made_once_per_log_and_again_when_it_changes(tmp_path: Path):
    plan = _plan(tmp_path, GENERAL)
    again = plan_for(tmp_path / "general.log", tmp_path / "home")
    assert again.folder == plan.folder
    log = tmp_path / "general.log"
    log.write_text(GENERAL.replace("id = 5", "id = 6"))
    os.utime(log, ns=(1, 10**18))
    changed = plan_for(log, tmp_path / "home")
    assert changed.folder != plan.folder


def test_a_log_without_statements_is_one_line(tmp_path: Path):
    text = GENERAL.split("261125")[0] + \
        "261125  5:00:00\t    10 Connect\troot@localhost on shop using Socket\n"
    with pytest.raises(UserError, match="holds no statement to replay"):
        _plan(tmp_path, text)
    assert not list((tmp_path / "home" / "replays").iterdir())  # nothing half made


# --- on real sandboxes ------------------------------------------------------------------------

DUMP = """\
-- MariaDB dump 10.19  Distrib 10.11.6-MariaDB, for debian-linux-gnu (x86_64)
CREATE DATABASE /*!32312 IF NOT EXISTS*/ `shop` /*!40100 DEFAULT CHARACTER SET utf8mb4 */;
USE `shop`;
CREATE TABLE `t` (`id` int NOT NULL, `a` int NOT NULL, PRIMARY KEY (`id`)) ENGINE=InnoDB;
INSERT INTO `t` VALUES {rows};
"""


def _slow_log(statements: list[tuple[int, str]]) -> str:
    """A MariaDB slow log (long_query_time = 0) of these (connection, statement)s."""
    out = ["/usr/sbin/mariadbd, Version: 10.11.19-MariaDB-log (Debian 12). started with:",
           "Tcp port: 0  Unix socket: /tmp/x/mysqld.sock", "Time\t\t    Id Command\tArgument",
           "# Time: 261125  5:00:00"]
    for thread, statement in statements:
        out += ["# User@Host: app[app] @ localhost []",
                f"# Thread_id: {thread}  Schema: shop  QC_hit: No",
                "# Query_time: 0.000100  Lock_time: 0.000000  Rows_sent: 1  Rows_examined: 1",
                "# Rows_affected: 0  Bytes_sent: 60", "SET timestamp=1795582800;",
                f"{statement};"]
    return "\n".join(out) + "\n"


SPEC = """\
name = "replay"
[dataset]
dump = "shop.sql"
[workload]
kind = "replay"
log = "slow.log"
repetitions = 2
{extra}
[sweep]
div_precision_increment = [4, 9]
"""


def _knoblab(home: Path, tmp_path: Path, spec: Path) -> subprocess.CompletedProcess[str]:
    return knoblab_here(["--store", f"sqlite:///{tmp_path / 's.sqlite'}", "run", str(spec),
                         "--out", str(tmp_path / "out"), "--json", str(tmp_path / "result.json")],
                        cli_env(home))


def _case(tmp_path: Path, statements: list[tuple[int, str]], extra: str = "") -> Path:
    rows = ",".join(f"({i},{i * 7})" for i in range(1, 201))
    (tmp_path / "shop.sql").write_text(DUMP.format(rows=rows))
    (tmp_path / "slow.log").write_text(_slow_log(statements))
    spec = tmp_path / "replay.toml"
    spec.write_text(SPEC.format(extra=extra))
    return spec


@pytest.mark.server
def test_a_log_replays_and_a_setting_that_changes_rows_is_flagged(knoblab_home: Path,
                                                                    tmp_path: Path):
    # Two sessions; one class's rows depend on div_precision_increment (a/7 shows 4 or 9
    # decimals), the other's do not. Only reads: the points share server starts.
    statements = [(thread, f"SELECT a / 7 FROM t WHERE id = {i}" if i % 2 else
                   f"SELECT a FROM t WHERE id = {i}")
                  for i in range(1, 121) for thread in (3, 4)]
    spec = _case(tmp_path, statements)
    out = _knoblab(knoblab_home, tmp_path, spec)
    assert out.returncode == 0, out.stderr
    result = json.loads((tmp_path / "result.json").read_text())
    assert result["workload"]["plan"]["statements"] == 240
    assert result["workload"]["plan"]["writes"] is False
    classes = result["statement_classes"]
    rows = {row["fingerprint"]: row for row in classes["rows"]}
    division = rows["select a / ? from t where id = ?"]["changes"][0]
    plain = rows["select a from t where id = ?"]["changes"][0]
    assert division["rows_differ"] and not plain["rows_differ"]
    # Each configuration is named by its settings, beside its position among the points.
    assert classes["reference_settings"] == {"div_precision_increment": "4"}
    assert division["settings"] == {"div_precision_increment": "9"} and division["point"] == 1
    assert rows["select a from t where id = ?"]["count"] == 120
    assert "Rows differ" in out.stdout + out.stderr
    # The report names classes by fingerprint, never by a literal.
    report = (tmp_path / "out" / "report.html").read_text()
    assert "select a / ? from t where id = ?" in report
    assert "id = 17" not in report
    # Every measurement kept its client's CPU and the statements it ran.
    import sqlite3
    with sqlite3.connect(tmp_path / "s.sqlite") as db:
        details = [json.loads(d) for (d,) in db.execute(
            "SELECT details FROM trials WHERE status = 'done'")]
    assert len(details) == 4
    assert all(d["statements"] == 240 and d["errors"] == 0 and d["client_cpu_seconds"] > 0
               for d in details)


@pytest.mark.server
def test_statements_that_fail_in_the_sandbox_refuse_the_run_naming_their_class(
        knoblab_home: Path, tmp_path: Path):
    statements = [(3, f"SELECT a FROM t WHERE id = {i}") for i in range(1, 30)] + \
        [(4, f"SELECT b FROM missing WHERE id = {i}") for i in range(1, 5)]
    spec = _case(tmp_path, statements)
    out = _knoblab(knoblab_home, tmp_path, spec)
    assert out.returncode == 2, out.stderr
    said = [line for line in out.stderr.splitlines() if line.startswith("knoblab: ")]
    assert len(said) == 1, out.stderr
    assert "100% of 'select b from missing where id = ?' (error 1146 x4)" in said[0]
    assert "max_failing" in said[0] and "Traceback" not in out.stderr
    # A third connection works in a database the dump does not hold: refused before any
    # statement runs, naming it.
    log = tmp_path / "slow.log"
    log.write_text(log.read_text() + _slow_log([(5, "SELECT 1 FROM other_t")]).split(
        "# Time: 261125  5:00:00\n")[1].replace("Schema: shop", "Schema: elsewhere"))
    out = _knoblab(knoblab_home, tmp_path, spec)
    assert out.returncode == 2, out.stderr
    said = [line for line in out.stderr.splitlines() if line.startswith("knoblab: ")]
    assert len(said) == 1, out.stderr
    assert "the data lacks databases the log's statements run in: `elsewhere` (1 statement)" \
        in said[0]
    assert "max_failing = 1 to replay without them" in said[0]
    # Raised, the same log replays, its failures counted.
    spec.write_text(SPEC.format(extra="max_failing = 1.0"))
    again = _knoblab(knoblab_home, tmp_path, spec)
    assert again.returncode == 0, again.stderr
    result = json.loads((tmp_path / "result.json").read_text())
    rows = {row["fingerprint"]: row for row in result["statement_classes"]["rows"]}
    assert rows["select b from missing where id = ?"]["errors"] == 4
    assert rows["select ? from other_t"]["errors"] == 1


@pytest.mark.server
def test_a_replay_refuses_a_running_server(tmp_path: Path, knoblab_home: Path):
    spec = _case(tmp_path, [(3, "SELECT 1")])
    spec.write_text(spec.read_text().replace(
        'name = "replay"', 'name = "replay"\n[server]\nkind = "external"\nhost = "127.0.0.1"'))
    out = _knoblab(knoblab_home, tmp_path, spec)
    assert out.returncode == 2
    assert "a replay runs a captured log's statements" in out.stderr


def test_odd_statements_keep_their_text_and_get_a_class(tmp_path: Path):
    # A 10 MB statement, several statements on one line, comments and optimizer hints,
    # LOAD DATA and a DELIMITER line (which only the command-line client knows): each is one
    # statement of its class, replayed as written (what fails in the sandbox is counted).
    big = "SELECT '" + "x" * (10 << 20) + "'"
    odd = [big, "SELECT 1; SELECT 2", "SELECT /*+ NO_INDEX(t) */ a FROM t -- why\nWHERE id = 1",
           "LOAD DATA INFILE '/tmp/x.csv' INTO TABLE t", "DELIMITER ;;"]
    lines = [GENERAL.split("261125")[0] + "261125  5:00:00\t    10 Connect\troot@localhost on "
             "shop using Socket"]
    lines += [f"\t\t    10 Query\t{statement}" for statement in odd]
    plan = _plan(tmp_path, "\n".join(lines) + "\n")
    assert plan.sessions == 1
    session = plan.session(0)
    texts = [text.decode() for kind, _, text in plan.records(session) if kind >= 0]
    assert texts == odd
    prints = [c.fingerprint for c in plan.classes]
    assert len(prints) == 5 and prints[0] == "select ?"
    assert not plan.classes[3].reads  # LOAD DATA writes
    assert len(json.dumps(plan.summary())) < 1000


@pytest.mark.server
def test_original_speed_keeps_the_captured_pace(binary, knoblab_home: Path, tmp_path: Path):
    from knoblab.server.sandbox import Sandbox, base_template
    from knoblab.workloads.replay import ReplayWorkload

    head = GENERAL.split("261125")[0]
    log = tmp_path / "paced.log"
    log.write_text(head + "".join(
        f"261125  5:00:0{second}\t    {thread} Query\tSELECT {second}\n"
        for second in range(3) for thread in (10, 11)))
    paced = ReplayWorkload.from_spec({"log": str(log), "speed": "original"}, {}, {}, None)
    fast = ReplayWorkload.from_spec({"log": str(log)}, {}, {}, None)
    with Sandbox(binary, base_template(binary, knoblab_home) / "data", {},
                 home=knoblab_home) as server:
        kept = paced.replay(server)
        raced = fast.replay(server)
    # Two seconds between the first statements and the last, kept; the measurement is the
    # statements' own time, far less.
    assert kept.details["wall_seconds"] >= 2.0
    assert kept.value < 0.5
    assert kept.details["behind_max_seconds"] < 0.5
    assert raced.details["wall_seconds"] < 1.0
    assert raced.value == raced.details["wall_seconds"] or abs(
        raced.value - raced.details["wall_seconds"]) < 1e-6
    assert kept.details["statements"] == raced.details["statements"] == 6


def test_classes_are_compared_with_intervals_that_agree_with_their_verdicts():
    from types import SimpleNamespace

    from knoblab.classes import compare_classes

    def measurement(slow: float, same: float, checksum: str, noisy: str) -> SimpleNamespace:
        return SimpleNamespace(details={"classes": {
            "a": {"n": 100, "seconds": slow, "p95": 0.01, "errors": {}, "checksum": checksum},
            "b": {"n": 50, "seconds": same, "p95": 0.02, "errors": {"1146": 1},
                  "checksum": noisy}}})

    noise = [1.0, 1.03, 0.98, 1.01, 0.99]
    trials = {0: [measurement(1.0 * k, 0.5 * k, "x", f"n{i}") for i, k in enumerate(noise)],
              1: [measurement(2.0 * k, 0.5 * k2, "y", f"m{i}")
                  for i, (k, k2) in enumerate(zip(noise, reversed(noise), strict=True))]}
    found = compare_classes(trials, 0, {"a": "select ?", "b": "select b"})
    assert found is not None and found.reference == 0
    a, b = found.rows  # by their share of the reference's time
    assert (a.fingerprint, a.count, round(a.share, 2)) == ("select ?", 100, 0.67)
    (slower,) = a.changes
    assert slower.verdict == "slower" and slower.ci_low is not None and slower.ci_high is not None
    assert slower.ci_low < 2.0 < slower.ci_high and slower.ci_low > 1
    assert slower.rows_differ  # x in every reference measurement, y in every other
    (same,) = b.changes
    assert same.verdict == "no significant difference"
    assert same.ci_low is not None and same.ci_high is not None
    assert same.ci_low < 1 < same.ci_high
    assert not same.rows_differ and found.unstable == 1  # b's rows vary within each
    assert b.errors == 1
    # Nothing to compare without per-class figures.
    assert compare_classes({0: [SimpleNamespace(details={})]}, 0, {}) is None


def _many_sessions(path: Path, sessions: int, statements: int, interleaved: bool) -> None:
    """A general log of `sessions` connections of `statements` point selects each; either one
    after another (a connection per request) or all open at once, their lines interleaved."""
    with path.open("w") as out:
        out.write(GENERAL.split("261125")[0])
        out.write("261125  5:00:00\t     1 Query\tSELECT 0\n")
        order = [(s, i) for i in range(statements) for s in range(sessions)] if interleaved \
            else [(s, i) for s in range(sessions) for i in range(statements)]
        for session, i in order:
            thread = 100 + session
            if i == 0:
                out.write(f"\t\t{thread:6d} Connect\troot@localhost on shop using Socket\n")
            out.write(f"\t\t{thread:6d} Query\tSELECT a FROM t WHERE id = {session * 1000 + i}"
                      "\n")
            if i == statements - 1 and not interleaved:
                out.write(f"\t\t{thread:6d} Quit\t\n")


@pytest.mark.parametrize("interleaved", [False, True], ids=["one-after-another", "all-at-once"])
def test_a_plan_is_made_in_bounded_memory_and_reads_back_whole(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, interleaved: bool):
    import tracemalloc

    from knoblab.capture import plan as planning

    monkeypatch.setattr(planning, "_FLUSH_BYTES", 64 << 10)
    log = tmp_path / "many.log"
    sessions, statements = (3000, 10) if not interleaved else (300, 100)
    _many_sessions(log, sessions, statements, interleaved)
    assert log.stat().st_size > 1_400_000
    tracemalloc.start()
    try:
        plan = plan_for(log, tmp_path / "home")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    # The records never sit in memory whole: the peak is the flush threshold's order, far
    # below the log's size (3000 sessions' index entries are 120 KB).
    assert peak < 1_000_000, peak
    assert plan.sessions == sessions + 1 and plan.statements == sessions * statements + 1
    if interleaved:
        assert len(plan.files) > 1  # open sessions went on in files of their own
    whole = [plan.session(n) for n in range(plan.sessions)]
    assert sorted(s.statements for s in whole) == [1] + [statements] * sessions
    for session in [s for s in whole if s.statements > 1][::97]:
        texts = [text.decode() for kind, _, text in plan.records(session) if kind >= 0]
        owner = int(texts[0].split("= ")[1]) // 1000
        assert texts == [f"SELECT a FROM t WHERE id = {owner * 1000 + i}"
                         for i in range(statements)]


@pytest.mark.parametrize("content, said", [
    (b"\x00\x01binary\x00" * 100, "binary data"),
    (GENERAL.encode()[:-40] + b"\n# Time: 2611", "line"),  # cut short in the middle
    (b"2026-11-25T05:00:00.123456Z\t   10 Query\tSELECT 1\n# Time: nonsense\n", "line"),
    (b"", "is empty"),
], ids=["binary", "truncated", "mixed-formats", "empty"])
def test_a_bad_log_is_one_line_and_leaves_no_plan(tmp_path: Path, content: bytes, said: str):
    log = tmp_path / "bad.log"
    log.write_bytes(content)
    try:
        plan = plan_for(log, tmp_path / "home")
    except UserError as exc:
        assert said in str(exc) and "\n" not in str(exc)
        assert not list((tmp_path / "home" / "replays").iterdir())
    else:  # a log cut short after a whole entry is a log: what it holds is replayed
        assert said == "line" and plan.statements > 0


def test_a_client_busy_as_the_server_is_said():
    from types import SimpleNamespace

    from knoblab.results import _busy_client
    from knoblab.store import TrialState

    def trial(client: float, server: float) -> SimpleNamespace:
        return SimpleNamespace(status=TrialState.DONE,
                               details={"client_cpu_seconds": client, "cpu_seconds": server})

    assert _busy_client({0: [trial(0.1, 1.0), trial(0.2, 1.0)]}) == []
    (said,) = _busy_client({0: [trial(0.7, 1.0)], 1: [trial(0.6, 1.0), trial(0.1, 1.0)]})
    assert said.startswith("knoblab's client used 60% as much CPU as the server")
    assert _busy_client({0: [SimpleNamespace(status=TrialState.DONE, details={})]}) == []


# --- a log is untrusted ------------------------------------------------------------------------

ACCOUNT_DUMP = DUMP + """\
CREATE TABLE `audit` (`id` int NOT NULL);
DELIMITER ;;
/*!50003 CREATE*/ /*!50017 DEFINER=`app`@`%`*/ /*!50003 TRIGGER `t_audit` AFTER UPDATE ON `t` \
FOR EACH ROW INSERT INTO audit VALUES (NEW.id) */;;
CREATE DEFINER=`app`@`%` PROCEDURE `bump`(IN which INT)
    SQL SECURITY DEFINER
UPDATE t SET a = a + 1 WHERE id = which ;;
DELIMITER ;
/*!50001 CREATE ALGORITHM=UNDEFINED */
/*!50013 DEFINER=`reports`@`localhost` SQL SECURITY DEFINER */
/*!50001 VIEW `big` AS select `t`.`id` AS `id` from `t` where `t`.`a` > 1000 */;
"""


@pytest.mark.server
def test_a_log_runs_as_the_data_account_and_reaches_nothing_outside_its_data(
        binary, knoblab_home: Path, tmp_path: Path):
    from knoblab.server.sandbox import Sandbox, base_template, derived_template
    from knoblab.workloads.replay import ReplayWorkload

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    elsewhere.chmod(0o777)
    hostile = [  # hidden from the plan's look at each statement in EXECUTE IMMEDIATE
        f"EXECUTE IMMEDIATE 'SET GLOBAL general_log_file = ''{elsewhere}/general.log'''",
        "EXECUTE IMMEDIATE 'SET GLOBAL general_log = 1'",
        "EXECUTE IMMEDIATE 'INSTALL SONAME ''ha_federatedx'''",
        "EXECUTE IMMEDIATE 'ALTER USER root@localhost ACCOUNT LOCK'",
        "EXECUTE IMMEDIATE 'CREATE USER intruder@localhost'",
        "LOAD DATA LOCAL INFILE '/etc/passwd' INTO TABLE t",
        "LOAD DATA INFILE '/etc/passwd' INTO TABLE t",
        "EXECUTE IMMEDIATE 'CREATE DATABASE elsewhere'",
    ]
    fine = ["SELECT a FROM t WHERE id = 1", "CALL bump(2)", "SELECT COUNT(*) FROM big",
            f"CREATE TABLE far (a INT) DATA DIRECTORY = '{elsewhere}'"]
    rows = ",".join(f"({i},{i * 7})" for i in range(1, 201))
    (tmp_path / "shop.sql").write_text(ACCOUNT_DUMP.format(rows=rows))
    log = tmp_path / "hostile.log"
    log.write_text(GENERAL.split("261125")[0] + "261125  5:00:00\t    10 Connect\troot@localhost "
                   "on shop using Socket\n" + "".join(f"\t\t    10 Query\t{statement}\n"
                                                      for statement in fine + hostile))
    spec = {"log": str(log)}
    strict = ReplayWorkload.from_spec(spec, {"dump": str(tmp_path / "shop.sql")}, {}, None)
    lenient = ReplayWorkload.from_spec({**spec, "max_failing": 1.0},
                                       {"dump": str(tmp_path / "shop.sql")}, {}, None)
    data = strict.dataset({})
    template = derived_template(binary, data.key, data.build, knoblab_home,
                                data.estimated_bytes())
    with Sandbox(binary, template, {}, home=knoblab_home) as server:
        classes = lenient.replay(server).details["classes"]
        by_text = {c.fingerprint: classes[c.id] for c in lenient.plan.classes}
        # The view, the procedure and its trigger (foreign DEFINERs, now the data account's)
        # ran; the table's DATA DIRECTORY was ignored.
        assert [by_text[f]["errors"] for f in ("select a from t where id = ?", "call bump(?)",
                                               "select count(*) from big")] == [{}, {}, {}]
        assert not [f for f, c in by_text.items() if f.startswith("create table far")
                    and c["errors"]]
        # Every hostile statement failed, each as an error of its class: settings and accounts
        # (1227), the plugin table (1142), a database not the data's (1044), the server's
        # files (1045), the client's (4166).
        failed = {f: c["errors"] for f, c in by_text.items() if c["errors"]}
        assert failed == {"execute immediate ?": {"1227": 4, "1142": 1, "1044": 1},
                          "load data local infile ? into table t": {"4166": 1},
                          "load data infile ? into table t": {"1045": 1}}, failed
        with pytest.raises(UserError) as caught:
            strict.replay(server)
        said = str(caught.value)
        assert "\n" not in said and "statements fail in the sandbox" in said, said
        assert "execute immediate ?" in said and "error 1227" in said, said
        conn = server.connect("shop")  # root still logs in
        try:
            with conn.cursor() as cur:
                cur.execute("SELECT @@general_log, LOCATE(%s, @@general_log_file), "
                            "(SELECT COUNT(*) FROM mysql.plugin), (SELECT COUNT(*) FROM "
                            "mysql.global_priv WHERE User = 'intruder'), (SELECT COUNT(*) FROM "
                            "t), (SELECT COUNT(*) FROM audit)",
                            (str(elsewhere),))
                assert cur.fetchone() == (0, 0, 0, 0, 200, 2)
        finally:
            conn.close()
        assert (server.datadir / "shop" / "far.ibd").is_file()
    assert not list(elsewhere.iterdir())

    # Without a dump, the account exists with no privileges on anything.
    empty = ReplayWorkload.from_spec({"log": str(log), "max_failing": 1.0}, {}, {}, None)
    with Sandbox(binary, base_template(binary, knoblab_home) / "data", {},
                 home=knoblab_home) as server:
        classes = empty.replay(server).details["classes"]
        by_text = {c.fingerprint: classes[c.id] for c in empty.plan.classes}
        assert all(c["errors"] for c in by_text.values())
        conn = server.connect()
        try:
            with conn.cursor() as cur:
                cur.execute("SHOW GRANTS FOR knoblab_data@localhost")
                assert cur.fetchall() == (("GRANT USAGE ON *.* TO `knoblab_data`@`localhost`",),)
        finally:
            conn.close()
    assert not list(elsewhere.iterdir())
