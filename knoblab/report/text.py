"""Words: every sentence of a report.

The conclusion (conclusion_text, with _judge for sweeps and time series, _steps_conclusion for
steps runs and _servers_judge for servers compared), and the stalls, noise, durability,
explanation, tied and server lines; for steps runs the notes, durability, total and
interaction lines under each table. Built on knoblab.report.format; it imports neither rich nor
matplotlib.
"""

from __future__ import annotations

import re
from typing import Literal

from knoblab import stats
from knoblab.records import (
    Interaction,
    Interval,
    Point,
    Results,
    SliceConclusion,
    Steady,
    StepRow,
    StepsTable,
)
from knoblab.report.format import (
    GIVES_UP,
    at_text,
    base_label,
    change_text,
    compared_levels,
    durability_knob,
    gain_interval_text,
    headline,
    is_measured,
    p_text,
    point_label,
    signed,
    slices,
    step_costs,
    step_finding,
    step_label,
    step_verdict_text,
    unlike_levels,
    value_knobs,
    where,
    with_facts,
)
from knoblab.units import format_duration, num, plural, setting_text
from knoblab.vocabulary import Finding, PointVerdict, RunStatus, StepVerdict
from knoblab.words import (
    FINDING_WORDS,
    WHY_NOT_BOUNDED,
    bounded,
    change_finding,
    confidence_text,
    finding_of,
    finding_text,
    gain_words,
    leader_verdict,
)

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
        if p.verdict != PointVerdict.FAILED and not p.failed:
            continue
        part = f"{point_label(results, p)} ({p.failed} of {plural(p.n + p.failed, 'run')})"
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
    """The verdict on `points`, which were compared with each other (one slice), ending with
    the slice's recommendation (results.conclusion): a change only when shown to help."""

    def label(p: Point) -> str:
        return point_label(results, p)

    def names(ps: list[Point]) -> str:
        return ", ".join(label(p) for p in ps)

    by = {v: [p for p in points if p.verdict == v]
          for v in (PointVerdict.EQUIVALENT, PointVerdict.WORSE, PointVerdict.INCONCLUSIVE)}
    best = next((p for p in points if p.verdict.leads), None)  # crowned: something is worse
    default = next((p for p in points if p.is_default), None)
    slower = "slower" if results.objective.direction == "minimize" else "lower"
    failed = _failures(results, points)
    statistics = results.statistics
    within = f"within ±{statistics.min_effect * 100:g}%"
    measured = [p for p in points if p.verdict not in (PointVerdict.FAILED, PointVerdict.NOT_RUN)]

    if not measured:
        return " ".join(filter(None, ["Every point failed: nothing to compare.", failed]))
    if best is not None:
        # its verdict: "best" only for what is recommended (the default, or a change shown
        # to help), else "fastest measured"
        sentences = [f"{best.verdict.capitalize()}: {label(best)} "
                     f"({num(best.centre(results.objective))} {results.objective.unit})."]
        if by[PointVerdict.EQUIVALENT]:
            sentences.append(f"{FINDING_WORDS[Finding.SAME].capitalize()} as it ({within}): "
                             f"{names(by[PointVerdict.EQUIVALENT])}.")
        if by[PointVerdict.WORSE]:
            effects = [_effect_pct(results, p) for p in by[PointVerdict.WORSE]]
            p_max = max(p.p_value or 0.0 for p in by[PointVerdict.WORSE])
            p_max_text = "p < 0.001" if p_max < 0.001 else f"p ≤ {p_text(p_max)}"
            sentences.append(f"Worse: {names(by[PointVerdict.WORSE])} — "
                             f"{_pct(min(effects), max(effects))} {slower} "
                             f"(Holm-adjusted {p_max_text}).")
        if by[PointVerdict.INCONCLUSIVE]:
            said = _undecided(results, by[PointVerdict.INCONCLUSIVE])
            sentences.append(f"Undecided: {said}.")
        sentences.append(recommendation_text(results, points))
        return " ".join(sentences + ([failed] if failed else []))

    keep = f"the default ({label(default)})" if default else "the current value"
    how = f"α = {statistics.alpha:g}, {_n_text(results, measured)}"
    if not by[PointVerdict.INCONCLUSIVE]:
        sentences = [f"These values are "
                     f"{with_facts(finding_text(Finding.SAME, statistics.min_effect), [how])}: "
                     f"keep {keep}."]
    else:
        why = _why_undecided(results, measured)
        sentences = [f"No value is shown better than another, and {why} to tell whether "
                     f"they are the same ({within}; {how}): keep {keep}."]
        leader = next((p for p in measured if p.p_value is None), measured[0])
        if by[PointVerdict.EQUIVALENT]:
            sentences.append(f"The same as {label(leader)}, the {fastest_words(results)} "
                             f"({within}): {names(by[PointVerdict.EQUIVALENT])}.")
        undecided = [p for p in by[PointVerdict.INCONCLUSIVE] if p is not leader]
        if undecided:
            sentences.append(f"Undecided: {_undecided(results, undecided)}.")
    return " ".join(sentences + ([failed] if failed else []))


def fastest_words(results: Results) -> str:
    """What the leader is, never "the best": "fastest measured", "highest tps measured" (the
    verdict of a leader not recommended, knoblab.words.leader_verdict)."""
    return str(leader_verdict(results.objective.direction))


def _slice_values(results: Results, points: list[Point]) -> dict[str, str]:
    return {k: points[0].settings[k] for k in results.slices} if points else {}


def recommendation_text(results: Results, points: list[Point]) -> str:
    """The slice's recommendation in one sentence, as recommended.cnf and result.json have it
    (results.conclusion): a value other than the current configuration only when the change
    to it is shown to help, else keep the current configuration, saying why."""
    said = recommendation(results, points)
    return f"{said.rstrip('.')}." if said else ""


def recommendation(results: Results, points: list[Point], named: bool = False) -> str:
    """recommendation_text without its full stop; `named`: values with their setting's name
    ("read_buffer_size = 2M", for recommended.cnf)."""
    conclusion = results.conclusion.of_slice(_slice_values(results, points))
    measured = [p for p in points if p.verdict not in (PointVerdict.FAILED, PointVerdict.NOT_RUN)]
    default = next((p for p in points if p.is_default), None)
    leader = next((p for p in measured if p.p_value is None), None)
    if leader is None:
        return ""

    def name(point: Point) -> str:
        return settings_words(results, point) if named else point_label(results, point)

    fastest = name(leader)
    if default is None:
        return (f"The server default was not measured, so no change from it is shown to help "
                f"({fastest} is the {fastest_words(results)}): keep the current "
                f"configuration, or add the default to the values to decide")
    if default.verdict in (PointVerdict.FAILED, PointVerdict.NOT_RUN):
        failed = default.verdict == PointVerdict.FAILED
        return (f"The default ({point_label(results, default)}) "
                f"{'failed' if failed else 'was not measured'}, so no "
                f"change from it is shown to help ({fastest} is the "
                f"{fastest_words(results)}): keep the current configuration")
    current = point_label(results, default)
    if default is leader:
        return f"The default ({current}) is the {fastest_words(results)}: keep it"
    # results written before findings were kept: the default's verdict says it
    finding = conclusion.finding or change_finding(default.verdict)
    head = f"{fastest} instead of the default ({current}): "
    if finding == Finding.HELPS:
        return (f"{head}{FINDING_WORDS[Finding.HELPS]}, {_gain(results, default, conclusion)}: "
                f"set {fastest}")
    if finding == Finding.SAME:
        return f"{head}{finding_text(Finding.SAME, results.statistics.min_effect)}: keep {current}"
    return (f"{head}{FINDING_WORDS[Finding.UNSHOWN]}, {_estimate(results, default, conclusion)}: "
            f"keep {current}, or measure more to decide")


def settings_words(results: Results, point: Point) -> str:
    """"read_buffer_size = 2M": a point's compared values as an option file sets them."""
    return ", ".join(f"{k} = {point.settings[k]}" for k in value_knobs(results))


def _gain_of(results: Results, default: Point,
             conclusion: SliceConclusion) -> tuple[float, Interval | None]:
    """The leader's gain over the default, with its interval when the conclusion has it."""
    direction = results.objective.direction
    if conclusion.versus_current is not None:
        return conclusion.versus_current.gain(direction)
    ratio = default.ratio_to_best or 1.0  # the default's level over the leader's
    return (ratio - 1.0 if direction == "minimize" else 1.0 / ratio - 1.0), None


def _gain(results: Results, default: Point, conclusion: SliceConclusion) -> str:
    """"time −7.4% (95% CI −9.0% to −5.1%; Holm-adjusted p = 0.004)"."""
    gain, interval = _gain_of(results, default, conclusion)
    text = gain_words(gain, _direction(results), _rate_unit(results))
    facts = []
    if interval is not None:
        facts.append(f"{results.statistics.confidence:.0%} CI "
                     f"{gain_interval_text(interval, _direction(results))}")
    if default.p_value is not None:
        facts.append(f"Holm-adjusted p {_p(default.p_value)}")
    return with_facts(text, facts)


def slice_gain_text(results: Results, conclusion: SliceConclusion) -> str:
    """A slice's best against its current configuration, in a table cell: "time −7.4%
    [−9.0% to −5.1%], shown to help", or why there is nothing to say."""
    points = [p for p in results.points
              if all(p.settings.get(k) == v for k, v in conclusion.slice.items())]
    default = next((p for p in points if p.is_default), None)
    best = conclusion.best or conclusion.fastest
    if best is None:
        return "nothing measured"
    if default is None:
        return "the current configuration was not measured"
    if all(default.settings.get(k) == v for k, v in best.items()):
        return "the current configuration is the fastest"
    gain, interval = _gain_of(results, default, conclusion)
    text = gain_words(gain, _direction(results), _rate_unit(results))
    if interval is not None:  # compared at the run's confidence (results._slice_conclusion)
        text += (f" [{confidence_text(results.statistics.confidence)} CI "
                 f"{gain_interval_text(interval, _direction(results))}]")
    if conclusion.finding is not None:
        text += f", {finding_text(conclusion.finding, results.statistics.min_effect)}"
    return text


def _estimate(results: Results, default: Point, conclusion: SliceConclusion) -> str:
    """"time −3.1%, Holm-adjusted p = 0.44": the estimate without an interval that might
    read as shown."""
    gain, _ = _gain_of(results, default, conclusion)
    text = gain_words(gain, _direction(results), _rate_unit(results))
    return with_facts(text, [f"Holm-adjusted p {_p(default.p_value)}"]
                      if default.p_value is not None else [])


def _direction(results: Results) -> Literal["minimize", "maximize"]:
    return "minimize" if results.objective.direction == "minimize" else "maximize"


def _rate_unit(results: Results) -> str:
    return "" if results.objective.direction == "minimize" else results.objective.unit


def _p(p: float) -> str:
    text = p_text(p)
    return text if text.startswith("<") else f"= {text}"


def _why_undecided(results: Results, measured: list[Point]) -> str:
    """Too few rounds for the test to decide even a large difference (knoblab.stats.reach: its
    bar far above what enough rounds need), or else the machine's noise."""
    n = min(p.n for p in measured)
    statistics = results.statistics
    reach = stats.reach(n, statistics.alpha, statistics.test)
    if not reach.too_few:
        return "this machine was too noisy"
    if n < 2:
        return f"a single run per value is too few (measure at least {reach.enough})"
    if reach.bar is None:
        return (f"{n} runs per value are too few for the {statistics.test} test (its smallest "
                f"p is {reach.least_p:.2g}; measure at least {reach.enough} per value)")
    enough = "" if reach.enough_bar is None else \
        f", against {reach.enough_bar:.1f} with {reach.enough} runs"
    return (f"{n} runs per value are too few (with {plural(n - 1, 'degree')} of freedom a "
            f"difference must exceed {reach.bar:.1f} standard errors{enough}; measure at "
            f"least {reach.enough} per value)")


def _n_text(results: Results, measured: list[Point]) -> str:
    ns = sorted({p.n for p in measured})
    if results.objective.time_series:
        each = headline(results).each
        runs = "run" if ns == [1] else "runs"
        n_text = f"{ns[0]}" if len(ns) == 1 else f"{ns[0]}–{ns[-1]}"
        return n_text + (f" {runs} of {each} each" if each else f" {runs} each")
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
    """The verdict in one paragraph, built from the points, ending with each slice's
    recommendation as results.conclusion holds it (the one recommended.cnf sets).

    A sliced result (results.slices, e.g. threads) gets one judgement per slice, each
    prefixed with the slice ("threads=8: Best: 512M (1,204 tps). … threads=32: No value …").
    A steps run names the steps that gained, those to leave out and the total, per slice, then
    the servers compared.
    """
    if results.status != RunStatus.DONE:
        done = sum(p.n + p.failed for p in results.points)
        missing = sum(1 for p in results.points if p.verdict == PointVerdict.NOT_RUN)
        return (f"Incomplete run ({results.status}): {plural(done, 'measurement')} so far"
                + (f", {plural(missing, 'point')} not yet measured" if missing else "")
                + f"; no conclusion is drawn until it is finished (knoblab resume "
                f"{results.run_id}).")
    if results.steps is not None:
        return _steps_conclusion(results, results.steps)
    groups = slices(results)
    if len(groups) == 1 and not groups[0][0]:
        return _judge(results, groups[0][1])
    return " ".join(f"{name}: {_judge(results, points)}" for name, points in groups)


SHOWN_IN_A_ROW = 3  # names in a row of knoblab runs; the rest are counted


def first_few(names: list[str], shown: int = SHOWN_IN_A_ROW) -> str:
    """"a, b, c", or past `shown` the first ones and how many more: a row, not a paragraph."""
    if len(names) <= shown:
        return ", ".join(names)
    return f"{', '.join(names[:shown - 1])} and {len(names) - shown + 1} more"


def answer_text(results: Results) -> str:
    """The run's answer in a few words, for its row in `knoblab runs`: "best: 16K (0.203 s)",
    "no difference", "undecided", per slice ("threads=8: best: 512M; threads=32: no
    difference"); a steps run's steps shown to help; "" for a run not finished."""
    if results.status != RunStatus.DONE:
        return ""
    if results.steps is not None:
        parts = []
        for table in results.steps:
            gained = [_step_name(r) for r in table.rows
                      if r.step and r.verdict == StepVerdict.GAIN]
            said = (f"{FINDING_WORDS[Finding.HELPS]}: {first_few(gained)}" if gained
                    else f"no step {FINDING_WORDS[Finding.HELPS]}")
            parts.append(f"{where(table.slice)}: {said}" if table.slice else said)
        return "; ".join(parts)
    parts = []
    for name, points in slices(results):
        said = _answer(results, points)
        parts.append(f"{name}: {said}" if name else said)
    return "; ".join(parts)


def _answer(results: Results, points: list[Point]) -> str:
    """One slice's answer: its best value, or that its values do not differ."""
    measured = [p for p in points if p.verdict not in (PointVerdict.FAILED, PointVerdict.NOT_RUN)]
    best = next((p for p in measured if p.verdict.leads), None)
    if best is not None:
        # As the conclusion recommends: a leader that is not shown to help is not the answer.
        if best.verdict != PointVerdict.BEST:
            return f"keep the current value ({point_label(results, best)} not shown to help)"
        return (f"best: {point_label(results, best)} "
                f"({num(best.centre(results.objective))} {results.objective.unit})")
    if not measured:
        return "every point failed"
    if not any(p.verdict == PointVerdict.INCONCLUSIVE for p in measured):
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
            if p.verdict == PointVerdict.FAILED or series is None or series.stall_seconds is None:
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
        return p.centre(results.objective) if p.verdict != PointVerdict.FAILED else None

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
            "ceiling": "the ceiling was reached",
            "futile": "the rounds left up to the ceiling could not decide what was undecided "
                      "(each needed more than twice as many)"}


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
            f"(median over {plural(noise.starts, 'measurement')}, at most "
            f"{noise.spread_max:.0%}).")
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
        return " + ".join(f"{k}={setting_text(k, v)}" for k, v in row.change.items())
    return step_label(row).removeprefix("+ ")


def _cost_text(row: StepRow, costs: list[str]) -> str:
    """The costs, without "knob = value: " when the step's label already names that knob."""
    if len(row.change) == 1 and all(durability_knob(c) in row.change for c in costs):
        costs = [re.sub(r"^\s*[A-Za-z0-9_.]+\s*=[^:]*:\s*", "", c) for c in costs]
    return "; ".join(costs)


def _what_changes(results: Results) -> str:
    """"time" when less is better, else the metric's unit ("tps")."""
    return "time" if results.objective.direction == "minimize" else results.objective.unit


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
            lines.append(f"{head}: {step_verdict_text(results, row)[0]}; it would give up "
                         f"durability — {given_up}.")
        else:
            change = f"{signed((previous.ratio - 1) * 100, 0)}% {_what_changes(results)}" + (
                f" ({of})" if (of := unlike_levels(results)) else "")
            if row.verdict == StepVerdict.GAIN:
                lines.append(f"{head}: {change}, bought by giving up durability — {given_up}.")
            else:
                lines.append(f"{head}: {change} ({step_verdict_text(results, row)[0]}), and "
                             f"it gives up durability — {given_up}.")
    return lines


def step_notes(results: Results, table: StepsTable) -> list[str]:
    """Why a step has no number: its note, or the first error of its failed runs."""
    lines = []
    for row in table.rows:
        head = f"step {row.step} ({step_label(row)})"
        if row.note:
            lines.append(f"{head}: {row.note}.")
        elif row.verdict == StepVerdict.FAILED:
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
    verdict = f"{total_finding_text(results, table)} (p {_p(total.p_value)})"
    # the levels are the table's (medians), the change the test's (geometric means): each
    # said for what it is, the interval with its level
    level = "95%" if table.confidence is None else confidence_text(table.confidence)
    of = ", ".join(filter(None, [unlike_levels(results), f"{level} CI"]))
    return (f"{step_label(base)} → {until}: {num(base.center)} {unit} → "
            f"{num(last.center)} {unit} ({results.objective.centre}s), "
            f"{change_text(total, 0)} ({of}), {verdict}.")


def total_finding(results: Results, table: StepsTable) -> Finding | None:
    """What all the steps together showed against the base: helps or hurts when the family's
    test decided it and its interval shows it, the same when the interval shows that."""
    total = table.total
    if total is None:
        return None
    shown = finding_of(total.gain(results.objective.direction)[1],
                       results.statistics.min_effect)
    if shown in (Finding.HELPS, Finding.HURTS):
        return shown if total.significant else Finding.UNSHOWN
    return shown


def total_finding_text(results: Results, table: StepsTable) -> str:
    finding = total_finding(results, table)
    return "" if finding is None else finding_text(finding, results.statistics.min_effect)


def steps_legend(results: Results, tables: list[StepsTable], ns: list[int]) -> str:
    """What the numbers of a steps table are: the runs of each step, and the level of the
    intervals of its comparisons (which hold for the whole table at once)."""
    runs = f"{ns[0]}" if len(ns) == 1 else f"{ns[0]}–{ns[-1]}"
    levels = sorted({f"{t.confidence:.1%}".replace(".0%", "%") for t in tables
                     if t.confidence is not None})
    if levels:
        intervals = ("vs previous and vs the base show the change (of the "
                     f"{compared_levels(results)} the test compares) with an interval that "
                     "holds for the "
                     f"whole table at once ({', '.join(levels)}, Bonferroni); p "
                     "(Holm-adjusted) tests it against the step before")
    else:
        intervals = "vs previous and p (Holm-adjusted) compare it with the step before"
    changes = [c for t in tables for r in t.rows
               for c in (r.vs_previous, r.vs_base, r.alone and r.alone.vs_base, t.total) if c]
    loose = f" {WHY_NOT_BOUNDED[0].upper()}{WHY_NOT_BOUNDED[1:]}." \
        if any(not bounded(*c.ci95) for c in changes) else ""
    return (f"Each step is the {results.objective.centre} of {runs} "
            f"{'run' if runs == '1' else 'runs'} with its 95% interval; {intervals}.{loose}")


def interaction_text(results: Results, table: StepsTable) -> str:
    """The changes measured alone, multiplied, against all of them applied together; whether
    they interact only where the intervals show it (`interaction_shown`)."""
    inter = table.interaction
    if inter is None or not inter.cumulative or not inter.product_of_alone:
        return ""
    cumulative, product = inter.cumulative, inter.product_of_alone
    what = _what_changes(results)
    of = f" ({levels})" if (levels := unlike_levels(results)) else ""
    said = (f"Each change measured alone from the {base_label(table)}, multiplied together, "
            f"predicts {signed((product - 1) * 100, 0)}% {what}; applied one on top of the "
            f"other they gave {signed((cumulative - 1) * 100, 0)}%{of}")
    shown = interaction_shown(inter, results.statistics.min_effect)
    if shown is None:
        if inter.product_ci is None:
            return f"{said}: whether they interact was not tested (point estimates)."
        level = "95%" if table.confidence is None else confidence_text(table.confidence)
        return (f"{said}: whether they interact is {FINDING_WORDS[Finding.UNSHOWN]}: their "
                f"intervals ({level}, for the whole table) overlap.")
    minimize = results.objective.direction == "minimize"
    if shown == 0:
        how = (f"they add up independently (within ±{results.statistics.min_effect:.0%}, "
               "shown by their intervals)")
    elif (shown < 0) == minimize:
        how = ("together they do more than each alone predicts, shown by their intervals: "
               "they reinforce each other")
    else:
        how = ("together they do less than each alone predicts, shown by their intervals: "
               "they partly buy the same gain, or one undoes another")
    return f"{said}: {how}."


def interaction_shown(inter: Interaction, min_effect: float) -> int | None:
    """What the intervals of an interaction show, which hold together: -1 the total is below
    the product of the changes alone (its interval wholly under the product's), +1 above,
    0 the two within ±min_effect of each other whatever the truth in them; None when they do
    not show any of it (their intervals overlap, or were not kept)."""
    if inter.cumulative_ci is None or inter.product_ci is None:
        return None
    (low, high), (product_low, product_high) = inter.cumulative_ci, inter.product_ci
    if not (low > 0 and product_low > 0):
        return None
    if high < product_low:
        return -1
    if low > product_high:
        return 1
    if 1 - min_effect < low / product_high and high / product_low < 1 + min_effect:
        return 0
    return None


def _steps_judge(results: Results, table: StepsTable) -> str:
    """The conclusion for one slice of a steps run, in the words of knoblab.words."""
    rows = [r for r in table.rows if r.step]
    if not rows:
        return "No step was measured."
    findings = {r.step: step_finding(results, r) for r in rows}

    def names(verdict: StepVerdict, finding: Finding | None = None, mark: bool = False) -> str:
        # a step of no measurable effect shown to hurt is named with the losses
        return ", ".join(_step_name(r) + (f" ({GIVES_UP})" if mark and step_costs(r) else "")
                         for r in rows if (r.verdict == verdict and (
                             finding is None or findings[r.step] == finding)) or (
                             verdict == StepVerdict.LOSS and r.verdict == StepVerdict.NO_EFFECT
                             and findings[r.step] == Finding.HURTS))

    same = finding_text(Finding.SAME, results.statistics.min_effect)
    sentences = []
    gains = names(StepVerdict.GAIN, mark=True)
    sentences.append(f"Steps {FINDING_WORDS[Finding.HELPS]}: {gains}." if gains
                     else f"No step was {FINDING_WORDS[Finding.HELPS]}.")
    small = f"but not shown by {results.statistics.min_effect:.0%} or more"
    judged: tuple[tuple[StepVerdict, Finding | None, str], ...] = (
            (StepVerdict.NO_EFFECT, Finding.HELPS,
             f"{FINDING_WORDS[Finding.HELPS].capitalize()}, {small}, leave out"),
            (StepVerdict.NO_EFFECT, Finding.SAME, f"{same.capitalize()}, leave out"),
            (StepVerdict.NO_EFFECT, Finding.UNSHOWN,
             f"{FINDING_WORDS[Finding.UNSHOWN].capitalize()}, leave out"),
            (StepVerdict.LOSS, None, f"{FINDING_WORDS[Finding.HURTS].capitalize()}, leave out"),
            (StepVerdict.FAILED, None, "Failed"),
            (StepVerdict.UNAVAILABLE, None, "Not on this server"),
            (StepVerdict.CHANGES_NOTHING, None, "Changes nothing here, not run"))
    for verdict, finding, head in judged:
        found = names(verdict, finding)
        if found:
            sentences.append(f"{head}: {found}.")
    total = table.total
    if total is not None:
        gain = with_facts(gain_words(total.gain(results.objective.direction)[0],
                                     _direction(results), _rate_unit(results)),
                          [of] if (of := unlike_levels(results)) else [])
        sentences.append(f"All steps together: {gain}: {total_finding_text(results, table)}.")
    return " ".join(sentences)


def _servers_judge(results: Results) -> str:
    """One sentence per compared configuration: the best server and how much worse the rest,
    in the words of knoblab.words."""
    sentences = []
    better = "faster" if results.objective.direction == "minimize" else "better"
    slower = "slower" if results.objective.direction == "minimize" else "worse"
    same = finding_text(Finding.SAME, results.statistics.min_effect)
    for entry in results.servers_compared or []:
        rows = entry.rows
        at = where({k: v for k, v in entry.slice.items() if k != "binary"})
        head = f"Servers compared at {at_text(entry.at)}" + (f", {at}" if at else "")
        if all(r.verdict == PointVerdict.FAILED for r in rows):
            sentences.append(f"{head}: every server failed.")
            continue
        best = next((r for r in rows if r.verdict.leads), None)
        if best is None:
            alike = all(r.verdict in (PointVerdict.EQUIVALENT, PointVerdict.FAILED) for r in rows)
            sentences.append(f"{head}: the servers are {same}." if alike else
                             f"{head}: {FINDING_WORDS[Finding.UNSHOWN]} — no server is shown "
                             f"{better} than another.")
            continue
        text = f"{head}: {best.verdict} {best.binary} ({num(best.center)} " \
            f"{results.objective.unit})"
        worse = [r for r in rows if r.verdict == PointVerdict.WORSE]
        if worse:
            text += f"; shown {slower}: " + ", ".join(
                f"{r.binary} ({signed((r.ratio_to_best - 1) * 100, 0)}% "
                f"{_what_changes(results)})" for r in worse if r.ratio_to_best is not None)
        alike_ = [r.binary for r in rows if r.verdict == PointVerdict.EQUIVALENT]
        if alike_:
            text += (f"; {FINDING_WORDS[Finding.SAME]} as it (within "
                     f"±{results.statistics.min_effect:.0%}): {', '.join(alike_)}")
        undecided = [r.binary for r in rows if r.verdict == PointVerdict.INCONCLUSIVE]
        if undecided:
            text += f"; {FINDING_WORDS[Finding.UNSHOWN]}: {', '.join(undecided)}"
        sentences.append(text + ".")
    return " ".join(sentences)


def no_server_better(results: Results) -> str:
    """Under a servers' table where none was shown better than another."""
    better = "faster" if results.objective.direction == "minimize" else "better"
    return f"No server is shown {better} than another here ({FINDING_WORDS[Finding.UNSHOWN]})."


def _steps_conclusion(results: Results, tables: list[StepsTable]) -> str:
    if not tables:
        return "No step was measured."
    parts = [(f"{where(table.slice)}: " if table.slice else "") + _steps_judge(results, table)
             for table in tables]
    servers = _servers_judge(results)
    return " ".join(parts + ([servers] if servers else []))
