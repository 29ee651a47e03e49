"""The report people pass on: one Document built from a run's results (or a search's,
knoblab.report.tuning), which the page and the Markdown render (knoblab.report.exporters), so
they say the same things in the same order: the question, the conclusion, the tables, the
charts, the evidence, the safety notes, the noise, and how to reproduce it. Beside it, what
the other formats are made of: recommended.cnf's text and the measurements' table.
"""

from __future__ import annotations

import base64
import csv
import datetime as dt
import io
import textwrap
import tomllib
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from knoblab import recommend
from knoblab.literal import literal
from knoblab.records import Point, Results, StepRow, StepsTable, TuneResult
from knoblab.report.format import (
    gain_interval_text,
    headline,
    ratio_change_text,
    slices,
    step_label,
    value_knobs,
    where,
    with_facts,
)
from knoblab.report.tables import (
    class_grid,
    class_notes,
    report_tables,
    runs_movement,
    table_notes,
)
from knoblab.report.text import (
    conclusion_text,
    durability_lines,
    explanation_lines,
    interaction_text,
    noise_text,
    recommendation,
    rounds_text,
    server_lines,
    stalls_text,
    step_durability_lines,
    step_notes,
    tied_text,
    total_text,
)
from knoblab.store import Trial
from knoblab.units import format_duration, num, setting_text
from knoblab.vocabulary import Finding, PointVerdict, RunStatus, StepVerdict
from knoblab.words import FINDING_WORDS, WHY_NOT_BOUNDED, bounded, gain_words

if TYPE_CHECKING:
    from knoblab.compare import Comparison

# A cell that begins with a verdict → its colour (a class of the page's style sheet)
_VERDICT_CLASS = {PointVerdict.BEST: "best", PointVerdict.WORSE: "worse",
                  PointVerdict.INCONCLUSIVE: "inconclusive", PointVerdict.FAILED: "failed",
                  PointVerdict.NOT_RUN: "dim", StepVerdict.GAIN: "best", StepVerdict.LOSS: "worse"}


@dataclass(frozen=True)
class Table:
    """A table of the report: its rows as text, each cell with a class for its colour."""

    title: str
    headers: list[str]
    rows: list[list[tuple[str, str]]]  # (text, class)
    ends: set[int]
    numeric: list[bool]
    notes: list[str] = field(default_factory=list)
    # which words its verdict column judges with (knoblab.report.definitions.TERMS): the
    # HTML links each to where the manual defines it
    vocabulary: str = "point"


@dataclass(frozen=True)
class Chart:
    path: Path
    caption: str

    def data_uri(self) -> str:
        return "data:image/png;base64," + base64.b64encode(self.path.read_bytes()).decode()


@dataclass(frozen=True)
class Document:
    title: str
    question: str
    partial: str | None  # why the numbers are not final, or None
    conclusion: str
    recommended: str  # the recommended.cnf text
    tables: list[Table]
    charts: list[Chart]
    evidence: list[str]
    safety: list[str]
    noise: list[str]
    warnings: list[str]
    reproduce: list[tuple[str, str]]  # (what, value)
    spec: str
    command: str


@dataclass(frozen=True)
class Report:
    """What a report folder is written from, each file by its exporter
    (knoblab.report.exporters): the document the page and the Markdown show, and the typed
    records behind it: a run's results and measurements, or a search's result."""

    document: Document
    results: Results | None = None  # a run's
    trials: list[Trial] = field(default_factory=list)  # the run's measurements, as taken
    search: TuneResult | None = None  # a search's (knoblab tune)


def table(title: str, headers: list[str], rows: list[list[str]],
          numeric: list[bool], vocabulary: str = "point") -> Table:
    """A table of plain cells (a verdict word gets its colour)."""
    return Table(title, headers, [[(cell, _class_of(cell)) for cell in row] for row in rows],
                 set(), numeric, vocabulary=vocabulary)


# ----------------------------------------------------------------------------- the document


def build_document(results: Results, charts: list[Path]) -> Document:
    partial = None
    if results.status != RunStatus.DONE:
        partial = (f"Partial: this run is {results.status}; the report shows what was "
                   "measured so far, and no conclusion is final until it is finished "
                   f"(knoblab resume {results.run_id}).")
    safety = durability_lines(results)
    for table in results.steps or []:
        safety += step_durability_lines(results, table)
    return Document(
        title=f"{results.name} — {results.server_version or 'server'}",
        question=" ".join(part for part in (question_text(results), _sentence(tied_text(results)))
                          if part),
        partial=partial,
        conclusion=conclusion_text(results),
        recommended=recommended_cnf(results),
        tables=_tables(results),
        charts=[Chart(path, _caption(path)) for path in charts],
        evidence=[line for line in (*explanation_lines(results), stalls_text(results)) if line],
        safety=safety,
        noise=[line for line in (noise_text(results), rounds_text(results)) if line],
        warnings=[*server_lines(results), *results.warnings],
        reproduce=_reproduce(results),
        spec=results.spec,
        command=f"knoblab run SPEC   # the spec below; this run: knoblab report "
                f"{results.run_id}",
    )


def compare_document(comparisons: list[Comparison], agreements: list[str]) -> Document:
    """The report of knoblab compare: each run against the first, configuration by
    configuration, then how the best value moves between them."""
    from knoblab.compare import change_header

    first = comparisons[0].first
    runs = [first, *(c.other for c in comparisons)]
    tables = []
    for c in comparisons:
        a, b = c.first.run_id, c.other.run_id
        rows = [[r.label, num(r.first), num(r.other),
                 "—" if r.change is None else
                 ratio_change_text(r.change.ratio, r.change.ci_low, r.change.ci_high),
                 "—" if r.p_adjusted is None else f"{r.p_adjusted:.2g}", str(r.verdict)]
                for r in c.rows]
        unbounded = any(r.change is not None and not bounded(r.change.ci_low, r.change.ci_high)
                        for r in c.rows)
        tables.append(replace(table(f"run {b} against run {a} ({c.first.objective.centre} "
                                    f"{c.first.objective.unit})",
                                    ["configuration", f"in {a}", f"in {b}", change_header(c),
                                     "p (Holm)", "verdict"], rows,
                                    [False, True, True, True, True, False], "comparison"),
                              notes=[f"{WHY_NOT_BOUNDED}."] if unbounded else []))
    moves = runs_movement(runs)
    if moves is not None:
        tables.append(Table(moves.title, moves.headers,
                            [[(cell.plain, _class(cell)) for cell in row] for row in moves.rows],
                            moves.ends, moves.numeric))
    ids = " ".join(r.run_id for r in runs)
    return Document(
        title=f"{first.name}: {len(runs)} runs compared",
        question=("Does what one run found hold in the others: the same configurations, "
                  "measured on other machines, builds, dates or base configurations?"),
        partial=None, conclusion=" ".join(agreements), recommended="", tables=tables,
        charts=[], evidence=[], safety=[], noise=[],
        warnings=[line for c in comparisons for line in c.incomplete],
        reproduce=[*((f"run {r.run_id}", f"{r.name} · {r.server_version or 'server'}")
                     for r in runs),
                   *(("differs", line) for c in comparisons for line in c.machine)],
        spec="\n".join(line for c in comparisons for line in c.spec),
        command=f"knoblab compare {ids} --out DIR")


def question_text(results: Results) -> str:
    """What the run asks, in words: "Which read_buffer_size makes SELECT … fastest?"."""
    described = _spec_value(results.spec, "description")
    what = headline(results).subject
    if results.objective.time_series:
        highest = "lowest" if results.objective.direction == "minimize" else "highest"
        aim = f"gives the {highest} {results.objective.metric}"
    else:
        aim = "is fastest"
    knobs = value_knobs(results)
    if results.steps is not None:
        question = (f"What does each of these settings add, applied one on top of the other, "
                    f"to {what}?")
    elif knobs == ["binary"]:
        question = f"Which server build is best for {what}?"
    else:
        which = "value of" if len(knobs) == 1 else "values of"
        question = f"Which {which} {', '.join(knobs)} {aim} for {what}?"
    sliced = [k for k in results.slices if k not in knobs]
    if sliced:
        question += f" Answered separately for each value of {' and '.join(sliced)}."
    if results.machine.get("shape"):
        question += f" On sandboxes given {results.machine['shape']}."
    return f"{described.rstrip('.')}. {question}" if described else question


def _sentence(text: str) -> str:
    """A clause as a sentence of its own (setting names keep their case: no capital)."""
    return f"{text.rstrip('.')}." if text else ""


def _spec_value(spec: str, key: str) -> str:
    try:
        return str(tomllib.loads(spec).get(key) or "")
    except tomllib.TOMLDecodeError:
        return ""


def _tables(results: Results) -> list[Table]:
    grids = report_tables(results)
    notes: list[list[str]] = [[] for _ in grids]
    for i, table in enumerate(results.steps or []):
        notes[i] = [line for line in (*step_notes(results, table), total_text(results, table),
                                      interaction_text(results, table)) if line]
    if results.steps is None and grids:  # the sweep's table first
        notes[0] = [line for line, _ in table_notes(results)]
    if class_grid(results) is not None:  # the last table
        notes[-1] = class_notes(results)
    # the words each table judges with: a step's, else a point's; a replay's classes' last
    vocabulary = ["step" if i < len(results.steps or []) else "point" for i in range(len(grids))]
    if class_grid(results) is not None:
        vocabulary[-1] = "class"
    return [Table(grid.title, grid.headers, [[(cell.plain, _class(cell)) for cell in row]
                                             for row in grid.rows],
                  grid.ends, grid.numeric, found, words)
            for grid, found, words in zip(grids, notes, vocabulary, strict=True)]


def _class(cell: Any) -> str:
    """The colour of a cell: its verdict's, else its terminal style's."""
    found = _class_of(cell.plain)
    if found:
        return found
    style = str(cell.style or "")
    return {"green": "best", "red": "worse", "yellow": "inconclusive", "magenta": "failed",
            "dim": "dim"}.get(style.split()[-1] if style else "", "")


def _class_of(text: str) -> str:
    words = text.strip().lower()
    return next((name for word, name in _VERDICT_CLASS.items() if words.startswith(word)), "")


def _caption(path: Path) -> str:
    return path.stem.replace("-", " ").replace("_", " ")


def _reproduce(results: Results) -> list[tuple[str, str]]:
    rows = [("run", results.run_id), ("knoblab", results.knoblab_version or "not recorded")]
    if results.started_at:
        started = dt.datetime.fromtimestamp(results.started_at).astimezone()
        rows.append(("started", started.strftime("%Y-%m-%d %H:%M %Z")))
        if results.finished_at:
            rows.append(("took", format_duration(results.finished_at - results.started_at)))
    for name in ("cpu", "cores", "caches", "memory", "disk", "kernel", "virtualisation"):
        rows.append((name, results.machine.get(name, "not recorded")))
    if results.machine.get("shape"):  # [machine]: what every sandbox was given
        rows.append(("sandbox shape", results.machine["shape"]))
    for server in results.servers:
        label = f"server {server.label}" if server.label else "server"
        build = server.compile.get("build_id")
        rows.append((label, " · ".join(part for part in (
            server.binary, server.version, server.version_line, server.compiler,
            build and f"build id {build}",
            server.allocator and f"{server.allocator} preloaded ({server.preload})") if part)))
    for name, value in results.base.items():
        rows.append((f"[server.config] {name}", value))
    return rows


# ----------------------------------------------------------------------------- recommended.cnf


def recommended_cnf(results: Results) -> str:
    """A [mysqld] fragment with only the recommended changes, each under a comment giving its
    measured effect; or no setting and a comment saying why."""
    head = ["# " + line for line in textwrap.wrap(
        f"knoblab {results.name}, run {results.run_id}: {question_text(results)}", 96)]
    if results.status != RunStatus.DONE:
        return cnf_text([*head, "# The run is not finished: nothing is recommended yet.",
                         "[mysqld]"])
    lines = _steps_lines(results) if results.steps is not None else _sweep_lines(results)
    if not any(line and not line.startswith("#") for line in lines):
        lines = [*lines, "# Nothing is set here: keep the configuration as it is."]
    return cnf_text([*head, "[mysqld]", *lines])


def cnf_text(lines: list[str]) -> str:
    """An option file of `lines`, each kept on its line: a name, value or comment holding a
    line break must not start a line of its own (a setting the server would read)."""
    return "".join(literal(line) + "\n" for line in lines)


def _sweep_lines(results: Results) -> list[str]:
    """Per slice, the conclusion's recommendation (results.conclusion): a setting only where
    the change is shown to help, under its gain; else no setting and a comment saying why, in
    the words of the conclusion. In a sliced run the settings are set only when every slice
    recommends the same change (else each slice's, commented out: which applies is the
    reader's load)."""
    lines: list[str] = []
    chosen: list[dict[str, str] | None] = []
    for name, points in slices(results):
        values = {k: points[0].settings[k] for k in results.slices} if points else {}
        recommended = results.conclusion.of_slice(values).recommended
        current = next((p for p in points if p.is_default), None)
        prefix = f"{name}: " if name else ""
        said = recommendation(results, points, named=True) or "nothing was measured"
        lines.append(f"# {prefix}{said}.")
        point = next((p for p in points if p.settings == recommended), None)
        if point is None or point is current:
            chosen.append(None)
            continue
        lines += [f"# durability: {k}: {cost}" for k, cost in point.durability.items()]
        chosen.append(dict(_settable(results, point)))
    if chosen and all(c is not None and c == chosen[0] for c in chosen):
        return lines + in_force_lines(results, chosen[0] or {})
    if any(chosen):
        lines.append("# The slices differ, so nothing is set; the change shown to help in "
                     "each:")
        for (name, _), settings in zip(slices(results), chosen, strict=True):
            if settings:
                lines.append(f"# {name}: " + ", ".join(f"{k} = {setting_text(k, v)}"
                                                      for k, v in settings.items()))
    return lines


def in_force_lines(results: Results, changes: dict[str, str]) -> list[str]:
    """The settings to apply for `changes`, as they were in force when measured
    (knoblab.recommend.in_force: the [tie] followers at their leader's value, then
    [server.config]); a setting whose cost the workload cannot see is left out, saying why."""
    lines: list[str] = []
    unseen = {k: recommend.UNSEEN_COST[recommend.name(k)] for k in changes
              if recommend.name(k) in recommend.UNSEEN_COST}
    for k, why in unseen.items():
        lines.append(f"# {k} = {setting_text(k, changes[k])} is not recommended, whatever it "
                     f"measured: {why}; this workload cannot see that cost")
    wanted = {k: v for k, v in changes.items() if k not in unseen}
    if not wanted:
        return lines
    change = recommend.in_force(wanted, results.tied)
    follows = {recommend.name(f): recommend.name(leader) for f, leader in results.tied.items()}
    for k, v in change.items():
        if k in follows:
            lines.append(f"# {k} follows {follows[k]} ([tie]): at its value in every "
                         "measurement")
        lines.append(f"{k} = {setting_text(k, v)}")
    base = {k: v for k, v in recommend.in_force(wanted, results.tied, results.base).items()
            if k not in change}
    if base:
        lines.append("# [server.config]: in force in every measurement, the current "
                     "configuration's too")
        lines += [f"{k} = {setting_text(k, v)}" for k, v in base.items()]
    return lines


def _settable(results: Results, point: Point) -> Iterable[tuple[str, str]]:
    """The settings of a point as a server reads them (slice parameters such as rows or
    threads are not settings)."""
    for name, value in point.config.items():
        if name not in results.slices or name in value_knobs(results):
            yield name, value


def _steps_lines(results: Results) -> list[str]:
    """The changes of the steps shown to help, each under its gain; set only when every slice
    (server, thread count) found the same."""
    lines: list[str] = []
    chosen: list[dict[str, str]] = []
    for table in results.steps or []:
        gains = [row for row in table.rows if row.verdict == StepVerdict.GAIN]
        prefix = f"{where(table.slice)}: " if table.slice else ""
        if not gains:
            lines.append(f"# {prefix}no step was {FINDING_WORDS[Finding.HELPS]}.")
        for row in gains:
            lines.append(f"# {prefix}step {row.step} ({step_label(row)}): "
                         f"{FINDING_WORDS[Finding.HELPS]}, {_step_gain(results, table, row)} "
                         "against the step before")
            lines += [f"# durability: {cost}" for cost in row.durability]
        chosen.append({k: v for row in gains for k, v in row.change.items()})
    if chosen and all(c and c == chosen[0] for c in chosen):
        return lines + in_force_lines(results, chosen[0])
    if any(chosen):
        lines.append("# The slices differ, so nothing is set; the changes shown to help in "
                     "each:")
        for table, settings in zip(results.steps or [], chosen, strict=True):
            if settings:
                lines.append(f"# {where(table.slice)}: " + ", ".join(
                    f"{k} = {setting_text(k, v)}" for k, v in settings.items()))
    return lines


def _step_gain(results: Results, table: StepsTable, row: StepRow) -> str:
    """"time −8.0% (99.5% CI −10.0% to −6.0%, for the whole table)"."""
    compared = row.vs_previous
    if compared is None:
        return "no comparison"
    direction: Literal["minimize", "maximize"] = \
        "minimize" if results.objective.direction == "minimize" else "maximize"
    gain, interval = compared.gain(direction)
    unit = "" if direction == "minimize" else results.objective.unit
    level = "95% CI" if table.confidence is None else \
        f"{table.confidence:.1%}".replace(".0%", "%") + " CI for the whole table"
    return with_facts(gain_words(gain, direction, unit),
                      [f"{level}: {gain_interval_text(interval, direction)}"])


# ----------------------------------------------------------------------------- measurements.csv


def measurements_csv(results: Results, trials: list[Trial]) -> str:
    """Every measurement (`trials`, the run's, in the order they were taken): its run, point
    and settings, its round and server start, its value, and its counters and OS figures as
    columns (status.NAME, os.NAME)."""
    rows: list[dict[str, Any]] = []
    points = results.points
    for trial in trials:
        point = points[trial.point_idx] if trial.point_idx < len(points) else None
        row: dict[str, Any] = {
            "run": results.run_id, "point": trial.point_idx,
            **({f"set.{k}": v for k, v in point.settings.items()} if point else {}),
            "round": trial.repetition, "order": trial.position,
            # the server start it was measured on: shared by a round's points when blocked
            "start": trial.details.get("block", f"own start (round {trial.repetition})"),
            "state": trial.status.value,
            "started": dt.datetime.fromtimestamp(trial.started).isoformat(timespec="seconds")
            if trial.started else "",
            "value": trial.value, "unit": results.objective.unit, "error": trial.error or "",
        }
        row.update({f"applied.{k}": v for k, v in trial.effective.items()})
        for name, value in trial.details.items():
            if isinstance(value, dict):
                row.update({f"{name}.{k}": v for k, v in value.items()
                            if isinstance(v, int | float | str)})
            elif isinstance(value, int | float | str):
                row[name] = value
        rows.append(row)
    columns = list(dict.fromkeys(k for row in rows for k in row))
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=columns, lineterminator="\n")
    writer.writeheader()
    writer.writerows([{k: _cell(v) for k, v in row.items()} for row in rows])
    return out.getvalue()


_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def _cell(value: Any) -> Any:
    """A text cell a spreadsheet shows as text: control characters visible, and one that would
    start a formula (a server's message, a value, a name: "=HYPERLINK(…)") behind a quote."""
    if not isinstance(value, str):
        return value
    if value.startswith(_FORMULA_START):
        try:
            float(value)
        except ValueError:
            value = "'" + value
    return literal(value, lines=True)
