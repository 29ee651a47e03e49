"""`knoblab capture` against the MariaDB on 127.0.0.1:3306: a client runs a read-only mix
while the slow log is on for a short window; the log holds its statements and none of
knoblab's own, the dump and the spec are written, and every global setting is back as it was
— after a normal end, after SIGINT, SIGTERM and SIGHUP, and after kill -9 with
`knoblab restore`. A user without the privileges, a bad --for or --data, a folder holding
someone's files: one line, exit 2, nothing changed on the server.

Other tests read this server's globals: the `slow_log_as_it_was` fixture puts back every
setting a capture may change, even when a test fails, and then fails that test.
"""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import threading
import time
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import zstandard

from knoblab.capture import read_log
from knoblab.capture.plan import plan_for
from knoblab.errors import UserError
from knoblab.store import Store
from tests.fakes import SERVER_WIDE, cli_command, cli_env, reaped
from tests.test_external import _connect, _knoblab
from tests.test_external_hostile import plain_user  # noqa: F401  (a fixture)

# Captures change the running server's slow log settings; every test checks they are back.
pytestmark = [pytest.mark.server, SERVER_WIDE]

DATADIR = Path("/var/lib/mysql")
DB = "knoblab_capture_t"
CAPTURER, PASSWORD = "knoblab_capturer", "c4pture-Secret-318"
# Everything a capture may change, by the names this server knows.
WATCHED = ("slow_query_log", "long_query_time", "log_output", "slow_query_log_file",
           "min_examined_row_limit", "log_slow_rate_limit", "log_slow_filter",
           "log_slow_admin_statements", "log_slow_disabled_statements", "general_log",
           "general_log_file", "sql_log_off")
# The client's read-only mix: three statement classes.
MIX = (f"SELECT v FROM {DB}.t_inno WHERE id = %s",
       f"SELECT COUNT(*) FROM {DB}.t_my WHERE n > %s",
       "SELECT %s + 1")
# What only knoblab's own connections run.
OWN = ("Slow_queries", "SET GLOBAL", "CONNECTION_ID", "SYSTEM_VARIABLES", "PROCESSLIST",
       "SET SESSION")


def _globals() -> dict[str, str]:
    conn = _connect()
    try:
        with conn.cursor() as cur:
            marks = ", ".join(["%s"] * len(WATCHED))
            cur.execute(f"SHOW GLOBAL VARIABLES WHERE Variable_name IN ({marks})", WATCHED)
            return dict(cur.fetchall())
    finally:
        conn.close()


def _leftover_logs() -> list[Path]:
    return sorted(DATADIR.glob("knoblab-capture-*.log"))


@pytest.fixture(autouse=True)
def slow_log_as_it_was() -> Iterator[dict[str, str]]:
    before = _globals()
    logs = _leftover_logs()
    yield before
    after = _globals()
    if after != before:  # put back for the other tests, the switch first; then fail
        conn = _connect()
        with conn.cursor() as cur:
            names = ["slow_query_log", *(n for n in before if n != "slow_query_log")]
            for name in names:
                if after.get(name) != before[name]:
                    cur.execute(f"SET GLOBAL {name} = %s", (before[name],))
        conn.close()
    for stray in _leftover_logs():
        if stray not in logs:
            stray.unlink()
    assert after == before


@pytest.fixture(scope="module")
def capturer() -> Iterator[str]:
    """A user with SUPER and every right on the test database, which it alone sees (the dump
    holds it only), logging in with a password from the environment."""
    conn = _connect()
    try:
        with conn.cursor() as cur:
            cur.execute(f"DROP DATABASE IF EXISTS {DB}")
            cur.execute(f"CREATE DATABASE {DB}")
            cur.execute(f"CREATE TABLE {DB}.t_inno (id INT PRIMARY KEY, v VARCHAR(20)) "
                        "ENGINE=InnoDB")
            cur.execute(f"INSERT INTO {DB}.t_inno VALUES (1,'a'),(2,'b'),(3,'c'),(4,'d'),"
                        "(5,'e')")
            cur.execute(f"CREATE TABLE {DB}.t_my (n INT) ENGINE=MyISAM")
            cur.execute(f"INSERT INTO {DB}.t_my VALUES (1),(2),(3)")
            cur.execute(f"CREATE VIEW {DB}.v_inno AS SELECT id FROM {DB}.t_inno")
            cur.execute(f"DROP USER IF EXISTS '{CAPTURER}'@'%'")
            cur.execute(f"CREATE USER '{CAPTURER}'@'%%' IDENTIFIED BY %s", (PASSWORD,))
            cur.execute(f"GRANT SUPER ON *.* TO '{CAPTURER}'@'%'")
            cur.execute(f"GRANT ALL ON {DB}.* TO '{CAPTURER}'@'%'")
        yield CAPTURER
    finally:
        with conn.cursor() as cur:
            cur.execute(f"DROP USER IF EXISTS '{CAPTURER}'@'%'")
            cur.execute(f"DROP DATABASE IF EXISTS {DB}")
        conn.close()


def _spec(tmp_path: Path, user: str, *, password: bool = True) -> Path:
    path = tmp_path / "prod.toml"
    path.write_text(f'name = "prod"\n[server]\nkind = "external"\nhost = "127.0.0.1"\n'
                    f'port = 3306\nuser = "{user}"\n'
                    + ('password_env = "KNOBLAB_TEST_PW"\n' if password else ""))
    return path


# The tests of the window's machinery take the slow log (--log slow), whose settings the
# fixture below watches; those of the general log ask for it.
def _capture(knoblab_home: Path, tmp_path: Path, spec: Path, *args: str, log: str = "slow"):
    return _knoblab(knoblab_home, tmp_path / "s.sqlite", "capture", str(spec), "--log", log,
                    *args, KNOBLAB_TEST_PW=PASSWORD)


def _start(knoblab_home: Path, tmp_path: Path, spec: Path, *args: str,
           log: str = "slow") -> subprocess.Popen:
    return subprocess.Popen(cli_command(tmp_path / "s.sqlite", "capture", str(spec), "--log",
                                        log, *args),
                            env=cli_env(knoblab_home, KNOBLAB_TEST_PW=PASSWORD), cwd=tmp_path,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)


def _window_open(proc: subprocess.Popen, timeout: float = 60, log: str = "slow") -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        now = _globals()
        if (now["general_log"] == "ON" if log == "general" else
                now["slow_query_log"] == "ON" and float(now["long_query_time"]) == 0):
            return
        if proc.poll() is not None:
            raise AssertionError(f"capture ended early ({proc.returncode}): "
                                 f"{proc.communicate()[1]}")
        time.sleep(0.05)
    raise AssertionError("the capture window never opened")


class Client(threading.Thread):
    """A read-only mix on one connection opened during the window, until stopped."""

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.stop = threading.Event()
        self.thread_id: int | None = None
        self.ran = 0

    def run(self) -> None:
        conn = _connect()
        try:
            with conn.cursor() as cur:
                cur.execute("SELECT CONNECTION_ID()")
                self.thread_id = int(cur.fetchone()[0])
                while not self.stop.is_set():
                    for sql in MIX:
                        cur.execute(sql, (self.ran % 5,))
                    self.ran += 1
                    time.sleep(0.01)
        finally:
            conn.close()

    def __enter__(self) -> Client:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.join(timeout=10)


def _replayed(knoblab_home: Path, tmp_path: Path, log: str) -> dict:
    """`log` replayed on sandboxes over the capture's dump (prod-capture/), two settings of
    sort_buffer_size, two rounds; its results JSON."""
    replay = tmp_path / "replay.toml"
    replay.write_text('name = "replayed"\n[dataset]\ndump = "prod-capture/data.sql.zst"\n'
                      f'[workload]\nkind = "replay"\nlog = "{log}"\nrepetitions = 2\n'
                      '[sweep]\nsort_buffer_size = ["256K", "1M"]\n')
    replayed = _knoblab(knoblab_home, tmp_path / "s.sqlite", "run", str(replay), "--json",
                        str(tmp_path / "replayed.json"))
    assert replayed.returncode == 0, replayed.stderr
    return json.loads((tmp_path / "replayed.json").read_text())


def _statements(out: Path) -> list:
    return [e for e in read_log(out / "statements.log") if e.is_statement]


def _one_line(result) -> str:
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    return lines[0]


def test_a_window_captures_the_clients_statements_and_puts_everything_back(
        knoblab_home, tmp_path, capturer, slow_log_as_it_was):
    out = tmp_path / "prod-capture"
    proc = _start(knoblab_home, tmp_path, _spec(tmp_path, capturer), "--for", "3s", "--out",
                  str(out), "--data", "sample=2")
    _window_open(proc)
    with Client() as client:
        stdout, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 0, stderr
    assert _globals() == slow_log_as_it_was  # back before the dump, checked again at the end
    assert not _leftover_logs()
    # Said before it starts: the table it cannot dump consistently, the disk it needs.
    assert f"{DB}.t_my (MyISAM)" in stderr and "not transactional" in stderr
    assert "the dump needs at most" in stderr

    events = _statements(out)
    mine = [e for e in events if e.thread == client.thread_id]
    assert client.ran > 3 and len(mine) >= 3 * 3
    for sql in MIX:
        assert any(e.text.startswith(sql.split("%s")[0]) for e in mine), sql
    assert not [e.text for e in events if e.thread != client.thread_id and
                any(word in e.text for word in OWN)]

    assert stat.S_IMODE(out.stat().st_mode) == 0o700
    assert {p.name for p in out.iterdir()} >= {"statements.log", "data.sql.zst", "spec.toml",
                                                "capture.json"}
    assert all(stat.S_IMODE(p.stat().st_mode) == 0o600 for p in out.iterdir())
    spec = tomllib.loads((out / "spec.toml").read_text())
    assert spec["workload"] == {"kind": "replay", "log": "statements.log", "speed": "max"}
    assert spec["dataset"] == {"dump": "data.sql.zst"}
    assert spec["tune"] == {"knobs": "auto", "fidelity": "auto"}

    # What was captured replays on sandboxes over what was dumped: every statement class of
    # the mix runs there without an error (the same log and dump the written spec names).
    result = _replayed(knoblab_home, tmp_path, "prod-capture/statements.log")
    prints = {c["fingerprint"] for c in result["workload"]["classes"]}
    assert {f"select v from {DB}.t_inno where id = ?", "select ? + ?"} <= prints, prints
    rows = result["statement_classes"]["rows"]
    assert rows and all(row["errors"] == 0 for row in rows)
    assert all(p["n"] == 2 and p["failed"] == 0 for p in result["points"])
    summary = json.loads((out / "capture.json").read_text())
    assert summary["log"]["statements"] == len(events)
    assert summary["log"]["connections"] == len({e.thread for e in events})
    assert all(s["put_back"] for s in summary["settings"].values())
    assert summary["settings"]["long_query_time"]["window"] == "0"
    assert summary["dump"]["databases"] == [DB] and summary["dump"]["mode"] == "sample"
    assert summary["server"]["user"] == capturer

    with (out / "data.sql.zst").open("rb") as raw:
        dump = zstandard.ZstdDecompressor().stream_reader(raw).read().decode()
    assert "CREATE TABLE `t_inno`" in dump and "CREATE TABLE `t_my`" in dump
    assert "(2,'b')" in dump and "(3,'c')" not in dump  # at most 2 rows a table
    for written in [tmp_path / "s.sqlite", *out.iterdir()]:
        assert PASSWORD.encode() not in written.read_bytes(), written
    assert PASSWORD not in stdout + stderr
    listed = _knoblab(knoblab_home, tmp_path / "s.sqlite", "runs")
    assert listed.returncode == 0 and "prod-capture" in listed.stdout
    report = _knoblab(knoblab_home, tmp_path / "s.sqlite", "report",
                      summary["run"])
    assert "is a capture" in _one_line(report)


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP])
def test_a_signal_ends_the_window_early_puts_back_and_still_dumps(
        knoblab_home, tmp_path, capturer, slow_log_as_it_was, signum):
    out = tmp_path / "out"
    proc = _start(knoblab_home, tmp_path, _spec(tmp_path, capturer), "--for", "10m", "--out",
                  str(out))
    _window_open(proc)
    with Client() as client:
        while client.ran < 3:
            time.sleep(0.05)
        os.killpg(proc.pid, signum)
        _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 0, stderr
    assert "ended early" in stderr and "every setting is back" in stderr
    assert _globals() == slow_log_as_it_was
    assert any(e.thread == client.thread_id for e in _statements(out))
    summary = json.loads((out / "capture.json").read_text())
    assert summary["window"]["ended_early"] is True
    # knoblab's own lock connection is not one of the connections open before the window
    assert summary["log"]["open_before"] == 0 and summary["log"]["missed"] == 0, summary["log"]
    assert (out / "spec.toml").exists() and (out / "data.sql.zst").exists()
    assert Store(f"sqlite:///{tmp_path / 's.sqlite'}").pending_restores() == []


def test_kill_9_then_restore_puts_every_setting_back(knoblab_home, tmp_path, capturer,
                                                     slow_log_as_it_was):
    proc = _start(knoblab_home, tmp_path, _spec(tmp_path, capturer), "--for", "10m", "--out",
                  str(tmp_path / "out"))
    with reaped(proc):
        _window_open(proc)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
    assert _globals() != slow_log_as_it_was
    store = tmp_path / "s.sqlite"
    pending = {r["name"]: r["original"] for r in Store(f"sqlite:///{store}").pending_restores()}
    assert pending["slow_query_log"] == "OFF" or pending["slow_query_log"] == \
        slow_log_as_it_was["slow_query_log"]
    assert set(pending) >= {"long_query_time", "slow_query_log_file", "log_slow_filter"}
    listed = _knoblab(knoblab_home, store, "runs")
    assert listed.returncode == 0 and "killed (knoblab restore)" in listed.stdout
    # A second capture of the server is refused until it is put back.
    again = _capture(knoblab_home, tmp_path, _spec(tmp_path, capturer), "--for", "3s",
                     "--out", str(tmp_path / "again"))
    assert "knoblab restore" in _one_line(again)

    left = DATADIR / f"knoblab-capture-{summary_run(store)}.log"
    assert left.exists()
    restored = _knoblab(knoblab_home, store, "restore", KNOBLAB_TEST_PW=PASSWORD)
    assert restored.returncode == 0, restored.stderr
    assert _globals() == slow_log_as_it_was
    assert Store(f"sqlite:///{store}").pending_restores() == []
    # The log the killed capture left in the data directory goes with its settings, said.
    assert f"removed {left}" in restored.stdout and not left.exists()


def summary_run(store: Path) -> str:
    return str(Store(f"sqlite:///{store}").list_runs(limit=1)[0]["id"])


def test_a_user_without_the_privileges_is_told_which_in_one_line(
        knoblab_home, tmp_path, capturer, plain_user, slow_log_as_it_was):  # noqa: F811
    conn = _connect()
    with conn.cursor() as cur:  # it sees the database, and may only read it
        cur.execute(f"GRANT SELECT ON {DB}.* TO '{plain_user}'@'%'")
    conn.close()
    try:
        out = tmp_path / "out"
        line = _one_line(_capture(knoblab_home, tmp_path,
                                  _spec(tmp_path, plain_user, password=False),
                                  "--for", "3s", "--out", str(out)))
    finally:
        conn = _connect()
        with conn.cursor() as cur:
            cur.execute(f"REVOKE SELECT ON {DB}.* FROM '{plain_user}'@'%'")
        conn.close()
    assert f"{plain_user}@127.0.0.1:3306 lacks privileges knoblab capture needs" in line
    assert "SUPER or SYSTEM_VARIABLES_ADMIN" in line
    assert f"TRIGGER on {DB}" in line and f"EVENT on {DB}" in line
    assert f"SHOW VIEW on {DB}" in line and f"SELECT on {DB}" not in line
    assert not out.exists()
    assert Store(f"sqlite:///{tmp_path / 's.sqlite'}").pending_restores() == []


@pytest.mark.parametrize(("args", "said"), [
    (("--for", "ten minutes"), "--for: 'ten minutes' is not a duration"),
    (("--for", "3s", "--data", "some"), "--data some: give schema"),
    (("--for", "3s", "--data", "sample=0"), "--data sample=0: give schema"),
    (("--for", "3s", "--out", "{foreign}"), "holds files knoblab capture did not write"),
])
def test_bad_input_is_one_line_and_changes_nothing(knoblab_home, tmp_path, capturer, args,
                                                   said, slow_log_as_it_was):
    foreign = tmp_path / "theirs"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("mine")
    args = tuple(str(foreign) if a == "{foreign}" else a for a in args)
    if "--out" not in args:
        args += ("--out", str(tmp_path / "out"))
    line = _one_line(_capture(knoblab_home, tmp_path, _spec(tmp_path, capturer), *args))
    assert said in line
    assert (foreign / "notes.txt").read_text() == "mine"
    assert not (tmp_path / "out").exists()


def test_a_sandbox_spec_is_refused(knoblab_home, tmp_path):
    spec = tmp_path / "sandbox.toml"
    spec.write_text('[server]\nbinary = "mariadbd"\n')
    line = _one_line(_capture(knoblab_home, tmp_path, spec, "--for", "3s", "--out",
                              str(tmp_path / "out")))
    assert "knoblab capture needs a running server" in line


def _window_elsewhere(tmp_path: Path, source: Any, client: Client,
                      as_it_was: dict[str, str]) -> list:
    """A window of `source`'s log on the running server planned as on a server on another
    machine (its data directory not this process's: to a table), while `client` runs its mix
    three times and knoblab's own connection a statement; the statements written out."""
    from knoblab.connection import Endpoint
    from knoblab.server.external import ExternalServer
    from knoblab.server.query_log import QueryLog
    from knoblab.store import RunInfo

    store = Store(f"sqlite:///{tmp_path / 's.sqlite'}")
    run_id = store.create_run(name="t", experiment="capture", spec_source="", server_binary="",
                              server_version="", info=RunInfo(), point_list=[])
    server = ExternalServer(Endpoint(host="127.0.0.1", port=3306))
    server.probe()
    server._datadir = None  # as for a server on another machine
    log = QueryLog.plan(server, server.catalog(), store, run_id, source=source)
    assert log.mode == "table" and "log_output" in log.changes
    log.bind(run_id)
    own = server.connect()
    try:
        log.start(own)
        with client:
            while client.ran < 3:
                time.sleep(0.05)
        with own.cursor() as cur:
            cur.execute("SELECT 'knoblab''s own'")
    finally:
        own.close()
        log.put_back()
    assert _globals() == as_it_was
    log.write_out(tmp_path / "statements.log")
    assert log.clean_up() is None
    return _statements(tmp_path)


def test_the_table_log_is_written_as_a_slow_log_read_log_reads(tmp_path, capturer,
                                                              slow_log_as_it_was):
    """Where the server's data directory is not this process's to write (a server
    elsewhere), the window's rows of mysql.slow_log are written out in the slow log's format."""
    from knoblab.server.query_log import SLOW

    client = Client()
    events = _window_elsewhere(tmp_path, SLOW, client, slow_log_as_it_was)
    mine = [e for e in events if e.thread == client.thread_id]
    assert len(mine) >= 9 and all(e.time is not None and e.query_time is not None
                                  for e in mine)
    for sql in MIX:
        assert any(e.text.startswith(sql.split("%s")[0]) for e in mine), sql
    assert not [e for e in events if "knoblab's own" in e.text or "SET GLOBAL" in e.text]
    conn = _connect()
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT COUNT(*) FROM mysql.slow_log WHERE thread_id = %s",
                        (client.thread_id,))
            left = cur.fetchone()[0]
            cur.execute("SHOW TABLES FROM mysql LIKE 'knoblab%'")
            tables = cur.fetchall()
    finally:
        conn.close()
    assert left == 0 and not tables  # the window's rows gone, the server's own table back


def test_knoblabs_own_entries_are_left_out_and_the_log_still_reads(tmp_path):
    """An entry of knoblab's own that carried the `# Time:` line gives it to the next one;
    one at the very end takes it along (a log never ends inside a header)."""
    from knoblab.server.query_log import _copy_entries

    def entry(thread: int, sql: str, time_line: str | None = None) -> str:
        return ((f"# Time: {time_line}\n" if time_line else "") +
                f"# User@Host: root[root] @  [127.0.0.1]\n# Thread_id: {thread}  Schema: \n"
                "# Query_time: 0.1  Lock_time: 0.0  Rows_sent: 1  Rows_examined: 0\n"
                f"SET timestamp=1795586069;\n{sql};\n")

    source = tmp_path / "server.log"
    source.write_text(entry(5, "SELECT 'own'", "261125  5:54:29") + entry(7, "SELECT 1") +
                      entry(7, "SELECT\n2", "261125  5:54:30") + entry(5, "SELECT 'own'") +
                      entry(5, "SELECT 'own'", "261125  5:54:31"))
    written = tmp_path / "statements.log"
    with source.open("rb") as raw, written.open("wb") as out:
        _copy_entries(raw, out, {5})
    events = list(read_log(written))
    assert [(e.thread, e.text) for e in events] == [(7, "SELECT 1"), (7, "SELECT\n2")]
    assert written.read_text().count("# Time:") == 2


def test_a_dump_larger_than_the_disk_under_out_is_refused(tmp_path):
    from knoblab.errors import UserError
    from knoblab.server.dumping import DumpPlan, disk_check

    fits = DumpPlan("all", None, databases=[DB], text_bytes=1 << 20, tables=1)
    assert "the dump needs at most 1.0 MB" in disk_check(fits, tmp_path / "new" / "out")
    too_big = DumpPlan("all", None, databases=[DB], text_bytes=1 << 60, tables=1)
    with pytest.raises(UserError, match="not enough room; free some space or give --out"):
        disk_check(too_big, tmp_path / "out")


# --------------------------------------------------------------------- the general log

class Pooled(Client):
    """A connection of an application's pool: opened in the database before the window,
    then the mix (its tables unqualified) until stopped."""

    MIX = ("SELECT v FROM t_inno WHERE id = %s", "SELECT COUNT(*) FROM t_my WHERE n > %s")

    def __init__(self) -> None:
        super().__init__()
        self.conn = _connect(database=DB)
        with self.conn.cursor() as cur:
            cur.execute("SELECT CONNECTION_ID()")
            self.thread_id = int(cur.fetchone()[0])

    def run(self) -> None:
        try:
            with self.conn.cursor() as cur:
                while not self.stop.is_set():
                    for sql in self.MIX:
                        cur.execute(sql, (self.ran % 5,))
                    self.ran += 1
                    time.sleep(0.01)
        finally:
            self.conn.close()


@pytest.fixture
def sees_all(capturer: str) -> Iterator[str]:
    """The capturer with PROCESS: it sees every connection in the process list."""
    conn = _connect()
    try:
        with conn.cursor() as cur:
            cur.execute(f"GRANT PROCESS ON *.* TO '{capturer}'@'%'")
        yield capturer
    finally:
        with conn.cursor() as cur:
            cur.execute(f"REVOKE PROCESS ON *.* FROM '{capturer}'@'%'")
        conn.close()


def _server_pid() -> int:
    conn = _connect()
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT @@pid_file")
            return int(Path(cur.fetchone()[0]).read_text())
    finally:
        conn.close()


def _only(log: Path, thread: int, dest: Path) -> None:
    """The general log's lines of one connection (the window also holds what other clients
    of this shared server ran)."""
    from knoblab.capture.logs import general_line

    keep, lines = False, []
    for line in log.read_text().splitlines(keepends=True):
        found = general_line(line)
        if found is not None:
            keep = found[1] == thread
        if keep:
            lines.append(line)
    dest.write_text("".join(lines))


@pytest.fixture
def configured() -> Iterator[str]:
    """A setting of the running server's configuration changed from its default (SET GLOBAL:
    its origin becomes SQL), one nothing the other tests measure depends on."""
    conn = _connect()
    try:
        with conn.cursor() as cur:
            cur.execute("SET GLOBAL max_connect_errors = 12345")
        yield "max_connect_errors"
    finally:
        with conn.cursor() as cur:
            cur.execute("SET GLOBAL max_connect_errors = DEFAULT")
        conn.close()


def test_a_pool_opened_before_the_window_is_captured_from_the_general_log(
        knoblab_home, tmp_path, sees_all, configured, slow_log_as_it_was):
    out = tmp_path / "prod-capture"
    with Pooled() as pooled:  # open, and running, before the capture starts
        proc = _start(knoblab_home, tmp_path, _spec(tmp_path, sees_all), "--for", "3s",
                      "--out", str(out), "--data", "all", log="auto")
        _window_open(proc, log="general")
        stdout, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 0, stderr
    # The server's own configuration is the spec's: what a sandbox can take, the rest named.
    text = (out / "spec.toml").read_text()
    spec = tomllib.loads(text)
    assert spec["server"]["config"][configured] == "12345"
    assert not {"port", "datadir", "socket", "general_log"} & set(spec["server"]["config"])
    assert "# left out, as a sandbox cannot take it: port (the network" in text
    assert "the baseline of every trial" in " ".join(stderr.split())
    # The server runs on this machine: its shape, to give a sandbox where the test machine can.
    assert f"# cpus = {len(os.sched_getaffinity(_server_pid()))}" in text
    assert "# [machine]" in text and "[machine]" not in spec
    said = " ".join(stderr.split())
    assert "the statements are taken from the general query log" in said
    assert "other connection(s) are open: it sees their statements" in said
    assert "ready: knoblab tune" in said
    assert _globals() == slow_log_as_it_was and not _leftover_logs()

    events = _statements(out)
    mine = [e for e in events if e.thread == pooled.thread_id]
    assert pooled.ran > 3 and len(mine) >= 2 * 3
    # The pool's database, from the process list as the window began: its statements name
    # their tables unqualified.
    assert {e.database for e in mine} == {DB}
    # None of knoblab's own (which set the log's settings: the only test that may, now).
    assert not [e.text for e in events if "SET GLOBAL" in e.text]
    summary = json.loads((out / "capture.json").read_text())
    assert summary["log"]["source"] == "general" and summary["log"]["missed"] == 0
    assert summary["log"]["open_before"] >= 1 and summary["log"]["open_before_active"] >= 1
    assert summary["settings"]["general_log"]["window"] == "ON"

    # The pool's statements replay over the dump, in the database they ran in.
    _only(out / "statements.log", pooled.thread_id, tmp_path / "pooled.log")
    result = _replayed(knoblab_home, tmp_path, "pooled.log")
    prints = {c["fingerprint"] for c in result["workload"]["classes"]}
    assert prints == {"select v from t_inno where id = ?",
                      "select count(*) from t_my where n > ?"}, prints
    assert all(row["errors"] == 0 for row in result["statement_classes"]["rows"])


def test_the_slow_log_with_a_pool_open_is_not_ready_and_says_how_to_capture_it(
        knoblab_home, tmp_path, sees_all, slow_log_as_it_was):
    out = tmp_path / "out"
    with Pooled() as pooled:
        done = _capture(knoblab_home, tmp_path, _spec(tmp_path, sees_all), "--for", "2s",
                        "--out", str(out), log="slow")
    assert pooled.ran > 3
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    line = done.stderr.strip().splitlines()[-1]
    assert line.startswith("knoblab: not ready: the slow log missed"), line
    assert "--log general" in line
    assert "every setting is back" in line
    assert "ready: knoblab tune" not in done.stdout + done.stderr
    assert not (out / "spec.toml").exists()
    assert _globals() == slow_log_as_it_was and not _leftover_logs()


def test_the_general_table_log_is_written_as_a_general_log_read_log_reads(
        tmp_path, capturer, slow_log_as_it_was):
    """A server elsewhere: the window's rows of mysql.general_log, written out as the general
    log's text."""
    from knoblab.server.query_log import GENERAL

    pooled = Pooled()  # its connection open before the window
    events = _window_elsewhere(tmp_path, GENERAL, pooled, slow_log_as_it_was)
    mine = [e for e in events if e.thread == pooled.thread_id]
    assert len(mine) >= 6 and {e.database for e in mine} == {DB}
    assert all(e.time is not None for e in mine)
    assert not [e for e in events if "knoblab's own" in e.text or "SET GLOBAL" in e.text]
    conn = _connect()
    try:
        with conn.cursor() as cur:
            cur.execute("SHOW TABLES FROM mysql LIKE 'knoblab%'")
            tables = cur.fetchall()
    finally:
        conn.close()
    assert not tables  # the server's own table back, the window's dropped


def test_knoblabs_own_general_log_lines_are_left_out_and_their_time_kept(tmp_path):
    from knoblab.server.query_log import _copy_general

    source = tmp_path / "server.log"
    source.write_text("/usr/sbin/mariadbd, Version: 10.11 (Debian). started with:\n"
                      "Tcp port: 3306  Unix socket: /run/mysqld/mysqld.sock\n"
                      "Time\t\t    Id Command\tArgument\n"
                      "261125  5:54:29\t      5 Query\tSELECT 'own'\n"
                      "\t\t      7 Query\tSELECT\n2\n"
                      "261125  5:54:30\t      5 Query\tSELECT 'own'\n"
                      "\t\t      5 Quit\t\n"
                      "\t\t      7 Query\tSELECT 3\n")
    written = tmp_path / "statements.log"
    with source.open("rb") as raw, written.open("wb") as out:
        _copy_general(raw, out, {5})
    events = list(read_log(written))
    assert [(e.thread, e.text) for e in events] == [(7, "SELECT\n2"), (7, "SELECT 3")]
    first, second = events
    assert second.time is not None and first.time is not None
    assert second.time - first.time == 1  # the skipped line's time went onto the next one


def test_a_pool_whose_statements_were_prepared_before_the_window_is_not_ready(
        knoblab_home, tmp_path, sees_all, slow_log_as_it_was):
    # sysbench's connections prepare their statements (server-side) as they open, before the
    # window: the general log shows their executions with ? for every value.
    bench = ["sysbench", "oltp_point_select", "--tables=1", "--table-size=100",
             "--mysql-host=127.0.0.1", "--mysql-port=3306", "--mysql-user=root",
             f"--mysql-db={DB}", "--db-driver=mysql"]
    subprocess.run([*bench, "prepare"], capture_output=True, check=True)
    load = subprocess.Popen([*bench, "--threads=2", "--time=120", "--rate=200", "run"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    out = tmp_path / "out"
    try:
        time.sleep(1)  # its connections open, its statements prepared
        done = _capture(knoblab_home, tmp_path, _spec(tmp_path, sees_all), "--for", "2s",
                        "--out", str(out), log="general")
    finally:
        load.kill()
        load.wait()
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    line = done.stderr.strip().splitlines()[-1]
    assert line.startswith("knoblab: not ready: "), line
    assert "executions of statements 2 connection(s) prepared before the window" in line
    assert "without their values" in line and "--reconnect idle" in line
    assert "restart its pool" in line
    assert not (out / "spec.toml").exists()
    assert _globals() == slow_log_as_it_was and not _leftover_logs()
    # A replay of what was captured leaves them out, saying why: here, everything.
    with pytest.raises(UserError, match="the log holds no statement to replay .left out: "
                                        r"\d+ executions of statements prepared before"):
        plan_for(out / "statements.log", knoblab_home)


class WithAnotherKnoblab(Client):
    """The client's mix, and another knoblab's connection opened in the window (a check of
    its own on the server) beside it."""

    def run(self) -> None:
        from knoblab.connection import Endpoint
        from knoblab.server.external import ExternalServer

        other = ExternalServer(Endpoint(host="127.0.0.1", port=3306)).connect()
        try:
            with other.cursor() as cur:
                cur.execute("SELECT 'another knoblab''s check'")
        finally:
            other.close()
        super().run()


@pytest.mark.parametrize("which", ["slow", "general"])
def test_another_knoblabs_rows_of_the_log_table_are_left_out(tmp_path, capturer,
                                                            slow_log_as_it_was, which):
    """A server elsewhere (the log read from its table): the window's rows of another
    knoblab's connection are not written out, the application's are."""
    from knoblab.server.query_log import SOURCES

    client = WithAnotherKnoblab()
    events = _window_elsewhere(tmp_path, SOURCES[which], client, slow_log_as_it_was)
    assert [e for e in events if e.thread == client.thread_id and e.is_statement]
    assert not [e for e in events if "another knoblab" in e.text or "knoblab'" in e.text]
