"""Tests for the report of a steps run (settings applied one on top of the other) and of
servers compared, on hand-built results shaped like the article's experiment: defaults 9.18 s,
then five settings applied one by one down to 6.50 s (−29%), then another server build measured
with the same settings. Written as the results JSON and read with Results.from_json."""

import copy
import io
import json
from pathlib import Path

import pytest
from rich.console import Console

from knoblab import workloads
from knoblab.records import Results
from knoblab.report import (
    conclusion_text,
    durability_lines,
    print_report,
    server_lines,
    write_charts,
)
from knoblab.report.text import interaction_text

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _typed(result: dict) -> Results:
    kind = result["workload"].get("kind", "query")
    return Results.from_json(result, workloads.kind(kind).objective)
GOLDEN = Path(__file__).parent / "data" / "golden"
FLUSH = "innodb_flush_log_at_trx_commit"
CRASH = "a crash can lose the last second of committed transactions"

# (label, change, median, verdict, ratio to the previous step, Holm p)
ARTICLE = [
    ("defaults", {}, 9.18, "base", None, None),
    (f"+ {FLUSH}=0", {FLUSH: "0"}, 8.45, "gain", 8.45 / 9.18, 0.004),
    ("+ innodb_buffer_pool_size=700M", {"innodb_buffer_pool_size": "700M"}, 6.54, "gain",
     6.54 / 8.45, 0.001),
    ("+ key_buffer_size=1000M", {"key_buffer_size": "1000M"}, 6.59, "no measurable effect",
     6.59 / 6.54, 0.62),
    ("+ innodb_log_file_size=175M", {"innodb_log_file_size": "175M"}, 6.50,
     "no measurable effect", 6.50 / 6.59, 0.55),
    ("+ innodb_log_buffer_size=4M", {"innodb_log_buffer_size": "4M"}, 6.53,
     "no measurable effect", 6.53 / 6.50, 0.71),
]


def _compare(ratio, p, significant):
    return {"ratio": ratio, "ci95": [ratio - 0.02, ratio + 0.02], "p_value": p,
            "significant": significant}


def _point_verdict(step_verdict):
    """A step's point as a run judges it among the others: one not measured fails."""
    return "failed" if step_verdict in ("failed", "unavailable", "changes nothing") \
        else "inconclusive"


def _steps_result(table=ARTICLE, *, alone=False, slice_=None, servers=None):
    points, rows = [], []
    settings = {}
    base = table[0][2]
    for step, (label, change, median, verdict, ratio, p) in enumerate(table):
        settings = {**settings, **change}
        points.append({"settings": dict(settings), "config": dict(settings), "step": step,
                       "role": "cumulative", "change": change, "label": label, "n": 5,
                       "failed": 0, "median": median, "samples": [median] * 5,
                       "verdict": _point_verdict(verdict), "errors": []})
        rows.append({
            "step": step, "label": label, "change": change, "point": step,
            "center": median, "ci95": [median * 0.98, median * 1.02], "n": 5,
            "vs_previous": None if ratio is None else _compare(ratio, p, verdict != "base" and
                                                                verdict != "no measurable "
                                                                "effect"),
            "vs_base": None if ratio is None else _compare(median / base, p, True),
            "alone": None, "verdict": verdict,
            "durability": [f"{FLUSH} = 0: {CRASH}"] if FLUSH in settings else [],
            "note": None})
    if alone:
        for row in rows[1:]:
            ratio = 0.9 if row["step"] != 3 else 1.01
            row["alone"] = {"point": len(points), "center": base * ratio,
                            "vs_base": _compare(ratio, 0.01, ratio < 0.97)}
            points.append({**points[row["step"]], "role": "alone"})
    total = _compare(6.53 / 9.18, 0.0004, True)
    result = {
        "run_id": "5a1b2c3d", "name": "ezpublish-writes", "kind": "steps", "status": "done",
        "objective": {"metric": "seconds", "direction": "minimize"},
        "server": {"binary": "/usr/sbin/mariadbd", "version": "10.11.19-MariaDB-0+deb12u1"},
        "workload": {"kind": "query", "sql": "CALL write_test()", "cache": "warm",
                     "repetitions": 5},
        "dataset": {"kind": "scan-table", "rows": 200000, "engine": "InnoDB"},
        "knobs": [], "slices": [], "regime": "IO-bound",
        "statistics": {"test": "welch-log", "alpha": 0.05, "min_effect": 0.03,
                       "confidence": 0.95},
        "points": points,
        "steps": [{"slice": slice_ or {}, "rows": rows, "total": total,
                   "interaction": {"cumulative": 0.71, "product_of_alone": 0.80} if alone
                   else None}],
        "servers": servers or [{"label": "mariadbd", "binary": "/usr/sbin/mariadbd",
                                "version": "10.11.19-MariaDB-0+deb12u1",
                                "compile": {"machine": "x86_64", "os": "debian-linux-gnu",
                                            "compiler": None},
                                "missing": [], "error": None}],
        "warnings": [],
    }
    return result


@pytest.fixture
def steps():
    return _steps_result()


def _two_servers(result):
    """The article's last line: another build measured with all the settings."""
    result["servers"] = [
        {"label": "icc", "binary": "/opt/icc/mariadbd", "version": "10.11.19-MariaDB",
         "compile": {"machine": "x86_64", "os": "linux", "compiler": "ICC 2021.1"},
         "missing": [], "error": None},
        {"label": "gcc", "binary": "/usr/sbin/mariadbd", "version": "10.11.19-MariaDB-0+deb12u1",
         "compile": {"machine": "x86_64", "os": "debian-linux-gnu", "compiler": "GCC 12.2.0"},
         "missing": ["innodb_foo"], "error": None},
        {"label": "old", "binary": "/opt/old/mysqld", "version": None, "compile": {},
         "missing": [], "error": "does not start: unknown variable 'innodb_log_file_size'"},
    ]
    result["servers_compared"] = [{
        "at": "step 5: + innodb_log_buffer_size=4M", "slice": {},
        "rows": [
            {"binary": "icc", "point": 5, "center": 6.53, "ci95": [6.40, 6.66], "n": 5,
             "ratio_to_best": 1.0, "p_value": None, "verdict": "best"},
            {"binary": "gcc", "point": 11, "center": 7.70, "ci95": [7.55, 7.85], "n": 5,
             "ratio_to_best": 1.18, "p_value": 0.01, "verdict": "worse"},
        ],
        "significant": True,
    }]
    return result


def _render(result, width=160) -> str:
    console = Console(record=True, width=width, color_system=None, file=io.StringIO())
    print_report(_typed(result), console)
    return console.export_text()


def _row(out: str, step: int) -> str:
    """The table line of a step (the first table when it is split), label checked."""
    line = next(line for line in out.splitlines() if line.split()[:1] == [str(step)])
    assert ARTICLE[step][0] in line
    return line


def _first(out: str, word: str) -> str:
    return next(line for line in out.splitlines() if line.split()[:1] == [word])


# --------------------------------------------------------------------------- terminal


def test_steps_table_lists_every_step_with_its_verdict(steps):
    out = _render(steps)
    for header in ("step", "setting added", "median s", "vs previous", "vs defaults",
                   "p (Holm)", "verdict"):
        assert header in out
    assert "alone vs" not in out
    for label, *_ in ARTICLE[1:]:
        assert label in out
    row = _row(out, 2)
    assert "6.54 [6.41–6.67]" in row
    assert "−22.6% [−25, −21]" in row  # 6.54 / 8.45 against the step before
    assert "−28.8% [−31, −27]" in row  # 6.54 / 9.18 against the defaults
    assert "0.001" in row and row.rstrip().endswith("shown to help")
    # +0.8% [−1.2, +2.8]: within ±3% of the step before
    assert _row(out, 3).rstrip().endswith("shown the same (within ±3%): leave it out")
    # −1.4% [−3.4, +0.6]: neither on one side of 0 nor within ±3%
    assert _row(out, 4).rstrip().endswith("not shown either way: leave it out")
    defaults = _row(out, 0)
    assert "9.18 [9.00–9.36]" in defaults and "—" in defaults


def test_significant_loss_is_left_out(steps):
    steps["steps"][0]["rows"][3]["verdict"] = "loss"
    out = _render(steps)
    assert _row(out, 3).rstrip().endswith("shown to hurt: leave it out")
    assert "Shown to hurt, leave out: key_buffer_size=1000M." in conclusion_text(_typed(steps))


def test_durability_step_is_marked_and_gets_its_line(steps):
    out = _render(steps)
    assert "shown to help — gives up durability" in _row(out, 1)
    # later steps keep the setting but do not buy durability themselves
    assert "durability" not in _row(out, 2)
    line = (f"step 1 (+ {FLUSH}=0): −8% time (geometric means), bought by giving up "
            f"durability — {CRASH}.")
    assert line in " ".join(out.split())
    assert durability_lines(_typed(steps)) == [line]
    assert out.count("bought by giving up durability") == 1


def test_total_line_and_base_label(steps):
    out = _render(steps)
    # the levels are medians, the change the test's geometric means: each said as such
    assert ("defaults → all steps: 9.18 s → 6.53 s (medians), −29% [−31, −27] (geometric "
            "means, 95% CI), shown to help (p < 0.001).") in " ".join(out.split())
    for row in steps["steps"][0]["rows"]:
        if row["step"] == 0:
            row["label"] = "base"
    out = _render(steps)
    assert "vs base" in out and "vs defaults" not in out
    assert "base → all steps: 9.18 s" in out


def test_alone_column_and_interaction_sentence():
    result = _steps_result(alone=True)
    # The table's intervals hold together: the total's lies wholly below the product's.
    result["steps"][0]["interaction"].update(cumulative_ci=[0.69, 0.73],
                                             product_ci=[0.76, 0.84])
    out = _render(result)
    assert "alone vs defaults" in out
    assert "−10.0% [−12, −8]" in _row(out, 2)
    assert "+1.0% [−1.0, +3.0]" in _row(out, 3)
    assert ("Each change measured alone from the defaults, multiplied together, predicts −20% "
            "time; applied one on top of the other they gave −29% (geometric means): together "
            "they do more than each alone predicts, shown by their intervals: they reinforce "
            "each other.") in " ".join(out.split())


@pytest.mark.parametrize(("cumulative", "product", "said"), [
    # two placebos of wide intervals: the gap between the estimates is no evidence
    ((0.40, 1.60), (0.30, 1.80), "whether they interact is not shown either way: their "
                                 "intervals (99%, for the whole table) overlap."),
    ((1.05, 1.20), (0.80, 0.98), "together they do less than each alone predicts, shown by "
                                 "their intervals: they partly buy the same gain"),
    ((0.995, 1.005), (0.99, 1.01), "they add up independently (within ±3%, shown by their "
                                   "intervals)"),
])
def test_an_interaction_is_said_only_where_the_intervals_show_it(cumulative, product, said):
    result = _steps_result(alone=True)
    table = result["steps"][0]
    table["confidence"] = 0.99
    table["interaction"] = {"cumulative": sum(cumulative) / 2, "product_of_alone": 0.80,
                            "cumulative_ci": list(cumulative), "product_ci": list(product)}
    results = _typed(result)
    assert results.steps is not None
    text = interaction_text(results, results.steps[0])
    assert said in text
    for claim in ("reinforce each other", "partly buy the same gain", "add up independently"):
        assert claim in said or claim not in text, text


def test_an_interaction_without_its_intervals_is_not_claimed():
    """Results stored before the intervals were kept: the estimates alone, said as such."""
    results = _typed(_steps_result(alone=True))
    assert results.steps is not None
    text = interaction_text(results, results.steps[0])
    assert text.endswith("whether they interact was not tested (point estimates).")
    assert "reinforce" not in text and "partly buy" not in text


def test_failed_and_unavailable_steps(steps):
    rows = steps["steps"][0]["rows"]
    rows[4].update(verdict="failed", center=None, ci95=None, vs_previous=None, vs_base=None)
    steps["points"][4]["errors"] = ["ERROR 2013: Lost connection\nmore"]
    rows[5].update(verdict="unavailable", center=None, ci95=None, vs_previous=None,
                   vs_base=None, note="not on this server: innodb_log_buffer_size")
    out = _render(steps)
    assert _row(out, 4).rstrip().endswith("failed")
    assert "not on this server" in _row(out, 5)
    assert "step 4 (+ innodb_log_file_size=175M): failed — ERROR 2013: Lost connection." in out
    assert ("step 5 (+ innodb_log_buffer_size=4M): not on this server: "
            "innodb_log_buffer_size.") in out
    assert "defaults → step 3: 9.18 s → 6.59 s" in out
    text = conclusion_text(_typed(steps))
    assert "Failed: innodb_log_file_size=175M." in text
    assert "Not on this server: innodb_log_buffer_size=4M." in text


def test_narrow_console_keeps_step_labels(steps):
    wide = _steps_result(alone=True)
    for result in (steps, wide):
        out = _render(result, 80)
        assert max(len(line) for line in out.splitlines()) <= 80
        assert "…" not in out
        for label, *_ in ARTICLE:
            assert label in out  # unbroken
        assert "loss" not in out or "leave" in out
        assert "defaults → all steps" in " ".join(out.split())
    out = _render(wide, 80)
    assert "alone vs" in out and "vs previous" in out


def test_width_120_fits_in_one_table(steps):
    out = _render(steps, 120)
    assert max(len(line) for line in out.splitlines()) <= 120
    assert out.count("setting added") == 1
    assert "…" not in out


def test_sysbench_steps_use_mean_tps_and_gain_upwards(steps):
    steps["objective"] = {"metric": "tps", "direction": "maximize"}
    steps["statistics"]["test"] = "welch"  # a throughput's: its changes are of the means shown
    steps["workload"] = {"kind": "sysbench", "test": "oltp_write_only", "threads": 8,
                         "duration": 60, "repetitions": 3}
    steps["steps"][0]["slice"] = {"threads": "8"}
    steps["steps"][0]["total"] = _compare(1.25, 0.002, True)
    out = _render(steps)
    assert "mean tps" in out and "threads=8" in out
    assert "sysbench oltp_write_only, 8 threads" in out.splitlines()[0]
    assert "All steps together: +25.0% tps: shown to help." in conclusion_text(_typed(steps))
    assert conclusion_text(_typed(steps)).startswith("threads=8: Steps shown to help")


# --------------------------------------------------------------------------- servers


def test_servers_compared_table_and_lacks_lines(steps):
    result = _two_servers(steps)
    out = _render(result)
    assert "servers compared at step 5 (+ innodb_log_buffer_size=4M)" in out
    gcc = _first(out, "gcc")
    for part in ("10.11.19-MariaDB-0+deb12u1", "GCC 12.2.0", "7.70 [7.55–7.85]", "+18.0%",
                 "0.01", "worse"):
        assert part in gcc
    assert "best" in _first(out, "icc")
    assert ("gcc lacks innodb_foo: steps using it were left out on that server") in out
    assert ("old (/opt/old/mysqld) was left out: does not start: unknown variable "
            "'innodb_log_file_size'") in out
    text = conclusion_text(_typed(result))
    assert ("Servers compared at step 5 (+ innodb_log_buffer_size=4M): best icc (6.53 s); "
            "shown slower: gcc (+18% time).") in text
    narrow = _render(result, 80)
    assert max(len(line) for line in narrow.splitlines()) <= 80
    assert "7.70" in narrow and "worse" in narrow


def test_servers_compared_on_a_sweep_run():
    """Servers are reported whatever the kind of run: a sweep keeps its table and adds them."""
    from tests.test_report import _point, _result

    sweep = _result([_point("128K", "best", 0.612, ratio=1.0, default=True),
                     _point("2M", "worse", 0.661, ratio=1.08, p=0.004)])
    before = _render(sweep)
    sweep = _two_servers(sweep)
    sweep["servers_compared"][0]["at"] = "read_buffer_size=128K"
    out = _render(sweep)
    assert out.startswith(before.rstrip("\n"))
    assert "servers compared at read_buffer_size=128K" in out
    assert "gcc lacks innodb_foo: points using it were left out on that server" in out
    assert server_lines(_typed(sweep))[0].startswith("gcc lacks")
    assert "Servers compared" not in conclusion_text(_typed(sweep))  # sweeps conclude as before


def test_servers_not_significant_sentence(steps):
    result = _two_servers(steps)
    entry = result["servers_compared"][0]
    entry["significant"] = False
    entry["rows"][0]["verdict"] = entry["rows"][1]["verdict"] = "inconclusive"
    assert ("No server is shown faster than another here (not shown either way)."
            in _render(result))
    assert ("at step 5 (+ innodb_log_buffer_size=4M): not shown either way — no server is "
            "shown faster than another.") in conclusion_text(_typed(result))
    entry["rows"][0]["verdict"] = entry["rows"][1]["verdict"] = "equivalent"
    assert "the servers are shown the same (within ±3%)." in conclusion_text(_typed(result))


# --------------------------------------------------------------------------- conclusion


def test_conclusion_names_gains_leave_outs_and_total(steps):
    assert conclusion_text(_typed(steps)) == (
        f"Steps shown to help: {FLUSH}=0 (gives up durability), "
        "innodb_buffer_pool_size=700M. Shown the same (within ±3%), leave out: "
        "key_buffer_size=1000M, innodb_log_buffer_size=4M. Not shown either way, leave out: "
        "innodb_log_file_size=175M. All steps together: time −28.9% (geometric means): shown "
        "to help.")


def test_conclusion_per_slice():
    result = _steps_result(slice_={"binary": "gcc"})
    other = copy.deepcopy(result["steps"][0])
    other["slice"] = {"binary": "icc"}
    for row in other["rows"][1:]:
        row["verdict"] = "no measurable effect"
    other["total"]["significant"] = False
    result["steps"].append(other)
    text = conclusion_text(_typed(result))
    assert text.startswith(f"binary=gcc: Steps shown to help: {FLUSH}=0")
    assert "binary=icc: No step was shown to help." in text
    assert text.endswith("All steps together: time −28.9% (geometric means): not shown either "
                         "way.")


# --------------------------------------------------------------------------- charts


def _is_png(path, min_bytes=20_000):
    data = path.read_bytes()
    return data[:8] == PNG_MAGIC and len(data) > min_bytes


def test_waterfall_chart(steps, tmp_path):
    results = _typed(steps)
    before = copy.deepcopy(results)
    paths = write_charts(results, tmp_path)
    assert paths == [tmp_path / "steps-waterfall.png"]
    assert _is_png(paths[0])
    assert results == before  # presentation must not modify the results


def test_waterfall_per_slice_alone_failed_and_servers_chart(tmp_path):
    result = _two_servers(_steps_result(alone=True, slice_={"binary": "icc"}))
    other = copy.deepcopy(result["steps"][0])
    other["slice"] = {"binary": "gcc"}
    other["rows"][3].update(verdict="failed", center=None, ci95=None, vs_previous=None)
    other["rows"][4].update(verdict="loss")
    result["steps"].append(other)
    names = [p.name for p in write_charts(_typed(result), tmp_path)]
    assert names == ["steps-waterfall-binary-icc.png", "steps-waterfall-binary-gcc.png",
                     "servers.png"]
    assert all(_is_png(tmp_path / name) for name in names)


def test_how_the_best_value_moves_between_slices():
    """Per slice its best, and each slice's best as measured in the others: the answer to
    "does the value best on my test box hold on production's platform?"."""
    from knoblab.report.tables import movement_grid, slice_places

    result = json.loads((GOLDEN / "golden-sysbench.json").read_text())
    # threads=1: 64M best, 16M shown 12% worse; threads=2: 16M best, 64M equivalent to it.
    for p in result["points"]:
        p["is_default"] = p["settings"]["innodb_buffer_pool_size"] == "16M"
    one, two = result["conclusion"]["by_slice"]
    # Each leader recommended (the default shown worse, or the default itself): best.
    one.update(significant=True, best={"innodb_buffer_pool_size": "64M", "threads": "1"},
               recommended={"innodb_buffer_pool_size": "64M", "threads": "1"})
    two.update(best={"innodb_buffer_pool_size": "16M", "threads": "2"},
               recommended={"innodb_buffer_pool_size": "16M", "threads": "2"})
    result["points"][0].update(verdict="worse", p_value=0.01)
    result["points"][2].update(verdict="best")
    result["points"][1].update(verdict="best")
    result["points"][3].update(verdict="equivalent", p_equivalent=0.02)
    grid = movement_grid(slice_places(_typed(result)))
    assert grid is not None
    assert grid.headers[1] == "highest tps measured here"
    assert grid.headers[3:] == ["threads=1's highest tps (64M)", "threads=2's highest tps (16M)"]
    rows = [[cell.plain for cell in row] for row in grid.rows]
    assert rows[0][:2] == ["threads=1", "64M, best"]
    assert rows[0][3] == "—" and rows[0][4] == "shown worse here, by 12%"
    assert rows[1][:2] == ["threads=2", "16M, best"]
    assert rows[1][2] == "the current configuration is the fastest"
    assert rows[1][3] == "equivalent here" and rows[1][4] == "—"
    out = _render(result)
    assert "How the highest-tps value moves" in out and "shown worse here, by 12%" \
        in out
    # One slice, or nothing swept but the slices: no table.
    result["conclusion"]["by_slice"] = [one]
    assert movement_grid(slice_places(_typed(result))) is None


def test_how_the_steps_effects_move_between_slices():
    """A steps run on two platforms: per step, what it did on each, the total, and which
    settings each keeps (the file-system study: a log flush that helps on one only)."""
    from knoblab.report.tables import movement, report_tables

    result = _steps_result(slice_={"machine.datadir": "/mnt/ext4"})
    assert movement(_typed(result)) is None  # one slice: nothing moves
    other = copy.deepcopy(result["steps"][0])
    other["slice"] = {"machine.datadir": "/mnt/xfs"}
    other["rows"][1].update(verdict="no measurable effect",
                            vs_previous=_compare(0.99, 0.6, False))
    other["rows"][3].update(verdict="failed", center=None, ci95=None, vs_previous=None)
    result["steps"].append(other)
    grid = movement(_typed(result))
    assert grid is not None
    assert grid.headers == ["step", "machine.datadir=/mnt/ext4", "machine.datadir=/mnt/xfs"]
    rows = {row[0].plain: [cell.plain for cell in row[1:]] for row in grid.rows}
    assert rows["defaults"] == ["9.18 s", "9.18 s"]
    flush = rows[f"1: + {FLUSH}=0"]
    assert flush[0].startswith("−8%") and "shown to help" in flush[0]
    assert flush[1].startswith("−1%") and "help" not in flush[1]
    assert rows["3: + key_buffer_size=1000M"][1] == "failed"
    assert rows["all steps against the defaults"][0].startswith("−29%")
    kept = rows["kept here (measurably helped)"]
    assert FLUSH in kept[0] and "innodb_buffer_pool_size=700M" in kept[0]
    assert FLUSH not in kept[1] and "innodb_buffer_pool_size=700M" in kept[1]
    # in the terminal after the steps tables, and among the report's tables
    out = _render(result, width=200)
    assert out.index("How the steps' effects move") > out.index("all steps")
    assert any(g.title.startswith("How the steps' effects move")
               for g in report_tables(_typed(result)))


def test_steps_runs_compared_say_what_each_step_did_in_each():
    """knoblab compare of two steps runs (two machines): the same table, a run a column."""
    from knoblab.report.tables import runs_movement

    first = _steps_result()
    other = _steps_result()
    other["run_id"] = "6b2c3d4e"
    other["steps"][0]["rows"][2].update(verdict="no measurable effect",
                                        vs_previous=_compare(1.0, 0.9, False))
    grid = runs_movement([_typed(first), _typed(other)])
    assert grid is not None
    assert grid.headers == ["step", "run 5a1b2c3d", "run 6b2c3d4e"]
    kept = next([c.plain for c in row[1:]] for row in grid.rows
                if row[0].plain.startswith("kept here"))
    assert "innodb_buffer_pool_size=700M" in kept[0]
    assert "innodb_buffer_pool_size=700M" not in kept[1]
