"""Every example in examples/: as shipped it parses with rounds enough to decide, and its
comment says how long it takes; run at a smaller size (fewer rows, values, rounds, shorter
runs: the keys changed in a copy of the file, comments and all), it does what its comment
promises."""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest

from knoblab.runner import few_rounds
from knoblab.spec import Spec, load_spec
from knoblab.store import Store, TrialState
from knoblab.units import parse_duration
from tests.test_cli_e2e import _flat, knoblab_in_here

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"
NAMES = sorted(path.stem for path in EXAMPLES.glob("*.toml"))
# The files the dump and replay examples name, which scripts/ makes (not shipped).
SHOP_FILES = ("shop.sql.gz", "shop-slow.log")


def _toml(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    if isinstance(value, str):
        return json.dumps(value)  # a TOML basic string
    return repr(value)


def _changed(text: str, changes: dict[str, dict[str, Any]]) -> str:
    """The spec's text with keys of its sections set (replaced where they are, added under the
    section's header where they are not): the example itself, at another size."""
    lines = text.splitlines()
    header = re.compile(r"^\[([\w.]+)\]\s*(#.*)?$")
    key = re.compile(r"^([\w]+)\s*=")
    section, headers, found = "", {}, set()
    for number, line in enumerate(lines):
        if (opened := header.match(line)) is not None:
            section = opened.group(1)
            headers[section] = number
        elif (named := key.match(line)) is not None and named.group(1) in changes.get(section, {}):
            assert '"""' not in line, f"[{section}] {named.group(1)}: a multi-line value"
            lines[number] = f"{named.group(1)} = {_toml(changes[section][named.group(1)])}"
            found.add((section, named.group(1)))
    for section, keys in changes.items():
        added = [f"{k} = {_toml(v)}" for k, v in keys.items() if (section, k) not in found]
        if added:
            at = headers[section]  # the example has the section: a reduced run adds none
            lines[at + 1:at + 1] = added
    return "\n".join(lines) + "\n"


def _example(name: str) -> str:
    return (EXAMPLES / f"{name}.toml").read_text()


def _over_a_dump(name: str) -> bool:
    """Whether the example's data is a dump the scripts make (with, for a replay, a log)."""
    return "dump" in tomllib.loads(_example(name)).get("dataset", {})


def _comment(name: str) -> str:
    """The example's opening comment, as one line of text."""
    head = []
    for line in _example(name).splitlines():
        if not line.startswith("#"):
            break
        head.append(line.lstrip("#").strip())
    return " ".join(" ".join(head).split())


def _stated_minutes(name: str) -> int | None:
    """The minutes the comment says the example takes as shipped ("about N minutes")."""
    said = re.search(r"about (\d+) minutes", _comment(name), re.IGNORECASE)
    return int(said.group(1)) if said else None


@pytest.fixture(scope="module")
def shop(tmp_path_factory: pytest.TempPathFactory, knoblab_home: Path) -> Path:
    """A small shop dump and a capture of a load that writes over it, made by the project's
    scripts as the examples' comments say, with fewer orders and statements."""
    folder = tmp_path_factory.mktemp("shop")
    env = {**os.environ, "KNOBLAB_HOME": str(knoblab_home)}
    for command in (["scripts/shop_dump.py", str(folder / "shop.sql.gz"), "--orders", "3000"],
                    ["scripts/shop_capture.py", str(folder / "shop.sql.gz"),
                     str(folder / "shop-slow.log"), "--sessions", "2", "--statements", "80",
                     "--writes"]):
        made = subprocess.run([sys.executable, *command], cwd=ROOT, env=env, text=True,
                              capture_output=True, timeout=300, check=False)
        assert made.returncode == 0, made.stdout + made.stderr
    return folder


def _placed(name: str, folder: Path, shop: Path | None, text: str | None = None) -> Path:
    """The example (or `text`, a changed copy) in `folder`, beside the files it names."""
    folder.mkdir(parents=True, exist_ok=True)
    if shop is not None:
        for file in SHOP_FILES:
            shutil.copy(shop / file, folder / file)
    spec = folder / f"{name}.toml"
    spec.write_text(_example(name) if text is None else text)
    return spec


def _run(name: str, changes: dict[str, dict[str, Any]], work: Path, home: Path,
         shop: Path | None = None, command: str = "run",
         replace: tuple[tuple[str, str], ...] = (), extra: tuple[str, ...] = ()
         ) -> tuple[subprocess.CompletedProcess[str], dict[str, Any], Store]:
    """The example run reduced, as a user runs it: its stdout, result JSON and store."""
    text = _changed(_example(name), changes)
    for old, new in replace:
        assert old in text
        text = text.replace(old, new)
    spec = _placed(name, work, shop, text)
    load_spec(spec)  # the reduced spec is one knoblab takes
    store = work / "s.sqlite"
    out = work / "out"
    proc = knoblab_in_here(home, store, command, str(spec), "--json", str(work / "result.json"),
                           "--out", str(out), *extra, cwd=work)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc, json.loads((work / "result.json").read_text()), Store(f"sqlite:///{store}")


def _done(store: Store, result: dict[str, Any]) -> list[Any]:
    trials = [t for t in store.trials(result["run_id"]) if t.status == TrialState.DONE]
    assert trials
    return trials


def _at(result: dict[str, Any], trial: Any) -> dict[str, str]:
    """The settings requested at a trial's point."""
    return result["points"][trial.point_idx]["settings"]


# ------------------------------------------------------------------------- as shipped


def test_every_example_has_a_reduced_run_here():
    assert [n for n in NAMES if f"test_{n.replace('-', '_')}" not in globals()] == []


def _assert_rounds_enough(spec: Spec) -> None:
    """No warning, before the run, that its rounds are too few to decide."""
    assert few_rounds(spec) == []
    assert not [w for w in spec.workload.warnings if "repetitions" in w or "rounds" in w]


@pytest.mark.parametrize("name", [n for n in NAMES if not _over_a_dump(n)])
def test_an_example_as_shipped_parses_with_rounds_enough_to_decide(name: str):
    _assert_rounds_enough(load_spec(EXAMPLES / f"{name}.toml"))


@pytest.mark.server
@pytest.mark.parametrize("name", [n for n in NAMES if _over_a_dump(n)])
def test_an_example_over_a_dump_parses_with_rounds_enough_to_decide(name: str, shop: Path,
                                                                    tmp_path: Path):
    _assert_rounds_enough(load_spec(_placed(name, tmp_path, shop)))


def _least_seconds(name: str) -> float:
    """What the example takes as shipped at the least, from the spec alone: a search its
    budget, a run of fixed duration its measurements' durations; 0 where only a run tells."""
    data = tomllib.loads(_example(name))
    if "tune" in data:
        return parse_duration(data["tune"]["budget"], "[tune] budget")
    workload = data["workload"]
    if "duration" not in workload:
        return 0.0
    points = math.prod(len(values) for values in data.get("sweep", {}).values())
    return points * workload["repetitions"] * workload["duration"]


@pytest.mark.parametrize("name", NAMES)
def test_an_example_says_how_long_it_takes(name: str):
    """Measured as shipped on a 2-core machine (a search: its budget), and said in the
    comment's first lines; never less than the spec itself asks for."""
    minutes = _stated_minutes(name)
    assert minutes is not None, f"{name}: the comment says 'about N minutes' for the run"
    first_lines = " ".join(line.lstrip("#") for line in _example(name).splitlines()[:6])
    assert f"about {minutes} minutes" in " ".join(first_lines.split()).lower()
    assert minutes * 60 >= _least_seconds(name)
    if "tune" in tomllib.loads(_example(name)):
        assert "its budget" in _comment(name)  # a search runs for its budget, anywhere
    else:
        assert "on a 2-core VM" in _comment(name)  # where it was measured


# ------------------------------------------------------------------------- reduced runs


@pytest.mark.server
def test_read_buffer_scan(tmp_path: Path, knoblab_home: Path):
    """The table in memory, every value once per round on one server start, and the server's
    rounding of 8200 to its block size said."""
    proc, result, _ = _run("read-buffer-scan", {
        "dataset": {"rows": 20_000}, "workload": {"repetitions": 2, "timed_runs": 1},
        "sweep": {"read_buffer_size": ["8200", "2M"]}}, tmp_path, knoblab_home)
    assert result["workload"]["cache"] == "warm"
    assert result["rounds"]["design"] == "blocked"
    row_8200 = next(line for line in proc.stdout.splitlines() if line.startswith("8200"))
    assert "8K*" in row_8200 and "rounded" in proc.stdout
    assert _flat(result["conclusion"]["text"]) in _flat(proc.stdout)


@pytest.mark.server
def test_read_buffer_scan_cold(tmp_path: Path, knoblab_home: Path):
    """Every scan reads the table from disk, and the report's regime column says what bound it."""
    proc, result, store = _run("read-buffer-scan-cold", {
        "dataset": {"rows": 20_000}, "workload": {"repetitions": 2, "timed_runs": 1},
        "sweep": {"read_buffer_size": ["8200", "2M"]}}, tmp_path, knoblab_home)
    assert result["workload"]["cache"] == "cold"
    header = next(line for line in proc.stdout.splitlines() if line.startswith("read_buffer_size"))
    assert "regime" in header.split()
    assert all(p["regime"] in ("CPU-bound", "I/O-bound", "mixed") for p in result["points"])
    assert all(t.details["read_bytes"] > 0 for t in _done(store, result))


@pytest.mark.server
def test_key_buffer_myisam(tmp_path: Path, knoblab_home: Path):
    """Below the index's size the timed run reads index blocks from the OS (Key_reads), above it
    none: the counters say which happened at which value."""
    _, result, store = _run("key-buffer-myisam", {
        "dataset": {"rows": 200_000}, "workload": {"repetitions": 2, "timed_runs": 1},
        "sweep": {"key_buffer_size": ["64K", "64M"]}}, tmp_path, knoblab_home)
    key_reads = {}
    for trial in _done(store, result):
        key_reads.setdefault(_at(result, trial)["key_buffer_size"], []).append(
            trial.details["status"]["key_reads"])
    assert all(n > 0 for n in key_reads["64K"]) and key_reads["64M"] == [0, 0]


@pytest.mark.server
def test_tmp_table_groupby(tmp_path: Path, knoblab_home: Path):
    """A verdict per data size, and the counters that moved with the setting named: the
    temporary table went to disk below its size, and stayed in memory above it."""
    proc, result, store = _run("tmp-table-groupby", {
        "workload": {"repetitions": 2},
        "sweep": {"tmp_table_size": ["16K", "256M"], "rows": [20_000, 40_000]}},
        tmp_path, knoblab_home)
    assert result["slices"] == ["rows"]
    for trial in _done(store, result):
        on_disk = trial.details["status"]["created_tmp_disk_tables"]
        assert (on_disk > 0) == (_at(result, trial)["tmp_table_size"] == "16K")
        assert trial.effective["max_heap_table_size"] == trial.effective["tmp_table_size"]
    explained = {json.dumps(e["slice"]): {c["counter"] for c in e["counters"]}
                 for e in result["explained_by"]}
    assert set(explained) == {'{"rows": "20000"}', '{"rows": "40000"}'}, explained
    assert all("created_tmp_disk_tables" in names for names in explained.values()), explained
    assert "Explained by the server's counters at rows=20000" in _flat(proc.stdout)


@pytest.mark.server
@pytest.mark.long
def test_oltp_buffer_pool(tmp_path: Path, knoblab_home: Path):
    """Throughput over time under sysbench, per buffer-pool size, on server starts of their
    own: its steady state and stability kept, and below the data's size pages read from disk."""
    _, result, store = _run("oltp-buffer-pool", {
        "workload": {"threads": 2, "tables": 1, "table_size": 50_000, "duration": 3,
                     "repetitions": 2},
        "sweep": {"innodb_buffer_pool_size": ["8M", "256M"]}}, tmp_path, knoblab_home)
    assert result["objective"] == {"metric": "tps", "direction": "maximize"}
    assert result["rounds"]["design"] != "blocked"
    from_disk: dict[str, list[float]] = {}
    for trial in _done(store, result):
        steady = trial.details["steady"]
        assert steady["n"] >= 1 and steady["cv"] >= 0  # the mean, and the stability
        from_disk.setdefault(_at(result, trial)["innodb_buffer_pool_size"], []).append(
            trial.details["status"]["innodb_buffer_pool_reads"])
    assert min(from_disk["8M"]) > max(from_disk["256M"]), from_disk


@pytest.mark.server
def test_dump_script(tmp_path: Path, knoblab_home: Path, shop: Path):
    """The dump loaded once, its DEFINERs made knoblab's data account and said; the body's
    writes give each measurement a fresh copy."""
    # The dump copied to a path of its own is a dump of its own: this run loads it, and says
    # what it did.
    proc, result, store = _run("dump-script", {"workload": {"iterations": 10, "repetitions": 2}},
                               tmp_path, knoblab_home, shop)
    said = _flat(proc.stdout + proc.stderr)
    assert ("the DEFINERs it names ('reporting'@'localhost', 'shop_app'@'%') were made "
            "knoblab's data account") in said, said
    size = (shop / "shop.sql.gz").stat().st_size
    assert f"{size}/{size}" in proc.stdout + proc.stderr  # the progress bar, in bytes
    assert result["rounds"]["design"] != "blocked"
    assert len(_done(store, result)) == 4


@pytest.mark.server
def test_replay_shop(tmp_path: Path, knoblab_home: Path, shop: Path):
    """Each captured connection replayed as a session over fresh copies of the dump, and the
    report's statement-class table."""
    proc, result, store = _run("replay-shop", {"workload": {"repetitions": 2}}, tmp_path,
                               knoblab_home, shop)
    assert result["rounds"]["design"] != "blocked"
    assert len(_done(store, result)) == 4
    assert "Statement classes: time against" in proc.stdout
    # In the Markdown report: the terminal's table wraps a long fingerprint where its other
    # columns' widths (the measured figures) leave it little room.
    report = (tmp_path / "out" / "report.md").read_text()
    classes = report[report.index("Statement classes"):]
    for fingerprint in ("call place_order(?, ?, ?)",
                        "select country, revenue from revenue_by_country where cou"):
        assert fingerprint in classes, classes


@pytest.mark.server
@pytest.mark.long
def test_write_steps(tmp_path: Path, knoblab_home: Path):
    """Each step compared with the one before and the defaults, each change also measured
    alone, the durability step on a line of its own."""
    proc, result, _ = _run("write-steps", {"workload": {"iterations": 40, "repetitions": 2}},
                           tmp_path, knoblab_home)
    assert result["kind"] == "steps"
    [part] = result["steps"]
    rows = part["rows"]
    assert [r["step"] for r in rows] == [0, 1, 2, 3, 4, 5]
    assert rows[1]["durability"] and not any(r["durability"] for r in rows[2:])
    assert rows[1]["alone"] is None and all(r["alone"] for r in rows[2:])
    assert "gives up durability" in proc.stdout


# The query mix at a tenth of its rows, a search of a few trials.
QUERY_MIX_SMALLER = (("seq_1_to_200000", "seq_1_to_20000"), ("LIMIT 50000, 5", "LIMIT 5000, 5"))
QUERY_MIX_SEARCH = {"tune": {"trials": 12, "batch": 2, "validate": 1, "rounds": 2,
                             "max_rounds": 2}}


@pytest.mark.server
@pytest.mark.long
def test_tune_query_mix(tmp_path: Path, knoblab_home: Path):
    """Each trial scored against the current configuration on the same starts; run again with
    the same spec, the study goes on where it stopped, its budget counting both."""
    _, first, _ = _run("tune-query-mix", QUERY_MIX_SEARCH, tmp_path, knoblab_home,
                       command="tune", replace=QUERY_MIX_SMALLER, extra=("--budget", "15s"))
    assert first["stopped"] == "budget"
    assert first["trials"][0]["state"] == "baseline" and first["trials"][0]["changes"] == {}
    # Each measured against the baseline on its start (warm: several candidates to a start);
    # the budget's end tells the trials being measured with what they have.
    assert all(t["rounds"] >= 1 for t in first["trials"] if t["state"] in ("scored", "pruned"))
    # The budget counts both invocations: the second is given what the first spent and twice
    # as much again (and 15 s): its own check of the settings in place, and room for a step
    # as long as the first's, however busy the machine.
    budget = f"{3 * math.ceil(first['spent_seconds']) + 15}s"
    proc, again, _ = _run("tune-query-mix", QUERY_MIX_SEARCH, tmp_path, knoblab_home,
                          command="tune", replace=QUERY_MIX_SMALLER, extra=("--budget", budget))
    earlier = {t["number"]: t["changes"] for t in first["trials"]}
    now = {t["number"]: t["changes"] for t in again["trials"]}
    assert earlier.items() <= now.items() and len(now) > len(earlier), (earlier, now)
    assert again["spent_seconds"] > first["spent_seconds"]
    if again["validations"]:
        assert "validation (each candidate against the baseline" in proc.stdout


@pytest.mark.server
@pytest.mark.long
def test_tune_oltp(tmp_path: Path, knoblab_home: Path):
    """Throughput searched with the 99th percentile held under its bound: every scored trial
    carries its p99 and whether it kept to the bound."""
    proc, result, _ = _run("tune-oltp", {
        "workload": {"threads": 2, "tables": 1, "table_size": 5_000, "duration": 3,
                     "warmup": 1},
        "tune": {"trials": 2, "validate": 1, "rounds": 2, "max_rounds": 2}},
        tmp_path, knoblab_home, command="tune", extra=("--budget", "40s"))
    assert result["objective"]["metric"] == "tps"
    assert result["constraint"] == {"metric": "p99", "limit": 50, "bound": "max"}
    scored = [t for t in result["trials"] if t["state"] == "scored"]
    assert scored and all(t["observed"] is not None and isinstance(t["feasible"], bool)
                          for t in scored), result["trials"]

