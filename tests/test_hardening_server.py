"""What knoblab sends to a server and how it starts one: server errors while configuring are a
failed measurement (or one line for the shared base), numbers go as numbers, no setting writes
files outside the sandbox, a binary that hangs or floods is named, and a measurement whose
settings are not its point's is not counted. Real servers."""

from __future__ import annotations

from pathlib import Path

import pymysql
import pytest

from knoblab import safety
from knoblab.errors import UserError
from knoblab.runner import start_run
from knoblab.search.space import parse_space
from knoblab.server import binary as binary_module
from knoblab.server.binary import find_binary
from knoblab.server.guard import watching
from knoblab.server.sandbox import Sandbox, base_template
from knoblab.server.target import Tampered
from knoblab.spec import parse_spec
from knoblab.store import Store
from tests.fakes import Quiet

pytestmark = pytest.mark.server


QUERY = "SELECT COUNT(*) FROM dt2 WHERE slack LIKE 'a%'"


def _spec(config: dict | None = None, sweep: dict | None = None, **workload: object):
    raw: dict = {"dataset": {"rows": 1000},
                 "workload": {"sql": QUERY, "repetitions": 1, **workload},
                 "sweep": sweep or {"read_buffer_size": ["64K", "128K"]}}
    if config:
        raw["server"] = {"config": config}
    return parse_spec(raw, default_name="server-hardening")


def _run(spec, home: Path, tmp_path: Path) -> tuple[Store, str]:
    store = Store(f"sqlite:///{tmp_path / 's.sqlite'}")
    return store, start_run(spec, store, home, Quiet())


# --- F3: server errors while configuring or reading back -------------------------------------

def test_a_statement_time_limit_binds_the_workload_not_knoblab(knoblab_home, tmp_path):
    # Reading the settings back ran under the workload's limit and crashed the run.
    store, run_id = _run(_spec({"max_statement_time": 0.0001}), knoblab_home, tmp_path)
    trials = store.trials(run_id)
    assert len(trials) == 2
    for trial in trials:
        assert trial.status == "done" or "max_statement_time" in (trial.error or ""), \
            trial.error
    assert store.run(run_id)["status"] == "done"


def test_a_base_setting_the_server_refuses_is_one_line_naming_it(knoblab_home, tmp_path):
    with pytest.raises(UserError, match=r"lc_messages = xx_YY.*Unknown locale") as refused:
        _run(_spec({"lc_messages": "xx_YY"}), knoblab_home, tmp_path)
    assert "\n" not in str(refused.value)


def test_a_point_the_server_refuses_fails_and_the_others_are_measured(knoblab_home, tmp_path):
    store, run_id = _run(_spec(sweep={"lc_messages": ["en_US", "xx_YY"]}), knoblab_home,
                         tmp_path)
    trials = store.trials(run_id)
    assert sorted(t.status for t in trials) == ["done", "failed"], [t.error for t in trials]
    failed = next(t for t in trials if t.status == "failed")
    assert "lc_messages" in (failed.error or "") and "Unknown locale" in (failed.error or "")


# --- F4: settings of type DOUBLE -------------------------------------------------------------

@pytest.mark.parametrize("sweep", [{"long_query_time": [1, 10]},
                                   {"max_statement_time": [0, 2.5]}])
def test_fractional_settings_are_sent_as_numbers(sweep, knoblab_home, tmp_path):
    store, run_id = _run(_spec(sweep=sweep), knoblab_home, tmp_path)
    trials = store.trials(run_id)
    assert trials and all(t.status == "done" for t in trials), [t.error for t in trials]
    name = next(iter(sweep))
    applied = sorted(float(t.effective[name]) for t in trials)
    assert applied == sorted(float(v) for v in sweep[name])


def test_fractional_settings_are_searched_over_the_values_listed(catalog):
    # A range of a fractional setting was refused with "list the values to try ... e.g.
    # ['ON', 'OFF']", wrong for a number.
    for entry in ({"low": 1, "high": 10, "scale": "linear"}, [1, 10]):
        with pytest.raises(UserError, match=r"long_query_time takes fractional values.*"
                                            r"\{ values = \[1, 10\] \}") as said:
            parse_space({"long_query_time": entry}, catalog)
        assert "ON" not in str(said.value)
    space = parse_space({"long_query_time": {"values": [1, 2.5, 10]}}, catalog)
    assert space.dimensions[0].choices == ("1.0", "2.5", "10.0")
    with pytest.raises(UserError, match="out of range"):
        parse_space({"long_query_time": {"values": [1, 1e99]}}, catalog)


# --- F5: settings whose value is a path ------------------------------------------------------

@pytest.mark.parametrize(("config", "sweep"), [
    ({"general_log": "ON", "general_log_file": "{out}/general.log"}, None),
    ({"slow_query_log": "ON", "slow_query_log_file": "{out}/slow.log"}, None),
    (None, {"general_log_file": ["a.log", "{out}/b.log"]}),
    ({"innodb_data_home_dir": "{out}"}, None),
    ({"aria_log_dir_path": "{out}"}, None),
    ({"general_log_file": "../../escape.log"}, None),
])
def test_settings_that_name_files_outside_the_sandbox_are_refused(config, sweep, knoblab_home,
                                                                  tmp_path):
    out = tmp_path / "outside"
    out.mkdir()

    def placed(table):
        if table is None:
            return None
        return {k: ([x.replace("{out}", str(out)) for x in v] if isinstance(v, list)
                    else v.replace("{out}", str(out)) if isinstance(v, str) else v)
                for k, v in table.items()}

    spec = _spec(placed(config), placed(sweep))
    with pytest.raises(UserError, match="a path") as refused:
        _run(spec, knoblab_home, tmp_path)
    named = next(iter(sweep or config)) if sweep else \
        next(k for k in config if safety.path_setting(k))
    assert named in str(refused.value)
    assert list(out.iterdir()) == []
    assert not Store(f"sqlite:///{tmp_path / 's.sqlite'}").list_runs()


def test_path_settings_are_known_by_name_and_type(catalog):
    for name in ("general_log_file", "slow_query_log_file", "log_bin_basename", "log_bin_index",
                 "relay_log", "init_file", "innodb_data_home_dir", "innodb_undo_directory",
                 "aria_log_dir_path", "innodb_data_file_path", "ssl_key", "log_tc",
                 "character_sets_dir", "innodb_buffer_pool_filename"):
        assert safety.path_setting(name, catalog), name
    for name in ("sort_buffer_size", "general_log", "slow_query_log", "log_slow_filter",
                 "lc_messages", "log_bin", "aria_sync_log_dir", "innodb_log_file_size"):
        assert not safety.path_setting(name, catalog), name
    # Every text setting the catalog lists with a path-like name is covered.
    for name, knob in catalog.knobs.items():
        if knob.type == "VARCHAR" and name.endswith(("_file", "_dir", "_path", "_directory")):
            assert safety.path_setting(name, catalog), name


def test_a_log_left_to_its_default_file_is_measured(knoblab_home, tmp_path):
    store, run_id = _run(_spec({"general_log": "ON", "slow_query_log": "ON"}), knoblab_home,
                         tmp_path)
    assert all(t.status == "done" for t in store.trials(run_id))


# --- F6: a server binary that hangs, floods, or is a folder ----------------------------------

def _script(tmp_path: Path, name: str, body: str) -> Path:
    path = tmp_path / name
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(0o755)
    return path


def test_a_binary_that_hangs_on_version_is_named(tmp_path, monkeypatch):
    monkeypatch.setattr(binary_module, "VERSION_TIMEOUT", 1.0)  # the wait is not under test
    hang = _script(tmp_path, "hang.sh", "sleep 1000")
    with pytest.raises(UserError, match="did not answer --version") as said:
        find_binary(str(hang))
    assert str(hang) in str(said.value)


def test_a_binary_that_floods_its_output_is_named(tmp_path):
    flood = _script(tmp_path, "flood.sh", "yes")
    with pytest.raises(UserError, match="printed more than") as said:
        find_binary(str(flood))
    assert str(flood) in str(said.value)


def test_a_folder_as_binary_says_it_is_a_folder(tmp_path):
    with pytest.raises(UserError, match="is a folder") as said:
        find_binary(str(tmp_path))
    assert "not found" not in str(said.value)


# --- F8: settings changed on the server before the measurement -------------------------------

def test_the_event_scheduler_is_refused_in_a_sandbox(knoblab_home, tmp_path):
    spec = parse_spec({"workload": {
        "kind": "script",
        "setup": "CREATE TABLE ev (id INT); CREATE EVENT e ON SCHEDULE EVERY 1 SECOND DO "
                 "SET GLOBAL sort_buffer_size = 4194304",
        "body": "DO SLEEP(0.1)", "connections": 1, "iterations": 1, "repetitions": 1},
        "server": {"config": {"event_scheduler": "ON"}},
        "sweep": {"sort_buffer_size": ["256K", "1M"]}}, default_name="events")
    with pytest.raises(UserError, match="event_scheduler"):
        _run(spec, knoblab_home, tmp_path)


def test_a_setting_changed_before_the_measurement_fails_it(binary, knoblab_home):
    with Sandbox(binary, base_template(binary, knoblab_home) / "data", {},
                 home=knoblab_home) as server:
        conn = server.connect()
        try:
            conn.cursor().execute("SET GLOBAL sort_buffer_size = 4194304")
        finally:
            conn.close()
        ran = []
        with pytest.raises(Tampered, match=r"sort_buffer_size.*262144.*4194304"), \
                watching(server, expected={"sort_buffer_size": "262144"}):
            ran.append(True)
        assert not ran
        # Changed during the measurement: compared with the point's value, and put back to it.
        with pytest.raises(Tampered, match="put sort_buffer_size back"), \
                watching(server, expected={"sort_buffer_size": "4194304"}):
            conn = server.connect()
            try:
                conn.cursor().execute("SET GLOBAL sort_buffer_size = 1048576")
            finally:
                conn.close()
        assert server.global_values(["sort_buffer_size"]) == {"sort_buffer_size": "4194304"}


def test_knoblab_reads_back_whatever_the_session_limits(binary, knoblab_home):
    from knoblab.server.settings import read_globals

    with Sandbox(binary, base_template(binary, knoblab_home) / "data",
                 {"max_statement_time": "0.000001"}, home=knoblab_home) as server:
        assert read_globals(server.connect, ["max_statement_time"]) == \
            {"max_statement_time": "0.000001"}
        with pytest.raises(pymysql.MySQLError):
            conn = server.connect()
            try:
                conn.cursor().execute("SELECT SLEEP(0.01) FROM information_schema.COLUMNS")
            finally:
                conn.close()

