"""Crashes and failures through the real CLI, on real sandbox servers.

knoblab killed with SIGKILL (during the dataset build, during a trial, between trials) and
then resumed; a sandbox server killed mid-measurement; a configuration the server refuses at
start-up; a per-trial timeout; and a run most of whose measurements failed. Every case runs
`python -m knoblab.cli` as a subprocess with the session's KNOBLAB_HOME and a private store.
"""

from __future__ import annotations

import itertools
import json
import os
import re
import signal
import sqlite3
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import pymysql
import pytest

from knoblab.runner import plan_order
from tests.fakes import cli_command, cli_env, reaped, servers_under

pytestmark = pytest.mark.server

T = TypeVar("T")
SEED = 11
REPETITIONS = 3
VALUES = ["64K", "2M"]
# Only the build-kill case uses a dataset of this size, so its template is new in the session.
BUILD_ROWS = 1_000_003
SLEEPY = "SELECT SLEEP(0.5), COUNT(*) FROM dt2"


def _spec(name: str, *, rows: int = 2000, sql: str = "SELECT COUNT(*) FROM dt2",
          cache: str = "warm", repetitions: int = REPETITIONS, extra: str = "",
          sweep: str = f"read_buffer_size = {json.dumps(VALUES)}") -> str:
    return (f'name = "{name}"\n\n[dataset]\nrows = {rows}\n\n[workload]\nsql = "{sql}"\n'
            f'cache = "{cache}"\nrepetitions = {repetitions}\n{extra}\n\n[sweep]\n{sweep}\n\n'
            f"[statistics]\nseed = {SEED}\n")


def _knoblab(home: Path, store: Path, *args: str, cwd: Path,
             timeout: float = 180) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cli_command(store, *args), env=cli_env(home), cwd=cwd,
                          capture_output=True, text=True, timeout=timeout, check=False)


def _db(store: Path, sql: str, *params: object) -> list[tuple]:
    with sqlite3.connect(store) as conn:
        return conn.execute(sql, params).fetchall()


def _until(what: str, check: Callable[[], T], proc: subprocess.Popen,
           timeout: float = 60) -> T:
    """The first true value of `check`, polled while knoblab runs."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, f"knoblab exited ({proc.returncode}) before {what}"
        try:
            value = check()
        except (sqlite3.OperationalError, OSError):  # not created yet, or gone meanwhile
            value = None
        if value:
            return value
        time.sleep(0.01)
    raise AssertionError(f"no {what} after {timeout} s")


def _no_servers_soon(home: Path, within: float = 5) -> None:
    deadline = time.monotonic() + within
    while servers_under(home) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert servers_under(home) == [], f"servers of {home} still running {within} s later"


def _no_sandboxes(home: Path) -> None:
    assert servers_under(home) == []
    assert list((home / "sandboxes").glob("*")) == []


def _trials(store: Path) -> dict[int, tuple]:
    """id -> (point, repetition, position, status, value, error) of every trial."""
    rows = _db(store, "SELECT id, point_idx, repetition, position, status, value, error "
               "FROM trials")
    return {row[0]: row[1:] for row in rows}


def _done_count(store: Path) -> int:
    return _db(store, "SELECT COUNT(*) FROM trials WHERE status = 'done'")[0][0]


def _sandbox_running(home: Path, sql_prefix: str, min_ms: int = 200) -> int | None:
    """The pid of a sandbox server of `home` running a statement that starts with
    `sql_prefix`, and has been for `min_ms` (not one about to end)."""
    for owner_file in (home / "sandboxes").glob("*/owner.json"):
        try:
            owner = json.loads(owner_file.read_text())
        except (OSError, ValueError):
            continue
        pid = owner.get("server_pid")
        if not pid or not owner.get("socket_dir"):
            continue
        try:
            conn = pymysql.connect(unix_socket=str(Path(owner["socket_dir"]) / "mysqld.sock"),
                                   user="root", password="", connect_timeout=1)
        except pymysql.MySQLError:
            continue  # not ready yet, or gone
        try:
            with conn.cursor() as cur:
                cur.execute("SELECT COUNT(*) FROM information_schema.PROCESSLIST "
                            "WHERE INFO LIKE %s AND TIME_MS >= %s", (sql_prefix + "%", min_ms))
                if cur.fetchone()[0]:
                    return pid
        except pymysql.MySQLError:
            continue
        finally:
            conn.close()
    return None


def _start(home: Path, store: Path, tmp: Path, *args: str) -> subprocess.Popen:
    # Its own session: the SIGKILL below is meant for knoblab alone, never for its group.
    with open(tmp / "run.stdout", "w") as stdout, open(tmp / "run.stderr", "w") as stderr:
        return subprocess.Popen(cli_command(store, *args), env=cli_env(home), cwd=tmp,
                                stdout=stdout, stderr=stderr, start_new_session=True)


@pytest.fixture(scope="module")
def home(knoblab_home: Path, catalog) -> Path:
    """The session home, its base template and catalog built before anything is timed."""
    return knoblab_home


# --------------------------------------------------------------------------- kill -9, resume


def _building(home: Path, store: Path) -> Path | None:
    """A dataset template being built with its table already filling, while its server runs."""
    for table in home.glob("templates/*/*.building-*/data/knoblab/dt2.MYD"):
        if servers_under(home):
            return table.parents[2]
    return None


MOMENTS = {
    # (spec, the moment to kill knoblab at)
    "during-dataset-build": (
        _spec("kill-build", rows=BUILD_ROWS, sql=f"SELECT grp FROM dt2 WHERE grp >= "
              f"{BUILD_ROWS - 3}"),
        _building),  # knoblab stores the run only once its datasets are built
    "during-a-trial": (
        _spec("kill-trial", sql=SLEEPY, cache="cold"),
        lambda home, store: _done_count(store) >= 1 and
        _sandbox_running(home, "SELECT SLEEP", min_ms=100)),
    "between-trials": (
        _spec("kill-between"),
        lambda home, store: _done_count(store) >= 2),
}


@pytest.mark.parametrize("moment", list(MOMENTS))
def test_kill_9_then_resume(moment, home, tmp_path):
    text, ready = MOMENTS[moment]
    spec = tmp_path / "spec.toml"
    spec.write_text(text)
    store = tmp_path / "s.sqlite"
    proc = _start(home, store, tmp_path, "run", str(spec), "--out", str(tmp_path / "o"))
    with reaped(proc):
        found = _until(moment, lambda: ready(home, store), proc)
        assert servers_under(home) or moment == "between-trials"
        os.kill(proc.pid, signal.SIGKILL)  # knoblab only: its servers must go by themselves
        assert proc.wait(timeout=10) == -signal.SIGKILL
    # The kernel stops the servers of a killed knoblab (PR_SET_PDEATHSIG); their directories
    # stay until the next knoblab reaps them.
    _no_servers_soon(home)
    assert list((home / "sandboxes").glob("*")) or moment == "between-trials"
    before = _trials(store)
    running = [i for i, t in before.items() if t[3] == "running"]
    done_before = {i: t for i, t in before.items() if t[3] == "done"}
    assert [t for t in before.values() if t[3] not in ("running", "done")] == []
    result_json = tmp_path / "r.json"
    outputs = ["--json", str(result_json), "--out", str(tmp_path / "o")]

    if moment == "during-dataset-build":
        # Killed before the run was stored: nothing to resume, and running it again works.
        assert _db(store, "SELECT COUNT(*) FROM runs") == [(0,)]
        again = _knoblab(home, store, "run", str(spec), *outputs, cwd=tmp_path)
        assert again.returncode == 0, again.stderr
        (run_id, status), = _db(store, "SELECT id, status FROM runs")
        # The dataset was built anew, to the end, and the half-built one is not its template.
        key = found.name.split(".building-")[0]
        template = found.parent / key
        assert (template / ".ready").exists()
        assert not found.exists()  # the killed build's leftovers were cleaned up
        files = [p for p in (template / "data" / "knoblab").glob("dt2.*") if p.suffix != ".frm"]
        result = json.loads(result_json.read_text())
        assert result["dataset"]["rows"] == BUILD_ROWS
        assert result["dataset"]["bytes"] == sum(p.stat().st_size for p in files)
        rows = _db(store, "SELECT json_extract(details, '$.rows') FROM trials "
                   "WHERE status = 'done'")
        assert rows and all(r == (3,) for r in rows), rows  # the last rows are all there
    else:
        (run_id, status), = _db(store, "SELECT id, status FROM runs")
        assert status == "running"  # the process died: nothing could mark it otherwise
        if moment == "during-a-trial":
            assert len(running) == 1 and len(done_before) >= 1
        else:
            assert len(done_before) >= 2 and len(running) <= 1
        assert len(done_before) < 2 * REPETITIONS, "the run ended before it was killed"
        resumed = _knoblab(home, store, "resume", run_id, *outputs, cwd=tmp_path)
        assert resumed.returncode == 0, resumed.stderr
        assert "Traceback" not in resumed.stderr

    _no_sandboxes(home)
    assert _db(store, "SELECT status FROM runs WHERE id = ?", run_id) == [("done",)]
    after = _trials(store)
    # What was measured before the kill is kept as it was, not measured again.
    assert {i: after[i] for i in done_before} == done_before
    # A trial cut short by the kill is not a measurement.
    assert all(after[i][3] == "discarded" and "stopped" in after[i][5] for i in running)
    assert [t for t in after.values() if t[3] not in ("done", "discarded")] == []
    done = [t for t in after.values() if t[3] == "done"]
    cells = sorted((p, r) for p, r, *_ in done)
    assert cells == list(itertools.product(range(len(VALUES)), range(REPETITIONS)))
    # Every trial in its place of the seeded plan, as in a run never interrupted.
    assert {(pos, (p, r)) for p, r, pos, *_ in done} == \
        set(enumerate(plan_order(len(VALUES), REPETITIONS, SEED)))
    result = json.loads(result_json.read_text())
    assert result["run_id"] == run_id and result["status"] == "done"
    assert [p["settings"] for p in result["points"]] == \
        [{"read_buffer_size": v} for v in VALUES]
    assert [(p["n"], p["failed"]) for p in result["points"]] == [(REPETITIONS, 0)] * len(VALUES)


# --------------------------------------------------------------------------- failures in a run


def test_server_killed_mid_measurement(home, tmp_path):
    spec = tmp_path / "spec.toml"
    # Two seconds at 64K, instant at 2M: the server is killed in one of the slow ones.
    spec.write_text(_spec("server-killed", repetitions=2, cache="cold",
                          sql="SELECT SLEEP(IF(@@read_buffer_size < 100000, 2, 0))"))
    store = tmp_path / "s.sqlite"
    proc = _start(home, store, tmp_path, "run", str(spec), "--json", str(tmp_path / "r.json"),
                  "--out", str(tmp_path / "o"))
    with reaped(proc):
        server = _until("a query running", lambda: _sandbox_running(home, "SELECT SLEEP"), proc)
        (victim,), = _db(store, "SELECT id FROM trials WHERE status = 'running'")
        assert server in servers_under(home)
        os.kill(server, signal.SIGKILL)
        code = proc.wait(timeout=120)
    stderr = (tmp_path / "run.stderr").read_text()
    assert code == 0, stderr  # 1 of 4 failed: the run went on
    assert "Traceback" not in stderr
    _no_sandboxes(home)
    trials = _trials(store)
    assert len(trials) == 4
    point, _, _, status, value, error = trials.pop(victim)
    assert (point, status, value) == (0, "failed", None)
    assert re.search(r"lost connection|gone away", error, re.IGNORECASE), error
    assert [t[3] for t in trials.values()] == ["done"] * 3
    result = json.loads((tmp_path / "r.json").read_text())
    assert [(p["n"], p["failed"]) for p in result["points"]] == [(1, 1), (2, 0)]


def test_configuration_the_server_refuses_at_start_up(home, tmp_path):
    # The catalog takes ON for innodb_encrypt_log, but the server cannot start with it
    # without an encryption plugin.
    spec = tmp_path / "spec.toml"
    spec.write_text(_spec("refused", repetitions=2,
                          sweep='innodb_encrypt_log = ["OFF", "ON"]'))
    store = tmp_path / "s.sqlite"
    proc = _knoblab(home, store, "run", str(spec), "--json", str(tmp_path / "r.json"),
                    "--out", str(tmp_path / "o"), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr  # 2 of 4 failed: not most
    assert "Traceback" not in proc.stderr
    _no_sandboxes(home)
    trials = sorted(_trials(store).values())
    assert [(p, r, s) for p, r, _, s, _, _ in trials] == [
        (0, 0, "done"), (0, 1, "done"), (1, 0, "failed"), (1, 1, "failed")]
    for *_, error in trials[2:]:
        # The error log's own lines, not just "it did not start".
        assert "exited during start-up" in error
        assert "[ERROR] InnoDB: cannot enable encryption, encryption plugin is not available" \
            in error
    result = json.loads((tmp_path / "r.json").read_text())
    refused = result["points"][1]
    assert refused["settings"] == {"innodb_encrypt_log": "ON"}
    assert (refused["n"], refused["failed"], refused["verdict"]) == (0, 2, "failed")
    assert any("encryption plugin is not available" in e for e in refused["errors"])
    assert result["points"][0]["n"] == 2
    row = next(line for line in proc.stdout.splitlines() if line.startswith("ON "))
    assert "failed" in row
    assert "encryption plugin is not available" in " ".join(proc.stdout.split())


def test_settings_fixed_when_the_datadir_is_made_are_refused(home, tmp_path):
    spec = tmp_path / "spec.toml"
    spec.write_text(_spec("page", repetitions=1, sweep='innodb_page_size = ["16K", "4K"]'))
    store = tmp_path / "s.sqlite"
    proc = _knoblab(home, store, "run", str(spec), cwd=tmp_path)
    assert proc.returncode == 2
    assert "innodb_page_size is fixed when a data directory is created" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


def test_trial_timeout(home, tmp_path):
    # A 30 s SLEEP at 2M, an instant query at 64K: one trial times out, the other runs.
    spec = tmp_path / "spec.toml"
    spec.write_text(_spec("timeout", sql="SELECT SLEEP(IF(@@read_buffer_size > 100000, 30, 0))",
                          cache="cold", repetitions=1, extra="timeout = 1"))
    store = tmp_path / "s.sqlite"
    proc = _knoblab(home, store, "run", str(spec), "--out", str(tmp_path / "o"), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    _no_sandboxes(home)
    rows = _db(store, "SELECT point_idx, status, error, finished_at - started_at FROM trials "
               "ORDER BY point_idx")
    assert [(p, s) for p, s, _, _ in rows] == [(0, "done"), (1, "failed")]
    _, _, error, seconds = rows[1]
    assert "timeout" in error
    # Given up after about a second (the client's read timeout), not after the 30 s the
    # statement would take, and its server stopped at once, the statement still running.
    assert seconds < 8, seconds


def test_most_measurements_failed_is_an_error(home, tmp_path):
    # At 128K and 2M the statement fails ("Subquery returns more than 1 row"); at 64K it runs.
    spec = tmp_path / "spec.toml"
    spec.write_text(_spec(
        "mostly-failed", repetitions=1,
        sql="SELECT IF(@@read_buffer_size > 100000, (SELECT 1 UNION SELECT 2), 1)",
        sweep='read_buffer_size = ["64K", "128K", "2M"]'))
    store = tmp_path / "s.sqlite"
    proc = _knoblab(home, store, "run", str(spec), "--json", str(tmp_path / "r.json"),
                    "--out", str(tmp_path / "o"), cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    last = " ".join(proc.stderr.strip().splitlines()[-1].split())
    assert last == ("knoblab: 2 of 3 measurements failed; the results above rest on the "
                    "remaining 1 — see the errors above")
    # The report and the results are still there, before the error.
    result = json.loads((tmp_path / "r.json").read_text())
    assert [(p["n"], p["failed"]) for p in result["points"]] == [(1, 0), (0, 1), (0, 1)]
    assert "more than 1 row" in " ".join(proc.stdout.split())
    _no_sandboxes(home)


def test_a_live_run_is_not_resumed_twice_and_a_killed_one_says_so(home, tmp_path):
    spec = tmp_path / "spec.toml"
    spec.write_text(_spec("owner", sql=SLEEPY))
    store = tmp_path / "s.sqlite"
    proc = _start(home, store, tmp_path, "run", str(spec), "--out", str(tmp_path / "o"))
    with reaped(proc):
        _until("a finished trial", lambda: _done_count(store) >= 1, proc)
        (run_id,), = _db(store, "SELECT id FROM runs")
        twice = _knoblab(home, store, "resume", run_id, cwd=tmp_path)
        assert twice.returncode == 2
        assert f"still being measured by process {proc.pid}" in twice.stderr
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
    listed = _knoblab(home, store, "runs", cwd=tmp_path)
    assert "killed" in listed.stdout and run_id in listed.stdout
    resumed = _knoblab(home, store, "resume", run_id, cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr
    assert _db(store, "SELECT status FROM runs") == [("done",)]


def test_two_resumes_at_once_measure_each_trial_once(home, tmp_path):
    spec = tmp_path / "spec.toml"
    spec.write_text(_spec("race", sql=SLEEPY))
    store = tmp_path / "s.sqlite"
    proc = _start(home, store, tmp_path, "run", str(spec), "--out", str(tmp_path / "o"))
    with reaped(proc):
        _until("a finished trial", lambda: _done_count(store) >= 1, proc)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
    _no_servers_soon(home)
    (run_id,), = _db(store, "SELECT id FROM runs")
    # Both started at the same moment, as a user and a cron job might.
    racers = [subprocess.Popen(cli_command(store, "resume", run_id), env=cli_env(home),
                               cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True)
              for _ in range(2)]
    outcomes = [(racer.wait(timeout=180), racer.stderr.read()) for racer in racers]
    for racer in racers:
        racer.stdout.close()
        racer.stderr.close()
    codes = sorted(code for code, _ in outcomes)
    assert codes == [0, 2], outcomes
    assert any("still being measured by process" in err for code, err in outcomes if code == 2)
    done = _db(store, "SELECT point_idx, repetition, COUNT(*) FROM trials "
                      "WHERE status = 'done' GROUP BY point_idx, repetition")
    assert sorted((p, r) for p, r, _ in done) == sorted(plan_order(len(VALUES), REPETITIONS,
                                                                   SEED))
    assert {n for _, _, n in done} == {1}
    assert _db(store, "SELECT status FROM runs") == [("done",)]
    _no_sandboxes(home)
