"""Bad input through the real CLI: exit code 2, one line on stderr, no traceback, no server left.

Every case runs `python -m knoblab.cli` as a subprocess with the session's KNOBLAB_HOME (the
base template and catalog are built once by the `catalog` fixture) and a private results store.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from knoblab.store import Store

ROOT = Path(__file__).resolve().parents[1]
GOOD_SWEEP = 'read_buffer_size = ["64K", "128K"]'


def _spec(*, top: str = "", server: str = "", dataset: str = "rows = 1000",
          workload: str = 'sql = "SELECT COUNT(*) FROM dt2"\nrepetitions = 1',
          sweep: str = GOOD_SWEEP, statistics: str = "") -> str:
    return (f"{top}\n[server]\n{server}\n[dataset]\n{dataset}\n[workload]\n{workload}\n"
            f"[sweep]\n{sweep}\n[statistics]\n{statistics}\n")


@pytest.fixture(scope="module")
def env(knoblab_home: Path, catalog) -> dict[str, str]:
    """The CLI's environment: the session home (catalog already built), no terminal width."""
    environ = dict(os.environ)
    environ["KNOBLAB_HOME"] = str(knoblab_home)
    # As in a CI log or a pipe: no COLUMNS from the test runner's terminal.
    for name in ("COLUMNS", "LINES", "KNOBLAB_STORE"):
        environ.pop(name, None)
    environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT),
                                                          environ.get("PYTHONPATH")]))
    return environ


def _knoblab(args: list[str], env: dict[str, str], cwd: Path, *, store: bool = True,
             timeout: float = 300) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "knoblab.cli"]
    if store:
        command += ["--store", f"sqlite:///{cwd / 's.sqlite'}"]
    return subprocess.run(command + args, capture_output=True, text=True, env=env, cwd=cwd,
                          timeout=timeout, check=False)


def _servers_of(home: Path) -> list[str]:
    """Command lines of running mariadbd/mysqld processes that belong to this knoblab home."""
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            text = cmdline.read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if ("mariadbd" in text or "mysqld" in text) and str(home) in text:
            found.append(f"{cmdline.parent.name}: {text}")
    return found


def _no_traceback(result: subprocess.CompletedProcess[str]) -> None:
    assert "Traceback" not in result.stdout + result.stderr, result.stderr[-3000:]


# --------------------------------------------------------------------------- the table

# (spec file content or None, arguments, fragments that must all be in the message)
# "{spec}" is the spec file written for the case, "{tmp}" the case's directory.
CASES = [
    pytest.param(_spec(sweep='read_bufer_size = ["64K", "128K"]'), ["run", "{spec}"],
                 ["'read_bufer_size'", "did you mean read_buffer_size"], id="unknown-setting"),
    pytest.param(_spec(sweep='read_buffer_size = ["64K", "12Q"]'), ["run", "{spec}"],
                 ["'12Q'", "K, M, G or T"], id="bad-unit"),
    pytest.param(_spec(sweep='read_buffer_size = ["64K", "1K"]'), ["run", "{spec}"],
                 ["read_buffer_size = '1K'", "out of range", "8K to"], id="out-of-range"),
    pytest.param(_spec(sweep='read_buffer_size = ["-1", "64K"]'), ["run", "{spec}"],
                 ["read_buffer_size = '-1'", "out of range"], id="minus-one"),
    pytest.param(_spec(server='binary = "/nonexistent/mariadbd"'), ["run", "{spec}"],
                 ["/nonexistent/mariadbd not found"], id="missing-binary"),
    pytest.param(_spec(server='binary = "/bin/true"'), ["run", "{spec}"],
                 ["/bin/true does not look like a MySQL or MariaDB server"], id="binary-true"),
    pytest.param(_spec(server="binary = 5"), ["run", "{spec}"], ["binary"], id="binary-number"),
    pytest.param(_spec(top="sweeps = 3"), ["run", "{spec}"],
                 ["unknown key 'sweeps'", "did you mean 'sweep'"], id="unknown-spec-key"),
    pytest.param(_spec(workload='sql = "SELECT 1"\nrepetitons = 3'), ["run", "{spec}"],
                 ["[workload]", "'repetitons'", "did you mean 'repetitions'"],
                 id="unknown-workload-key"),
    pytest.param("[sweep]\nread_buffer_size = [\"64K\",\n", ["run", "{spec}"],
                 ["spec.toml: invalid TOML"], id="invalid-toml"),
    pytest.param(None, ["run", "{tmp}/no-such-spec.toml"],
                 ["cannot read spec", "no-such-spec.toml", "No such file"], id="missing-file"),
    pytest.param(None, ["run", "{tmp}"], ["cannot read spec", "Is a directory"], id="directory"),
    pytest.param(b"# caf\xe9 au lait\nname = 'latin-1'\n", ["run", "{spec}"], ["spec.toml"],
                 id="not-utf8"),
    pytest.param("[workload]\nrepetitions = 1" + "0" * 5000 + "\n", ["run", "{spec}"],
                 ["spec.toml"], id="integer-too-long"),
    pytest.param(_spec(sweep=""), ["run", "{spec}"], ["[sweep]", "at least one setting"],
                 id="empty-sweep"),
    pytest.param(_spec(sweep='read_buffer_size = ["64K"]'), ["run", "{spec}"],
                 ["[sweep] read_buffer_size", "at least two values"], id="one-value"),
    pytest.param(_spec(sweep='read_buffer_size = ["128K", 131072]'), ["run", "{spec}"],
                 ["[sweep] read_buffer_size", "same value"], id="duplicate-values"),
    pytest.param(_spec(sweep="innodb_buffer_pool_instances = [1, 2]"), ["run", "{spec}"],
                 ["'innodb_buffer_pool_instances' is not a setting of 10.11", "did you mean"],
                 id="knob-the-server-lacks"),
    pytest.param(_spec(workload='sql = "SELECT 1"\ncache = "hot"'), ["run", "{spec}"],
                 ["cache = 'hot'", '"warm" or "cold"'], id="bad-cache-mode"),
    pytest.param(_spec(server='[server.config]\nread_buffer_size = "64K"'), ["run", "{spec}"],
                 ["both in [server.config] and [sweep]"], id="config-and-sweep"),
    pytest.param(_spec(sweep='log_bin = ["ON", "OFF"]'), ["run", "{spec}"],
                 ["log_bin", "cannot be tuned"], id="untunable-knob"),
    pytest.param(_spec(sweep='optimizer_switch = ["mrr=on", "nosuchflag=on"]'),
                 ["run", "{spec}"], ["unknown nosuchflag"], id="unknown-flag"),
    pytest.param(None, ["frobnicate"], ["invalid choice: 'frobnicate'"], id="unknown-subcommand"),
    pytest.param(None, ["report", "nosuchrun"], ["no run 'nosuchrun'"], id="report-nosuchrun"),
    pytest.param(None, ["--store", "nosuch://db", "runs"], ["cannot open the results store"],
                 id="bad-store-url"),
    pytest.param(None, ["knobs", "--binary", "/nonexistent/mariadbd"],
                 ["/nonexistent/mariadbd not found"], id="knobs-missing-binary"),
    pytest.param(None, ["knobs", "zzzqqq"], ["matches 'zzzqqq'"], id="knobs-no-match"),
]


@pytest.mark.server
@pytest.mark.parametrize(("spec", "args", "fragments"), CASES)
def test_bad_input(spec, args, fragments, env, knoblab_home, tmp_path):
    spec_path = tmp_path / "spec.toml"
    if isinstance(spec, bytes):
        spec_path.write_bytes(spec)
    elif spec is not None:
        spec_path.write_text(spec)
    argv = [a.format(spec=spec_path, tmp=tmp_path) for a in args]
    result = _knoblab(argv, env, tmp_path, store="--store" not in argv)

    _no_traceback(result)
    assert result.returncode == 2, result.stderr
    message = " ".join(result.stderr.split())  # the words, however the lines were broken
    for fragment in fragments:
        assert fragment in message, f"{fragment!r} not in {message!r}"
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, f"stderr should be one line, is {len(lines)}: {result.stderr!r}"
    assert lines[0].startswith("knoblab: ")
    assert result.stdout.strip() == ""
    assert not _servers_of(knoblab_home)
    assert not (tmp_path / "knoblab-results").exists()


# --------------------------------------------------------------------------- runs that fail


def _trials_by_value(store_url: str, knob: str) -> tuple[dict, dict[str, list]]:
    store = Store(store_url)
    runs = store.list_runs()
    assert len(runs) == 1
    run = store.run(runs[0]["id"])
    points = store.points(run["id"])
    by_value: dict[str, list] = {requested[knob]: [] for requested, _ in points}
    for trial in store.trials(run["id"]):
        by_value[points[trial.point_idx][0][knob]].append(trial)
    return run, by_value


@pytest.mark.server
def test_sql_error_every_configuration_failed(env, knoblab_home, tmp_path):
    spec = tmp_path / "broken-sql.toml"
    spec.write_text(_spec(workload='sql = "SELECT * FROM no_such_table"\nrepetitions = 1'))
    result = _knoblab(["run", str(spec)], env, tmp_path)

    _no_traceback(result)
    assert result.returncode == 2, result.stderr
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("knoblab: ")
    assert "every configuration failed" in last
    run, by_value = _trials_by_value(f"sqlite:///{tmp_path / 's.sqlite'}", "read_buffer_size")
    assert run["name"] == "broken-sql"
    assert set(by_value) == {"64K", "128K"}
    for trials in by_value.values():
        assert [t.status for t in trials] == ["failed"]
        assert "no_such_table" in trials[0].error
        assert trials[0].value is None
    # The report still shows each point as failed, with the reason.
    report = " ".join(result.stdout.split())
    assert report.count("failed") >= 2
    assert "no_such_table" in report
    # No placeholder leaks into the report title when no regime could be judged.
    assert not re.search(r"·\s*None\b", result.stdout), result.stdout
    assert not _servers_of(knoblab_home)


@pytest.mark.server
def test_value_the_server_refuses_at_run_time(env, knoblab_home, tmp_path):
    # default_storage_engine is set with SET GLOBAL after start-up; the server refuses an engine
    # it does not have. That point fails; the run goes on and the other point is measured.
    spec = tmp_path / "engine.toml"
    spec.write_text(_spec(sweep='default_storage_engine = ["MyISAM", "NoSuchEngine"]'))
    result = _knoblab(["run", str(spec)], env, tmp_path)

    _no_traceback(result)
    assert result.returncode == 0, result.stderr
    assert "NoSuchEngine" in result.stderr
    _, by_value = _trials_by_value(f"sqlite:///{tmp_path / 's.sqlite'}",
                                   "default_storage_engine")
    assert [t.status for t in by_value["MyISAM"]] == ["done"]
    assert by_value["MyISAM"][0].value > 0
    assert [t.status for t in by_value["NoSuchEngine"]] == ["failed"]
    assert "NoSuchEngine" in by_value["NoSuchEngine"][0].error
    assert not _servers_of(knoblab_home)


@pytest.mark.server
def test_very_long_spec_name(env, knoblab_home, tmp_path):
    # The results folder is named after the spec; 300 characters is more than a file name may
    # have. Refusing the name up front (exit 2, one line) or shortening the folder (exit 0) are
    # both fine; an OSError traceback after the whole run is not.
    spec = tmp_path / "long.toml"
    spec.write_text(_spec(top=f'name = "{"x" * 300}"'))
    result = _knoblab(["run", str(spec)], env, tmp_path)

    _no_traceback(result)
    assert result.returncode in (0, 2), result.stderr
    if result.returncode == 2:
        assert "name" in result.stderr.strip().splitlines()[-1]
    assert not _servers_of(knoblab_home)


# --------------------------------------------------------------------------- report output paths


def _stored_run(url: str, name: str = "stored") -> str:
    """A finished two-point run written straight into a store (no server needed)."""
    store = Store(url)
    run_id = store.create_run(
        name=name, kind="sweep", spec_source="", server_binary="/usr/sbin/mariadbd",
        server_version="10.11.19-MariaDB",
        info={"knobs": ["read_buffer_size"], "defaults": {"read_buffer_size": "131072"},
              "base": {}, "dataset": {"kind": "scan-table", "engine": "MyISAM", "rows": 1000},
              "workload": {"kind": "query", "sql": "SELECT 1", "cache": "warm",
                           "repetitions": 3},
              "statistics": {"min_effect": 0.03, "alpha": 0.05, "confidence": 0.95,
                             "test": "welch-log", "seed": 1}},
        point_list=[({"read_buffer_size": "64K"}, {"read_buffer_size": "65536"}),
                    ({"read_buffer_size": "128K"}, {"read_buffer_size": "131072"})],
    )
    position = 0
    for repetition in range(3):
        for point, seconds in ((0, 1.0), (1, 0.5)):
            trial = store.begin_trial(run_id, point_idx=point, repetition=repetition,
                                      position=position)
            store.finish_trial(trial, status="done", value=seconds * (1 + repetition / 100),
                               effective={"read_buffer_size": ["65536", "131072"][point]},
                               details={"regime": "CPU-bound"})
            position += 1
    store.set_status(run_id, "done")
    return run_id


@pytest.mark.server
def test_report_of_a_stored_run_works(env, tmp_path):
    run_id = _stored_run(f"sqlite:///{tmp_path / 's.sqlite'}")
    result = _knoblab(["report", run_id[:5], "--out", str(tmp_path / "out"),
                       "--json", str(tmp_path / "r.json")], env, tmp_path)
    _no_traceback(result)
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "r.json").exists()
    assert (tmp_path / "out" / "result.json").exists()


@pytest.mark.server
@pytest.mark.parametrize("option", ["--out", "--json"])
def test_report_to_a_path_that_cannot_be_written(env, tmp_path, option):
    run_id = _stored_run(f"sqlite:///{tmp_path / 's.sqlite'}")
    (tmp_path / "plain-file").write_text("")
    target = tmp_path / "plain-file" / "sub"
    result = _knoblab(["report", run_id, option, str(target)], env, tmp_path)

    _no_traceback(result)
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("knoblab: ")
    assert "plain-file" in lines[0]
