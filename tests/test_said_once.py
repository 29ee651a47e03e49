"""What knoblab says, said once and truly: one verdict for a point in every output (the JSON
scripts read, the terminal, the report, recommended.cnf, compare), intervals that say their
level and never print numbers that bound nothing, a steps change that says what it is a ratio
of, a replay's slice said as what is replayed, a resume refused for what really changed, the
trials the pruner kept said to lean their way, and `knoblab runs` for people.

Stored runs are the real runs of tests/data/golden (copied: reading never writes the
fixture); the rest is pure code, but for the sandboxes a killed knoblab leaves, which are
real."""

from __future__ import annotations

import io
import json
import os
import re
import shutil
import signal
import sqlite3
import subprocess
import sys
import tomllib
from dataclasses import replace
from pathlib import Path

import pytest
from rich.console import Console

from knoblab import cli, runner
from knoblab.capture.plan import plan_for
from knoblab.classes import ClassChange, ClassComparison, ClassRow
from knoblab.errors import UserError
from knoblab.records import (
    Comparison,
    Dimension,
    Goal,
    Metric,
    Space,
    TrialOutcome,
    TuneResult,
    Validation,
)
from knoblab.report import print_report
from knoblab.report.format import change_text, ratio_change_text
from knoblab.report.tables import class_grid, class_notes
from knoblab.report.text import answer_text, step_durability_lines, total_text
from knoblab.report.tuning import interval_cell, print_tune, tune_document, tune_json
from knoblab.results import build_results
from knoblab.runner import checks as runner_checks
from knoblab.spec import parse_spec
from knoblab.store import RunInfo, Store
from knoblab.units import num
from knoblab.vocabulary import ClassVerdict, Experiment, RunStatus
from knoblab.words import NOT_BOUNDED, bounds, gain_interval_words
from knoblab.workloads.replay import ReplayWorkload, Slice
from tests.fakes import Quiet

GOLDEN = Path(__file__).parent / "data" / "golden"
SWEEP, GRID, STEPS = "b96b0a30", "d8d98b00", "f61cfbb4"  # golden runs
BOX = re.compile("[\u2500-\u257f]")
MB = 1 << 20


def _store(tmp_path: Path) -> Path:
    db = tmp_path / "store.sqlite"
    shutil.copy(GOLDEN / "store.sqlite", db)
    return db


def _main(db: Path, *args: str) -> int:
    return cli.main(["--store", f"sqlite:///{db}", *args])


def _flat(text: str) -> str:
    """A command's output as one line of words: table rules gone, wrapped cells joined."""
    return " ".join(BOX.sub(" ", text).split())


def _copy_run(db: Path, run_id: str, new_id: str) -> None:
    """The same run under another id: compare needs two of the same work."""
    with sqlite3.connect(db) as c:
        for table, key in (("runs", "id"), ("points", "run_id"), ("trials", "run_id")):
            columns = [row[1] for row in c.execute(f"PRAGMA table_info({table})")
                       if not (table == "trials" and row[1] == "id")]
            chosen = ", ".join("?" if col == key else col for col in columns)
            c.execute(f"INSERT INTO {table} ({', '.join(columns)}) SELECT {chosen} FROM {table} "
                      f"WHERE {key} = ?", (new_id, run_id))


def _edit_info(db: Path, run_id: str, **changes: object) -> None:
    with sqlite3.connect(db) as c:
        info = json.loads(c.execute("SELECT info FROM runs WHERE id = ?", (run_id,)).fetchone()[0])
        for key, value in changes.items():
            info[key] = {**info.get(key, {}), **value} if isinstance(value, dict) else value
        c.execute("UPDATE runs SET info = ? WHERE id = ?", (json.dumps(info), run_id))


# ------------------------------------------------- one verdict, the same in every output


def test_a_leader_not_recommended_is_the_fastest_measured_in_every_output(tmp_path, capsys):
    # golden-grid: at each size 64K is shown worse than 64M, but the default was not measured,
    # so no change to 64M is shown to help: 64M is the fastest measured, never "best".
    db, out = _store(tmp_path), tmp_path / "out"
    assert _main(db, "report", GRID, "--out", str(out)) == 0
    printed = capsys.readouterr().out
    result = json.loads((out / "result.json").read_text())
    leaders = [p for p in result["points"] if p["p_value"] is None]
    assert len(leaders) == 2 and {p["verdict"] for p in leaders} == {"fastest measured"}
    assert "best" not in {p["verdict"] for p in result["points"]}
    for part in result["conclusion"]["by_slice"]:
        assert part["best"] is None and part["recommended"] is None
        assert part["fastest"]["tmp_table_size"] == "64M"
    rows = [line for line in printed.splitlines() if line.startswith("64M ")]
    assert len(rows) == 2 and all("fastest measured" in row for row in rows)
    assert " best " not in printed.replace("vs best", "")
    assert "Fastest measured: 64M" in printed and "Best:" not in printed
    assert "best here too" not in printed and "fastest measured here too" in printed
    report = (out / "report.md").read_text()
    assert "fastest measured" in report and "| best |" not in report
    cnf = (out / "recommended.cnf").read_text()
    assert not [line for line in cnf.splitlines() if line.strip() and line[0] not in "#["]


def test_a_server_shown_faster_is_the_fastest_measured_not_the_best(tmp_path, capsys):
    # No run recommends a server: the one shown faster than another is the fastest measured.
    db = _store(tmp_path)
    with sqlite3.connect(db) as c:  # server b three times slower than a
        c.execute("UPDATE trials SET value = value * 3 WHERE run_id = ? AND point_idx >= 6",
                  (STEPS,))
    store = Store(f"sqlite:///{db}")
    compared = build_results(store, STEPS).servers_compared or []
    leaders = [r for entry in compared for r in entry.rows if r.p_value is None]
    assert len(leaders) == 2 and {r.binary for r in leaders} == {"a"}
    assert {r.verdict for r in leaders} == {"fastest measured"}
    assert _main(db, "report", STEPS, "--out", str(tmp_path / "out")) == 0
    printed = _flat(capsys.readouterr().out)
    assert "Servers compared at defaults: fastest measured a" in printed
    assert ": best a" not in printed
    document = json.loads((tmp_path / "out" / "result.json").read_text())
    assert all(r["verdict"] != "best" for e in document["servers_compared"] for r in e["rows"])


def test_compare_says_each_runs_leader_by_its_verdict(tmp_path, capsys):
    db = _store(tmp_path)
    _copy_run(db, GRID, "c0ffee00")
    answer = tmp_path / "compare.json"
    assert _main(db, "compare", GRID, "c0ffee00", "--json", str(answer)) == 0
    printed = _flat(capsys.readouterr().out)
    assert "the fastest measured." in printed and " best." not in printed
    document = json.loads(answer.read_text())[0]
    assert document["best"] == {GRID: None, "c0ffee00": None}  # neither recommends it
    assert {f["verdict"] for f in document["fastest"].values()} == {"fastest measured"}


# ------------------------------------------------- intervals: their level, and their bounds


def test_an_interval_that_bounds_nothing_is_said_so():
    # a steps change, a compare row, a gain in words, a trial's cell
    assert change_text(Comparison(0.65, (0.0, 1.8), 0.4, False), 0) == "−35% [≤ +80]"
    assert change_text(Comparison(1.0, (1e-9, 1e9), 0.9, False), 0) == f"0% [{NOT_BOUNDED}]"
    assert ratio_change_text(1.1, 0.9, 3e40) == "+10.0% [≥ -10.0%]"
    assert ratio_change_text(1.1, 0.9, 1.3) == "+10.0% [-10.0%, +30.0%]"
    said = gain_interval_words(1.0, (-1.5, 4e30), "minimize")
    assert said == f"2× faster (time −50.0%; 95% CI {NOT_BOUNDED})"
    assert interval_cell((-1.2, 0.5), "maximize") == "≤ +50.0%"
    assert "more than doubled" not in gain_interval_words(0.3, (-1.2, 0.5), "minimize")
    assert bounds(0.8, 1.2) == (True, True)
    assert bounds(0.0, 1.8) == (False, True)  # a t interval cut at zero
    assert bounds(0.5, 2.1e30) == (True, False)
    assert bounds(0.9, 0.9) == (False, False)  # one measurement a side: no spread


def test_a_class_interval_that_bounds_nothing_is_not_printed_as_numbers(tmp_path):
    # Two measurements a side at a Bonferroni level: the interval of the issue.
    results = build_results(Store(f"sqlite:///{_store(tmp_path)}"), SWEEP)
    loose = ClassChange(0, 0.69, 2.1e-30, 2149371601747197156277784412160.0, 1.0,
                        ClassVerdict.NO_DIFFERENCE, False)
    tight = ClassChange(2, 0.5, 0.4, 0.6, 0.001, ClassVerdict.FASTER, False)
    rows = [ClassRow("c1", "SELECT a FROM t WHERE id = ?", 10, 0.8, 1.0, None, 0.0,
                     [loose, tight])]
    results = replace(results, statement_classes=ClassComparison(1, rows, 0, 0))
    grid = class_grid(results)
    assert grid is not None
    cells = [cell.plain for cell in grid.rows[0]]
    assert cells[-2] == f"0.69× [{NOT_BOUNDED}] n.s." and cells[-1] == "0.50× [0.40–0.60] faster"
    assert not any("2149371601747197156277784412160" in cell for cell in cells)
    assert any(note.startswith("≤ x or ≥ x") and "too few measurements" in note
               for note in class_notes(results))
    assert "hold at 95% for the whole table" in grid.title


def test_a_single_measurement_has_no_interval_rather_than_one_of_no_width(tmp_path):
    results = build_results(Store(f"sqlite:///{_store(tmp_path)}"), SWEEP)
    first = results.points[0]
    assert first.timed is not None and first.timed.median is not None
    median = first.timed.median
    one = replace(first, n=1, evidence=replace(first.timed, ci95=(median, median),
                                               samples=[median]))
    out = io.StringIO()
    print_report(replace(results, points=[one, *results.points[1:]]),
                 Console(file=out, width=200, color_system=None))
    row = next(line for line in out.getvalue().splitlines()
               if line.startswith(first.settings["read_buffer_size"] + " "))
    assert "no spread" in row and f"{num(median)}–{num(median)}" not in row


def test_compare_gives_its_intervals_at_the_runs_level(tmp_path, capsys):
    db = _store(tmp_path)
    _copy_run(db, SWEEP, "c0ffee00")
    for run in (SWEEP, "c0ffee00"):
        _edit_info(db, run, statistics={"confidence": 0.9})
    answer = tmp_path / "compare.json"
    assert _main(db, "compare", SWEEP, "c0ffee00", "--json", str(answer),
                 "--out", str(tmp_path / "page")) == 0
    printed = capsys.readouterr().out
    assert "change [90% CI]" in printed and "95% CI" not in printed
    assert "change [90% CI]" in (tmp_path / "page" / "report.md").read_text()
    assert {row["confidence"] for row in json.loads(answer.read_text())[0]["rows"]} == {0.9}


def test_the_movement_between_slices_gives_its_intervals_level():
    from knoblab import workloads
    from knoblab.records import Results
    from knoblab.report.text import slice_gain_text

    document = json.loads((GOLDEN / "golden-sysbench.json").read_text())
    for p in document["points"]:
        p["is_default"] = p["settings"]["innodb_buffer_pool_size"] == "16M"
    one = document["conclusion"]["by_slice"][0]
    one.update(finding="helps", versus_current={"ratio": 1.12, "ci95": [1.05, 1.2],
                                                "p_value": 0.01, "significant": True})
    document["statistics"]["confidence"] = 0.9
    results = Results.from_json(document, workloads.kind("sysbench").objective)
    assert results.conclusion.by_slice is not None
    said = slice_gain_text(results, results.conclusion.by_slice[0])
    assert said == "+12.0% tps [90% CI +5.0% to +20.0%], shown to help"


def test_the_movement_between_steps_runs_gives_its_level(tmp_path, capsys):
    db = _store(tmp_path)
    _copy_run(db, STEPS, "c0ffee00")
    assert _main(db, "compare", STEPS, "c0ffee00") == 0
    printed = _flat(capsys.readouterr().out)
    assert ("the change of the geometric means, with its interval at its table's level, which "
            "holds for that whole table: 99%") in printed


# ------------------------------------------------- a steps change, said for what it is


def test_a_steps_change_beside_medians_says_it_is_of_the_geometric_means(tmp_path):
    results = build_results(Store(f"sqlite:///{_store(tmp_path)}"), STEPS)
    assert results.steps is not None
    said = total_text(results, results.steps[0])
    # medians 0.0848 → 0.0463 s are 45% apart; the −51% is of the geometric means
    assert said.startswith("defaults → all steps: 0.0848 s → 0.0463 s (medians), −51% "
                           "[−71, −17] (geometric means, 99% CI), shown to help")
    durability = _flat("\n".join(step_durability_lines(results, results.steps[0])))
    assert "−47% time (geometric means), bought by giving up durability" in durability


# ------------------------------------------------- a replay's slice, as it is replayed


def _timed_log(sessions: int, span: int) -> str:
    """A slow log of `sessions` connections of one statement each, begun over `span` s."""
    out = ["/usr/sbin/mariadbd, Version: 10.11.19-MariaDB-log (Debian 12). started with:",
           "Tcp port: 0  Unix socket: /tmp/x/mysqld.sock", "Time\t\t    Id Command\tArgument"]
    for i in range(sessions):
        second = round(i * span / (sessions - 1))
        out += [f"# Time: 261125  5:{second // 60:02d}:{second % 60:02d}",
                "# User@Host: app[app] @ localhost []",
                f"# Thread_id: {10 + i}  Schema: shop  QC_hit: No",
                "# Query_time: 0.000100  Lock_time: 0.000000  Rows_sent: 1  Rows_examined: 1",
                "# Rows_affected: 0  Bytes_sent: 60",
                f"SET timestamp={1795582800 + second};", f"SELECT a FROM t WHERE id = {i};"]
    return "\n".join(out) + "\n"


@pytest.fixture
def capture(tmp_path: Path):
    log = tmp_path / "slow.log"
    log.write_text(_timed_log(8, 70))
    plan = plan_for(log, tmp_path / "home")
    assert plan.sessions == 8 and plan.span is not None and 60 < plan.span <= 70
    return log, plan


def test_a_slice_is_said_as_what_is_replayed(capture):
    log, plan = capture
    tiny = Slice.from_spec("1e-9%", plan)
    assert tiny.said(plan) == "12% of the sessions (1 of 8)"  # at least one is replayed
    hour = Slice.from_spec("1h", plan)
    assert hour.covers(plan) and not tiny.covers(plan)
    # the header describes the slice, not the whole log, and counts in words
    replay = ReplayWorkload(log=log, plan=plan, sessions=1000, slice=tiny)
    title = replay.describe()["title"]
    assert title == "replay of slow.log: a slice, 12% of the sessions (1 of 8) (1 at once), " \
                    "speed max"
    whole = ReplayWorkload(log=log, plan=plan, sessions=1000).describe()
    assert "8 statements, 1 class, 8 sessions (8 at once)" in whole["title"]
    assert ReplayWorkload.headline(whole, []).at_once == 8  # not the 1000 asked for


def test_a_slice_holding_the_whole_capture_says_so(capture, tmp_path, monkeypatch):
    log, _ = capture
    monkeypatch.setattr("knoblab.workloads.replay.client_binary", lambda: "sysbench")
    monkeypatch.setattr("knoblab.workloads.replay.knoblab_home", lambda: tmp_path / "home")
    made = ReplayWorkload.from_spec({"kind": "replay", "log": log.name, "slice": "1h",
                                     "sessions": 1000}, {}, {}, log.parent)
    said = " ".join(made.warnings)
    assert "slice = '1h' holds the whole capture (" in said and "all of it is replayed" in said
    assert "not all of it" not in said and "60 min" not in said
    assert "(8 at once)" in made.describe()["title"]


# ------------------------------------------------- a resume refused for what changed


def test_a_resume_over_a_replaced_dump_says_the_dump_changed(tmp_path):
    dump = tmp_path / "shop.sql"
    dump.write_text("CREATE TABLE t (id INT PRIMARY KEY);\nINSERT INTO t VALUES (1);\n")
    spec_file = tmp_path / "spec.toml"
    source = ('name = "resumed"\n[dataset]\ndump = "shop.sql"\ndatabase = "shop"\n'
              '[workload]\nkind = "query"\nsql = "SELECT COUNT(*) FROM t"\nrepetitions = 3\n'
              '[sweep]\nread_buffer_size = ["128K", "2M"]\n')
    spec_file.write_text(source)
    spec = parse_spec(tomllib.loads(source), source, base_dir=tmp_path)
    store = Store(f"sqlite:///{tmp_path / 'store.sqlite'}")
    run_id = store.create_run(
        name="resumed", experiment=Experiment.SWEEP, spec_source=source,
        server_binary="mariadbd", server_version="", point_list=[],
        info=RunInfo(workload=runner_checks.workload_info(spec), spec_dir=str(tmp_path)))
    store.set_status(run_id, RunStatus.INTERRUPTED)
    dump.write_text("CREATE TABLE t (id INT PRIMARY KEY);\nINSERT INTO t VALUES (1), (2);\n")
    with pytest.raises(UserError) as refused:
        runner.resume_run(run_id, store, tmp_path / "home", Quiet())
    said = str(refused.value)
    assert f"the dump it loads, {dump}, was replaced or changed" in said
    assert "script" not in said


def test_what_changed_in_a_workload_is_named_and_its_summary_is_not_a_change():
    from knoblab.words import workload_changes

    before = {"kind": "replay", "log": "/x/slow.log", "plan": {"statements": 8},
              "title": "replay of slow.log: 8 statements, 1 classes", "sessions": 8}
    # a title said otherwise by another version (and the at-once it adds) changes no work
    assert workload_changes(before, {**before, "title": "8 statements, 1 class",
                                     "at_once": 8}) == ""
    assert workload_changes(before, {**before, "plan": {"statements": 9}}) == \
        "the captured log it replays, /x/slow.log, changed"
    assert workload_changes(before, {**before, "sessions": 4}) == "its sessions changed"


# ------------------------------------------------- the trials the pruner kept


TIME = Goal("seconds", Metric(None, "s", "minimize"), True)
SPACE = Space((Dimension("sort_buffer_size", 32 * 1024, 64 * MB),))
BASELINE = {"sort_buffer_size": str(2 * MB)}


def _trial(number: int, size: str, log_ratios: list[float], state: str = "scored"
           ) -> TrialOutcome:
    return TrialOutcome(number, {"sort_buffer_size": size}, {"sort_buffer_size": size}, state,
                        sum(log_ratios) / len(log_ratios), log_ratios, (f"run-{number}",))


def test_the_trials_the_pruner_kept_are_said_to_lean_their_way():
    kept = _trial(1, str(8 * MB), [-0.30, -0.10, -0.12, -0.09])
    pruned = [_trial(n, str(n * MB), [0.05], "pruned") for n in (2, 3, 4)]
    result = TuneResult("search", SPACE, dict(BASELINE),
                        [TrialOutcome(0, dict(BASELINE), {}, "baseline", 0.0, [], ()), kept,
                         *pruned], 60.0, "trials", [], 0.03, goal=TIME)
    out = io.StringIO()
    print_tune(result, Console(file=out, width=300))
    printed = _flat(out.getvalue())
    assert "4, kept" in printed
    assert ("Kept: the pruner measured these trials further because their first measurements "
            "were among the best; their intervals include those measurements") in printed
    document = tune_document(result, [], "", {})
    assert any("lean in the trials' favour" in note for note in document.tables[0].notes)
    assert [t["kept"] for t in tune_json(result)["trials"]] == [False, True, False, False, False]
    # no pruning, no selection: nothing to say
    alone = replace(result, trials=result.trials[:2])
    out = io.StringIO()
    print_tune(alone, Console(file=out, width=300))
    assert ", kept" not in out.getvalue() and "Kept:" not in out.getvalue()


# ------------------------------------------------- knoblab runs, for people


def _long_study(store: Store) -> None:
    """A finished study recommending many settings, stored as knoblab tune stores one."""
    changes = {"innodb_buffer_pool_size": str(320 * MB), "innodb_log_file_size": str(96 * MB),
               "sort_buffer_size": str(4 * MB), "join_buffer_size": str(2 * MB),
               "read_rnd_buffer_size": str(1 * MB), "tmp_table_size": str(64 * MB),
               "max_heap_table_size": str(64 * MB), "key_buffer_size": str(32 * MB)}
    trial = TrialOutcome(1, dict(changes), dict(changes), "scored", -0.2, [-0.2, -0.21],
                         ("run-1",))
    space = Space(tuple(Dimension(name, 1 * MB, 512 * MB) for name in changes))
    validated = Validation(trial, "run-2", "better", 0.22, (0.15, 0.3), 6)
    result = TuneResult("long", space, {}, [trial], 600.0, "trials", [validated], 0.03,
                        goal=TIME)
    store.save_study("long", status=RunStatus.DONE, spec_source="", result=result.to_json(),
                     info={"trials": 1, "summary": "recommended: innodb_buffer_pool_size="
                           "335544320 (as an older knoblab stored it)"})


def test_runs_shows_a_recommendation_in_a_few_readable_lines(tmp_path, capsys):
    db = tmp_path / "store.sqlite"
    _long_study(Store(f"sqlite:///{db}"))
    assert _main(db, "runs") == 0
    printed = capsys.readouterr().out
    row = _flat(printed)
    assert "innodb_buffer_pool_size=320M" in row and "335544320" not in row
    assert "and 6 more" in row
    assert "1 trial; recommended" in row  # counts in the singular too
    assert len(printed.splitlines()) < 15, printed  # a row, not a paragraph


def test_a_steps_answer_gives_sizes_for_people(tmp_path):
    results = build_results(Store(f"sqlite:///{_store(tmp_path)}"), STEPS)
    assert results.steps is not None
    rows = results.steps[0].rows
    bytes_rows = [replace(r, change={"innodb_buffer_pool_size": str(320 * MB)}) if r.step == 1
                  else r for r in rows]
    steps = [replace(results.steps[0], rows=bytes_rows), *results.steps[1:]]
    said = answer_text(replace(results, steps=steps))
    assert "innodb_buffer_pool_size=320M" in said and "335544320" not in said


# ------------------------------------------------- what a killed run leaves, reaped


CHILD = """
import sys, time
from pathlib import Path
from knoblab.server.binary import find_binary
from knoblab.server.sandbox import Sandbox
server = Sandbox(find_binary(), Path(sys.argv[1]), {}, home=Path(sys.argv[2]))
server.start()
print(server.dir, flush=True)
time.sleep(600)
"""


@pytest.fixture(scope="module")
def base_data(binary, knoblab_home: Path) -> Path:
    from knoblab.server.sandbox import base_template

    return base_template(binary, knoblab_home) / "data"


@pytest.mark.server
def test_runs_reaps_the_sandbox_folders_of_a_killed_run_and_says_what_it_freed(
        binary, base_data, tmp_path, monkeypatch, capsys):
    from knoblab.server.sandbox import Sandbox

    home = tmp_path / "home"
    home.mkdir()
    child = subprocess.Popen([sys.executable, "-c", CHILD, str(base_data), str(home)],
                             stdout=subprocess.PIPE, text=True,
                             cwd=Path(__file__).resolve().parents[1])
    try:
        left = Path(child.stdout.readline().strip())
        assert left.is_dir(), f"the child did not start a sandbox (exit {child.poll()})"
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=10)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
        child.stdout.close()
    held = sum(f.stat().st_size for f in left.rglob("*") if f.is_file())
    assert held > 10_000_000  # its copy of the data
    # A template the killed knoblab was building, and one this (live) process is building.
    building = home / "templates" / "mariadbd-x" / f"dump-1.building-{child.pid}"
    ours = home / "templates" / "mariadbd-x" / f"dump-2.building-{os.getpid()}"
    for folder in (building, ours):
        (folder / "data").mkdir(parents=True)
        (folder / "data" / "t.ibd").write_bytes(b"x" * 2_000_000)
    held += 2_000_000
    live = Sandbox(binary, base_data, {}, home=home)  # this process's: alive, never reaped
    live.start()
    try:
        monkeypatch.setenv("KNOBLAB_HOME", str(home))
        assert cli.main(["--store", f"sqlite:///{tmp_path / 'store.sqlite'}", "runs"]) == 0
        said = _flat(capsys.readouterr().err)
        assert not left.exists() and not building.exists()
        assert live.dir.is_dir() and live.process is not None and live.process.poll() is None
        assert ours.is_dir()
        assert f"removed 2 folders left by a killed knoblab under {home} (its sandboxes' " \
               f"copies of the data, or templates it was building: {held / 1e6:,.0f} MB " \
               "freed)" in said
        # nothing left: nothing said
        assert cli.main(["--store", f"sqlite:///{tmp_path / 'store.sqlite'}", "runs"]) == 0
        assert "left by a killed knoblab" not in capsys.readouterr().err
    finally:
        live.stop()
