"""The sysbench path end to end: the real `knoblab` command, real sysbench, real sandboxes.

Runs, and sysbench missing from PATH, start the command as a process of its own; refusals of
a spec call it in this process (tests.test_bad_input.knoblab_in_process)."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import time

import pytest

from tests.fakes import cli_command, cli_env, servers_under
from tests.test_bad_input import knoblab_in_process

pytestmark = pytest.mark.server

SPEC = """\
name = "oltp-tiny"

[workload]
kind = "sysbench"
test = "oltp_read_write"
threads = 2
tables = 1
table_size = 5000
rand_type = "pareto"
duration = {duration}
warmup = 1
repetitions = {repetitions}

[sweep]
innodb_buffer_pool_size = ["16M", "64M"]
"""


@pytest.mark.long
def test_sweep_stores_every_second_and_judges_by_server_starts(knoblab_home, tmp_path):
    spec = tmp_path / "oltp.toml"
    spec.write_text(SPEC.format(duration=4, repetitions=2))
    out = subprocess.run(cli_command(tmp_path / "s.sqlite", "run", str(spec), "--json",
                                     str(tmp_path / "r.json"), "--out", str(tmp_path / "out")),
                         env=cli_env(knoblab_home), cwd=tmp_path, capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr
    assert "tps" in out.stderr  # the per-trial lines speak in throughput
    result = json.loads((tmp_path / "r.json").read_text())
    assert result["objective"] == {"metric": "tps", "direction": "maximize"}
    assert result["workload"]["kind"] == "sysbench"
    assert sum(p["p_value"] is None for p in result["points"]) == 1  # one leader
    assert sum(p["verdict"] in ("best", "highest tps measured")
               for p in result["points"]) == int(result["conclusion"]["significant"])
    with sqlite3.connect(tmp_path / "s.sqlite") as db:
        stored = dict(db.execute("SELECT trial_id, COUNT(*) FROM seconds GROUP BY trial_id"))
        os_stored = dict(db.execute(
            "SELECT trial_id, COUNT(*) FROM os_seconds GROUP BY trial_id"))
        busy = db.execute("SELECT MAX(server_cpu_share) FROM os_seconds").fetchone()[0]
    assert set(os_stored) == set(stored) and all(n >= 3 for n in os_stored.values())
    assert busy > 0  # the vmstat of the run: the server was seen working
    for point in result["points"]:
        assert point["n"] == 2 and point["compared"] == "server starts"
        assert len(point["samples"]) == 2  # one steady mean per start
        assert point["mean"] > 0 and point["ci95"][0] <= point["mean"] <= point["ci95"][1]
        assert point["latency_p99_ms"] > 0
        for run in point["series"]:
            assert 3 <= len(run["t"]) <= 5 and run["steady"][0] == 1  # warmup = 1 s dropped
    assert len(stored) == 4 and all(3 <= n <= 5 for n in stored.values())
    names = sorted(p.name for p in (tmp_path / "out").glob("*.png"))
    assert names == ["os-over-time.png", "tps-over-time.png", "tps-overlay.png", "tps-steady.png"]
    assert "mean" in out.stdout and "CV" in out.stdout


@pytest.mark.long
def test_server_killed_mid_run_keeps_the_partial_series_and_goes_on(knoblab_home, tmp_path):
    spec = tmp_path / "oltp.toml"
    spec.write_text(SPEC.format(duration=8, repetitions=1))
    store = tmp_path / "s.sqlite"
    process = subprocess.Popen(cli_command(store, "run", str(spec), "--json",
                                           str(tmp_path / "r.json")),
                               env=cli_env(knoblab_home), cwd=tmp_path, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:  # wait for the first trial's third second
            try:
                with sqlite3.connect(store) as db:
                    seen = db.execute("SELECT COUNT(*) FROM seconds").fetchone()[0]
            except sqlite3.OperationalError:  # the store is being created
                seen = 0
            if seen >= 3:
                break
            time.sleep(0.2)
        else:
            pytest.fail("no per-second data arrived")
        victims = servers_under(knoblab_home)
        assert len(victims) == 1
        os.kill(victims[0], signal.SIGKILL)
        stdout, stderr = process.communicate(timeout=120)
    finally:
        process.kill()
    assert process.returncode == 0, stderr
    assert "Traceback" not in stderr and "sysbench failed after" in stderr
    result = json.loads((tmp_path / "r.json").read_text())
    failed = [p for p in result["points"] if p["failed"]]
    assert len(failed) == 1 and failed[0]["n"] == 0
    partial = failed[0]["series"][0]
    assert partial["status"] == "failed" and len(partial["t"]) >= 3  # kept, and marked
    assert any(p["n"] == 1 for p in result["points"])  # the other value still ran
    assert servers_under(knoblab_home) == []


@pytest.mark.parametrize(("line", "replacement", "expected"), [
    ('test = "oltp_read_write"', 'test = "oltp_nosuch"', "unknown sysbench test 'oltp_nosuch'"),
    ('rand_type = "pareto"', 'rand_type = "zipf"', "zipf"),
    ("warmup = 1", "warmup = 1\noptions = { range_sise = 10 }", "range_size"),
    ("warmup = 1", 'warmup = 1\noptions = { "mysql-socket" = "/tmp/x" }', "mysql-socket"),
])
def test_bad_sysbench_input_is_one_line(knoblab_home, tmp_path, line, replacement, expected,
                                       monkeypatch, capfd):
    # Checks of the spec (and of sysbench's own options): the command in this process.
    spec = tmp_path / "bad.toml"
    spec.write_text(SPEC.format(duration=4, repetitions=1).replace(line, replacement))
    out = knoblab_in_process(["run", str(spec)], {"KNOBLAB_HOME": str(knoblab_home)},
                             tmp_path, monkeypatch, capfd)
    assert out.returncode == 2
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and expected in lines[0], out.stderr
    assert "Traceback" not in out.stderr + out.stdout


def test_missing_sysbench_is_one_line(knoblab_home, tmp_path):
    spec = tmp_path / "oltp.toml"
    spec.write_text(SPEC.format(duration=4, repetitions=1))
    empty = tmp_path / "bin"
    empty.mkdir()
    out = subprocess.run(cli_command(tmp_path / "s.sqlite", "run", str(spec)),
                         env=cli_env(knoblab_home, PATH=str(empty)), cwd=tmp_path,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 2
    assert out.stderr.count("\n") == 1 and "apt-get install sysbench" in out.stderr


def test_removed_knob_names_server_and_version(knoblab_home, tmp_path, monkeypatch, capfd):
    spec = tmp_path / "oltp.toml"
    spec.write_text(SPEC.format(duration=4, repetitions=1).replace(
        'innodb_buffer_pool_size = ["16M", "64M"]', "innodb_buffer_pool_instances = [1, 8]"))
    out = knoblab_in_process(["run", str(spec)], {"KNOBLAB_HOME": str(knoblab_home)},
                             tmp_path, monkeypatch, capfd)
    assert out.returncode == 2
    assert "10.11" in out.stderr and "MariaDB has one buffer pool" in out.stderr
    assert "innodb_buffer_pool_size" in out.stderr
