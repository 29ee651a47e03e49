"""PNG charts of a search (knoblab tune): write_tune_charts and one figure per view.

search.png (each trial's gain against the baseline, the best so far, and what validation found
of the recommendation), importance.png (what each change contributes, or how the trials varied) and
settings.png (gain against the value of the most important settings). Each figure is built by
a function of its own (_search_figure, _importance_figure, _settings_figure) that returns None
when the search has nothing to show for it; bare matplotlib Figures, as in
knoblab.report.charts, whose palette, axis labels and saving are reused here.
"""

from __future__ import annotations

import math
import pathlib
from collections.abc import Callable

import numpy as np
from matplotlib.artist import Artist
from matplotlib.axes import Axes
from matplotlib.axis import Axis
from matplotlib.collections import PathCollection
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.ticker import FixedLocator, FuncFormatter, MaxNLocator, NullFormatter, NullLocator

from knoblab import recommend
from knoblab.records import Dimension, TrialOutcome, TuneResult, Validation
from knoblab.report.charts import VERDICT_COLOURS, log_axis_labels, save_figure, short_number
from knoblab.report.format import as_number, signed, wrap_name
from knoblab.report.tuning import (
    STATES,
    ablation_interval,
    direction_of,
    gain_validated,
    percent,
)
from knoblab.units import format_size, is_size, settings_text
from knoblab.vocabulary import Finding, OutcomeState, PointVerdict, ValidationVerdict
from knoblab.words import FINDING_WORDS

_SETTINGS_PANELS = 4  # settings.png shows at most this many settings
_BASELINE_COLOUR = "0.35"
_UNMEASURED = {  # a trial that was not measured → (its colour, its legend entry)
    OutcomeState.REFUSED: (VERDICT_COLOURS[PointVerdict.NOT_RUN],
                           f"{STATES[OutcomeState.REFUSED]} (unsafe)"),
    OutcomeState.FAILED: (VERDICT_COLOURS[PointVerdict.FAILED], STATES[OutcomeState.FAILED]),
}
_VALIDATED = {  # a validation's verdict → (colour, legend entry) for the candidates not chosen
    ValidationVerdict.BETTER: (VERDICT_COLOURS[PointVerdict.BEST],
                               f"validated again: {FINDING_WORDS[Finding.HELPS]}, not the best"),
    ValidationVerdict.WORSE: (VERDICT_COLOURS[PointVerdict.WORSE],
                              f"validated again: {FINDING_WORDS[Finding.HURTS]}"),
    ValidationVerdict.SAME: (VERDICT_COLOURS[PointVerdict.EQUIVALENT],
                             f"validated again: {FINDING_WORDS[Finding.SAME]}"),
    ValidationVerdict.UNDECIDED: (VERDICT_COLOURS[PointVerdict.INCONCLUSIVE],
                                  f"validated again: {FINDING_WORDS[Finding.UNSHOWN]}"),
    ValidationVerdict.VIOLATES: (VERDICT_COLOURS[PointVerdict.INCONCLUSIVE],
                                 f"validated again: {FINDING_WORDS[Finding.HELPS]}, outside the "
                                 "constraint"),
}
# The gain axis in words: for a time, what +100% means (the baseline's time over the trial's).
_GAIN_AXIS = {"maximize": "gain against the baseline (+ is better)",
              "minimize": "gain against the baseline (+ is better: +100% is 2× faster,\n"
                          "the time halved; −50% is 2× slower)"}


def write_tune_charts(result: TuneResult, folder: pathlib.Path) -> list[pathlib.Path]:
    """The charts of a search in `folder` (created if missing); returns the paths written.

    search.png when any trial was proposed besides the baseline itself, importance.png when the
    search says how much each setting matters (result.importance), settings.png when any trial
    was measured.
    """
    folder = pathlib.Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    builders: list[tuple[str, Callable[[TuneResult], Figure | None]]] = [
        ("search.png", _search_figure),
        ("importance.png", _importance_figure),
        ("settings.png", _settings_figure),
    ]
    paths = []
    for name, build in builders:
        fig = build(result)
        if fig is not None:
            paths.append(save_figure(fig, folder / name))
    return paths


# ----------------------------------------------------------------------------- shared


def _scored(result: TuneResult) -> list[TrialOutcome]:
    """The trials measured against the baseline, in the order they ran."""
    return sorted((t for t in result.trials
                   if t.measured and t.gain is not None),
                  key=lambda t: t.number)


def _pct(gain: float) -> float:
    return gain * 100.0


def _yerr(centre: float, interval: tuple[float, float] | None) -> list[list[float]] | None:
    """An error bar in percent around `centre` (already in percent); None without interval."""
    if interval is None:
        return None
    lo, hi = (_pct(v) for v in interval)
    return [[max(0.0, centre - lo)], [max(0.0, hi - centre)]]


def _percent_axis(axis: Axis) -> None:
    """"+8%", "−4%", "0": whole percents unless the axis spans only a few."""

    def label(value: float, _: object) -> str:
        low, high = axis.get_view_interval()
        return f"{signed(value, 0 if abs(high - low) >= 4 else 1)}%"

    axis.set_major_formatter(FuncFormatter(label))


def _title(result: TuneResult, what: str, detail: str) -> str:
    return f"{result.study} — {what}\n{detail}"


# ----------------------------------------------------------------------------- search.png


def _search_figure(result: TuneResult) -> Figure | None:
    """Gain per trial with its 95% CI, the best gain so far, and the recommendation as
    validated beside the gain it had in the search (the best of many noisy scores is
    flattered by luck; its validation says how much of it was real)."""
    trials = sorted(result.trials, key=lambda t: t.number)
    if not any(t.state != OutcomeState.BASELINE for t in trials):
        return None
    scored = _scored(result)
    fig = Figure(figsize=(max(8.0, 0.22 * len(trials) + 5.5), 5.0), layout="constrained")
    ax = fig.add_subplot()
    handles: list[Artist] = []

    ax.axhline(0.0, ls="--", lw=1, color=_BASELINE_COLOUR, zorder=1)
    handles.append(Line2D([], [], ls="--", lw=1, color=_BASELINE_COLOUR,
                          label="the baseline (0%)"))
    colour = VERDICT_COLOURS[PointVerdict.EQUIVALENT]
    for t in scored:
        gain = _pct(t.gain or 0.0)
        ax.errorbar(t.number, gain, yerr=_yerr(gain, t.interval()), fmt="o", ms=5,
                    color=colour, ecolor=colour, elinewidth=1, capsize=3, alpha=0.75, zorder=3)
    if scored:
        handles.append(Line2D([], [], marker="o", ms=5, color=colour,
                              label="a trial's gain (95% CI)"))
        best = np.maximum.accumulate([_pct(t.gain or 0.0) for t in scored])
        xs = [t.number for t in scored] + [trials[-1].number]
        ax.step(xs, [*best, best[-1]], where="post", color="black", lw=1.4, zorder=4)
        handles.append(Line2D([], [], color="black", lw=1.4, label="best gain so far (search)"))

    same = [t.number for t in trials if t.state == OutcomeState.BASELINE]
    if same:
        ax.plot(same, [0.0] * len(same), ls="", marker="o", ms=7, mfc="white",
                mec=_BASELINE_COLOUR, zorder=3)
        handles.append(Line2D([], [], ls="", marker="o", ms=7, mfc="white",
                              mec=_BASELINE_COLOUR, label="the baseline itself (not run)"))
    trans = ax.get_xaxis_transform()  # x in data, y in axes fraction: below every gain
    for state, (mark, label) in _UNMEASURED.items():
        numbers = [t.number for t in trials if t.state == state]
        if numbers:
            ax.plot(numbers, [0.04] * len(numbers), ls="", marker="x", ms=8, mew=2, color=mark,
                    transform=trans, zorder=3)
            handles.append(Line2D([], [], ls="", marker="x", ms=8, mew=2, color=mark,
                                  label=f"{label}: not measured"))

    handles += _draw_validations(ax, result)
    if scored or result.validations:
        low, high = ax.get_ylim()
        ax.set_ylim(low - 0.12 * (high - low), high)  # room for the crosses below
    # whole trial numbers, with room for the validations drawn beside their trials
    ax.set_xlim(trials[0].number - 0.7, trials[-1].number + 1.0)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    _percent_axis(ax.yaxis)
    ax.set_xlabel("trial (in the order the search ran them)")
    ax.set_ylabel(_GAIN_AXIS[direction_of(result)])
    unmeasured = sum(t.state in _UNMEASURED for t in trials)
    detail = (f"{len(trials)} trial{'' if len(trials) == 1 else 's'}: {len(scored)} measured"
              + (f", {unmeasured} refused or failed" if unmeasured else "")
              + ("\nthe best of a search is flattered by luck: validation measures it again"
                 if result.validations else ""))
    ax.set_title(_title(result, "gain of each trial against the baseline", detail),
                 fontsize="medium")
    ax.grid(axis="y", alpha=0.3)
    ax.set_axisbelow(True)
    ax.legend(handles=handles, fontsize="small", loc="upper left", bbox_to_anchor=(1.01, 1.0))
    return fig


def _draw_validations(ax: Axes, result: TuneResult) -> list[Artist]:
    """Each validated candidate beside its trial: the recommendation as a star with its
    validated gain written out, the others as hollow diamonds; returns their legend entries."""
    chosen = result.recommended
    last = max((t.number for t in result.trials), default=0)
    shown: dict[str, Artist] = {}
    for v in result.validations:
        if v.gain is None:
            continue
        x, gain = v.trial.number + 0.35, _pct(v.gain)
        searched = v.trial.gain
        is_chosen = v is chosen
        colour = VERDICT_COLOURS[PointVerdict.BEST] if is_chosen else _VALIDATED[v.verdict][0]
        if searched is not None:  # from the gain found in the search to the gain validated
            ax.plot([v.trial.number, x], [_pct(searched), gain], ls=":", lw=1.2, color=colour,
                    zorder=4)
        if is_chosen:
            ax.errorbar(x, gain, yerr=_yerr(gain, v.ci95), fmt="*", ms=15, color=colour,
                        ecolor=colour, elinewidth=2, capsize=5, mec="white", mew=0.6, zorder=6)
            right = x > (last + 1) / 2  # the words on the side with more room
            ax.annotate(f"{percent(v.gain, direction_of(result))} validated", (x, gain),
                        xytext=(-10 if right else 10, 0),
                        textcoords="offset points", va="center", ha="right" if right else "left",
                        fontsize="small", color=colour, fontweight="bold", zorder=7,
                        bbox={"facecolor": "white", "alpha": 0.85, "lw": 0, "pad": 1.0})
            shown["chosen"] = Line2D([], [], ls="", marker="*", ms=13, color=colour,
                                     label=_recommended_text(v, result))
        else:
            ax.errorbar(x, gain, yerr=_yerr(gain, v.ci95), fmt="D", ms=6, mfc="white",
                        mec=colour, color=colour, ecolor=colour, capsize=3, zorder=5)
            shown[v.verdict] = Line2D([], [], ls="", marker="D", ms=6, mfc="white", mec=colour,
                                      label=_VALIDATED[v.verdict][1])
    order = ["chosen", *_VALIDATED]
    return [shown[key] for key in order if key in shown]


def _recommended_text(v: Validation, result: TuneResult) -> str:
    """The recommendation's legend entry: its gain validated, and the gain it had searched;
    when the recommendation is reduced, its own gain (or that it was not measured)."""
    text = f"recommended: trial {v.trial.number}\nvalidated: {gain_validated(v, result)}"
    if v.trial.gain is not None:
        text += f"\nin the search: {percent(v.trial.gain, direction_of(result))} (dotted line)"
    own = recommend.claim(result)
    if own is not v:
        reduced = settings_text(recommend.searched(recommend.changes(result)))
        text += f"\nreduced to {reduced}: " + ("its own gain not measured" if own is None
                                                else f"{gain_validated(own, result)} (its own)")
    return text


# ----------------------------------------------------------------------------- importance.png


def _importance_figure(result: TuneResult) -> Figure | None:
    """Each setting's share, largest on top, with its spread: of the gain the ablation measured,
    or (without one) of the variation in gain over the trials, labelled as which it is."""
    if not result.importance:
        return None
    rows = sorted(result.importance, key=lambda i: i.share)  # barh draws upwards: largest last
    fig = Figure(figsize=(8.0, 1.6 + 0.55 * len(rows)), layout="constrained")
    ax = fig.add_subplot()
    ys = np.arange(len(rows))
    shares = np.array([_pct(r.share) for r in rows])
    lows = np.array([_pct(min(r.low, r.share)) for r in rows])
    highs = np.array([_pct(max(r.high, r.share)) for r in rows])
    ax.barh(ys, shares, height=0.6, color=VERDICT_COLOURS[PointVerdict.EQUIVALENT], alpha=0.85,
            zorder=2)
    ax.errorbar(shares, ys, xerr=[shares - lows, highs - shares], fmt="none", ecolor="black",
                elinewidth=1.2, capsize=4, zorder=3)
    for y, r, high in zip(ys, rows, highs, strict=True):
        ax.annotate(f"{r.share:.0%} ({min(r.low, r.share):.0%}–{max(r.high, r.share):.0%})",
                    (high, y), xytext=(5, 0), textcoords="offset points", va="center",
                    fontsize="small")
    ax.set_yticks(ys, [wrap_name(r.name, 28) for r in rows])
    ax.set_xlim(0, max(float(highs.max()) * 1.3, 1.0))  # room for the labels right of the bars
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:.0f}%"))
    if rows[0].basis == "ablation":
        ax.set_xlabel("share of the recommendation's gain the setting brings")
        ax.set_title(_title(result, "what each change contributes",
                            "each setting of the recommendation put back alone: its share of "
                            f"the gain measured\nbar: the estimate; line: its "
                            f"{ablation_interval(result)}"),
                     fontsize="medium")
    else:
        # A description of the search, not a measurement of effect: said so in the title.
        ax.set_xlabel("share of the variation in gain between trials (fANOVA)")
        measured = len(_scored(result))
        ax.set_title(_title(result, "how the search's trials varied (not a measured effect)",
                            f"each setting's share of the variation in gain over {measured} "
                            "measured trials\nbar: the estimate; line: where 80% of resamples "
                            "put it (10th to 90th percentile)"), fontsize="medium")
    ax.grid(axis="x", alpha=0.3)
    ax.set_axisbelow(True)
    return fig


# ----------------------------------------------------------------------------- settings.png


def _settings_figure(result: TuneResult) -> Figure | None:
    """Gain against the value of each of the most important settings, one panel each (all
    settings up to four when importance is unknown); the baseline's value as a vertical line."""
    scored = _scored(result)
    dimensions = _chosen_dimensions(result)
    if not scored or not dimensions:
        return None
    shares = {i.name: i.share for i in result.importance}
    ncols = min(2, len(dimensions))
    nrows = math.ceil(len(dimensions) / ncols)
    fig = Figure(figsize=(5.0 * ncols + 1.2, 3.4 * nrows + 1.5), layout="constrained")
    axes = fig.subplots(nrows, ncols, sharey=True, squeeze=False)
    cells = list(axes.flat)
    for ax in cells[len(dimensions):]:
        ax.remove()
    first, last = scored[0].number, scored[-1].number
    chosen = result.recommended
    mappable = None
    for ax, d in zip(cells, dimensions, strict=False):
        mappable = _draw_setting(ax, d, scored, result.baseline.get(d.name),
                                 chosen.trial.number if chosen else None, first, last)
        share = shares.get(d.name)
        ax.set_title(wrap_name(d.name, 36) + ("" if share is None else
                                              f" · {share:.0%} of the variation"),
                     fontsize="medium")
        ax.axhline(0.0, ls="--", lw=1, color=_BASELINE_COLOUR, alpha=0.6, zorder=1)
        ax.grid(alpha=0.3)
        ax.set_axisbelow(True)
        ax.yaxis.set_tick_params(labelleft=True)
        _percent_axis(ax.yaxis)
    if mappable is not None and len(scored) > 1:
        fig.colorbar(mappable, ax=cells[:len(dimensions)], label="trial", shrink=0.9)
    fig.supylabel("gain against the baseline (+ is better)")
    which = "the most important settings" if result.importance else "the searched settings"
    fig.suptitle(_title(result, "gain against each setting's value",
                        f"{which}; every measured trial, coloured by when it ran"))
    handles: list[Artist] = [
        Line2D([], [], ls="", marker="o", ms=6, color="0.5", label="a trial (95% CI in grey)"),
        Line2D([], [], ls="--", color=_BASELINE_COLOUR, label="the baseline's value"),
    ]
    if chosen is not None:
        handles.append(Line2D([], [], ls="", marker="o", ms=12, mfc="none",
                              mec=VERDICT_COLOURS[PointVerdict.BEST], mew=2,
                              label=f"the recommendation (trial {chosen.trial.number})"))
    fig.legend(handles=handles, loc="outside lower center", ncols=len(handles),
               fontsize="small", frameon=False)
    return fig


def _chosen_dimensions(result: TuneResult) -> list[Dimension]:
    """The settings to draw: by importance, largest first; in the space's order without it."""
    by_name = {d.name: d for d in result.space.dimensions}
    ranked = sorted(result.importance, key=lambda i: -i.share)
    names = [i.name for i in ranked if i.name in by_name] or list(by_name)
    return [by_name[name] for name in names[:_SETTINGS_PANELS]]


def _draw_setting(ax: Axes, d: Dimension, scored: list[TrialOutcome], baseline: str | None,
                  chosen: int | None, first: int, last: int) -> PathCollection:
    """One panel: the gain of each measured trial at its value of `d`; returns the points
    (their colours stand for the trial number)."""
    gains = np.array([_pct(t.gain or 0.0) for t in scored])
    numbers = np.array([t.number for t in scored])
    if d.choices:
        xs, base_x = _choice_axis(ax, d, [t.config.get(d.name, "") for t in scored], baseline)
    else:
        values = [as_number(t.config.get(d.name)) for t in scored]
        keep = [v is not None for v in values]
        gains, numbers = gains[keep], numbers[keep]
        scored = [t for t, k in zip(scored, keep, strict=True) if k]
        xs = np.array([v for v in values if v is not None], dtype=float)
        base_x = _range_axis(ax, d, xs, None if baseline is None else as_number(baseline))
    for x, gain, t in zip(xs, gains, scored, strict=True):
        ax.errorbar(x, gain, yerr=_yerr(gain, t.interval()), fmt="none", ecolor="0.7",
                    elinewidth=1, capsize=2, zorder=2)
    points = ax.scatter(xs, gains, c=numbers, cmap="viridis", vmin=first,
                        vmax=max(last, first + 1), s=30, edgecolors="white", linewidths=0.5,
                        zorder=3)
    if chosen is not None and chosen in numbers:
        at = int(np.flatnonzero(numbers == chosen)[0])
        ax.plot(xs[at], gains[at], ls="", marker="o", ms=12, mfc="none",
                mec=VERDICT_COLOURS[PointVerdict.BEST], mew=2, zorder=4)
    if base_x is not None:
        ax.axvline(base_x, ls="--", lw=1.2, color=_BASELINE_COLOUR, zorder=1)
    return points


def _choice_axis(ax: Axes, d: Dimension, values: list[str], baseline: str | None
                 ) -> tuple[np.ndarray, float | None]:
    """Categories on x (the listed choices, then any other value seen); slightly spread so
    that trials of one value do not hide each other. Returns the x of each value and of the
    baseline's."""
    categories = list(dict.fromkeys([*d.choices, *values,
                                     *([baseline] if baseline is not None else [])]))
    position = {c: i for i, c in enumerate(categories)}
    rng = np.random.default_rng(0)
    xs = np.array([position[v] for v in values], dtype=float)
    xs += rng.uniform(-0.12, 0.12, xs.size)
    ax.set_xticks(range(len(categories)),
                  [c + ("\n(baseline)" if c == baseline else "") for c in categories],
                  fontsize="small")
    ax.set_xlim(-0.6, len(categories) - 0.4)
    ax.set_xlabel("value")
    return xs, None if baseline is None else float(position[baseline])


def _range_axis(ax: Axes, d: Dimension, xs: np.ndarray, baseline: float | None
                ) -> float | None:
    """A log or linear x axis over the searched range (and the baseline's value, if it lies
    outside), sizes from 1K on shown as the server writes them; the baseline's x, None when
    a log axis cannot show it (0)."""
    if d.log and baseline is not None and baseline <= 0:
        baseline = None
    shown = [float(v) for v in (d.low, d.high, baseline) if v is not None] + list(xs)
    low, high = min(shown), max(shown)
    if d.log and low > 0:
        ax.set_xscale("log")
        ax.set_xlim(low / 1.3, high * 1.3)
        if is_size(d.name) and high >= 1024:
            _size_ticks(ax.xaxis, _log_size_ticks(low, high) or _linear_size_ticks(low, high))
        else:
            log_axis_labels(ax.xaxis, low, high, short_number)
        ax.set_xlabel("value (log scale)")
    else:
        pad = 0.05 * (high - low) or 1.0
        ax.set_xlim(low - pad, high + pad)
        if is_size(d.name) and high >= 1024:
            _size_ticks(ax.xaxis, _linear_size_ticks(low, high))
        else:
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_xlabel("value")
    return baseline


def _size_ticks(axis: Axis, ticks: list[float]) -> None:
    axis.set_major_locator(FixedLocator(ticks))
    axis.set_major_formatter(FuncFormatter(lambda v, _: _size(v)))
    axis.set_minor_locator(NullLocator())
    axis.set_minor_formatter(NullFormatter())


def _size(value: float) -> str:
    """"64K", "1M", "8200": a tick as the server's config writes it."""
    whole = round(value)
    return format_size(whole) if whole >= 1024 else str(whole)


def _log_size_ticks(low: float, high: float, most: int = 6) -> list[float]:
    """Powers of two from `low` to `high` (every other one, or fewer, past `most`)."""
    exponents = list(range(math.ceil(math.log2(low)), math.floor(math.log2(high)) + 1))
    stride = max(1, math.ceil(len(exponents) / most))
    return [float(2**e) for e in exponents[::stride]]


def _linear_size_ticks(low: float, high: float, most: int = 6) -> list[float]:
    """Multiples of a power of two (1K at least) from `low` to `high`, at most `most`."""
    step = 1024
    while (high - low) / step > most:
        step *= 2
    start = math.ceil(low / step) * step
    ticks = [float(v) for v in range(start, math.floor(high) + 1, step)]
    return ticks or [low, high]
