"""Steps experiments and servers compared, checked against the real server's catalog: the
points a spec of [[step]] tables makes, steps that change nothing, settings a server lacks."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from knoblab import runner
from knoblab.catalog import Catalog
from knoblab.errors import UserError
from knoblab.runner import plan_points
from knoblab.server import Entry, SandboxKind, sandbox
from knoblab.spec import parse_spec
from knoblab.store import Store

SCRIPT = {"kind": "script", "setup": "CREATE TABLE t (id INT PRIMARY KEY)",
          "body": "INSERT INTO t VALUES ({row})", "iterations": 10}


def _spec(step_list, **top):
    return parse_spec({"workload": dict(SCRIPT), "step": step_list, **top})


def test_steps_are_cumulative_from_the_defaults(catalog):
    spec = _spec([{"innodb_flush_log_at_trx_commit": 2}, {"innodb_buffer_pool_size": "256M"},
                  {"innodb_log_buffer_size": "4M"}],
                 server={"allow_durability_tradeoff": True})
    assert spec.experiment == "steps" and spec.workload.kind == "script"
    base, points, warnings = spec.points(catalog)
    assert base == {} and warnings == []
    assert [p.step["step"] for p in points] == [0, 1, 2, 3]
    assert points[0].config == {} and points[0].step["label"] == "defaults"
    assert points[2].config == {"innodb_flush_log_at_trx_commit": "2",
                                "innodb_buffer_pool_size": str(256 << 20)}
    assert points[3].step["change"] == {"innodb_log_buffer_size": "4M"}
    assert points[3].step["label"] == "+ innodb_log_buffer_size=4M"
    assert len(points[3].config) == 3


def test_one_at_a_time_adds_each_later_change_alone(catalog):
    spec = _spec([{"sort_buffer_size": "4M"}, {"read_buffer_size": "1M"},
                  {"join_buffer_size": "1M"}], steps={"one_at_a_time": True})
    _, points, _ = spec.points(catalog)
    alone = [p for p in points if p.step["role"] == "alone"]
    # Step 1 alone is step 1 itself: measured once.
    assert [p.step["step"] for p in alone] == [2, 3]
    assert alone[0].config == {"read_buffer_size": str(1 << 20)}
    assert alone[1].config == {"join_buffer_size": str(1 << 20)}


def test_steps_on_each_machine_swept_are_a_slice_each(catalog, tmp_path):
    """[sweep] beside the steps takes what they are measured on: every step on every
    machine, the machine in each point's settings (its slice)."""
    spec = _spec([{"sort_buffer_size": "4M"}, {"read_buffer_size": "1M"}],
                 sweep={"machine.datadir": [str(tmp_path), "/tmp"]})
    _, points, _ = spec.points(catalog)
    assert [(p.requested["machine.datadir"], p.step["step"]) for p in points] == [
        (str(tmp_path), 0), (str(tmp_path), 1), (str(tmp_path), 2), ("/tmp", 0), ("/tmp", 1),
        ("/tmp", 2)]
    assert points[4].config == {"sort_buffer_size": str(4 << 20)}  # no machine in the config
    assert points[4].requested == {"machine.datadir": "/tmp", "sort_buffer_size": "4M"}
    assert spec.shape(points[4].requested).datadir == Path("/tmp")
    with pytest.raises(UserError, match=r"\[sweep\] sort_buffer_size in a steps study"):
        _spec([{"read_buffer_size": "1M"}], sweep={"sort_buffer_size": ["1M", "2M"]})


def test_base_settings_label_step_zero_as_base(catalog):
    spec = _spec([{"sort_buffer_size": "4M"}], server={"config": {"read_buffer_size": "1M"}})
    base, points, _ = spec.points(catalog)
    assert base == {"read_buffer_size": str(1 << 20)}
    assert points[0].step["label"] == "base"


def test_a_step_that_changes_nothing_keeps_its_place_and_is_not_run(catalog):
    default = catalog.knobs["innodb_log_buffer_size"].default
    spec = _spec([{"sort_buffer_size": "4M"}, {"innodb_log_buffer_size": default},
                  {"sort_buffer_size": "4M", "read_buffer_size": "1M"}])
    _, points, warnings = spec.points(catalog)
    assert points[2].step["skip"] == "changes nothing"
    assert points[2].config == points[1].config
    assert points[3].step["change"] == {"read_buffer_size": "1M"}  # the repeated part dropped
    assert any(w.startswith("step 2 changes nothing: innodb_log_buffer_size is already")
               for w in warnings), warnings
    assert any(w.startswith("step 3 partly changes nothing: sort_buffer_size is already 4M")
               for w in warnings), warnings


def test_tie_follows_its_leader_in_the_steps_that_set_it(catalog):
    spec = _spec([{"sort_buffer_size": "4M"}, {"tmp_table_size": "64M"}],
                 tie={"max_heap_table_size": "tmp_table_size"})
    _, points, _ = spec.points(catalog)
    assert "max_heap_table_size" not in points[1].config
    assert points[2].config["max_heap_table_size"] == str(64 << 20)


@pytest.mark.parametrize("data, fragment", [
    ({"step": [{}]}, "step 1 is empty"),
    ({"step": [{"sort_buffer_size": ["1M", "2M"]}]}, "single values"),
    ({"step": [{"threads": 4}]}, "server settings"),
    ({"step": "x"}, "[[step]]"),
    ({"steps": {"one_at_a_time": True}}, "no [[step]]"),
    ({"step": [{"sort_buffer_size": "1M"}], "sweep": {"read_buffer_size": ["1M", "2M"]}},
     "[sweep] read_buffer_size in a steps study"),
    ({"step": [{"sort_buffer_size": "1M"}], "sweep": ["machine.memory"]},
     "must be a table of what the steps are measured on"),
    ({"step": [{"sort_buffer_size": "1M"}], "steps": {"one_at_a_tim": True}},
     "did you mean 'one_at_a_time'"),
    ({"step": [{"sort_buffer_size": "1M"}], "server": {"binary": ["mariadbd"]}},
     "two or more"),
    ({"step": [{"sort_buffer_size": "1M"}], "server": {"binary": ["a", "b", "a"]}},
     "listed twice"),
    ({"step": [{"sort_buffer_size": "1M"}], "server": {"binary": {"gcc": 5, "icc": "x"}}},
     "[server] binary"),
])
def test_bad_steps_and_servers_are_refused_with_one_line(data, fragment):
    with pytest.raises(UserError) as caught:
        parse_spec({"workload": dict(SCRIPT), **data})
    assert fragment in str(caught.value)
    assert "\n" not in str(caught.value).split("e.g.")[0]


def test_script_files_are_read_relative_to_the_spec(tmp_path):
    (tmp_path / "setup.sql").write_text("CREATE TABLE t (id INT);\n")
    workload = {"kind": "script", "setup_file": "setup.sql", "body": "INSERT INTO t VALUES (1)"}
    spec = parse_spec({"workload": workload, "step": [{"sort_buffer_size": "1M"}]},
                      base_dir=tmp_path)
    assert spec.workload.setup == "CREATE TABLE t (id INT);\n"
    with pytest.raises(UserError, match="cannot read"):
        parse_spec({"workload": {**workload, "setup_file": "nope.sql"},
                    "step": [{"sort_buffer_size": "1M"}]}, base_dir=tmp_path)


def _without(catalog: Catalog, *names: str, version: str = "older-server") -> Catalog:
    return Catalog(version, {k: v for k, v in catalog.knobs.items() if k not in names})


def _two() -> SandboxKind:
    return SandboxKind(None, {"full": Entry("a", None), "old": Entry("b", None)})


def _catalogs(catalog, **catalogs: Catalog) -> dict[str, Catalog]:
    return {"full": catalog, **catalogs}


def test_a_step_a_server_lacks_is_kept_in_place_and_not_run_there(binary, catalog):
    spec = _spec([{"sort_buffer_size": "4M"}, {"innodb_log_buffer_size": "4M"},
                  {"read_buffer_size": "1M"}])
    spec = dataclasses.replace(spec, target=_two())
    plans = plan_points(spec, _catalogs(catalog,
                                        old=_without(catalog, "innodb_log_buffer_size")))
    assert plans["old"].lacking == ["innodb_log_buffer_size"]
    full, old = plans["full"].points, plans["old"].points
    assert len(full) == len(old) == 4  # same steps on every server
    assert old[2].step["skip"] == "not on this server: innodb_log_buffer_size"
    assert "innodb_log_buffer_size" not in old[3].config
    assert full[3].config["innodb_log_buffer_size"] == str(4 << 20)


def test_a_swept_setting_a_server_lacks_leaves_its_points_unrun(binary, catalog):
    spec = parse_spec({"workload": dict(SCRIPT),
                       "sweep": {"sort_buffer_size": ["1M", "4M"]},
                       "server": {"binary": {"full": "a", "old": "b"},
                                  "config": {"read_buffer_size": "1M"}}})
    plans = plan_points(spec, _catalogs(catalog, old=_without(catalog, "sort_buffer_size")))
    assert [p.config for p in plans["full"].points] == [{"sort_buffer_size": str(1 << 20)},
                                                        {"sort_buffer_size": str(4 << 20)}]
    old = plans["old"].points
    assert [p.step["skip"] for p in old] == ["not on this server: sort_buffer_size"] * 2
    assert plans["old"].base == {"read_buffer_size": str(1 << 20)}


def test_a_setting_no_server_has_is_an_error_with_suggestions(binary, catalog):
    spec = _spec([{"sort_bufer_size": "4M"}])
    spec = dataclasses.replace(spec, target=_two())
    with pytest.raises(UserError, match="did you mean sort_buffer_size"):
        plan_points(spec, _catalogs(catalog, old=_without(catalog)))


class Quiet:
    def message(self, text: str) -> None: ...
    def dataset_progress(self, done: int, total: int) -> None: ...
    def decision(self, undecided: list[str], most_left: int, budget_left: float | None
                 ) -> None: ...


@pytest.mark.server
def test_prepare_runs_on_each_server_only_what_it_has(binary, knoblab_home, tmp_path,
                                                      monkeypatch):
    # An older server is stood in for by the same build whose catalog lacks one setting.
    twin = tmp_path / "bin" / "mariadbd"
    twin.parent.mkdir()
    twin.symlink_to(binary.path)
    real = sandbox.catalog_for

    def catalog_for(server, home):
        found = real(server, home)
        return _without(found, "innodb_log_buffer_size") if server.path == twin else found

    monkeypatch.setattr(sandbox, "catalog_for", catalog_for)
    spec = _spec([{"sort_buffer_size": "4M"}, {"innodb_log_buffer_size": "4M"}],
                 server={"binary": {"new": str(binary.path), "old": str(twin)}})
    store = Store(f"sqlite:///{tmp_path / 's.sqlite'}")
    prepared = runner.prepare(spec, knoblab_home, Quiet(), store)
    labels = [(r.get("binary"), s["step"]) for (r, _), s in zip(prepared.points, prepared.steps,
                                                                 strict=True)]
    assert labels == [("new", 0), ("new", 1), ("new", 2), ("old", 0), ("old", 1), ("old", 2)]
    assert prepared.unavailable == {5: "not on this server: innodb_log_buffer_size"}
    servers = {s["label"]: s for s in prepared.describe_servers()}
    assert servers["old"]["missing"] == ["innodb_log_buffer_size"]
    assert servers["new"]["missing"] == [] and servers["new"]["error"] is None
    assert prepared.target({"binary": "old"}).templates  # the script's data, built for it too
