"""The SQL-script workload: placeholders, validation, and K connections on real sandboxes."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from knoblab.errors import UserError
from knoblab.server.binary import ServerBinary
from knoblab.server.sandbox import Sandbox, derived_template
from knoblab.workloads.query import WorkloadError
from knoblab.workloads.script import (
    BodyTemplate,
    ScriptWorkload,
    reads_only,
    split_statements,
    trim_comment_tail,
)
from tests.fakes import query

SETUP = "CREATE TABLE t (id INT UNSIGNED NOT NULL PRIMARY KEY, conn INT NOT NULL) ENGINE=InnoDB"
INSERT = "INSERT INTO t (id, conn) VALUES ({row}, {connection})"


# --------------------------------------------------------------------------- helpers


def _other_connections(server: Sandbox) -> list[tuple]:
    """Client connections on the server besides the one asking (system threads left out)."""
    return [row for row in query(server, "SHOW PROCESSLIST")
            if row[1] != "system user" and row[4] != "Daemon" and row[7] != "SHOW PROCESSLIST"]


def _wait_no_connections(server: Sandbox, timeout: float = 3.0) -> list[tuple]:
    # The server drops a closed or killed connection asynchronously: a moment may pass.
    deadline = time.monotonic() + timeout
    while (left := _other_connections(server)) and time.monotonic() < deadline:
        time.sleep(0.05)
    return left


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def _script_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("knoblab-script-")]


@pytest.fixture(scope="module")
def template(binary: ServerBinary, knoblab_home: Path) -> Path:
    workload = ScriptWorkload(setup=SETUP, body=INSERT)
    data = workload.dataset({})
    return derived_template(binary, data.key, data.build, knoblab_home)


@pytest.fixture
def server(binary: ServerBinary, knoblab_home: Path, template: Path):
    with Sandbox(binary, template, {}, home=knoblab_home) as started:
        yield started


# --------------------------------------------------------------------------- no server


def test_placeholders_are_replaced_as_plain_text():
    body = ("INSERT INTO t VALUES ({row}, {connection}, {iteration}, '{\"k\": {row}}', "
            "'{rows}', '{ row }', '{{iteration}}', '%s {0}')")
    expected = ("INSERT INTO t VALUES (52, 2, 1, '{\"k\": 52}', "
                "'{rows}', '{ row }', '{1}', '%s {0}')")
    assert BodyTemplate(body).render(2, 1, 52) == expected
    assert BodyTemplate("SELECT 1").render(3, 4, 5) == "SELECT 1"
    assert BodyTemplate("{row}").render(1, 0, 1) == "1"


def test_statement_counting_honours_quotes_and_comments():
    sql = ("INSERT INTO t VALUES (';'); -- a comment; not a statement\n"
           "/* ; */ UPDATE t SET c = 'it''s; \\' ;' WHERE `we;rd` = 1; # tail ;\n")
    assert len(split_statements(sql)) == 2
    assert split_statements("/*!100000 SET @a = 1 */") == ["/*!100000 SET @a = 1 */"]
    assert split_statements("-- only\n/* comments */") == []
    # MariaDB answers a comment after the last ';' with an extra empty result: it is cut off.
    assert trim_comment_tail("INSERT INTO t VALUES (1); -- done") == "INSERT INTO t VALUES (1);"
    assert trim_comment_tail("SELECT 1 -- no ';' after it") == "SELECT 1 -- no ';' after it"


@pytest.mark.parametrize(("changes", "key"), [
    ({"body": ""}, "body"),
    ({"body": "   \n\t"}, "body"),
    ({"body": "-- nothing to run"}, "body"),
    ({"connections": 0}, "connections"),
    ({"iterations": -1}, "iterations"),
    ({"iterations": 2.5}, "iterations"),
    ({"transaction": 0}, "transaction"),
    ({"connections": True}, "connections"),
    ({"timeout": 0}, "timeout"),
    ({"timeout": -3.0}, "timeout"),
    ({"timeout": float("nan")}, "timeout"),
    ({"setup": None}, "setup"),
])
def test_bad_parameters_are_refused_naming_the_key(changes, key):
    arguments = {"setup": "", "body": "SELECT 1", **changes}
    with pytest.raises(UserError) as caught:
        ScriptWorkload(**arguments)
    message = str(caught.value)
    assert f"[workload] {key}" in message
    assert "\n" not in message


def test_prepare_key_follows_the_setup_text_only():
    one = ScriptWorkload(setup=SETUP, body="SELECT 1")
    same = ScriptWorkload(setup=SETUP, body=INSERT, connections=4, iterations=7)
    other = ScriptWorkload(setup=SETUP + " ROW_FORMAT=COMPACT", body="SELECT 1")
    assert one.dataset({}).key == same.dataset({}).key
    assert one.dataset({}).key != other.dataset({}).key
    assert one.dataset({}).key.startswith("script-") and len(one.dataset({}).key) == 19


@pytest.mark.parametrize("body, reading", [
    ("SELECT grp, COUNT(*) FROM t GROUP BY grp; select 2", True),
    ("-- a comment\nWITH x AS (SELECT 1) SELECT * FROM x; SHOW STATUS; EXPLAIN SELECT 1", True),
    ("SELECT 1; INSERT INTO t VALUES (1)", False),
    ("WITH x AS (SELECT 1) DELETE FROM t", False),
    ("SELECT * FROM t INTO OUTFILE '/tmp/x'", False),
    ("SET @a = 1; SELECT 1", False),
    ("CALL refresh()", False),
    ("SELECT 'insert here'", False),  # a writing word anywhere errs on the safe side
    ("SELECT f()", False),  # a stored function may write
    ("SELECT shop.next_id() FROM t", False),
    ("SELECT COUNT(*), MAX(grp) FROM t WHERE grp = {row}", True),  # the server's own
    ("SHOW STATUS", True),
])
def test_a_body_that_only_reads_shares_server_starts(body, reading):
    assert reads_only(body) is reading
    spec = ScriptWorkload.from_spec({"setup": SETUP, "body": body}, {}, {}, None)
    assert spec.writes_data is not reading


def test_describe_is_plain_data():
    described = ScriptWorkload(setup=SETUP, body="INSERT INTO t VALUES ({row}, 1); DO 1;",
                               connections=3, iterations=5, transaction=2).describe()
    assert described["connections"] == 3 and described["iterations"] == 5
    assert described["transaction"] == 2 and described["statements_per_iteration"] == 2
    assert described["setup"] == SETUP and described["body"].startswith("INSERT")


# --------------------------------------------------------------------------- real servers


@pytest.mark.server
def test_setup_once_then_autocommit_inserts_on_three_connections(
        binary, knoblab_home, template, server):
    builds = []
    workload = ScriptWorkload(setup=SETUP, body=INSERT, connections=3, iterations=50)
    again = derived_template(binary, workload.dataset({}).key,
                             lambda s: builds.append(s), knoblab_home)
    assert again == template and builds == []  # the template is made once, then reused
    assert query(server, "SELECT COUNT(*) FROM t") == ((0,),)

    measured = workload.run_body(server)

    assert measured.seconds > 0 and measured.rows == 150
    ids = [row[0] for row in query(server, "SELECT id FROM t ORDER BY id")]
    assert ids == list(range(1, 151))
    # {row} is (connection - 1) * iterations + iteration + 1: connection c owns one block.
    assert query(server, "SELECT conn, MIN(id), MAX(id), COUNT(*) FROM t GROUP BY conn") == (
        (1, 1, 50, 50), (2, 51, 100, 50), (3, 101, 150, 50))
    details = measured.details
    assert details["statements"] == 150 and details["transactions"] == 150
    assert details["statements_per_iteration"] == 1
    assert details["status"]["com_insert"] == 150
    assert details["status"].get("com_commit", 0) == 0  # autocommit sends no COMMIT
    per_connection = details["per_connection_seconds"]
    assert len(per_connection) == 3
    assert max(per_connection) == pytest.approx(measured.seconds, abs=1e-5)
    assert details["iterations_per_second"] == pytest.approx(150 / measured.seconds, rel=1e-3)
    assert 0 < details["client_cpu_seconds"] < 3 * measured.seconds + 0.1
    assert details["regime"] in ("CPU-bound", "I/O-bound", "mixed")
    for key in ("cpu_share", "iowait_share", "read_bytes", "write_bytes", "cpu_seconds"):
        assert key in details
    assert details["os"]["server_cpu_seconds"] >= 0
    assert _wait_no_connections(server) == []
    assert _script_threads() == []


@pytest.mark.server
def test_transactions_of_ten_commit_once_per_transaction(server):
    # Two statements per iteration, a trailing comment the server would count as a third.
    body = f"{INSERT}; UPDATE t SET conn = conn WHERE id = {{row}}; -- touch it"
    workload = ScriptWorkload(setup=SETUP, body=body, connections=3, iterations=25,
                              transaction=10)
    measured = workload.run_body(server)

    assert measured.rows == 75
    assert query(server, "SELECT COUNT(*), MIN(id), MAX(id) FROM t") == ((75, 1, 75),)
    details = measured.details
    assert details["transactions"] == 9  # ceil(25 / 10) = 3 per connection
    assert details["status"]["com_commit"] == 9
    assert details["status"]["com_begin"] == 9
    assert details["status"]["com_insert"] == 75
    assert details["status"]["com_update"] == 75
    assert details["statements"] == 150 and details["statements_per_iteration"] == 2


@pytest.mark.server
def test_failing_body_stops_every_worker_and_names_where(binary, knoblab_home, template):
    # Connection 2 inserts id 1000 twice: its second iteration (iteration 1) fails.
    body = "INSERT INTO t (id, conn) VALUES (IF({connection} = 2, 1000, {row}), {connection})"
    workload = ScriptWorkload(setup=SETUP, body=body, connections=3, iterations=2000)
    with Sandbox(binary, template, {}, home=knoblab_home) as server:
        pid, marker = server.pid, str(server.dir)
        began = time.monotonic()
        with pytest.raises(WorkloadError) as caught:
            workload.run_body(server)
        assert time.monotonic() - began < 5
        message = str(caught.value)
        assert message.startswith("script body failed on connection 2, iteration 1: (1062) ")
        assert "Duplicate entry '1000'" in message and "\n" not in message
        # The other workers stopped early instead of finishing their 2000 iterations.
        assert query(server, "SELECT COUNT(*) FROM t")[0][0] < 2 * 2000
        assert _wait_no_connections(server) == []
        assert _script_threads() == []
    assert server.process is None and not server.dir.exists()
    assert marker not in _cmdline(pid)  # the server process is gone (or the pid reused)


@pytest.mark.server
def test_timeout_stops_a_hung_body_promptly(server):
    workload = ScriptWorkload(setup=SETUP, body="SELECT SLEEP(5)", connections=2,
                              iterations=3, timeout=0.5)
    began = time.monotonic()
    with pytest.raises(WorkloadError, match=r"^script body exceeded the timeout of 0\.5 s$"):
        workload.run_body(server)
    assert time.monotonic() - began < 3
    assert _wait_no_connections(server) == []  # the sleeping statements were killed
    assert _script_threads() == []


@pytest.mark.server
def test_setup_failure_names_the_statement(binary, knoblab_home):
    workload = ScriptWorkload(setup=f"{SETUP}; INSERT INTO t VALUES (1, 1); "
                                    "INSERT INTO no_such_table VALUES (2)",
                              body="SELECT 1")
    with pytest.raises(UserError) as caught:
        derived_template(binary, workload.dataset({}).key, workload.dataset({}).build, knoblab_home)
    message = str(caught.value)
    assert message.startswith("script setup failed at statement 3: (1146) ")
    assert "no_such_table" in message
    assert not (knoblab_home / "templates" / binary.slug / workload.dataset({}).key).exists()


@pytest.mark.server
def test_a_warm_up_is_one_pass_of_a_body_that_repeats_and_all_of_one_that_varies(server):
    # The same statement every iteration: one transaction's worth on each connection warms
    # what all of it touches. Rows of their own per iteration: all of them.
    def inserts() -> int:
        return int(query(server, "SHOW GLOBAL STATUS LIKE 'Com_insert'")[0][1])

    before = inserts()
    ScriptWorkload(setup=SETUP, body="INSERT INTO t (id, conn) VALUES (1000 + {connection}, "
                   "{connection}) ON DUPLICATE KEY UPDATE conn = conn",
                   connections=2, iterations=40).warm_up(server, {}, [])
    once = inserts() - before
    ScriptWorkload(setup=SETUP, body=INSERT, connections=2, iterations=40).warm_up(
        server, {}, [])
    assert (once, inserts() - before - once) == (2, 80)
