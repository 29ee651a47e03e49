"""The README's steps for a production server, end to end, on a server whose configuration is
not the default: its load (a pool of sysbench connections opened before the capture) captured,
the spec carrying the server's configuration, and knoblab tune's recommendation over it, as a
change to that configuration. Whether the recommendation makes production faster is a claim
about speed: benchmarks/production_tune.py measures it, before against after."""

from __future__ import annotations

import json
import re
import subprocess
import time
import tomllib
from pathlib import Path

import pytest

from knoblab.server.sandbox import Sandbox, base_template
from tests.fakes import cli_command, cli_env

pytestmark = pytest.mark.server

POOL = 8 << 20  # production's buffer pool: a quarter of its data

TUNE = """[tune]
# the test's study: the buffer pool alone, against production's own configuration
trials = 2
budget = "300s"
rounds = 2
max_rounds = 2
validate = 1

[tune.knobs]
innodb_buffer_pool_size = { values = ["128M", "256M"] }
"""


def _knoblab(home: Path, folder: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(cli_command(folder / "s.sqlite", *args), env=cli_env(home),
                          cwd=folder, capture_output=True, text=True, timeout=600)


def test_production_is_captured_with_its_pool_and_configuration_and_tuned_from_there(
        binary, knoblab_home: Path, tmp_path: Path):
    bench = ["sysbench", "oltp_read_only", "--tables=1", "--table-size=100000",
             "--db-ps-mode=disable", "--mysql-user=root", "--mysql-db=sbtest",
             "--db-driver=mysql"]
    with Sandbox(binary, base_template(binary, knoblab_home) / "data",
                 {"innodb_buffer_pool_size": str(POOL)}, home=knoblab_home) as production:
        socket = f"--mysql-socket={production.socket}"
        with production.connect() as conn, conn.cursor() as cur:
            cur.execute("CREATE DATABASE sbtest")
        subprocess.run([*bench, socket, "prepare"], capture_output=True, check=True)
        spec = tmp_path / "production.toml"
        spec.write_text(f'name = "production"\n[server]\nkind = "external"\n'
                        f'socket = "{production.socket}"\nuser = "root"\n')
        # The application's pool: its connections open, and busy, before the capture starts.
        load = subprocess.Popen([*bench, socket, "--threads=2", "--time=600", "run"],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            time.sleep(1.5)
            captured = _knoblab(knoblab_home, tmp_path, "capture", str(spec), "--for", "3s",
                                "--out", str(tmp_path / "cap"), "--data", "all")
        finally:
            load.kill()
            load.wait()
    assert captured.returncode == 0, captured.stderr
    assert "ready: knoblab tune" in " ".join(captured.stderr.split())
    summary = json.loads((tmp_path / "cap" / "capture.json").read_text())
    # The pool's statements, through the general log: every connection, those open before.
    assert summary["log"]["source"] == "general" and summary["log"]["missed"] == 0
    assert summary["log"]["open_before_active"] >= 2 and summary["log"]["statements"] > 500
    text = (tmp_path / "cap" / "spec.toml").read_text()
    assert tomllib.loads(text)["server"]["config"]["innodb_buffer_pool_size"] == str(POOL)
    assert 'knobs = "auto"' in text

    assert tomllib.loads(text)["tune"]["fidelity"] == "auto"
    # The capture's [tune] section (up to its blank line) becomes the test's.
    ours = re.sub(r"\[tune\]\n(?:.+\n)*", TUNE, text, count=1)
    (tmp_path / "cap" / "spec.toml").write_text(ours)
    tuned = _knoblab(knoblab_home, tmp_path, "tune", str(tmp_path / "cap" / "spec.toml"),
                     "--out", str(tmp_path / "study"))
    assert tuned.returncode == 0, tuned.stderr
    study = json.loads((tmp_path / "study" / "tune.json").read_text())
    # Whether the larger pool is shown to help within the test's 300 s is a claim about speed
    # on a machine the other tests keep busy (benchmarks/production_tune.py measures it; a
    # validation here was once left undecided at -24% [-48%, +12%]). The story holds either
    # way: larger pools were measured against production's own, the best one validated
    # against it, and a recommendation, when there is one, raises production's pool.
    assert study["validations"], tuned.stdout
    validated = {v["trial"] for v in study["validations"]}
    raised_pools = {t["number"] for t in study["trials"]
                    if set(t["changes"]) == {"innodb_buffer_pool_size"}}
    assert validated <= raised_pools, study
    flat = " ".join(tuned.stdout.split())
    if study["recommended"] is None:
        assert "keep it" in flat, tuned.stdout
        return
    cnf = (tmp_path / "study" / "recommended.cnf").read_text()
    raised = r"^innodb_buffer_pool_size\s*=\s*(128M|256M|134217728|268435456)\s*$"
    assert re.search(raised, cnf, re.M), cnf
