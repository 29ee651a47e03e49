"""The steps for a production server (docs/guides/your-server.md), end to end, on a server
whose configuration is not the default: its load (a pool of sysbench connections opened before
the capture) captured,
the spec carrying the server's configuration, knoblab tune's recommendation over it, as a
change to that configuration, and knoblab verify of that recommendation on the server itself,
under its load again. How large the gain is on production is a claim about speed:
benchmarks/verify_production.py measures it."""

from __future__ import annotations

import json
import re
import subprocess
import time
import tomllib
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from knoblab.server.sandbox import Sandbox, base_template
from knoblab.units import parse_size
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


@pytest.mark.long
def test_production_is_captured_tuned_and_the_answer_verified_on_it(
        binary, knoblab_home: Path, tmp_path: Path):
    """capture → tune → verify: the guide's story, each step reading what the last wrote."""
    bench = ["sysbench", "oltp_read_only", "--tables=1", "--table-size=100000",
             "--db-ps-mode=disable", "--mysql-user=root", "--mysql-db=sbtest",
             "--db-driver=mysql"]
    with Sandbox(binary, base_template(binary, knoblab_home) / "data",
                 {"innodb_buffer_pool_size": str(POOL)}, home=knoblab_home) as production:
        socket = f"--mysql-socket={production.socket}"
        with production.connect() as conn, conn.cursor() as cur:
            cur.execute("CREATE DATABASE sbtest")
        subprocess.run([*bench, socket, "prepare"], capture_output=True, check=True)
        before = _globals(production)
        spec = tmp_path / "production.toml"
        spec.write_text(f'name = "production"\n[server]\nkind = "external"\n'
                        f'socket = "{production.socket}"\nuser = "root"\n')
        # The application's pool: its connections open, and busy, before the capture starts.
        with _load([*bench, socket, "--threads=2", "--time=600", "run"]):
            captured = _knoblab(knoblab_home, tmp_path, "capture", str(spec), "--for", "3s",
                                "--out", str(tmp_path / "cap"), "--data", "all")
        assert captured.returncode == 0, captured.stderr
        _captured_as_the_pool_ran(tmp_path / "cap")
        recommended = _tuned(knoblab_home, tmp_path)
        # production's load again, at the application's own pace, through the whole verify
        with _load([*bench, socket, "--threads=2", "--time=600", "--rate=150", "run"]):
            verified = _knoblab(knoblab_home, tmp_path, "verify", str(spec), "--from",
                                str(tmp_path / "study"), "--for", "50s", "--window", "6s",
                                "--settle", "3s", "--guard-latency", "8",
                                "--json", str(tmp_path / "verify.json"))
        after = _globals(production)
    assert after == before  # verify put every setting back
    if not recommended:
        # nothing was shown to help: verify says so in one line, and changes nothing
        assert verified.returncode == 2, verified.stderr
        assert "nothing to verify" in verified.stderr or "no recommended.cnf" in \
            verified.stderr, verified.stderr
        return
    assert verified.returncode == 0, verified.stderr
    found = json.loads((tmp_path / "verify.json").read_text())
    # the recommendation verified is the study's, and the claim set beside production's
    # answer is the study's too
    assert found["verified"] == {k: str(parse_size(v)) for k, v in recommended.items()}, found
    study = json.loads((tmp_path / "study" / "tune.json").read_text())["recommended"]
    assert found["claim"]["ratio"] == pytest.approx(1 + study["gain"])
    # A pool eight or more times as large, on data four times the pool: reads from disk go,
    # as the counters say. Whether the gain is decided at the first look (3 pairs, 50 s here)
    # beside the suite's other servers is a claim about speed (once, in 2 minutes: 3.18x,
    # [0.74x, 13.6x], not shown): the tests of verify decide it on a steadier load,
    # benchmarks/verify_production.py measures it. Here: never a loss, and the sandbox's
    # claim set beside whatever production showed.
    assert found["finding"] in ("helps", "unshown"), found["said"]
    assert found["guard_tripped"] is None, found["said"]
    assert found["against_claim"] in ("held", "smaller than claimed", "larger than claimed",
                                      "not shown"), found
    assert f"the sandbox claimed {found['claim']['ratio']:.2f}×" in found["said"]
    assert found["figures"]["pool_reads_per_statement"]["b"] < \
        found["figures"]["pool_reads_per_statement"]["a"] / 3, found["figures"]


@contextmanager
def _load(command: list[str]) -> Iterator[None]:
    load = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        time.sleep(1.5)  # its connections open
        yield
    finally:
        load.kill()
        load.wait()


def _globals(server: Sandbox) -> dict[str, str]:
    with server.connect() as conn, conn.cursor() as cur:
        cur.execute("SHOW GLOBAL VARIABLES")
        return {name: value for name, value in cur.fetchall()
                if name not in ("timestamp", "gtid_current_pos", "gtid_binlog_pos")}


def _captured_as_the_pool_ran(folder: Path) -> None:
    summary = json.loads((folder / "capture.json").read_text())
    # The pool's statements, through the general log: every connection, those open before.
    assert summary["log"]["source"] == "general" and summary["log"]["missed"] == 0
    assert summary["log"]["open_before_active"] >= 2 and summary["log"]["statements"] > 500
    text = (folder / "spec.toml").read_text()
    assert tomllib.loads(text)["server"]["config"]["innodb_buffer_pool_size"] == str(POOL)
    assert 'knobs = "auto"' in text
    assert tomllib.loads(text)["tune"]["fidelity"] == "auto"
    # The capture's [tune] section (up to its blank line) becomes the test's.
    (folder / "spec.toml").write_text(re.sub(r"\[tune\]\n(?:.+\n)*", TUNE, text, count=1))


def _tuned(home: Path, folder: Path) -> dict[str, str]:
    """knoblab tune of the capture's spec: what it recommends (nothing, or a larger pool)."""
    tuned = _knoblab(home, folder, "tune", str(folder / "cap" / "spec.toml"),
                     "--out", str(folder / "study"))
    assert tuned.returncode == 0, tuned.stderr
    study = json.loads((folder / "study" / "tune.json").read_text())
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
    if study["recommended"] is None:
        assert "keep it" in " ".join(tuned.stdout.split()), tuned.stdout
        return {}
    cnf = (folder / "study" / "recommended.cnf").read_text()
    raised = r"^innodb_buffer_pool_size\s*=\s*(128M|256M|134217728|268435456)\s*$"
    assert re.search(raised, cnf, re.M), cnf
    return dict(study["recommended"]["changes"])
