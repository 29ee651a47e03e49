"""Workload SQL that destroys what knoblab relies on: refused when the spec is read where that
is certain (SHUTDOWN, KILL, SET GLOBAL, FLUSH/RESET, accounts, DROP DATABASE), and otherwise
seen after the measurement (the settings, the data, the login, the server itself): that
measurement fails with the reason, and the run goes on or stops cleanly, never with a
traceback or a verdict over a server that was not the one configured. Real sandboxes."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pymysql
import pytest

from knoblab.errors import UserError
from knoblab.runner import start_run
from knoblab.spec import parse_spec
from knoblab.store import RunInfo, Store
from tests.fakes import SERVER_WIDE, Quiet, reaped

pytestmark = pytest.mark.server


def _query_spec(sql: str, **workload: object):
    return parse_spec({
        "dataset": {"rows": 500},
        "workload": {"sql": sql, "repetitions": 1, **workload},
        "sweep": {"read_buffer_size": ["64K", "128K"]},
    }, default_name="hostile")


def _run(spec, home: Path, tmp_path: Path) -> tuple[Store, str]:
    store = Store(f"sqlite:///{tmp_path / 's.sqlite'}")
    return store, start_run(spec, store, home, Quiet())


# --- refused before anything runs ------------------------------------------------------------

REFUSED = [
    "SHUTDOWN",
    "KILL CONNECTION_ID()",
    "kill query 12",
    "SET GLOBAL read_buffer_size = 1048576",
    "SET @@global.read_only = 1",
    "SET GLOBAL read_only = ON",
    "SET SESSION sort_buffer_size = 1, GLOBAL tmp_table_size = 1",
    "FLUSH STATUS",
    "FLUSH TABLES WITH READ LOCK",
    "RESET MASTER",
    "RESET QUERY CACHE",
    "DROP USER root@localhost",
    "ALTER USER root@localhost IDENTIFIED BY 'x'",
    "RENAME USER root@localhost TO nobody@localhost",
    "SET PASSWORD FOR root@localhost = PASSWORD('x')",
    "GRANT ALL ON *.* TO someone",
    "REVOKE ALL ON *.* FROM root@localhost",
    "DROP DATABASE knoblab",
    "drop schema if exists knoblab",
    "INSTALL SONAME 'ha_blackhole'",
    "/* a comment */ SHUTDOWN",
    "/*!100000 SET GLOBAL read_only = 1 */",
]


@pytest.mark.parametrize("statement", REFUSED)
def test_statements_that_undo_knoblab_are_refused_when_the_spec_is_read(statement):
    with pytest.raises(UserError, match="cannot be part of a workload") as query:
        _query_spec(statement)
    assert "[workload] sql" in str(query.value)
    for part in ("setup", "body"):
        with pytest.raises(UserError, match=f"\\[workload\\] {part}: .*cannot be part") as seen:
            parse_spec({"workload": {"kind": "script", "setup": "CREATE TABLE t (i INT)",
                                     "body": "SELECT 1",
                                     part: f"SELECT 1; {statement}; SELECT 2"},
                        "sweep": {"sort_buffer_size": ["1M", "2M"]}}, default_name="hostile")
        keyword = next(w for w in re.findall(r"[A-Za-z]+", statement)
                       if w not in ("a", "comment"))
        named = str(seen.value).split(" cannot be part")[0]
        assert re.search(rf"\b{keyword}\b", named, re.IGNORECASE), named


@pytest.mark.parametrize("sql", [
    "SELECT 'SHUTDOWN; KILL 1; SET GLOBAL x = 1' FROM dt2",
    "SELECT COUNT(*) FROM dt2 -- SHUTDOWN",
    "SELECT `kill` FROM (SELECT 1 AS `kill`) AS t # SET GLOBAL x = 1",
    "SELECT COUNT(*) FROM dt2 WHERE slack LIKE 'reset%'",
])
def test_the_same_words_in_strings_names_and_comments_are_not_refused(sql):
    _query_spec(sql)


# --- seen after the measurement ----------------------------------------------------------------

def _failures(store: Store, run_id: str) -> list[str]:
    trials = store.trials(run_id)
    assert trials and all(t.status == "failed" for t in trials), \
        [(t.status, t.error) for t in trials]
    return [t.error or "" for t in trials]


@pytest.mark.parametrize(("sql", "said"), [
    # The cases, and the same statements hidden from the spec's check.
    ("DROP TABLE dt2", "dropped or renamed knoblab.dt2"),
    ("RENAME TABLE dt2 TO elsewhere", "dropped or renamed knoblab.dt2"),
    ("EXECUTE IMMEDIATE 'DROP DATABASE knoblab'", "dropped database knoblab"),
    ("EXECUTE IMMEDIATE 'SET GLOBAL read_buffer_size = 1048576'",
     "→ 1048576) changed during the workload"),
    ("EXECUTE IMMEDIATE 'SET GLOBAL read_only = 1'", "global read_only (OFF → ON) changed"),
    ("EXECUTE IMMEDIATE 'SHUTDOWN'", "shut down during the measurement"),
    ("EXECUTE IMMEDIATE 'DROP USER root@localhost'", "refuses knoblab's login"),
    ("EXECUTE IMMEDIATE CONCAT('KILL ', CONNECTION_ID())", "Connection was killed"),
])
def test_a_measurement_that_changed_the_server_fails_saying_why(sql, said, knoblab_home,
                                                                 tmp_path):
    store, run_id = _run(_query_spec(sql), knoblab_home, tmp_path)
    errors = _failures(store, run_id)
    assert all(said in error for error in errors), errors
    assert store.run(run_id)["status"] == "done"


def test_a_statement_that_may_hold_anything_gets_fresh_data_each_time():
    # A CALL or EXECUTE IMMEDIATE can change the data: no blocked start shares it.
    for sql in ("EXECUTE IMMEDIATE 'DELETE FROM dt2'", "CALL p()", "DO SLEEP(0)"):
        assert _query_spec(sql).workload.writes_data, sql
    assert not _query_spec("/* hi */ SELECT COUNT(*) FROM dt2").workload.writes_data


def test_a_setting_changed_within_a_blocked_start_is_named_and_every_point_fails(
        knoblab_home, tmp_path):
    # The run: without the check every measurement after the first ran at 1M while
    # the table said 64K and 128K, with verdicts. A view reads as a SELECT (so the points
    # share a start), and the function it calls changes the setting.
    spec = parse_spec({"workload": {
        "kind": "script", "setup": "CREATE FUNCTION f() RETURNS INT BEGIN "
                                   "SET GLOBAL read_buffer_size = 1048576; RETURN 1; END; "
                                   "CREATE VIEW v AS SELECT f() AS one",
        "body": "SELECT one FROM v", "iterations": 1, "repetitions": 2},
        "sweep": {"read_buffer_size": ["64K", "128K"]}}, default_name="blocked")
    store, run_id = _run(spec, knoblab_home, tmp_path)
    assert RunInfo.from_json(store.run(run_id)["info"]).design["name"] == "blocked"
    errors = _failures(store, run_id)
    assert len(errors) == 4
    assert any("(65536 → 1048576)" in error for error in errors), errors
    assert all("put read_buffer_size back" in error for error in errors), errors


def test_a_script_that_drops_root_in_its_data_fails_at_once_naming_it(knoblab_home, tmp_path):
    # Privileges changed in their tables take effect at the next start: every start then
    # refused root's login, and each one waited 120 s for a server "not ready".
    spec = parse_spec({"workload": {
        "kind": "script", "setup": "CREATE TABLE t (i INT); "
                                   "DELETE FROM mysql.global_priv WHERE User = 'root'",
        "body": "SELECT COUNT(*) FROM t", "iterations": 1, "repetitions": 1},
        "sweep": {"sort_buffer_size": ["1M", "2M"]}}, default_name="no-root")
    store, run_id = _run(spec, knoblab_home, tmp_path)
    errors = _failures(store, run_id)
    assert all("refuses knoblab's login as root" in error and "root@localhost" in error
               for error in errors), errors


def test_a_setup_that_drops_root_is_refused_when_the_data_is_built(knoblab_home, tmp_path):
    spec = parse_spec({"workload": {
        "kind": "script", "setup": "CREATE TABLE t (i INT); "
                                   "EXECUTE IMMEDIATE 'DROP USER root@localhost'",
        "body": "SELECT COUNT(*) FROM t", "iterations": 1, "repetitions": 1},
        "sweep": {"sort_buffer_size": ["1M", "2M"]}}, default_name="drop-root")
    with pytest.raises(UserError, match="the setup dropped or changed root@localhost"):
        _run(spec, knoblab_home, tmp_path)


def test_files_the_server_writes_stay_inside_the_sandbox(knoblab_home, tmp_path):
    outside = tmp_path / "written-by-the-server.txt"
    spec = parse_spec({"workload": {
        "kind": "script", "setup": "CREATE TABLE t (i INT); INSERT INTO t VALUES (1)",
        "body": f"SELECT * FROM t INTO OUTFILE '{outside}'", "iterations": 1,
        "repetitions": 1}, "sweep": {"sort_buffer_size": ["1M", "2M"]}}, default_name="out")
    store, run_id = _run(spec, knoblab_home, tmp_path)
    errors = _failures(store, run_id)
    assert all("secure-file-priv" in error for error in errors), errors
    assert not outside.exists()


def test_a_template_deleted_during_the_run_stops_it_cleanly(knoblab_home, tmp_path):
    spec = _query_spec("SELECT COUNT(*) FROM dt2", repetitions=3, design="restarts")
    store = Store(f"sqlite:///{tmp_path / 's.sqlite'}")

    class Deleting(Quiet):
        def trial(self, label, repetition, status, value, error) -> None:
            super().trial(label, repetition, status, value, error)
            for ready in knoblab_home.glob("templates/*/scan-table-*/.ready"):
                shutil.rmtree(ready.parent)

    with pytest.raises(UserError, match="template .* was deleted during the run"):
        start_run(spec, store, knoblab_home, Deleting())
    run = store.list_runs()[0]
    assert run["status"] == "failed"
    # What was measured is kept; the measurement the deletion stopped is not one.
    assert [t.status for t in store.trials(run["id"])] == ["done", "discarded"]


# --- a disk that fills during a measurement ------------------------------------------------------

@pytest.fixture(scope="module")
def small_disk(tmp_path_factory):
    """A 600 MB file system of its own (loop-mounted ext4) for KNOBLAB_HOME: room for the
    templates and one sandbox, not for what the workload writes. Needs root."""
    if os.geteuid() != 0 or not shutil.which("mkfs.ext4"):
        pytest.skip("mounting a small file system needs root and mkfs.ext4")
    folder = tmp_path_factory.mktemp("small-disk")
    image, mount = folder / "disk.img", folder / "mnt"
    mount.mkdir()
    with image.open("wb") as handle:
        handle.truncate(600 << 20)
    made = subprocess.run(["mkfs.ext4", "-q", "-F", str(image)], capture_output=True)
    if made.returncode != 0 or subprocess.run(["mount", "-o", "loop", str(image), str(mount)],
                                              capture_output=True).returncode != 0:
        pytest.skip("cannot mount a loop file system here")
    try:
        yield mount / "home"
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)
        image.unlink(missing_ok=True)


@pytest.mark.parametrize("engine", ["MyISAM", "InnoDB"])
def test_a_disk_that_fills_fails_the_measurement_naming_it(engine, small_disk, tmp_path):
    # MyISAM and Aria wait for space without end ("Disk is full writing ..."): the run sat at
    # 0/4, or ended in "script body exceeded the timeout", never naming the disk.
    spec = parse_spec({"workload": {
        "kind": "script", "setup": f"CREATE TABLE t (id INT PRIMARY KEY, pad LONGTEXT) "
                                   f"ENGINE={engine}",
        "body": "INSERT INTO t VALUES ({row}, REPEAT('x', 4000000))", "iterations": 400,
        "repetitions": 1, "timeout": 30},
        "sweep": {"sort_buffer_size": ["1M", "2M"]}}, default_name="fill")
    store, run_id = _run(spec, small_disk, tmp_path)
    errors = _failures(store, run_id)
    assert all(f"the disk of {small_disk} filled up" in error for error in errors), errors
    assert not list((small_disk / "sandboxes").glob("*"))  # nothing left behind


# --- a running server: the user's settings are put back ------------------------------------------

# What these tests' workloads change, and what knoblab sets around them.
WATCHED = ("tmp_table_size", "tmp_memory_table_size", "read_buffer_size", "sort_buffer_size",
           "read_only", "max_connections")


def _running_globals() -> dict[str, str]:
    conn = pymysql.connect(host="127.0.0.1", port=3306, user="root", autocommit=True)
    try:
        with conn.cursor() as cur:
            cur.execute("SHOW GLOBAL VARIABLES WHERE Variable_name IN "
                        f"({', '.join(['%s'] * len(WATCHED))})", WATCHED)
            return dict(cur.fetchall())
    finally:
        conn.close()


@pytest.fixture()
def as_found():
    """The running server's globals before the test; the test must leave them so."""
    try:
        before = _running_globals()
    except pymysql.MySQLError as exc:
        pytest.fail(f"the MariaDB on 127.0.0.1:3306 is needed for these tests: {exc}")
    yield
    after = _running_globals()
    changed = {name: before[name] for name in before if after.get(name) != before[name]}
    if changed:  # put them back for the other tests, then fail this one
        conn = pymysql.connect(host="127.0.0.1", port=3306, user="root", autocommit=True)
        with conn.cursor() as cur:
            for name, value in changed.items():
                cur.execute(f"SET GLOBAL {name} = %s",
                            (int(value) if value.lstrip("-").isdigit() else value,))
        conn.close()
    assert not changed, f"left changed on 127.0.0.1:3306: {sorted(changed)}"


def _running_spec(server: dict[str, object], sql: str, repetitions: int = 1):
    return parse_spec({
        "server": server,
        "dataset": {"rows": 500},
        "workload": {"sql": sql, "repetitions": repetitions},
        "sweep": {"read_buffer_size": ["64K", "128K"]},
    }, default_name="hostile-running")


@SERVER_WIDE
def test_a_global_the_workload_changed_on_a_running_server_is_named_and_put_back(
        knoblab_home, tmp_path, as_found, running_server):
    # The run ended 0 with verdicts, and the user's server was left at 1M.
    store, run_id = _run(_running_spec(running_server, "EXECUTE IMMEDIATE 'SET GLOBAL "
                                       "tmp_table_size = 1048576'"), knoblab_home, tmp_path)
    errors = _failures(store, run_id)
    assert len(errors) == 2
    assert all("tmp_table_size (" in error and
               "tmp_table_size back" in error for error in errors), errors
    assert store.pending_restores() == []


@SERVER_WIDE
def test_a_workload_that_drops_knoblabs_database_on_a_running_server_fails_saying_so(
        knoblab_home, tmp_path, as_found, running_server, running_database):
    store, run_id = _run(_running_spec(running_server, "EXECUTE IMMEDIATE 'DROP DATABASE "
                                       f"{running_database}'", repetitions=2),
                         knoblab_home, tmp_path)
    errors = _failures(store, run_id)
    # Each measurement starts from the data rebuilt, and fails for what it did to it.
    assert len(errors) == 4
    assert all(f"dropped database {running_database}" in error for error in errors), errors


@SERVER_WIDE
def test_a_setup_that_changes_a_global_on_a_running_server_stops_the_run_and_puts_it_back(
        knoblab_home, tmp_path, as_found, running_server):
    table = f"t_{uuid.uuid4().hex[:12]}"
    spec = parse_spec({
        "server": running_server,
        # A setup of its own: data built before under the same setup would not be built again.
        "workload": {"kind": "script", "setup": f"CREATE TABLE {table} (i INT); EXECUTE "
                                                "IMMEDIATE 'SET GLOBAL tmp_table_size = 1048576'",
                     "body": f"SELECT COUNT(*) FROM {table}", "iterations": 1,
                     "repetitions": 1},
        "sweep": {"sort_buffer_size": ["1M", "2M"]}}, default_name="setup-global")
    with pytest.raises(UserError, match=r"global .*tmp_table_size \(\d+ → 1048576\).*"
                                        r"put .*tmp_table_size back"):
        _run(spec, knoblab_home, tmp_path)


@SERVER_WIDE
def test_ctrl_c_during_a_measurement_that_changed_a_global_puts_it_back(knoblab_home, tmp_path,
                                                                       as_found,
                                                                       running_database):
    spec = tmp_path / "changes.toml"
    spec.write_text(f"""
[server]
kind = "external"
host = "127.0.0.1"
port = 3306
user = "root"
database = "{running_database}"
[workload]
kind = "script"
setup = "CREATE TABLE t (i INT)"
body = "EXECUTE IMMEDIATE 'SET GLOBAL tmp_table_size = 1048576'; SELECT SLEEP(30)"
iterations = 1
repetitions = 1
[sweep]
sort_buffer_size = ["1M", "2M"]
""")
    env = {**os.environ, "KNOBLAB_HOME": str(knoblab_home)}
    proc = subprocess.Popen([sys.executable, "-m", "knoblab.cli", "--store",
                             f"sqlite:///{tmp_path / 's.sqlite'}", "run", str(spec)], env=env,
                            cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)
    with reaped(proc):
        deadline = time.monotonic() + 120
        while _running_globals()["tmp_table_size"] != "1048576":
            assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
            assert time.monotonic() < deadline, "the workload never changed the setting"
            time.sleep(0.05)
        os.killpg(proc.pid, signal.SIGINT)
        assert proc.wait(timeout=60) == 130
    # as_found: tmp_table_size is the user's again


@pytest.mark.parametrize(("workload", "sweep", "said"), [
    # sysbench's threads over the sandbox's default of 151: every run failed with 1040.
    ({"kind": "sysbench", "threads": 200, "duration": 5}, {},
     "opens 202 connections at once"),
    # A swept max_connections too low for a script's connections.
    ({"kind": "script", "setup": "CREATE TABLE t (i INT)", "body": "SELECT COUNT(*) FROM t",
      "connections": 20}, {"max_connections": [10, 100]}, "max_connections = 10 lets in 10"),
])
def test_more_connections_than_max_connections_are_refused_before_anything_runs(
        knoblab_home, tmp_path, workload, sweep, said):
    spec = parse_spec({"workload": workload,
                       "sweep": sweep or {"sort_buffer_size": ["1M", "2M"]}},
                      default_name="too-many")
    store = Store(f"sqlite:///{tmp_path / 's.sqlite'}")
    with pytest.raises(UserError, match=said) as caught:
        start_run(spec, store, knoblab_home, Quiet())
    assert "give max_connections = " in str(caught.value)
    assert all(not store.trials(r["id"]) for r in store.list_runs(None))
