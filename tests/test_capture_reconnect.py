"""`knoblab capture --reconnect idle` on a "production" server whose pool prepared its
statements (server-side, sysbench's default) before the window: knoblab ends each of the
pool's connections once it is idle between transactions, the pool reconnects and prepares
again with the log on, and the capture holds every statement with its values. A client that
does not reconnect stops the reconnecting at the first connection ended, and says so. The
server is a sandbox started for the test (reached as a running server through its socket):
ending connections on the shared server would end other tests'."""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from knoblab.capture import read_log
from knoblab.capture.plan import plan_for
from knoblab.server.sandbox import Sandbox
from tests.fakes import cli_command, cli_env
from tests.test_verify import _globals, _production, _spec

pytestmark = pytest.mark.server

ROWS = 5_000
# sysbench's oltp_read_only as a pool runs it: a connection the server ends is replaced by a
# new one, which prepares its statements again (sysbench's own reconnect crashes here).
POOLED = Path(__file__).resolve().parent.parent / "benchmarks" / "pooled.lua"


def _sysbench(socket: Path, command: str, *options: str, script: str = "oltp_read_only"
              ) -> list[str]:
    return ["sysbench", script, "--tables=1", f"--table-size={ROWS}",
            "--rand-type=uniform", f"--mysql-socket={socket}", "--mysql-user=root",
            "--mysql-db=sbtest", "--db-driver=mysql", *options, command]


@pytest.fixture
def production(binary, knoblab_home: Path) -> Iterator[Sandbox]:
    with _production(binary, knoblab_home, "32M") as server:
        with server.connect() as conn, conn.cursor() as cur:
            cur.execute("CREATE DATABASE sbtest")
        subprocess.run(_sysbench(server.socket, "prepare"), capture_output=True, check=True)
        yield server


def _load(server: Sandbox, pooled: bool) -> subprocess.Popen[str]:
    """Two connections, open loop at 100 transactions a second, their statements prepared
    on the server (sysbench's default) as they open, before the window; `pooled`: each
    replaced by a new one when the server ends it."""
    load = subprocess.Popen(_sysbench(server.socket, "run", "--threads=2", "--time=25",
                                      "--rate=100",
                                      script=str(POOLED) if pooled else "oltp_read_only"),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env={**os.environ, "KNOBLAB_POOLED_TEST": "oltp_read_only"})
    time.sleep(2)
    return load


def _capture(home: Path, folder: Path, spec: Path, *args: str
             ) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cli_command(folder / "s.sqlite", "capture", str(spec), "--for", "4s",
                                      "--out", str(folder / "out"), "--data", "all", *args),
                          env=cli_env(home), cwd=folder, capture_output=True, text=True,
                          timeout=180)


@pytest.mark.long
def test_a_pool_that_prepared_before_the_window_is_captured_with_its_values(
        knoblab_home: Path, tmp_path: Path, production: Sandbox):
    before = _globals(production.socket)
    load = _load(production, pooled=True)
    # A connection inside a transaction that locked a row, throughout: never ended, however
    # long it sleeps. (One that has only read InnoDB may not list: the capture guide says so.)
    holder = production.connect("sbtest")
    try:
        with holder.cursor() as cur:
            cur.execute("BEGIN")
            cur.execute("SELECT id FROM sbtest1 WHERE id = 1 FOR UPDATE")
            cur.execute("SELECT CONNECTION_ID()")
            (held,) = cur.fetchone()
        done = _capture(knoblab_home, tmp_path, _spec(tmp_path, production.socket),
                        "--reconnect", "idle")
        with holder.cursor() as cur:  # still open, its transaction whole
            cur.execute("SELECT id FROM sbtest1 WHERE id = 2")
            cur.execute("COMMIT")
    finally:
        holder.close()
        output = load.communicate(timeout=60)[0]
    assert done.returncode == 0, done.stderr
    said = " ".join((done.stdout + done.stderr).split())
    assert "reconnected 2 connection(s)" in said and "ready: knoblab tune" in said, said
    assert "1 never idle so within" in said, said
    summary = json.loads((tmp_path / "out" / "capture.json").read_text())
    reconnected = summary["log"]["reconnected"]
    assert len(reconnected["ended"]) == 2 and reconnected["stopped"] is None, reconnected
    assert reconnected["busy"] == [held], reconnected
    # every statement captured has its values: none is an execution the log shows with ?
    assert summary["log"]["without_values"] == 0, summary["log"]
    events = [e for e in read_log(tmp_path / "out" / "statements.log") if e.is_statement]
    assert not {e.thread for e in events} & set(reconnected["ended"])
    executed = [e for e in events if e.command == "Execute"]
    assert len(executed) > 100 and all("?" not in e.text for e in executed[:50])
    plan = plan_for(tmp_path / "out" / "statements.log", knoblab_home)
    assert plan.prepared > 100, plan
    assert not [why for why in plan.skipped if "prepared before" in why], plan.skipped
    # the application went on: its two connections ended, each replaced, no other error
    assert load.returncode == 0, output
    assert output.count("pooled: reconnected") == 2, output
    assert _globals(production.socket) == before


@pytest.mark.long
def test_a_client_that_does_not_reconnect_stops_it_at_the_first(
        knoblab_home: Path, tmp_path: Path, production: Sandbox):
    before = _globals(production.socket)
    load = _load(production, pooled=False)  # a lost connection ends it: no reconnecting
    try:
        done = _capture(knoblab_home, tmp_path, _spec(tmp_path, production.socket),
                        "--reconnect", "idle")
    finally:
        load.kill()
        load.wait()
    said = " ".join((done.stdout + done.stderr).split())
    assert "reconnected 1 connection(s)" in said, said
    assert "stopped: no connection of root was opened in place of" in said, said
    summary_path = tmp_path / "out" / "capture.json"
    if summary_path.exists():  # the other connection, still with its ?, decides readiness
        assert json.loads(summary_path.read_text())["log"]["reconnected"]["stopped"]
    assert done.returncode in (0, 2) and "Traceback" not in done.stderr, done.stderr
    assert _globals(production.socket) == before
