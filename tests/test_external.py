"""Tuning a running server: the MariaDB on 127.0.0.1:3306 (root, no password), changed with
SET GLOBAL and always put back — at the end, on Ctrl-C, and after kill -9 with
`knoblab restore`. Its benchmark data lives only in the database knoblab created: each test's
own ([server] database, the `running_database` fixture)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pymysql
import pytest

from knoblab.store import Store
from tests.fakes import RUNNING, SERVER_WIDE, cli_command, cli_env, reaped

# Every test here changes the running server's settings, or checks that none changed.
pytestmark = [pytest.mark.server, SERVER_WIDE]

SERVER = ('[server]\nkind = "external"\nhost = "127.0.0.1"\nport = 3306\nuser = "{user}"\n'
          'database = "{database}"\n{extra}')
SPEC = """\
name = "external-{name}"
{server}
[dataset]
rows = 20_000

[workload]
sql = "{sql}"
repetitions = {repetitions}

[sweep]
read_buffer_size = ["64K", "1M"]
sort_buffer_size = ["{sort}", "4M"]
"""


def _connect(**kwargs) -> pymysql.Connection:
    options = {**RUNNING, "autocommit": True, "ssl_disabled": True, **kwargs}
    return pymysql.connect(**options)


def _globals(*names: str) -> dict[str, str]:
    conn = _connect()
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT " + ", ".join(f"@@GLOBAL.{n}" for n in names))
            return dict(zip(names, map(str, cur.fetchone()), strict=True))
    finally:
        conn.close()


@pytest.fixture(scope="module", autouse=True)
def reachable():
    try:
        _connect().close()
    except pymysql.MySQLError as exc:
        pytest.fail(f"the MariaDB on 127.0.0.1:3306 is needed for these tests: {exc}")


@pytest.fixture()
def originals():
    """The server's values before the test; the test must leave them exactly so."""
    before = _globals("read_buffer_size", "sort_buffer_size")
    yield before
    after = _globals("read_buffer_size", "sort_buffer_size")
    if after != before:  # put them back for the other tests, then fail this one
        conn = _connect()
        with conn.cursor() as cur:
            for name, value in before.items():
                cur.execute(f"SET GLOBAL {name} = %s", (int(value),))
        conn.close()
    assert after == before


def _spec(tmp_path: Path, database: str, *, name: str = "sweep", user: str = "root",
          extra: str = "", sql: str = "SELECT COUNT(*) FROM dt2 WHERE slack LIKE 'a%'",
          repetitions: int = 2, sort: str = "1M") -> Path:
    """A sweep on the running server, its data in `database` (the test's own)."""
    path = tmp_path / f"{name}.toml"
    server = SERVER.format(user=user, database=database, extra=extra)
    path.write_text(SPEC.format(name=name, server=server, sql=sql, repetitions=repetitions,
                                sort=sort))
    return path


def _knoblab(knoblab_home: Path, store: Path, *args: str, **env: str):
    return subprocess.run(cli_command(store, *args), env=cli_env(knoblab_home, **env),
                          cwd=store.parent, capture_output=True, text=True, timeout=300)


def _wait_for(condition, proc: subprocess.Popen, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        if proc.poll() is not None:
            raise AssertionError(f"knoblab exited early ({proc.returncode}): "
                                 f"{proc.stderr.read() if proc.stderr else ''}")
        time.sleep(0.05)
    raise AssertionError("timed out waiting for the run to get there")


def test_sweep_changes_settings_on_new_connections_and_puts_them_back(
        knoblab_home, tmp_path, originals, running_database):
    store = tmp_path / "s.sqlite"
    out = _knoblab(knoblab_home, store, "run", str(_spec(tmp_path, running_database)),
                   "--json", str(tmp_path / "r.json"), "--out", str(tmp_path / "o"))
    assert out.returncode == 0, out.stderr
    result = json.loads((tmp_path / "r.json").read_text())
    assert len(result["points"]) == 4 and all(p["n"] == 2 for p in result["points"])
    for point in result["points"]:
        # The value the measured connection ran with, read back on the server.
        assert point["effective"]["read_buffer_size"] == str(
            {"64K": 65536, "1M": 1 << 20}[point["settings"]["read_buffer_size"]])
    assert result["servers"][0]["endpoint"] == "root@127.0.0.1:3306"
    saved = Store(f"sqlite:///{store}").pending_restores()
    assert saved == []  # everything put back: nothing left pending
    # The originals the run recorded are the server's values before it (checked by `originals`).


def test_ctrl_c_puts_the_settings_back(knoblab_home, tmp_path, originals, running_database):
    store = tmp_path / "s.sqlite"
    spec = _spec(tmp_path, running_database, name="ctrl-c",
                 sql="SELECT SLEEP(0.4), COUNT(*) FROM dt2", repetitions=6)
    proc = subprocess.Popen(cli_command(store, "run", str(spec)), env=cli_env(knoblab_home),
                            cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)
    with reaped(proc):
        _wait_for(lambda: store.exists() and _done(store) >= 2, proc)
        assert _globals("sort_buffer_size") != originals or \
            _globals("read_buffer_size") != originals  # mid-run: something is changed
        os.killpg(proc.pid, signal.SIGINT)
        code = proc.wait(timeout=30)
    assert code == 130
    assert Store(f"sqlite:///{store}").pending_restores() == []


def test_kill_9_then_restore(knoblab_home, tmp_path, originals, running_database):
    store = tmp_path / "s.sqlite"
    spec = _spec(tmp_path, running_database, name="kill",
                 sql="SELECT SLEEP(0.4), COUNT(*) FROM dt2", repetitions=6, sort="3M")
    _kill_9_after(knoblab_home, store, spec, done=1)
    pending = Store(f"sqlite:///{store}").pending_restores()
    assert {row["name"] for row in pending} == {"read_buffer_size", "sort_buffer_size"}
    assert {row["name"]: row["original"] for row in pending} == originals
    assert all("password" not in json.dumps(row["server"]).lower() or
               row["server"]["password_env"] is None for row in pending)
    assert _globals("read_buffer_size", "sort_buffer_size") != originals

    # Every later start says so; a new run on that server is refused until it is restored.
    again = _knoblab(knoblab_home, store, "run",
                     str(_spec(tmp_path, running_database, name="again")))
    assert again.returncode == 2
    assert "knoblab restore" in again.stdout + again.stderr
    assert "put it back first" in again.stderr

    restored = _knoblab(knoblab_home, store, "restore")
    assert restored.returncode == 0, restored.stderr
    assert "read_buffer_size" in restored.stdout and "sort_buffer_size" in restored.stdout
    assert _globals("read_buffer_size", "sort_buffer_size") == originals
    assert Store(f"sqlite:///{store}").pending_restores() == []
    nothing = _knoblab(knoblab_home, store, "restore")
    assert nothing.returncode == 0 and "nothing to restore" in nothing.stdout


def _kill_9_after(knoblab_home: Path, store: Path, spec: Path, *, done: int) -> None:
    """Run the spec and kill -9 knoblab once `done` measurements are stored."""
    proc = subprocess.Popen(cli_command(store, "run", str(spec)), env=cli_env(knoblab_home),
                            cwd=store.parent, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)
    with reaped(proc):
        _wait_for(lambda: store.exists() and _done(store) >= done, proc)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)


def _done(store: Path) -> int:
    import sqlite3

    try:
        conn = sqlite3.connect(store, timeout=5)
        try:
            return conn.execute("SELECT COUNT(*) FROM trials WHERE status = 'done'").fetchone()[0]
        finally:
            conn.close()
    except sqlite3.OperationalError:
        return 0


def test_restart_only_setting_is_refused_naming_it(knoblab_home, tmp_path, originals,
                                                   running_database):
    spec = _spec(tmp_path, running_database, name="restart").read_text().replace(
        'sort_buffer_size = ["1M", "4M"]', 'innodb_sort_buffer_size = ["1M", "4M"]')
    path = tmp_path / "restart.toml"
    path.write_text(spec)
    out = _knoblab(knoblab_home, tmp_path / "s.sqlite", "run", str(path))
    assert out.returncode == 2
    assert "innodb_sort_buffer_size can only be set at start-up" in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1


def test_a_database_knoblab_did_not_create_is_left_alone(knoblab_home, tmp_path, originals,
                                                         running_database):
    conn = _connect()
    try:
        with conn.cursor() as cur:
            cur.execute(f"CREATE DATABASE {running_database}")
            cur.execute(f"CREATE TABLE {running_database}.precious (id INT)")
        out = _knoblab(knoblab_home, tmp_path / "s.sqlite", "run",
                       str(_spec(tmp_path, running_database)))
        assert out.returncode == 2
        assert f"database {running_database} on root@127.0.0.1:3306 was not created by " \
            "knoblab" in out.stderr
        with conn.cursor() as cur:
            cur.execute(f"SHOW TABLES FROM {running_database}")
            assert cur.fetchall() == (("precious",),)
    finally:
        with conn.cursor() as cur:
            cur.execute(f"DROP DATABASE IF EXISTS {running_database}")
        conn.close()


def test_password_from_the_environment_is_used_and_never_stored(knoblab_home, tmp_path,
                                                                 originals, running_database):
    password = "kn0bl4b-Secret-771"
    conn = _connect()
    try:
        with conn.cursor() as cur:
            cur.execute("DROP USER IF EXISTS 'knoblab_test'@'127.0.0.1'")
            cur.execute("CREATE USER 'knoblab_test'@'127.0.0.1' IDENTIFIED BY %s", (password,))
            cur.execute(f"GRANT ALL ON {running_database}.* TO 'knoblab_test'@'127.0.0.1'")
            cur.execute("GRANT SUPER, PROCESS, RELOAD ON *.* TO 'knoblab_test'@'127.0.0.1'")
        store = tmp_path / "s.sqlite"
        spec = _spec(tmp_path, running_database, user="knoblab_test",
                     extra='password_env = "KNOBLAB_TEST_PW"\n', repetitions=1)
        wrong = _knoblab(knoblab_home, store, "run", str(spec), KNOBLAB_TEST_PW="wrong")
        assert wrong.returncode == 2
        assert "refused the login ($KNOBLAB_TEST_PW)" in wrong.stderr
        out = _knoblab(knoblab_home, store, "run", str(spec), "--json",
                       str(tmp_path / "r.json"), "--out", str(tmp_path / "o"),
                       KNOBLAB_TEST_PW=password)
        assert out.returncode == 0, out.stderr
        for written in [store, *tmp_path.rglob("*.json"), *tmp_path.rglob("*.toml")]:
            assert password.encode() not in written.read_bytes(), written
        assert password not in out.stdout + out.stderr + wrong.stdout + wrong.stderr
    finally:
        with conn.cursor() as cur:
            cur.execute("DROP USER IF EXISTS 'knoblab_test'@'127.0.0.1'")
        conn.close()


def test_a_writing_script_starts_from_fresh_tables_every_time(knoblab_home, tmp_path,
                                                              originals, running_database):
    spec = tmp_path / "script.toml"
    spec.write_text(SERVER.format(user="root", database=running_database, extra="") + """
[workload]
kind = "script"
setup = "CREATE TABLE t (id INT PRIMARY KEY) ENGINE=InnoDB"
body = "INSERT INTO t VALUES ({row})"
connections = 2
iterations = 50
repetitions = 2

[sweep]
sort_buffer_size = ["1M", "4M"]
""")
    store = tmp_path / "s.sqlite"
    out = _knoblab(knoblab_home, store, "run", str(spec), "--json", str(tmp_path / "r.json"),
                   "--out", str(tmp_path / "o"))
    assert out.returncode == 0, out.stderr
    trials = Store(f"sqlite:///{store}").trials(json.loads(
        (tmp_path / "r.json").read_text())["run_id"])
    # The same ids inserted four times: only fresh tables make that possible.
    assert [t.status for t in trials] == ["done"] * 4
    assert all(t.details["status"]["com_insert"] == 100 for t in trials)


def test_kill_9_then_resume_finishes_and_puts_everything_back(knoblab_home, tmp_path,
                                                              originals, running_database):
    store = tmp_path / "s.sqlite"
    spec = _spec(tmp_path, running_database, name="resume",
                 sql="SELECT SLEEP(0.3), COUNT(*) FROM dt2", repetitions=3, sort="3M")
    _kill_9_after(knoblab_home, store, spec, done=2)
    run_id = Store(f"sqlite:///{store}").list_runs()[0]["id"]
    done_before = _done(store)
    resumed = _knoblab(knoblab_home, store, "resume", run_id, "--json",
                       str(tmp_path / "r.json"), "--out", str(tmp_path / "o"))
    assert resumed.returncode == 0, resumed.stderr
    assert f"run {run_id} left" in resumed.stdout + resumed.stderr  # announced
    result = json.loads((tmp_path / "r.json").read_text())
    assert [p["n"] for p in result["points"]] == [3] * 4
    assert _done(store) == 12 > done_before
    assert Store(f"sqlite:///{store}").pending_restores() == []
