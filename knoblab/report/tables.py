"""The terminal report: print_report and a table per kind of run, fitted to the console.

Timed sweeps (_print_timed), time series (_print_timeseries), steps runs (_print_steps) and
servers compared (_print_servers); a table too wide for the console is split in two
(_print_table, _print_fitting) rather than shown with cut-off cells. The sentences printed
under the tables come from knoblab.report.text.
"""

from __future__ import annotations

import math
import re
import textwrap
from dataclasses import dataclass

from rich import box
from rich.cells import cell_len
from rich.console import Console
from rich.measure import Measurement
from rich.table import Table
from rich.text import Text

from knoblab.literal import literal
from knoblab.records import (
    Interval,
    Point,
    Results,
    SeriesEvidence,
    ServersCompared,
    SliceConclusion,
    Steady,
    StepRow,
    StepsTable,
)
from knoblab.report.format import (
    GIVES_UP,
    as_count,
    as_number,
    at_text,
    base_label,
    change_text,
    clipped,
    compared_levels,
    count,
    headline,
    is_measured,
    p_text,
    point_label,
    repetitions_text,
    signed,
    slice_heading,
    slices,
    step_costs,
    step_finding_text,
    step_label,
    step_verdict_text,
    value_knobs,
    where,
    workload_kind,
    wrap_name,
)
from knoblab.report.text import (
    conclusion_text,
    durability_lines,
    explanation_lines,
    fastest_words,
    interaction_text,
    no_server_better,
    noise_text,
    rounds_text,
    server_lines,
    slice_gain_text,
    stalls_text,
    step_durability_lines,
    step_notes,
    steps_legend,
    tied_text,
    total_finding_text,
    total_text,
)
from knoblab.units import format_size, num, plural, settings_text
from knoblab.vocabulary import ClassVerdict, PointVerdict, StepVerdict
from knoblab.words import WHY_NOT_BOUNDED, bounded, bounds, confidence_text, interval_text

_FOOTNOTE = "* the server rounded or changed the requested value"
_RICH_STYLE = {PointVerdict.BEST: "green", PointVerdict.EQUIVALENT: "",
               PointVerdict.INCONCLUSIVE: "yellow", PointVerdict.WORSE: "red",
               PointVerdict.FAILED: "magenta", PointVerdict.NOT_RUN: "dim"}
_UNMEASURED = SeriesEvidence.from_json({})  # a point without its series: every figure is "—"


# ----------------------------------------------------------------------------- terminal


def _text(text: str, style: str = "") -> Text:
    """A line or cell for the terminal: the values, names and messages in it may come from the
    user or the server, and are shown literally on one line (knoblab.literal)."""
    return Text(literal(text), style=style)



def print_report(results: Results, console: Console) -> None:
    """Title, one table row per point, the conclusion, the counters that explain it, and a
    footnote on changed values.

    Sliced results list each slice's points together, a blank line between slices. When the
    table does not fit the console, the same rows are shown as two tables (level and verdict,
    then the evidence) rather than with cut-off cells. A steps run gets a table per slice of
    the steps applied one on top of the other (_print_steps). Runs on several servers end with
    a table per configuration compared across them.
    """
    if results.steps is not None:
        _print_steps(results, results.steps, console)
    elif results.objective.time_series:
        _print_timeseries(results, console)
    else:
        _print_timed(results, console)
    # any kind may have been run on several servers
    _print_servers(results, console)
    print_movement(movement(results), console)


def print_movement(moves: Grid | None, console: Console) -> None:
    """The table of how the best value moves (`movement`, `runs_movement`), when there is
    one."""
    if moves is None:
        return
    console.print()
    console.print(_text(moves.title, style="bold"))

    def build(wrapped: bool) -> Table:
        # words in every cell, left-aligned; when it must wrap, the first column (a step, a
        # place: the row's name) a little wider than the others
        table = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, padding=(0, 1),
                      collapse_padding=True, header_style="bold", expand=wrapped)
        for i, header in enumerate(moves.headers):
            table.add_column(header, overflow="fold",
                             ratio=(5 if i == 0 else 4) if wrapped else None)
        for cells in moves.rows:
            table.add_row(*cells)
        return table

    table = build(wrapped=False)
    console.print(table if _fits(console, table) else build(wrapped=True))


def _print_title(results: Results, title: str, console: Console) -> None:
    console.print(_text(title, style="bold"))
    tied = tied_text(results)
    if tied:
        console.print(_text(tied, style="dim"))


def _is_size_knob(results: Results, knob: str) -> bool:
    """Show a knob's values as K/M/G sizes? (so max_connections=1024 does not become "1K")."""
    if "size" in knob or "buffer" in knob:
        return True
    return any(p.settings.get(knob, "").strip()[-1:].isalpha() for p in results.points)


def _applied(results: Results, point: Point, knob: str,
             requested_as: str | None = None) -> tuple[str, bool]:
    """(compact effective value, whether it differs from the requested one).

    `requested_as`: the knob whose requested value `knob` was given (a tied follower's leader).
    """
    effective = point.effective.get(knob)
    if effective is None:
        return "—", False
    requested = point.settings.get(requested_as or knob)
    eff_n, req_n = as_number(effective), as_number(requested)
    text = effective
    if eff_n is not None and eff_n.is_integer() and _is_size_knob(results, knob):
        text = format_size(int(eff_n))
    if eff_n is not None and req_n is not None:
        changed = eff_n != req_n
    else:
        changed = effective.strip().lower() != str(requested).strip().lower()
    return text + ("*" if changed else ""), changed


def _applied_cell(results: Results, point: Point, knobs: list[str]) -> tuple[str, bool]:
    """The applied values of `knobs`, plus a tied follower's when the server gave it another
    value than its leader's ("16M, max_heap_table_size=32M*"); whether any was changed."""
    applied = [_applied(results, point, k) for k in knobs]
    texts = [text for text, _ in applied]
    changed = any(c for _, c in applied)
    for follower, leader in results.tied.items():
        if leader not in knobs:
            continue
        text, follower_changed = _applied(results, point, follower, requested_as=leader)
        if text != "—" and text.rstrip("*") != applied[knobs.index(leader)][0].rstrip("*"):
            texts.append(f"{follower}={text}")
            changed |= follower_changed
    return ", ".join(texts), changed


def _row_start(results: Results, p: Point, values: list[str],
               sliced: list[str]) -> tuple[list[Text], str, str, bool]:
    """What every table row begins with: the point's values, slice, applied values and n."""
    cells = [_text(p.settings.get(k, "—")) for k in values]
    if p.is_default:
        cells[-1].append(" (default)", style="dim")
    cells += [_text(p.settings.get(k, "—")) for k in sliced]
    applied, changed = _applied_cell(results, p, values)
    n = f"{p.n} ({p.failed} failed)" if p.failed else str(p.n)
    return cells, applied, n, changed


def _figure(x: float | None, alive: bool) -> Text:
    return _text(num(x) if alive else "—")


def _interval_cell(ci95: Interval | None, alive: bool) -> Text:
    return _text(_interval_text(ci95) if alive and ci95 is not None else "—")


def _interval_text(ci95: Interval) -> str:
    """"0.603–0.624"; "no spread" for the interval of a single measurement (or of identical
    ones), which has no width and bounds nothing."""
    low, high = ci95
    return f"{num(low)}–{num(high)}" if low < high else "no spread"


def _versus_best(p: Point) -> Text:
    ratio = p.ratio_to_best
    leader = p.p_value is None  # the point the others are compared with
    return _text("—" if ratio is None or leader else f"{(ratio - 1) * 100:+.1f}%")


def _verdict_cell(results: Results, p: Point) -> Text:
    """A point's verdict, as result.json has it: the leader is "best" only when the run
    recommends it, else "fastest measured" (results._as_recommended)."""
    return _text(p.verdict, style=_RICH_STYLE.get(p.verdict, ""))


def _p_cell(p_value: float | None) -> Text:
    return _text("—" if p_value is None else p_text(p_value))


def _title(results: Results) -> str:
    data, points, ran = results.dataset, results.points, headline(results)
    said = [*ran.how, repetitions_text(results) if results.workload.get("repetitions") else ""]
    said_text = f" ({', '.join(s for s in said if s)})" if any(said) else ""
    counts = sorted({c for p in points if "rows" in results.slices
                     and (c := as_count(p.settings.get("rows"))) is not None})
    if data.get("rows") is not None:
        rows = f"{data['rows']:,} rows"
    elif counts:  # one dataset per size: the sizes are in the table
        rows = "–".join(dict.fromkeys((count(counts[0]), count(counts[-1])))) + " rows"
    else:
        rows = data.get("kind", "")
    size = f", {data['bytes'] / 1e6:.1f} MB" if data.get("bytes") else ""
    if "engine" in results.slices:
        engine = " " + "/".join(dict.fromkeys(str(p.settings.get("engine")) for p in points))
    else:
        engine = f" {data['engine']}" if data.get("engine") else ""
    return (
        f"{results.name} — {results.server_version or '?'} · {clipped(ran.what, 70)}{said_text} · "
        f"{rows}{size}{engine} · {results.regime or '?'}"
    )


_TIMED_HEADERS = ["applied", "n", "median", "95% CI", "vs best", "p (Holm)", "verdict",
                  "read MB", "iowait", "regime"]


def _timed_rows(results: Results) -> tuple[list[str], list[list[Text]], set[int], bool]:
    """(headers, rows of cells, indexes of rows ending a slice, any value changed).

    Columns: the compared knobs, the slice knobs (rows, engine … when sliced), then
    _TIMED_HEADERS. "read MB" is what the server read from disk per run, "iowait" the share of
    the run's CPU time spent waiting for the disk: the evidence behind the regime.
    """
    values = value_knobs(results)
    sliced = [k for k in results.slices if k not in values]
    headers = values + sliced + _TIMED_HEADERS
    rows: list[list[Text]] = []
    ends: set[int] = set()
    any_changed = False
    for _, points in slices(results):
        for p in points:
            cells, applied, n, changed = _row_start(results, p, values, sliced)
            any_changed |= changed
            figures = p.evidence
            alive = p.verdict != PointVerdict.FAILED and figures.median is not None
            read_mb = p.timed.read_mb if p.timed and p.n else None
            iowait = p.timed.iowait_share if p.timed and p.n else None
            cells += [
                _text(applied),
                _text(n),
                _figure(figures.median, alive),
                _interval_cell(figures.ci95, alive),
                _versus_best(p),
                _p_cell(p.p_value),
                _verdict_cell(results, p),
                _text("—" if read_mb is None else f"{read_mb:,.1f}"),
                _text("—" if iowait is None else f"{iowait * 100:.0f}%"),
                _text(figures.regime or "—"),
            ]
            rows.append(cells)
        ends.add(len(rows) - 1)
    ends.discard(len(rows) - 1)
    return headers, rows, ends, any_changed


def _print_timed(results: Results, console: Console) -> None:
    _print_title(results, _title(results), console)
    headers, rows, ends, any_changed = _timed_rows(results)
    labels = len(headers) - len(_TIMED_HEADERS)
    # applied, median … verdict; then n, read MB, iowait, regime
    _print_table(console, headers, rows, ends, labels, len(value_knobs(results)),
                 [(0, 2, 3, 4, 5, 6), (1, 7, 8, 9)])
    _print_notes(results, console)
    console.print(_text(conclusion_text(results)))
    for line in durability_lines(results):
        console.print(_text(line, style="bold yellow"))
    for line in explanation_lines(results):
        console.print(_text(line))
    print_classes(results, console)
    noise = noise_text(results)
    if noise:
        console.print(_text(noise, style="dim"))
    _print_rounds(results, console)
    if any_changed:
        console.print(_text(_FOOTNOTE, style="dim"))


def table_notes(results: Results) -> list[tuple[str, bool]]:
    """(line, is a warning) under a sweep's table, for what its cells cannot say: the workload
    kind says them of its measured points' figures."""
    points = [(point_label(results, p), p.evidence) for p in results.points if p.n]
    return workload_kind(results).notes(points)


def _print_notes(results: Results, console: Console) -> None:
    for line, warning in table_notes(results):
        console.print(_text(line, style="yellow" if warning else "dim"))


def _print_rounds(results: Results, console: Console) -> None:
    rounds = rounds_text(results)
    if rounds:
        console.print(_text(rounds, style="dim"))


def _timeseries_title(results: Results) -> str:
    steady, ran = results.steady or Steady(), headline(results)
    parts = [ran.what, *ran.how, *ran.more,
             f"{ran.each or '? s'} × {repetitions_text(results, 'run')}"]
    state = ("warm-up detected" if steady.warmup is None
             else f"{steady.warmup} s dropped")
    if steady.window:
        state += f", last {steady.window} s"
    return (f"{results.name} — {results.server_version or '?'} · {', '.join(parts)} · "
            f"steady state: {state}")


def _timeseries_rows(results: Results) -> tuple[list[str], list[list[Text]], set[int], bool]:
    """(headers, rows of cells, indexes of rows ending a slice, any value changed)."""
    values = value_knobs(results)
    sliced = [k for k in results.slices if k in results.knobs]
    metric = results.objective.metric
    headers = [wrap_name(k, 9) for k in values + sliced] + [
        "applied", "n", f"mean\n{metric}", "95% CI", "median", "stdev", "CV", "p95\nms",
        "p99\nms", "stalls\n(s)", "longest\n(s)", "errors", "vs\nbest", "p\n(Holm)", "verdict"]
    rows: list[list[Text]] = []
    ends: set[int] = set()
    any_changed = False
    for _, points in slices(results):
        for p in points:
            cells, applied, n, changed = _row_start(results, p, values, sliced)
            any_changed |= changed
            s = p.time_series or _UNMEASURED
            alive = p.verdict != PointVerdict.FAILED and s.mean is not None
            errors = "—" if s.sql_errors is None else f"{s.sql_errors:,}"
            if s.reconnects:
                errors += f" +{s.reconnects} reconn."
            cells += [
                _text(applied),
                _text(n),
                _figure(s.mean, alive),
                _interval_cell(s.ci95, alive),
                _figure(s.median, alive),
                _figure(s.stdev, alive),
                _text(f"{s.cv * 100:.1f}%" if alive and s.cv is not None and math.isfinite(s.cv)
                     else "—"),
                _figure(s.latency_p95_ms, alive),
                _figure(s.latency_p99_ms, alive),
                _text("—" if not alive or s.stall_seconds is None else str(s.stall_seconds),
                     style="red" if alive and s.stall_seconds else ""),
                _text("—" if not alive or s.longest_stall is None else str(s.longest_stall)),
                _text(errors, style="yellow" if s.sql_errors or s.reconnects else ""),
                _versus_best(p),
                _p_cell(p.p_value),
                _verdict_cell(results, p),
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

    wrapped = [wrap_name(h, 10) if i < labels and "\n" not in h else h
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


def _print_timeseries(results: Results, console: Console) -> None:
    """The time-series table: steady-state level, stability, stalls, errors, verdict.

    When the 17 columns do not fit the console, the same rows are shown as two tables (level
    and verdict, then stability) rather than with cut-off cells.
    """
    _print_title(results, _timeseries_title(results), console)
    headers, rows, ends, any_changed = _timeseries_rows(results)
    # level and verdict, then the shape of the distribution and the stalls
    labels = len(headers) - 15
    _print_table(console, headers, rows, ends, labels, labels,
                 [(0, 1, 2, 3, 12, 13, 14), (4, 5, 6, 7, 8, 9, 10, 11)])
    _print_notes(results, console)
    console.print(_text(conclusion_text(results)))
    for line in durability_lines(results):
        console.print(_text(line, style="bold yellow"))
    for line in explanation_lines(results):
        console.print(_text(line))
    stalls, noise = stalls_text(results), noise_text(results)
    if stalls:
        console.print(_text(stalls))
    if noise:
        console.print(_text(noise, style="dim"))
    _print_rounds(results, console)
    if any_changed:
        console.print(_text(_FOOTNOTE, style="dim"))


# ----------------------------------------------------------------------------- steps


def _steps_title(results: Results, tables: list[StepsTable]) -> str:
    """"name — version · what was run · settings applied one by one from the defaults"."""
    labelled = [s.label for s in results.servers if s.label]
    if len(labelled) > 1:
        server = "servers " + ", ".join(labelled)
    else:
        server = results.server_version or "?"
    ran = headline(results)
    if results.objective.time_series:
        what = ", ".join([ran.what, *ran.how, *([f"{ran.each} × {repetitions_text(results, 'run')}"]
                                                if ran.each else [])])
    else:
        what = clipped(ran.what, 70)
        extra = [*ran.how,
                 repetitions_text(results) if results.workload.get("repetitions") else ""]
        if any(extra):
            what += f" ({', '.join(e for e in extra if e)})"
        rows = results.dataset.get("rows")
        if rows is not None:
            what += f" · {rows:,} rows"
    base = base_label(tables[0]) if tables else "base"
    return (f"{results.name} — {server} · {what} · settings applied one by one from "
            f"the {base}")


def _centre_name(results: Results) -> str:
    """"median s" for timed runs, "mean tps" for throughput."""
    return f"{results.objective.centre} {results.objective.unit}"


def _centre_cell(centre: float | None, ci95: Interval | None) -> str:
    """A centre with its interval, e.g. "1.85 [0.975–2.01]"."""
    return num(centre) + (f" [{_interval_text(ci95)}]" if ci95 is not None else "")



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


def _print_step_table(results: Results, table: StepsTable, console: Console) -> None:
    """The article's table: each step, its level, its change against the step before and the
    base, and what to do with it. Narrow consoles get two tables (the steps with their level
    and verdict, then the comparisons) rather than cut-off cells."""
    columns, cells, every, halves = _step_cells(results, table)
    _print_fitting(console, columns, cells,
                   [([every], False), ([every], True), (halves, False), (halves, True)])


def _step_cells(results: Results, table: StepsTable) -> tuple[dict[str, dict], list[dict],
                                                              list[str], list[list[str]]]:
    """(columns, a row of cells per step, the keys of the full table, the keys of its two
    halves for narrow consoles)."""
    rows = table.rows
    base = base_label(table)
    ns = {r.n for r in rows if is_measured(r)}
    # several changes in one step: one per line, so that no knob name is ever broken
    labels = [re.sub(r",\s+", ",\n  ", literal(step_label(r))) for r in rows]
    columns: dict[str, dict] = {
        "step": {"header": "step", "justify": "right"},
        "setting": {"header": "setting added"},
        "centre": {"header": f"{_centre_name(results)} [95% CI]", "justify": "right"},
        "n": {"header": "n", "justify": "right"},
        "previous": {"header": "vs previous", "justify": "right"},
        "base": {"header": f"vs {base}", "justify": "right"},
        "alone": {"header": f"alone vs {base}", "justify": "right"},
        "p": {"header": "p (Holm)", "justify": "right"},
        "verdict": {"header": "verdict", "wrap": True, "min_width": 12},
    }
    cells = []
    for row, label in zip(rows, labels, strict=True):
        alive = is_measured(row)
        centre = _centre_cell(row.center, row.ci95) if alive else "—"
        previous = row.vs_previous if alive else None
        text, style = step_verdict_text(results, row)
        verdict = _text(text, style=style)
        if step_costs(row) and row.step:
            verdict.append(f" — {GIVES_UP}", style="bold yellow")
        change_style = ""
        if row.vs_previous and row.vs_previous.significant and \
                row.verdict in (StepVerdict.GAIN, StepVerdict.LOSS):
            change_style = "green" if row.verdict == StepVerdict.GAIN else "red"
        cells.append({
            "step": _text(str(row.step)),
            "setting": Text(label, style="dim" if row.step == 0 else ""),
            "centre": _split(centre),
            "n": _text(str(row.n)),
            "previous": tuple(Text(t.plain, style=change_style)
                              for t in _split(change_text(previous))),
            "base": _split(change_text(row.vs_base if alive else None)),
            "alone": _split(change_text(row.alone.vs_base if row.alone else None)),
            "p": _p_cell(previous.p_value if previous else None),
            "verdict": verdict,
        })
    keys = ["step", "setting", "centre"] + (["n"] if len(ns) > 1 else [])
    compare = ["previous", "base"] + (["alone"] if any(r.alone for r in rows) else [])
    every = keys + compare + ["p", "verdict"]
    halves = [keys + ["verdict"], ["step", *compare, "p"]]
    return columns, cells, every, halves


def _print_steps(results: Results, tables: list[StepsTable], console: Console) -> None:
    """Title, per slice the steps table, durability, total and interaction; the conclusion."""
    _print_title(results, _steps_title(results, tables), console)
    ns = sorted({r.n for table in tables for r in table.rows if is_measured(r)})
    if ns:
        console.print(_text(steps_legend(results, tables, ns), style="dim"))
    for i, table in enumerate(tables):
        if i or table.slice:
            console.print()
        if table.slice:
            console.print(_text(slice_heading(results, table), style="bold"))
        _print_step_table(results, table, console)
        for line in step_notes(results, table):
            console.print(_text(line))
        for line in step_durability_lines(results, table):
            console.print(_text(line, style="bold yellow"))
        for line in (total_text(results, table), interaction_text(results, table)):
            if line:
                console.print(_text(line))
    console.print()
    console.print(_text(conclusion_text(results)))
    for line in explanation_lines(results):
        console.print(_text(line))
    noise = noise_text(results)
    if noise:
        console.print(_text(noise, style="dim"))
    _print_rounds(results, console)


def _print_servers(results: Results, console: Console) -> None:
    """A table per configuration measured on every server, then what each server lacked."""
    for entry in results.servers_compared or []:
        console.print()
        console.print(_text(_servers_title(entry), style="bold"))
        columns, cells, full, judged = _server_cells(results, entry)
        # too narrow: who the servers are, then how they did; else only how they did
        _print_fitting(console, columns, cells,
                       [([full + judged], False), ([full, ["server", *judged]], False),
                        ([["server", *judged]], False), ([["server", *judged]], True)])
        if not entry.significant:
            console.print(_text(no_server_better(results)))
    lines = server_lines(results)
    if lines and not results.servers_compared:
        console.print()
    for line in lines:
        console.print(_text(line, style="yellow"))


def _servers_title(entry: ServersCompared) -> str:
    at = where({k: v for k, v in entry.slice.items() if k != "binary"})
    return f"servers compared at {at_text(entry.at)}" + (f" · {at}" if at else "")


def _server_cells(results: Results, entry: ServersCompared) -> tuple[dict[str, dict],
                                                                      list[dict], list[str],
                                                                      list[str]]:
    """(columns, a row of cells per server, the keys saying who the servers are, the keys
    saying how they did)."""
    servers = [results.server(row.binary) for row in entry.rows]
    columns: dict[str, dict] = {
        "server": {"header": "server"},
        "version": {"header": "version"},
        "compiler": {"header": "compiler", "wrap": True},
        "build": {"header": "build id"},
        "allocator": {"header": "allocator"},
        "centre": {"header": f"{_centre_name(results)} [95% CI]", "justify": "right"},
        "n": {"header": "n", "justify": "right"},
        "best": {"header": "vs best", "justify": "right"},
        "p": {"header": "p (Holm)", "justify": "right"},
        "verdict": {"header": "verdict"},
    }
    cells = []
    for row, server in zip(entry.rows, servers, strict=True):
        alive = row.verdict != PointVerdict.FAILED and row.center is not None
        ratio = row.ratio_to_best
        cells.append({
            "server": _text(row.binary),
            "version": _text(server.version or "—" if server else "—"),
            "compiler": _text(server.compiler or "—" if server else "—"),
            # a build id's first 12 hex digits tell builds apart, as git's short ids do
            "build": _text((server.compile.get("build_id") or "—")[:12] if server else "—"),
            "allocator": _text(server.allocator or "built in" if server else "—"),
            "centre": _split(_centre_cell(row.center, row.ci95) if alive else "—"),
            "n": _text(str(row.n)),
            "best": _text("—" if ratio is None or row.p_value is None or not alive
                         else f"{signed((ratio - 1) * 100, 1)}%"),
            "p": _p_cell(row.p_value),
            "verdict": _text(row.verdict, style=_RICH_STYLE.get(row.verdict, "")),
        })
    compiled = any(server and server.compiler for server in servers)
    # The build id when it tells the servers apart; the allocator when one is preloaded.
    builds = {server.compile.get("build_id") for server in servers if server}
    preloaded = any(server and server.allocator for server in servers)
    full = ["server", "version"] + (["compiler"] if compiled else []) + \
        (["build"] if len(builds - {None}) > 1 else []) + (["allocator"] if preloaded else [])
    judged = ["centre", "n", "best", "p", "verdict"]
    return columns, cells, full, judged


# ----------------------------------------------------------------------------- as data


@dataclass(frozen=True)
class Grid:
    """A report table as data, for the documents (HTML, Markdown): the same rows as the
    terminal's, whole (a page scrolls; it need not be split in two)."""

    title: str
    headers: list[str]
    rows: list[list[Text]]
    ends: set[int]  # rows that end a slice
    numeric: list[bool]  # right-aligned columns


def report_tables(results: Results) -> list[Grid]:
    """Every table of the run's report, in the terminal's order."""
    found: list[Grid] = []
    if results.steps is not None:
        for table in results.steps:
            columns, cells, every, _ = _step_cells(results, table)
            title = slice_heading(results, table) if table.slice else _steps_title(
                results, results.steps)
            found.append(_keyed(title, columns, cells, every))
    else:
        if results.objective.time_series:
            title = _timeseries_title(results)
            headers, rows, ends, _ = _timeseries_rows(results)
        else:
            title = _title(results)
            headers, rows, ends, _ = _timed_rows(results)
        labels = len(value_knobs(results)) + len([k for k in results.slices
                                                   if k not in value_knobs(results)])
        flat = [h.replace("\n", " ") for h in headers]
        found.append(Grid(title, flat, rows, ends,
                          [i >= labels and h not in ("applied", "verdict", "regime")
                           for i, h in enumerate(flat)]))
    for entry in results.servers_compared or []:
        columns, cells, full, judged = _server_cells(results, entry)
        found.append(_keyed(_servers_title(entry), columns, cells, full + judged))
    moves = movement(results)
    if moves is not None:
        found.append(moves)
    classes = class_grid(results)
    if classes is not None:
        found.append(classes)
    return found


@dataclass(frozen=True)
class Place:
    """Where a best value was looked for: a slice of a run (a server, a machine shape, a file
    system, a data size), or one run among several compared (two machines)."""

    label: str
    results: Results
    conclusion: SliceConclusion

    @property
    def points(self) -> list[Point]:
        return [p for p in self.results.points
                if all(p.settings.get(k) == v for k, v in self.conclusion.slice.items())]

    def best(self) -> dict[str, str]:
        """Its best values, or where nothing was shown best, its fastest measured."""
        best = self.conclusion.best or self.conclusion.fastest or {}
        return {k: best[k] for k in value_knobs(self.results) if k in best}


def slice_places(results: Results) -> list[Place]:
    """A run's slices, each a place of its own (none for a steps run: its steps have
    their own table per slice)."""
    if results.steps is not None or not set(results.knobs) - set(results.slices):
        return []  # a steps run, or only the slices swept: no value to move
    return [Place(where(c.slice), results, c) for c in results.conclusion.by_slice or []]


def run_places(runs: list[Results]) -> list[Place]:
    """Runs compared (knoblab compare), each a place, or each of its slices one."""
    found = []
    for results in runs:
        if results.conclusion.by_slice:
            found += [Place(f"{results.run_id} {p.label}", results, p.conclusion)
                      for p in slice_places(results)]
        else:
            found.append(Place(f"run {results.run_id}", results,
                               results.conclusion.of_slice({})))
    return found


def movement(results: Results) -> Grid | None:
    """How the best value moves between a run's slices: its values' best, or in a steps run
    what each step did."""
    if results.steps is not None:
        return steps_movement_grid([(where(t.slice), results, t) for t in results.steps])
    return movement_grid(slice_places(results))


def runs_movement(runs: list[Results]) -> Grid | None:
    """How the best value moves between runs compared (each run's slices each a place): for
    steps runs, what each step did in each."""
    if all(r.steps is not None for r in runs):
        return steps_movement_grid(
            [(f"{r.run_id} {where(t.slice)}" if t.slice else f"run {r.run_id}", r, t)
             for r in runs for t in r.steps or []])
    return movement_grid(run_places(runs))


def steps_movement_grid(places: list[tuple[str, Results, StepsTable]]) -> Grid | None:
    """Per step, what it did against the step before it in each place (each its own steps
    table, and its own Holm family), then all the steps against the base, and the settings
    each place keeps: which steps help on one platform and not on another. None for fewer
    than two places."""
    if len(places) < 2:
        return None
    first = places[0][2]
    steps = sorted({r.step for _, _, t in places for r in t.rows})
    label = {r.step: step_label(r) for _, _, t in reversed(places) for r in t.rows}
    rows = []
    for number in steps:
        cells = [_text(f"{number}: {label[number]}" if number else label[number])]
        for _, results, table in places:
            row = next((r for r in table.rows if r.step == number), None)
            cells.append(_step_effect(results, row))
        rows.append(cells)
    total = [_text(f"all steps against the {base_label(first)}")]
    kept = [_text("kept here (measurably helped)")]
    for _, results, table in places:
        total.append(_text(change_text(table.total, 0) + f", {total_finding_text(results, table)}"
                           if table.total is not None else "—"))
        settings = table.helped()
        kept.append(_text(settings_text(settings) if settings else "none",
                          style="bold" if settings else "dim"))
    rows += [total, kept]
    headers = ["step", *(label_ for label_, _, _ in places)]
    levels = {label_: "95%" if t.confidence is None else confidence_text(t.confidence)
              for label_, _, t in places}
    level = next(iter(levels.values())) if len(set(levels.values())) == 1 else \
        ", ".join(f"{lvl} in {label_}" for label_, lvl in levels.items())
    title = ("How the steps' effects move between them: each step against the one before it, "
             f"as its own table judged it (the change of the {compared_levels(places[0][1])}, "
             f"with its interval at its table's level, which holds for that whole table: "
             f"{level}), all the steps together, and what each keeps")
    return Grid(title, headers, rows, {len(steps) - 1}, [False] * len(headers))


def _step_effect(results: Results, row: StepRow | None) -> Text:
    """A step's cell: at the base its level, else its change against the step before and
    what that showed."""
    if row is None:
        return _text("not in this run", style="dim")
    if not is_measured(row):
        return _text(step_verdict_text(results, row)[0], style="dim")
    if row.step == 0:
        return _text(f"{num(row.center)} {results.objective.unit}")
    style = {StepVerdict.GAIN: "green", StepVerdict.LOSS: "red"}.get(row.verdict, "")
    return _text(f"{change_text(row.vs_previous, 0)} {step_finding_text(results, row)}",
                 style=style)


def movement_grid(places: list[Place]) -> Grid | None:
    """How the best value moves between places (slices of a run, or runs compared): per
    place, its best configuration, that one's gain over the current configuration there, and
    how each place's best fares in it — the answer to "does the value best on my test box
    hold on production's platform?". None for fewer than two places, or when nothing but
    the slices was swept."""
    places = [p for p in places if p.best()]
    if len(places) < 2:
        return None

    def values_text(values: dict[str, str]) -> str:
        return ", ".join(values.values()) if len(values) == 1 else settings_text(values)

    # The leader of each place is the fastest measured; "best" only where its run recommends
    # it (PointVerdict.BEST), as its own table says.
    fastest = fastest_words(places[0].results)
    noun = fastest.removesuffix(" measured")
    headers = ["where", f"{fastest} here", "against the current configuration",
               *(f"{p.label}'s {noun} ({values_text(p.best())})" for p in places)]
    rows = []
    for place in places:
        here = place.best()
        cells = [_text(place.label),
                 _text(values_text(here) + (", best" if place.conclusion.best else "")),
                 _text(slice_gain_text(place.results, place.conclusion))]
        for other in places:
            theirs = other.best()
            if other is place:
                cells.append(_text("—", style="dim"))
                continue
            point = next((p for p in place.points
                          if all(p.settings.get(k) == v for k, v in theirs.items())), None)
            if theirs == here and point is not None and not point.verdict.leads:
                cells.append(_text(f"{fastest} here too", style="green"))
                continue
            cells.append(_elsewhere(place.results, point))
        rows.append(cells)
    title = (f"How the {noun.replace(' ', '-')} value moves between them: the {noun} of each "
             f"(best where its run recommends it), and how each one's {noun} did in the others "
             f"(shown worse: by the comparison with the {noun} there, Holm-adjusted)")
    return Grid(title, headers, rows, set(), [False] * len(headers))


def _elsewhere(results: Results, point: Point | None) -> Text:
    """How another place's best did here."""
    if point is None or point.verdict in (PointVerdict.FAILED, PointVerdict.NOT_RUN):
        return _text("not measured here", style="dim")
    if point.verdict == PointVerdict.WORSE:
        ratio = point.ratio_to_best or 1.0
        worse = ratio - 1 if results.objective.direction == "minimize" else 1 - ratio
        return _text(f"shown worse here, by {worse:.0%}", style="red")
    if point.verdict == PointVerdict.EQUIVALENT:
        return _text("equivalent here", style="green")
    if point.verdict.leads:
        return _text(f"{point.verdict} here too", style="green")
    return _text("not shown worse here")


_CLASS_STYLE = {ClassVerdict.FASTER: "green", ClassVerdict.SLOWER: "red",
                ClassVerdict.NOT_MEASURED: "dim"}


def class_grid(results: Results) -> Grid | None:
    """A replayed log's statement classes (by fingerprint, never a literal): their share of
    the reference configuration's statement time, and each other configuration's time for
    them against it, with its interval and verdict; "rows differ" where a class returned
    other rows."""
    found = results.statement_classes
    if found is None or not found.rows:
        return None
    reference = _class_label(results, results.points[found.reference])
    others = [c.point for c in found.rows[0].changes]
    # Its statements' times added up over the sessions that ran them side by side: more
    # than the run's wall time when sessions overlap, so said as session-seconds.
    headers = ["statement class", "per run", "share", f"session-s at {reference}",
               f"p95 ms at {reference}",
               *(_class_label(results, results.points[i]) for i in others)]
    rows = []
    for row in found.rows:
        print_ = " ".join(row.fingerprint.split())
        cells = [_text(print_ if len(print_) <= 60 else print_[:57] + "..."),
                 _text(f"{row.count:,}"), _text(f"{row.share:.0%}"), _text(num(row.seconds)),
                 _text("—" if row.p95 is None else num(row.p95 * 1000))]
        for change in row.changes:
            if change.ratio is None or change.ci_low is None or change.ci_high is None:
                said = str(change.verdict)
            else:
                shown = "n.s." if change.verdict == ClassVerdict.NO_DIFFERENCE else change.verdict
                interval = interval_text(f"{change.ci_low:.2f}", f"{change.ci_high:.2f}",
                                         bounds(change.ci_low, change.ci_high), "–")
                said = f"{change.ratio:.2f}× [{interval}] {shown}"
            if change.rows_differ:
                said += ", rows differ"
            cells.append(_text(said, style="bold magenta" if change.rows_differ
                               else _CLASS_STYLE.get(change.verdict, "")))
        rows.append(cells)
    hidden = f"; {found.hidden} more not shown" if found.hidden else ""
    level = confidence_text(1 - results.statistics.alpha)  # knoblab.classes: Bonferroni
    title = (f"Statement classes: time against {reference} (× its "
             f"time, with intervals that hold at {level} for the whole table; n.s. = no "
             f"significant difference){hidden}")
    return Grid(title, headers, rows, set(), [False, True, True, True, True,
                                               *(False for _ in others)])


def _class_label(results: Results, point: Point) -> str:
    """A configuration's name in the classes table: its step's in a steps run (a tune's
    validation: "defaults", "+ innodb_buffer_pool_size=96M"), else its values."""
    if point.step is None:
        return point_label(results, point)
    return f"+ {settings_text(point.step.change)}" if point.step.change else point.step.label


def print_classes(results: Results, console: Console) -> None:
    """The statement-class table (`class_grid`) and its notes, when the run has one."""
    classes = class_grid(results)
    if classes is None:
        return
    console.print(_text(classes.title, style="bold"))
    _print_table(console, classes.headers, classes.rows, set(), 1, 1,
                 [tuple(range(len(classes.headers) - 1))])
    for line in class_notes(results):
        console.print(_text(line))


def class_notes(results: Results) -> list[str]:
    """What the classes table cannot say in its cells."""
    found = results.statement_classes
    if found is None:
        return []
    at_once = headline(results).at_once
    notes = ["session-s: a class's statements' times added up over every session of a run"
             + (f" ({at_once} replayed at once), so the classes together can take up to "
                f"{at_once}× the run's wall time" if at_once > 1 else "")
             + "; per run and session-s are medians over the reference's runs."]
    differ = sorted({_class_label(results, results.points[c.point]) for row in found.rows
                     for c in row.changes if c.rows_differ})
    if differ:
        notes.append(f"Rows differ: some classes returned other rows under {', '.join(differ)} "
                     "than under the reference, in every measurement: the setting changes "
                     "results, which is not a speed-up.")
    if any(c.ci_low is not None and c.ci_high is not None and not bounded(c.ci_low, c.ci_high)
           for row in found.rows for c in row.changes):
        notes.append(f"{WHY_NOT_BOUNDED}.")
    if found.unstable:
        notes.append(f"{plural(found.unstable, 'class', 'classes')} returned different rows "
                     "from one measurement to the next of the same configuration (concurrent "
                     "writes, RAND(), the clock): their rows are not compared.")
    return notes


def _keyed(title: str, columns: dict[str, dict], cells: list[dict], keys: list[str]) -> Grid:
    """A Grid of the cells of `keys` (one line each: stacked variants are for narrow
    terminals)."""
    rows = [[cell[k][0] if isinstance(cell[k], tuple) else cell[k] for k in keys]
            for cell in cells]
    return Grid(title, [columns[k]["header"] for k in keys], rows, set(),
                [columns[k].get("justify") == "right" for k in keys])
