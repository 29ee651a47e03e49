"""Messages that name the true cause and the real next command: a server that stopped during
the data's setup, a template deleted while it was built or during a run, a trial run of a
study given to resume. Real sandboxes."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from knoblab.errors import UserError
from knoblab.runner import resume_run, start_run
from knoblab.server.sandbox import derived_template
from knoblab.spec import parse_spec
from knoblab.store import Store
from tests.fakes import Quiet

pytestmark = pytest.mark.server


def _store(tmp_path: Path) -> Store:
    return Store(f"sqlite:///{tmp_path / 's.sqlite'}")


def test_a_setup_that_shuts_the_server_down_is_named(knoblab_home, tmp_path):
    # Before: "building the data … failed: Can't connect to MySQL server on 'localhost'".
    spec = parse_spec({"workload": {
        "kind": "script", "setup": "CREATE TABLE t (i INT); EXECUTE IMMEDIATE 'SHUTDOWN'",
        "body": "SELECT COUNT(*) FROM t", "iterations": 1, "repetitions": 1},
        "sweep": {"sort_buffer_size": ["1M", "2M"]}}, default_name="shutdown")
    with pytest.raises(UserError) as raised:
        start_run(spec, _store(tmp_path), knoblab_home, Quiet())
    message = str(raised.value)
    assert "the server stopped during the workload's setup" in message, message
    assert "shut down" in message and "initiated by" in message, message  # its log says who
    assert not list(knoblab_home.glob("templates/*/script-*.building-*"))


def test_a_template_deleted_while_it_is_built_is_named(binary, knoblab_home):
    # Before: FileNotFoundError, or "mariadbd exited during start-up … InnoDB: …".
    def deleting(server) -> None:
        for building in knoblab_home.glob("templates/*/vanishing.building-*"):
            shutil.rmtree(building)

    with pytest.raises(UserError, match=r"was deleted while the data vanishing was built"):
        derived_template(binary, "vanishing", deleting, knoblab_home)


def test_a_template_deleted_during_the_run_names_the_run_to_resume(knoblab_home, tmp_path):
    spec = parse_spec({"dataset": {"rows": 500},
                       "workload": {"sql": "SELECT COUNT(*) FROM dt2", "repetitions": 3,
                                    "design": "restarts"},
                       "sweep": {"read_buffer_size": ["64K", "128K"]}}, default_name="gone")
    store = _store(tmp_path)

    class Deleting(Quiet):
        def trial(self, label, repetition, status, value, error) -> None:
            for ready in knoblab_home.glob("templates/*/scan-table-*/.ready"):
                shutil.rmtree(ready.parent)

    with pytest.raises(UserError) as raised:
        start_run(spec, store, knoblab_home, Deleting())
    run_id = store.list_runs()[0]["id"]
    assert f"knoblab resume {run_id}," in str(raised.value), str(raised.value)


TUNE_SPEC = """\
name = "studied"
[dataset]
rows = 500
[workload]
sql = "SELECT COUNT(*) FROM dt2"
[tune]
trials = 2
[tune.knobs]
read_buffer_size = ["64K", "128K"]
"""


def _trial_run(store: Store, spec_dir: Path | None) -> str:
    """A stored run as knoblab tune leaves a trial: the study's spec, the study named."""
    from knoblab.store import RunInfo
    info = RunInfo(study="studied", spec_dir=str(spec_dir) if spec_dir else None)
    return store.create_run(name="studied: trial 3", experiment="steps", spec_source=TUNE_SPEC,
                            server_binary="mariadbd", server_version="10.11",
                            info=info, point_list=[({}, {})])


def test_resuming_a_trial_names_the_spec_file_that_made_it(knoblab_home, tmp_path):
    folder = tmp_path / "specs"
    folder.mkdir()
    (folder / "other.toml").write_text("name = \"other\"\n")
    (folder / "study.toml").write_text(TUNE_SPEC)
    store = _store(tmp_path)
    run_id = _trial_run(store, folder)
    store.set_status(run_id, "interrupted")
    with pytest.raises(UserError) as raised:
        resume_run(run_id, store, knoblab_home, Quiet())
    message = str(raised.value)
    assert f"knoblab tune {folder / 'study.toml'}" in message, message
    assert "SPEC" not in message


def test_resuming_a_trial_without_its_spec_names_the_study(knoblab_home, tmp_path):
    store = _store(tmp_path)
    run_id = _trial_run(store, tmp_path / "nowhere")
    store.set_status(run_id, "interrupted")
    with pytest.raises(UserError) as raised:
        resume_run(run_id, store, knoblab_home, Quiet())
    message = str(raised.value)
    assert "study studied" in message and "the spec that made it" in message, message
    assert "SPEC" not in message


def test_running_a_search_spec_names_the_tune_command_with_its_file(knoblab_home, tmp_path):
    from knoblab.spec import load_spec
    path = tmp_path / "my study.toml"
    path.write_text(TUNE_SPEC)
    with pytest.raises(UserError) as raised:
        start_run(load_spec(path), _store(tmp_path), knoblab_home, Quiet())
    message = str(raised.value)
    assert f"knoblab tune '{path}'" in message, message  # quoted: it holds a blank
    assert "SPEC" not in message


def test_a_stopped_study_names_its_spec_file_to_go_on_with(tmp_path):
    from knoblab.studies import stored_result
    folder = tmp_path / "specs"
    folder.mkdir()
    (folder / "study.toml").write_text(TUNE_SPEC)
    store = _store(tmp_path)
    store.save_study("studied", status="interrupted", spec_source=TUNE_SPEC, info={})
    _trial_run(store, folder)
    with pytest.raises(UserError) as raised:
        stored_result(store, "studied")
    message = str(raised.value)
    assert f"go on with knoblab tune {folder / 'study.toml'}" in message, message
    assert "SPEC" not in message


def test_templates_deleted_while_the_empty_datadir_is_made_are_named(binary, tmp_path):
    # The server's scripts finish, then the folder is gone (a clean-up of KNOBLAB_HOME at that
    # moment). Before: FileNotFoundError, or the server's "exited during start-up" message.
    import dataclasses

    from knoblab.server.binary import ServerBinary
    from knoblab.server.sandbox import base_template

    class Deleting(ServerBinary):
        def install_db_command(self, datadir: Path, tmpdir: Path, basedir: Path) -> list[str]:
            made = super().install_db_command(datadir, tmpdir, basedir)
            return ["sh", "-c", '"$@" && rm -rf "$0"', str(datadir.parent), *made]

    deleting = Deleting(**{f.name: getattr(binary, f.name) for f in dataclasses.fields(binary)})
    home = tmp_path / "home"
    with pytest.raises(UserError, match=r"was deleted while an empty data directory was built"):
        base_template(deleting, home)
    assert not list(home.glob("templates/*/base*"))
