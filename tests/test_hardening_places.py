"""Unusable places to write — the home, --out, --json — are one line naming the place and what
is wrong, exit code 2, before any server starts; an error names the file that failed, and a
--json that cannot be written leaves no half-written report folder."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from collections.abc import Callable
from pathlib import Path

import pytest

from knoblab import cli, commands, listings
from knoblab.store import Store
from tests.test_bad_input import knoblab_in_process

GOLDEN = Path(__file__).parent / "data" / "golden"
SPEC = """name = "places"
[dataset]
rows = 1000
[workload]
sql = "SELECT COUNT(*) FROM dt2"
repetitions = 1
[sweep]
read_buffer_size = ["128K", "256K"]
"""


@pytest.fixture
def knoblab(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
            capfd: pytest.CaptureFixture[str]) -> Callable[..., subprocess.CompletedProcess[str]]:
    """The command, called in this process (tests.test_bad_input.knoblab_in_process) with
    KNOBLAB_HOME `home`, in `cwd` (default: the test's folder); all it checks is where it
    may write, which is the same in a process of its own."""
    (tmp_path / "tmp").mkdir(exist_ok=True)
    # a crash log must not hide in the temp folder (tempfile reads TMPDIR only once)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))

    def run(home: str | Path, *args: str,
            cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
        return knoblab_in_process(list(args), {"KNOBLAB_HOME": str(home)}, cwd or tmp_path,
                                  monkeypatch, capfd, store=False)
    return run


def _refused(done: subprocess.CompletedProcess[str], *words: str) -> str:
    err = done.stderr.strip()
    assert done.returncode == 2, done.stdout + done.stderr
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    for word in words:
        assert word in err, err
    return err


def _mounted(tmpfs: Callable[[int], Path], options: str,
             fill: dict[str, str | bytes] | None = None) -> Path:
    """A small tmpfs of our own (the `tmpfs` fixture's, root only) holding `fill`, remounted
    with `options`: read-only or nearly full file systems."""
    where = tmpfs(16)
    for name, content in (fill or {}).items():
        if isinstance(content, bytes):
            (where / name).write_bytes(content)
        else:
            (where / name).write_text(content)
    subprocess.run(["mount", "-o", f"remount,{options}", str(where)], check=True)
    return where


def _golden_store(tmp_path: Path) -> tuple[str, str]:
    shutil.copy(GOLDEN / "store.sqlite", tmp_path / "store.sqlite")
    url = f"sqlite:///{tmp_path / 'store.sqlite'}"
    return url, Store(url).list_runs(limit=1)[0]["id"]


def test_a_home_that_is_a_file_is_named(tmp_path, knoblab):
    home = tmp_path / "home"
    home.write_text("not a folder")
    _refused(knoblab(home, "runs"), f"KNOBLAB_HOME={home}", "is a file")
    assert list((tmp_path / "tmp").iterdir()) == []  # no crash log in the temp folder


def test_a_home_whose_parent_is_missing_is_named(tmp_path, knoblab):
    home = tmp_path / "typo" / "home"
    _refused(knoblab(home, "runs"), "parent folder", "does not exist")
    assert not (tmp_path / "typo").exists()


@pytest.mark.parametrize("name", ["a b", "victim#x", "it's", "$HOME", "tab\there"])
def test_a_home_the_servers_scripts_cannot_use_is_refused_before_it_is_used(tmp_path, knoblab,
                                                                           name):
    (tmp_path / "victim").mkdir()
    spec = tmp_path / "spec.toml"
    spec.write_text(SPEC)
    _refused(knoblab(tmp_path / name, "run", str(spec)), "KNOBLAB_HOME",
             "cannot use a path holding")
    # nothing written anywhere: neither the home nor a folder its path was cut to
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["victim", "spec.toml", "tmp"])
    assert list((tmp_path / "victim").iterdir()) == []


def test_a_read_only_home_is_named(tmpfs, tmp_path, knoblab):
    ro = _mounted(tmpfs, "ro")
    _refused(knoblab(ro, "knobs", "buffer"), "read-only")


def test_a_home_on_a_full_file_system_is_named(tmpfs, tmp_path, knoblab):
    small = _mounted(tmpfs, "rw")
    _refused(knoblab(small, "knobs", "buffer"), "file system is full")


@pytest.mark.server
def test_a_relative_home_is_made_absolute(tmp_path, knoblab):
    # The server resolves a relative datadir against its own folder (/usr): knoblab must not.
    done = knoblab("rel", "knobs", "read_buffer")
    assert done.returncode == 0, done.stderr
    assert "read_buffer_size" in done.stdout
    assert (tmp_path / "rel").is_dir()


def test_out_and_json_are_checked_before_anything_runs(tmp_path, knoblab):
    home = tmp_path / "home"
    spec = tmp_path / "spec.toml"
    spec.write_text(SPEC)
    a_file = tmp_path / "file"
    a_file.write_text("x")
    _refused(knoblab(home, "run", str(spec), "--out", str(a_file)),
             f"--out {a_file} is a file")
    _refused(knoblab(home, "run", str(spec), "--json", str(tmp_path)),
             f"--json {tmp_path} is a folder")
    _refused(knoblab(home, "run", str(spec), "--out", str(a_file / "below")),
             "is a file, so no folder can be made below it")
    # nothing started: no template was built, no run stored
    assert not (home / "templates").exists() or not any((home / "templates").iterdir())
    assert Store(f"sqlite:///{home / 'knoblab.sqlite'}").list_runs() == []


def test_tune_checks_out_before_the_search(tmp_path, knoblab):
    home = tmp_path / "home"
    a_file = tmp_path / "file"
    a_file.write_text("x")
    examples = Path(__file__).parents[1] / "examples"
    _refused(knoblab(home, "tune", str(examples / "tune-query-mix.toml"),
                      "--out", str(a_file)), f"--out {a_file} is a file")
    assert not (home / "store-tune.sqlite").exists()
    assert Store(f"sqlite:///{home / 'knoblab.sqlite'}").list_runs() == []


def test_a_json_that_cannot_be_written_is_named_and_leaves_no_folder(tmp_path, knoblab):
    url, run_id = _golden_store(tmp_path)
    out = tmp_path / "out"
    done = knoblab(tmp_path / "home", "--store", url, "report", run_id,
                    "--json", "/dev/full", "--out", str(out))
    err = _refused(done, "--json /dev/full", f"knoblab report {run_id}")
    assert str(out) not in err
    assert not out.exists()


def test_a_read_only_json_is_refused_before_the_folder_is_written(tmpfs, tmp_path, knoblab):
    url, run_id = _golden_store(tmp_path)
    out = tmp_path / "out"
    ro = _mounted(tmpfs, "ro", {"result.json": "{}"})
    _refused(knoblab(tmp_path / "home", "--store", url, "report", run_id,
                      "--json", str(ro / "result.json"), "--out", str(out)),
             f"--json {ro / 'result.json'}", "cannot be written")
    assert not out.exists()


@pytest.mark.parametrize(("command", "true_line"), [
    (["runs"], "the store was only read, nothing was changed"),
    (["compare", "latest", "latest"], "the store was only read, nothing was changed"),
    (["report", "latest"], "the store was only read, nothing was changed"),
])
def test_the_crash_line_says_what_is_true_for_the_command(tmp_path, monkeypatch, capsys,
                                                          command, true_line):
    monkeypatch.setenv("KNOBLAB_HOME", str(tmp_path / "home"))

    def broken(*args, **kwargs):
        raise RuntimeError("nobody foresaw this")

    for module, name in ((listings, "cmd_runs"), (listings, "cmd_compare"),
                         (commands, "cmd_report")):
        monkeypatch.setattr(module, name, broken)
    code = cli.main(["--store", f"sqlite:///{tmp_path / 's.sqlite'}", *command])
    err = capsys.readouterr().err
    assert code == 1
    assert true_line in err and "what was measured is stored" not in err, err
    assert str(tmp_path / "home" / "logs") in err


def test_a_store_that_cannot_be_written_is_refused_before_a_run_starts(tmpfs, tmp_path,
                                                                        knoblab):
    home = tmp_path / "home"
    spec = tmp_path / "spec.toml"
    spec.write_text(SPEC)
    Store(f"sqlite:///{tmp_path / 'made.sqlite'}").list_runs()
    ro = _mounted(tmpfs, "ro", {"s.sqlite": (tmp_path / "made.sqlite").read_bytes()})
    for name in ("s.sqlite", "new.sqlite"):  # a store there already, and a new one
        _refused(knoblab(home, "--store", f"sqlite:///{ro / name}", "run",
                          str(spec)), f"results store {ro / name}", "read-only")
    assert not (home / "templates").exists() or not any((home / "templates").iterdir())


@pytest.mark.server
def test_a_datadir_is_initialised_without_the_shared_temp_folder(tmp_path, monkeypatch):
    # Two initialisations at once in /tmp removed each other's temporary tables and the
    # server aborted ("Could not remove temporary table '/tmp/#sql-temptable-…'"): the server
    # never uses the shared temp folder, here one that does not even exist.
    from knoblab.server.binary import find_binary
    from knoblab.server.sandbox import base_template

    monkeypatch.setenv("TMPDIR", str(tmp_path / "no-such-folder"))
    base = base_template(find_binary(), tmp_path / "home")
    assert (base / ".ready").exists() and not (base / "tmp").exists()


def test_commands_that_only_read_need_no_writable_home(tmpfs, tmp_path, knoblab):
    # Another user's home, or a read-only copy: runs and report read it; run refuses it.
    store = (GOLDEN / "store.sqlite").read_bytes()
    ro = _mounted(tmpfs, "ro", {"knoblab.sqlite": store})
    listed = knoblab(ro, "runs")
    assert listed.returncode == 0, listed.stderr
    assert "golden" in listed.stdout or len(listed.stdout.splitlines()) > 3, listed.stdout
    reported = knoblab(ro, "report", "latest", "--out", str(tmp_path / "r"))
    assert reported.returncode == 0, reported.stderr
    spec = tmp_path / "spec.toml"
    spec.write_text(SPEC)
    _refused(knoblab(ro, "run", str(spec)), "read-only")


def test_no_output_overwrites_what_knoblab_relies_on(tmp_path, knoblab):
    url, run_id = _golden_store(tmp_path)
    store_file = tmp_path / "store.sqlite"
    before = store_file.read_bytes()
    home = tmp_path / "home"
    spec = tmp_path / "spec.toml"
    spec.write_text(SPEC)
    (tmp_path / "store-tune.sqlite").write_bytes(b"")
    cases = [
        (["report", run_id, "--json", str(store_file)], "is knoblab's results store"),
        (["compare", run_id, run_id, "--json", str(store_file)], "is knoblab's results store"),
        (["report", run_id, "--json", str(tmp_path / "store-tune.sqlite")],
         "the storage of knoblab's tuning studies"),
        (["run", str(spec), "--json", str(spec)], "is the spec being run"),
        (["report", run_id, "--out", str(home)], "lies in knoblab's home"),
        (["report", run_id, "--json", str(home / "x.json")], "lies in knoblab's home"),
        (["report", run_id, "--out", str(tmp_path)], "is knoblab's results store"),
        (["report", run_id, "--out", str(tmp_path / "e"), "--json", str(tmp_path / "e")],
         "is the --out folder"),
    ]
    for args, words in cases:
        _refused(knoblab(home, "--store", url, *args), words)
    assert store_file.read_bytes() == before
    assert spec.read_text() == SPEC


def test_an_out_folder_holding_other_files_is_refused_before_measuring(tmp_path, knoblab):
    spec = tmp_path / "spec.toml"
    spec.write_text(SPEC)
    busy = tmp_path / "busy"
    busy.mkdir()
    (busy / "notes.txt").write_text("mine")
    home = tmp_path / "home"
    _refused(knoblab(home, "run", str(spec), "--out", str(busy)),
             "holds files knoblab did not write")
    assert Store(f"sqlite:///{home / 'knoblab.sqlite'}").list_runs() == []
