"""Tests for knoblab.report on hand-built results (no server, no statistics): written as the
results JSON and read with Results.from_json, as a saved run would be."""

import copy
import dataclasses
import io
import itertools

import numpy as np
import pytest
from rich.console import Console

from knoblab import workloads
from knoblab.records import Results
from knoblab.report import (
    conclusion_text,
    durability_lines,
    explanation_lines,
    noise_text,
    point_label,
    print_report,
    slice_label,
    stalls_text,
    tied_text,
    write_chart,
    write_charts,
)

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _typed(result: dict) -> Results:
    kind = result["workload"].get("kind", "query")
    return Results.from_json(result, workloads.kind(kind).objective)


def _point(value, verdict, median, *, effective=None, ratio=None, p=None, default=False,
           n=5, failed=0, errors=(), settings=None):
    samples = [] if median is None else [median * f for f in (0.98, 0.99, 1.0, 1.01, 1.03)][:n]
    return {
        "settings": settings or {"read_buffer_size": value},
        "effective": {"read_buffer_size": effective or value} if settings is None else settings,
        "is_default": default, "n": n, "failed": failed,
        "median": median,
        "ci95": None if median is None else [median * 0.985, median * 1.02],
        "mean": median, "stdev": None if median is None else median * 0.01,
        "samples": samples, "ratio_to_best": ratio, "p_value": p, "verdict": verdict,
        "regime": None if median is None else "CPU-bound",
        "cpu_share": 0.97, "iowait_share": 0.0, "read_mb": 0.0, "errors": list(errors),
    }


def _result(points, knobs=("read_buffer_size",), direction="minimize"):
    return {
        "run_id": "a1b2c3d4", "name": "read-buffer-scan", "kind": "sweep", "status": "done",
        "objective": {"metric": "seconds", "direction": direction},
        "server": {"binary": "/usr/sbin/mariadbd", "version": "10.11.19-MariaDB-0+deb12u1"},
        "workload": {"kind": "query", "sql": "SELECT SUM(a) FROM t", "cache": "warm",
                     "repetitions": 5},
        "dataset": {"kind": "scan-table", "rows": 2000000, "engine": "MyISAM",
                    "bytes": 92903172},
        "knobs": list(knobs), "regime": "CPU-bound",
        "statistics": {"test": "welch-log", "alpha": 0.05, "min_effect": 0.03,
                       "confidence": 0.95},
        "points": points,
        "conclusion": {"significant": True, "best": {}, "recommended": {}, "text": "IGNORED"},
    }


@pytest.fixture
def sweep():
    return _result([
        _point("8200", "equivalent", 0.618, effective="8192", ratio=1.0098, p=0.41),
        _point("128K", "best", 0.612, effective="131072", ratio=1.0, default=True),
        _point("2M", "worse", 0.661, effective="2097152", ratio=1.08, p=0.004),
        _point("8M", "worse", 0.686, effective="8388608", ratio=1.121, p=0.0021),
        _point("32M", "failed", None, n=0, failed=5,
               errors=["ERROR 1041 (HY000): Out of memory\nsecond line", "other"]),
    ])


# --------------------------------------------------------------------------- conclusion


def test_conclusion_names_best_worse_range_default_and_failures(sweep):
    text = conclusion_text(_typed(sweep))
    assert "IGNORED" not in text
    assert text.startswith("Best: 128K (0.612 s).")
    assert "Shown the same as it (within ±3%): 8200." in text
    assert "Worse: 2M, 8M — 8–12% slower (Holm-adjusted p ≤ 0.004)." in text
    assert "The default (128K) is the fastest measured: keep it." in text
    assert "Failed: 32M (5 of 5 runs) — ERROR 1041 (HY000): Out of memory." in text
    assert "second line" not in text


def test_conclusion_default_worse_suggests_best(sweep):
    sweep["points"][1]["is_default"] = False
    sweep["points"][2]["is_default"] = True  # 2M, ratio 1.08
    text = conclusion_text(_typed(sweep))
    assert ("128K instead of the default (2M): shown to help, time −7.4% (Holm-adjusted "
            "p = 0.004): set 128K.") in text
    assert "keep" not in text


def test_conclusion_single_percentage_and_maximize_wording(sweep):
    del sweep["points"][3]  # only 2M is worse now
    sweep["points"][2]["ratio_to_best"] = 0.92  # 8% lower throughput
    results = _typed(sweep)
    # no kind has this objective: the records say it
    qps = dataclasses.replace(results.objective, metric="qps", unit="qps", direction="maximize")
    text = conclusion_text(dataclasses.replace(results, objective=qps))
    assert "Best: 128K (0.612 qps)." in text
    assert "Worse: 2M — 8% lower (Holm-adjusted p ≤ 0.004)." in text
    assert "slower" not in text


def test_conclusion_all_equivalent_says_they_perform_the_same():
    result = _result([
        _point("64K", "equivalent", 0.615, ratio=1.005, p=0.7),
        _point("128K", "equivalent", 0.612, default=True, ratio=1.0),
        _point("256K", "equivalent", 0.619, ratio=1.011, p=0.5),
    ])
    text = conclusion_text(_typed(result))
    assert text == ("These values are shown the same (within ±3%; α = 0.05, n = 5 each): "
                    "keep the default (128K).")
    for p in result["points"]:
        p["is_default"] = False
    assert conclusion_text(_typed(result)).endswith("keep the current value.")


def test_conclusion_too_noisy_to_tell_says_so_and_how_much_more_would_decide():
    result = _result([
        _point("64K", "equivalent", 0.615, ratio=1.005, p=0.7),
        _point("128K", "inconclusive", 0.612, default=True, ratio=1.0),
        _point("256K", "inconclusive", 0.659, ratio=1.077, p=0.2),
    ])
    result["points"][2]["extra_rounds"] = 7
    text = conclusion_text(_typed(result))
    assert text.startswith("No value is shown better than another, and this machine was too "
                           "noisy to tell whether they are the same (within ±3%; α = 0.05, "
                           "n = 5 each): keep the default (128K).")
    assert "The same as 128K, the fastest measured (within ±3%): 64K." in text
    assert "Undecided: 256K (about 7 more rounds would decide it)." in text
    assert "Best" not in text


def test_conclusion_partial_failure_is_reported():
    result = _result([
        _point("64K", "equivalent", 0.612, ratio=1.0, n=4, failed=1, errors=["lost connection"]),
        _point("128K", "equivalent", 0.615, ratio=1.005, p=0.7),
    ])
    text = conclusion_text(_typed(result))
    assert "n = 4–5" in text
    assert text.endswith("Failed: 64K (1 of 5 runs) — lost connection.")


def test_conclusion_all_failed():
    result = _result([_point("64K", "failed", None, n=0, failed=3, errors=["boom"])])
    assert conclusion_text(_typed(result)) == (
        "Every point failed: nothing to compare. Failed: 64K (3 of 3 runs) — boom."
    )


# --------------------------------------------------------------------------- grid helpers


def _grid():
    points = []
    combos = itertools.product(["64K", "128K", "1M"], ["256K", "2M"])
    for i, (rb, sb) in enumerate(combos):
        settings = {"read_buffer_size": rb, "sort_buffer_size": sb}
        if (rb, sb) == ("1M", "2M"):
            points.append(_point(None, "failed", None, n=0, failed=5, settings=settings,
                                 errors=["crash"]))
            continue
        median = 0.60 + 0.02 * i
        verdict = "best" if i == 0 else ("worse" if i >= 3 else "equivalent")
        points.append(_point(None, verdict, median, settings=settings, ratio=median / 0.60,
                             p=None if i == 0 else 0.01, default=(rb, sb) == ("128K", "2M")))
    return _result(points, knobs=("read_buffer_size", "sort_buffer_size"))


def test_point_label_one_knob_and_grid(sweep):
    results = _typed(sweep)
    assert point_label(results, results.points[1]) == "128K"
    grid = _typed(_grid())
    assert point_label(grid, grid.points[3]) == "read_buffer_size=128K, sort_buffer_size=2M"
    assert "Best: read_buffer_size=64K, sort_buffer_size=256K (0.600 s)." in conclusion_text(grid)


# --------------------------------------------------------------------------- terminal


def _render(result, width=140) -> str:
    console = Console(record=True, width=width, color_system=None, file=io.StringIO())
    print_report(_typed(result), console)
    return console.export_text()


def test_print_report_table_content(sweep):
    out = _render(sweep)
    title = out.splitlines()[0]
    for part in ("read-buffer-scan", "10.11.19-MariaDB", "SELECT SUM(a) FROM t", "warm",
                 "2,000,000 rows", "92.9 MB", "CPU-bound"):
        assert part in title
    for header in ("read_buffer_size", "applied", "median", "95% CI", "vs best", "p (Holm)",
                   "verdict", "regime"):
        assert header in out
    rows = {line.split()[0]: line for line in out.splitlines() if line.strip()}
    assert "8K*" in rows["8200"]
    assert "+1.0%" in rows["8200"] and "0.41" in rows["8200"]
    assert "128K" in rows["128K"] and "(default)" in rows["128K"] and "128K*" not in out
    assert "0.612" in rows["128K"] and "0.603–0.624" in rows["128K"] and "best" in rows["128K"]
    assert "2M " in rows["2M"] and "+8.0%" in rows["2M"] and "worse" in rows["2M"]
    assert "0.004" in rows["2M"]
    assert "+12.1%" in rows["8M"] and "0.0021" in rows["8M"]
    assert "failed" in rows["32M"] and "0 (5 failed)" in rows["32M"]
    assert "Worse: 2M, 8M" in out
    assert out.rstrip().endswith("* the server rounded or changed the requested value")


def test_print_report_no_footnote_when_values_applied_as_requested(sweep):
    sweep["points"][0]["effective"]["read_buffer_size"] = "8200"
    out = _render(sweep)
    assert "*" not in out
    assert "8200" in out


def test_print_report_colours_verdicts(sweep):
    buffer = io.StringIO()
    console = Console(file=buffer, width=140, force_terminal=True, color_system="standard")
    print_report(_typed(sweep), console)
    ansi = buffer.getvalue()
    assert "\x1b[32mbest" in ansi  # green
    assert ansi.count("\x1b[31mworse") == 2  # red
    assert "\x1b[35mfailed" in ansi  # magenta
    assert "\x1b[32mequivalent" not in ansi and "\x1b[31mequivalent" not in ansi


def test_print_report_non_size_knob_is_not_shown_as_size():
    result = _result([_point("1024", "best", 1.0, ratio=1.0)], knobs=("max_connections",))
    result["points"][0]["settings"] = {"max_connections": "1024"}
    result["points"][0]["effective"] = {"max_connections": "1024"}
    out = _render(result)
    assert "1K" not in out and "1024" in out


# --------------------------------------------------------------------------- chart


@pytest.mark.parametrize("make", ["sweep", "grid"])
def test_write_chart_png(make, sweep, tmp_path):
    result = _typed(sweep if make == "sweep" else _grid())
    before = copy.deepcopy(result)
    out = write_chart(result, tmp_path / f"{make}.png")
    assert out == tmp_path / f"{make}.png"
    data = out.read_bytes()
    assert data[:8] == PNG_MAGIC
    assert len(data) > 10_000
    assert result == before  # presentation must not modify the results


def test_noise_line_states_the_spread_and_warns_when_above_min_effect(sweep):
    quiet = {**sweep, "noise": {"starts": 50, "spread_median": 0.012, "spread_max": 0.04}}
    assert noise_text(_typed(quiet)) == (
        "Noise: timed runs of one measurement differed by 1% (median over 50 measurements, "
        "at most 4%).")
    loud = {**sweep, "noise": {"starts": 50, "spread_median": 0.22, "spread_max": 1.41}}
    text = noise_text(_typed(loud))
    assert "22%" in text and "141%" in text and "more repetitions" in text
    assert noise_text(_typed({**sweep, "noise": None})) == ""


# --------------------------------------------------------------------------- time series
#
# Synthetic sysbench runs: 120 s of tps per second, a 10 s warm-up ramp, then either a stable
# level with small noise or the same level with a stall every 30 s: 3 s at 0 tps, then 2 s
# crawling below 10% of the median. Summary numbers are computed here the way knoblab.timeseries
# defines them (steady window, stall = below 10% of the window's median), so that the report is
# checked against independently derived values.

DURATION, WARMUP, STALL_FRACTION = 120, 10, 0.1


def _tps(level, seed, *, stalls=False):
    rng = np.random.default_rng(seed)
    tps = level * (1 + 0.02 * rng.standard_normal(DURATION))
    tps[:WARMUP] *= np.linspace(0.3, 0.95, WARMUP)  # warm-up ramp, outside the steady state
    if stalls:
        for start in range(WARMUP + 10, DURATION, 30):
            tps[start:start + 3] = 0.0  # 3 s at 0 tps
            tps[start + 3:start + 5] = level * 0.05  # then 2 s crawling
    return np.round(tps, 2)


def _longest(mask):
    best = run = 0
    for stalled in mask:
        run = run + 1 if stalled else 0
        best = max(best, run)
    return best


def _ts_point(settings, verdict, runs, *, ratio=None, p=None, default=False, p99=9.5,
              sql_errors=0):
    steady = [series[WARMUP:] for series in runs]
    window = np.concatenate(steady)
    masks = [w < STALL_FRACTION * np.median(w) for w in steady]
    batches = [float(b.mean()) for w in steady for b in np.split(w, 5)]
    mean, sd = float(window.mean()), float(window.std(ddof=1))
    half = 2.0 * float(np.std(batches, ddof=1)) / np.sqrt(len(batches))
    return {
        "settings": dict(settings),
        "effective": {"innodb_buffer_pool_size": str(
            {"64M": 67108864, "128M": 134217728, "512M": 536870912}[
                settings["innodb_buffer_pool_size"]])},
        "is_default": default, "n": len(runs), "failed": 0,
        "mean": mean, "median": float(np.median(window)), "stdev": sd, "cv": sd / mean,
        "ci95": [mean - half, mean + half],
        "latency_p95_ms": p99 * 0.7, "latency_p99_ms": p99,
        "stall_seconds": int(sum(m.sum() for m in masks)),
        "zero_seconds": int(sum((w == 0).sum() for w in steady)),
        "longest_stall": max(_longest(m) for m in masks),
        "sql_errors": sql_errors, "reconnects": 0,
        "ratio_to_best": ratio, "p_value": p, "verdict": verdict,
        "samples": batches,
        "series": [{"repetition": i, "status": "done",
                    "t": [float(t) for t in range(1, DURATION + 1)],
                    "tps": [float(v) for v in series], "steady": [WARMUP, DURATION]}
                   for i, series in enumerate(runs)],
        "errors": [],
    }


def _ts_result(points, *, sliced=False):
    return {
        "run_id": "f00dfeed", "name": "oltp-buffer-pool", "kind": "sweep", "status": "done",
        "objective": {"metric": "tps", "direction": "maximize"},
        "server": {"binary": "/usr/sbin/mariadbd", "version": "10.11.19-MariaDB-0+deb12u1"},
        "dataset": {},
        "workload": {"kind": "sysbench", "test": "oltp_read_write", "threads": 8, "tables": 4,
                     "table_size": 100000, "rand_type": "pareto", "duration": DURATION,
                     "rate": 0, "repetitions": 2 if not sliced else 1, "options": {}},
        "steady": {"warmup": None, "window": None, "stall_fraction": STALL_FRACTION},
        "knobs": ["innodb_buffer_pool_size"] + (["threads"] if sliced else []),
        "slices": ["threads"] if sliced else [],
        "regime": None,
        "statistics": {"test": "welch", "alpha": 0.05, "min_effect": 0.03, "confidence": 0.95},
        "noise": None, "warnings": [],
        "points": points,
        "conclusion": {"significant": True, "best": {}, "recommended": {}, "text": "IGNORED"},
    }


@pytest.fixture
def oltp():
    """One knob, two runs per value: 512M stable at ~1,204 tps, 64M stalling to 0."""
    stable = _ts_point({"innodb_buffer_pool_size": "512M"}, "best",
                       [_tps(1204, 1), _tps(1204, 2)], ratio=1.0)
    stalling = _ts_point({"innodb_buffer_pool_size": "64M"}, "worse",
                         [_tps(1204, 3, stalls=True), _tps(1204, 4, stalls=True)],
                         p=0.0004, default=True, p99=48.3, sql_errors=5)
    stalling["ratio_to_best"] = stalling["mean"] / stable["mean"]
    return _ts_result([stalling, stable])


@pytest.fixture
def oltp_sliced():
    """Three values × threads 8 and 32: at 8 threads 512M wins and 64M stalls; at 32 all tie."""
    points = []
    for threads, levels in (("8", (1204, 1195, 1204)), ("32", (2010, 2030, 2021))):
        for i, (value, level) in enumerate(zip(("64M", "128M", "512M"), levels, strict=True)):
            stalls = threads == "8" and value == "64M"
            runs = [_tps(level, 10 * int(threads) + i, stalls=stalls)]
            points.append(_ts_point({"innodb_buffer_pool_size": value, "threads": threads},
                                    "equivalent", runs, default=value == "128M"))
    for group in (points[:3], points[3:]):
        best = max(group, key=lambda p: p["mean"])
        for p in group:
            p["ratio_to_best"] = p["mean"] / best["mean"]
            # the default (128M) is not shown worse: the leader is not recommended
            p["verdict"], p["p_value"] = ("highest tps measured", None) if p is best else \
                ("equivalent", 0.4)
    for p in points[3:]:  # at 32 threads nothing is shown: nothing is crowned
        p["verdict"] = "inconclusive"
    points[0]["verdict"], points[0]["p_value"] = "worse", 0.003  # 64M at 8 threads
    return _ts_result(points, sliced=True)


def _rows(out):
    return [line for line in out.splitlines() if line.strip()]


def test_timeseries_fixture_is_what_it_claims(oltp):
    stalling, stable = oltp["points"]
    assert stable["stall_seconds"] == 0 and stable["cv"] < 0.03
    # 4 stalls per run in the steady window (at 20, 50, 80, 110 s), 5 s each, 3 of them at 0
    assert stalling["stall_seconds"] == 2 * 4 * 5 and stalling["zero_seconds"] == 2 * 4 * 3
    assert stalling["longest_stall"] == 5
    assert stalling["cv"] > 0.3 > 0.03 > stable["cv"]  # CV 20× higher...
    assert 0.8 < stalling["ratio_to_best"] < 0.85  # ...the mean only 18% lower


def test_timeseries_table_content(oltp):
    out = _render(oltp, 180)
    title = out.splitlines()[0]
    for part in ("oltp-buffer-pool", "10.11.19-MariaDB", "sysbench oltp_read_write",
                 "8 threads", "4×100,000 rows", "pareto", "120 s × 2 runs",
                 "steady state: warm-up detected"):
        assert part in title, part
    header = " ".join(out.split("───")[0].splitlines()[1:])  # three lines of headers
    for word in ("innodb_", "buffer_", "pool_size", "applied", "mean", "tps", "95% CI",
                 "median", "stdev", "CV", "p95", "p99", "ms", "stalls", "longest", "(s)",
                 "errors", "vs", "best", "(Holm)", "verdict"):
        assert word in header, word
    assert "regime" not in out and "threads" not in header  # not sliced
    stalling, stable = oltp["points"]
    rows = {line.split()[0]: line for line in _rows(out)}
    row = rows["64M"]
    assert "(default)" in row and "64M" in row.split("(default)")[1]  # applied 67108864 → 64M
    assert f"{stalling['mean']:,.0f}" in row
    assert f"{stalling['cv'] * 100:.1f}%" in row
    assert " 40 " in row and " 5 " in row  # 40 stall seconds, longest 5 s
    assert "48.3" in row  # p99 ms
    assert f"{(stalling['ratio_to_best'] - 1) * 100:+.1f}%" in row
    assert "< 0.001" in row and "worse" in row
    row = rows["512M"]
    assert f"{stable['mean']:,.0f}" in row and "," in f"{stable['mean']:,.0f}"  # 1,2xx
    assert f"{stable['cv'] * 100:.1f}%" in row and "9.50" in row and "best" in row
    assert "*" not in out  # values applied as requested: no footnote


def test_timeseries_conclusion_and_stalls_sentence(oltp):
    text = conclusion_text(_typed(oltp))
    stable = oltp["points"][1]
    assert text.startswith(f"Best: 512M ({stable['mean']:,.0f} tps).")
    assert "Worse: 64M — 18% lower (Holm-adjusted p < 0.001)." in text
    assert ("512M instead of the default (64M): shown to help, +21.8% tps (Holm-adjusted "
            "p < 0.001): set 512M.") in text
    assert stalls_text(_typed(oltp)) == (
        "Stalls (seconds below 10% of the steady median): "
        "64M 40 s, longest 5 s, 24 s at 0 tps; 512M none.")
    out = _render(oltp, 180)
    assert "Stalls (seconds below 10% of the steady median): 64M 40 s" in " ".join(out.split())


def test_timeseries_no_stalls_no_sentence(oltp):
    for p in oltp["points"]:
        p["stall_seconds"] = p["zero_seconds"] = p["longest_stall"] = 0
    assert stalls_text(_typed(oltp)) == ""
    assert "Stalls" not in _render(oltp, 180)
    assert stalls_text(_typed(_result([_point("1M", "best", 1.0, ratio=1.0)]))) == ""  # timed


def test_timeseries_title_fixed_warmup_and_window(oltp):
    oltp["steady"] = {"warmup": 10, "window": 30, "stall_fraction": 0.1}
    oltp["workload"]["repetitions"] = 1
    title = _render(oltp, 180).splitlines()[0]
    assert "120 s × 1 run " in title and "steady state: 10 s dropped, last 30 s" in title


def test_sliced_labels_conclusion_per_slice(oltp_sliced):
    points, results = oltp_sliced["points"], _typed(oltp_sliced)
    assert point_label(results, results.points[0]) == "64M"
    assert point_label(results, results.points[0], with_slice=True) == (
        "innodb_buffer_pool_size=64M, threads=8")
    assert slice_label(results, results.points[4]) == "threads=32"
    text = conclusion_text(results)
    eight, thirty_two = text.split(" threads=32: ")
    best8 = max(points[:3], key=lambda p: p["mean"])
    assert best8["settings"]["innodb_buffer_pool_size"] == "512M"
    assert eight.startswith(f"threads=8: Highest tps measured: 512M ({best8['mean']:,.0f} tps).")
    assert "Shown the same as it (within ±3%): 128M." in eight and "Worse: 64M — " in eight
    assert ("512M instead of the default (128M): shown the same (within ±3%): keep 128M."
            in eight)
    assert thirty_two == (
        "No value is shown better than another, and a single run per value is too few "
        "(measure at least 5) to tell whether they are the same (within ±3%; α = 0.05, 1 run "
        "of 120 s each): keep the default (128M). Undecided: 64M; 512M.")
    assert "innodb_buffer_pool_size=" not in text


def test_sliced_table_and_stalls_sentence(oltp_sliced):
    out = _render(oltp_sliced, 180)
    assert "threads swept" in out.splitlines()[0]
    header = next(line for line in out.splitlines() if "applied" in line)
    assert header.index("pool_size") < header.index("threads") < header.index("applied")
    rows = [line.split() for line in _rows(out) if line.split()[0] in ("64M", "128M", "512M")]
    assert [(r[0], r[2] if r[1] == "(default)" else r[1]) for r in rows] == [
        ("64M", "8"), ("128M", "8"), ("512M", "8"), ("64M", "32"), ("128M", "32"),
        ("512M", "32")]
    stalls = stalls_text(_typed(oltp_sliced))
    assert stalls == ("Stalls (seconds below 10% of the steady median): threads=8: 64M 20 s, "
                      "longest 5 s, 12 s at 0 tps; 128M none; 512M none. threads=32: 64M none; "
                      "128M none; 512M none.")


def _is_png(path, min_bytes=20_000):
    data = path.read_bytes()
    return data[:8] == PNG_MAGIC and len(data) > min_bytes


def test_narrow_console_splits_the_table_instead_of_cutting_cells(oltp_sliced):
    out = _render(oltp_sliced, 100)
    assert max(len(line) for line in out.splitlines()) <= 100
    assert "…" not in out
    headers = [line for line in out.splitlines() if line.startswith("pool_size")]
    assert len(headers) == 2  # two tables: level and verdict, then distribution and stalls
    assert "verdict" in headers[0] and "stdev" not in headers[0]
    assert "errors" in headers[1] and "verdict" not in headers[1]
    assert out.count("128M (default)") == 4  # every row in both tables, unbroken
    assert "equivalent" in out and "64.3%" not in out.split("errors")[0]


def test_write_charts_timeseries(oltp, tmp_path):
    results = _typed(oltp)
    before = copy.deepcopy(results)
    paths = write_charts(results, tmp_path / "out")
    assert [p.name for p in paths] == ["tps-over-time.png", "tps-overlay.png", "tps-steady.png"]
    assert all(p.parent == tmp_path / "out" and _is_png(p) for p in paths)
    assert results == before  # presentation must not modify the results


def test_write_charts_one_set_per_slice(oltp_sliced, tmp_path):
    paths = write_charts(_typed(oltp_sliced), tmp_path)
    assert sorted(p.name for p in paths) == sorted(
        f"tps-{kind}-threads-{n}.png" for kind in ("over-time", "overlay", "steady")
        for n in (8, 32))
    assert all(_is_png(p) for p in paths)


def test_write_charts_failed_point_and_odd_grid(oltp_sliced, tmp_path):
    oltp_sliced["slices"], oltp_sliced["knobs"] = [], ["innodb_buffer_pool_size"]
    points = oltp_sliced["points"][:3] + [copy.deepcopy(oltp_sliced["points"][0])]
    points[3].update(settings={"innodb_buffer_pool_size": "4G"}, verdict="failed", n=0,
                     failed=2, mean=None, median=None, stall_seconds=None, series=[
                         {"repetition": 0, "status": "failed", "t": [], "tps": [],
                          "steady": None},
                         {"repetition": 1, "status": "failed", "t": [1.0, 2.0, 3.0],
                          "tps": [300.0, 150.0, 0.0], "steady": [0, 3]}],
                     errors=["server did not start"])
    oltp_sliced["points"] = points
    paths = write_charts(_typed(oltp_sliced), tmp_path)
    assert [p.name for p in paths] == ["tps-over-time.png", "tps-overlay.png", "tps-steady.png"]
    assert all(_is_png(p) for p in paths)
    assert "4G failed" not in _render(oltp_sliced, 180) and "Failed: 4G (2 of 2 runs)" in (
        conclusion_text(_typed(oltp_sliced)))


def test_write_charts_query_result_is_chart_png(sweep, tmp_path):
    assert write_charts(_typed(sweep), tmp_path) == [tmp_path / "chart.png"]
    assert _is_png(tmp_path / "chart.png", 10_000)


# --------------------------------------------------------------------------- query slices
#
# A GROUP BY whose temporary table spills to disk when tmp_table_size is too small for the
# data: tmp_table_size 1M/16M/64M (max_heap_table_size tied to it) × 1M/4M/16M rows. 64M grows
# linearly (0.45 s per million rows); 1M always spills; 16M spills from 16M rows.

TMP_MEDIANS = {  # (tmp_table_size, rows) -> median seconds
    ("1M", "1000000"): 0.72, ("1M", "4000000"): 3.10, ("1M", "16000000"): 13.9,
    ("16M", "1000000"): 0.452, ("16M", "4000000"): 1.82, ("16M", "16000000"): 12.6,
    ("64M", "1000000"): 0.450, ("64M", "4000000"): 1.80, ("64M", "16000000"): 7.20,
}
TMP_BYTES = {"1M": "1048576", "16M": "16777216", "64M": "67108864"}


def _tmp_point(size, rows):
    median = TMP_MEDIANS[(size, rows)]
    best = TMP_MEDIANS[("64M", rows)]
    spills = median / best > 1.03
    applied = {"tmp_table_size": TMP_BYTES[size], "max_heap_table_size": TMP_BYTES[size]}
    point = _point(None, "worse" if spills else "equivalent", median,
                   settings={"tmp_table_size": size, "rows": rows}, ratio=median / best,
                   p=0.0002 if spills else 0.62, default=size == "16M")
    point.update(
        effective=dict(applied), config=dict(applied),
        read_mb=int(rows) / 1e6 * 38.5 if spills else 0.0,
        iowait_share=0.08 if spills else 0.0,
        regime="mixed" if spills else "CPU-bound",
        os={"disk_read_mb": 92.9 if spills else 0.0, "disk_write_mb": 40.0 if spills else 0.0,
            "cpu_user": 0.48, "cpu_system": 0.02, "cpu_iowait": 0.08 if spills else 0.0})
    if size == "64M":  # "best" only where the change from the default (16M) is shown to help
        default_spills = TMP_MEDIANS[("16M", rows)] / best > 1.03
        point.update(verdict="best" if default_spills else "fastest measured", p_value=None,
                     ratio_to_best=1.0)
    return point


def _counter(text):
    return {"counter": text.split(":")[0], "text": text, "eta_squared": 0.99, "spearman": -0.9}


@pytest.fixture
def tmp_tables():
    # points in sweep order (tmp_table_size outer, rows inner): the report groups them by rows
    points = [_tmp_point(size, rows) for size in ("1M", "16M", "64M")
              for rows in ("1000000", "4000000", "16000000")]
    result = _result(points, knobs=("tmp_table_size", "rows"))
    result.update(
        name="tmp-table-spill", slices=["rows"], regime="mixed",
        tied={"max_heap_table_size": "tmp_table_size"},
        workload={"kind": "query", "repetitions": 5, "cache": "warm",
                  "sql": "SELECT b, COUNT(*) FROM t GROUP BY b"},
        dataset={"kind": "scan-table", "rows": None, "bytes": None, "engine": "InnoDB",
                 "variants": []},
        explained_by=[
            {"slice": {"rows": "1000000"}, "counters": [
                _counter("created_tmp_disk_tables: 1 per run at 1M, 0 from 16M"),
                _counter("handler_write: 1.0e6 per run at 1M, 0 from 16M")]},
            {"slice": {"rows": "4000000"}, "counters": []},
            {"slice": {"rows": "16000000"}, "counters": [
                _counter("created_tmp_disk_tables: 1 per run at 1M–16M, 0 at 64M")]},
        ])
    return result


def test_explanation_lines_per_slice(tmp_tables):
    assert explanation_lines(_typed(tmp_tables)) == [
        "Explained by the server's counters at rows=1000000: created_tmp_disk_tables: 1 per "
        "run at 1M, 0 from 16M; handler_write: 1.0e6 per run at 1M, 0 from 16M.",
        "Explained by the server's counters at rows=16000000: created_tmp_disk_tables: 1 per "
        "run at 1M–16M, 0 at 64M.",
    ]
    out = " ".join(_render(tmp_tables, 160).split())
    conclusion = out.index("rows=1000000: Fastest measured:")
    first, second = (out.index(line) for line in explanation_lines(_typed(tmp_tables)))
    assert conclusion < first < second  # after the conclusion, in slice order
    assert "counters at rows=4000000" not in out  # nothing found there: no line


def test_explanation_unsliced_empty_missing_and_flat(sweep):
    assert explanation_lines(_typed(sweep)) == []  # results from before the key existed
    assert "Explained by" not in _render(sweep)
    sweep["explained_by"] = [{"slice": {}, "counters": []}]
    assert explanation_lines(_typed(sweep)) == [] and "Explained by" not in _render(sweep)
    sweep["explained_by"] = [{"slice": {}, "counters": [
        _counter("key_reads: 0 per run at all points"), {"counter": "x", "text": ""}]}]
    assert explanation_lines(_typed(sweep)) == [
        "Explained by the server's counters: key_reads: 0 per run at all points."]
    assert "Explained by the server's counters: key_reads: 0 per run at all points." in (
        " ".join(_render(sweep).split()))
    # the flat list results.py wrote before slicing: one unsliced line
    sweep["explained_by"] = [_counter("a: 1 per run at 8200, 0 from 128K"),
                             _counter("b: 2 per run at 2M")]
    assert explanation_lines(_typed(sweep)) == [
        "Explained by the server's counters: a: 1 per run at 8200, 0 from 128K; "
        "b: 2 per run at 2M."]


def test_explanation_line_for_timeseries(oltp):
    oltp["explained_by"] = [{"slice": {}, "counters": [
        _counter("innodb_buffer_pool_wait_free: 31 per run at 64M, 0 at 512M")]}]
    out = " ".join(_render(oltp, 180).split())
    line = ("Explained by the server's counters: innodb_buffer_pool_wait_free: 31 per run at "
            "64M, 0 at 512M.")
    assert out.index("Best: 512M") < out.index(line) < out.index("Stalls (")


def test_query_table_read_mb_and_iowait_columns(sweep):
    sweep["points"][2].update(read_mb=92.93, iowait_share=0.124, regime="IO-bound")
    sweep["points"][4].update(read_mb=None, iowait_share=None)  # the failed point
    out = _render(sweep)
    header = next(line for line in out.splitlines() if "applied" in line)
    assert header.index("verdict") < header.index("read MB") < header.index("iowait") < (
        header.index("regime"))
    rows = {line.split()[0]: line.split() for line in _rows(out)}
    assert rows["2M"][-3:] == ["92.9", "12%", "IO-bound"]
    assert rows["128K"][-3:] == ["0.0", "0%", "CPU-bound"]
    assert rows["32M"][-3:] == ["—", "—", "—"]
    assert max(len(line) for line in out.splitlines()) <= 140


def test_query_table_narrow_console_splits_instead_of_cutting(sweep):
    out = _render(sweep, 80)
    assert max(len(line) for line in out.splitlines()) <= 80
    assert "…" not in out
    headers = [line for line in out.splitlines() if "applied" in line or "read MB" in line]
    assert len(headers) == 2 and "verdict" in headers[0] and "iowait" in headers[1]


def test_sliced_query_table(tmp_tables):
    out = _render(tmp_tables, 160)
    lines = out.splitlines()
    assert "SELECT b, COUNT(*) FROM t GROUP BY b" in lines[0]
    assert "1M–16M rows" in lines[0] and "InnoDB" in lines[0]
    assert lines[1] == "max_heap_table_size tied to tmp_table_size"
    header = next(line for line in lines if "applied" in line)
    assert header.index("tmp_table_size") < header.index("rows") < header.index("applied")
    body = lines[lines.index(header) + 2:]
    # The table ends at its legend (the regime's rule).
    table = body[:body.index(next(line for line in body if line.startswith("Regime:")))]
    cells = [line.split() for line in table]
    assert [(c[0], c[2] if c[1] == "(default)" else c[1]) if c else () for c in cells] == [
        ("1M", "1000000"), ("16M", "1000000"), ("64M", "1000000"), (),
        ("1M", "4000000"), ("16M", "4000000"), ("64M", "4000000"), (),
        ("1M", "16000000"), ("16M", "16000000"), ("64M", "16000000")]
    spill = cells[8]  # 1M at 16M rows
    assert spill[spill.index("worse") + 1:] == ["616.0", "8%", "mixed"]
    assert "13.9" in spill and "+93.1%" in spill
    assert "*" not in "".join(table)  # follower applied as its leader: not shown,
    assert "the server rounded" not in out  # no footnote
    assert "max_heap_table_size=" not in out


def test_sliced_query_conclusion_per_slice(tmp_tables):
    text = conclusion_text(_typed(tmp_tables))
    one, rest = text.split(" rows=4000000: ")
    four, sixteen = rest.split(" rows=16000000: ")
    # 64M is the best only where the change from the default is shown to help
    assert one == (
        "rows=1000000: Fastest measured: 64M (0.450 s). Shown the same as it (within ±3%): "
        "16M. Worse: 1M — 60% slower (Holm-adjusted p < 0.001). 64M instead of the default "
        "(16M): shown the same (within ±3%): keep 16M.")
    assert four.startswith("Fastest measured: 64M (1.80 s). Shown the same as it (within "
                           "±3%): 16M. Worse: 1M — 72%")
    assert sixteen == (
        "Best: 64M (7.20 s). Worse: 1M, 16M — 75–93% slower (Holm-adjusted p < 0.001). "
        "64M instead of the default (16M): shown to help, 1.8× faster (time −42.9%; "
        "Holm-adjusted p < 0.001): set 64M.")
    assert "rows=1000000: Fastest measured" in _render(tmp_tables, 160)


def test_tied_follower_shown_when_the_server_applied_another_value(tmp_tables, sweep):
    point = tmp_tables["points"][0]  # 1M at 1M rows
    point["effective"]["max_heap_table_size"] = "16777216"  # the server kept 16M
    out = _render(tmp_tables, 160)
    row = next(line for line in out.splitlines() if "max_heap_table_size=" in line)
    assert "1M, max_heap_table_size=16M*" in row
    assert out.rstrip().endswith("* the server rounded or changed the requested value")
    assert tied_text(_typed(sweep)) == "" and "tied to" not in _render(sweep)


def test_write_charts_sliced_query_and_scaling(tmp_tables, tmp_path):
    results = _typed(tmp_tables)
    before = copy.deepcopy(results)
    paths = write_charts(results, tmp_path)
    assert [p.name for p in paths] == [
        "chart-rows-1000000.png", "chart-rows-4000000.png", "chart-rows-16000000.png",
        "scaling.png"]
    assert all(_is_png(p) for p in paths)
    assert results == before  # presentation must not modify the results


def test_scaling_skips_failed_points_and_needs_two_sizes(tmp_tables, tmp_path):
    failed = tmp_tables["points"][4]  # 16M at 4M rows
    failed.update(verdict="failed", median=None, ci95=None, n=0, failed=5, samples=[])
    assert (tmp_path / "scaling.png") in write_charts(_typed(tmp_tables), tmp_path)
    assert _is_png(tmp_path / "scaling.png")
    one_size = {**tmp_tables, "points": [p for p in tmp_tables["points"]
                                         if p["settings"]["rows"] == "1000000"]}
    assert [p.name for p in write_charts(_typed(one_size), tmp_path / "one")] == [
        "chart-rows-1000000.png"]


# --------------------------------------------------------------------------- OS over time


def _os_series(runs, *, reads_mb, stalls):
    series = []
    for i, tps in enumerate(runs):
        rng = np.random.default_rng(100 + i)
        stalled = np.asarray(tps) < 0.1 * np.median(tps)
        user = np.where(stalled, 0.05, 0.55) + 0.02 * rng.standard_normal(tps.size)
        iowait = np.where(stalled, 0.6, 0.03) if stalls else np.full(tps.size, 0.01)
        write = np.where(stalled, 180e6, 12e6) + 1e6 * rng.standard_normal(tps.size)
        series.append({"repetition": i, "t": [float(t) for t in range(1, tps.size + 1)],
                       "cpu_user": user.clip(0).tolist(), "cpu_system": [0.12] * tps.size,
                       "cpu_iowait": iowait.tolist(),
                       "disk_read_bytes": [reads_mb * 1e6] * tps.size,
                       "disk_write_bytes": write.clip(0).tolist()})
    return series


def test_write_charts_os_over_time(oltp, tmp_path):
    stalling, stable = oltp["points"]
    stalling["os_series"] = _os_series([_tps(1204, 3, stalls=True), _tps(1204, 4, stalls=True)],
                                       reads_mb=25, stalls=True)
    stable["os_series"] = _os_series([_tps(1204, 1)], reads_mb=0.5, stalls=False)
    results = _typed(oltp)
    before = copy.deepcopy(results)
    paths = write_charts(results, tmp_path)
    assert [p.name for p in paths] == ["tps-over-time.png", "tps-overlay.png", "tps-steady.png",
                                       "os-over-time.png"]
    assert _is_png(paths[-1])
    assert results == before


def test_write_charts_os_over_time_per_slice_and_only_with_samples(oltp_sliced, tmp_path):
    names = [p.name for p in write_charts(_typed(oltp_sliced), tmp_path / "none")]
    assert not any(name.startswith("os-") for name in names)  # no samples, no chart
    for p in oltp_sliced["points"][:2]:  # threads=8 only, and not every point
        runs = [np.asarray(s["tps"]) for s in p["series"]]
        p["os_series"] = _os_series(runs, reads_mb=4, stalls=False)
    oltp_sliced["points"][2]["os_series"] = []
    names = [p.name for p in write_charts(_typed(oltp_sliced), tmp_path)]
    assert [n for n in names if n.startswith("os-")] == ["os-over-time-threads-8.png"]
    assert _is_png(tmp_path / "os-over-time-threads-8.png")


def test_two_slice_keys_name_files_and_lines(tmp_tables, tmp_path):
    engines = copy.deepcopy(tmp_tables["points"])
    for p in tmp_tables["points"]:
        p["settings"]["engine"] = "InnoDB"
    for p in engines:
        p["settings"]["engine"] = "MyISAM"
        p["median"], p["ci95"] = p["median"] * 0.8, [v * 0.8 for v in p["ci95"]]
    tmp_tables.update(points=tmp_tables["points"] + engines, slices=["rows", "engine"],
                      knobs=["tmp_table_size", "rows", "engine"])
    results = _typed(tmp_tables)
    first_myisam = results.points[len(engines)]
    assert point_label(results, first_myisam) == "1M"
    assert point_label(results, first_myisam, with_slice=True) == (
        "tmp_table_size=1M, rows=1000000, engine=MyISAM")
    assert "rows=1000000, engine=MyISAM: Fastest measured: 64M" in conclusion_text(results)
    assert "InnoDB/MyISAM" in _render(tmp_tables, 160).splitlines()[0]
    names = [p.name for p in write_charts(results, tmp_path)]
    assert names[0] == "chart-rows-1000000-engine-InnoDB.png" and len(names) == 7
    assert names[-1] == "scaling.png" and _is_png(tmp_path / "scaling.png")


def test_durability_gain_gets_a_line_of_its_own():
    knob = "innodb_flush_log_at_trx_commit"
    risky = _point("0", "best", 0.50, ratio=1.0, settings={knob: "0"})
    risky["config"] = {knob: "0"}
    risky["durability"] = {"innodb_flush_log_at_trx_commit":
                           "a crash can lose the last second of committed transactions"}
    safe = _point("1", "worse", 0.61, ratio=1.22, p=0.001, default=True, settings={knob: "1"})
    safe["durability"] = {}
    result = _result([safe, risky], knobs=("innodb_flush_log_at_trx_commit",))
    lines = durability_lines(_typed(result))
    assert lines == ["0: -18% time against the best durable value (1), bought by giving up "
                     "durability — innodb_flush_log_at_trx_commit = 0: a crash can lose the "
                     "last second of committed transactions."]
    console = Console(record=True, width=200)
    print_report(_typed(result), console)
    assert "bought by giving up durability" in console.export_text()
    alone = _result([safe], knobs=("innodb_flush_log_at_trx_commit",))
    assert durability_lines(_typed(alone)) == []
