"""The terminal report: print_report and a table per kind of run, fitted to the console.

Query sweeps (_print_query), time series (_print_timeseries), steps runs (_print_steps) and
servers compared (_print_servers); a table too wide for the console is split in two
(_print_table, _print_fitting) rather than shown with cut-off cells. The sentences printed
under the tables come from knoblab.report.text.
"""

from __future__ import annotations

import math
import re
import textwrap

from rich import box
from rich.cells import cell_len
from rich.console import Console
from rich.measure import Measurement
from rich.table import Table
from rich.text import Text

from knoblab.report.text import (
    _GIVES_UP,
    _RICH_STYLE,
    _STEP_VERDICT,
    _applied_cell,
    _as_count,
    _at_text,
    _base_label,
    _centre_cell,
    _centre_name,
    _change,
    _count,
    _interaction_text,
    _is_steps,
    _is_timeseries,
    _measured,
    _num,
    _p,
    _server_info,
    _signed,
    _slice_heading,
    _slice_knobs,
    _step_costs,
    _step_durability,
    _step_label,
    _step_notes,
    _total_text,
    _value_knobs,
    _where,
    _wrap_name,
    conclusion_text,
    durability_lines,
    explanation_lines,
    noise_text,
    server_lines,
    slices,
    stalls_text,
    tied_text,
)

_FOOTNOTE = "* the server rounded or changed the requested value"


# ----------------------------------------------------------------------------- terminal


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


# ----------------------------------------------------------------------------- steps


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
