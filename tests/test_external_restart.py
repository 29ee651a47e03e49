"""Restart-only settings on a running server: knoblab writes them to an include file it owns,
restarts the server with the user's command, and empties the file and restarts again at the
end — or later, with `knoblab restore`, after a kill -9.

The server here is one the test starts itself (so restarting it harms nothing), reached only
by its socket, restarted by tests/data/restart_server.py as a service manager would."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pymysql
import pytest

from knoblab.server.datadir import copy_datadir
from knoblab.server.external import INCLUDE_MARK
from knoblab.server.sandbox import base_template
from knoblab.store import Store
from tests.fakes import cli_command, cli_env, reaped

pytestmark = pytest.mark.server
RESTART = Path(__file__).parent / "data" / "restart_server.py"


class Service:
    """A MariaDB that knoblab did not start, with a conf.d folder its configuration includes."""

    def __init__(self, binary, knoblab_home: Path, folder: Path, socket_dir: Path) -> None:
        self.folder = folder
        self.socket = socket_dir / "mysqld.sock"  # a short path, as a socket's must be
        self.pid_file = folder / "mysqld.pid"
        self.conf_d = folder / "conf.d"
        self.conf_d.mkdir(parents=True)
        copy_datadir(base_template(binary, knoblab_home) / "data", folder / "data")
        self.defaults = folder / "my.cnf"
        lines = ["[mysqld]", f"datadir = {folder / 'data'}", f"socket = {self.socket}",
                 f"pid-file = {self.pid_file}", f"log-error = {folder / 'error.log'}",
                 "skip-networking"]
        if os.geteuid() == 0:
            lines.append("user = root")
        self.defaults.write_text("\n".join(lines) + f"\n!includedir {self.conf_d}\n")
        self.command = [sys.executable, str(RESTART), str(binary.path), str(self.defaults),
                        str(self.pid_file), str(self.socket)]
        assert subprocess.run(self.command, timeout=90).returncode == 0

    def value(self, name: str) -> str:
        """The server's value; waits while it restarts (the socket comes back, and a connection
        made just before a shutdown may be cut mid-query)."""
        deadline = time.monotonic() + 60
        while True:
            try:
                conn = pymysql.connect(unix_socket=str(self.socket), user="root")
                try:
                    with conn.cursor() as cur:
                        cur.execute(f"SELECT @@GLOBAL.{name}")
                        return str(cur.fetchone()[0])
                finally:
                    conn.close()
            except pymysql.err.OperationalError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)

    def pid(self) -> int:
        return int(self.pid_file.read_text().strip())

    def stop(self) -> None:
        """Every server process of this service, whatever its pid file says now."""
        for process in psutil.process_iter(["cmdline"]):
            if f"--defaults-file={self.defaults}" in (process.info["cmdline"] or []):
                with contextlib.suppress(psutil.Error):
                    process.kill()


@pytest.fixture()
def service(binary, knoblab_home, tmp_path, short_folder):
    server = Service(binary, knoblab_home, tmp_path / "service", short_folder)
    yield server
    server.stop()


def _spec(tmp_path: Path, service: Service, *, sql: str = "SELECT COUNT(*) FROM dt2",
          repetitions: int = 1, command: list[str] | None = None) -> Path:
    path = tmp_path / "restart.toml"
    path.write_text(f"""\
name = "restart-only"

[server]
kind = "external"
socket = "{service.socket}"
user = "root"
restart_command = {json.dumps(command or service.command)}
config_include = "{service.conf_d / 'knoblab.cnf'}"

[dataset]
rows = 2000

[workload]
sql = "{sql}"
repetitions = {repetitions}

[sweep]
innodb_sort_buffer_size = ["2M", "4M"]
read_buffer_size = ["64K", "1M"]
""")
    return path


def _knoblab(knoblab_home: Path, store: Path, *args: str, **kwargs):
    env, command = cli_env(knoblab_home), cli_command(store, *args)
    if kwargs.get("background"):
        return subprocess.Popen(command, env=env, cwd=store.parent, stdout=subprocess.DEVNULL,
                                stderr=subprocess.PIPE, text=True, start_new_session=True)
    return subprocess.run(command, env=env, cwd=store.parent, capture_output=True, text=True,
                          timeout=600)


def test_restart_only_settings_are_applied_by_restarts_and_undone(knoblab_home, tmp_path,
                                                                  service):
    original = service.value("innodb_sort_buffer_size")
    store = tmp_path / "s.sqlite"
    out = _knoblab(knoblab_home, store, "run", str(_spec(tmp_path, service)), "--json",
                   str(tmp_path / "r.json"), "--out", str(tmp_path / "o"))
    assert out.returncode == 0, out.stderr
    result = json.loads((tmp_path / "r.json").read_text())
    for point in result["points"]:
        assert point["n"] == 1
        wanted = {"2M": 2 << 20, "4M": 4 << 20}[point["settings"]["innodb_sort_buffer_size"]]
        assert point["effective"]["innodb_sort_buffer_size"] == str(wanted)
    include = service.conf_d / "knoblab.cnf"
    assert include.read_text() == INCLUDE_MARK  # emptied at the end
    assert service.value("innodb_sort_buffer_size") == original  # restarted as it was
    assert Store(f"sqlite:///{store}").pending_restores() == []


def test_kill_9_then_restore_restarts_it_with_its_own_settings(knoblab_home, tmp_path,
                                                               service):
    original = service.value("innodb_sort_buffer_size")
    store = tmp_path / "s.sqlite"
    spec = _spec(tmp_path, service, sql="SELECT SLEEP(0.5), COUNT(*) FROM dt2", repetitions=4)
    proc = _knoblab(knoblab_home, store, "run", str(spec), background=True)
    with reaped(proc):
        deadline = time.monotonic() + 180
        while "innodb_sort_buffer_size" not in {
                r["name"] for r in (Store(f"sqlite:///{store}").pending_restores()
                                    if store.exists() else [])} \
                or service.value("innodb_sort_buffer_size") == original:
            assert proc.poll() is None, proc.stderr.read()
            assert time.monotonic() < deadline
            time.sleep(0.1)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
    assert service.value("innodb_sort_buffer_size") != original
    restored = _knoblab(knoblab_home, store, "restore")
    assert restored.returncode == 0, restored.stderr
    assert "innodb_sort_buffer_size" in restored.stdout
    assert (service.conf_d / "knoblab.cnf").read_text() == INCLUDE_MARK
    assert service.value("innodb_sort_buffer_size") == original


def test_a_failing_restart_fails_the_point_and_leaves_the_server_as_it_was(
        knoblab_home, tmp_path, service):
    store = tmp_path / "s.sqlite"
    pid = service.pid()
    out = _knoblab(knoblab_home, store, "run", str(_spec(tmp_path, service, command=["false"])))
    assert out.returncode == 2
    assert "every configuration failed" in out.stderr
    assert "restart command exited with 1" in out.stdout
    assert service.pid() == pid  # never stopped
    assert (service.conf_d / "knoblab.cnf").read_text() == INCLUDE_MARK


def test_an_include_file_knoblab_did_not_write_is_refused(knoblab_home, tmp_path, service):
    (service.conf_d / "knoblab.cnf").write_text("[mysqld]\nmax_connections = 500\n")
    out = _knoblab(knoblab_home, tmp_path / "s.sqlite", "run", str(_spec(tmp_path, service)))
    assert out.returncode == 2
    assert "was not written by knoblab" in out.stderr
    assert (service.conf_d / "knoblab.cnf").read_text() == "[mysqld]\nmax_connections = 500\n"
