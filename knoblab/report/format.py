"""Formatting shared by the sentences, tables and charts of a report.

Numbers, percents and p-values (num, p_text, signed, change_text), sizes and row counts, and the
labels of points, slices, steps and the configurations servers were compared at. The lowest
module of knoblab.report: it imports neither rich nor matplotlib.
"""

from __future__ import annotations

import re

from knoblab import workloads
from knoblab.errors import UserError
from knoblab.records import Comparison, Point, Results, StepRow, StepsTable
from knoblab.units import parse_size, setting_text, settings_text
from knoblab.vocabulary import Finding, StepVerdict
from knoblab.words import (
    FINDING_WORDS,
    bounds,
    finding_of,
    finding_text,
    gain_interval_ends,
    interval_text,
)
from knoblab.workloads.base import Headline, Workload

GIVES_UP = "gives up durability"
STEP_VERDICT = {  # a step's verdict → (what people read, rich style)
    StepVerdict.BASE: ("—", "dim"),
    StepVerdict.GAIN: (FINDING_WORDS[Finding.HELPS], "green"),
    StepVerdict.LOSS: (f"{FINDING_WORDS[Finding.HURTS]}: leave it out", "red"),
    StepVerdict.NO_EFFECT: (f"{FINDING_WORDS[Finding.UNSHOWN]}: leave it out", ""),
    StepVerdict.FAILED: ("failed", "magenta"),
    StepVerdict.UNAVAILABLE: ("not on this server", "magenta"),
    StepVerdict.CHANGES_NOTHING: ("changes nothing: not run", "dim"),
}
# A measured step's verdict as a finding of knoblab.words (a step that neither helps nor hurts
# is "the same" when its interval shows it, see step_finding).
STEP_FINDING = {StepVerdict.GAIN: Finding.HELPS, StepVerdict.LOSS: Finding.HURTS,
                StepVerdict.NO_EFFECT: Finding.UNSHOWN}
_MINUS = "\u2212"  # a real minus sign: "−8%" does not read as a dash in a table


# ----------------------------------------------------------------------------- words


def workload_kind(results: Results) -> type[Workload]:
    """The kind the run was measured with: the one place a report finds it (its titles and
    questions are made of its headline, the notes under its tables are its own)."""
    return workloads.kind(str(results.workload.get("kind", "query")))


def headline(results: Results) -> Headline:
    """What the run ran, in its workload kind's own words."""
    return workload_kind(results).headline(results.workload, results.knobs)


def clipped(text: str, width: int) -> str:
    """`text` cut to `width` characters, "..." saying it was."""
    return text if len(text) <= width else text[:width - 3] + "..."


# ----------------------------------------------------------------------------- numbers


def p_text(p: float) -> str:
    return "< 0.001" if p < 0.001 else f"{p:.2g}"


def signed(x: float, decimals: int) -> str:
    """"+3.0", "−8.0" (true minus sign); no sign when it rounds to zero."""
    text = f"{abs(x):.{decimals}f}"
    if float(text) == 0:
        return text
    return ("+" if x > 0 else _MINUS) + text


def change_text(compared: Comparison | None, decimals: int = 1) -> str:
    """"−8.0% [−10, −6]": a ratio as a percent change with its interval (at its table's
    level); an end that bounds nothing left out, "[≤ −6]", or "[not bounded]"
    (knoblab.words.bounds); "—" if none."""
    if compared is None:
        return "—"
    lo, hi = ((c - 1) * 100 for c in compared.ci95)
    d = 0 if round(max(abs(lo), abs(hi)), 1) >= 10 else 1  # whole percents once large
    ends = interval_text(signed(lo, d), signed(hi, d), bounds(*compared.ci95), ", ")
    return f"{signed((compared.ratio - 1) * 100, decimals)}% [{ends}]"


def ratio_change_text(ratio: float, low: float, high: float) -> str:
    """"+4.1% [+1.0%, +7.3%]": a ratio of one run's level to another's as a change, with its
    interval (knoblab compare), its ends as change_text has them."""
    ends = interval_text(f"{(low - 1) * 100:+.1f}%", f"{(high - 1) * 100:+.1f}%",
                         bounds(low, high), ", ")
    return f"{(ratio - 1) * 100:+.1f}% [{ends}]"


def gain_interval_text(interval: tuple[float, float], direction: str) -> str:
    """The interval of a gain (knoblab.words) in the terms gain_words gives its estimate: the
    change of the time for a time ("−9.0% to −5.1%"), of the rate for a rate."""
    return gain_interval_ends(interval, direction)


def with_facts(text: str, facts: list[str]) -> str:
    """`text` followed by its facts in parentheses, inside its own when it ends with them:
    "1.5× faster (time −33.4%; 95% CI …)", not "(time −33.4%) (95% CI …)"."""
    if not facts:
        return text
    if text.endswith(")"):
        return f"{text[:-1]}; {'; '.join(facts)})"
    return f"{text} ({'; '.join(facts)})"


def as_number(value: object) -> float | None:
    """A setting's value as a number ("128K" → 131072.0); None when it is not one."""
    try:
        return float(parse_size(value))
    except UserError:
        try:
            return float(str(value))
        except ValueError:
            return None


def as_count(value: object) -> float | None:
    """A row count from a setting ("1000000"); None when it is not a number."""
    try:
        return float(str(value).replace("_", "").replace(",", ""))
    except ValueError:
        return as_number(value)


def count(n: float) -> str:
    """Rows as people write them: 1000000 -> "1M", 4000000 -> "4M", 250000 -> "250K"."""
    for size, suffix in ((1e9, "B"), (1e6, "M"), (1e3, "K")):
        if abs(n) >= size:
            return f"{n / size:.3g}{suffix}"
    return f"{n:.3g}"


def wrap_name(name: str, width: int) -> str:
    """Break a long knob name after underscores: "innodb_buffer_\npool_size"."""
    lines = [""]
    for part in re.findall(r"[^_]+_*|_+", name):
        if lines[-1] and len(lines[-1]) + len(part) > width:
            lines.append("")
        lines[-1] += part
    return "\n".join(lines)


# ----------------------------------------------------------------------------- points


def value_knobs(results: Results) -> list[str]:
    """The swept knobs that are compared (every knob but the slice knobs)."""
    return [k for k in results.knobs if k not in results.slices] or list(results.knobs)


def point_label(results: Results, point: Point, *, with_slice: bool = False) -> str:
    """"128K" for one knob, "read_buffer_size=128K, sort_buffer_size=2M" for a grid.

    Slice knobs (results.slices, e.g. threads or rows) are left out unless `with_slice`:
    points are only ever compared within their slice, which is named separately (slice_label).
    """
    knobs = value_knobs(results)
    if with_slice:
        knobs += [k for k in results.slices if k not in knobs]
    # sizes for people (320M, not 335544320: a search's values are the server's bytes)
    if len(knobs) == 1:
        return setting_text(knobs[0], str(point.settings[knobs[0]]))
    return ", ".join(f"{k}={setting_text(k, str(point.settings[k]))}" for k in knobs)


def slice_label(results: Results, point: Point) -> str:
    """"threads=8" for a sliced result, "" otherwise."""
    return ", ".join(f"{k}={point.settings[k]}" for k in results.slices)


def slices(results: Results) -> list[tuple[str, list[Point]]]:
    """[(slice label, its points)] in order of first appearance; [("", all points)] if unsliced."""
    groups: dict[str, list[Point]] = {}
    for p in results.points:
        groups.setdefault(slice_label(results, p), []).append(p)
    return list(groups.items()) or [("", [])]


def where(slice_: dict[str, str]) -> str:
    """"threads=8" for a slice, "" for the unsliced {}."""
    return ", ".join(f"{k}={v}" for k, v in slice_.items())


def at_text(at: str) -> str:
    """"step 5: + x=4M" → "step 5 (+ x=4M)", so that it reads inside a sentence."""
    match = re.match(r"^(step \d+):\s*(.+)$", at)
    return f"{match.group(1)} ({match.group(2)})" if match else at


# ----------------------------------------------------------------------------- steps


def compared_levels(results: Results) -> str:
    """What a steps table's changes are ratios of: the geometric means its test compares
    (welch-log), the means (welch), else the levels the table shows (a rank test's changes
    are the bootstrap's of those)."""
    test = results.statistics.test
    if test == "welch-log":
        return "geometric means"
    return "means" if test == "welch" else f"{results.objective.centre}s"


def unlike_levels(results: Results) -> str:
    """"geometric means" where a steps change is a ratio of other figures than the levels
    shown beside it (medians: two medians 33% apart may stand beside "+11%"), else ""."""
    compared = compared_levels(results)
    return "" if compared == f"{results.objective.centre}s" else compared


def step_finding(results: Results, row: StepRow) -> Finding | None:
    """What a measured step showed against the step before (knoblab.words); None for a step
    not judged (the base, failed, not run). A step of no measurable effect says what its
    interval shows: the same, nothing either way, or a help (or harm) its test found smaller
    than the minimum effect."""
    finding = STEP_FINDING.get(row.verdict)
    if finding == Finding.UNSHOWN and row.vs_previous is not None:
        return finding_of(row.vs_previous.gain(results.objective.direction)[1],
                          results.statistics.min_effect)
    return finding


def step_verdict_text(results: Results, row: StepRow) -> tuple[str, str]:
    """A step's verdict as people read it, and its rich style: "shown to help", "not shown
    either way: leave it out", "shown the same (within ±3%): leave it out" …"""
    if row.verdict == StepVerdict.NO_EFFECT:
        return f"{step_finding_text(results, row)}: leave it out", ""
    return STEP_VERDICT.get(row.verdict, (row.verdict, ""))


def step_finding_text(results: Results, row: StepRow) -> str:
    """The words of a step's finding: a help too small to keep says how small."""
    finding = step_finding(results, row)
    min_effect = results.statistics.min_effect
    if finding is None:
        return STEP_VERDICT.get(row.verdict, (row.verdict, ""))[0]
    if row.verdict == StepVerdict.NO_EFFECT and finding == Finding.HELPS:
        return f"{FINDING_WORDS[finding]}, but not shown by {min_effect:.0%} or more"
    return finding_text(finding, min_effect)


def step_label(row: StepRow) -> str:
    if row.label:
        return row.label
    return "+ " + settings_text(row.change) if row.change else "base"


def base_label(table: StepsTable) -> str:
    """What step 0 is called: "defaults" or "base"."""
    first = next((r for r in table.rows if r.step == 0), None)
    return step_label(first) if first else "base"


def is_measured(row: StepRow) -> bool:
    return row.center is not None and row.verdict not in (
        StepVerdict.FAILED, StepVerdict.UNAVAILABLE, StepVerdict.CHANGES_NOTHING)


def durability_knob(cost: str) -> str | None:
    """The knob a durability cost names ("knob = value: what a crash can cost")."""
    match = re.match(r"\s*([A-Za-z0-9_.]+)\s*=", cost)
    return match.group(1) if match else None


def step_costs(row: StepRow) -> list[str]:
    """What a crash can cost because of this step's own change (for step 0: of the base).

    Costs that name a knob the step does not change are left out: they were bought by an
    earlier step and are reported there.
    """
    costs = [c for c in row.durability if c.strip()]
    if not row.change:
        return costs
    return [c for c in costs if durability_knob(c) in (None, *row.change)]


def slice_heading(results: Results, table: StepsTable) -> str:
    """The slice, and for a server slice the server's version, compiler and allocator."""
    text = where(table.slice)
    server = results.server(table.slice["binary"]) if "binary" in table.slice else None
    if server is not None:
        facts = [f for f in (server.version, server.compiler,
                             server.allocator and f"{server.allocator} preloaded") if f]
        if facts:
            text += f" ({', '.join(facts)})"
    return text


def repetitions_text(results: Results, noun: str = "rep") -> str:
    """"5 reps"; for adaptive repetitions the rounds measured, "7 reps (auto, 3–20)"."""
    rounds = results.rounds
    planned = results.workload.get("repetitions") or 1
    if planned != "auto":
        return f"{planned} {noun}{'' if planned == 1 else 's'}"
    done = rounds.done if rounds is not None else 0
    floor = results.workload.get("min_repetitions")
    ceiling = results.workload.get("max_repetitions")
    return f"{done} {noun}{'' if done == 1 else 's'} (auto, {floor}–{ceiling})"
