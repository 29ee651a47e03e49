"""Words: the formatting helpers and every sentence of a report.

Numbers, percents, p-values, units and labels of points, slices and steps (_num, _p, _pct,
point_label, _step_label, …), and the sentences built from them: conclusion_text with its
per-kind helpers (_judge for sweeps and time series, _steps_conclusion for steps runs,
_servers_judge for servers compared), and the stalls, noise, durability, explanation, tied and
server lines. The lowest module of knoblab.report (it imports neither rich nor matplotlib):
knoblab.report.tables and knoblab.report.charts build on it.
"""

from __future__ import annotations

import math
import re

from knoblab.errors import UserError
from knoblab.units import format_size, parse_size

_UNITS = {"seconds": "s"}
_RICH_STYLE = {"best": "green", "indistinguishable": "", "worse": "red", "failed": "magenta"}


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


def _applied(result: dict, point: dict, knob: str,
             requested_as: str | None = None) -> tuple[str, bool]:
    """(compact effective value, whether it differs from the requested one).

    `requested_as`: the knob whose requested value `knob` was given (a tied follower's leader).
    """
    effective = (point.get("effective") or {}).get(knob)
    if effective is None:
        return "—", False
    requested = point["settings"].get(requested_as or knob)
    eff_n, req_n = _as_number(effective), _as_number(requested)
    text = str(effective)
    if eff_n is not None and eff_n.is_integer() and _is_size_knob(result, knob):
        text = format_size(int(eff_n))
    if eff_n is not None and req_n is not None:
        changed = eff_n != req_n
    else:
        changed = str(effective).strip().lower() != str(requested).strip().lower()
    return text + ("*" if changed else ""), changed


def _applied_cell(result: dict, point: dict, knobs: list[str]) -> tuple[str, bool]:
    """The applied values of `knobs`, plus a tied follower's when the server gave it another
    value than its leader's ("16M, max_heap_table_size=32M*"); whether any was changed."""
    applied = [_applied(result, point, k) for k in knobs]
    texts = [text for text, _ in applied]
    changed = any(c for _, c in applied)
    for follower, leader in _tied(result).items():
        if leader not in knobs:
            continue
        text, follower_changed = _applied(result, point, follower, requested_as=leader)
        if text != "—" and text.rstrip("*") != applied[knobs.index(leader)][0].rstrip("*"):
            texts.append(f"{follower}={text}")
            changed |= follower_changed
    return ", ".join(texts), changed


def _tied(result: dict) -> dict[str, str]:
    """{follower: leader} of the knobs set to another knob's value (missing in old results)."""
    return dict(result.get("tied") or {})


def tied_text(result: dict) -> str:
    """"max_heap_table_size tied to tmp_table_size", or "" when no knob is tied."""
    return "; ".join(f"{follower} tied to {leader}"
                     for follower, leader in _tied(result).items())


def _slice_knobs(result: dict) -> list[str]:
    return list(result.get("slices") or [])


def _value_knobs(result: dict) -> list[str]:
    """The swept knobs that are compared (every knob but the slice knobs)."""
    slices = _slice_knobs(result)
    return [k for k in result["knobs"] if k not in slices] or list(result["knobs"])


def point_label(result: dict, point: dict, *, with_slice: bool = False) -> str:
    """"128K" for one knob, "read_buffer_size=128K, sort_buffer_size=2M" for a grid.

    Slice knobs (result["slices"], e.g. threads or rows) are left out unless `with_slice`:
    points are only ever compared within their slice, which is named separately (slice_label).
    """
    knobs = _value_knobs(result)
    if with_slice:
        knobs += [k for k in _slice_knobs(result) if k not in knobs]
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


def _as_count(value: object) -> float | None:
    """A row count from a setting ("1000000"); None when it is not a number."""
    try:
        return float(str(value).replace("_", "").replace(",", ""))
    except ValueError:
        return _as_number(value)


def _count(n: float) -> str:
    """Rows as people write them: 1000000 -> "1M", 4000000 -> "4M", 250000 -> "250K"."""
    for size, suffix in ((1e9, "B"), (1e6, "M"), (1e3, "K")):
        if abs(n) >= size:
            return f"{n / size:.3g}{suffix}"
    return f"{n:.3g}"


def _wrap_name(name: str, width: int) -> str:
    """Break a long knob name after underscores: "innodb_buffer_\npool_size"."""
    lines = [""]
    for part in re.findall(r"[^_]+_*|_+", name):
        if lines[-1] and len(lines[-1]) + len(part) > width:
            lines.append("")
        lines[-1] += part
    return "\n".join(lines)


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
            part += f" — {_shorten(first_error.splitlines()[0], 160)}"
        parts.append(part)
    return f"Failed: {'; '.join(parts)}." if parts else ""


def _shorten(text: str, limit: int) -> str:
    """At most `limit` characters, cut between words, with an ellipsis when cut."""
    if len(text) <= limit:
        return text
    return text[:limit].rsplit(" ", 1)[0].rstrip(" ,;:|") + "…"


def _centre_cell(row: dict) -> str:
    """A centre with its interval, e.g. "1.85 [0.975–2.01]"."""
    ci = row.get("ci95") or [None, None]
    text = _num(row["center"])
    return text + (f" [{_num(ci[0])}–{_num(ci[1])}]" if None not in ci else "")


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
    A steps run names the steps that gained, those to leave out and the total, per slice, then
    the servers compared.
    """
    if _is_steps(result):
        return _steps_conclusion(result)
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


def durability_lines(result: dict) -> list[str]:
    """A line of its own for every gain bought by giving up durability, against the best
    durable value of the same slice: such a gain must never pass unlabelled. For a steps run,
    a line for every step that gives up durability, prefixed with its slice."""
    if _is_steps(result):
        return [(f"{_where(e.get('slice'))}: " if _where(e.get("slice")) else "") + line
                for e in result.get("steps") or [] for line in _step_durability(result, e)]
    lines = []
    maximize = result["objective"]["direction"] == "maximize"
    for name, points in slices(result):
        def level(p: dict) -> float | None:
            return _centre(result, p) if p["verdict"] != "failed" else None

        durable = [p for p in points if not p.get("durability") and level(p) is not None]
        reference = (max if maximize else min)(durable, key=level, default=None)
        prefix = f"{name}: " if name else ""
        for p in points:
            costs = p.get("durability") or {}
            if not costs or level(p) is None:
                continue
            given_up = "; ".join(f"{knob} = {(p.get('config') or {}).get(knob, '?')}: {cost}"
                                 for knob, cost in costs.items())
            if reference is None:
                change = "no durable value was measured to compare with"
            else:
                ratio = level(p) / level(reference) - 1
                what = _unit(result) if maximize else "time"
                change = (f"{ratio:+.0%} {what} against the best durable value "
                          f"({point_label(result, reference)})")
            lines.append(f"{prefix}{point_label(result, p)}: {change}, bought by giving up "
                         f"durability — {given_up}.")
    return lines


def explanation_lines(result: dict) -> list[str]:
    """Per slice, the server counters that moved with the setting, in words:
    "Explained by the server's counters at rows=1000000: created_tmp_disk_tables: …; …."

    result["explained_by"] is [{"slice": {...}, "counters": [{"text": ...}, ...]}, ...]; a flat
    list of counters (results written before slicing) counts as one unsliced group. Slices
    without a counter get no line; no line at all when nothing was found (or old results).
    """
    entries = result.get("explained_by") or []
    groups: list[tuple[dict, list[dict]]] = []
    flat = [e for e in entries if isinstance(e, dict) and "counters" not in e]
    if flat:
        groups.append(({}, flat))
    groups += [(e.get("slice") or {}, e.get("counters") or []) for e in entries
               if isinstance(e, dict) and "counters" in e]
    lines = []
    for where, counters in groups:
        texts = [str(c.get("text") or "").strip() for c in counters]
        texts = [t for t in texts if t]
        if not texts:
            continue
        at = " at " + ", ".join(f"{k}={v}" for k, v in where.items()) if where else ""
        lines.append(f"Explained by the server's counters{at}: {'; '.join(texts)}.")
    return lines


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


# ----------------------------------------------------------------------------- steps
#
# A steps run applies setting changes one on top of the other from a base and measures every
# step (result["kind"] == "steps"); result["steps"] holds, per slice, one row per step with its
# change against the step before and against the base, judged elsewhere (knoblab.results).
# Several server builds may be compared on the same configurations (result["servers_compared"]).

_MINUS = "\u2212"  # a real minus sign: "−8%" does not read as a dash in a table
_STEP_VERDICT = {  # verdict → (what people read, rich style)
    "base": ("—", "dim"),
    "gain": ("gain", "green"),
    "loss": ("loss: leave it out", "red"),
    "no measurable effect": ("no measurable effect: leave it out", ""),
    "failed": ("failed", "magenta"),
    "unavailable": ("not on this server", "magenta"),
}
_GIVES_UP = "gives up durability"


def _is_steps(result: dict) -> bool:
    return result.get("kind") == "steps"


def _signed(x: float, decimals: int) -> str:
    """"+3.0", "−8.0" (true minus sign); no sign when it rounds to zero."""
    text = f"{abs(x):.{decimals}f}"
    if float(text) == 0:
        return text
    return ("+" if x > 0 else _MINUS) + text


def _change(compared: dict | None, decimals: int = 1) -> str:
    """"−8.0% [−10, −6]": a ratio as a percent change with its 95% interval; "—" if none."""
    if not compared or compared.get("ratio") is None:
        return "—"
    text = _signed((compared["ratio"] - 1) * 100, decimals) + "%"
    ci = compared.get("ci95")
    if ci and None not in ci:
        lo, hi = ((c - 1) * 100 for c in ci)
        d = 0 if round(max(abs(lo), abs(hi)), 1) >= 10 else 1  # whole percents once large
        text += f" [{_signed(lo, d)}, {_signed(hi, d)}]"
    return text


def _where(slice_: dict | None) -> str:
    """"threads=8" for a slice dict, "" for the unsliced {}."""
    return ", ".join(f"{k}={v}" for k, v in (slice_ or {}).items())


def _step_label(row: dict) -> str:
    if row.get("label"):
        return str(row["label"])
    change = row.get("change") or {}
    return "+ " + ", ".join(f"{k}={v}" for k, v in change.items()) if change else "base"


def _step_name(row: dict) -> str:
    """The change without the "+ ": "innodb_buffer_pool_size=700M" (for sentences)."""
    change = row.get("change") or {}
    if change:
        return " + ".join(f"{k}={v}" for k, v in change.items())
    return _step_label(row).removeprefix("+ ")


def _base_label(entry: dict) -> str:
    """What step 0 is called: "defaults" or "base"."""
    first = next((r for r in entry.get("rows") or [] if r.get("step") == 0), None)
    return _step_label(first) if first else "base"


def _durability_knob(cost: str) -> str | None:
    match = re.match(r"\s*([A-Za-z0-9_.]+)\s*=", cost)
    return match.group(1) if match else None


def _step_costs(row: dict) -> list[str]:
    """What a crash can cost because of this step's own change (for step 0: of the base).

    Costs that name a knob the step does not change are left out: they were bought by an
    earlier step and are reported there.
    """
    change = row.get("change") or {}
    costs = [str(c) for c in row.get("durability") or [] if str(c).strip()]
    if not change:
        return costs
    return [c for c in costs if _durability_knob(c) in (None, *change)]


def _cost_text(row: dict, costs: list[str]) -> str:
    """The costs, without "knob = value: " when the step's label already names that knob."""
    change = row.get("change") or {}
    if len(change) == 1 and all(_durability_knob(c) in change for c in costs):
        costs = [re.sub(r"^\s*[A-Za-z0-9_.]+\s*=[^:]*:\s*", "", c) for c in costs]
    return "; ".join(costs)


def _measured(row: dict) -> bool:
    return row.get("center") is not None and row.get("verdict") not in ("failed", "unavailable")


def _what_changes(result: dict) -> str:
    """"time" when less is better, else the metric ("tps")."""
    return "time" if result["objective"]["direction"] == "minimize" else _unit(result)


def _centre_name(result: dict) -> str:
    """"median s" for timed runs, "mean tps" for throughput."""
    word = "mean" if _is_timeseries(result) or result["objective"]["metric"] == "tps" else "median"
    return f"{word} {_unit(result)}"


def _server_info(result: dict, label: str) -> dict:
    return next((s for s in result.get("servers") or [] if s.get("label") == label), {})


def _step_durability(result: dict, entry: dict) -> list[str]:
    """A line for each step that gives up durability (and for a base that already does)."""
    lines = []
    for row in entry.get("rows") or []:
        costs = _step_costs(row)
        if not costs:
            continue
        head = f"step {row.get('step')} ({_step_label(row)})"
        given_up = _cost_text(row, costs)
        previous = row.get("vs_previous")
        if row.get("step") == 0:
            lines.append(f"{head}: the starting point already gives up durability — "
                         f"{given_up}.")
        elif not _measured(row) or not previous or previous.get("ratio") is None:
            what = _STEP_VERDICT.get(row.get("verdict"), (row.get("verdict"), ""))[0]
            lines.append(f"{head}: {what}; it would give up durability — {given_up}.")
        else:
            change = (f"{_signed((previous['ratio'] - 1) * 100, 0)}% "
                      f"{_what_changes(result)}")
            if row.get("verdict") == "gain":
                lines.append(f"{head}: {change}, bought by giving up durability — {given_up}.")
            else:
                what = _STEP_VERDICT.get(row.get("verdict"), (row.get("verdict"), ""))[0]
                lines.append(f"{head}: {change} ({what}), and it gives up durability — "
                             f"{given_up}.")
    return lines


def _step_notes(result: dict, entry: dict) -> list[str]:
    """Why a step has no number: its note, or the first error of its failed runs."""
    lines = []
    points = result.get("points") or []
    for row in entry.get("rows") or []:
        head = f"step {row.get('step')} ({_step_label(row)})"
        if row.get("note"):
            lines.append(f"{head}: {row['note']}.")
        elif row.get("verdict") == "failed":
            index = row.get("point")
            point = points[index] if isinstance(index, int) and index < len(points) else {}
            error = str((point.get("errors") or [""])[0]).strip()
            lines.append(f"{head}: failed" + (f" — {error.splitlines()[0][:120]}." if error
                                              else "."))
    return lines


def _total_text(result: dict, entry: dict) -> str:
    """"defaults → all steps: 9.18 s → 6.50 s, −29% [−31, −27], significant (p < 0.001).\""""
    total, rows = entry.get("total"), entry.get("rows") or []
    base = next((r for r in rows if r.get("step") == 0 and _measured(r)), None)
    measured = [r for r in rows if r.get("step") and _measured(r)]
    if not total or total.get("ratio") is None or base is None or not measured:
        return ""
    last, unit = measured[-1], _unit(result)
    steps = max(r.get("step") or 0 for r in rows)
    until = "all steps" if last.get("step") == steps else f"step {last.get('step')}"
    verdict = "significant" if total.get("significant") else "not significant"
    if total.get("p_value") is not None:
        p = _p(total["p_value"])
        verdict += f" (p {p})" if p.startswith("<") else f" (p = {p})"
    return (f"{_step_label(base)} → {until}: {_num(base['center'])} {unit} → "
            f"{_num(last['center'])} {unit}, {_change(total, 0)}, {verdict}.")


def _interaction_text(result: dict, entry: dict) -> str:
    """The changes measured alone, multiplied, against all of them applied together."""
    inter = entry.get("interaction") or {}
    cumulative, product = inter.get("cumulative"), inter.get("product_of_alone")
    if not cumulative or not product:
        return ""
    what = _what_changes(result)
    minimize = result["objective"]["direction"] == "minimize"
    gap = cumulative / product - 1
    if abs(gap) < (result.get("statistics") or {}).get("min_effect", 0.03):
        how = "they add up about independently"
    elif (gap < 0) == minimize:
        how = "together they do more than each alone predicts: they reinforce each other"
    else:
        how = ("together they do less than each alone predicts: they partly buy the same "
               "gain, or one undoes another")
    return (f"Each change measured alone from the {_base_label(entry)}, multiplied together, "
            f"predicts {_signed((product - 1) * 100, 0)}% {what}; applied one on top of the "
            f"other they gave {_signed((cumulative - 1) * 100, 0)}%: {how} (point estimates, "
            f"not tested).")


def _steps_judge(result: dict, entry: dict) -> str:
    """The conclusion for one slice of a steps run."""
    rows = [r for r in entry.get("rows") or [] if r.get("step")]
    if not rows:
        return "No step was measured."

    def names(verdict: str, mark: bool = False) -> str:
        return ", ".join(_step_name(r) + (f" ({_GIVES_UP})" if mark and _step_costs(r) else "")
                         for r in rows if r.get("verdict") == verdict)

    sentences = []
    gains = names("gain", mark=True)
    sentences.append(f"Steps with a measurable gain: {gains}." if gains
                     else "No step gave a measurable gain.")
    for verdict, head in (("no measurable effect", "No measurable effect, leave out"),
                          ("loss", "Measurable loss, leave out"),
                          ("failed", "Failed"), ("unavailable", "Not on this server")):
        if names(verdict):
            sentences.append(f"{head}: {names(verdict)}.")
    total = entry.get("total")
    if total and total.get("ratio") is not None:
        verdict = "significant" if total.get("significant") else "not significant"
        sentences.append(f"All steps together: {_signed((total['ratio'] - 1) * 100, 0)}% "
                         f"{_what_changes(result)} ({verdict}).")
    return " ".join(sentences)


def _at_text(at: str) -> str:
    """"step 5: + x=4M" → "step 5 (+ x=4M)", so that it reads inside a sentence."""
    match = re.match(r"^(step \d+):\s*(.+)$", str(at))
    return f"{match.group(1)} ({match.group(2)})" if match else str(at)


def _servers_judge(result: dict) -> str:
    """One sentence per compared configuration: the best server and how much worse the rest."""
    sentences = []
    better = "faster" if result["objective"]["direction"] == "minimize" else "better"
    for entry in result.get("servers_compared") or []:
        rows = entry.get("rows") or []
        where = _where({k: v for k, v in (entry.get("slice") or {}).items() if k != "binary"})
        head = f"Servers compared at {_at_text(entry.get('at', '?'))}"
        head += f", {where}" if where else ""
        best = next((r for r in rows if r.get("verdict") == "best"), None)
        if best is None:
            sentences.append(f"{head}: every server failed.")
            continue
        if not entry.get("significant"):
            sentences.append(f"{head}: no server is measurably {better} than another.")
            continue
        text = f"{head}: best {best['binary']} ({_num(best['center'])} {_unit(result)})"
        worse = [r for r in rows if r.get("verdict") == "worse"]
        if worse:
            text += "; worse: " + ", ".join(
                f"{r['binary']} ({_signed((r['ratio_to_best'] - 1) * 100, 0)}% "
                f"{_what_changes(result)})" for r in worse)
        same = [r["binary"] for r in rows if r.get("verdict") == "indistinguishable"]
        if same:
            text += f"; indistinguishable from it: {', '.join(same)}"
        sentences.append(text + ".")
    return " ".join(sentences)


def _steps_conclusion(result: dict) -> str:
    entries = result.get("steps") or []
    if not entries:
        return "No step was measured."
    parts = []
    for entry in entries:
        where = _where(entry.get("slice"))
        parts.append((f"{where}: " if where else "") + _steps_judge(result, entry))
    servers = _servers_judge(result)
    return " ".join(parts + ([servers] if servers else []))


def _slice_heading(result: dict, entry: dict) -> str:
    """The slice, and for a server slice the server's version and compiler."""
    slice_ = entry.get("slice") or {}
    text = _where(slice_)
    if "binary" in slice_:
        info = _server_info(result, str(slice_["binary"]))
        facts = [info.get("version"), (info.get("compile") or {}).get("compiler")]
        if any(facts):
            text += f" ({', '.join(f for f in facts if f)})"
    return text


def server_lines(result: dict) -> list[str]:
    """A line for every server that lacks settings or was left out (result["servers"])."""
    lines = []
    what = "steps" if _is_steps(result) else "points"
    for server in result.get("servers") or []:
        label = server.get("label") or server.get("binary") or "?"
        if server.get("error"):
            where = f" ({server['binary']})" if server.get("binary") not in (None, label) else ""
            lines.append(f"{label}{where} was left out: {server['error']}")
        missing = list(server.get("missing") or [])
        if missing:
            it = "it" if len(missing) == 1 else "them"
            lines.append(f"{label} lacks {', '.join(missing)}: {what} using {it} were left out "
                         "on that server")
    return lines
