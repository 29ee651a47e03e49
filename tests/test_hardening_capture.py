"""`knoblab capture` when its input is hostile and its server shared: database names that
look like options, two captures of one server, `knoblab restore` during a live capture, a
server logging to its table, kill -9 in the window and during the dump, statements whose text
holds a line like a log's header, a full disk under --out, bytes that are not UTF-8, and what
`compare` and a window with nothing in it say. Against the MariaDB on 127.0.0.1:3306, left as
it was found (the `slow_log_as_it_was` fixture of test_capture_command checks it)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import threading
import time
import tomllib
from collections.abc import Callable, Iterator
from pathlib import Path

import psutil
import pytest
import zstandard

from knoblab.capture import fingerprint, read_log
from knoblab.errors import UserError
from knoblab.store import RunInfo, Store
from knoblab.vocabulary import Experiment
from tests.fakes import SERVER_WIDE, cli_command, cli_env, reaped
from tests.test_capture_command import (  # noqa: F401  (fixtures)
    DATADIR,
    DB,
    PASSWORD,
    _capture,
    _connect,
    _globals,
    _one_line,
    _spec,
    _start,
    _window_open,
    capturer,
    slow_log_as_it_was,
)
from tests.test_external import _knoblab

# Captures change the running server's slow log settings; every test checks they are back.
pytestmark = [pytest.mark.server, SERVER_WIDE]

# A statement whose string holds lines like a slow log's entry header and start banner.
LOOKALIKE = ("SELECT 'note\n# Time: 251126  8:38:01\n# User@Host: x[x] @ localhost []\n"
             "/usr/sbin/mariadbd, Version: 10.11 (x). started with:\nend' AS v")


class Statements(threading.Thread):
    """A connection opened during the window running `statements` again and again."""

    def __init__(self, *statements: str) -> None:
        super().__init__(daemon=True)
        self.statements = statements or ("SELECT 1",)
        self.stop = threading.Event()
        self.ran = 0

    def run(self) -> None:
        conn = _connect()
        try:
            with conn.cursor() as cur:
                while not self.stop.is_set():
                    for sql in self.statements:
                        cur.execute(sql)
                    self.ran += 1
                    time.sleep(0.01)
        finally:
            conn.close()

    def __enter__(self) -> Statements:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.join(timeout=10)


def _run(home: Path, tmp_path: Path, spec: Path, *args: str,
         statements: tuple[str, ...] = ()) -> tuple[subprocess.Popen, str]:
    """A capture to its end, a client running `statements` in its window."""
    proc = _start(home, tmp_path, spec, *args)
    _window_open(proc)
    with Statements(*statements):
        _, stderr = proc.communicate(timeout=120)
    return proc, stderr


def _sql(*statements: str) -> list[tuple]:
    conn = _connect()
    try:
        with conn.cursor() as cur:
            for sql in statements:
                cur.execute(sql)
            return list(cur.fetchall())
    finally:
        conn.close()


def _ending(code: int, stderr: str) -> str:
    """The one line a capture that got going ends with (exit code 2, no traceback)."""
    assert code == 2, stderr
    assert "Traceback" not in stderr
    line = stderr.strip().splitlines()[-1]
    assert line.startswith("knoblab: "), stderr
    return line


def _lock_holder() -> int | None:
    return _sql("SELECT IS_USED_LOCK('knoblab.capture')")[0][0]


def _capture_tables() -> list[tuple]:
    return _sql("SHOW TABLES FROM mysql LIKE 'knoblab%'")


@pytest.fixture
def other_home(tmp_path: Path) -> Path:
    home = tmp_path / "other-home"
    home.mkdir()
    return home


# ---------------------------------------------------------------------- names are data

OPTION_NAMES = ("--all-databases", "--result-file=hijacked.sql")


@pytest.fixture
def option_named(capturer: str) -> Iterator[tuple[str, ...]]:  # noqa: F811
    """Databases named like mariadb-dump's options, which the capturer alone may dump."""
    try:
        for name in OPTION_NAMES:
            _sql(f"CREATE DATABASE `{name}`", f"CREATE TABLE `{name}`.t (a INT)",
                 f"GRANT ALL ON `{name}`.* TO '{capturer}'@'%'")
        yield OPTION_NAMES
    finally:
        for name in OPTION_NAMES:
            with contextlib.suppress(Exception):
                _sql(f"REVOKE ALL ON `{name}`.* FROM '{capturer}'@'%'")
            _sql(f"DROP DATABASE IF EXISTS `{name}`")


def test_database_names_are_dumped_as_names_and_a_lookalike_header_is_a_statement(
        knoblab_home, tmp_path, capturer, option_named, slow_log_as_it_was):  # noqa: F811
    from knoblab.connection import Endpoint
    from knoblab.server.dumping import DumpPlan, dump_command

    argv, _ = dump_command("mariadb-dump", Endpoint(host="h"),
                           DumpPlan("schema", None, databases=list(option_named)))
    assert argv[-3:] == ["--", *option_named]

    out = tmp_path / "out"
    proc, stderr = _run(knoblab_home, tmp_path, _spec(tmp_path, capturer), "--for", "2s",
                        "--out", str(out), "--data", "schema", statements=(LOOKALIKE,))
    assert proc.returncode == 0, stderr
    assert not (tmp_path / "hijacked.sql").exists()
    with (out / "data.sql.zst").open("rb") as raw:
        dump = zstandard.ZstdDecompressor().stream_reader(raw).read().decode()
    for name in option_named:
        assert f"CREATE DATABASE /*!32312 IF NOT EXISTS*/ `{name}`" in dump
    assert "CREATE DATABASE /*!32312 IF NOT EXISTS*/ `mysql`" not in dump
    # The statement holding a header's lines was captured whole, and reads back as one.
    texts = [e.text for e in read_log(out / "statements.log") if e.is_statement]
    assert texts.count(LOOKALIKE) >= 2


def test_knoblabs_own_databases_whatever_their_name_are_not_dumped(running_database):
    from knoblab.server.dumping import plan_dump
    from knoblab.server.external import OWNER_TABLE

    unmarked = f"{running_database}_users"  # named like knoblab's, made by someone else
    try:
        _sql(f"CREATE DATABASE {running_database}",
             f"CREATE TABLE {running_database}.{OWNER_TABLE} (data_key VARCHAR(100))",
             f"CREATE TABLE {running_database}.dt2 (a INT)",
             f"CREATE DATABASE {unmarked}", f"CREATE TABLE {unmarked}.t (a INT)")
        conn = _connect()
        try:
            with conn.cursor() as cur:
                plan = plan_dump(cur, "schema", None)
        finally:
            conn.close()
        assert running_database not in plan.databases and unmarked in plan.databases
    finally:
        _sql(f"DROP DATABASE IF EXISTS {running_database}", f"DROP DATABASE IF EXISTS {unmarked}")


# ------------------------------------------------------------ one capture per server


def test_one_capture_per_server_and_restore_leaves_a_live_one_alone(
        knoblab_home, other_home, tmp_path, capturer, slow_log_as_it_was):  # noqa: F811
    spec = _spec(tmp_path, capturer)
    first = _start(knoblab_home, tmp_path, spec, "--for", "10m", "--out", str(tmp_path / "a"))
    other = tmp_path / "other.sqlite"
    with reaped(first):
        _window_open(first)
        window = _globals()
        holder = _lock_holder()
        assert holder is not None
        # Another home, another store: refused on the server's word, nothing changed.
        second = _knoblab(other_home, other, "capture", str(spec), "--for", "3s", "--out",
                          str(tmp_path / "b"), KNOBLAB_TEST_PW=PASSWORD)
        assert "another knoblab capture is capturing, or a verify" in _one_line(second)
        assert f"connection {holder}" in second.stderr
        # knoblab restore in the capture's own home leaves it alone, and says why.
        restored = _knoblab(knoblab_home, tmp_path / "s.sqlite", "restore",
                            KNOBLAB_TEST_PW=PASSWORD)
        assert restored.returncode == 0, restored.stderr
        assert "left alone, still running" in restored.stdout
        assert _globals() == window
        # A run on the server meanwhile is refused, not told to restore the capture.
        from knoblab.connection import Endpoint
        from knoblab.server.external import RunningTarget

        target = RunningTarget(Endpoint(host="127.0.0.1", port=3306))
        with pytest.raises(UserError, match="a knoblab capture is capturing"):
            target.check([], Store(f"sqlite:///{tmp_path / 's.sqlite'}"), None)
        # kill -9: the server frees the lock with the capture's connection.
        os.kill(first.pid, signal.SIGKILL)
        first.wait(timeout=10)
        deadline = time.monotonic() + 10
        while _lock_holder() is not None and time.monotonic() < deadline:
            time.sleep(0.1)
        assert _lock_holder() is None
    # The killed capture's settings are still there: another home is told whose they are.
    run_id = Store(f"sqlite:///{tmp_path / 's.sqlite'}").list_runs(limit=1)[0]["id"]
    again = _knoblab(other_home, other, "capture", str(spec), "--for", "3s", "--out",
                     str(tmp_path / "b"), KNOBLAB_TEST_PW=PASSWORD)
    line = _one_line(again)
    assert f"a knoblab capture (run {run_id}) was killed" in line
    assert f"knoblab restore {run_id}" in line
    assert _globals() == window
    restored = _knoblab(knoblab_home, tmp_path / "s.sqlite", "restore",
                        KNOBLAB_TEST_PW=PASSWORD)
    assert restored.returncode == 0, restored.stderr
    assert _globals() == slow_log_as_it_was
    log = DATADIR / f"knoblab-capture-{run_id}.log"
    assert f"removed {log}" in restored.stdout and not log.exists()


# ------------------------------------------------------------ a server logging to its table


@pytest.fixture
def logging_to_table(capturer: str) -> Iterator[None]:  # noqa: F811
    """The server's own slow log goes to its table (off), and the capturer may set that
    table aside."""
    before = _globals()["log_output"]
    _sql("SET GLOBAL log_output = 'TABLE'")
    try:
        yield
    finally:
        _sql(f"SET GLOBAL log_output = '{before}'")
        with contextlib.suppress(Exception):
            _sql(f"REVOKE SELECT, CREATE, DROP, ALTER, INSERT ON mysql.* FROM "
                 f"'{capturer}'@'%'")


def test_a_server_logging_to_its_table_keeps_none_of_the_window(
        knoblab_home, tmp_path, capturer, logging_to_table):  # noqa: F811
    spec = _spec(tmp_path, capturer)
    refused = _capture(knoblab_home, tmp_path, spec, "--for", "2s", "--out",
                       str(tmp_path / "none"))
    assert "SELECT, CREATE, DROP, ALTER, INSERT on mysql (to set the server's mysql.slow_log " \
        "aside" in _one_line(refused)
    _sql(f"GRANT SELECT, CREATE, DROP, ALTER, INSERT ON mysql.* TO '{capturer}'@'%'")
    rows = _sql("SELECT COUNT(*) FROM mysql.slow_log")[0][0]
    marker = "SELECT 'only in the window' AS v"

    proc, stderr = _run(knoblab_home, tmp_path, spec, "--for", "2s", "--out",
                        str(tmp_path / "out"), statements=(marker,))
    assert proc.returncode == 0, stderr
    assert any(e.text == marker for e in read_log(tmp_path / "out" / "statements.log"))
    assert _sql("SELECT COUNT(*) FROM mysql.slow_log")[0][0] == rows
    assert not _capture_tables()

    # Killed in its window: the server's table is set aside until knoblab restore.
    killed = _start(knoblab_home, tmp_path, spec, "--for", "10m", "--out",
                    str(tmp_path / "killed"))
    with reaped(killed):
        _window_open(killed)
        with Statements(marker) as client:
            while client.ran < 3:
                time.sleep(0.05)
        assert _capture_tables()
        os.kill(killed.pid, signal.SIGKILL)
        killed.wait(timeout=10)
    restored = _knoblab(knoblab_home, tmp_path / "s.sqlite", "restore",
                        KNOBLAB_TEST_PW=PASSWORD)
    assert restored.returncode == 0, restored.stderr
    assert "put back mysql.slow_log as it was before capture" in restored.stdout
    assert not _capture_tables()
    assert _sql(f"SELECT COUNT(*) FROM mysql.slow_log WHERE sql_text LIKE '%{marker[8:26]}%'"
                ) == [(0,)]


# ------------------------------------------------------------------ kill -9 during the dump


def test_kill_9_during_the_dump_ends_the_dump_and_leaves_no_file(
        knoblab_home, tmp_path, capturer, slow_log_as_it_was):  # noqa: F811
    out = tmp_path / "out"
    proc = _start(knoblab_home, tmp_path, _spec(tmp_path, capturer), "--for", "1s", "--out",
                  str(out), "--data", "all")
    blocker = _connect()
    try:
        _window_open(proc)
        with Statements():
            time.sleep(0.3)
        with blocker.cursor() as cur:  # the dump waits for this table: it is still running
            cur.execute(f"LOCK TABLES {DB}.t_inno WRITE")
        deadline = time.monotonic() + 60
        dumps: list[psutil.Process] = []
        while not dumps and time.monotonic() < deadline:
            assert proc.poll() is None, proc.communicate()[1]
            dumps = [c for c in psutil.Process(proc.pid).children(recursive=True)
                     if "dump" in c.name()]
            time.sleep(0.05)
        assert dumps
        time.sleep(0.5)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
        gone, alive = psutil.wait_procs(dumps, timeout=10)
        assert not alive
    finally:
        blocker.close()
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert not [p.name for p in out.iterdir() if "data" in p.name]


# --------------------------------------------------------------------- a full disk


def _nearly_full(tmpfs: Callable[[int], Path], free_kb: int) -> Path:
    """A 16 MB tmpfs of our own (the `tmpfs` fixture's) holding a file that leaves about
    `free_kb` KB free."""
    where = tmpfs(16)
    with (where / "filler").open("wb") as filler, contextlib.suppress(OSError):
        filler.write(b"\0" * (16 * 1024 * 1024 - free_kb * 1024))  # or up to full
    return where


def test_a_full_disk_under_out_is_one_line_and_keeps_the_statements(
        tmpfs, knoblab_home, tmp_path, capturer, slow_log_as_it_was):  # noqa: F811
    small = _nearly_full(tmpfs, free_kb=12)
    proc, stderr = _run(knoblab_home, tmp_path, _spec(tmp_path, capturer), "--for", "1s",
                        "--out", str(small / "out"), "--data", "schema")
    line = _ending(proc.returncode, stderr)
    assert "cannot write the statements to" in line and "No space left on device" in line
    assert "every setting is back" in line
    assert _globals() == slow_log_as_it_was
    kept = [p for p in DATADIR.glob("knoblab-capture-*.log") if str(p) in line]
    assert kept and kept[0].stat().st_size > 0  # what was captured is not lost
    kept[0].unlink()


def test_a_dump_onto_a_full_disk_is_one_line(tmpfs, tmp_path, capturer):  # noqa: F811
    from knoblab.connection import Endpoint
    from knoblab.server.dumping import DumpPlan, run_dump

    plan = DumpPlan("all", None, databases=[DB], tables=2)
    small = _nearly_full(tmpfs, free_kb=0)
    with pytest.raises(UserError, match="cannot write the dump to .*: No space left on "
                                        "device; no dump was kept"):
        run_dump(Endpoint(host="127.0.0.1", port=3306), plan, small / "data.sql.zst",
                 lambda done: None)
    assert not (small / "data.sql.zst").exists()


# ------------------------------------------------------------------- a window with nothing


def test_a_window_that_captured_nothing_says_so(tmp_path, knoblab_home, binary):
    """On a sandbox of its own, reached as a running server: nobody else's statements."""
    from knoblab.server.sandbox import Sandbox, base_template

    with Sandbox(binary, base_template(binary, knoblab_home) / "data", {},
                 home=knoblab_home) as server:
        spec = tmp_path / "quiet.toml"
        spec.write_text(f'[server]\nkind = "external"\nsocket = "{server.socket}"\n'
                        'user = "root"\n')
        done = subprocess.run(cli_command(tmp_path / "s.sqlite", "capture", str(spec), "--for",
                                       "1s", "--out", str(tmp_path / "out")),
                              env=cli_env(knoblab_home), cwd=tmp_path, capture_output=True,
                              text=True, timeout=120)
    line = _ending(done.returncode, done.stderr)
    assert "nothing was captured" in line and "capture again while the application runs" \
        in line
    assert "ready" not in done.stdout + done.stderr
    assert not (tmp_path / "out" / "spec.toml").exists()


# ------------------------------------------------------------------------ logs read back


def _entry(thread: int, sql: str, time_line: str | None = "261125  5:54:29") -> str:
    return ((f"# Time: {time_line}\n" if time_line else "") +
            f"# User@Host: app[app] @ localhost []\n# Thread_id: {thread}  Schema: db\n"
            "# Query_time: 0.1  Lock_time: 0.0  Rows_sent: 1  Rows_examined: 0\n"
            f"SET timestamp=1795586069;\n{sql};\n")


def test_lines_like_a_header_or_a_banner_inside_a_statement_are_its_own(tmp_path):
    from knoblab.server.query_log import _copy_entries

    cases = [
        LOOKALIKE,
        "SELECT 'a\n# Time: 251126  8:38:01'",  # at the end of the statement
        "SELECT 'b\n# User@Host: x[x] @ localhost []\n# Thread_id: 9  Schema: \nc'",
        "SELECT 'd\n# Time: 251126  8:38:01\n# User@Host: x[x] @ localhost []\n'",
    ]
    text = "".join(_entry(7, sql) + _entry(5, "SELECT 'own'", None) for sql in cases)
    source = tmp_path / "server.log"
    source.write_text(text)
    assert [(e.thread, e.text) for e in read_log(source)] == \
        [pair for sql in cases for pair in ((7, sql), (5, "SELECT 'own'"))]
    written = tmp_path / "statements.log"
    with source.open("rb") as raw, written.open("wb") as out:
        _copy_entries(raw, out, {5})
    assert [e.text for e in read_log(written)] == cases


@pytest.mark.parametrize(("content", "said"), [
    (_entry(3, "SELECT 1", "261345 25:61:61"), "line 1: a time this reader does not know"),
    (_entry(3, "SELECT 1", "2026-02-30T10:00:00.000000Z"),
     "line 1: a time this reader does not know"),
    (_entry(3, "SELECT 1").replace("0.1", "nan"), "line 4: figures this reader does not know"),
    (_entry(3, "SELECT 1").replace("0.1", "inf"), "line 4: figures this reader does not know"),
    ("261345 25:61:61\t    8 Query\tSELECT 1\n", "line 1: a time this reader does not know"),
], ids=["old-time", "iso-time", "nan", "inf", "general-time"])
def test_impossible_times_and_figures_are_one_line(tmp_path, content, said):
    path = tmp_path / "bad.log"
    path.write_text(content)
    with pytest.raises(UserError) as caught:
        list(read_log(path))
    assert str(caught.value).startswith(str(path)) and said in str(caught.value)


# --------------------------------------------------------------- bytes that are not UTF-8


def test_a_name_that_is_not_utf8_is_stored_and_written_as_escapes(tmp_path, monkeypatch):
    from knoblab import cli

    name = b"SELECT a FROM t\xff WHERE b = 1".decode("utf-8", "surrogateescape")
    shown = fingerprint(name)
    assert shown == "select a from t\\udcff where b = ?"
    assert shown.encode("utf-8")  # any store, file or terminal takes it
    store = Store(f"sqlite:///{tmp_path / 's.sqlite'}")
    run_id = store.create_run(name="t", experiment="run", spec_source="", server_binary="",
                              server_version="", info=RunInfo(), point_list=[])
    store.set_status(run_id, "failed", f"statements fail: {name}")
    assert store.run(run_id)["error"] == "statements fail: SELECT a FROM t\\udcff WHERE b = 1"
    monkeypatch.setenv("KNOBLAB_HOME", str(tmp_path))
    crash = cli._write_crash_log(ValueError(name))
    assert "t\\udcff" in crash.read_text()


# --------------------------------------------------------------------------- compare


def test_compare_of_a_capture_says_it_is_not_a_study(tmp_path, knoblab_home):
    store = Store(f"sqlite:///{tmp_path / 's.sqlite'}")
    runs = [store.create_run(name="prod-capture", experiment=Experiment.CAPTURE, spec_source="",
                             server_binary="", server_version="",
                             # as older versions stored a capture: as a workload kind too
                             info=RunInfo(workload={"kind": "capture"},
                                          dataset={"folder": "/tmp/prod-capture"}),
                             point_list=[]) for _ in range(2)]
    for run in runs:
        store.set_status(run, "done")
    done = _knoblab(knoblab_home, tmp_path / "s.sqlite", "compare", *runs)
    line = _one_line(done)
    assert f"run {runs[0]} is a capture (knoblab capture), not a study" in line
    assert "knoblab tune /tmp/prod-capture/spec.toml" in line
    assert json.dumps(line)  # one line, nothing else


# ------------------------------------------------- a production server of its own configuration


@contextlib.contextmanager
def _production(binary, home: Path, folder: Path, *options: str) -> Iterator[Path]:
    """A server started with `options` on its command line, as a production server runs with
    its own configuration, from a copy of an empty data directory; its socket. Stopped after,
    its files left to `folder`'s owner."""
    import shutil

    import pymysql

    from knoblab.server.sandbox import base_template

    data = folder / "data"
    shutil.copytree(base_template(binary, home) / "data", data)
    sock = folder / "sock"
    argv = [str(binary.path), "--no-defaults", f"--datadir={data}", f"--socket={sock}",
            "--skip-networking", f"--pid-file={folder / 'pid'}",
            f"--log-error={folder / 'error.log'}",
            *(["--user=root"] if os.geteuid() == 0 else []), *options]
    server = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                pymysql.connect(unix_socket=str(sock), user="root", connect_timeout=2).close()
                break
            except pymysql.MySQLError:
                assert server.poll() is None and time.monotonic() < deadline, \
                    (folder / "error.log").read_text()[-2000:]
                time.sleep(0.1)
        yield sock
    finally:
        server.terminate()
        server.wait(timeout=60)


def _on(sock: Path, *statements: str, user: str = "root", database: str | None = None):
    import pymysql

    conn = pymysql.connect(unix_socket=str(sock), user=user, database=database,
                           autocommit=True)
    try:
        with conn.cursor() as cur:
            for sql in statements:
                cur.execute(sql)
            return list(cur.fetchall())
    finally:
        conn.close()


APP = ("CREATE DATABASE app", "CREATE TABLE app.items (id INT PRIMARY KEY, name VARCHAR(40))",
       "INSERT INTO app.items VALUES (1, 'a'), (2, 'b'), (3, 'c')")


class ShortConnections(threading.Thread):
    """One client that connects, runs a statement and quits, again and again: never two
    connections at once, many in a second."""

    def __init__(self, sock: Path, sql: str = "SELECT COUNT(*) FROM app.items WHERE id < 50",
                 database: str | None = None) -> None:
        super().__init__(daemon=True)
        self.sock, self.sql, self.database = sock, sql, database
        self.stop = threading.Event()
        self.ran = 0

    def run(self) -> None:
        while not self.stop.is_set():
            _on(self.sock, self.sql, database=self.database)
            self.ran += 1
            time.sleep(0.02)

    def __enter__(self) -> ShortConnections:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.join(timeout=30)


def _capture_of(sock: Path, home: Path, tmp_path: Path, *args: str, user: str = "root",
                log: str = "general", seconds: str = "3s") -> subprocess.CompletedProcess:
    spec = tmp_path / "production.toml"
    spec.write_text(f'name = "production"\n[server]\nkind = "external"\nsocket = "{sock}"\n'
                    f'user = "{user}"\n')
    return subprocess.run(cli_command(tmp_path / "s.sqlite", "capture", str(spec), "--for",
                                      seconds, "--log", log, *args),
                          env=cli_env(home), cwd=tmp_path, capture_output=True, text=True,
                          timeout=300)


def _run_refusal(spec: Path, home: Path, tmp_path: Path) -> str | None:
    """What `knoblab run` and `knoblab tune` refuse of the spec on this machine before they
    start anything (`runner.check_points`, on the sandboxes it would start), None for
    nothing."""
    from knoblab import runner
    from knoblab.spec import load_spec

    try:
        loaded = load_spec(spec)
        targets, _ = runner.open_servers(loaded, home, lambda _: None)
        runner.check_points(loaded, targets, Store(f"sqlite:///{tmp_path / 'checks.sqlite'}"))
    except UserError as exc:
        return str(exc)
    return None


def test_productions_own_configuration_is_a_baseline_its_tune_takes(
        binary, knoblab_home, tmp_path, short_folder):
    """What a run of the captured spec refuses is left out, each with the run's own reason
    (a data directory's fixed setting, the event scheduler, a setting a sandbox holds for its
    confinement, a plugin's from a library a sandbox does not load); giving up durability is
    how production runs: kept, with the consent written; and the spec called ready passes
    every check knoblab run and tune make before they start."""
    options = ("--lower-case-table-names=1", "--event-scheduler=ON",
               "--innodb-flush-log-at-trx-commit=0", "--local-infile=0",
               "--plugin-load-add=server_audit", "--server-audit-logging=ON",
               "--sort-buffer-size=1M")
    with _production(binary, knoblab_home, short_folder, *options) as sock:
        _on(sock, *APP)
        with ShortConnections(sock):
            done = _capture_of(sock, knoblab_home, tmp_path, "--out", str(tmp_path / "cap"))
    assert done.returncode == 0, done.stderr
    said = " ".join(done.stderr.split())
    assert "ready: knoblab tune" in said
    text = (tmp_path / "cap" / "spec.toml").read_text()
    spec = tomllib.loads(text)
    assert spec["server"]["config"] == {"innodb_flush_log_at_trx_commit": "0",
                                        "sort_buffer_size": "1048576"}
    assert spec["server"]["allow_durability_tradeoff"] is True
    for name, why in (("lower_case_table_names", "fixed when a data directory is created"),
                      ("event_scheduler", "events run SQL of their own"),
                      ("local_infile", "a sandbox holds it OFF"),
                      ("server_audit_logging", "a sandbox loads only its build's own")):
        assert any(line.startswith("# left out") and name in line and why in line
                   for line in text.splitlines()), (name, text)
        assert name in said
    assert "production gives up durability (innodb_flush_log_at_trx_commit" in said
    assert _run_refusal(tmp_path / "cap" / "spec.toml", knoblab_home, tmp_path) is None


def test_a_baseline_over_this_machines_memory_is_kept_and_not_called_ready(
        binary, knoblab_home, tmp_path, short_folder):
    """Production's buffer pool over this machine's memory budget: leaving it out would make
    every trial, and recommended.cnf, about another server; the capture keeps it and says,
    in place of "ready", what knoblab tune says of it here."""
    # Over the budget (80% of the memory), under what the kernel lets one process map.
    pool = int(psutil.virtual_memory().total * 0.85) >> 27 << 27  # whole 128M chunks
    with _production(binary, knoblab_home, short_folder,
                     f"--innodb-buffer-pool-size={pool}") as sock:
        _on(sock, *APP)
        with ShortConnections(sock):
            done = _capture_of(sock, knoblab_home, tmp_path, "--out", str(tmp_path / "cap"))
    assert done.returncode == 0, done.stderr
    said = " ".join(done.stderr.split())
    assert "ready: knoblab tune" not in said
    assert "not ready on this machine: knoblab tune would refuse" in said
    assert "estimated memory" in said and "a machine with the memory it needs" in said
    spec = tmp_path / "cap" / "spec.toml"
    assert tomllib.loads(spec.read_text())["server"]["config"] == {
        "innodb_buffer_pool_size": str(pool)}
    refusal = _run_refusal(spec, knoblab_home, tmp_path)
    assert refusal is not None and "estimated memory" in refusal


def test_a_clients_short_connections_in_a_second_are_replayed_one_at_a_time(
        binary, knoblab_home, tmp_path, short_folder):
    """A general log in whole seconds: a client's connections, one after the other, many in a
    second, are one session at a time in the replay, as the application ran them; so that
    production's max_connections = 40 under a thread pool is its baseline, and the replay
    does not open two dozen sessions at once into it (error 1040)."""
    from knoblab.capture.plan import plan_for

    with _production(binary, knoblab_home, short_folder, "--thread-handling=pool-of-threads",
                     "--max-connections=40") as sock:
        _on(sock, *APP)
        with ShortConnections(sock) as client:
            done = _capture_of(sock, knoblab_home, tmp_path, "--out", str(tmp_path / "cap"))
    assert done.returncode == 0, done.stderr
    assert client.ran > 40  # many a second
    plan = plan_for(tmp_path / "cap" / "statements.log", knoblab_home)
    assert plan.sessions > 20 and plan.peak == 1
    assert json.loads((tmp_path / "cap" / "capture.json").read_text())["log"][
        "peak_sessions"] == 1
    spec = tmp_path / "cap" / "spec.toml"
    assert tomllib.loads(spec.read_text())["server"]["config"] == {
        "max_connections": "40", "thread_handling": "pool-of-threads"}
    assert _run_refusal(spec, knoblab_home, tmp_path) is None


class Pooled(threading.Thread):
    """An application's connection in `database`, open from before the window, running
    statements there until stopped."""

    def __init__(self, sock: Path, database: str) -> None:
        import pymysql

        super().__init__(daemon=True)
        self.conn = pymysql.connect(unix_socket=str(sock), user="root", database=database,
                                    autocommit=True)
        self.stop = threading.Event()

    def run(self) -> None:
        with self.conn.cursor() as cur:
            while not self.stop.is_set():
                cur.execute("SELECT name FROM items WHERE id = 2")
                time.sleep(0.02)

    def __enter__(self) -> Pooled:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.join(timeout=30)
        self.conn.close()


def test_a_user_who_cannot_see_the_applications_databases_is_refused(
        binary, knoblab_home, tmp_path, short_folder):
    """A user that sees no database (SUPER alone) is refused before anything changes, the
    privileges named; one that sees some, not the one the application's connections use,
    too when they are open as the capture starts (PROCESS shows them), and not ready after
    the window when they open in it."""
    grants = "SELECT, SHOW VIEW, TRIGGER and EVENT on app"
    with _production(binary, knoblab_home, short_folder) as sock:
        _on(sock, *APP, "CREATE DATABASE seen", "DROP DATABASE IF EXISTS test",
            "CREATE USER blind@localhost", "GRANT SUPER ON *.* TO blind@localhost",
            "CREATE USER partly@localhost", "GRANT SUPER ON *.* TO partly@localhost",
            "GRANT ALL ON seen.* TO partly@localhost",
            "CREATE USER watching@localhost", "GRANT SUPER, PROCESS ON *.* TO watching@localhost",
            "GRANT ALL ON seen.* TO watching@localhost")
        with ShortConnections(sock, "SELECT name FROM app.items WHERE id = 1"):
            blind = _capture_of(sock, knoblab_home, tmp_path, "--out", str(tmp_path / "blind"),
                                user="blind")
        line = _one_line(blind)
        assert "blind@" in line and "lacks privileges knoblab capture needs: SHOW DATABASES, " \
            "or SELECT, SHOW VIEW, TRIGGER and EVENT on the application's databases" in line
        assert _on(sock, "SELECT @@general_log") == [(0,)]  # nothing changed

        with Pooled(sock, "app"):
            watched = _capture_of(sock, knoblab_home, tmp_path, "--out",
                                  str(tmp_path / "watched"), user="watching")
        line = _one_line(watched)
        assert f"{grants} (connections use them now, and this user cannot see them" in line

        with ShortConnections(sock, "SELECT name FROM items WHERE id = 1", database="app"):
            partly = _capture_of(sock, knoblab_home, tmp_path, "--out",
                                 str(tmp_path / "partly"), user="partly")
        line = _ending(partly.returncode, partly.stderr)
        assert "not ready: the statements captured ran in app, which partly cannot see" in line
        assert f"grant partly {grants.removesuffix(' on app')} on them" in line
        assert "ready: knoblab tune" not in partly.stderr
        assert not (tmp_path / "partly" / "spec.toml").exists()
        assert _on(sock, "SELECT @@general_log") == [(0,)]


@pytest.mark.parametrize("log", ["general", "slow"])
def test_another_knoblab_in_the_window_is_not_the_applications_load(
        binary, knoblab_home, tmp_path, short_folder, log):
    """During a capture's window another knoblab reaches the server (from another home): a
    second capture, refused, and a run on it, refused too; none of their statements are in
    the capture, the application's are."""
    with _production(binary, knoblab_home, short_folder) as sock:
        _on(sock, *APP)
        spec = tmp_path / "production.toml"
        spec.write_text(f'name = "production"\n[server]\nkind = "external"\nsocket = "{sock}"\n'
                        'user = "root"\n')
        run = tmp_path / "run.toml"
        run.write_text(spec.read_text() + '[dataset]\nrows = 1000\n[workload]\nsql = "SELECT 1"'
                       '\nrepetitions = 2\n[sweep]\nread_buffer_size = ["64K", "1M"]\n')
        other = tmp_path / "other-home"
        other.mkdir()
        capture = subprocess.Popen(
            cli_command(tmp_path / "s.sqlite", "capture", str(spec), "--for", "10m", "--log",
                        log, "--out", str(tmp_path / "cap")),
            env=cli_env(knoblab_home), cwd=tmp_path, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, text=True, start_new_session=True)
        with reaped(capture), ShortConnections(sock) as app:
            switch = "general_log" if log == "general" else "slow_query_log"
            deadline = time.monotonic() + 60
            while _on(sock, f"SELECT @@{switch}") != [(1,)]:
                assert capture.poll() is None and time.monotonic() < deadline
                time.sleep(0.05)
            logged = app.ran + 5  # statements the application runs once the log is on
            for args in (("capture", str(spec), "--for", "1s", "--out", str(tmp_path / "cap2")),
                         ("run", str(run))):
                refused = _knoblab(other, tmp_path / "other.sqlite", *args)
                assert "is capturing" in _one_line(refused)
            # however soon the refusals came back, the application ran in the window
            deadline = time.monotonic() + 60
            while app.ran < logged:
                assert app.is_alive() and time.monotonic() < deadline, app.ran
                time.sleep(0.05)
            os.killpg(capture.pid, signal.SIGINT)  # ends the window, keeping what it took
            _, stderr = capture.communicate(timeout=120)
    assert capture.returncode == 0, stderr
    texts = [e.text for e in read_log(tmp_path / "cap" / "statements.log") if e.is_statement]
    assert any("app.items" in text for text in texts)
    knoblabs = ("LOCK(", "@@pid_file", "knoblab", "SYSTEM_VARIABLES", "PROCESSLIST")
    assert [text for text in texts if any(mark in text for mark in knoblabs)] == []
    summary = json.loads((tmp_path / "cap" / "capture.json").read_text())
    assert summary["log"]["other_knoblab_connections"] >= 2
    assert "connection(s) another knoblab opened during the window" in " ".join(stderr.split())


def test_a_window_of_nothing_a_replay_runs_is_not_ready(binary, knoblab_home, tmp_path,
                                                        short_folder):
    """Connections that only set themselves up (a pool's or a monitor's probes) are statements
    a replay leaves out: a window of nothing else is not ready, as knoblab tune would refuse
    its log."""
    with _production(binary, knoblab_home, short_folder) as sock, \
            ShortConnections(sock, "SET NAMES utf8mb4"):
        done = _capture_of(sock, knoblab_home, tmp_path, "--out", str(tmp_path / "cap"))
    line = _ending(done.returncode, done.stderr)
    assert "not ready: none of the statements captured can be replayed" in line
    assert "the log holds no statement to replay" in line
    assert "ready: knoblab tune" not in done.stderr
    assert not (tmp_path / "cap" / "spec.toml").exists()
