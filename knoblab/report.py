"""Presentation of a finished results dict: terminal table, conclusion sentence, PNG charts.

Two kinds of results: query sweeps (one timed query per sample) and time-series runs
(`workload.kind == "sysbench"`: tps every second, judged on the steady state, optionally sliced
by thread count so that verdicts compare values only at the same concurrency).

Pure formatting: every number shown here was computed elsewhere (see knoblab.stats and
knoblab.timeseries); the only thing recomputed is which seconds to mark as stalls on a chart.
"""

from __future__ import annotations

import math
import pathlib
import re

import numpy as np
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch
from rich import box
from rich.console import Console
from rich.measure import Measurement
from rich.table import Table
from rich.text import Text

from knoblab.errors import UserError
from knoblab.units import format_size, parse_size

_UNITS = {"seconds": "s"}
_RICH_STYLE = {"best": "green", "indistinguishable": "", "worse": "red", "failed": "magenta"}
_MPL_COLOUR = {
    "best": "#2ca02c",
    "indistinguishable": "#4c72b0",
    "worse": "#d62728",
    "failed": "#b000b0",
}
_FOOTNOTE = "* the server rounded or changed the requested value"


# ----------------------------------------------------------------------------- formatting


def _num(x: float) -> str:
    """3 significant digits, never scientific, never fewer digits than the integer part, and
    thousands separated ("1,204")."""
    if x == 0 or not math.isfinite(x):
        return f"{x:.2f}" if x == 0 else str(x)
    if abs(x) >= 1000:
        return f"{x:,.0f}"
    decimals = max(0, 2 - math.floor(math.log10(abs(x))))
    return f"{x:.{decimals}f}"


def _p(p: float) -> str:
    return "< 0.001" if p < 0.001 else f"{p:.2g}"


def _pct(lo: float, hi: float) -> str:
    return f"{lo}%" if lo == hi else f"{lo}–{hi}%"


def _unit(result: dict) -> str:
    metric = result["objective"]["metric"]
    return _UNITS.get(metric, metric)


def _effect_pct(result: dict, point: dict) -> int:
    """Whole percent by which `point` is worse than the best (positive)."""
    ratio = point["ratio_to_best"]
    minimize = result["objective"]["direction"] == "minimize"
    return round(((ratio - 1.0) if minimize else (1.0 - ratio)) * 100)


def _as_number(value: object) -> float | None:
    try:
        return float(parse_size(value))
    except UserError:
        try:
            return float(str(value))
        except ValueError:
            return None


def _is_size_knob(result: dict, knob: str) -> bool:
    """Show a knob's values as K/M/G sizes? (so max_connections=1024 does not become "1K")."""
    if "size" in knob or "buffer" in knob:
        return True
    return any(str(p["settings"].get(knob, "")).strip()[-1:].isalpha() for p in result["points"])


def _applied(result: dict, point: dict, knob: str) -> tuple[str, bool]:
    """(compact effective value, whether it differs from the requested one)."""
    effective = (point.get("effective") or {}).get(knob)
    if effective is None:
        return "—", False
    requested = point["settings"].get(knob)
    eff_n, req_n = _as_number(effective), _as_number(requested)
    text = str(effective)
    if eff_n is not None and eff_n.is_integer() and _is_size_knob(result, knob):
        text = format_size(int(eff_n))
    if eff_n is not None and req_n is not None:
        changed = eff_n != req_n
    else:
        changed = str(effective).strip().lower() != str(requested).strip().lower()
    return text + ("*" if changed else ""), changed


def _slice_knobs(result: dict) -> list[str]:
    return list(result.get("slices") or [])


def _value_knobs(result: dict) -> list[str]:
    """The swept knobs that are compared (every knob but the slice knobs)."""
    slices = _slice_knobs(result)
    return [k for k in result["knobs"] if k not in slices] or list(result["knobs"])


def point_label(result: dict, point: dict, *, with_slice: bool = False) -> str:
    """"128K" for one knob, "read_buffer_size=128K, sort_buffer_size=2M" for a grid.

    Slice knobs (result["slices"], e.g. threads) are left out unless `with_slice`: points are
    only ever compared within their slice, which is named separately (see slice_label).
    """
    knobs = list(result["knobs"]) if with_slice else _value_knobs(result)
    if len(knobs) == 1:
        return str(point["settings"][knobs[0]])
    return ", ".join(f"{k}={point['settings'][k]}" for k in knobs)


def slice_label(result: dict, point: dict) -> str:
    """"threads=8" for a sliced result, "" otherwise."""
    return ", ".join(f"{k}={point['settings'][k]}" for k in _slice_knobs(result))


def slices(result: dict) -> list[tuple[str, list[dict]]]:
    """[(slice label, its points)] in order of first appearance; [("", all points)] if unsliced."""
    groups: dict[str, list[dict]] = {}
    for p in result["points"]:
        groups.setdefault(slice_label(result, p), []).append(p)
    return list(groups.items()) or [("", [])]


def _is_timeseries(result: dict) -> bool:
    return (result.get("workload") or {}).get("kind") == "sysbench"


def _centre(result: dict, point: dict) -> float | None:
    """The headline level: mean tps of the steady state for time series, the median otherwise."""
    return point.get("mean") if _is_timeseries(result) else point.get("median")


# ----------------------------------------------------------------------------- conclusion


def _failures(result: dict, points: list[dict]) -> str:
    parts = []
    for p in points:
        if p["verdict"] != "failed" and not p.get("failed"):
            continue
        runs = p.get("n", 0) + p.get("failed", 0)
        part = f"{point_label(result, p)} ({p.get('failed', 0)} of {runs} runs)"
        first_error = str((p.get("errors") or [""])[0]).strip()
        if first_error:
            part += f" — {first_error.splitlines()[0][:120]}"
        parts.append(part)
    return f"Failed: {'; '.join(parts)}." if parts else ""


def _judge(result: dict, points: list[dict]) -> str:
    """The verdict on `points`, which were compared with each other (one slice)."""

    def label(p: dict) -> str:
        return point_label(result, p)

    by = {v: [p for p in points if p["verdict"] == v] for v in _RICH_STYLE}
    default = next((p for p in points if p.get("is_default")), None)
    slower = "slower" if result["objective"]["direction"] == "minimize" else "lower"
    failed = _failures(result, points)

    if not by["best"]:
        return " ".join(filter(None, ["Every point failed: nothing to compare.", failed]))
    best = by["best"][0]
    if by["worse"]:
        sentences = [f"Best: {label(best)} ({_num(_centre(result, best))} {_unit(result)})."]
        if by["indistinguishable"]:
            names = ", ".join(label(p) for p in by["indistinguishable"])
            sentences.append(f"Indistinguishable from it: {names}.")
        effects = [_effect_pct(result, p) for p in by["worse"]]
        p_max = max(p["p_value"] for p in by["worse"])
        p_text = "p < 0.001" if p_max < 0.001 else f"p ≤ {_p(p_max)}"
        sentences.append(
            f"Worse: {', '.join(label(p) for p in by['worse'])} — "
            f"{_pct(min(effects), max(effects))} {slower} (Holm-adjusted {p_text})."
        )
        if default is None:
            sentences.append(f"The server default was not measured: consider {label(best)}.")
        elif default["verdict"] in ("best", "indistinguishable"):
            sentences.append(f"The default ({label(default)}) is among the best: keep it.")
        elif default["verdict"] == "worse":
            sentences.append(
                f"The default ({label(default)}) is {_effect_pct(result, default)}% {slower} "
                f"than the best: consider {label(best)}."
            )
        else:
            sentences.append(f"The default ({label(default)}) failed: consider {label(best)}.")
    else:
        stats = result["statistics"]
        ns = sorted({p["n"] for p in points if p["verdict"] != "failed"})
        if _is_timeseries(result):
            duration = result["workload"].get("duration")
            runs = "run" if ns == [1] else "runs"
            n_text = f"{ns[0]}" if len(ns) == 1 else f"{ns[0]}–{ns[-1]}"
            n_text += f" {runs} of {duration} s each" if duration else f" {runs} each"
        else:
            n_text = f"n = {ns[0]} each" if len(ns) == 1 else f"n = {ns[0]}–{ns[-1]}"
        keep = f"the default ({label(default)})" if default else "the current value"
        sentences = [
            f"No value is significantly better than another (minimum effect "
            f"{stats['min_effect'] * 100:g}%, α = {stats['alpha']:g}, {n_text}): keep {keep}."
        ]
    return " ".join(sentences + ([failed] if failed else []))


def conclusion_text(result: dict) -> str:
    """The verdict in one paragraph, built from the points (not from result["conclusion"]).

    A sliced result (result["slices"], e.g. threads) gets one judgement per slice, each
    prefixed with the slice ("threads=8: Best: 512M (1,204 tps). … threads=32: No value …").
    """
    groups = slices(result)
    if len(groups) == 1 and not groups[0][0]:
        return _judge(result, groups[0][1])
    return " ".join(f"{name}: {_judge(result, points)}" for name, points in groups)


def stalls_text(result: dict) -> str:
    """One sentence on throughput stalls, or "" when no point stalled (or not a time series)."""
    if not _is_timeseries(result) or not any(
        (p.get("stall_seconds") or 0) > 0 for p in result["points"]
    ):
        return ""
    fraction = (result.get("steady") or {}).get("stall_fraction", 0.1)
    groups = []
    for name, points in slices(result):
        parts = []
        for p in points:
            if p["verdict"] == "failed" or p.get("stall_seconds") is None:
                continue
            part = f"{point_label(result, p)} "
            if not p["stall_seconds"]:
                part += "none"
            else:
                part += f"{p['stall_seconds']} s, longest {p.get('longest_stall') or 0} s"
                if p.get("zero_seconds"):
                    part += f", {p['zero_seconds']} s at 0 {_unit(result)}"
            parts.append(part)
        if parts:
            groups.append((f"{name}: " if name else "") + "; ".join(parts) + ".")
    return (f"Stalls (seconds below {fraction * 100:g}% of the steady median): "
            + " ".join(groups))


# ----------------------------------------------------------------------------- terminal


def _title(result: dict) -> str:
    server, work, data = result["server"], result["workload"], result["dataset"]
    sql = " ".join(str(work.get("sql") or work.get("kind", "")).split())
    sql = sql if len(sql) <= 70 else sql[:67] + "..."
    reps = f", {work['repetitions']} reps" if work.get("repetitions") else ""
    rows = f"{data['rows']:,} rows" if data.get("rows") is not None else data.get("kind", "")
    size = f", {data['bytes'] / 1e6:.1f} MB" if data.get("bytes") else ""
    engine = f" {data['engine']}" if data.get("engine") else ""
    return (
        f"{result['name']} — {server.get('version', '?')} · {sql} ({work.get('cache', '?')} "
        f"cache{reps}) · {rows}{size}{engine} · {result.get('regime') or '?'}"
    )


def print_report(result: dict, console: Console) -> None:
    """Title, one table row per point, the conclusion, and a footnote on changed values."""
    if _is_timeseries(result):
        _print_timeseries(result, console)
        return
    knobs = result["knobs"]
    console.print(Text(_title(result), style="bold"))
    table = Table(show_edge=False, header_style="bold")
    for knob in knobs:
        table.add_column(knob)
    for name in ("applied", "n", "median", "95% CI", "vs best", "p (Holm)", "verdict", "regime"):
        justify = "left" if name in ("applied", "verdict", "regime") else "right"
        table.add_column(name, justify=justify)

    any_changed = False
    for p in result["points"]:
        cells = [Text(str(p["settings"][k])) for k in knobs]
        if p.get("is_default"):
            cells[-1].append(" (default)", style="dim")
        applied = [_applied(result, p, k) for k in knobs]
        any_changed |= any(changed for _, changed in applied)
        n = f"{p['n']} ({p['failed']} failed)" if p.get("failed") else str(p["n"])
        alive = p["verdict"] != "failed" and p.get("median") is not None
        ci = p.get("ci95") or [None, None]
        ratio = p.get("ratio_to_best")
        cells += [
            Text(", ".join(text for text, _ in applied)),
            Text(n),
            Text(_num(p["median"]) if alive else "—"),
            Text(f"{_num(ci[0])}–{_num(ci[1])}" if alive and ci[0] is not None else "—"),
            Text("—" if ratio is None or p["verdict"] == "best" else f"{(ratio - 1) * 100:+.1f}%"),
            Text(_p(p["p_value"]) if p.get("p_value") is not None else "—"),
            Text(p["verdict"], style=_RICH_STYLE.get(p["verdict"], "")),
            Text(str(p.get("regime") or "—")),
        ]
        table.add_row(*cells)
    console.print(table)
    console.print(Text(conclusion_text(result)))
    noise = noise_text(result)
    if noise:
        console.print(Text(noise, style="dim"))
    if any_changed:
        console.print(Text(_FOOTNOTE, style="dim"))


def _wrap_name(name: str, width: int) -> str:
    """Break a long knob name after underscores: "innodb_buffer_\npool_size"."""
    lines = [""]
    for part in re.findall(r"[^_]+_*|_+", name):
        if lines[-1] and len(lines[-1]) + len(part) > width:
            lines.append("")
        lines[-1] += part
    return "\n".join(lines)


def _timeseries_title(result: dict) -> str:
    server, work = result["server"], result["workload"]
    steady = result.get("steady") or {}
    threads = ("threads swept" if "threads" in result["knobs"]
               else f"{work.get('threads', '?')} threads")
    parts = [f"sysbench {work.get('test', '?')}", threads]
    if work.get("tables") is not None and work.get("table_size") is not None:
        parts.append(f"{work['tables']}×{work['table_size']:,} rows")
    if work.get("rand_type"):
        parts.append(str(work["rand_type"]))
    if work.get("rate"):
        parts.append(f"rate {work['rate']} tps")
    reps = work.get("repetitions") or 1
    parts.append(f"{work.get('duration', '?')} s × {reps} run{'' if reps == 1 else 's'}")
    warmup, window = steady.get("warmup"), steady.get("window")
    state = "warm-up detected" if warmup is None else f"{warmup} s dropped"
    if window:
        state += f", last {window} s"
    return (f"{result['name']} — {server.get('version', '?')} · {', '.join(parts)} · "
            f"steady state: {state}")


def _timeseries_rows(result: dict) -> tuple[list[str], list[list[Text]], set[int], bool]:
    """(headers, rows of cells, indexes of rows ending a slice, any value changed)."""
    values = _value_knobs(result)
    sliced = [k for k in _slice_knobs(result) if k in result["knobs"]]
    metric = result["objective"]["metric"]
    headers = [_wrap_name(k, 9) for k in values + sliced] + [
        "applied", "n", f"mean\n{metric}", "95% CI", "median", "stdev", "CV", "p95\nms",
        "p99\nms", "stalls\n(s)", "longest\n(s)", "errors", "vs\nbest", "p\n(Holm)", "verdict"]

    def num(x: float | None, alive: bool) -> Text:
        return Text(_num(x) if alive and x is not None else "—")

    rows: list[list[Text]] = []
    ends: set[int] = set()
    any_changed = False
    for _, points in slices(result):
        for p in points:
            cells = [Text(str(p["settings"][k])) for k in values]
            if p.get("is_default"):
                cells[-1].append(" (default)", style="dim")
            cells += [Text(str(p["settings"][k])) for k in sliced]
            applied = [_applied(result, p, k) for k in values]
            any_changed |= any(changed for _, changed in applied)
            n = f"{p['n']} ({p['failed']} failed)" if p.get("failed") else str(p["n"])
            alive = p["verdict"] != "failed" and p.get("mean") is not None
            ci = p.get("ci95") or [None, None]
            ratio, cv, stall = p.get("ratio_to_best"), p.get("cv"), p.get("stall_seconds")
            errors = "—" if p.get("sql_errors") is None else f"{p['sql_errors']:,}"
            if p.get("reconnects"):
                errors += f" +{p['reconnects']} reconn."
            cells += [
                Text(", ".join(text for text, _ in applied)),
                Text(n),
                num(p.get("mean"), alive),
                Text(f"{_num(ci[0])}–{_num(ci[1])}" if alive and ci[0] is not None else "—"),
                num(p.get("median"), alive),
                num(p.get("stdev"), alive),
                Text(f"{cv * 100:.1f}%" if alive and cv is not None and math.isfinite(cv)
                     else "—"),
                num(p.get("latency_p95_ms"), alive),
                num(p.get("latency_p99_ms"), alive),
                Text("—" if not alive or stall is None else str(stall),
                     style="red" if alive and stall else ""),
                Text("—" if not alive or p.get("longest_stall") is None
                     else str(p["longest_stall"])),
                Text(errors, style="yellow" if p.get("sql_errors") or p.get("reconnects")
                     else ""),
                Text("—" if ratio is None or p["verdict"] == "best"
                     else f"{(ratio - 1) * 100:+.1f}%"),
                Text(_p(p["p_value"]) if p.get("p_value") is not None else "—"),
                Text(p["verdict"], style=_RICH_STYLE.get(p["verdict"], "")),
            ]
            rows.append(cells)
        ends.add(len(rows) - 1)
    ends.discard(len(rows) - 1)
    return headers, rows, ends, any_changed


def _table(headers: list[str], rows: list[list[Text]], ends: set[int], keep: list[int],
           labels: int) -> Table:
    """The columns `keep` of the rows; the first `labels` columns (the values) may wrap."""
    # No vertical rules and two spaces between columns: 17 columns fit about 140 characters.
    table = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, padding=(0, 1),
                  collapse_padding=True, header_style="bold")
    for i in keep:
        left = i < labels or headers[i] in ("applied", "verdict")
        table.add_column(headers[i], justify="left" if left else "right", no_wrap=i >= labels)
    for r, cells in enumerate(rows):
        table.add_row(*(cells[i] for i in keep), end_section=r in ends)
    return table


def _print_timeseries(result: dict, console: Console) -> None:
    """The time-series table: steady-state level, stability, stalls, errors, verdict.

    When the 17 columns do not fit the console, the same rows are shown as two tables (level
    and verdict, then stability) rather than with cut-off cells.
    """
    console.print(Text(_timeseries_title(result), style="bold"))
    headers, rows, ends, any_changed = _timeseries_rows(result)
    labels = len(headers) - 15
    everything = list(range(len(headers)))
    table = _table(headers, rows, ends, everything, labels)
    # measured against a very wide console: Measurement.get clamps to the console width
    natural = Measurement.get(console, console.options.update_width(10_000), table)
    if natural.minimum <= console.width:
        console.print(table)
    else:
        # level and verdict, then the shape of the distribution and the stalls
        first = [*range(labels), *(labels + i for i in (0, 1, 2, 3, 12, 13, 14))]
        second = [*range(labels), *(labels + i for i in (4, 5, 6, 7, 8, 9, 10, 11))]
        console.print(_table(headers, rows, ends, first, labels))
        console.print(_table(headers, rows, ends, second, labels))
    console.print(Text(conclusion_text(result)))
    stalls, noise = stalls_text(result), noise_text(result)
    if stalls:
        console.print(Text(stalls))
    if noise:
        console.print(Text(noise, style="dim"))
    if any_changed:
        console.print(Text(_FOOTNOTE, style="dim"))


def noise_text(result: dict) -> str:
    """The machine's noise floor, from repeated timed runs on one server start."""
    noise = result.get("noise")
    if not noise:
        return ""
    text = (f"Noise: timed runs on one server start differed by {noise['spread_median']:.0%} "
            f"(median over {noise['starts']} starts, at most {noise['spread_max']:.0%}).")
    if noise["spread_median"] > result["statistics"]["min_effect"]:
        text += (" That is more than the minimum effect: on this machine smaller differences "
                 "need more repetitions or a quieter machine to show.")
    return text


# ----------------------------------------------------------------------------- chart


def _draw(ax, x: float, p: dict, colour: str, rng: np.random.Generator, jitter=0.12) -> None:
    """Samples as jittered dots, then the median with its 95% CI; failed points as an × below."""
    if p["verdict"] == "failed" or p.get("median") is None:
        trans = ax.get_xaxis_transform()  # x in data, y in axes fraction
        ax.plot(x, 0.04, marker="x", ms=10, mew=2, color=_MPL_COLOUR["failed"], transform=trans)
        ax.text(x, 0.08, "failed", ha="center", color=_MPL_COLOUR["failed"], transform=trans)
        return
    samples = np.asarray(p.get("samples") or [], dtype=float)
    ax.scatter(x + rng.uniform(-jitter, jitter, samples.size), samples, s=12, color=colour,
               alpha=0.3, linewidths=0, zorder=2)
    lo, hi = p.get("ci95") or (p["median"], p["median"])
    ax.errorbar(x, p["median"], yerr=[[p["median"] - lo], [hi - p["median"]]], fmt="o", ms=7,
                color=colour, ecolor=colour, capsize=4, zorder=3)


def write_chart(result: dict, path: pathlib.Path) -> pathlib.Path:
    """Median ± 95% CI per point (plus raw samples) on a categorical x axis; PNG at `path`."""
    path = pathlib.Path(path)
    points, knobs = result["points"], result["knobs"]
    first = knobs[0]
    xs = list(dict.fromkeys(str(p["settings"][first]) for p in points))
    position = {v: i for i, v in enumerate(xs)}
    rng = np.random.default_rng(0)
    fig = Figure(figsize=(max(6.4, 0.9 * len(xs) + 2.5), 4.8), layout="constrained")
    ax = fig.add_subplot()

    if len(knobs) == 1:
        for p in points:
            _draw(ax, position[str(p["settings"][first])], p, _MPL_COLOUR[p["verdict"]], rng)
        shown = [v for v in _MPL_COLOUR if any(p["verdict"] == v for p in points)]
        handles = [Line2D([], [], marker="x" if v == "failed" else "o", ls="",
                          color=_MPL_COLOUR[v], label=v) for v in shown]
    else:
        def rest(p: dict) -> tuple[str, ...]:
            return tuple(str(p["settings"][k]) for k in knobs[1:])

        combos = list(dict.fromkeys(rest(p) for p in points))
        step = min(0.2, 0.6 / len(combos))  # dodge the series around each x position
        handles = []
        for i, combo in enumerate(combos):
            colour = f"C{i % 10}"
            line = []
            for p in (p for p in points if rest(p) == combo):
                x = position[str(p["settings"][first])] + (i - (len(combos) - 1) / 2) * step
                _draw(ax, x, p, colour, rng, jitter=step * 0.3)
                if p["verdict"] != "failed" and p.get("median") is not None:
                    line.append((x, p["median"]))
                    if p["verdict"] == "best":
                        ax.plot(x, p["median"], marker="*", ms=16, color=_MPL_COLOUR["best"],
                                zorder=4)
            if line:
                ax.plot(*zip(*line, strict=True), color=colour, lw=1.2, alpha=0.7, zorder=1)
            name = ", ".join(f"{k}={v}" for k, v in zip(knobs[1:], combo, strict=True))
            handles.append(Line2D([], [], marker="o", color=colour, label=name))
        handles.append(Line2D([], [], marker="*", ms=12, ls="", color=_MPL_COLOUR["best"],
                              label="best"))

    best = next((p for p in points if p["verdict"] == "best"), None)
    if best is not None:
        ax.axhline(best["median"], ls="--", lw=1, color=_MPL_COLOUR["best"], alpha=0.8)
        handles.append(Line2D([], [], ls="--", color=_MPL_COLOUR["best"], label="best median"))
    defaults = {str(p["settings"][first]) for p in points if p.get("is_default")}
    ax.set_xticks(range(len(xs)))
    ax.set_xticklabels([f"{v}\n(default)" if v in defaults and len(knobs) == 1 else v
                        for v in xs], rotation=45 if len(xs) > 10 else 0)
    ax.set_xlim(-0.6, len(xs) - 0.4)
    ax.set_xlabel(first)
    ax.set_ylabel(f"{result['objective']['metric']} (median, 95% CI)")
    ax.set_title(f"{result['name']} — {result['server'].get('version', '?')}")
    ax.grid(axis="y", alpha=0.3)
    ax.legend(handles=handles, fontsize="small", loc="best")
    fig.savefig(path, format="png", dpi=110)
    fig.clear()  # a bare Figure is not registered with pyplot: nothing else to close
    return path


# ----------------------------------------------------------------------------- time-series charts

_STALL_COLOUR = "#d62728"
# Colours for values: the tab10 cycle without its green and red, which mean best and worse.
_VALUE_COLOURS = ["C0", "C1", "C4", "C5", "C9", "C6", "C8", "C7"]


def write_charts(result: dict, folder: pathlib.Path) -> list[pathlib.Path]:
    """Every chart for `result` in `folder` (created if missing); returns the paths written.

    Query results: chart.png (see write_chart). Time-series results, per slice (a suffix such
    as "-threads-8" when sliced): tps-over-time.png (one panel per value), tps-overlay.png (all
    values on one axis) and tps-steady.png (steady mean ± stdev and 95% CI per value).
    """
    folder = pathlib.Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    if not _is_timeseries(result):
        return [write_chart(result, folder / "chart.png")]
    colours = _value_colours(result)
    paths = []
    for name, points in slices(result):
        suffix = _file_suffix(result, points[0]) if name else ""
        paths.append(_chart_over_time(result, points, name, colours,
                                      folder / f"tps-over-time{suffix}.png"))
        paths.append(_chart_overlay(result, points, name, colours,
                                    folder / f"tps-overlay{suffix}.png"))
        paths.append(_chart_steady(result, points, name, folder / f"tps-steady{suffix}.png"))
    return paths


def _file_suffix(result: dict, point: dict) -> str:
    """"-threads-8" (file-name safe) for the slice `point` belongs to."""
    parts = []
    for knob in _slice_knobs(result):
        parts += [knob, str(point["settings"][knob])]
    return "".join("-" + re.sub(r"[^A-Za-z0-9._]+", "_", part) for part in parts)


def _value_colours(result: dict) -> dict[str, str]:
    """One colour per value (label without the slice), the same in every slice and chart."""
    labels = dict.fromkeys(point_label(result, p) for p in result["points"])
    return {label: _VALUE_COLOURS[i % len(_VALUE_COLOURS)] for i, label in enumerate(labels)}


def _series(s: dict) -> tuple[np.ndarray, np.ndarray, int, int]:
    """(t, tps, steady start, steady end) of one repetition; t defaults to 1, 2, 3 … s."""
    tps = np.asarray(s.get("tps") or [], dtype=float)
    t = np.asarray(s.get("t") or np.arange(1, tps.size + 1), dtype=float)[: tps.size]
    start, end = s.get("steady") or (0, tps.size)
    return t, tps, max(0, int(start)), min(tps.size, int(end))


def _stall_mask(tps: np.ndarray, start: int, end: int, fraction: float) -> np.ndarray:
    """Seconds of the steady window below `fraction` × its median (as knoblab.timeseries)."""
    mask = np.zeros(tps.size, dtype=bool)
    window = tps[start:end]
    if window.size:
        mask[start:end] = window < fraction * float(np.median(window))
    return mask


def _title_label(result: dict, point: dict) -> str:
    return point_label(result, point) + (" (default)" if point.get("is_default") else "")


def _chart_title(result: dict, what: str, slice_name: str) -> str:
    work = result["workload"]
    threads = "" if "threads" in _slice_knobs(result) else f", {work.get('threads', '?')} threads"
    where = f" · {slice_name}" if slice_name else ""
    return (f"{result['name']} — {what}{where}\n"
            f"sysbench {work.get('test', '?')}{threads} · "
            f"{result['server'].get('version', '?')}")


def _save(fig: Figure, path: pathlib.Path) -> pathlib.Path:
    fig.savefig(path, format="png", dpi=110)
    fig.clear()  # a bare Figure is not registered with pyplot: nothing else to close
    return path


def _chart_over_time(result: dict, points: list[dict], slice_name: str,
                     colours: dict[str, str], path: pathlib.Path) -> pathlib.Path:
    """Small multiples: tps per second for each value, same axes, steady window and stalls."""
    fraction = (result.get("steady") or {}).get("stall_fraction", 0.1)
    metric = result["objective"]["metric"]
    ncols = min(3, len(points))
    nrows = math.ceil(len(points) / ncols)
    fig = Figure(figsize=(4.2 * ncols + 0.6, 2.7 * nrows + 1.3), layout="constrained")
    axes = fig.subplots(nrows, ncols, sharex=True, sharey=True, squeeze=False)
    # per point: (t, tps, steady start, end, whether the run failed) of each non-empty run
    runs = {id(p): [(*_series(s), s.get("status") == "failed") for s in p.get("series") or []]
            for p in points}
    runs = {key: [r for r in reps if r[1].size] for key, reps in runs.items()}
    top = max((float(r[1].max()) for reps in runs.values() for r in reps), default=0.0) or 1.0
    for ax, p in zip(axes.flat, points, strict=False):
        colour, reps = colours[point_label(result, p)], runs[id(p)]
        for t, tps, start, end, failed in reps:
            if failed:  # what a failed run managed before it failed: dotted, not judged
                ax.plot(t, tps, color=colour, lw=1.0, ls=":", alpha=0.7, zorder=2)
                continue
            if end > start:
                ax.axvspan(t[start] - 0.5, t[end - 1] + 0.5, color=colour, alpha=0.08, lw=0,
                           zorder=0)
            ax.plot(t, tps, color=colour, lw=1.0, alpha=0.9 if len(reps) == 1 else 0.6,
                    zorder=2)
            stalled = t[_stall_mask(tps, start, end, fraction)]
            ax.plot(stalled, np.full(stalled.size, 0.025), ls="", marker="|", ms=9, mew=1.6,
                    color=_STALL_COLOUR, transform=ax.get_xaxis_transform(), zorder=3)
        alive = p["verdict"] != "failed" and p.get("mean") is not None
        windows = [(t[start], t[end - 1]) for t, _, start, end, failed in reps
                   if end > start and not failed]
        if alive and windows:
            ax.hlines(p["mean"], min(w[0] for w in windows) - 0.5,
                      max(w[1] for w in windows) + 0.5, colors="black", linestyles="--", lw=1,
                      zorder=4)
        if alive:
            cv = p.get("cv")
            facts = [f"mean {_num(p['mean'])} {metric}"]
            if cv is not None and math.isfinite(cv):
                facts.append(f"CV {cv * 100:.1f}%")
            facts.append(f"stalls {p.get('stall_seconds') or 0} s")
            ax.text(0.02, 0.96, " · ".join(facts), transform=ax.transAxes, va="top",
                    fontsize="small", bbox={"facecolor": "white", "alpha": 0.8, "lw": 0,
                                            "pad": 1.5}, zorder=5)
        else:
            ax.text(0.5, 0.5, "failed", transform=ax.transAxes, ha="center", va="center",
                    color=_MPL_COLOUR["failed"], fontsize="large")
        ax.set_title(f"{_title_label(result, p)} — {p['verdict']}", fontsize="medium",
                     color=_MPL_COLOUR.get(p["verdict"], "black"), fontweight="bold")
        ax.grid(alpha=0.3)
    cells = list(axes.flat)
    for i, ax in enumerate(cells):
        if i >= len(points):  # an empty cell of the last row
            ax.remove()
        elif i + ncols >= len(points):  # the lowest panel of its column: x ticks and label
            ax.xaxis.set_tick_params(labelbottom=True)
            ax.set_xlabel("time (s)")
    cells[0].set_ylim(0, top * 1.25)  # room for the facts line above the highest second
    fig.supylabel(f"{metric} per second")
    fig.suptitle(_chart_title(result, f"{metric} per second", slice_name))
    handles = [
        Line2D([], [], color="0.3", lw=1, label=f"{metric} each second (one line per run)"),
        Line2D([], [], color="black", ls="--", lw=1, label="steady-state mean"),
        Patch(color="0.5", alpha=0.2, lw=0, label="steady state (used)"),
        Line2D([], [], color=_STALL_COLOUR, ls="", marker="|", ms=9, mew=1.6,
               label=f"stall second (< {fraction * 100:g}% of steady median)"),
    ]
    fig.legend(handles=handles, loc="outside lower center", ncols=min(4, 2 * ncols),
               fontsize="small", frameon=False)
    return _save(fig, path)


def _chart_overlay(result: dict, points: list[dict], slice_name: str,
                   colours: dict[str, str], path: pathlib.Path) -> pathlib.Path:
    """Every value's tps per second on one axis, one colour per value."""
    metric = result["objective"]["metric"]
    fig = Figure(figsize=(10.5, 5.0), layout="constrained")
    ax = fig.add_subplot()
    handles = []
    for p in points:
        label = point_label(result, p)
        colour = colours[label]
        reps = [s for s in p.get("series") or [] if _series(s)[1].size]
        for s in reps:
            t, tps, _, _ = _series(s)
            ax.plot(t, tps, color=colour, lw=1.1, alpha=0.85 if len(reps) == 1 else 0.6)
        handles.append(Line2D([], [], color=colour, lw=2.5,
                              label=f"{_title_label(result, p)} — {p['verdict']}"))
    ax.set_ylim(bottom=0)
    ax.set_xlabel("time (s)")
    ax.set_ylabel(f"{metric} per second")
    ax.set_title(_chart_title(result, f"{metric} per second, all values", slice_name))
    ax.grid(alpha=0.3)
    ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize="small",
              title=", ".join(_value_knobs(result)), title_fontsize="small")
    return _save(fig, path)


def _chart_steady(result: dict, points: list[dict], slice_name: str,
                  path: pathlib.Path) -> pathlib.Path:
    """Steady-state mean per value: ± stdev (thin, capped) and the 95% CI (thick), by verdict."""
    metric = result["objective"]["metric"]
    fig = Figure(figsize=(max(7.5, 1.1 * len(points) + 4.5), 4.8), layout="constrained")
    ax = fig.add_subplot()
    ticks = []
    for x, p in enumerate(points):
        colour = _MPL_COLOUR.get(p["verdict"], "black")
        stall = p.get("stall_seconds")
        ticks.append(_title_label(result, p).replace(" (default)", "\n(default)")
                     + (f"\n{stall} s stalled" if stall else ""))
        if p["verdict"] == "failed" or p.get("mean") is None:
            trans = ax.get_xaxis_transform()
            ax.plot(x, 0.04, marker="x", ms=10, mew=2, color=colour, transform=trans)
            ax.text(x, 0.08, "failed", ha="center", color=colour, transform=trans)
            continue
        mean, stdev = p["mean"], p.get("stdev") or 0.0
        ax.errorbar(x, mean, yerr=stdev, fmt="none", ecolor=colour, elinewidth=1.2, capsize=9,
                    capthick=1.2, alpha=0.7, zorder=2)
        lo, hi = p.get("ci95") or (mean, mean)
        ax.vlines(x, lo, hi, colors=colour, lw=7, alpha=0.55, zorder=3)
        ax.plot(x, mean, marker="o", ms=8, color=colour, mec="white", mew=1.2, zorder=4)
        ax.annotate(_num(mean), (x, mean), xytext=(14, 0), textcoords="offset points",
                    va="center", fontsize="small", color=colour)
    best = next((p for p in points if p["verdict"] == "best" and p.get("mean") is not None),
                None)
    handles = [Line2D([], [], marker="o", ls="", color=_MPL_COLOUR[v], label=v)
               for v in _MPL_COLOUR if any(p["verdict"] == v for p in points)]
    handles += [
        Line2D([], [], color="0.4", lw=1.2, marker="_", ms=14, label="mean ± stdev (per second)"),
        Line2D([], [], color="0.4", lw=7, alpha=0.55, label="95% CI of the mean"),
    ]
    if best is not None:
        ax.axhline(best["mean"], ls="--", lw=1, color=_MPL_COLOUR["best"], alpha=0.8)
        handles.append(Line2D([], [], ls="--", color=_MPL_COLOUR["best"], label="best mean"))
    ax.set_xticks(range(len(points)))
    ax.set_xticklabels(ticks, rotation=45 if len(points) > 10 else 0)
    ax.set_xlim(-0.6, len(points) - 0.4)
    tops = [max(p["mean"] + (p.get("stdev") or 0.0), *(p.get("ci95") or [p["mean"]]))
            for p in points if p["verdict"] != "failed" and p.get("mean") is not None]
    ax.set_ylim(0, max(tops, default=1.0) * 1.08 or 1.0)  # from 0, caps not on the frame
    ax.set_xlabel(", ".join(_value_knobs(result)))
    ax.set_ylabel(f"{metric} (steady state)")
    ax.set_title(_chart_title(result, f"steady-state {metric}", slice_name))
    ax.grid(axis="y", alpha=0.3)
    ax.legend(handles=handles, fontsize="small", loc="upper left", bbox_to_anchor=(1.01, 1.0))
    return _save(fig, path)
