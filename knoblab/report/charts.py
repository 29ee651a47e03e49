"""PNG charts: write_chart, write_charts and one matplotlib chart per view.

Timed sweeps (_chart_timed, _chart_scaling), time series (_chart_over_time, _chart_overlay,
_chart_steady, _chart_os), steps runs (_chart_waterfall) and servers compared
(_chart_servers). Figures are bare matplotlib Figures, never pyplot: no backend is selected and
nothing is registered globally. Labels and numbers come from knoblab.report.format.
"""

from __future__ import annotations

import functools
import math
import pathlib
import re
import unicodedata
from collections.abc import Callable
from typing import Any

import numpy as np
from matplotlib import font_manager
from matplotlib.artist import Artist
from matplotlib.axes import Axes
from matplotlib.axis import Axis
from matplotlib.figure import Figure
from matplotlib.font_manager import FontProperties
from matplotlib.ft2font import FT2Font
from matplotlib.lines import Line2D
from matplotlib.patches import Patch
from matplotlib.text import Text
from matplotlib.ticker import Formatter

from knoblab.literal import literal
from knoblab.records import OsRun, Point, Results, SeriesRun, Steady, StepsTable
from knoblab.report.format import (
    GIVES_UP,
    STEP_FINDING,
    as_count,
    at_text,
    base_label,
    clipped,
    count,
    headline,
    is_measured,
    point_label,
    signed,
    slice_heading,
    slices,
    step_costs,
    step_finding_text,
    step_label,
    unlike_levels,
    value_knobs,
    where,
    wrap_name,
)
from knoblab.units import num
from knoblab.vocabulary import PointVerdict, StepVerdict, TrialState
from knoblab.words import FINDING_WORDS

VERDICT_COLOURS = {
    PointVerdict.BEST: "#2ca02c",
    PointVerdict.FASTEST: "#98df8a",  # the leader, not recommended: a paler green
    PointVerdict.HIGHEST: "#98df8a",
    PointVerdict.EQUIVALENT: "#4c72b0",
    PointVerdict.INCONCLUSIVE: "#9a9a9a",
    PointVerdict.WORSE: "#d62728",
    PointVerdict.FAILED: "#b000b0",
    PointVerdict.NOT_RUN: "#7f7f7f",
}
_NOT_MEASURED = (PointVerdict.FAILED, PointVerdict.NOT_RUN)


# ----------------------------------------------------------------------------- text

# Fonts that draw what DejaVu Sans (matplotlib's own) lacks: CJK, symbols, monochrome emoji.
# Those installed are used after it; a character none of them has is replaced.
_FALLBACK_FAMILIES = ("Noto Sans", "Noto Sans CJK JP", "Noto Sans CJK SC", "Noto Sans Symbols",
                      "Noto Sans Symbols 2", "Noto Sans Math", "Noto Emoji", "Symbola",
                      "WenQuanYi Zen Hei", "Droid Sans Fallback")
_INVISIBLE = ("Mn", "Me", "Cf")  # combining marks, variation selectors, joiners


@functools.cache
def _fonts() -> tuple[list[str], frozenset[int]]:
    """The families a chart's text is drawn with (the default first) and every character one
    of them has."""
    families, chars = ["sans-serif"], set()
    for family in ("sans-serif", *_FALLBACK_FAMILIES):
        try:
            path = font_manager.findfont(FontProperties(family=[family]),
                                         fallback_to_default=False)
            chars |= set(FT2Font(path).get_charmap())
        except (ValueError, RuntimeError, OSError):  # not installed, or not drawable
            continue
        if family != "sans-serif":
            families.append(family)
    return families, frozenset(chars)


def drawable(text: str) -> str:
    """`text` as a chart shows it literally: control characters made visible (knoblab.literal),
    "$" never read as mathematics (an odd formula would stop the chart), and a character no
    installed font has replaced by "□" (matplotlib would warn in the user's terminal)."""
    shown = literal(text, lines=True).replace("\t", " ").replace("$", r"\$")
    _, chars = _fonts()
    missing = "\u25a1" if 0x25A1 in chars else "?"
    return "".join(c if c == "\n" or ord(c) in chars else
                   "" if unicodedata.category(c) in _INVISIBLE else missing for c in shown)


class _Drawable(Formatter):
    """A tick formatter whose labels (a point's value, a setting's name) are drawable."""

    def __init__(self, inner: Formatter) -> None:
        self.inner = inner

    def __call__(self, x: Any, pos: Any = None) -> str:
        return drawable(self.inner(x, pos))

    def format_ticks(self, values: Any) -> list[str]:
        return [drawable(label) for label in self.inner.format_ticks(values)]

    def get_offset(self) -> str:
        return drawable(self.inner.get_offset())

    def set_locs(self, locs: Any) -> None:
        self.inner.set_locs(locs)


def _drawable_figure(fig: Figure) -> None:
    """Every text of `fig` drawable (see drawable): titles, labels, legends, annotations and
    the tick labels its axes will draw, in the fonts that have their characters."""
    families, _ = _fonts()
    for text in fig.findobj(Text):
        assert isinstance(text, Text)
        text.set_text(drawable(text.get_text()))
        if len(families) > 1:
            text.set_fontfamily(families)
    for ax in fig.axes:
        for axis in (ax.xaxis, ax.yaxis):
            if not isinstance(axis.get_major_formatter(), _Drawable):
                axis.set_major_formatter(_Drawable(axis.get_major_formatter()))
            if not isinstance(axis.get_minor_formatter(), _Drawable):
                axis.set_minor_formatter(_Drawable(axis.get_minor_formatter()))
            if len(families) > 1:  # new ticks copy the first one's font
                for tick in (*axis.get_major_ticks()[:1], *axis.get_minor_ticks()[:1]):
                    tick.label1.set_fontfamily(families)
                    tick.label2.set_fontfamily(families)


# ----------------------------------------------------------------------------- chart


def _draw(ax: Axes, x: float, p: Point, colour: str, rng: np.random.Generator,
          jitter: float = 0.12) -> None:
    """Samples as jittered dots, then the median with its 95% CI; failed points as an × below."""
    median = p.evidence.median
    if p.verdict in _NOT_MEASURED or median is None:
        trans = ax.get_xaxis_transform()  # x in data, y in axes fraction
        colour = VERDICT_COLOURS.get(p.verdict, VERDICT_COLOURS[PointVerdict.FAILED])
        ax.plot(x, 0.04, marker="x", ms=10, mew=2, color=colour, transform=trans)
        ax.text(x, 0.08, "not run" if p.verdict == PointVerdict.NOT_RUN else "failed",
                ha="center", color=colour, transform=trans)
        return
    samples = np.asarray(p.evidence.samples, dtype=float)
    ax.scatter(x + rng.uniform(-jitter, jitter, samples.size), samples, s=12, color=colour,
               alpha=0.3, linewidths=0, zorder=2)
    lo, hi = p.evidence.ci95 or (median, median)
    yerr = [[max(0.0, median - lo)], [max(0.0, hi - median)]]
    ax.errorbar(x, median, yerr=yerr, fmt="o", ms=7,
                color=colour, ecolor=colour, capsize=4, zorder=3)


def write_chart(results: Results, path: pathlib.Path) -> pathlib.Path:
    """Median ± 95% CI per point (plus raw samples) on a categorical x axis; PNG at `path`.

    Every point of `results`; write_charts draws one such chart per slice instead.
    """
    return _chart_timed(results, results.points, "", pathlib.Path(path))


def _chart_timed(results: Results, points: list[Point], slice_name: str,
                 path: pathlib.Path) -> pathlib.Path:
    """write_chart for `points` (one slice, named in the title when not "")."""
    knobs = value_knobs(results)
    first = knobs[0]
    xs = list(dict.fromkeys(str(p.settings[first]) for p in points))
    position = {v: i for i, v in enumerate(xs)}
    rng = np.random.default_rng(0)
    fig = Figure(figsize=(max(6.4, 0.9 * len(xs) + 2.5), 4.8), layout="constrained")
    ax = fig.add_subplot()

    handles: list[Artist]
    if len(knobs) == 1:
        for p in points:
            # older JSON's words
            colour = VERDICT_COLOURS.get(p.verdict, VERDICT_COLOURS[PointVerdict.EQUIVALENT])
            _draw(ax, position[str(p.settings[first])], p, colour, rng)
        shown = [v for v in VERDICT_COLOURS if any(p.verdict == v for p in points)]
        handles = [Line2D([], [], marker="x" if v in _NOT_MEASURED else "o", ls="",
                          color=VERDICT_COLOURS[v], label=v) for v in shown]
    else:
        def rest(p: Point) -> tuple[str, ...]:
            return tuple(str(p.settings[k]) for k in knobs[1:])

        combos = list(dict.fromkeys(rest(p) for p in points))
        step = min(0.2, 0.6 / len(combos))  # dodge the series around each x position
        handles = []
        for i, combo in enumerate(combos):
            colour = f"C{i % 10}"
            line = []
            for p in (p for p in points if rest(p) == combo):
                x = position[str(p.settings[first])] + (i - (len(combos) - 1) / 2) * step
                _draw(ax, x, p, colour, rng, jitter=step * 0.3)
                median = p.evidence.median
                if p.verdict != PointVerdict.FAILED and median is not None:
                    line.append((x, median))
                    if p.verdict.leads:
                        ax.plot(x, median, marker="*", ms=16,
                                color=VERDICT_COLOURS[p.verdict], zorder=4)
            if line:
                ax.plot(*zip(*line, strict=True), color=colour, lw=1.2, alpha=0.7, zorder=1)
            name = ", ".join(f"{k}={v}" for k, v in zip(knobs[1:], combo, strict=True))
            handles.append(Line2D([], [], marker="o", color=colour, label=name))
        handles += [Line2D([], [], marker="*", ms=12, ls="", color=VERDICT_COLOURS[v],
                           label=str(v))
                    for v in dict.fromkeys(p.verdict for p in points if p.verdict.leads)]

    best = next((median for p in points if p.verdict.leads
                 and (median := p.evidence.median) is not None), None)
    if best is not None:
        ax.axhline(best, ls="--", lw=1, color=VERDICT_COLOURS[PointVerdict.BEST], alpha=0.8)
        handles.append(Line2D([], [], ls="--", color=VERDICT_COLOURS[PointVerdict.BEST],
                              label="fastest median measured"))
    defaults = {str(p.settings[first]) for p in points if p.is_default}
    ax.set_xticks(range(len(xs)))
    ax.set_xticklabels([f"{v}\n(default)" if v in defaults and len(knobs) == 1 else v
                        for v in xs], rotation=45 if len(xs) > 10 else 0)
    ax.set_xlim(-0.6, len(xs) - 0.4)
    ax.set_xlabel(first)
    ax.set_ylabel(f"{results.objective.metric} (median, 95% CI)")
    at = f" · {slice_name}" if slice_name else ""
    ax.set_title(f"{results.name} — {results.server_version or '?'}{at}")
    ax.grid(axis="y", alpha=0.3)
    ax.legend(handles=handles, fontsize="small", loc="best")
    return save_figure(fig, path)


# ----------------------------------------------------------------------------- time-series charts

_STALL_COLOUR = "#d62728"
# Colours for values: the tab10 cycle without its green and red, which mean best and worse.
_VALUE_COLOURS = ["C0", "C1", "C4", "C5", "C9", "C6", "C8", "C7"]


def _tidy_grid(axes: np.ndarray, n_panels: int, ncols: int) -> list[Axes]:
    """Remove the empty cells of a small-multiples grid; label the lowest panel of each column."""
    cells = list(axes.flat)
    for i, ax in enumerate(cells):
        if i >= n_panels:  # an empty cell of the last row
            ax.remove()
        elif i + ncols >= n_panels:  # the lowest panel of its column: x ticks and label
            ax.xaxis.set_tick_params(labelbottom=True)
            ax.set_xlabel("time (s)")
    return cells


def write_charts(results: Results, folder: pathlib.Path) -> list[pathlib.Path]:
    """Every chart for `results` in `folder` (created if missing); returns the paths written.

    Charts are drawn per slice, with a suffix such as "-threads-8" or "-rows-1000000" when the
    results are sliced. Timed results: chart.png (see write_chart), plus scaling.png (time against
    rows, see _chart_scaling) when rows were swept. Time-series results: tps-over-time.png (one
    panel per value), tps-overlay.png (all values on one axis), tps-steady.png (steady mean ±
    stdev and 95% CI per value) and, when the OS was sampled every second, os-over-time.png
    (CPU and disk per second, one panel per value). Steps runs: steps-waterfall.png per slice
    ("-binary-gcc"), see _chart_waterfall. Any run compared on several servers: servers.png.
    """
    folder = pathlib.Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    if results.steps is not None:
        paths = [_chart_waterfall(results, table, folder /
                                  f"steps-waterfall{_dict_suffix(table.slice)}.png")
                 for table in results.steps]
    elif results.objective.time_series:
        paths = _timeseries_charts(results, folder)
    else:
        paths = []
        for name, points in slices(results):
            suffix = _dict_suffix(_slice_of(results, points[0])) if name else ""
            paths.append(_chart_timed(results, points, name, folder / f"chart{suffix}.png"))
        if _scales_with_rows(results):
            paths.append(_chart_scaling(results, folder / "scaling.png"))
    if results.servers_compared:
        paths.append(_chart_servers(results, folder / "servers.png"))
    return paths


def _timeseries_charts(results: Results, folder: pathlib.Path) -> list[pathlib.Path]:
    paths = []
    colours = _value_colours(results)
    for name, points in slices(results):
        suffix = _dict_suffix(_slice_of(results, points[0])) if name else ""
        paths.append(_chart_over_time(results, points, name, colours,
                                      folder / f"tps-over-time{suffix}.png"))
        paths.append(_chart_overlay(results, points, name, colours,
                                    folder / f"tps-overlay{suffix}.png"))
        paths.append(_chart_steady(results, points, name, folder / f"tps-steady{suffix}.png"))
        if any(_os_run(p) is not None for p in points):
            paths.append(_chart_os(results, points, name, folder / f"os-over-time{suffix}.png"))
    return paths


def _slice_of(results: Results, point: Point) -> dict[str, str]:
    return {knob: point.settings[knob] for knob in results.slices}


def _dict_suffix(slice_: dict[str, str]) -> str:
    """"-threads-8", "-binary-gcc" (file-name safe) for a slice, "" for {}."""
    parts = [part for item in slice_.items() for part in item]
    return "".join("-" + re.sub(r"[^A-Za-z0-9._]+", "_", part) for part in parts)


def _value_colours(results: Results) -> dict[str, str]:
    """One colour per value (label without the slice), the same in every slice and chart."""
    labels = dict.fromkeys(point_label(results, p) for p in results.points)
    return {label: _VALUE_COLOURS[i % len(_VALUE_COLOURS)] for i, label in enumerate(labels)}


def _runs(point: Point) -> list[SeriesRun]:
    """A time-series point's runs ([] for any other point)."""
    return point.time_series.series if point.time_series else []


def _series(s: SeriesRun) -> tuple[np.ndarray, np.ndarray, int, int]:
    """(t, tps, steady start, steady end) of one repetition; t defaults to 1, 2, 3 … s."""
    tps = np.asarray(s.tps, dtype=float)
    t = np.asarray(s.t or np.arange(1, tps.size + 1), dtype=float)[: tps.size]
    start, end = s.steady or (0, tps.size)
    return t, tps, max(0, int(start)), min(tps.size, int(end))


def _stall_mask(tps: np.ndarray, start: int, end: int, fraction: float) -> np.ndarray:
    """Seconds of the steady window below `fraction` × its median (as knoblab.timeseries)."""
    mask = np.zeros(tps.size, dtype=bool)
    window = tps[start:end]
    if window.size:
        mask[start:end] = window < fraction * float(np.median(window))
    return mask


def _title_label(results: Results, point: Point) -> str:
    return point_label(results, point) + (" (default)" if point.is_default else "")


def _chart_title(results: Results, what: str, slice_name: str) -> str:
    ran = headline(results)
    at = f" · {slice_name}" if slice_name else ""
    return (f"{results.name} — {what}{at}\n"
            f"{', '.join([ran.what, *ran.how])} · {results.server_version or '?'}")


def save_figure(fig: Figure, path: pathlib.Path) -> pathlib.Path:
    _drawable_figure(fig)
    fig.savefig(path, format="png", dpi=110)
    fig.clear()  # a bare Figure is not registered with pyplot: nothing else to close
    return path


def _chart_over_time(results: Results, points: list[Point], slice_name: str,
                     colours: dict[str, str], path: pathlib.Path) -> pathlib.Path:
    """Small multiples: tps per second for each value, same axes, steady window and stalls."""
    fraction = (results.steady or Steady()).stall_fraction
    metric = results.objective.metric
    ncols = min(3, len(points))
    nrows = math.ceil(len(points) / ncols)
    fig = Figure(figsize=(4.2 * ncols + 0.6, 2.7 * nrows + 1.3), layout="constrained")
    axes = fig.subplots(nrows, ncols, sharex=True, sharey=True, squeeze=False)
    # per point: (t, tps, steady start, end, whether the run failed) of each non-empty run
    runs = {id(p): [(*_series(s), s.status == TrialState.FAILED) for s in _runs(p)]
            for p in points}
    runs = {key: [r for r in reps if r[1].size] for key, reps in runs.items()}
    top = max((float(r[1].max()) for reps in runs.values() for r in reps), default=0.0) or 1.0
    for ax, p in zip(axes.flat, points, strict=False):
        colour, reps = colours[point_label(results, p)], runs[id(p)]
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
        series, mean = p.time_series, p.evidence.mean
        windows = [(t[start], t[end - 1]) for t, _, start, end, failed in reps
                   if end > start and not failed]
        if p.verdict != PointVerdict.FAILED and series is not None and mean is not None:
            if windows:
                ax.hlines(mean, min(w[0] for w in windows) - 0.5,
                          max(w[1] for w in windows) + 0.5, colors="black", linestyles="--",
                          lw=1, zorder=4)
            cv = series.cv
            facts = [f"mean {num(mean)} {metric}"]
            if cv is not None and math.isfinite(cv):
                facts.append(f"CV {cv * 100:.1f}%")
            facts.append(f"stalls {series.stall_seconds or 0} s")
            ax.text(0.02, 0.96, " · ".join(facts), transform=ax.transAxes, va="top",
                    fontsize="small", bbox={"facecolor": "white", "alpha": 0.8, "lw": 0,
                                            "pad": 1.5}, zorder=5)
        else:
            ax.text(0.5, 0.5, "failed", transform=ax.transAxes, ha="center", va="center",
                    color=VERDICT_COLOURS[PointVerdict.FAILED], fontsize="large")
        ax.set_title(f"{_title_label(results, p)} — {p.verdict}", fontsize="medium",
                     color=VERDICT_COLOURS.get(p.verdict, "black"), fontweight="bold")
        ax.grid(alpha=0.3)
    cells = _tidy_grid(axes, len(points), ncols)
    cells[0].set_ylim(0, top * 1.25)  # room for the facts line above the highest second
    fig.supylabel(f"{metric} per second")
    fig.suptitle(_chart_title(results, f"{metric} per second", slice_name))
    handles: list[Artist] = [
        Line2D([], [], color="0.3", lw=1, label=f"{metric} each second (one line per run)"),
        Line2D([], [], color="black", ls="--", lw=1, label="steady-state mean"),
        Patch(color="0.5", alpha=0.2, lw=0, label="steady state (used)"),
        Line2D([], [], color=_STALL_COLOUR, ls="", marker="|", ms=9, mew=1.6,
               label=f"stall second (< {fraction * 100:g}% of steady median)"),
    ]
    fig.legend(handles=handles, loc="outside lower center", ncols=min(4, 2 * ncols),
               fontsize="small", frameon=False)
    return save_figure(fig, path)


def _chart_overlay(results: Results, points: list[Point], slice_name: str,
                   colours: dict[str, str], path: pathlib.Path) -> pathlib.Path:
    """Every value's tps per second on one axis, one colour per value."""
    metric = results.objective.metric
    fig = Figure(figsize=(10.5, 5.0), layout="constrained")
    ax = fig.add_subplot()
    handles = []
    for p in points:
        label = point_label(results, p)
        colour = colours[label]
        reps = [s for s in _runs(p) if _series(s)[1].size]
        for s in reps:
            t, tps, _, _ = _series(s)
            ax.plot(t, tps, color=colour, lw=1.1, alpha=0.85 if len(reps) == 1 else 0.6)
        handles.append(Line2D([], [], color=colour, lw=2.5,
                              label=f"{_title_label(results, p)} — {p.verdict}"))
    ax.set_ylim(bottom=0)
    ax.set_xlabel("time (s)")
    ax.set_ylabel(f"{metric} per second")
    ax.set_title(_chart_title(results, f"{metric} per second, all values", slice_name))
    ax.grid(alpha=0.3)
    ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize="small",
              title=", ".join(value_knobs(results)), title_fontsize="small")
    return save_figure(fig, path)


def _chart_steady(results: Results, points: list[Point], slice_name: str,
                  path: pathlib.Path) -> pathlib.Path:
    """Steady-state mean per value: ± stdev (thin, capped) and the 95% CI (thick), by verdict."""
    metric = results.objective.metric
    fig = Figure(figsize=(max(7.5, 1.1 * len(points) + 4.5), 4.8), layout="constrained")
    ax = fig.add_subplot()
    ticks = []
    tops = []
    for x, p in enumerate(points):
        colour = VERDICT_COLOURS.get(p.verdict, "black")
        stall = p.time_series.stall_seconds if p.time_series else None
        ticks.append(_title_label(results, p).replace(" (default)", "\n(default)")
                     + (f"\n{stall} s stalled" if stall else ""))
        mean = p.evidence.mean
        if p.verdict in _NOT_MEASURED or mean is None:
            trans = ax.get_xaxis_transform()
            ax.plot(x, 0.04, marker="x", ms=10, mew=2, color=colour, transform=trans)
            ax.text(x, 0.08, "not run" if p.verdict == PointVerdict.NOT_RUN else "failed",
                    ha="center", color=colour, transform=trans)
            continue
        stdev = p.evidence.stdev or 0.0
        ax.errorbar(x, mean, yerr=stdev, fmt="none", ecolor=colour, elinewidth=1.2, capsize=9,
                    capthick=1.2, alpha=0.7, zorder=2)
        lo, hi = p.evidence.ci95 or (mean, mean)
        tops.append(max(mean + stdev, lo, hi))
        ax.vlines(x, lo, hi, colors=colour, lw=7, alpha=0.55, zorder=3)
        ax.plot(x, mean, marker="o", ms=8, color=colour, mec="white", mew=1.2, zorder=4)
        ax.annotate(num(mean), (x, mean), xytext=(14, 0), textcoords="offset points",
                    va="center", fontsize="small", color=colour)
    best = next((mean for p in points
                 if p.verdict.leads and (mean := p.evidence.mean) is not None), None)
    handles = [Line2D([], [], marker="o", ls="", color=VERDICT_COLOURS[v], label=v)
               for v in VERDICT_COLOURS if any(p.verdict == v for p in points)]
    handles += [
        Line2D([], [], color="0.4", lw=1.2, marker="_", ms=14, label="mean ± stdev (per second)"),
        Line2D([], [], color="0.4", lw=7, alpha=0.55, label="95% CI of the mean"),
    ]
    if best is not None:
        ax.axhline(best, ls="--", lw=1, color=VERDICT_COLOURS[PointVerdict.BEST], alpha=0.8)
        handles.append(Line2D([], [], ls="--", color=VERDICT_COLOURS[PointVerdict.BEST],
                              label="highest mean measured"))
    ax.set_xticks(range(len(points)))
    ax.set_xticklabels(ticks, rotation=45 if len(points) > 10 else 0)
    ax.set_xlim(-0.6, len(points) - 0.4)
    ax.set_ylim(0, max(tops, default=1.0) * 1.08 or 1.0)  # from 0, caps not on the frame
    ax.set_xlabel(", ".join(value_knobs(results)))
    ax.set_ylabel(f"{metric} (steady state)")
    ax.set_title(_chart_title(results, f"steady-state {metric}", slice_name))
    ax.grid(axis="y", alpha=0.3)
    ax.legend(handles=handles, fontsize="small", loc="upper left", bbox_to_anchor=(1.01, 1.0))
    return save_figure(fig, path)


# ----------------------------------------------------------------------------- data size

def _scales_with_rows(results: Results) -> bool:
    """Were rows swept (a slice) over at least two sizes? Then time against size is charted."""
    if results.objective.time_series or "rows" not in results.slices:
        return False
    counts = {as_count(p.settings.get("rows")) for p in results.points} - {None}
    return len(counts) >= 2


def log_axis_labels(axis: Axis, low: float, high: float,
                     formatter: Callable[[float], str]) -> None:
    """Plain numbers on a log axis ("0.5", "2", not "5×10⁻¹"), also at 2× and 5× when the axis
    spans little more than a decade (else it would carry one label or none)."""
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    axis.set_major_formatter(FuncFormatter(lambda v, _: formatter(v)))
    span = high / low if low > 0 else math.inf
    if span < 300:
        subs = (2.0, 3.0, 5.0) if span < 30 else (2.0, 5.0)
        axis.set_minor_locator(LogLocator(base=10, subs=subs))
        axis.set_minor_formatter(FuncFormatter(lambda v, _: formatter(v)))
    else:
        axis.set_minor_formatter(NullFormatter())


def short_number(x: float) -> str:
    """An axis label or a factor: "0.5", "2", "19.3", "1,200"."""
    return num(x) if abs(x) >= 1000 else f"{x:.3g}"


def _chart_scaling(results: Results, path: pathlib.Path) -> pathlib.Path:
    """Median time against rows on log–log axes, one line per value (95% CI bars), and per line
    a faint dotted line growing linearly from its smallest size: a line bending above its
    reference takes more than linearly longer as the data grows (e.g. a temporary table
    spilling to disk). Failed points are left out."""
    from matplotlib.ticker import FixedLocator, NullLocator

    others = [k for k in results.slices if k != "rows"]  # e.g. engine: its own lines

    def line_of(p: Point) -> str:
        extra = ", ".join(f"{k}={p.settings.get(k)}" for k in others)
        return point_label(results, p) + (f", {extra}" if extra else "")

    names = list(dict.fromkeys(line_of(p) for p in results.points))
    found: dict[str, list[tuple[float, float, Point]]] = {name: [] for name in names}
    for p in results.points:  # per line, (rows, median, point) of every size measured
        size, median = as_count(p.settings.get("rows")), p.evidence.median
        if size is not None and p.verdict != PointVerdict.FAILED and median is not None:
            found[line_of(p)].append((size, median, p))
    lines = {name: sorted(members, key=lambda m: m[0]) for name, members in found.items()
             if members}
    counts = sorted({size for members in lines.values() for size, _, _ in members})

    fig = Figure(figsize=(10.5, 5.6), layout="constrained")
    ax = fig.add_subplot()
    ax.set_xscale("log")
    ax.set_yscale("log")
    handles: list[Artist] = []
    for i, (name, members) in enumerate(lines.items()):
        colour = _VALUE_COLOURS[i % len(_VALUE_COLOURS)]
        dodge = 10 ** ((i - (len(lines) - 1) / 2) * 0.008)  # bars side by side, not on top
        rows = np.array([size for size, _, _ in members]) * dodge
        medians = np.array([median for _, median, _ in members])
        cis = [p.evidence.ci95 or (median, median) for _, median, p in members]
        yerr = np.clip([medians - np.array([lo for lo, _ in cis]),
                        np.array([hi for _, hi in cis]) - medians], 0, None)
        ax.errorbar(rows, medians, yerr=yerr, color=colour, marker="o", ms=6,
                    lw=1.6, capsize=3, zorder=3)
        worse = [j for j, (_, _, p) in enumerate(members) if p.verdict == PointVerdict.WORSE]
        ax.plot(rows[worse], medians[worse], ls="", marker="o", ms=6, mfc="white", mec=colour,
                mew=1.5, zorder=4)
        for verdict in (v for v in VERDICT_COLOURS if v.leads):
            best = [j for j, (_, _, p) in enumerate(members) if p.verdict == verdict]
            ax.plot(rows[best], medians[best], ls="", marker="*", ms=13,
                    color=VERDICT_COLOURS[verdict], mec="white", mew=0.6, zorder=5)
        r0, m0 = members[0][0], medians[0]
        label = name + (" (default)" if any(p.is_default for _, _, p in members) else "")
        if len(members) > 1:
            ax.plot(rows[[0, -1]], m0 * np.array([r0, members[-1][0]]) / r0, color=colour,
                    ls=":", lw=1.4, alpha=0.65, zorder=2)
            label += (f": ×{short_number(medians[-1] / m0)} time for "
                      f"×{short_number(members[-1][0] / r0)} rows")
        handles.append(Line2D([], [], color=colour, marker="o", lw=1.6, label=label))
    handles += [
        Line2D([], [], color="0.4", ls=":", lw=1.3, label="linear from the smallest size"),
        Line2D([], [], color="0.4", ls="", marker="o", mfc="white", mew=1.5,
               label="worse than the fastest at that size"),
        *(Line2D([], [], color=VERDICT_COLOURS[v], ls="", marker="*", ms=12,
                 label=f"{v} at that size")
          for v in dict.fromkeys(p.verdict for p in results.points if p.verdict.leads)),
    ]
    ax.xaxis.set_major_locator(FixedLocator(counts))
    ax.xaxis.set_minor_locator(NullLocator())
    ax.set_xticks(counts, [count(c) for c in counts])
    if counts:
        ax.set_xlim(counts[0] / 1.35, counts[-1] * 1.35)
    log_axis_labels(ax.yaxis, *ax.get_ylim(), short_number)
    ax.set_xlabel("rows (log scale)")
    ax.set_ylabel(f"{results.objective.metric} (median, 95% CI, log scale)")
    ran = headline(results)
    ax.set_title(f"{results.name} — time against data size\n"
                 f"{' · '.join([clipped(ran.what, 60), *ran.how])} · "
                 f"{results.server_version or '?'}", fontsize="medium")
    ax.grid(which="both", alpha=0.3)
    ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize="small",
              title=", ".join(value_knobs(results)), title_fontsize="small")
    return save_figure(fig, path)


# ----------------------------------------------------------------------------- OS over time

_OS_CPU = (("user", "#4c72b0"), ("system", "#dd8452"), ("iowait", "#c44e52"))
_OS_DISK = (("disk read", "#1a1a1a"), ("disk write", "#8e44ad"))


def _os_cpu(run: OsRun) -> list[list[float | None]]:
    """The run's CPU figures, in the order of _OS_CPU."""
    return [run.cpu_user, run.cpu_system, run.cpu_iowait]


def _os_disk(run: OsRun) -> list[list[float | None]]:
    """The run's disk figures, in the order of _OS_DISK."""
    return [run.disk_read_bytes, run.disk_write_bytes]


def _os_run(point: Point) -> OsRun | None:
    """The OS samples of the point's first repetition that has any, or None."""
    runs = [run for run in (point.time_series.os_series if point.time_series else [])
            if any(_os_cpu(run) + _os_disk(run))]
    return min(runs, key=lambda run: run.repetition) if runs else None


def _os_arrays(run: OsRun) -> tuple[np.ndarray, list[np.ndarray], list[np.ndarray]]:
    """(t, CPU user/system/iowait in % of all cores, disk read/write in MB/s) of one run.

    CPU figures are shares (0–1, as knoblab.observe writes them); values above 1.5 are taken to
    be percentages already. Missing seconds count as 0.
    """
    n = max(len(figures) for figures in _os_cpu(run) + _os_disk(run))

    def values(figures: list[float | None]) -> np.ndarray:
        raw = [np.nan if v is None else v for v in figures][:n]
        return np.nan_to_num(np.pad(np.asarray(raw, dtype=float), (0, n - len(raw)),
                                    constant_values=np.nan))

    t = np.asarray(run.t, dtype=float)[:n]
    if t.size < n:
        t = np.arange(1, n + 1, dtype=float)
    cpu = [values(figures) for figures in _os_cpu(run)]
    scale = 1.0 if max((float(c.max()) for c in cpu if c.size), default=0.0) > 1.5 else 100.0
    return t, [c * scale for c in cpu], [values(figures) / 1e6 for figures in _os_disk(run)]


def _chart_os(results: Results, points: list[Point], slice_name: str,
              path: pathlib.Path) -> pathlib.Path:
    """vmstat as small multiples: per value (its first run), CPU user/system/iowait stacked
    (% of all cores, left axis) and disk read/write MB/s (lines, right axis); same axes in every
    panel, the steady window of that run between dotted lines."""
    ncols = min(3, len(points))
    nrows = math.ceil(len(points) / ncols)
    fig = Figure(figsize=(4.4 * ncols + 1.0, 2.8 * nrows + 1.4), layout="constrained")
    axes = fig.subplots(nrows, ncols, sharex=True, sharey=True, squeeze=False)
    runs = {id(p): run for p in points if (run := _os_run(p)) is not None}
    data = {key: _os_arrays(run) for key, run in runs.items()}
    disk_top = max((float(d.max()) for _, _, disk in data.values() for d in disk if d.size),
                   default=0.0)
    disk_top = (disk_top or 1.0) * 1.3  # room for the facts line, as on the CPU side
    t_max = max((float(t.max()) for t, _, _ in data.values() if t.size), default=1.0)
    twins = []
    for i, (ax, p) in enumerate(zip(axes.flat, points, strict=False)):
        twin = ax.twinx()
        twins.append(twin)
        twin.set_ylim(0, disk_top)
        rightmost = i % ncols == ncols - 1 or i == len(points) - 1
        twin.tick_params(right=rightmost, labelright=rightmost)
        if rightmost:
            twin.set_ylabel("disk MB/s")
        ax.set_title(f"{_title_label(results, p)} — {p.verdict}", fontsize="medium",
                     color=VERDICT_COLOURS.get(p.verdict, "black"), fontweight="bold")
        ax.grid(alpha=0.3)
        if id(p) not in data:
            ax.text(0.5, 0.5, "no OS samples", transform=ax.transAxes, ha="center",
                    va="center", color="0.4")
            continue
        t, cpu, disk = data[id(p)]
        ax.stackplot(t, *cpu, colors=[c for _, c in _OS_CPU], alpha=0.55, lw=0, zorder=1)
        for values, (_, colour) in zip(disk, _OS_DISK, strict=True):
            twin.plot(t, values, color=colour, lw=1.2, zorder=3)
        repetition = runs[id(p)].repetition
        tps = next((s for s in _runs(p) if s.repetition == repetition and s.steady), None)
        if tps is not None:
            seconds, values, start, end = _series(tps)
            if end > start:
                for edge in (seconds[start] - 0.5, seconds[end - 1] + 0.5):
                    ax.axvline(edge, color="0.2", ls=":", lw=1, zorder=2)
        means = [float(c.mean()) for c in cpu]
        rates = [float(d.mean()) for d in disk]
        ax.text(0.02, 0.97, f"user {means[0]:.0f}%, sys {means[1]:.0f}%, iowait "
                f"{means[2]:.0f}% · read {short_number(rates[0])}, "
                f"write {short_number(rates[1])} MB/s",
                transform=ax.transAxes, va="top", fontsize="x-small", zorder=5,
                bbox={"facecolor": "white", "alpha": 0.85, "lw": 0, "pad": 1.5})
    cells = _tidy_grid(axes, len(points), ncols)
    cells[0].set_ylim(0, 130)  # 0–100% and room for the facts line
    cells[0].set_yticks([0, 25, 50, 75, 100])
    cells[0].set_xlim(0, t_max + 1)
    fig.supylabel("CPU, % of all cores (stacked)")
    fig.suptitle(_chart_title(results, "CPU and disk per second (vmstat, first run)",
                              slice_name))
    handles: list[Artist] = [Patch(color=colour, alpha=0.55, lw=0, label=f"CPU {name}")
                             for name, colour in _OS_CPU]
    handles += [Line2D([], [], color=colour, lw=1.2, label=f"{name} (MB/s, right axis)")
                for name, colour in _OS_DISK]
    handles.append(Line2D([], [], color="0.2", ls=":", lw=1, label="steady state (tps)"))
    fig.legend(handles=handles, loc="outside lower center", ncols=min(6, 3 * ncols),
               fontsize="small", frameon=False)
    return save_figure(fig, path)


# ----------------------------------------------------------------------------- steps and servers

_STEP_COLOUR = {StepVerdict.BASE: "#4c72b0", StepVerdict.GAIN: "#2ca02c",
                StepVerdict.LOSS: "#d62728", StepVerdict.NO_EFFECT: "#a0a0a0"}
_DURABILITY_EDGE = "#b8860b"


def _step_legend(results: Results, table: StepsTable, verdict: StepVerdict) -> str:
    """The words of a verdict's colour: its steps' findings ("not shown either way", "shown
    the same (within ±3%)", …), as the table says them."""
    if verdict != StepVerdict.NO_EFFECT:
        return FINDING_WORDS[STEP_FINDING[verdict]]
    return "; ".join(dict.fromkeys(step_finding_text(results, r) for r in table.rows
                                   if r.verdict == verdict))


def _chart_waterfall(results: Results, table: StepsTable, path: pathlib.Path) -> pathlib.Path:
    """The steps as a waterfall: the base level, then each step floating from the level before
    to its own (green shown to help, red shown to hurt, grey not shown either way; hatched
    when it gives up
    durability) with its 95% CI, and a last bar for all steps together."""
    rows = table.rows
    minimize = results.objective.direction == "minimize"
    n_bars = len(rows) + 1
    fig = Figure(figsize=(max(7.5, 1.15 * n_bars + 2.5), 5.8), layout="constrained")
    ax = fig.add_subplot()
    ticks, tops = [], [0.0]
    previous: tuple[float, float] | None = None  # (x, level) of the last measured step
    trans = ax.get_xaxis_transform()
    any_alone = any_durable = False
    for x, row in enumerate(rows):
        label = step_label(row)
        wrapped = "\n".join(wrap_name(part, 16) for part in label.split(", "))
        ticks.append(f"{row.step}\n{wrapped}")
        centre = row.center
        if not is_measured(row) or centre is None:
            why = {StepVerdict.FAILED: "failed",
                   StepVerdict.CHANGES_NOTHING: "changes\nnothing"}.get(row.verdict,
                                                                        "not on\nthis server")
            ax.plot(x, 0.04, marker="x", ms=10, mew=2, color=VERDICT_COLOURS[PointVerdict.FAILED],
                    transform=trans)
            ax.text(x, 0.08, why, ha="center", color=VERDICT_COLOURS[PointVerdict.FAILED],
                    fontsize="small", transform=trans)
            continue
        durable = bool(step_costs(row)) and bool(row.step)
        any_durable |= durable
        if previous is None or not row.step:
            bottom, colour = 0.0, _STEP_COLOUR[StepVerdict.BASE]
        else:
            bottom = previous[1]
            colour = _STEP_COLOUR.get(row.verdict, _STEP_COLOUR[StepVerdict.NO_EFFECT])
            ax.plot([previous[0] + 0.3, x - 0.3], [bottom, bottom], ls=":", lw=1, color="0.45",
                    zorder=1)
        ax.bar(x, centre - bottom, bottom=bottom, width=0.6, color=colour,
               edgecolor=_DURABILITY_EDGE if durable else colour, linewidth=1.5 if durable else 0,
               hatch="///" if durable else None, zorder=2)
        lo, hi = row.ci95 or (centre, centre)
        ax.errorbar(x, centre, yerr=[[max(0.0, centre - lo)], [max(0.0, hi - centre)]],
                    fmt="none", ecolor="black", elinewidth=1.2, capsize=4, zorder=3)
        tops.append(max(hi, centre))
        change = row.vs_previous if row.step else None
        text = num(centre)
        if change is not None:
            text += f"\n{signed((change.ratio - 1) * 100, 1)}%"
        # above the bar and its interval: a gain's bar reaches up to the level before
        ax.annotate(text, (x, max(hi, centre, bottom)), xytext=(0, 4),
                    textcoords="offset points", ha="center", va="bottom", fontsize="small")
        alone = row.alone.center if row.alone else None
        if alone is not None:
            any_alone = True
            ax.plot(x + 0.38, alone, marker="D", ms=6, mfc="white", mec="0.25", ls="", zorder=4)
            tops.append(alone)
        previous = (x, centre)
    if _all_steps_bar(ax, table, previous, minimize):
        ticks.append("all steps")
    ax.set_xticks(range(len(ticks)), ticks, fontsize="small")
    ax.set_xlim(-0.6, len(ticks) - 0.4)
    ax.set_ylim(0, max(tops) * 1.18 or 1.0)  # room for the labels above the bars
    ax.set_ylabel(f"{results.objective.metric} ({results.objective.centre}, 95% CI)")
    heading = slice_heading(results, table)
    # a server slice names its version already
    version = "" if "binary" in table.slice else f"\n{results.server_version or '?'}"
    ax.set_title(f"{results.name} — settings applied one by one"
                 + (f" · {heading}" if heading else "") + version, fontsize="medium")
    ax.grid(axis="y", alpha=0.3)
    ax.set_axisbelow(True)
    ax.legend(handles=_waterfall_legend(results, table, any_durable, any_alone),
              fontsize="small", loc="upper left", bbox_to_anchor=(1.01, 1.0))
    return save_figure(fig, path)


def _waterfall_legend(results: Results, table: StepsTable, any_durable: bool,
                      any_alone: bool) -> list[Artist]:
    """What the waterfall's colours, hatches and marks mean: only those it draws."""
    shown = [v for v in (StepVerdict.GAIN, StepVerdict.LOSS, StepVerdict.NO_EFFECT)
             if any(r.verdict == v for r in table.rows)]
    handles: list[Artist] = [
               Patch(color=_STEP_COLOUR[StepVerdict.BASE], label=base_label(table)),
               *(Patch(color=_STEP_COLOUR[v], label=_step_legend(results, table, v))
                 for v in shown),
               Line2D([], [], color="black", marker="_", ms=10, ls="", label="95% CI")]
    if any_durable:
        handles.append(Patch(facecolor="white", edgecolor=_DURABILITY_EDGE, hatch="///",
                             label=GIVES_UP))
    if any_alone:
        handles.append(Line2D([], [], marker="D", ms=6, mfc="white", mec="0.25", ls="",
                              label=f"the change alone from the {base_label(table)}"))
    if levels := unlike_levels(results):  # the bars are medians, the percents are not
        handles.append(Line2D([], [], ls="", label=f"%: the change of the {levels} from the "
                              f"step before,\nnot of the {results.objective.centre}s drawn"))
    return handles


def _all_steps_bar(ax: Axes, table: StepsTable, previous: tuple[float, float] | None,
                   minimize: bool) -> bool:
    """The waterfall's last bar, every step together against the base (`previous`: where
    the last measured step stands), with the base's level as a line; False, and nothing
    drawn, when the base is not measured or is the only step measured."""
    rows = table.rows
    base = next((r for r in rows if r.step == 0 and is_measured(r)), None)
    if previous is None or base is None or base.center is None or \
            rows.index(base) == previous[0]:
        return False
    x = len(rows)
    total = table.total
    ratio = previous[1] / base.center if total is None else total.ratio
    better = (ratio < 1) == minimize
    colour = (_STEP_COLOUR[StepVerdict.GAIN if better else StepVerdict.LOSS]
              if total and total.significant else _STEP_COLOUR[StepVerdict.NO_EFFECT])
    ax.plot([previous[0] + 0.3, x - 0.3], [previous[1]] * 2, ls=":", lw=1, color="0.45")
    ax.bar(x, previous[1], width=0.6, color=colour, alpha=0.85, edgecolor="black",
           linewidth=1.2, zorder=2)
    ax.axhline(base.center, ls="--", lw=1, color=_STEP_COLOUR[StepVerdict.BASE], alpha=0.6,
               zorder=1)
    ax.annotate(f"{num(previous[1])}\n{signed((ratio - 1) * 100, 0)}%", (x, previous[1]),
                xytext=(0, 4), textcoords="offset points", ha="center", va="bottom",
                fontsize="small", fontweight="bold")
    return True


def _chart_servers(results: Results, path: pathlib.Path) -> pathlib.Path:
    """Each server's level with its 95% CI, one panel per configuration compared."""
    entries = results.servers_compared or []
    ncols = min(3, len(entries))
    nrows = math.ceil(len(entries) / ncols)
    most = max((len(e.rows) for e in entries), default=1)
    fig = Figure(figsize=(max(4.0, 1.2 * most + 2.0) * ncols, 3.8 * nrows + 0.8),
                 layout="constrained")
    axes = fig.subplots(nrows, ncols, squeeze=False)
    for ax, entry in zip(axes.flat, entries, strict=False):
        rows = entry.rows
        tops = [0.0]
        for x, row in enumerate(rows):
            colour = VERDICT_COLOURS.get(row.verdict, "black")
            centre = row.center
            if row.verdict == PointVerdict.FAILED or centre is None:
                trans = ax.get_xaxis_transform()
                ax.plot(x, 0.04, marker="x", ms=10, mew=2, color=colour, transform=trans)
                ax.text(x, 0.08, "failed", ha="center", color=colour, transform=trans)
                continue
            lo, hi = row.ci95 or (centre, centre)
            ax.errorbar(x, centre, yerr=[[max(0.0, centre - lo)], [max(0.0, hi - centre)]],
                        fmt="o", ms=8, color=colour, ecolor=colour, capsize=5, zorder=3)
            ratio = row.ratio_to_best
            text = num(centre)
            if ratio is not None and not row.verdict.leads:
                text += f" ({signed((ratio - 1) * 100, 0)}%)"
            ax.annotate(text, (x, hi), xytext=(0, 5), textcoords="offset points", ha="center",
                        va="bottom", fontsize="small", color=colour)
            tops.append(hi)
        names = []
        for row in rows:
            server = results.server(row.binary)
            compiler = server.compiler if server else None
            names.append(row.binary + (f"\n{compiler}" if compiler else ""))
        ax.set_xticks(range(len(rows)), names, fontsize="small")
        ax.set_xlim(-0.6, len(rows) - 0.4)
        ax.set_ylim(0, max(tops) * 1.2 or 1.0)
        at = where({k: v for k, v in entry.slice.items() if k != "binary"})
        title = "\n".join(wrap_name(part, 40) for part in
                          [at_text(entry.at)] + ([at] if at else []))
        ax.set_title(title, fontsize="small")
        ax.set_ylabel(f"{results.objective.metric} ({results.objective.centre}, 95% CI)")
        ax.grid(axis="y", alpha=0.3)
    for ax in list(axes.flat)[len(entries):]:
        ax.remove()
    fig.suptitle(f"{results.name} — servers compared")
    shown = [v for v in VERDICT_COLOURS if any(r.verdict == v for e in entries for r in e.rows)]
    fig.legend(handles=[Line2D([], [], marker="x" if v in _NOT_MEASURED else "o", ls="",
                               color=VERDICT_COLOURS[v], label=v) for v in shown],
               loc="outside lower center", ncols=max(1, len(shown)), fontsize="small",
               frameon=False)
    return save_figure(fig, path)
