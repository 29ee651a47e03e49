"""Presentation of a finished results dict: terminal table, conclusion sentence, PNG charts.

Two kinds of results: query sweeps (one timed query per sample, optionally sliced by dataset
variant: rows, engine, slack_type) and time-series runs (`workload.kind == "sysbench"`: tps every
second, judged on the steady state, optionally sliced by thread count). Either way verdicts only
compare values within one slice (same data size, same concurrency). A steps run (`kind ==
"steps"`, of either workload) applies setting changes one on top of the other; any run may also
compare several server builds (`servers_compared`).

Pure formatting: every number shown here was computed elsewhere (see knoblab.stats and
knoblab.timeseries); the only thing recomputed is which seconds to mark as stalls on a chart.
"""

from __future__ import annotations

import math
import pathlib
import re
import textwrap

import numpy as np
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch
from rich import box
from rich.cells import cell_len
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


# ----------------------------------------------------------------------------- terminal


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


def _title(result: dict) -> str:
    server, work, data = result["server"], result["workload"], result["dataset"]
    sliced, points = _slice_knobs(result), result["points"]
    sql = " ".join(str(work.get("sql") or work.get("kind", "")).split())
    sql = sql if len(sql) <= 70 else sql[:67] + "..."
    reps = f", {work['repetitions']} reps" if work.get("repetitions") else ""
    counts = sorted({c for p in points if "rows" in sliced
                     and (c := _as_count(p["settings"].get("rows"))) is not None})
    if data.get("rows") is not None:
        rows = f"{data['rows']:,} rows"
    elif counts:  # one dataset per size: the sizes are in the table
        rows = "–".join(dict.fromkeys((_count(counts[0]), _count(counts[-1])))) + " rows"
    else:
        rows = data.get("kind", "")
    size = f", {data['bytes'] / 1e6:.1f} MB" if data.get("bytes") else ""
    if "engine" in sliced:
        engine = " " + "/".join(dict.fromkeys(str(p["settings"].get("engine")) for p in points))
    else:
        engine = f" {data['engine']}" if data.get("engine") else ""
    return (
        f"{result['name']} — {server.get('version', '?')} · {sql} ({work.get('cache', '?')} "
        f"cache{reps}) · {rows}{size}{engine} · {result.get('regime') or '?'}"
    )


def _print_title(result: dict, title: str, console: Console) -> None:
    console.print(Text(title, style="bold"))
    tied = tied_text(result)
    if tied:
        console.print(Text(tied, style="dim"))


_QUERY_HEADERS = ["applied", "n", "median", "95% CI", "vs best", "p (Holm)", "verdict",
                  "read MB", "iowait", "regime"]


def _row_start(result: dict, p: dict, values: list[str],
               sliced: list[str]) -> tuple[list[Text], str, str, bool]:
    """What every table row begins with: the point's values, slice, applied values and n."""
    cells = [Text(str(p["settings"].get(k, "—"))) for k in values]
    if p.get("is_default"):
        cells[-1].append(" (default)", style="dim")
    cells += [Text(str(p["settings"].get(k, "—"))) for k in sliced]
    applied, changed = _applied_cell(result, p, values)
    n = f"{p['n']} ({p['failed']} failed)" if p.get("failed") else str(p["n"])
    return cells, applied, n, changed


def _query_rows(result: dict) -> tuple[list[str], list[list[Text]], set[int], bool]:
    """(headers, rows of cells, indexes of rows ending a slice, any value changed).

    Columns: the compared knobs, the slice knobs (rows, engine … when sliced), then
    _QUERY_HEADERS. "read MB" is what the server read from disk per run, "iowait" the share of
    the run's CPU time spent waiting for the disk: the evidence behind the regime.
    """
    values, sliced = _value_knobs(result), _slice_knobs(result)
    sliced = [k for k in sliced if k not in values]
    headers = values + sliced + _QUERY_HEADERS
    rows: list[list[Text]] = []
    ends: set[int] = set()
    any_changed = False
    for _, points in slices(result):
        for p in points:
            cells, applied, n, changed = _row_start(result, p, values, sliced)
            any_changed |= changed
            alive = p["verdict"] != "failed" and p.get("median") is not None
            ci = p.get("ci95") or [None, None]
            ratio, read_mb, iowait = p.get("ratio_to_best"), p.get("read_mb"), p.get("iowait_share")
            cells += [
                Text(applied),
                Text(n),
                Text(_num(p["median"]) if alive else "—"),
                Text(f"{_num(ci[0])}–{_num(ci[1])}" if alive and ci[0] is not None else "—"),
                Text("—" if ratio is None or p["verdict"] == "best"
                     else f"{(ratio - 1) * 100:+.1f}%"),
                Text(_p(p["p_value"]) if p.get("p_value") is not None else "—"),
                Text(p["verdict"], style=_RICH_STYLE.get(p["verdict"], "")),
                Text("—" if read_mb is None or not p["n"] else f"{read_mb:,.1f}"),
                Text("—" if iowait is None or not p["n"] else f"{iowait * 100:.0f}%"),
                Text(str(p.get("regime") or "—")),
            ]
            rows.append(cells)
        ends.add(len(rows) - 1)
    ends.discard(len(rows) - 1)
    return headers, rows, ends, any_changed


def print_report(result: dict, console: Console) -> None:
    """Title, one table row per point, the conclusion, the counters that explain it, and a
    footnote on changed values.

    Sliced results list each slice's points together, a blank line between slices. When the
    table does not fit the console, the same rows are shown as two tables (level and verdict,
    then the evidence) rather than with cut-off cells. A steps run (result["kind"] == "steps")
    gets a table per slice of the steps applied one on top of the other (_print_steps). Runs
    on several servers end with a table per configuration compared across them.
    """
    if _is_steps(result):
        _print_steps(result, console)
    elif _is_timeseries(result):
        _print_timeseries(result, console)
    else:
        _print_query(result, console)
    # any kind may have been run on several servers
    _print_servers(result, console)


def _print_query(result: dict, console: Console) -> None:
    _print_title(result, _title(result), console)
    headers, rows, ends, any_changed = _query_rows(result)
    labels = len(headers) - len(_QUERY_HEADERS)
    # applied, median … verdict; then n, read MB, iowait, regime
    _print_table(console, headers, rows, ends, labels, len(_value_knobs(result)),
                 [(0, 2, 3, 4, 5, 6), (1, 7, 8, 9)])
    console.print(Text(conclusion_text(result)))
    for line in durability_lines(result):
        console.print(Text(line, style="bold yellow"))
    for line in explanation_lines(result):
        console.print(Text(line))
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
            cells, applied, n, changed = _row_start(result, p, values, sliced)
            any_changed |= changed
            alive = p["verdict"] != "failed" and p.get("mean") is not None
            ci = p.get("ci95") or [None, None]
            ratio, cv, stall = p.get("ratio_to_best"), p.get("cv"), p.get("stall_seconds")
            errors = "—" if p.get("sql_errors") is None else f"{p['sql_errors']:,}"
            if p.get("reconnects"):
                errors += f" +{p['reconnects']} reconn."
            cells += [
                Text(applied),
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
           labels: int, wraps: int) -> Table:
    """The columns `keep` of the rows; the first `labels` columns (values and slices) are
    left-aligned, and the first `wraps` of them (the values) may wrap, as may "applied"."""
    # No vertical rules and two spaces between columns: 17 columns fit about 140 characters.
    table = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, padding=(0, 1),
                  collapse_padding=True, header_style="bold")
    for i in keep:
        left = i < labels or headers[i] in ("applied", "verdict", "regime")
        table.add_column(headers[i], justify="left" if left else "right",
                         no_wrap=i >= wraps and headers[i] != "applied",
                         overflow="fold" if headers[i] == "applied" else "ellipsis")
    for r, cells in enumerate(rows):
        table.add_row(*(cells[i] for i in keep), end_section=r in ends)
    return table


def _print_table(console: Console, headers: list[str], rows: list[list[Text]], ends: set[int],
                 labels: int, wraps: int, halves: list[tuple[int, ...]]) -> None:
    """One table, or, when it does not fit the console, two with the label columns repeated
    (`halves` are the columns of each, counted after the labels), rather than cut-off cells.
    Long knob names in the headers break after underscores when space is short."""
    def width(table: Table) -> Measurement:
        # measured against a very wide console: Measurement.get clamps to the console width
        return Measurement.get(console, console.options.update_width(10_000), table)

    wrapped = [_wrap_name(h, 10) if i < labels and "\n" not in h else h
               for i, h in enumerate(headers)]
    every = list(range(len(headers)))
    table = _table(headers, rows, ends, every, labels, wraps)
    if width(table).maximum > console.width:
        table = _table(wrapped, rows, ends, every, labels, wraps)
    if width(table).minimum <= console.width:
        console.print(table)
        return
    for half in halves:
        keep = [*range(labels), *(labels + i for i in half)]
        table = _table(headers, rows, ends, keep, labels, wraps)
        if width(table).maximum > console.width:
            table = _table(wrapped, rows, ends, keep, labels, wraps)
        console.print(table)


def _print_timeseries(result: dict, console: Console) -> None:
    """The time-series table: steady-state level, stability, stalls, errors, verdict.

    When the 17 columns do not fit the console, the same rows are shown as two tables (level
    and verdict, then stability) rather than with cut-off cells.
    """
    _print_title(result, _timeseries_title(result), console)
    headers, rows, ends, any_changed = _timeseries_rows(result)
    # level and verdict, then the shape of the distribution and the stalls
    labels = len(headers) - 15
    _print_table(console, headers, rows, ends, labels, labels,
                 [(0, 1, 2, 3, 12, 13, 14), (4, 5, 6, 7, 8, 9, 10, 11)])
    console.print(Text(conclusion_text(result)))
    for line in durability_lines(result):
        console.print(Text(line, style="bold yellow"))
    for line in explanation_lines(result):
        console.print(Text(line))
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
    yerr = [[max(0.0, p["median"] - lo)], [max(0.0, hi - p["median"])]]
    ax.errorbar(x, p["median"], yerr=yerr, fmt="o", ms=7,
                color=colour, ecolor=colour, capsize=4, zorder=3)


def write_chart(result: dict, path: pathlib.Path) -> pathlib.Path:
    """Median ± 95% CI per point (plus raw samples) on a categorical x axis; PNG at `path`.

    Every point of `result`; write_charts draws one such chart per slice instead.
    """
    return _chart_query(result, result["points"], "", pathlib.Path(path))


def _chart_query(result: dict, points: list[dict], slice_name: str,
                 path: pathlib.Path) -> pathlib.Path:
    """write_chart for `points` (one slice, named in the title when not "")."""
    knobs = _value_knobs(result)
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
    where = f" · {slice_name}" if slice_name else ""
    ax.set_title(f"{result['name']} — {result['server'].get('version', '?')}{where}")
    ax.grid(axis="y", alpha=0.3)
    ax.legend(handles=handles, fontsize="small", loc="best")
    return _save(fig, path)


# ----------------------------------------------------------------------------- time-series charts

_STALL_COLOUR = "#d62728"
# Colours for values: the tab10 cycle without its green and red, which mean best and worse.
_VALUE_COLOURS = ["C0", "C1", "C4", "C5", "C9", "C6", "C8", "C7"]


def _tidy_grid(axes, n_panels: int, ncols: int) -> list:
    """Remove the empty cells of a small-multiples grid; label the lowest panel of each column."""
    cells = list(axes.flat)
    for i, ax in enumerate(cells):
        if i >= n_panels:  # an empty cell of the last row
            ax.remove()
        elif i + ncols >= n_panels:  # the lowest panel of its column: x ticks and label
            ax.xaxis.set_tick_params(labelbottom=True)
            ax.set_xlabel("time (s)")
    return cells


def write_charts(result: dict, folder: pathlib.Path) -> list[pathlib.Path]:
    """Every chart for `result` in `folder` (created if missing); returns the paths written.

    Charts are drawn per slice, with a suffix such as "-threads-8" or "-rows-1000000" when the
    result is sliced. Query results: chart.png (see write_chart), plus scaling.png (time against
    rows, see _chart_scaling) when rows were swept. Time-series results: tps-over-time.png (one
    panel per value), tps-overlay.png (all values on one axis), tps-steady.png (steady mean ±
    stdev and 95% CI per value) and, when the OS was sampled every second, os-over-time.png
    (CPU and disk per second, one panel per value). Steps runs: steps-waterfall.png per slice
    ("-binary-gcc"), see _chart_waterfall. Any run compared on several servers: servers.png.
    """
    folder = pathlib.Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    if _is_steps(result):
        paths = [_chart_waterfall(result, entry, folder /
                                  f"steps-waterfall{_dict_suffix(entry.get('slice'))}.png")
                 for entry in result.get("steps") or []]
    elif _is_timeseries(result):
        paths = _timeseries_charts(result, folder)
    else:
        paths = []
        for name, points in slices(result):
            suffix = _file_suffix(result, points[0]) if name else ""
            paths.append(_chart_query(result, points, name, folder / f"chart{suffix}.png"))
        if _scales_with_rows(result):
            paths.append(_chart_scaling(result, folder / "scaling.png"))
    if result.get("servers_compared"):
        paths.append(_chart_servers(result, folder / "servers.png"))
    return paths


def _timeseries_charts(result: dict, folder: pathlib.Path) -> list[pathlib.Path]:
    paths = []
    colours = _value_colours(result)
    for name, points in slices(result):
        suffix = _file_suffix(result, points[0]) if name else ""
        paths.append(_chart_over_time(result, points, name, colours,
                                      folder / f"tps-over-time{suffix}.png"))
        paths.append(_chart_overlay(result, points, name, colours,
                                    folder / f"tps-overlay{suffix}.png"))
        paths.append(_chart_steady(result, points, name, folder / f"tps-steady{suffix}.png"))
        if any(_os_run(p) is not None for p in points):
            paths.append(_chart_os(result, points, name, folder / f"os-over-time{suffix}.png"))
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
    cells = _tidy_grid(axes, len(points), ncols)
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


# ----------------------------------------------------------------------------- data size

def _scales_with_rows(result: dict) -> bool:
    """Were rows swept (a slice) over at least two sizes? Then time against size is charted."""
    if _is_timeseries(result) or "rows" not in _slice_knobs(result):
        return False
    counts = {_as_count(p["settings"].get("rows")) for p in result["points"]} - {None}
    return len(counts) >= 2


def _log_axis_labels(axis, low: float, high: float, formatter) -> None:
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


def _short(x: float) -> str:
    """An axis label or a factor: "0.5", "2", "19.3", "1,200"."""
    return _num(x) if abs(x) >= 1000 else f"{x:.3g}"


def _chart_scaling(result: dict, path: pathlib.Path) -> pathlib.Path:
    """Median time against rows on log–log axes, one line per value (95% CI bars), and per line
    a faint dotted line growing linearly from its smallest size: a line bending above its
    reference takes more than linearly longer as the data grows (e.g. a temporary table
    spilling to disk). Failed points are left out."""
    from matplotlib.ticker import FixedLocator, NullLocator

    others = [k for k in _slice_knobs(result) if k != "rows"]  # e.g. engine: its own lines

    def line_of(p: dict) -> str:
        extra = ", ".join(f"{k}={p['settings'].get(k)}" for k in others)
        return point_label(result, p) + (f", {extra}" if extra else "")

    names = list(dict.fromkeys(line_of(p) for p in result["points"]))
    lines: dict[str, list[tuple[float, dict]]] = {name: [] for name in names}
    for p in result["points"]:
        rows = _as_count(p["settings"].get("rows"))
        if rows is not None and p["verdict"] != "failed" and p.get("median") is not None:
            lines[line_of(p)].append((rows, p))
    lines = {name: sorted(members, key=lambda m: m[0]) for name, members in lines.items()
             if members}
    counts = sorted({rows for members in lines.values() for rows, _ in members})

    fig = Figure(figsize=(10.5, 5.6), layout="constrained")
    ax = fig.add_subplot()
    ax.set_xscale("log")
    ax.set_yscale("log")
    handles = []
    for i, (name, members) in enumerate(lines.items()):
        colour = _VALUE_COLOURS[i % len(_VALUE_COLOURS)]
        dodge = 10 ** ((i - (len(lines) - 1) / 2) * 0.008)  # bars side by side, not on top
        rows = np.array([r for r, _ in members]) * dodge
        medians = np.array([p["median"] for _, p in members])
        cis = [p.get("ci95") or (p["median"], p["median"]) for _, p in members]
        yerr = np.clip([medians - np.array([lo for lo, _ in cis]),
                        np.array([hi for _, hi in cis]) - medians], 0, None)
        ax.errorbar(rows, medians, yerr=yerr, color=colour, marker="o", ms=6,
                    lw=1.6, capsize=3, zorder=3)
        worse = [j for j, (_, p) in enumerate(members) if p["verdict"] == "worse"]
        ax.plot(rows[worse], medians[worse], ls="", marker="o", ms=6, mfc="white", mec=colour,
                mew=1.5, zorder=4)
        best = [j for j, (_, p) in enumerate(members) if p["verdict"] == "best"]
        ax.plot(rows[best], medians[best], ls="", marker="*", ms=13, color=_MPL_COLOUR["best"],
                mec="white", mew=0.6, zorder=5)
        r0, m0 = members[0][0], medians[0]
        label = name + (" (default)" if any(p.get("is_default") for _, p in members) else "")
        if len(members) > 1:
            ax.plot(rows[[0, -1]], m0 * np.array([r0, members[-1][0]]) / r0, color=colour,
                    ls=":", lw=1.4, alpha=0.65, zorder=2)
            label += (f": ×{_short(medians[-1] / m0)} time for "
                      f"×{_short(members[-1][0] / r0)} rows")
        handles.append(Line2D([], [], color=colour, marker="o", lw=1.6, label=label))
    handles += [
        Line2D([], [], color="0.4", ls=":", lw=1.3, label="linear from the smallest size"),
        Line2D([], [], color="0.4", ls="", marker="o", mfc="white", mew=1.5,
               label="worse than the best at that size"),
        Line2D([], [], color=_MPL_COLOUR["best"], ls="", marker="*", ms=12,
               label="best at that size"),
    ]
    ax.xaxis.set_major_locator(FixedLocator(counts))
    ax.xaxis.set_minor_locator(NullLocator())
    ax.set_xticks(counts, [_count(c) for c in counts])
    if counts:
        ax.set_xlim(counts[0] / 1.35, counts[-1] * 1.35)
    _log_axis_labels(ax.yaxis, *ax.get_ylim(), _short)
    ax.set_xlabel("rows (log scale)")
    ax.set_ylabel(f"{result['objective']['metric']} (median, 95% CI, log scale)")
    work = result["workload"]
    sql = " ".join(str(work.get("sql") or "").split())
    sql = sql if len(sql) <= 60 else sql[:57] + "..."
    ax.set_title(f"{result['name']} — time against data size\n"
                 f"{sql} · {work.get('cache', '?')} cache · "
                 f"{result['server'].get('version', '?')}", fontsize="medium")
    ax.grid(which="both", alpha=0.3)
    ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize="small",
              title=", ".join(_value_knobs(result)), title_fontsize="small")
    return _save(fig, path)


# ----------------------------------------------------------------------------- OS over time

_OS_CPU = (("cpu_user", "user", "#4c72b0"), ("cpu_system", "system", "#dd8452"),
           ("cpu_iowait", "iowait", "#c44e52"))
_OS_DISK = (("disk_read_bytes", "disk read", "#1a1a1a"),
            ("disk_write_bytes", "disk write", "#8e44ad"))


def _os_run(point: dict) -> dict | None:
    """The OS samples of the point's first repetition that has any, or None."""
    runs = [s for s in point.get("os_series") or []
            if any(s.get(k) for k, _, _ in _OS_CPU + _OS_DISK)]
    return min(runs, key=lambda s: s.get("repetition") or 0) if runs else None


def _os_arrays(run: dict) -> tuple[np.ndarray, list[np.ndarray], list[np.ndarray]]:
    """(t, CPU user/system/iowait in % of all cores, disk read/write in MB/s) of one run.

    CPU figures are shares (0–1, as knoblab.observe writes them); values above 1.5 are taken to
    be percentages already. Missing seconds count as 0.
    """
    n = max(len(run.get(k) or []) for k, _, _ in _OS_CPU + _OS_DISK)

    def values(key: str) -> np.ndarray:
        raw = [np.nan if v is None else v for v in (run.get(key) or [])][:n]
        return np.nan_to_num(np.pad(np.asarray(raw, dtype=float), (0, n - len(raw)),
                                    constant_values=np.nan))

    t = np.asarray(run.get("t") or [], dtype=float)[:n]
    if t.size < n:
        t = np.arange(1, n + 1, dtype=float)
    cpu = [values(k) for k, _, _ in _OS_CPU]
    scale = 1.0 if max((float(c.max()) for c in cpu if c.size), default=0.0) > 1.5 else 100.0
    return t, [c * scale for c in cpu], [values(k) / 1e6 for k, _, _ in _OS_DISK]


def _chart_os(result: dict, points: list[dict], slice_name: str,
              path: pathlib.Path) -> pathlib.Path:
    """vmstat as small multiples: per value (its first run), CPU user/system/iowait stacked
    (% of all cores, left axis) and disk read/write MB/s (lines, right axis); same axes in every
    panel, the steady window of that run between dotted lines."""
    ncols = min(3, len(points))
    nrows = math.ceil(len(points) / ncols)
    fig = Figure(figsize=(4.4 * ncols + 1.0, 2.8 * nrows + 1.4), layout="constrained")
    axes = fig.subplots(nrows, ncols, sharex=True, sharey=True, squeeze=False)
    data = {id(p): _os_arrays(run) for p in points if (run := _os_run(p)) is not None}
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
        ax.set_title(f"{_title_label(result, p)} — {p['verdict']}", fontsize="medium",
                     color=_MPL_COLOUR.get(p["verdict"], "black"), fontweight="bold")
        ax.grid(alpha=0.3)
        if id(p) not in data:
            ax.text(0.5, 0.5, "no OS samples", transform=ax.transAxes, ha="center",
                    va="center", color="0.4")
            continue
        t, cpu, disk = data[id(p)]
        ax.stackplot(t, *cpu, colors=[c for _, _, c in _OS_CPU], alpha=0.55, lw=0, zorder=1)
        for values, (_, _, colour) in zip(disk, _OS_DISK, strict=True):
            twin.plot(t, values, color=colour, lw=1.2, zorder=3)
        run = _os_run(p) or {}
        tps = next((s for s in p.get("series") or []
                    if s.get("repetition") == run.get("repetition") and s.get("steady")), None)
        if tps is not None:
            seconds, values, start, end = _series(tps)
            if end > start:
                for edge in (seconds[start] - 0.5, seconds[end - 1] + 0.5):
                    ax.axvline(edge, color="0.2", ls=":", lw=1, zorder=2)
        means = [float(c.mean()) for c in cpu]
        rates = [float(d.mean()) for d in disk]
        ax.text(0.02, 0.97, f"user {means[0]:.0f}%, sys {means[1]:.0f}%, iowait "
                f"{means[2]:.0f}% · read {_short(rates[0])}, write {_short(rates[1])} MB/s",
                transform=ax.transAxes, va="top", fontsize="x-small", zorder=5,
                bbox={"facecolor": "white", "alpha": 0.85, "lw": 0, "pad": 1.5})
    cells = _tidy_grid(axes, len(points), ncols)
    cells[0].set_ylim(0, 130)  # 0–100% and room for the facts line
    cells[0].set_yticks([0, 25, 50, 75, 100])
    cells[0].set_xlim(0, t_max + 1)
    fig.supylabel("CPU, % of all cores (stacked)")
    fig.suptitle(_chart_title(result, "CPU and disk per second (vmstat, first run)", slice_name))
    handles = [Patch(color=colour, alpha=0.55, lw=0, label=f"CPU {name}")
               for _, name, colour in _OS_CPU]
    handles += [Line2D([], [], color=colour, lw=1.2, label=f"{name} (MB/s, right axis)")
                for _, name, colour in _OS_DISK]
    handles.append(Line2D([], [], color="0.2", ls=":", lw=1, label="steady state (tps)"))
    fig.legend(handles=handles, loc="outside lower center", ncols=min(6, 3 * ncols),
               fontsize="small", frameon=False)
    return _save(fig, path)


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
_STEP_COLOUR = {"base": "#4c72b0", "gain": "#2ca02c", "loss": "#d62728",
                "no measurable effect": "#a0a0a0"}
_DURABILITY_EDGE = "#b8860b"


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


def _dict_suffix(slice_: dict | None) -> str:
    """"-binary-gcc" (file-name safe) for a slice dict, "" for {}."""
    parts = [str(part) for item in (slice_ or {}).items() for part in item]
    return "".join("-" + re.sub(r"[^A-Za-z0-9._]+", "_", part) for part in parts)


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


def _steps_title(result: dict) -> str:
    """"name — version · what was run · settings applied one by one from the defaults"."""
    work = result.get("workload") or {}
    servers = [s for s in result.get("servers") or [] if s.get("label")]
    if len(servers) > 1:
        server = "servers " + ", ".join(s["label"] for s in servers)
    else:
        server = (result.get("server") or {}).get("version", "?")
    reps = work.get("repetitions")
    if _is_timeseries(result):
        what = f"sysbench {work.get('test', '?')}"
        if work.get("threads") is not None:
            what += f", {work['threads']} threads"
        if work.get("duration"):
            what += f", {work['duration']} s × {reps or 1} run{'' if reps in (None, 1) else 's'}"
    else:
        sql = " ".join(str(work.get("sql") or work.get("kind", "")).split())
        what = sql if len(sql) <= 70 else sql[:67] + "..."
        extra = [f"{work['cache']} cache" if work.get("cache") else "",
                 f"{reps} reps" if reps else ""]
        if any(extra):
            what += f" ({', '.join(e for e in extra if e)})"
        rows = (result.get("dataset") or {}).get("rows")
        if rows is not None:
            what += f" · {rows:,} rows"
    base = _base_label((result.get("steps") or [{}])[0])
    return (f"{result.get('name', '?')} — {server} · {what} · settings applied one by one from "
            f"the {base}")


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


def _split(text: str) -> tuple[Text, Text]:
    """A "value [interval]" cell on one line, and stacked on two for narrow consoles."""
    return Text(text), Text(text.replace(" [", "\n[", 1))


def _fits(console: Console, table: Table) -> bool:
    # measured against a very wide console: Measurement.get clamps to the console width
    wide = console.options.update_width(10_000)
    return Measurement.get(console, wide, table).minimum <= console.width


def _print_fitting(console: Console, columns: dict[str, dict], rows: list[dict],
                   layouts: list[tuple[list[list[str]], bool]]) -> None:
    """Print the first layout whose tables all fit the console, else the last one.

    `columns`: key → {"header", "justify", "wrap" (may wrap at spaces), "min_width"};
    `rows`: key → a Text, or (one line, stacked) for cells whose interval may go on a second
    line; a layout is (the keys of each table, whether to stack). Tables keep the style of the
    other reports: no vertical rules, bold headers.
    """
    def build(keys: list[str], stacked: bool) -> Table:
        table = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, padding=(0, 1),
                      collapse_padding=True, header_style="bold")
        grid = [[row[k][1 if stacked else 0] if isinstance(row[k], tuple) else row[k]
                 for k in keys] for row in rows]
        for i, key in enumerate(keys):
            spec = columns[key]
            header, min_width = spec["header"], spec.get("min_width")
            if not spec.get("wrap"):
                # rich measures a cell's minimum as its longest word, even in a no_wrap column:
                # without this a table seems to fit and then squeezes the wrapping columns
                lines = [line for cells in grid for line in cells[i].plain.split("\n")]
                min_width = max(cell_len(line) for line in lines) if lines else 1
                if stacked and isinstance(rows[0][key] if rows else None, tuple):
                    # a stacked column is as narrow as its cells: its header wraps to them
                    width = max(min_width, *map(len, header.split()))
                    header = "\n".join(textwrap.fill(part, width)
                                        for part in header.replace(" [", "\n[").split("\n"))
                min_width = max(min_width, *(cell_len(line) for line in header.split("\n")))
            table.add_column(header, justify=spec.get("justify", "left"),
                             no_wrap=not spec.get("wrap"), min_width=min_width,
                             overflow="fold")
        for cells in grid:
            table.add_row(*cells)
        return table

    chosen = layouts[-1]
    for layout in layouts:
        tables, stacked = layout
        if all(_fits(console, build(keys, stacked)) for keys in tables):
            chosen = layout
            break
    tables, stacked = chosen
    for keys in tables:
        console.print(build(keys, stacked))


def _print_step_table(result: dict, entry: dict, console: Console) -> None:
    """The article's table: each step, its level, its change against the step before and the
    base, and what to do with it. Narrow consoles get two tables (the steps with their level
    and verdict, then the comparisons) rather than cut-off cells."""
    rows = entry.get("rows") or []
    base = _base_label(entry)
    ns = {r.get("n") for r in rows if _measured(r)}
    # several changes in one step: one per line, so that no knob name is ever broken
    labels = [re.sub(r",\s+", ",\n  ", _step_label(r)) for r in rows]
    columns: dict[str, dict] = {
        "step": {"header": "step", "justify": "right"},
        "setting": {"header": "setting added"},
        "centre": {"header": f"{_centre_name(result)} [95% CI]", "justify": "right"},
        "n": {"header": "n", "justify": "right"},
        "previous": {"header": "vs previous", "justify": "right"},
        "base": {"header": f"vs {base}", "justify": "right"},
        "alone": {"header": f"alone vs {base}", "justify": "right"},
        "p": {"header": "p (Holm)", "justify": "right"},
        "verdict": {"header": "verdict", "wrap": True, "min_width": 12},
    }
    cells = []
    for row, label in zip(rows, labels, strict=True):
        alive = _measured(row)
        centre = _centre_cell(row) if alive else "—"
        previous = row.get("vs_previous") or {}
        alone = (row.get("alone") or {}).get("vs_base")
        text, style = _STEP_VERDICT.get(row.get("verdict"), (str(row.get("verdict")), ""))
        verdict = Text(text, style=style)
        if _step_costs(row) and row.get("step"):
            verdict.append(f" — {_GIVES_UP}", style="bold yellow")
        change_style = ""
        if previous.get("significant") and row.get("verdict") in ("gain", "loss"):
            change_style = "green" if row["verdict"] == "gain" else "red"
        cells.append({
            "step": Text(str(row.get("step", "?"))),
            "setting": Text(label, style="dim" if row.get("step") == 0 else ""),
            "centre": _split(centre),
            "n": Text(str(row.get("n", "—"))),
            "previous": tuple(Text(t.plain, style=change_style)
                              for t in _split(_change(row.get("vs_previous") if alive else None))),
            "base": _split(_change(row.get("vs_base") if alive else None)),
            "alone": _split(_change(alone)),
            "p": Text(_p(previous["p_value"]) if alive and previous.get("p_value") is not None
                      else "—"),
            "verdict": verdict,
        })
    keys = ["step", "setting", "centre"] + (["n"] if len(ns) > 1 else [])
    compare = ["previous", "base"] + (["alone"] if any(r.get("alone") for r in rows) else [])
    every = keys + compare + ["p", "verdict"]
    halves = [keys + ["verdict"], ["step", *compare, "p"]]
    _print_fitting(console, columns, cells,
                   [([every], False), ([every], True), (halves, False), (halves, True)])


def _print_steps(result: dict, console: Console) -> None:
    """Title, per slice the steps table, durability, total and interaction; the conclusion."""
    _print_title(result, _steps_title(result), console)
    entries = result.get("steps") or []
    rows = [r for e in entries for r in e.get("rows") or [] if _measured(r)]
    ns = sorted({r["n"] for r in rows if r.get("n") is not None})
    if ns:
        runs = f"{ns[0]}" if len(ns) == 1 else f"{ns[0]}–{ns[-1]}"
        word = _centre_name(result).split()[0]
        console.print(Text(f"Each step is the {word} of {runs} runs with its 95% interval; "
                           "vs previous and p (Holm-adjusted) compare it with the step before.",
                           style="dim"))
    for i, entry in enumerate(entries):
        if i or _where(entry.get("slice")):
            console.print()
        if _where(entry.get("slice")):
            console.print(Text(_slice_heading(result, entry), style="bold"))
        _print_step_table(result, entry, console)
        for line in _step_notes(result, entry):
            console.print(Text(line))
        for line in _step_durability(result, entry):
            console.print(Text(line, style="bold yellow"))
        for line in (_total_text(result, entry), _interaction_text(result, entry)):
            if line:
                console.print(Text(line))
    console.print()
    console.print(Text(conclusion_text(result)))
    for line in explanation_lines(result):
        console.print(Text(line))
    noise = noise_text(result)
    if noise:
        console.print(Text(noise, style="dim"))


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


def _print_servers(result: dict, console: Console) -> None:
    """A table per configuration measured on every server, then what each server lacked."""
    for entry in result.get("servers_compared") or []:
        rows = entry.get("rows") or []
        where = _where({k: v for k, v in (entry.get("slice") or {}).items() if k != "binary"})
        console.print()
        console.print(Text(f"servers compared at {_at_text(entry.get('at', '?'))}"
                           + (f" · {where}" if where else ""), style="bold"))
        infos = [_server_info(result, str(r.get("binary"))) for r in rows]
        columns: dict[str, dict] = {
            "server": {"header": "server"},
            "version": {"header": "version"},
            "compiler": {"header": "compiler", "wrap": True},
            "centre": {"header": f"{_centre_name(result)} [95% CI]", "justify": "right"},
            "n": {"header": "n", "justify": "right"},
            "best": {"header": "vs best", "justify": "right"},
            "p": {"header": "p (Holm)", "justify": "right"},
            "verdict": {"header": "verdict"},
        }
        cells = []
        for row, info in zip(rows, infos, strict=True):
            alive = row.get("verdict") != "failed" and row.get("center") is not None
            centre = _centre_cell(row) if alive else "—"
            ratio = row.get("ratio_to_best")
            cells.append({
                "server": Text(str(row.get("binary", "?"))),
                "version": Text(str(info.get("version") or "—")),
                "compiler": Text(str((info.get("compile") or {}).get("compiler") or "—")),
                "centre": _split(centre),
                "n": Text(str(row.get("n", "—"))),
                "best": Text("—" if ratio is None or row.get("verdict") == "best" or not alive
                             else f"{_signed((ratio - 1) * 100, 1)}%"),
                "p": Text(_p(row["p_value"]) if row.get("p_value") is not None else "—"),
                "verdict": Text(str(row.get("verdict")),
                                style=_RICH_STYLE.get(row.get("verdict"), "")),
            })
        compiled = any((i.get("compile") or {}).get("compiler") for i in infos)
        full = ["server", "version"] + (["compiler"] if compiled else [])
        judged = ["centre", "n", "best", "p", "verdict"]
        # too narrow: who the servers are, then how they did; else only how they did
        _print_fitting(console, columns, cells,
                       [([full + judged], False), ([full, ["server", *judged]], False),
                        ([["server", *judged]], False), ([["server", *judged]], True)])
        if not entry.get("significant"):
            better = "faster" if result["objective"]["direction"] == "minimize" else "better"
            console.print(Text(f"No server is measurably {better} than another here."))
    lines = server_lines(result)
    if lines and not result.get("servers_compared"):
        console.print()
    for line in lines:
        console.print(Text(line, style="yellow"))


def _chart_waterfall(result: dict, entry: dict, path: pathlib.Path) -> pathlib.Path:
    """The steps as a waterfall: the base level, then each step floating from the level before
    to its own (green gain, red loss, grey no measurable effect; hatched when it gives up
    durability) with its 95% CI, and a last bar for all steps together."""
    rows = entry.get("rows") or []
    minimize = result["objective"]["direction"] == "minimize"
    n_bars = len(rows) + 1
    fig = Figure(figsize=(max(7.5, 1.15 * n_bars + 2.5), 5.8), layout="constrained")
    ax = fig.add_subplot()
    ticks, tops = [], [0.0]
    previous: tuple[float, float] | None = None  # (x, level) of the last measured step
    trans = ax.get_xaxis_transform()
    any_alone = any_durable = False
    for x, row in enumerate(rows):
        label = _step_label(row)
        wrapped = "\n".join(_wrap_name(part, 16) for part in label.split(", "))
        ticks.append(f"{row.get('step')}\n{wrapped}")
        if not _measured(row):
            failed = row.get("verdict") == "failed"
            ax.plot(x, 0.04, marker="x", ms=10, mew=2, color=_MPL_COLOUR["failed"],
                    transform=trans)
            ax.text(x, 0.08, "failed" if failed else "not on\nthis server", ha="center",
                    color=_MPL_COLOUR["failed"], fontsize="small", transform=trans)
            continue
        centre = row["center"]
        durable = bool(_step_costs(row)) and bool(row.get("step"))
        any_durable |= durable
        if previous is None or not row.get("step"):
            bottom, colour = 0.0, _STEP_COLOUR["base"]
        else:
            bottom = previous[1]
            colour = _STEP_COLOUR.get(row.get("verdict"), _STEP_COLOUR["no measurable effect"])
            ax.plot([previous[0] + 0.3, x - 0.3], [bottom, bottom], ls=":", lw=1, color="0.45",
                    zorder=1)
        ax.bar(x, centre - bottom, bottom=bottom, width=0.6, color=colour,
               edgecolor=_DURABILITY_EDGE if durable else colour, linewidth=1.5 if durable else 0,
               hatch="///" if durable else None, zorder=2)
        lo, hi = row.get("ci95") or (centre, centre)
        ax.errorbar(x, centre, yerr=[[max(0.0, centre - lo)], [max(0.0, hi - centre)]],
                    fmt="none", ecolor="black", elinewidth=1.2, capsize=4, zorder=3)
        tops.append(max(hi, centre))
        change = row.get("vs_previous") if row.get("step") else None
        text = _num(centre)
        if change and change.get("ratio") is not None:
            text += f"\n{_signed((change['ratio'] - 1) * 100, 1)}%"
        # above the bar and its interval: a gain's bar reaches up to the level before
        ax.annotate(text, (x, max(hi, centre, bottom)), xytext=(0, 4),
                    textcoords="offset points", ha="center", va="bottom", fontsize="small")
        alone = row.get("alone") or {}
        if alone.get("center") is not None:
            any_alone = True
            ax.plot(x + 0.38, alone["center"], marker="D", ms=6, mfc="white", mec="0.25",
                    ls="", zorder=4)
            tops.append(alone["center"])
        previous = (x, centre)
    base = next((r for r in rows if r.get("step") == 0 and _measured(r)), None)
    total = entry.get("total") or {}
    if previous is not None and base is not None and rows.index(base) != previous[0]:
        x = len(rows)
        ratio = total.get("ratio", previous[1] / base["center"])
        better = (ratio < 1) == minimize
        colour = (_STEP_COLOUR["gain" if better else "loss"] if total.get("significant")
                  else _STEP_COLOUR["no measurable effect"])
        ax.plot([previous[0] + 0.3, x - 0.3], [previous[1]] * 2, ls=":", lw=1, color="0.45")
        ax.bar(x, previous[1], width=0.6, color=colour, alpha=0.85, edgecolor="black",
               linewidth=1.2, zorder=2)
        ax.axhline(base["center"], ls="--", lw=1, color=_STEP_COLOUR["base"], alpha=0.6,
                   zorder=1)
        ax.annotate(f"{_num(previous[1])}\n{_signed((ratio - 1) * 100, 0)}%", (x, previous[1]),
                    xytext=(0, 4), textcoords="offset points", ha="center", va="bottom",
                    fontsize="small", fontweight="bold")
        ticks.append("all steps")
    ax.set_xticks(range(len(ticks)), ticks, fontsize="small")
    ax.set_xlim(-0.6, len(ticks) - 0.4)
    ax.set_ylim(0, max(tops) * 1.18 or 1.0)  # room for the labels above the bars
    ax.set_ylabel(f"{result['objective']['metric']} ({_centre_name(result).split()[0]}, "
                  "95% CI)")
    where = _slice_heading(result, entry)
    # a server slice names its version already
    version = "" if "binary" in (entry.get("slice") or {}) else \
        f"\n{(result.get('server') or {}).get('version', '?')}"
    ax.set_title(f"{result.get('name', '?')} — settings applied one by one"
                 + (f" · {where}" if where else "") + version, fontsize="medium")
    ax.grid(axis="y", alpha=0.3)
    ax.set_axisbelow(True)
    shown = [v for v in ("gain", "loss", "no measurable effect")
             if any(r.get("verdict") == v for r in rows)]
    handles = [Patch(color=_STEP_COLOUR["base"], label=_base_label(entry)),
               *(Patch(color=_STEP_COLOUR[v], label=v) for v in shown),
               Line2D([], [], color="black", marker="_", ms=10, ls="", label="95% CI")]
    if any_durable:
        handles.append(Patch(facecolor="white", edgecolor=_DURABILITY_EDGE, hatch="///",
                             label=_GIVES_UP))
    if any_alone:
        handles.append(Line2D([], [], marker="D", ms=6, mfc="white", mec="0.25", ls="",
                              label=f"the change alone from the {_base_label(entry)}"))
    ax.legend(handles=handles, fontsize="small", loc="upper left", bbox_to_anchor=(1.01, 1.0))
    return _save(fig, path)


def _chart_servers(result: dict, path: pathlib.Path) -> pathlib.Path:
    """Each server's level with its 95% CI, one panel per configuration compared."""
    entries = result.get("servers_compared") or []
    ncols = min(3, len(entries))
    nrows = math.ceil(len(entries) / ncols)
    most = max((len(e.get("rows") or []) for e in entries), default=1)
    fig = Figure(figsize=(max(4.0, 1.2 * most + 2.0) * ncols, 3.8 * nrows + 0.8),
                 layout="constrained")
    axes = fig.subplots(nrows, ncols, squeeze=False)
    for ax, entry in zip(axes.flat, entries, strict=False):
        rows = entry.get("rows") or []
        tops = [0.0]
        for x, row in enumerate(rows):
            colour = _MPL_COLOUR.get(row.get("verdict"), "black")
            if row.get("verdict") == "failed" or row.get("center") is None:
                trans = ax.get_xaxis_transform()
                ax.plot(x, 0.04, marker="x", ms=10, mew=2, color=colour, transform=trans)
                ax.text(x, 0.08, "failed", ha="center", color=colour, transform=trans)
                continue
            centre = row["center"]
            lo, hi = row.get("ci95") or (centre, centre)
            ax.errorbar(x, centre, yerr=[[max(0.0, centre - lo)], [max(0.0, hi - centre)]],
                        fmt="o", ms=8, color=colour, ecolor=colour, capsize=5, zorder=3)
            ratio = row.get("ratio_to_best")
            text = _num(centre)
            if ratio is not None and row.get("verdict") != "best":
                text += f" ({_signed((ratio - 1) * 100, 0)}%)"
            ax.annotate(text, (x, hi), xytext=(0, 5), textcoords="offset points", ha="center",
                        va="bottom", fontsize="small", color=colour)
            tops.append(hi)
        names = []
        for row in rows:
            compiler = (_server_info(result, str(row.get("binary"))).get("compile")
                        or {}).get("compiler")
            names.append(str(row.get("binary")) + (f"\n{compiler}" if compiler else ""))
        ax.set_xticks(range(len(rows)), names, fontsize="small")
        ax.set_xlim(-0.6, len(rows) - 0.4)
        ax.set_ylim(0, max(tops) * 1.2 or 1.0)
        where = _where({k: v for k, v in (entry.get("slice") or {}).items() if k != "binary"})
        title = "\n".join(_wrap_name(part, 40) for part in
                          [_at_text(entry.get("at", "?"))] + ([where] if where else []))
        ax.set_title(title, fontsize="small")
        ax.set_ylabel(f"{result['objective']['metric']} ({_centre_name(result).split()[0]}, "
                      "95% CI)")
        ax.grid(axis="y", alpha=0.3)
    for ax in list(axes.flat)[len(entries):]:
        ax.remove()
    fig.suptitle(f"{result.get('name', '?')} — servers compared")
    shown = [v for v in _MPL_COLOUR
             if any(r.get("verdict") == v for e in entries for r in e.get("rows") or [])]
    fig.legend(handles=[Line2D([], [], marker="x" if v == "failed" else "o", ls="",
                               color=_MPL_COLOUR[v], label=v) for v in shown],
               loc="outside lower center", ncols=max(1, len(shown)), fontsize="small",
               frameon=False)
    return _save(fig, path)
