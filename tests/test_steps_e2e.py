"""A steps experiment end to end: settings applied one by one to a write load from a SQL
script, on two servers (one of them a second path to the same build) and one that is not a
server at all. Real sandboxes, the real command."""

from __future__ import annotations

import json
import math
import statistics

import pytest

from knoblab.store import Store
from tests.fakes import cli_env, knoblab_here, store_args

# its module's fixture (real runs, tens of seconds) made once: every test of it on one worker
pytestmark = [pytest.mark.server, pytest.mark.xdist_group("steps-e2e")]

STEPS = """\
name = "steps-tiny"

[server]
binary = {{ main = "{main}", twin = "{twin}", broken = "/bin/true" }}
allow_durability_tradeoff = true

[workload]
kind = "script"
setup = "CREATE TABLE t (id INT PRIMARY KEY, conn INT, pad VARCHAR(100)) ENGINE=InnoDB"
body = "INSERT INTO t VALUES ({{row}}, {{connection}}, REPEAT('x', 80))"
connections = 2
iterations = 30
repetitions = 2

[steps]
one_at_a_time = true

[[step]]
innodb_flush_log_at_trx_commit = 2

[[step]]
sort_buffer_size = "4M"

[[step]]
innodb_log_buffer_size = "4M"
"""


def _knoblab(folder, knoblab_home, *args):
    return knoblab_here(store_args(folder / "s.sqlite", *args), cli_env(knoblab_home),
                        folder)


@pytest.fixture(scope="module")
def steps_run(knoblab_home, binary, tmp_path_factory):
    folder = tmp_path_factory.mktemp("steps")
    twin = folder / "bin" / "mariadbd"
    twin.parent.mkdir()
    twin.symlink_to(binary.path)
    spec = folder / "steps.toml"
    spec.write_text(STEPS.format(main=binary.path, twin=twin))
    out = _knoblab(folder, knoblab_home, "run", str(spec), "--json", str(folder / "r.json"),
                   "--out", str(folder / "out"))
    assert out.returncode == 0, out.stderr
    return folder, out, json.loads((folder / "r.json").read_text())


def test_every_step_is_measured_on_every_server_that_starts(steps_run):
    folder, out, result = steps_run
    assert result["kind"] == "steps"
    assert result["slices"] == ["binary"]
    # 4 cumulative steps (0-3) and steps 2 and 3 alone, on two servers, twice each.
    assert len(result["points"]) == 12
    assert all(p["n"] == 2 and p["failed"] == 0 for p in result["points"])
    store = Store(f"sqlite:///{folder / 's.sqlite'}")
    trials = store.trials(result["run_id"])
    assert len(trials) == 24 and {t.status for t in trials} == {"done"}
    last = next(p for p in result["points"] if p["step"] == 3 and p["role"] == "cumulative")
    assert last["effective"]["innodb_flush_log_at_trx_commit"] == "2"
    assert last["effective"]["innodb_log_buffer_size"] == str(4 << 20)
    assert all(t.details["rows"] == 60 for t in trials)  # 30 iterations on each of 2


def test_the_table_compares_each_step_with_the_previous_and_the_defaults(steps_run):
    _, out, result = steps_run
    assert [part["slice"] for part in result["steps"]] == [{"binary": "main"},
                                                           {"binary": "twin"}]
    for part in result["steps"]:
        rows = part["rows"]
        assert [r["step"] for r in rows] == [0, 1, 2, 3]
        assert rows[0]["verdict"] == "base" and rows[0]["vs_previous"] is None
        for row in rows[1:]:
            assert row["verdict"] in ("gain", "loss", "no measurable effect")
            for change in (row["vs_previous"], row["vs_base"]):
                low, high = change["ci95"]
                assert low <= change["ratio"] <= high
                assert 0 <= change["p_value"] <= 1
        # Step 1 against the defaults is step 1 against the step before it.
        assert rows[1]["vs_previous"]["ratio"] == rows[1]["vs_base"]["ratio"]
        assert rows[1]["alone"] is None and rows[2]["alone"] and rows[3]["alone"]
        assert rows[1]["durability"] and not rows[2]["durability"]
        # the change the test compares: of geometric means for times (welch-log)
        last, base = (result["points"][rows[i]["point"]]["samples"] for i in (3, 0))
        assert result["statistics"]["test"] == "welch-log"
        assert part["total"]["ratio"] == pytest.approx(
            math.exp(statistics.fmean(map(math.log, last))
                     - statistics.fmean(map(math.log, base))))
    assert "setting added" in out.stdout
    assert "+ innodb_flush_log_at_trx_commit=2" in out.stdout
    assert "gives up durability" in out.stdout
    charts = sorted(p.name for p in (steps_run[0] / "out").glob("steps-waterfall*.png"))
    assert len(charts) == 2


def test_servers_are_described_compared_and_a_broken_one_left_out(steps_run):
    _, out, result = steps_run
    servers = {s["label"]: s for s in result["servers"]}
    assert set(servers) == {"main", "twin", "broken"}
    assert servers["main"]["version"] == servers["twin"]["version"]
    assert servers["main"]["compile"]["sha256"] == servers["twin"]["compile"]["sha256"]
    assert servers["main"]["compile"]["machine"]
    assert "does not look like a MySQL or MariaDB server" in servers["broken"]["error"]
    compared = result["servers_compared"]
    assert [c["at"] for c in compared] == ["defaults", "step 3: + innodb_log_buffer_size=4M"]
    for entry in compared:
        assert sorted(r["binary"] for r in entry["rows"]) == ["main", "twin"]
        assert sum(r["p_value"] is None for r in entry["rows"]) == 1  # one leader
        # no run recommends a server: the one shown faster is the fastest measured
        assert sum(r["verdict"] == "fastest measured" for r in entry["rows"]) == \
            int(entry["significant"])
    assert "broken" in out.stdout


def test_a_durability_step_without_consent_is_refused_before_any_server(knoblab_home,
                                                                         binary, tmp_path):
    spec = tmp_path / "unsafe.toml"
    text = STEPS.format(main=binary.path, twin="unused")
    text = "\n".join(f'binary = "{binary.path}"' if line.startswith("binary =") else line
                     for line in text.splitlines())
    spec.write_text(text.replace("allow_durability_tradeoff = true\n", ""))
    before = set((knoblab_home / "sandboxes").glob("*"))
    out = _knoblab(tmp_path, knoblab_home, "run", str(spec))
    assert out.returncode == 2, out.stderr
    assert "innodb_flush_log_at_trx_commit = 2 gives up durability" in out.stderr
    assert "allow_durability_tradeoff = true" in out.stderr
    assert "Traceback" not in out.stderr and len(out.stderr.strip().splitlines()) == 1
    assert set((knoblab_home / "sandboxes").glob("*")) == before
