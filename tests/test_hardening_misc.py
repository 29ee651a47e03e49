"""Machine shapes, stores, messages and figures: the least a sandbox can be given, what is held
against a small machine's memory, storage URLs, control groups left by a killed knoblab, the
`runs` row of a sweep, recommended.cnf's words, result.json's statement classes and the warning
for few rounds."""

from __future__ import annotations

import re
import tomllib
from collections.abc import Callable
from pathlib import Path

import pytest

from knoblab.errors import UserError
from knoblab.server.shape import Shape
from knoblab.spec import parse_spec
from tests.fakes import SERVER_WIDE

ROOT = Path(__file__).resolve().parent.parent
MINIMAL = {"dataset": {"rows": 1000}, "workload": {"sql": "SELECT COUNT(*) FROM dt2"},
           "sweep": {"read_buffer_size": ["64K", "128K"]}}


def _one_line(problem: dict, said: str) -> None:
    with pytest.raises(UserError) as caught:
        parse_spec({**MINIMAL, "machine": problem})
    assert said in str(caught.value) and "\n" not in str(caught.value)


def test_the_least_rate_is_the_one_the_message_names():
    # "1MB/s" is what the refusal told the user to give: it is taken, as written.
    assert Shape.from_spec({"disk_read": "1MB/s", "disk_write": "1MB/s"}, None).disk_read \
        == 1_000_000
    _one_line({"disk_read": "0.9MB/s"}, 'give at least "1MB/s"')
    _one_line({"disk_write": "500KB/s"}, 'give at least "1MB/s"')


def test_iops_a_server_cannot_start_on_are_refused_with_the_least_that_works():
    # A start makes about 300 I/Os: at iops = 1 every start waited out its timeout.
    _one_line({"iops": 1}, "give at least iops = 10")
    assert Shape.from_spec({"iops": 10}, None).iops == 10
    with pytest.raises(UserError, match="give at least iops = 10"):
        parse_spec({**MINIMAL, "sweep": {**MINIMAL["sweep"], "machine.iops": [5, 500]}})


def test_the_least_memory_is_said_as_what_a_server_starts_and_runs_in():
    _one_line({"memory": "100M"}, "below 160M, the least a MariaDB server starts and runs in")


def test_swept_numbers_of_the_machine_give_each_point_its_shape():
    # A point holds its swept values as text ("1"): read back as the numbers they were.
    spec = parse_spec({**MINIMAL, "sweep": {**MINIMAL["sweep"], "machine.cpus": [1, 2],
                                            "machine.iops": [100, 500]}})
    assert spec.shape({"machine.cpus": "2", "machine.iops": "100"}) == Shape(cpus=2, iops=100)
    spec = parse_spec({**MINIMAL, "sweep": {**MINIMAL["sweep"], "machine.cpu": [0.5, 1]}})
    assert spec.shape({"machine.cpu": "0.5"}) == Shape(cpu=0.5)


def _readme_machine_sweep() -> dict:
    """The read_buffer_size study with the machine shapes guide's own machine sweep, as
    written there."""
    readme = (ROOT / "docs" / "guides" / "machine-shapes.md").read_text()
    found = re.search(r'```toml\n(\[sweep\]\nread_buffer_size = .*?\n"machine\.memory" = .*?\n)'
                      r"```", readme)
    assert found, "the machine shapes guide's machine sweep"
    spec = tomllib.loads((ROOT / "examples/read-buffer-scan.toml").read_text())
    spec["sweep"] = tomllib.loads(found.group(1))["sweep"]
    return spec


@pytest.mark.server
def test_the_guides_machine_sweep_passes_the_checks(binary, knoblab_home: Path,
                                                    tmp_path: Path):
    # The server's default caches (about 400M, counted full) were held against the 256M
    # machine, so the guide's example was refused as written: in a sandbox the kernel holds
    # to its memory, only what the spec sets is held against it up front.
    from knoblab.runner import check_points
    from knoblab.server.sandbox import SandboxTarget
    from knoblab.store import Store

    spec = parse_spec(_readme_machine_sweep(), base_dir=ROOT / "examples")
    assert spec.sweep["machine.memory"] == ["256M", "4G"]
    target = SandboxTarget("", binary, knoblab_home, None)
    store = Store(f"sqlite:///{tmp_path / 's.sqlite'}")
    check_points(spec, {"": target}, store)
    # What the spec itself asks for is still held against the machine, before anything runs.
    spec = parse_spec({**_readme_machine_sweep(),
                       "server": {"config": {"innodb_buffer_pool_size": "512M"}}},
                      base_dir=ROOT / "examples")
    with pytest.raises(UserError) as caught:
        check_points(spec, {"": target}, store)
    said = str(caught.value)
    assert "over the budget of 256M ([machine] memory)" in said and "\n" not in said
    assert "give the machine more memory" in said


@pytest.mark.parametrize("repetitions, test, enough", [
    (2, "welch-log", 5), (1, "welch-log", 5), (2, "mann-whitney", 6)])
def test_too_few_rounds_are_one_sentence_and_its_fix(repetitions: int, test: str,
                                                     enough: int):
    from knoblab.runner import few_rounds

    spec = parse_spec({**MINIMAL, "workload": {**MINIMAL["workload"],
                                               "repetitions": repetitions},
                       "statistics": {"test": test}})
    (warning,) = few_rounds(spec)
    assert warning.startswith(f"repetitions = {repetitions}: too few rounds, ")
    assert warning.endswith(f'use repetitions = {enough} or more, or "auto" (rounds until '
                            'decided)')
    assert ". " not in warning and len(warning) < 180, warning


NESTED = '''
from pathlib import Path

import pymysql

from knoblab.runner import start_run
from knoblab.spec import parse_spec
from knoblab.store import Store
from tests.fakes import Quiet


def test_a_run_on_the_running_server_then_a_failure(tmp_path: Path) -> None:
    spec = parse_spec({
        "server": {"kind": "external", "host": "127.0.0.1", "port": 3306, "user": "root"},
        "dataset": {"rows": 200},
        "workload": {"sql": "SELECT COUNT(*) FROM dt2", "repetitions": 1},
        "sweep": {"read_buffer_size": ["64K", "128K"]}}, default_name="left-clean")
    (tmp_path / "home").mkdir()
    start_run(spec, Store(f"sqlite:///{tmp_path / 's.sqlite'}"), tmp_path / "home", Quiet())
    with pymysql.connect(host="127.0.0.1", port=3306, user="root") as conn, \\
            conn.cursor() as cur:
        assert cur.execute("SHOW DATABASES LIKE 'knoblab'") == 1
    raise AssertionError("a test that fails after its run")
'''


@pytest.mark.server
@SERVER_WIDE
def test_tests_on_the_running_server_leave_no_database_there(tmp_path: Path):
    # A run on 127.0.0.1:3306 given no [server] database builds its data in `knoblab` (the
    # suite once left it there): the session's end names it as left behind and drops it, also
    # after a failed test.
    import os
    import subprocess
    import sys

    import pymysql

    (tmp_path / "test_nested.py").write_text(NESTED)
    env = {k: v for k, v in os.environ.items() if k not in ("KNOBLAB_STORE", "KNOBLAB_HOME")}
    env["KNOBLAB_HOME"] = str(tmp_path / "home")
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    # its temp folder inside this test's: the nested run fails on purpose, and pytest keeps a
    # failed test's folder, which would outlive this suite in the system's temp directory
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "tests.conftest",
                           "-p", "no:cacheprovider", "--rootdir", str(tmp_path),
                           "--basetemp", str(tmp_path / "nested-temp"),
                           str(tmp_path / "test_nested.py")],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300,
                          check=False)
    assert "1 failed" in done.stdout and "a test that fails after its run" in done.stdout, \
        done.stdout[-3000:] + done.stderr[-3000:]
    assert "LEFT BEHIND by this test run: database knoblab on the MariaDB at 127.0.0.1:3306" \
        in done.stdout, done.stdout[-3000:]
    with pymysql.connect(host="127.0.0.1", port=3306, user="root") as conn, \
            conn.cursor() as cur:
        assert cur.execute("SHOW DATABASES LIKE 'knoblab'") == 0


def _runs_of_sweeps(tmp_path: Path, capsys, model: Callable[[dict[str, str]], float]
                    ) -> str:
    """`knoblab runs` of a store holding one sweep measured on the fake server."""
    from knoblab import cli
    from tests import fakes
    from tests.test_runs_studies import _listed, _run_spec

    fakes.SCRIPT.model = model
    url = f"sqlite:///{tmp_path / 'store.sqlite'}"
    assert cli.main(["--store", url, "run", str(_run_spec(tmp_path)),
                     "--out", str(tmp_path / "out")]) == 0
    capsys.readouterr()
    code, listed = _listed(capsys, "--store", url, "runs")
    assert code == 0
    return listed


@pytest.mark.usefixtures("fake_servers")
def test_runs_shows_a_sweeps_best_value_in_its_row(tmp_path: Path, capsys):
    listed = _runs_of_sweeps(tmp_path, capsys, lambda s: 1.0 if int(
        s.get("sort_buffer_size", 2 << 20)) < 16 << 20 else 0.8)
    # The default (2M) was not measured: no change is shown to help, and the row says what
    # the conclusion says (tests/test_figures_true.py has the sweep that measured it).
    assert "plain sweep" in listed and "keep the current value (32M not shown to help)" \
        in listed, listed


@pytest.mark.usefixtures("fake_servers")
def test_runs_shows_that_a_sweeps_values_do_not_differ(tmp_path: Path, capsys):
    listed = _runs_of_sweeps(tmp_path, capsys, lambda s: 1.0)
    assert "plain sweep" in listed and "no difference (within ±3%)" in listed, listed


@pytest.mark.server
def test_runs_removes_the_control_groups_of_a_killed_knoblab(tmp_path: Path):
    # After kill -9, `knoblab runs` listed the run as killed and left its control groups
    # for the next run to remove; it removes them itself, needing no writable home.
    import os
    import subprocess
    import sys

    from knoblab.server.cgroups import Hierarchy

    try:
        hierarchy = Hierarchy.find()
    except UserError as exc:
        pytest.skip(f"no control groups here: {exc}")
    home = tmp_path / "home"
    home.mkdir(mode=0o500)  # read and list only
    env = {k: v for k, v in os.environ.items() if k != "KNOBLAB_STORE"}
    env["KNOBLAB_HOME"] = str(home)
    # Any knoblab that starts removes such groups, one started by a test running beside this
    # one too: a group it took first is planted again (three times at most).
    said = []
    for _ in range(3):
        gone = subprocess.Popen(["true"])
        gone.wait()  # a knoblab that is no more: its pid names its groups
        left = hierarchy.parents["memory"] / f"knoblab-left-{gone.pid}"
        left.mkdir()
        try:
            done = subprocess.run([sys.executable, "-m", "knoblab.cli", "--store",
                                   f"sqlite:///{tmp_path / 's.sqlite'}", "runs"], env=env,
                                  capture_output=True, text=True, timeout=120, check=False)
            assert done.returncode == 0, done.stderr
            assert not left.exists()
            assert list(home.iterdir()) == []
            said.append(done.stderr)
            if "removed 1 control group left by a killed knoblab" in done.stderr:
                break
        finally:
            if left.exists():
                left.rmdir()
    assert "removed 1 control group left by a killed knoblab" in said[-1], said


def test_statement_classes_name_each_configuration_by_its_settings():
    # result.json named the compared configuration by its position ("point": 1) only.
    from types import SimpleNamespace

    from knoblab.classes import ClassComparison, compare_classes

    def measured(seconds: float) -> SimpleNamespace:
        return SimpleNamespace(details={"classes": {"a": {
            "n": 10, "seconds": seconds, "p95": 0.01, "errors": {}, "checksum": "x"}}})

    trials = {0: [measured(1.0), measured(1.02)], 1: [measured(2.0), measured(2.1)]}
    found = compare_classes(trials, 0, {"a": "select ?"}, settings={
        0: {"read_buffer_size": "128K"}, 1: {"read_buffer_size": "2M"}})
    assert found is not None
    stored = found.to_json()
    assert stored["reference"] == 0 and stored["reference_settings"] == {
        "read_buffer_size": "128K"}
    (change,) = stored["rows"][0]["changes"]
    assert change["point"] == 1 and change["settings"] == {"read_buffer_size": "2M"}
    assert ClassComparison.from_json(stored) == found
    # Results stored before the settings were kept still read.
    older = {**stored, "rows": [{**row, "changes": [
        {k: v for k, v in c.items() if k != "settings"} for c in row["changes"]]}
        for row in stored["rows"]]}
    del older["reference_settings"]
    assert ClassComparison.from_json(older).rows[0].changes[0].settings == {}


@pytest.mark.parametrize("url", ["postgresql://", "postgresql://nobody@127.0.0.1:1"])
def test_a_results_store_url_naming_no_database_is_refused(url: str):
    # Without a database, PostgreSQL takes the user's default one: knoblab's tables would go
    # into a database nobody named, as the study's did with [tune] storage.
    from knoblab.store import Store

    with pytest.raises(UserError) as caught:
        Store(url)
    said = str(caught.value)
    assert "names no database" in said and "postgresql://USER@HOST/DATABASE" in said
    assert "\n" not in said
