"""Presentation of a finished results dict: terminal table, conclusion sentence, PNG chart.

Pure formatting: every number shown here was computed elsewhere (see knoblab.stats).
"""

from __future__ import annotations

import math
import pathlib

import numpy as np
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from rich.console import Console
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
    """3 significant digits, never scientific, never fewer digits than the integer part."""
    if x == 0 or not math.isfinite(x):
        return f"{x:.2f}" if x == 0 else str(x)
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


def point_label(result: dict, point: dict) -> str:
    """"128K" for one knob, "read_buffer_size=128K, sort_buffer_size=2M" for a grid."""
    knobs = result["knobs"]
    if len(knobs) == 1:
        return str(point["settings"][knobs[0]])
    return ", ".join(f"{k}={point['settings'][k]}" for k in knobs)


# ----------------------------------------------------------------------------- conclusion


def _failures(result: dict) -> str:
    parts = []
    for p in result["points"]:
        if p["verdict"] != "failed" and not p.get("failed"):
            continue
        runs = p.get("n", 0) + p.get("failed", 0)
        part = f"{point_label(result, p)} ({p.get('failed', 0)} of {runs} runs)"
        first_error = str((p.get("errors") or [""])[0]).strip()
        if first_error:
            part += f" — {first_error.splitlines()[0][:120]}"
        parts.append(part)
    return f"Failed: {'; '.join(parts)}." if parts else ""


def conclusion_text(result: dict) -> str:
    """The verdict in one paragraph, built from the points (not from result["conclusion"])."""
    points = result["points"]

    def label(p: dict) -> str:
        return point_label(result, p)

    by = {v: [p for p in points if p["verdict"] == v] for v in _RICH_STYLE}
    default = next((p for p in points if p.get("is_default")), None)
    slower = "slower" if result["objective"]["direction"] == "minimize" else "lower"
    failed = _failures(result)

    if not by["best"]:
        return " ".join(filter(None, ["Every point failed: nothing to compare.", failed]))
    best = by["best"][0]
    if by["worse"]:
        sentences = [f"Best: {label(best)} ({_num(best['median'])} {_unit(result)})."]
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
        n_text = f"n = {ns[0]} each" if len(ns) == 1 else f"n = {ns[0]}–{ns[-1]}"
        keep = f"the default ({label(default)})" if default else "the current value"
        sentences = [
            f"No value is significantly better than another (minimum effect "
            f"{stats['min_effect'] * 100:g}%, α = {stats['alpha']:g}, {n_text}): keep {keep}."
        ]
    return " ".join(sentences + ([failed] if failed else []))


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
