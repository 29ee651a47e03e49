"""Tests for knoblab.report on hand-built results dicts (no server, no statistics)."""

import copy
import io
import itertools

import pytest
from rich.console import Console

from knoblab.report import (
    conclusion_text,
    noise_text,
    point_label,
    print_report,
    write_chart,
)

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


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
        _point("8200", "indistinguishable", 0.618, effective="8192", ratio=1.0098, p=0.41),
        _point("128K", "best", 0.612, effective="131072", ratio=1.0, default=True),
        _point("2M", "worse", 0.661, effective="2097152", ratio=1.08, p=0.004),
        _point("8M", "worse", 0.686, effective="8388608", ratio=1.121, p=0.0021),
        _point("32M", "failed", None, n=0, failed=5,
               errors=["ERROR 1041 (HY000): Out of memory\nsecond line", "other"]),
    ])


# --------------------------------------------------------------------------- conclusion


def test_conclusion_names_best_worse_range_default_and_failures(sweep):
    text = conclusion_text(sweep)
    assert "IGNORED" not in text
    assert text.startswith("Best: 128K (0.612 s).")
    assert "Indistinguishable from it: 8200." in text
    assert "Worse: 2M, 8M — 8–12% slower (Holm-adjusted p ≤ 0.004)." in text
    assert "The default (128K) is among the best: keep it." in text
    assert "Failed: 32M (5 of 5 runs) — ERROR 1041 (HY000): Out of memory." in text
    assert "second line" not in text


def test_conclusion_default_worse_suggests_best(sweep):
    sweep["points"][1]["is_default"] = False
    sweep["points"][2]["is_default"] = True  # 2M, ratio 1.08
    text = conclusion_text(sweep)
    assert "The default (2M) is 8% slower than the best: consider 128K." in text
    assert "keep it" not in text


def test_conclusion_single_percentage_and_maximize_wording(sweep):
    del sweep["points"][3]  # only 2M is worse now
    sweep["objective"] = {"metric": "qps", "direction": "maximize"}
    sweep["points"][2]["ratio_to_best"] = 0.92  # 8% lower throughput
    text = conclusion_text(sweep)
    assert "Best: 128K (0.612 qps)." in text
    assert "Worse: 2M — 8% lower (Holm-adjusted p ≤ 0.004)." in text
    assert "slower" not in text


def test_conclusion_nothing_significant_keeps_default():
    result = _result([
        _point("64K", "indistinguishable", 0.615, ratio=1.005, p=0.7),
        _point("128K", "best", 0.612, default=True, ratio=1.0),
        _point("256K", "indistinguishable", 0.619, ratio=1.011, p=0.5),
    ])
    text = conclusion_text(result)
    assert text == (
        "No value is significantly better than another (minimum effect 3%, α = 0.05, "
        "n = 5 each): keep the default (128K)."
    )
    for p in result["points"]:
        p["is_default"] = False
    assert conclusion_text(result).endswith("keep the current value.")


def test_conclusion_partial_failure_is_reported():
    result = _result([
        _point("64K", "best", 0.612, ratio=1.0, n=4, failed=1, errors=["lost connection"]),
        _point("128K", "indistinguishable", 0.615, ratio=1.005, p=0.7),
    ])
    text = conclusion_text(result)
    assert "n = 4–5" in text
    assert text.endswith("Failed: 64K (1 of 5 runs) — lost connection.")


def test_conclusion_all_failed():
    result = _result([_point("64K", "failed", None, n=0, failed=3, errors=["boom"])])
    assert conclusion_text(result) == (
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
        verdict = "best" if i == 0 else ("worse" if i >= 3 else "indistinguishable")
        points.append(_point(None, verdict, median, settings=settings, ratio=median / 0.60,
                             p=None if i == 0 else 0.01, default=(rb, sb) == ("128K", "2M")))
    return _result(points, knobs=("read_buffer_size", "sort_buffer_size"))


def test_point_label_one_knob_and_grid(sweep):
    assert point_label(sweep, sweep["points"][1]) == "128K"
    grid = _grid()
    assert point_label(grid, grid["points"][3]) == "read_buffer_size=128K, sort_buffer_size=2M"
    assert "Best: read_buffer_size=64K, sort_buffer_size=256K (0.600 s)." in conclusion_text(grid)


# --------------------------------------------------------------------------- terminal


def _render(result) -> str:
    console = Console(record=True, width=140, color_system=None, file=io.StringIO())
    print_report(result, console)
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
    print_report(sweep, console)
    ansi = buffer.getvalue()
    assert "\x1b[32mbest" in ansi  # green
    assert ansi.count("\x1b[31mworse") == 2  # red
    assert "\x1b[35mfailed" in ansi  # magenta
    assert "\x1b[32mindistinguishable" not in ansi and "\x1b[31mindistinguishable" not in ansi


def test_print_report_non_size_knob_is_not_shown_as_size():
    result = _result([_point("1024", "best", 1.0, ratio=1.0)], knobs=("max_connections",))
    result["points"][0]["settings"] = {"max_connections": "1024"}
    result["points"][0]["effective"] = {"max_connections": "1024"}
    out = _render(result)
    assert "1K" not in out and "1024" in out


# --------------------------------------------------------------------------- chart


@pytest.mark.parametrize("make", ["sweep", "grid"])
def test_write_chart_png(make, sweep, tmp_path):
    result = sweep if make == "sweep" else _grid()
    before = copy.deepcopy(result)
    out = write_chart(result, tmp_path / f"{make}.png")
    assert out == tmp_path / f"{make}.png"
    data = out.read_bytes()
    assert data[:8] == PNG_MAGIC
    assert len(data) > 10_000
    assert result == before  # presentation must not modify the results


def test_noise_line_states_the_spread_and_warns_when_above_min_effect(sweep):
    quiet = {**sweep, "noise": {"starts": 50, "spread_median": 0.012, "spread_max": 0.04}}
    assert noise_text(quiet) == (
        "Noise: timed runs on one server start differed by 1% (median over 50 starts, "
        "at most 4%).")
    loud = {**sweep, "noise": {"starts": 50, "spread_median": 0.22, "spread_max": 1.41}}
    text = noise_text(loud)
    assert "22%" in text and "141%" in text and "more repetitions" in text
    assert noise_text({**sweep, "noise": None}) == ""
