"""Integration tests on real sandbox servers: start/stop, settings, refusal, cleanup, dataset,
timing and the page cache. No mocks: every server here is a real mariadbd (or mysqld).
"""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
import textwrap
import time
from dataclasses import replace
from pathlib import Path

import pytest

from knoblab.connection import DATABASE
from knoblab.datasets.scan import ScanTable
from knoblab.server.binary import ServerBinary
from knoblab.server.sandbox import (
    STOP_TIMEOUT,
    Sandbox,
    ServerStartError,
    base_template,
    derived_template,
    reap_orphans,
)
from knoblab.workloads.base import Measured
from knoblab.workloads.query import QueryWorkload, WorkloadError, cached_fraction, evict
from tests.fakes import query

pytestmark = pytest.mark.server

REPO = Path(__file__).resolve().parent.parent
SCAN_SQL = "SELECT COUNT(*) FROM dt2 WHERE slack LIKE 'a%'"
SCAN = ScanTable(rows=100_000)


class _Recorder:
    """Keeps what a measurement reports per second."""

    def __init__(self) -> None:
        self.os: list[tuple[float, dict[str, float]]] = []

    def second(self, second: object) -> None:
        raise AssertionError("a query reports no per-second throughput")

    def os_seconds(self, samples: list[tuple[float, dict[str, float]]]) -> None:
        self.os.extend(samples)


def _measure(workload: QueryWorkload, server: Sandbox, session_knobs: list[str]) -> Measured:
    recorder = _Recorder()
    return replace(workload, data=SCAN).measure(server, {}, session_knobs, recorder)


# --------------------------------------------------------------------------- helpers


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def _processes_mentioning(text: str) -> list[int]:
    """Live (non-zombie) processes whose command line contains `text`."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and text in _cmdline(int(entry.name)):
            found.append(int(entry.name))
    return found


def _gone(pid: int, marker: str) -> bool:
    """The process `pid` no longer runs the server (dead, zombie, or pid reused elsewhere)."""
    return marker not in _cmdline(pid)


def _wait_gone(pid: int, marker: str, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if _gone(pid, marker):
            return True
        time.sleep(0.05)
    return _gone(pid, marker)


def _socket_inodes(pid: int) -> set[str]:
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[len("socket:["):-1])
    return inodes


def _tcp_listen_inodes() -> set[str]:
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if len(fields) > 9 and fields[3] == "0A":  # 0A = TCP_LISTEN
                inodes.add(fields[9])
    return inodes


def _dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


@pytest.fixture(scope="module")
def base_data(binary: ServerBinary, knoblab_home: Path) -> Path:
    return base_template(binary, knoblab_home) / "data"


@pytest.fixture(scope="module")
def scan_template(binary: ServerBinary, knoblab_home: Path) -> Path:
    return derived_template(binary, SCAN.key, SCAN.build, knoblab_home)


@pytest.fixture
def scan_server(binary: ServerBinary, knoblab_home: Path, scan_template: Path):
    with Sandbox(binary, scan_template, {}, home=knoblab_home) as server:
        yield server


# --------------------------------------------------------------------------- lifecycle


def test_sandbox_is_private_socket_only_and_cleaned_up(binary, knoblab_home, base_data):
    sandbox = Sandbox(binary, base_data, {}, home=knoblab_home)
    sandbox.start()
    try:
        pid = sandbox.pid
        marker = str(sandbox.dir)
        assert pid is not None and marker in _cmdline(pid)
        assert sandbox.socket.is_socket()
        assert stat.S_IMODE(os.stat(sandbox.socket_dir).st_mode) == 0o700
        conn = sandbox.connect()
        try:
            with conn.cursor() as cur:
                cur.execute("SELECT 1 + 1, @@skip_networking")
                assert cur.fetchone() == (2, 1)
        finally:
            conn.close()
        sockets = _socket_inodes(pid)
        assert sockets, "the server holds no socket at all?"
        assert not sockets & _tcp_listen_inodes(), "the sandbox listens on TCP"
        socket_dir, private_dir = sandbox.socket_dir, sandbox.dir
        assert private_dir.is_dir() and socket_dir.is_dir()
    finally:
        sandbox.stop()
    assert _gone(pid, marker)
    assert not private_dir.exists()
    assert not socket_dir.exists()
    assert sandbox.pid is None
    assert not _processes_mentioning(marker)


def test_settings_are_applied_and_read_back(binary, knoblab_home, scan_template):
    settings = {"read_buffer_size": "8200", "key_buffer_size": "100000"}
    with Sandbox(binary, scan_template, settings, home=knoblab_home) as server:
        applied = server.global_values(["read_buffer_size", "key_buffer_size"])
        assert applied == {"read_buffer_size": "8192", "key_buffer_size": "98304"}
        measured = _measure(QueryWorkload(SCAN_SQL), server, ["read_buffer_size"])
        assert measured.details["session"] == {"read_buffer_size": "8192"}
        assert measured.details["rows"] == 1


def test_refused_configuration_raises_and_leaves_nothing(binary, knoblab_home, base_data):
    sandbox = Sandbox(binary, base_data, {"no_such_option": "1"}, home=knoblab_home)
    marker = str(sandbox.dir)
    with pytest.raises(ServerStartError) as caught:
        sandbox.start(timeout=60)
    message = str(caught.value)
    assert "no_such_option" in message
    assert "unknown variable" in message.lower()  # the error log's [ERROR] line
    assert sandbox.process is None
    assert not sandbox.dir.exists()
    assert sandbox.socket_dir is not None and not sandbox.socket_dir.exists()
    assert not _processes_mentioning(marker)


def test_exception_inside_with_stops_the_server(binary, knoblab_home, base_data):
    seen = {}
    with (
        pytest.raises(RuntimeError, match="boom"),
        Sandbox(binary, base_data, {}, home=knoblab_home) as server,
    ):
        seen.update(pid=server.pid, dir=server.dir, socket_dir=server.socket_dir)
        raise RuntimeError("boom")
    assert _gone(seen["pid"], str(seen["dir"]))
    assert not seen["dir"].exists()
    assert not seen["socket_dir"].exists()


def test_a_server_that_cannot_be_told_to_shut_down_is_signalled_at_once(binary, knoblab_home,
                                                                          base_data):
    # Stopped mid-start (no socket yet) or hung, SHUTDOWN cannot reach the server: stop()
    # must signal it rather than wait minutes for an exit nobody asked for (Ctrl-C then hung).
    server = Sandbox(binary, base_data, {}, home=knoblab_home)
    server.start()
    pid = server.pid
    server.socket.unlink()  # as if it were not listening yet
    began = time.monotonic()
    server.stop()
    assert time.monotonic() - began < STOP_TIMEOUT / 4
    assert _gone(pid, str(server.dir))
    assert not server.dir.exists()


CHILD = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    from knoblab.server.binary import find_binary
    from knoblab.server.sandbox import Sandbox
    server = Sandbox(find_binary(), Path(sys.argv[1]), {}, home=Path(sys.argv[2]))
    server.start()
    print(server.pid, server.dir, server.socket_dir, flush=True)
    time.sleep(600)
""")


def test_kill_9_of_the_owner_kills_the_server(knoblab_home, base_data, tmp_path):
    home = tmp_path / "home"  # private: reap_orphans() below must see only this test's sandbox
    env = {**os.environ, "KNOBLAB_HOME": str(knoblab_home)}
    child = subprocess.Popen([sys.executable, "-c", CHILD, str(base_data), str(home)],
                             stdout=subprocess.PIPE, text=True, env=env, cwd=REPO)
    try:
        line = child.stdout.readline()
        assert line, f"the child did not start a sandbox (exit {child.poll()})"
        pid_text, private_dir, socket_dir = line.split()
        pid = int(pid_text)
        assert private_dir in _cmdline(pid)
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=10)
        assert _wait_gone(pid, private_dir, 10.0), "the server outlived its killed owner"
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
        child.stdout.close()
    # Its private directories stay behind; the next reap_orphans() removes them.
    assert Path(private_dir, "owner.json").exists()
    assert reap_orphans(home) == 0  # nothing was running any more
    assert not Path(private_dir).exists()
    assert not Path(socket_dir).exists()


KILLED_AS_ITS_SOCKET_FOLDER_IS_MADE = textwrap.dedent("""
    import os, signal, sys, tempfile
    from pathlib import Path
    make = Path.mkdir
    def mkdir(self, *args, **kwargs):
        make(self, *args, **kwargs)
        if self.parent == Path(tempfile.gettempdir()) and self.name.startswith("knoblab-"):
            print(self, flush=True)
            os.kill(os.getpid(), signal.SIGKILL)
    Path.mkdir = mkdir
    from knoblab.server.binary import find_binary
    from knoblab.server.sandbox import Sandbox
    Sandbox(find_binary(), Path(sys.argv[1]), {}, home=Path(sys.argv[2])).start()
""")


def test_a_knoblab_killed_as_its_socket_folder_is_made_leaves_it_to_the_reaper(
        knoblab_home, base_data, tmp_path):
    """The folder is named in the owner file before it exists: a kill -9 the moment it is
    made leaves nothing the next knoblab does not remove."""
    home = tmp_path / "home"
    env = {**os.environ, "KNOBLAB_HOME": str(knoblab_home)}
    child = subprocess.run([sys.executable, "-c", KILLED_AS_ITS_SOCKET_FOLDER_IS_MADE,
                            str(base_data), str(home)], capture_output=True, text=True,
                           env=env, cwd=REPO, timeout=60)
    assert child.returncode == -signal.SIGKILL, child.stderr
    socket_dir = Path(child.stdout.strip())
    assert socket_dir.is_dir()
    assert reap_orphans(home) == 0  # no server was started
    assert not socket_dir.exists()


def test_reap_orphans_kills_only_servers_whose_owner_died(binary, base_data, tmp_path):
    home = tmp_path / "home"  # private: the counts below must see only this test's sandboxes
    orphan = Sandbox(binary, base_data, {}, home=home)
    kept = Sandbox(binary, base_data, {}, home=home)
    orphan.start()
    try:
        kept.start()
        owner_file = orphan.dir / "owner.json"
        owner = json.loads(owner_file.read_text())
        assert owner["owner_pid"] == os.getpid()
        assert owner["server_pid"] == orphan.pid
        owner["owner_pid"] = _dead_pid()
        owner_file.write_text(json.dumps(owner))
        orphan_process, orphan_dir = orphan.process, orphan.dir
        orphan_socket_dir = orphan.socket_dir

        assert reap_orphans(home) == 1
        assert orphan_process.wait(timeout=10) == -signal.SIGKILL
        assert not orphan_dir.exists()
        assert not orphan_socket_dir.exists()
        # A sandbox whose owner is alive (this process) is left alone.
        assert kept.process.poll() is None
        assert query(kept, "SELECT 1", None) == ((1,),)
        assert reap_orphans(home) == 0
        assert kept.dir.exists()
    finally:
        orphan.stop()
        kept.stop()
    assert not kept.dir.exists()


# --------------------------------------------------------------------------- dataset


def test_scan_table_content(scan_server):
    count, distinct, low, high, minimum, maximum = query(
        scan_server, "SELECT COUNT(*), COUNT(DISTINCT grp), MIN(LENGTH(slack)), "
        "MAX(LENGTH(slack)), MIN(grp), MAX(grp) FROM dt2")[0]
    assert count == 100_000
    assert distinct == 100_000
    assert (minimum, maximum) == (0, 99_999)
    assert low >= 20 and high <= 50
    assert query(scan_server, "SELECT COUNT(*) FROM dt2 WHERE slack IS NULL")[0][0] == 0
    (share,) = query(scan_server, "SELECT AVG(slack LIKE 'a%') FROM dt2")[0]
    assert 0.05 <= float(share) <= 0.075
    # The helper table used to generate the rows is gone.
    tables = {row[0] for row in query(scan_server, "SHOW TABLES")}
    assert tables == {"dt2"}
    assert [p.name for p in SCAN.files(scan_server.datadir)] == ["dt2.MYD", "dt2.MYI"]


def test_scan_table_sized_in_bytes(binary, knoblab_home):
    size = 5 * 1024 * 1024
    table = ScanTable(size_bytes=size)
    data = derived_template(binary, table.key, table.build, knoblab_home)
    with Sandbox(binary, data, {}, home=knoblab_home) as server:
        (length,) = query(
            server, "SELECT DATA_LENGTH FROM information_schema.TABLES "
            f"WHERE TABLE_SCHEMA = '{DATABASE}' AND TABLE_NAME = 'dt2'")[0]
        assert 0.9 * size <= int(length) <= 1.1 * size
        (rows,) = query(server, "SELECT COUNT(*) FROM dt2")[0]
        assert rows <= 200_000


def test_template_is_built_once_and_reused(binary, knoblab_home, scan_template):
    ready = scan_template.parent / ".ready"
    assert ready.exists()
    before = (ready.stat().st_mtime_ns, scan_template.stat().st_mtime_ns)
    calls = []
    began = time.perf_counter()
    again = derived_template(binary, SCAN.key, calls.append, knoblab_home)
    elapsed = time.perf_counter() - began
    assert again == scan_template
    assert calls == []  # build was not called again
    assert elapsed < 2.0
    assert (ready.stat().st_mtime_ns, scan_template.stat().st_mtime_ns) == before


# --------------------------------------------------------------------------- timing


def test_warm_measurement(scan_server):
    measured = _measure(QueryWorkload(SCAN_SQL, cache="warm"), scan_server, [])
    assert measured.value > 0
    assert measured.details["rows"] == 1
    assert measured.details["cached_before"] >= 0.95
    assert measured.details["session"] == {}
    assert measured.details["regime"] in ("CPU-bound", "I/O-bound", "mixed", "waiting")


def test_cold_measurement_reads_from_disk(scan_server):
    measured = _measure(QueryWorkload(SCAN_SQL, cache="cold"), scan_server, [])
    assert measured.value > 0
    assert measured.details["rows"] == 1
    assert measured.details["cached_before"] < 0.05
    assert measured.details["read_bytes"] > 0
    # The OS evidence agrees: the server process and the machine's disks both read.
    assert measured.details["os"]["server_read_bytes"] == measured.details["read_bytes"]
    assert measured.details["os"]["disk_read_bytes"] > 0
    assert measured.details["status"]["com_select"] == 1  # net of knoblab's own probing
    (count,) = query(scan_server, SCAN_SQL)[0]
    assert 5_000 <= count <= 7_500


def test_timed_runs_reports_the_fastest_run(scan_server):
    measured = _measure(QueryWorkload(SCAN_SQL, timed_runs=3), scan_server, ["read_buffer_size"])
    runs = measured.details["runs"]
    assert len(runs) == 3 and runs == sorted(runs)
    assert round(measured.value, 6) == runs[0]
    assert measured.details["session"] == {"read_buffer_size": "131072"}


def test_cached_fraction_and_evict(tmp_path):
    path = tmp_path / "blob.bin"
    path.write_bytes(os.urandom(4 * 1024 * 1024))
    assert len(path.read_bytes()) == 4 * 1024 * 1024
    assert cached_fraction([path]) > 0.5
    remaining = evict([path])
    assert remaining < 0.05
    assert cached_fraction([path]) < 0.05
    path.read_bytes()
    assert cached_fraction([path]) > 0.5
    empty = tmp_path / "empty"
    empty.touch()
    assert cached_fraction([empty]) == 0.0


def test_sql_error_raises_workload_error(scan_server):
    with pytest.raises(WorkloadError) as caught:
        _measure(QueryWorkload("SELECT no_such_column FROM dt2"), scan_server, [])
    assert "Unknown column 'no_such_column'" in str(caught.value)
    # The server survives a failed statement.
    assert query(scan_server, "SELECT COUNT(*) FROM dt2") == ((100_000,),)


def test_timeout_is_a_hard_limit_and_the_statement_is_stopped(scan_server):
    # A statement over the limit fails even when it would finish soon after, and the server
    # stops running it (a running server would otherwise keep working for nobody).
    began = time.monotonic()
    with pytest.raises(WorkloadError, match="exceeded the timeout of 0.5 s"):
        _measure(QueryWorkload("SELECT SLEEP(3)", timeout=0.5), scan_server, [])
    assert time.monotonic() - began < 2.5
    time.sleep(0.2)
    running = query(scan_server, "SELECT COUNT(*) FROM information_schema.PROCESSLIST "
                                  "WHERE INFO LIKE 'SELECT SLEEP(3)%'")
    assert running == ((0,),)


def test_char_variant_of_the_scan_table(binary: ServerBinary, knoblab_home: Path):
    """The first article's comments ask about CHAR instead of VARCHAR: a variant of its own."""
    char = ScanTable(rows=2_000, slack_type="CHAR(50)")
    assert char.key != ScanTable(rows=2_000).key
    template = derived_template(binary, char.key, char.build, knoblab_home)
    with Sandbox(binary, template, {}, home=knoblab_home) as server:
        (column_type,) = query(server, "SELECT COLUMN_TYPE FROM information_schema.COLUMNS "
                                "WHERE TABLE_NAME = 'dt2' AND COLUMN_NAME = 'slack'")[0]
        (rows,) = query(server, "SELECT COUNT(*) FROM knoblab.dt2")[0]
    assert column_type == "char(50)" and rows == 2_000
