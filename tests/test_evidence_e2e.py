"""Evidence end to end: counters and OS figures per measurement, grids over settings and sizes,
settings that reach the measured session. Real sandboxes, the real runner and command."""

from __future__ import annotations

import json
import subprocess

import pytest

from knoblab.runner import start_run
from knoblab.spec import parse_spec
from knoblab.store import Store
from tests.fakes import Quiet, cli_command, cli_env

pytestmark = pytest.mark.server

GROUP_BY = """\
name = "groupby-tiny"

[dataset]
engine = "MyISAM"

[workload]
sql = "SELECT SUM(n) FROM (SELECT grp, COUNT(*) AS n FROM dt2 GROUP BY grp ORDER BY NULL) AS g"
repetitions = 2

[sweep]
tmp_table_size = ["16K", "64M"]
join_buffer_size = ["128K", "1M"]   # a second setting, which this query does not use
rows = [20_000, 40_000]

[tie]
max_heap_table_size = "tmp_table_size"
"""


@pytest.fixture(scope="module")
def groupby_run(knoblab_home, tmp_path_factory):
    folder = tmp_path_factory.mktemp("groupby")
    spec = folder / "groupby.toml"
    spec.write_text(GROUP_BY)
    out = subprocess.run(cli_command(folder / "s.sqlite", "run", str(spec), "--json",
                                     str(folder / "r.json"), "--out", str(folder / "out")),
                         env=cli_env(knoblab_home), cwd=folder, capture_output=True, text=True,
                         timeout=600)
    assert out.returncode == 0, out.stderr
    return folder, out, json.loads((folder / "r.json").read_text())


def test_grid_of_two_settings_and_two_sizes(groupby_run):
    folder, out, result = groupby_run
    assert result["slices"] == ["rows"]
    assert result["knobs"] == ["tmp_table_size", "join_buffer_size", "rows"]
    assert len(result["points"]) == 8 and all(p["n"] == 2 for p in result["points"])
    for rows in ("20000", "40000"):
        in_slice = [p for p in result["points"] if p["settings"]["rows"] == rows]
        assert len(in_slice) == 4
        assert sum(p["p_value"] is None for p in in_slice) == 1  # one leader per slice
        assert sum(p["verdict"] in ("best", "fastest measured") for p in in_slice) == int(
            any(p["verdict"] == "worse" for p in in_slice))  # crowned only when shown
        assert f"rows={rows}" in out.stdout  # a conclusion per size
    names = sorted(p.name for p in (folder / "out").glob("*.png"))
    assert names == ["chart-rows-20000.png", "chart-rows-40000.png", "scaling.png"]


def test_tied_setting_follows_its_leader(groupby_run):
    _, _, result = groupby_run
    assert result["tied"] == {"max_heap_table_size": "tmp_table_size"}
    for point in result["points"]:
        assert point["effective"]["max_heap_table_size"] == point["effective"]["tmp_table_size"]
        assert "max_heap_table_size" not in point["settings"]


def test_temporary_table_on_disk_is_counted_and_explained(groupby_run):
    folder, out, result = groupby_run
    store = Store(f"sqlite:///{folder / 's.sqlite'}")
    points = store.points(result["run_id"])
    for trial in store.trials(result["run_id"]):
        requested = points[trial.point_idx][0]
        disk_tables = trial.details["status"]["created_tmp_disk_tables"]
        if requested["tmp_table_size"] == "16K":
            assert disk_tables >= 1  # the GROUP BY spilled to disk
        else:
            assert disk_tables == 0  # 64M keeps it in memory
        # The server's CPU time is counted in clock ticks (10 ms): one short statement can
        # read 0, the run as a whole cannot.
        assert trial.details["os"]["server_cpu_seconds"] >= 0
        assert trial.details["os"]["seconds"] > 0
        # Levels are kept as they stood, not as deltas; counters and positions are not levels.
        levels = trial.details["levels"]
        assert levels["innodb_buffer_pool_pages_data"] > 0
        # A capacity restates the configuration: never kept as a level, never an explanation.
        assert "innodb_buffer_pool_pages_total" not in levels and "innodb_ibuf_size" not in levels
        assert "created_tmp_disk_tables" not in levels and "innodb_lsn_current" not in levels
    assert sum(t.details["os"]["server_cpu_seconds"]
               for t in store.trials(result["run_id"])) > 0
    per_second = store.os_seconds(result["run_id"])
    assert per_second and all(rows[0]["t"] > 0 for rows in per_second.values())
    for part in result["explained_by"]:
        named = [c["counter"] for c in part["counters"]]
        assert "created_tmp_disk_tables" in named, named
    assert "created_tmp_disk_tables" in out.stdout  # said in words, in the report


def test_dynamic_setting_reaches_the_measured_session(knoblab_home, tmp_path):
    # sql_buffer_result has no start-up option: knoblab sets it with SET GLOBAL after start,
    # and the measured session, a new connection, must run with it.
    spec = parse_spec({
        "dataset": {"rows": 1000},
        "workload": {"sql": "SELECT COUNT(*) FROM dt2", "repetitions": 1},
        "sweep": {"sql_buffer_result": ["OFF", "ON"]},
    }, default_name="session")
    store = Store(f"sqlite:///{tmp_path / 's.sqlite'}")
    listener = Quiet()
    run_id = start_run(spec, store, knoblab_home, listener)
    points = store.points(run_id)
    seen = {}
    for trial in store.trials(run_id):
        assert trial.status == "done", listener.lines
        requested = points[trial.point_idx][0]["sql_buffer_result"]
        seen[requested] = (trial.effective["sql_buffer_result"],
                           trial.details["session"]["sql_buffer_result"])
    assert seen == {"OFF": ("OFF", "0"), "ON": ("ON", "1")}
