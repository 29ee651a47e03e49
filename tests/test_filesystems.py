"""File systems under test: scripts/filesystems makes loop-mounted ones (ext4 with each
journalling mode, without a journal, xfs) and removes them; a study sweeping
"machine.datadir" over two judges each as a slice of its own, and every measurement records
the file system its data lived on. Real mounts (root), real sandboxes, the real command."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from knoblab.machine import filesystem, filesystem_text
from knoblab.store import Store
from tests.fakes import cli_command, cli_env

# its module's fixture (real runs, tens of seconds) made once: every test of it on one worker
pytestmark = [pytest.mark.server, pytest.mark.xdist_group("filesystems")]

ROOT = Path(__file__).resolve().parent.parent
TOOL = ROOT / "scripts" / "filesystems"

STUDY = """\
name = "filesystems"

[workload]
kind = "script"
setup = "CREATE TABLE t (id INT PRIMARY KEY, pad VARCHAR(100)) ENGINE=InnoDB"
body = "INSERT INTO t VALUES ({{row}}, REPEAT('x', 80))"
connections = 1
iterations = 200
repetitions = 2

[sweep]
innodb_flush_log_at_trx_commit = ["1", "2"]
"machine.datadir" = ["{ordered}", "{journal}"]

[server]
allow_durability_tradeoff = true
"""


@pytest.fixture(scope="module")
def mounted(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    if os.geteuid() != 0:
        pytest.fail("mounting file systems needs root: run the tests as root")
    folder = tmp_path_factory.mktemp("filesystems") / "fs"
    made = subprocess.run([str(TOOL), "make", str(folder), "400M", "ext4-ordered",
                           "ext4-journal", "ext4-nojournal"],
                          capture_output=True, text=True, timeout=120)
    try:
        assert made.returncode == 0, made.stderr
        yield folder
    finally:
        removed = subprocess.run([str(TOOL), "remove", str(folder)], capture_output=True,
                                 text=True, timeout=120)
        assert removed.returncode == 0, removed.stderr
        assert not folder.exists()


def test_each_journalling_mode_is_recorded_as_the_kernel_has_it(mounted: Path) -> None:
    found = {name: filesystem(mounted / name)
             for name in ("ext4-ordered", "ext4-journal", "ext4-nojournal")}
    assert {f["type"] for f in found.values()} == {"ext4"}
    assert found["ext4-ordered"]["journal"] == "data=ordered"  # the default, named anyway
    assert found["ext4-journal"]["journal"] == "data=journal"
    assert found["ext4-nojournal"]["journal"] == "none"
    assert all(f["device"].startswith("/dev/loop") for f in found.values())
    assert filesystem_text(found["ext4-journal"]).startswith("ext4 (data=journal) on /dev/loop")
    # A folder below a mount point is on that mount, not on one whose name it starts with.
    (mounted / "ext4-journal" / "below").mkdir()
    assert filesystem(mounted / "ext4-journal" / "below")["journal"] == "data=journal"


def test_a_study_over_file_systems_judges_each_apart_and_records_each(
        mounted: Path, knoblab_home: Path, tmp_path: Path) -> None:
    spec = tmp_path / "fs.toml"
    spec.write_text(STUDY.format(ordered=mounted / "ext4-ordered",
                                 journal=mounted / "ext4-journal"))
    out = subprocess.run(cli_command(tmp_path / "s.sqlite", "run", str(spec), "--json",
                                     str(tmp_path / "r.json"), "--out", str(tmp_path / "out")),
                         env=cli_env(knoblab_home), cwd=tmp_path, capture_output=True,
                         text=True, timeout=600)
    assert out.returncode == 0, out.stdout + out.stderr
    result = json.loads((tmp_path / "r.json").read_text())
    assert result["slices"] == ["machine.datadir"]
    assert len(result["conclusion"]["by_slice"]) == 2
    store = Store(f"sqlite:///{tmp_path / 's.sqlite'}")
    points = result["points"]
    for t in store.trials(result["run_id"]):
        where = Path(points[t.point_idx]["settings"]["machine.datadir"]).name
        assert t.details["filesystem"]["journal"] == {"ext4-ordered": "data=ordered",
                                                      "ext4-journal": "data=journal"}[where]
        assert t.details["filesystem"]["mount"] == str(mounted / where)
    # Two values on two file systems: the table of how the fastest value moves between them.
    assert "How the fastest value moves" in " ".join(out.stdout.split())


STEPS_STUDY = """\
name = "filesystem-steps"

[workload]
kind = "script"
setup = "CREATE TABLE t (id INT PRIMARY KEY, pad VARCHAR(100)) ENGINE=InnoDB"
body = "INSERT INTO t VALUES ({{row}}, REPEAT('x', 80))"
connections = 1
iterations = 100
repetitions = 2

[[step]]
innodb_flush_log_at_trx_commit = 2

[sweep]
"machine.datadir" = ["{ordered}", "{journal}"]

[server]
allow_durability_tradeoff = true
"""


def test_steps_on_each_file_system_get_a_table_each_and_one_of_how_they_move(
        mounted: Path, knoblab_home: Path, tmp_path: Path) -> None:
    """The write-tuning study's steps, once per file system: each its own steps table, and
    one table of what each step did on each."""
    spec = tmp_path / "steps.toml"
    spec.write_text(STEPS_STUDY.format(ordered=mounted / "ext4-ordered",
                                       journal=mounted / "ext4-journal"))
    out = subprocess.run(cli_command(tmp_path / "s.sqlite", "run", str(spec), "--json",
                                     str(tmp_path / "r.json")),
                         env=cli_env(knoblab_home), cwd=tmp_path, capture_output=True,
                         text=True, timeout=600)
    assert out.returncode == 0, out.stdout + out.stderr
    result = json.loads((tmp_path / "r.json").read_text())
    assert result["slices"] == ["machine.datadir"]
    tables = result["steps"]
    assert [Path(t["slice"]["machine.datadir"]).name for t in tables] == [
        "ext4-ordered", "ext4-journal"]
    for table in tables:
        assert [r["step"] for r in table["rows"]] == [0, 1]
        assert all(r["n"] == 2 and r["center"] for r in table["rows"])
    store = Store(f"sqlite:///{tmp_path / 's.sqlite'}")
    for t in store.trials(result["run_id"]):
        where = Path(result["points"][t.point_idx]["settings"]["machine.datadir"]).name
        assert t.details["filesystem"]["mount"] == str(mounted / where)
    # each measurement, as it is made, says which file system it ran on (a line the
    # console may wrap)
    assert f"{mounted / 'ext4-journal'}: step 1 (+ innodb_flush_log_at_trx_commit=2)" in \
        " ".join((out.stdout + out.stderr).split())
    said = " ".join(out.stdout.split())
    assert "How the steps' effects move between them" in said
    assert "kept here (measurably helped)" in said
