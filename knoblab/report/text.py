"""Words: every sentence of a report.

The conclusion (conclusion_text, with _judge for sweeps and time series, _steps_conclusion for
steps runs and _servers_judge for servers compared), and the stalls, noise, durability,
explanation, tied and server lines; for steps runs the notes, durability, total and
interaction lines under each table. Built on knoblab.report.format; it imports neither rich nor
matplotlib.
"""

from __future__ import annotations

import re

from knoblab import stats
from knoblab.records import Point, Results, StepRow, StepsTable
from knoblab.report.format import (
    GIVES_UP,
    STEP_VERDICT,
    at_text,
    base_label,
    change_text,
    durability_knob,
    is_measured,
    num,
    p_text,
    point_label,
    signed,
    slices,
    step_costs,
    step_label,
    where,
)
from knoblab.units import format_duration
from knoblab.workloads.base import Steady

# ----------------------------------------------------------------------------- conclusion

HOPELESS_ROUNDS = 100  # beyond this, a number of rounds is no advice: the effect is too small


def _pct(lo: float, hi: float) -> str:
    return f"{lo}%" if lo == hi else f"{lo}–{hi}%"


def _effect_pct(results: Results, point: Point) -> int:
    """Whole percent by which `point` is worse than the best (positive)."""
    ratio = 1.0 if point.ratio_to_best is None else point.ratio_to_best
    minimize = results.objective.direction == "minimize"
    return round(((ratio - 1.0) if minimize else (1.0 - ratio)) * 100)


def _failures(results: Results, points: list[Point]) -> str:
    parts = []
    for p in points:
        if p.verdict != "failed" and not p.failed:
            continue
        part = f"{point_label(results, p)} ({p.failed} of {p.n + p.failed} runs)"
        first_error = (p.errors or [""])[0].strip()
        if first_error:
            part += f" — {_shorten(first_error.splitlines()[0], 160)}"
        parts.append(part)
    return f"Failed: {'; '.join(parts)}." if parts else ""


def _shorten(text: str, limit: int) -> str:
    """At most `limit` characters, cut between words, with an ellipsis when cut."""
    if len(text) <= limit:
        return text
    return text[:limit].rsplit(" ", 1)[0].rstrip(" ,;:|") + "…"


def _judge(results: Results, points: list[Point]) -> str:
    """The verdict on `points`, which were compared with each other (one slice)."""

    def label(p: Point) -> str:
        return point_label(results, p)

    def names(ps: list[Point]) -> str:
        return ", ".join(label(p) for p in ps)

    by = {v: [p for p in points if p.verdict == v]
          for v in ("best", "equivalent", "worse", "inconclusive")}
    default = next((p for p in points if p.is_default), None)
    slower = "slower" if results.objective.direction == "minimize" else "lower"
    failed = _failures(results, points)
    statistics = results.statistics
    within = f"within ±{statistics.min_effect * 100:g}%"
    measured = [p for p in points if p.verdict not in ("failed", "not run")]

    if not measured:
        return " ".join(filter(None, ["Every point failed: nothing to compare.", failed]))
    if by["best"]:
        best = by["best"][0]
        sentences = [f"Best: {label(best)} ({num(best.centre(results.objective))} "
                     f"{results.objective.unit})."]
        if by["equivalent"]:
            sentences.append(f"The same as it ({within}): {names(by['equivalent'])}.")
        if by["worse"]:
            effects = [_effect_pct(results, p) for p in by["worse"]]
            p_max = max(p.p_value or 0.0 for p in by["worse"])
            p_max_text = "p < 0.001" if p_max < 0.001 else f"p ≤ {p_text(p_max)}"
            sentences.append(f"Worse: {names(by['worse'])} — "
                             f"{_pct(min(effects), max(effects))} {slower} "
                             f"(Holm-adjusted {p_max_text}).")
        if by["inconclusive"]:
            sentences.append(f"Undecided: {_undecided(results, by['inconclusive'])}.")
        if default is None:
            sentences.append(f"The server default was not measured: consider {label(best)}.")
        elif default.verdict in ("best", "equivalent"):
            sentences.append(f"The default ({label(default)}) is among the best: keep it.")
        elif default.verdict == "inconclusive":
            sentences.append(f"The default ({label(default)}) is not shown worse than the "
                             f"best: keep it, or measure more to decide.")
        elif default.verdict == "worse":
            sentences.append(
                f"The default ({label(default)}) is {_effect_pct(results, default)}% {slower} "
                f"than the best: consider {label(best)}.")
        else:
            sentences.append(f"The default ({label(default)}) failed: consider {label(best)}.")
        return " ".join(sentences + ([failed] if failed else []))

    keep = f"the default ({label(default)})" if default else "the current value"
    how = f"α = {statistics.alpha:g}, {_n_text(results, measured)}"
    if not by["inconclusive"]:
        sentences = [f"These values perform the same ({within}; {how}): keep {keep}."]
    else:
        why = _why_undecided(results, measured)
        sentences = [f"No value is shown better than another, and {why} to tell whether "
                     f"they are the same ({within}; {how}): keep {keep}."]
        leader = next((p for p in measured if p.p_value is None), measured[0])
        if by["equivalent"]:
            sentences.append(f"The same as {label(leader)}, the best measured ({within}): "
                             f"{names(by['equivalent'])}.")
        undecided = [p for p in by["inconclusive"] if p is not leader]
        if undecided:
            sentences.append(f"Undecided: {_undecided(results, undecided)}.")
    return " ".join(sentences + ([failed] if failed else []))


def _why_undecided(results: Results, measured: list[Point]) -> str:
    """Too few rounds for the test to decide even a large difference (knoblab.stats.reach),
    or else the machine's noise."""
    n = min(p.n for p in measured)
    statistics = results.statistics
    reach = stats.reach(n, statistics.alpha, statistics.test)
    if not reach.hopeless:
        return "this machine was too noisy"
    if n < 2:
        return f"a single run per value is too few (measure at least {reach.enough})"
    if reach.bar is None:
        return (f"{n} runs per value are too few for the {statistics.test} test (its smallest "
                f"p is {reach.least_p:.2g}; measure at least {reach.enough} per value)")
    return (f"{n} runs per value are too few (with {n - 1} degree{'s' if n != 2 else ''} of "
            f"freedom a difference must exceed {reach.bar:.1f} standard errors; measure at "
            f"least {reach.enough} per value)")


def _n_text(results: Results, measured: list[Point]) -> str:
    ns = sorted({p.n for p in measured})
    if results.objective.time_series:
        duration = results.workload.get("duration")
        runs = "run" if ns == [1] else "runs"
        n_text = f"{ns[0]}" if len(ns) == 1 else f"{ns[0]}–{ns[-1]}"
        return n_text + (f" {runs} of {duration} s each" if duration else f" {runs} each")
    return f"n = {ns[0]} each" if len(ns) == 1 else f"n = {ns[0]}–{ns[-1]}"


def _undecided(results: Results, points: list[Point]) -> str:
    """The inconclusive points, with about how many more rounds would decide each."""
    parts = []
    for p in points:
        extra = p.extra_rounds
        if extra is None:
            parts.append(point_label(results, p))
        elif extra > HOPELESS_ROUNDS:
            parts.append(f"{point_label(results, p)} (more than {HOPELESS_ROUNDS} more rounds "
                         "would be needed to decide it)")
        else:
            parts.append(f"{point_label(results, p)} (about {extra} more "
                         f"round{'s' if extra != 1 else ''} would decide it)")
    return "; ".join(parts)


def conclusion_text(results: Results) -> str:
    """The verdict in one paragraph, built from the points (not from results.conclusion).

    A sliced result (results.slices, e.g. threads) gets one judgement per slice, each
    prefixed with the slice ("threads=8: Best: 512M (1,204 tps). … threads=32: No value …").
    A steps run names the steps that gained, those to leave out and the total, per slice, then
    the servers compared.
    """
    if results.status != "done":
        done = sum(p.n + p.failed for p in results.points)
        missing = sum(1 for p in results.points if p.verdict == "not run")
        return (f"Incomplete run ({results.status}): {done} measurements so far"
                + (f", {missing} point{'s' if missing != 1 else ''} not yet measured"
                   if missing else "")
                + f"; no conclusion is drawn until it is finished (knoblab resume "
                f"{results.run_id}).")
    if results.steps is not None:
        return _steps_conclusion(results, results.steps)
    groups = slices(results)
    if len(groups) == 1 and not groups[0][0]:
        return _judge(results, groups[0][1])
    return " ".join(f"{name}: {_judge(results, points)}" for name, points in groups)


def answer_text(results: Results) -> str:
    """The run's answer in a few words, for its row in `knoblab runs`: "best: 16K (0.203 s)",
    "no difference", "undecided", per slice ("threads=8: best: 512M; threads=32: no
    difference"); a steps run's steps that gained; "" for a run not finished."""
    if results.status != "done":
        return ""
    if results.steps is not None:
        parts = []
        for table in results.steps:
            gained = [_step_name(r) for r in table.rows if r.step and r.verdict == "gain"]
            said = f"gain: {', '.join(gained)}" if gained else "no step gained"
            parts.append(f"{where(table.slice)}: {said}" if table.slice else said)
        return "; ".join(parts)
    parts = []
    for name, points in slices(results):
        said = _answer(results, points)
        parts.append(f"{name}: {said}" if name else said)
    return "; ".join(parts)


def _answer(results: Results, points: list[Point]) -> str:
    """One slice's answer: its best value, or that its values do not differ."""
    measured = [p for p in points if p.verdict not in ("failed", "not run")]
    best = next((p for p in measured if p.verdict == "best"), None)
    if best is not None:
        return (f"best: {point_label(results, best)} "
                f"({num(best.centre(results.objective))} {results.objective.unit})")
    if not measured:
        return "every point failed"
    if not any(p.verdict == "inconclusive" for p in measured):
        return f"no difference (within ±{results.statistics.min_effect * 100:g}%)"
    return "undecided"


def stalls_text(results: Results) -> str:
    """One sentence on throughput stalls, or "" when no point stalled (or not a time series)."""
    if not any((p.time_series and p.time_series.stall_seconds or 0) > 0
               for p in results.points):
        return ""
    fraction = (results.steady or Steady()).stall_fraction
    groups = []
    for name, points in slices(results):
        parts = []
        for p in points:
            series = p.time_series
            if p.verdict == "failed" or series is None or series.stall_seconds is None:
                continue
            part = f"{point_label(results, p)} "
            if not series.stall_seconds:
                part += "none"
            else:
                part += f"{series.stall_seconds} s, longest {series.longest_stall or 0} s"
                if series.zero_seconds:
                    part += f", {series.zero_seconds} s at 0 {results.objective.unit}"
            parts.append(part)
        if parts:
            groups.append((f"{name}: " if name else "") + "; ".join(parts) + ".")
    return (f"Stalls (seconds below {fraction * 100:g}% of the steady median): "
            + " ".join(groups))


def durability_lines(results: Results) -> list[str]:
    """A line of its own for every gain bought by giving up durability, against the best
    durable value of the same slice: such a gain must never pass unlabelled. For a steps run,
    a line for every step that gives up durability, prefixed with its slice."""
    if results.steps is not None:
        return [(f"{where(table.slice)}: " if table.slice else "") + line
                for table in results.steps for line in step_durability_lines(results, table)]
    def level(p: Point) -> float | None:
        return p.centre(results.objective) if p.verdict != "failed" else None

    lines = []
    maximize = results.objective.direction == "maximize"
    for name, points in slices(results):
        durable = [(measured, p) for p in points
                   if not p.durability and (measured := level(p)) is not None]
        reference = (max if maximize else min)(durable, key=lambda d: d[0], default=None)
        prefix = f"{name}: " if name else ""
        for p in points:
            measured = level(p)
            if not p.durability or measured is None:
                continue
            given_up = "; ".join(f"{knob} = {p.config.get(knob, '?')}: {cost}"
                                 for knob, cost in p.durability.items())
            if reference is None:
                change = "no durable value was measured to compare with"
            else:
                ratio = measured / reference[0] - 1
                what = results.objective.unit if maximize else "time"
                change = (f"{ratio:+.0%} {what} against the best durable value "
                          f"({point_label(results, reference[1])})")
            lines.append(f"{prefix}{point_label(results, p)}: {change}, bought by giving up "
                         f"durability — {given_up}.")
    return lines


def explanation_lines(results: Results) -> list[str]:
    """Per slice, the server counters that moved with the setting, in words:
    "Explained by the server's counters at rows=1000000: created_tmp_disk_tables: …; …."

    Slices without a counter get no line; no line at all when nothing was found.
    """
    lines = []
    for explanation in results.explained_by:
        texts = [c.text.strip() for c in explanation.counters if c.text.strip()]
        if not texts:
            continue
        at = f" at {where(explanation.slice)}" if explanation.slice else ""
        lines.append(f"Explained by the server's counters{at}: {'; '.join(texts)}.")
    return lines


_STOPPED = {"decided": "every comparison was decided",
            "budget": "the budget was spent (extend it: knoblab resume {run} --budget …)",
            "ceiling": "the ceiling was reached"}


def rounds_text(results: Results) -> str:
    """How the points were measured (the design, and why), and for adaptive repetitions how
    many rounds, why they stopped and what the last look's tests had to reach."""
    rounds = results.rounds
    design = f"Design: {rounds.design_why}." if rounds and rounds.design_why else ""
    if rounds is None or not rounds.adaptive:
        return design
    plural = "s" if rounds.done != 1 else ""
    text = (f"{design} " if design else "") + (
        f"Repetitions: auto, {rounds.done} round{plural} of {rounds.floor} to {rounds.ceiling}")
    if rounds.budget is not None:
        text += f" within {format_duration(rounds.budget)}"
    if rounds.stopped:
        why = _STOPPED.get(rounds.stopped, rounds.stopped).format(run=results.run_id)
        text += f"; stopped as {why}"
    text += "."
    if rounds.level_worse is not None and rounds.level_same is not None:
        text += (f" Looking after every round keeps α = {results.statistics.alpha:g} over all "
                 f"looks (group-sequential boundaries): at the last look a difference needed "
                 f"p < {p_text(rounds.level_worse)} and equivalence p < "
                 f"{p_text(rounds.level_same)}.")
    return text


def noise_text(results: Results) -> str:
    """The machine's noise floor, from repeated timed runs on one server start."""
    noise = results.noise
    if noise is None:
        return ""
    text = (f"Noise: timed runs of one measurement differed by {noise.spread_median:.0%} "
            f"(median over {noise.starts} measurements, at most {noise.spread_max:.0%}).")
    if noise.spread_median > results.statistics.min_effect:
        text += (" That is more than the minimum effect: on this machine smaller differences "
                 "need more repetitions or a quieter machine to show.")
    return text


def tied_text(results: Results) -> str:
    """"max_heap_table_size tied to tmp_table_size", or "" when no knob is tied."""
    return "; ".join(f"{follower} tied to {leader}"
                     for follower, leader in results.tied.items())


def server_lines(results: Results) -> list[str]:
    """A line for every server that lacks settings or was left out (results.servers)."""
    lines = []
    what = "steps" if results.steps is not None else "points"
    for server in results.servers:
        label = server.label or server.binary or "?"
        if server.error:
            binary = f" ({server.binary})" if server.binary not in (None, label) else ""
            lines.append(f"{label}{binary} was left out: {server.error}")
        if server.missing:
            it = "it" if len(server.missing) == 1 else "them"
            lines.append(f"{label} lacks {', '.join(server.missing)}: {what} using {it} were "
                         "left out on that server")
    return lines


# ----------------------------------------------------------------------------- steps
#
# A steps run applies setting changes one on top of the other from a base and measures every
# step; results.steps holds, per slice, one row per step with its change against the step
# before and against the base, judged elsewhere (knoblab.results). Several server builds may be
# compared on the same configurations (results.servers_compared).


def _step_name(row: StepRow) -> str:
    """The change without the "+ ": "innodb_buffer_pool_size=700M" (for sentences)."""
    if row.change:
        return " + ".join(f"{k}={v}" for k, v in row.change.items())
    return step_label(row).removeprefix("+ ")


def _cost_text(row: StepRow, costs: list[str]) -> str:
    """The costs, without "knob = value: " when the step's label already names that knob."""
    if len(row.change) == 1 and all(durability_knob(c) in row.change for c in costs):
        costs = [re.sub(r"^\s*[A-Za-z0-9_.]+\s*=[^:]*:\s*", "", c) for c in costs]
    return "; ".join(costs)


def _what_changes(results: Results) -> str:
    """"time" when less is better, else the metric's unit ("tps")."""
    return "time" if results.objective.direction == "minimize" else results.objective.unit


def _verdict_words(verdict: str) -> str:
    return STEP_VERDICT.get(verdict, (verdict, ""))[0]


def step_durability_lines(results: Results, table: StepsTable) -> list[str]:
    """A line for each step that gives up durability (and for a base that already does)."""
    lines = []
    for row in table.rows:
        costs = step_costs(row)
        if not costs:
            continue
        head = f"step {row.step} ({step_label(row)})"
        given_up = _cost_text(row, costs)
        previous = row.vs_previous
        if row.step == 0:
            lines.append(f"{head}: the starting point already gives up durability — "
                         f"{given_up}.")
        elif not is_measured(row) or previous is None:
            lines.append(f"{head}: {_verdict_words(row.verdict)}; it would give up durability "
                         f"— {given_up}.")
        else:
            change = f"{signed((previous.ratio - 1) * 100, 0)}% {_what_changes(results)}"
            if row.verdict == "gain":
                lines.append(f"{head}: {change}, bought by giving up durability — {given_up}.")
            else:
                lines.append(f"{head}: {change} ({_verdict_words(row.verdict)}), and it gives "
                             f"up durability — {given_up}.")
    return lines


def step_notes(results: Results, table: StepsTable) -> list[str]:
    """Why a step has no number: its note, or the first error of its failed runs."""
    lines = []
    for row in table.rows:
        head = f"step {row.step} ({step_label(row)})"
        if row.note:
            lines.append(f"{head}: {row.note}.")
        elif row.verdict == "failed":
            point = results.points[row.point] if row.point < len(results.points) else None
            error = (point.errors[0] if point and point.errors else "").strip()
            lines.append(f"{head}: failed" + (f" — {error.splitlines()[0][:120]}." if error
                                              else "."))
    return lines


def total_text(results: Results, table: StepsTable) -> str:
    """"defaults → all steps: 9.18 s → 6.50 s, −29% [−31, −27], significant (p < 0.001).\""""
    total, rows = table.total, table.rows
    base = next((r for r in rows if r.step == 0 and is_measured(r)), None)
    measured = [r for r in rows if r.step and is_measured(r)]
    if total is None or base is None or not measured:
        return ""
    last, unit = measured[-1], results.objective.unit
    until = "all steps" if last.step == max(r.step for r in rows) else f"step {last.step}"
    verdict = "significant" if total.significant else "not significant"
    p = p_text(total.p_value)
    verdict += f" (p {p})" if p.startswith("<") else f" (p = {p})"
    return (f"{step_label(base)} → {until}: {num(base.center)} {unit} → "
            f"{num(last.center)} {unit}, {change_text(total, 0)}, {verdict}.")


def interaction_text(results: Results, table: StepsTable) -> str:
    """The changes measured alone, multiplied, against all of them applied together."""
    inter = table.interaction
    if inter is None or not inter.cumulative or not inter.product_of_alone:
        return ""
    cumulative, product = inter.cumulative, inter.product_of_alone
    what = _what_changes(results)
    minimize = results.objective.direction == "minimize"
    gap = cumulative / product - 1
    if abs(gap) < results.statistics.min_effect:
        how = "they add up about independently"
    elif (gap < 0) == minimize:
        how = "together they do more than each alone predicts: they reinforce each other"
    else:
        how = ("together they do less than each alone predicts: they partly buy the same "
               "gain, or one undoes another")
    return (f"Each change measured alone from the {base_label(table)}, multiplied together, "
            f"predicts {signed((product - 1) * 100, 0)}% {what}; applied one on top of the "
            f"other they gave {signed((cumulative - 1) * 100, 0)}%: {how} (point estimates, "
            f"not tested).")


def _steps_judge(results: Results, table: StepsTable) -> str:
    """The conclusion for one slice of a steps run."""
    rows = [r for r in table.rows if r.step]
    if not rows:
        return "No step was measured."

    def names(verdict: str, mark: bool = False) -> str:
        return ", ".join(_step_name(r) + (f" ({GIVES_UP})" if mark and step_costs(r) else "")
                         for r in rows if r.verdict == verdict)

    sentences = []
    gains = names("gain", mark=True)
    sentences.append(f"Steps with a measurable gain: {gains}." if gains
                     else "No step gave a measurable gain.")
    for verdict, head in (("no measurable effect", "No measurable effect, leave out"),
                          ("loss", "Measurable loss, leave out"),
                          ("failed", "Failed"), ("unavailable", "Not on this server"),
                          ("changes nothing", "Changes nothing here, not run")):
        if names(verdict):
            sentences.append(f"{head}: {names(verdict)}.")
    total = table.total
    if total is not None:
        verdict = "significant" if total.significant else "not significant"
        sentences.append(f"All steps together: {signed((total.ratio - 1) * 100, 0)}% "
                         f"{_what_changes(results)} ({verdict}).")
    return " ".join(sentences)


def _servers_judge(results: Results) -> str:
    """One sentence per compared configuration: the best server and how much worse the rest."""
    sentences = []
    better = "faster" if results.objective.direction == "minimize" else "better"
    for entry in results.servers_compared or []:
        rows = entry.rows
        at = where({k: v for k, v in entry.slice.items() if k != "binary"})
        head = f"Servers compared at {at_text(entry.at)}" + (f", {at}" if at else "")
        if all(r.verdict == "failed" for r in rows):
            sentences.append(f"{head}: every server failed.")
            continue
        best = next((r for r in rows if r.verdict == "best"), None)
        if best is None:
            alike = all(r.verdict in ("equivalent", "failed") for r in rows)
            sentences.append(f"{head}: the servers perform the same." if alike else
                             f"{head}: no server is measurably {better} than another.")
            continue
        text = f"{head}: best {best.binary} ({num(best.center)} {results.objective.unit})"
        worse = [r for r in rows if r.verdict == "worse"]
        if worse:
            text += "; worse: " + ", ".join(
                f"{r.binary} ({signed((r.ratio_to_best - 1) * 100, 0)}% "
                f"{_what_changes(results)})" for r in worse if r.ratio_to_best is not None)
        same = [r.binary for r in rows if r.verdict == "equivalent"]
        if same:
            text += f"; the same as it: {', '.join(same)}"
        undecided = [r.binary for r in rows if r.verdict == "inconclusive"]
        if undecided:
            text += f"; undecided: {', '.join(undecided)}"
        sentences.append(text + ".")
    return " ".join(sentences)


def _steps_conclusion(results: Results, tables: list[StepsTable]) -> str:
    if not tables:
        return "No step was measured."
    parts = [(f"{where(table.slice)}: " if table.slice else "") + _steps_judge(results, table)
             for table in tables]
    servers = _servers_judge(results)
    return " ".join(parts + ([servers] if servers else []))
