"""What a search found, for people (terminal) and for programs (JSON)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from knoblab import __version__, recommend
from knoblab.judging import Direction
from knoblab.literal import literal
from knoblab.records import Effect, Results, TrialOutcome, TuneResult, Validation
from knoblab.report.document import Chart, Document, table
from knoblab.report.shapes import (
    BoundNamed,
    ImportanceJSON,
    MetricNamed,
    RecommendedJSON,
    ReductionJSON,
    TrialJSON,
    TrimStep,
    TuneJSON,
)
from knoblab.report.tables import class_grid, class_notes, print_classes
from knoblab.units import format_duration, plural, setting_text, settings_text
from knoblab.vocabulary import Finding, OutcomeState, PointVerdict, ValidationVerdict
from knoblab.words import (
    FINDING_WORDS,
    NOT_BOUNDED,
    WHY_NOT_BOUNDED,
    confidence_text,
    finding_of,
    finding_text,
    gain_bounds,
    gain_interval_ends,
    gain_interval_words,
    gain_words,
)

STATES = {OutcomeState.BASELINE: "the baseline", OutcomeState.REFUSED: "refused before running",
          OutcomeState.FAILED: "the server refused it"}
NOT_RUN = (OutcomeState.REFUSED, OutcomeState.FAILED)  # a trial of these measured nothing


def direction_of(result: TuneResult) -> Direction:
    """Which way the objective is better; a result stored without its goal is read as a rate
    (its gains said as plain percents, as it said them)."""
    goal = result.goal
    return "minimize" if goal is not None and goal.metric.direction == "minimize" else "maximize"


def percent(value: float | None, direction: Direction = "maximize") -> str:
    """A gain as a table shows it (knoblab.words.gain_words): "+8.1%" for a rate, "4.8× faster
    (time −79.1%)" or "time −3.0%" for a time; "—" when there is no figure (a study stored by
    an older knoblab may hold a trial without one)."""
    return "—" if value is None else gain_words(value, direction)


def interval_cell(interval: tuple[float, float] | None, direction: Direction = "maximize"
                  ) -> str:
    """A gain's 95% interval in a table, in the gain column's terms: of the rate, or of the
    time's change ("time −80.4% to −77.8%")."""
    if interval is None:
        return "—"
    said = gain_interval_ends(interval, direction)
    return said if direction == "maximize" or said == NOT_BOUNDED else f"time {said}"


def gain_text(outcome: TrialOutcome, direction: Direction = "maximize") -> str:
    """"+8.1% (95% CI +4.0% to +12.3%)", or for a time "1.3× faster (time −23.1%; 95% CI
    −26.0% to −20.0%)": better than the baseline when it says so."""
    if outcome.gain is None or outcome.state == OutcomeState.BASELINE:
        return STATES.get(outcome.state, outcome.state)
    return gain_interval_words(outcome.gain, outcome.interval(), direction)


def unmeasured(result: TuneResult) -> str | None:
    """When the search measured no candidate (every trial the baseline, refused or failed):
    the sentence that says so, in place of a verdict on measurements there are none of."""
    if any(t.measured for t in result.trials):
        return None
    kinds = ((OutcomeState.BASELINE, "the baseline itself"),
             (OutcomeState.REFUSED, "refused before running"),
             (OutcomeState.FAILED, "refused by the server"))
    counts = [f"{n} {what}" for state, what in kinds
              if (n := sum(t.state == state for t in result.trials))]
    trials = f"of {plural(len(result.trials), 'trial')}, " + ", ".join(counts) if counts else \
        "the study has no trials"
    return (f"No candidate was measured ({trials}): nothing is known about any other "
            "configuration, so nothing is recommended and the current one stays; search more "
            "values in [tune.knobs], or give more trials ([tune] trials).")


def unsettled(result: TuneResult) -> str | None:
    """Instead of a verdict, when there is none to give: no candidate measured, or candidates
    that scored better than the baseline and none validated (another worker validates them,
    or the budget left no time for it)."""
    if (nothing := unmeasured(result)) is not None:
        return nothing
    if result.validations:
        return None
    better = sum(t.feasible and (t.score or 0.0) < 0.0 for t in result.trials)
    if not better:
        return None
    return (f"{better} trial(s) scored better than the baseline, but none is validated yet "
            "(another worker is validating them, or the budget left no time for it): nothing "
            "is recommended until one is; run knoblab tune again to see the verdicts.")


def trial_text(outcome: TrialOutcome, direction: Direction = "maximize") -> str:
    if outcome.state == OutcomeState.BASELINE:
        return "the baseline: every trial is measured against it"
    changes = settings_text(outcome.changes)
    if outcome.state in NOT_RUN:
        return f"{changes}: {STATES[outcome.state]}: {outcome.error}"
    on = f" on {outcome.fidelity}" if outcome.fidelity else \
        f" ({outcome.screened} first on a part of the workload)" if outcome.screened else ""
    if outcome.state == OutcomeState.PRUNED:
        n = len(outcome.ratios) + (0 if outcome.fidelity else outcome.screened)
        return (f"{changes}: {gain_text(outcome, direction)}{on}, stopped by the pruner after "
                f"{n} measurement{'' if n == 1 else 's'}")
    return f"{changes}: {gain_text(outcome, direction)}{on}"


STOPPED = {"trials": "its trials are done", "budget": "budget",
           "space": "every configuration of the space measured"}


def rounds_cell(t: TrialOutcome, result: TuneResult | None = None) -> str:
    """A trial's measurements: "8", "1, pruned", "8, kept" (by the pruner: `kept`), "3 on
    the first 60 s of the capture"."""
    return f"{len(t.ratios)}" + (f" on {t.fidelity}" if t.fidelity else "") + \
        (", pruned" if t.state == OutcomeState.PRUNED else "") + \
        (", kept" if result is not None and kept(t, result) else "")


def kept(t: TrialOutcome, result: TuneResult) -> bool:
    """Whether the pruner chose to measure this trial further, over others it stopped: it
    went on past its first measurement in a study where some trials were pruned."""
    return t.state == OutcomeState.SCORED and len(t.ratios) + t.screened > 1 and \
        any(other.state == OutcomeState.PRUNED for other in result.trials)


def trials_notes(result: TuneResult, shown: list[TrialOutcome]) -> list[str]:
    """What the trials table cannot say in its cells: that the intervals of the trials the
    pruner kept include the measurements it kept them on, and what "not bounded" means."""
    notes = []
    if any(kept(t, result) for t in shown):
        notes.append("kept: the pruner measured these trials further because their first "
                     "measurements were among the best; their intervals include those "
                     "measurements, so they lean in the trials' favour (the validation "
                     "measures a candidate afresh, in starts that played no part in choosing "
                     "it)")
    if any((interval := t.interval()) is not None and not all(gain_bounds(interval))
           for t in shown):
        notes.append(WHY_NOT_BOUNDED)
    return notes


def print_tune(result: TuneResult, out: Console, measured: Results | None = None) -> None:
    trials = result.trials
    scored = sorted((t for t in trials if t.measured), key=lambda t: t.score or 0.0)
    out.print(f"study {result.study}: {plural(len(trials), 'trial')} in "
              f"{format_duration(result.spent)} "
              f"(stopped: {STOPPED.get(result.stopped, result.stopped)}); "
              f"{sum(t.state in NOT_RUN for t in trials)} refused or failed",
              markup=False, highlight=False)
    goal = result.goal
    bound = None if goal is None or goal.constraint is None or goal.bounded is None else \
        goal.constraint.describe(goal.bounded.unit)
    if goal is not None:
        out.print(f"objective: {goal.name} ({goal.metric.direction})"
                  + (f", within {bound}" if bound else ""), markup=False, highlight=False)
    way = direction_of(result)
    table = Table(title=f"best trials ({TRIALS_TITLE[way]})", title_justify="left")
    table.add_column("trial", justify="right")
    table.add_column("changes from the baseline")
    table.add_column("gain", justify="right")
    table.add_column("95% CI", justify="right")
    table.add_column("rounds", justify="right")
    if bound and goal is not None and goal.constraint is not None:
        table.add_column(goal.constraint.metric, justify="right")
    for t in scored[:8]:
        interval = t.interval()
        row = [str(t.number), settings_text(t.changes), percent(t.gain, way),
               interval_cell(interval, way), rounds_cell(t, result)]
        if bound:
            row.append("—" if t.observed is None else
                       f"{t.observed:.3g}{'' if t.feasible else ' (over)'}")
        table.add_row(*row)
    if scored:
        out.print(table)
        for note in trials_notes(result, scored[:8]):
            out.print(f"{note[0].upper()}{note[1:]}.", markup=False, highlight=False)
    if result.importance:
        out.print(importance_title(result) + ":", markup=False, highlight=False)
        for i in result.importance:
            out.print(f"  {i.name}: {i.share:.0%} ({i.low:.0%} to {i.high:.0%})",
                      markup=False, highlight=False)
    elif (why := importance_note(result)) is not None:
        out.print(why, markup=False, highlight=False)
    if not result.validations:
        out.print(unsettled(result) or "No trial scored better than the baseline: keep the "
                  "current configuration.", markup=False, highlight=False)
        return
    out.print("validation (each candidate against the baseline in fresh starts, until decided; "
              "its interval at the level its verdict was decided at):",
              markup=False, highlight=False)
    for v in result.validations:
        out.print(f"  trial {v.trial.number}: {validation_text(v, result)}",
                  markup=False, highlight=False)
    chosen = result.recommended
    if chosen is None:
        out.print(nothing_shown(result), markup=False, highlight=False)
        return
    out.print(f"Validated: trial {chosen.trial.number}, {gain_validated(chosen, result)} "
              "against the current configuration.", markup=False, highlight=False)
    for line in reduction_lines(result):
        out.print(f"  {line}", markup=False, highlight=False)
    if not recommend.settings(result):
        out.print(NOTHING_SHOWN, markup=False, highlight=False)
        return
    out.print(f"Recommended: {settings_text(recommend.to_change(result))}, "
              f"{claim_said(result)}. As a my.cnf fragment (every setting in force when it "
              "was measured):", markup=False, highlight=False)
    out.print(fragment(result), markup=False, highlight=False)
    if measured is not None:  # what the gain is made of, statement class by class
        print_classes(measured, out)


TRIALS_TITLE: dict[Direction, str] = {
    "maximize": "gain against the baseline measured beside each; + is better",
    "minimize": "against the baseline measured beside each: how much faster, and the change "
                "of the time, − is better"}


def nothing_shown(result: TuneResult) -> str:
    """No validated candidate was shown to help (by min_effect or more): the current
    configuration stays."""
    return (f"No configuration was {FINDING_WORDS[Finding.HELPS]} by {result.min_effect:.0%} or "
            "more against the current one: keep it.")


NOTHING_SHOWN = ("None of its settings is recommended: none was shown to help that the "
                 "workload can judge; keep the current configuration.")


def reduction_lines(result: TuneResult) -> list[str]:
    """Why each setting of the validated candidate is recommended or left as it is: each put
    back alone (the reduction), what the check of the reduced configuration decided, and the
    settings whose cost the workload cannot see."""
    chosen, reduction, min_effect = result.recommended, result.reduction, result.min_effect
    if chosen is None:
        return []
    full = chosen.trial.changes
    lines = []
    if not was_reduced(result):
        lines.append(f"not reduced: these {len(full)} settings were shown better together, "
                     "but which of them matter was not measured (the budget left could not "
                     "hold it, or the objective is not the workload's own), so some may do "
                     "nothing; a larger budget (knoblab tune SPEC --budget ...) puts each back "
                     "alone")
    way = direction_of(result)
    for e in reduction.effects if reduction is not None else []:
        followers = [f for f, leader in result.tied.items() if recommend.name(leader) == e.name]
        alone = f" (with {', '.join(followers)}, tied to it)" if followers else ""
        # Effect.loss is the setting's gain to the recommendation (what putting it back loses).
        lines.append(f"{e.name} put back alone{alone}: its gain to the recommendation, "
                     f"{gain_interval_words(e.loss, e.ci95, way, confidence=e.confidence)}: "
                     f"{effect_words(e, result)}")
    if reduction is not None:
        reduced = settings_text(recommend.shown(full, reduction.effects)) or \
            "the current configuration"
        if reduction.grouped:
            lines.append(f"its {len(full)} settings put back in groups, the least important "
                         "first by the search's trials, each group with those before it:")
        if reduction.trim_run_id is not None and not reduction.grouped:
            lines.append(
                (f"the full recommendation was shown better than {reduced} alone (by "
                 f"{min_effect:.0%} or more)" if reduction.check_run_id is not None else
                 "no setting's effect is measurable alone, and the validation showed them "
                 "better together") + "; put back one by one, the least important first:")
        if reduction.trim_run_id is not None:
            # Each step asks whether putting one more back hurts, against the best of them.
            words = {PointVerdict.WORSE: f"{FINDING_WORDS[Finding.HURTS]} (worse than the best)",
                     PointVerdict.EQUIVALENT: f"{FINDING_WORDS[Finding.SAME]} as the best "
                                              f"(within ±{min_effect:.0%})",
                     **{v: f"the {v}" for v in PointVerdict if v.leads}}
            otherwise = f"{FINDING_WORDS[Finding.UNSHOWN]} against the best"
            lines.extend(f"  without {name} too: {words.get(verdict, otherwise)}"
                         for name, verdict in reduction.trim_steps)
            if reduction.rest_run_id is not None:
                lines.append(f"  then {', '.join(reduction.rest)}, which no step put back, "
                             "put back from what the steps chose: "
                             + ("worse: kept" if reduction.rest_verdict == PointVerdict.WORSE
                                else "not shown worse: left as they are"))
            lines.append(
                "each step back was worse than the best: all of it is recommended"
                if reduction.kept == full
                else f"{', '.join(reduction.trimmed)} left as they are (not shown to help): "
                f"{settings_text(reduction.kept)} is recommended")
        elif reduction.check_run_id is None:
            if len(full) > 1 and not any(e.measurable for e in reduction.effects):
                lines.append("no setting's effect is measurable alone, and the validation "
                             "showed them better together: they are recommended together")
        elif reduction.kept == full:
            lines.append(f"the full recommendation was shown better than {reduced} alone (by "
                         f"{min_effect:.0%} or more): all of it is recommended")
        elif reduction.equivalent:
            lines.append(f"without the others, {reduced} was "
                         f"{FINDING_WORDS[Finding.SAME]} as the full recommendation (within "
                         f"±{min_effect:.0%}): only it is recommended")
        else:
            lines.append(f"the full recommendation was not shown better than {reduced} alone "
                         f"(by {min_effect:.0%} or more): a change must be shown to help, so "
                         f"only {reduced} is recommended")
    for name, why in recommend.unseen(result).items():
        lines.append(f"{name} = {setting_text(name, full.get(name, ''))} is not recommended, "
                     "whatever it "
                     f"measured: {why}; this workload cannot see that cost, so leave it as it "
                     f"is ({setting_text(name, result.baseline.get(name, 'the default'))})")
    return lines + claim_lines(result)


def effect_finding(effect: Effect, min_effect: float) -> Finding:
    """What putting a setting back alone showed of it, in knoblab.words' terms. `loss` is the
    setting's gain to the recommendation (+0.05: the recommendation is 5% better with it), so
    an interval wholly below zero shows that it hurts. "Shown to help" is the reduction's
    decision (significant over all its settings, by min_effect or more), which keeps it; a
    setting not kept is said as its interval shows it, never more."""
    if effect.measurable:
        return Finding.HELPS
    return finding_of(effect.ci95, min_effect)


def effect_words(effect: Effect, result: TuneResult) -> str:
    """What the reduction found of a setting, and what becomes of it: each word agrees with
    the interval said beside it (knoblab.words.agrees)."""
    min_effect = result.min_effect
    finding = effect_finding(effect, min_effect)
    if finding == Finding.HELPS and effect.measurable:
        return FINDING_WORDS[Finding.HELPS]
    current = result.baseline.get(effect.name, "the default")
    left = f"leave it as it is ({setting_text(effect.name, current)})"
    if finding == Finding.HELPS:  # above zero, but not by what a change must be shown to bring
        return (f"{FINDING_WORDS[Finding.HELPS]}, but not shown to bring {min_effect:.0%} or "
                f"more ([statistics] min_effect): {left}")
    if finding == Finding.UNSHOWN:
        return f"{FINDING_WORDS[Finding.UNSHOWN]} (a change must be shown to help): {left}"
    return f"{finding_text(finding, min_effect)}: {left}"


def claim_said(result: TuneResult) -> str:
    """The gain a recommendation carries, in words: its own against the current
    configuration, or the validated candidate's said to be that (`recommend.claim`)."""
    chosen, own = result.recommended, recommend.claim(result)
    if own is not None:
        return f"{gain_validated(own, result)} against the current configuration"
    assert chosen is not None
    return (f"its own gain not measured (the {gain_validated(chosen, result)} validated is "
            f"trial {chosen.trial.number}'s, with all its settings)")


def claim_lines(result: TuneResult) -> list[str]:
    """When what is recommended is not the validated candidate (the reduction dropped some of
    its settings): what was measured of it as itself, or that nothing was, and that the
    validated gain is then another configuration's."""
    chosen, own = result.recommended, recommend.claim(result)
    unconfirmed = None if result.reduction is None else result.reduction.unconfirmed
    if chosen is not None and unconfirmed is not None and result.confirmation is not None:
        return [f"{settings_text(recommend.searched(unconfirmed)) or 'nothing'}, the "
                "reduction's choice, measured as itself against the current configuration: "
                f"{validation_text(result.confirmation, result)}; not shown better, so trial "
                f"{chosen.trial.number} is recommended whole, as its validation showed it "
                "(which of its settings matter was not decided in the budget: some may do "
                "nothing)"]
    if chosen is None or own is chosen:
        return []
    reduced = settings_text(recommend.searched(recommend.changes(result)))
    way = direction_of(result)
    if own is not None and own.trial.changes == chosen.trial.changes:
        return [f"{reduced}, the recommendation, measured again against the current "
                "configuration, in a run that played no part in choosing it (its validation "
                f"was the best of {len(result.validations)}, and so the luckiest): "
                f"{validation_text(own, result)}; that is the gain claimed, not the "
                f"{percent(chosen.gain, way)} its validation measured"]
    if own is not None:
        how = f"the validation of trial {own.trial.number}, exactly that configuration" \
            if any(v.run_id == own.run_id for v in result.validations) else "a run of its own"
        return [f"{reduced}, the recommendation, measured as itself against the current "
                f"configuration ({how}): {validation_text(own, result)}; that is its gain, "
                f"not trial {chosen.trial.number}'s {percent(chosen.gain, way)} with all its "
                "settings"]
    return [f"{reduced}, the recommendation, was not measured as itself against the current "
            f"configuration (the study's budget left could not hold that run): the "
            f"{percent(chosen.gain, way)} validated is trial {chosen.trial.number}'s, with all "
            "its settings, and its own gain may be less; a larger budget (knoblab tune SPEC "
            "--budget ...) measures it"]


def was_reduced(result: TuneResult) -> bool:
    """Whether each setting of the recommendation was put back alone to see whether it matters
    (a recommendation of one setting needs no reduction: its validation shows it)."""
    chosen = result.recommended
    return chosen is None or len(chosen.trial.changes) < 2 or result.reduction is not None


def validation_finding(v: Validation, min_effect: float) -> Finding:
    """What a validation showed, in knoblab.words' terms: its verdict, or, when its test did
    not decide (or decided only a gain under min_effect), what its interval shows. Its
    interval is the one at the verdict's own level (Validation.confidence), so the two agree."""
    decided = {ValidationVerdict.BETTER: Finding.HELPS, ValidationVerdict.VIOLATES: Finding.HELPS,
               ValidationVerdict.WORSE: Finding.HURTS, ValidationVerdict.SAME: Finding.SAME}
    return decided.get(v.verdict) or finding_of(v.ci95, min_effect)


def validation_words(v: Validation, min_effect: float) -> str:
    """The verdict of a validation, in words that agree with its interval."""
    finding = validation_finding(v, min_effect)
    if v.verdict == ValidationVerdict.VIOLATES:
        return f"{FINDING_WORDS[Finding.HELPS]}, but outside the constraint"
    if v.verdict == ValidationVerdict.UNDECIDED and finding == Finding.HELPS:
        return (f"{FINDING_WORDS[Finding.HELPS]}, but not shown to bring {min_effect:.0%} or "
                "more ([statistics] min_effect), the least a recommendation needs")
    if finding == Finding.UNSHOWN:
        return (f"{FINDING_WORDS[Finding.UNSHOWN]} (more rounds could decide it: a larger budget, "
                "knoblab tune SPEC --budget ...)")
    return finding_text(finding, min_effect)


def validation_text(v: Validation, result: TuneResult) -> str:
    """"+25.4% (98.3% CI +23.7% to +27.1%), shown to help (3 rounds)": the gain, with its
    interval at the level the verdict was decided at, and the verdict."""
    from knoblab.machine import BUSY_BESIDE

    loud = f"; beside other programs keeping {v.others_load:.1f} core(s) busy, twice" \
        if v.others_load is not None and v.others_load > BUSY_BESIDE else ""
    return (f"{gain_validated(v, result)}, {validation_words(v, result.min_effect)} "
            f"({plural(v.rounds, 'round')}{loud})")


def gain_validated(v: Validation, result: TuneResult | None = None) -> str:
    """A validated gain with its interval, at the level its verdict was decided at, in the
    objective's terms (a time's: how much faster)."""
    if v.gain is None:
        return "no gain measured"
    way = "maximize" if result is None else direction_of(result)
    unit = "" if result is None or result.goal is None or way == "minimize" else \
        result.goal.metric.unit
    return gain_interval_words(v.gain, v.ci95, way, unit, v.confidence)


def mycnf(changes: dict[str, str]) -> str:
    """A [mysqld] fragment setting `changes`, one line each: a value holding a line break must
    not become a setting of its own."""
    return "[mysqld]\n" + "\n".join(literal(f"{k} = {setting_text(k, v)}")
                                     for k, v in changes.items())


def fragment(result: TuneResult) -> str:
    """The [mysqld] fragment to apply: the changes shown to help with the settings tied to
    them, then [server.config], each setting as it was in force when measured; the settings
    left as they are, commented."""
    change = recommend.to_change(result)
    follows = {recommend.name(f): recommend.name(leader) for f, leader in result.tied.items()}
    lines = ["[mysqld]"]
    for k, v in change.items():
        if k in follows:
            lines.append(f"# {k} follows {follows[k]} ([tie]): at its value in every "
                         "measurement")
        lines.append(f"{k} = {setting_text(k, v)}")
    base = {k: v for k, v in recommend.settings(result).items() if k not in change}
    if base:
        lines.append("# [server.config]: in force in every measurement, the current "
                     "configuration's too")
        lines += [f"{k} = {setting_text(k, v)}" for k, v in base.items()]
    left = recommend.left_as_they_are(result)
    if left:
        lines.append(f"# left as they are (not shown to help, or a cost this workload cannot "
                     f"see): {', '.join(left)}")
    # one line each: a value holding a line break must not become a setting of its own
    return "\n".join(literal(line) for line in lines)


def tune_json(result: TuneResult) -> dict[str, Any]:
    """tune.json (`TuneJSON`)."""
    chosen, goal = result.recommended, result.goal
    claimed = recommend.claim(result) or chosen
    return TuneJSON(
        study=result.study, space=[d.describe() for d in result.space.dimensions],
        baseline=result.baseline, spent_seconds=round(result.spent, 1), stopped=result.stopped,
        objective=None if goal is None else MetricNamed(goal.name, goal.metric.unit,
                                                        goal.metric.direction),
        constraint=None if goal is None or goal.constraint is None else BoundNamed(
            goal.constraint.metric, goal.constraint.limit,
            "max" if goal.constraint.upper else "min"),
        trials=[TrialJSON(t.number, t.state, t.changes, t.gain, t.interval(), kept(t, result),
                          len(t.ratios), list(t.runs), t.error, t.observed, t.feasible)
                for t in result.trials],
        validations=[{**v.to_json(), "trial": v.trial.number,
                      "finding": validation_finding(v, result.min_effect),
                      "said": validation_text(v, result)} for v in result.validations],
        recommended=None if chosen is None else RecommendedJSON(
            trial=chosen.trial.number, settings=recommend.settings(result),
            changes=recommend.to_change(result), searched=chosen.trial.changes,
            left_as_they_are=recommend.left_as_they_are(result),
            reduced=was_reduced(result), not_recommended=recommend.unseen(result),
            gain=None if claimed is None else claimed.gain,
            ci95=None if claimed is None else claimed.ci95,
            confidence=None if claimed is None else claimed.confidence,
            said=claim_said(result), verdict=None if claimed is None else claimed.verdict,
            rounds=None if claimed is None else claimed.rounds,
            run_id=None if claimed is None else claimed.run_id,
            own_gain=recommend.claim(result) is not None, mycnf=fragment(result)),
        reduction=None if (r := result.reduction) is None else ReductionJSON(
            run_id=r.run_id, check_run_id=r.check_run_id, equivalent=r.equivalent,
            kept=r.kept, trimmed=list(r.trimmed), grouped=r.grouped,
            trim_run_id=r.trim_run_id,
            trim_steps=[TrimStep(name, verdict) for name, verdict in r.trim_steps],
            rest=list(r.rest), rest_run_id=r.rest_run_id, rest_verdict=r.rest_verdict,
            unconfirmed=r.unconfirmed,
            effects=[{**e.to_json(), "finding": effect_finding(e, result.min_effect),
                      "said": effect_words(e, result)} for e in r.effects]),
        importance=[ImportanceJSON(i.name, i.share, i.low, i.high) for i in result.importance],
        importance_basis=result.importance[0].basis if result.importance else None,
        importance_note=None if result.importance else importance_note(result),
    ).to_json()


def tune_cnf(result: TuneResult) -> str:
    """recommended.cnf of a search: the reduced recommendation with its validated gain, or no
    setting and why."""
    head = f"# knoblab tune, study {literal(result.study)}"
    chosen = result.recommended
    if (nothing := unsettled(result)) is not None:
        return f"{head}: {nothing}\n[mysqld]\n"
    if chosen is None:
        nothing = nothing_shown(result)
        return f"{head}: {nothing[0].lower()}{nothing[1:]}\n[mysqld]\n"
    said = [f"{head}: {claim_head(result)}."]
    said += [f"# {line}" for line in reduction_lines(result)]
    if not recommend.settings(result):
        return "\n".join(literal(line) for line in [*said, f"# {NOTHING_SHOWN}"]) + \
            "\n[mysqld]\n"
    return "\n".join(literal(line) for line in said) + "\n" + fragment(result) + "\n"


def claim_head(result: TuneResult) -> str:
    """recommended.cnf's first words on its gain: the recommendation's own measurement, or the
    validated candidate's said to be another configuration's."""
    chosen, own = result.recommended, recommend.claim(result)
    assert chosen is not None
    validated = (f"trial {chosen.trial.number}, {gain_validated(chosen, result)} against the "
                 f"current configuration in a fresh validation ({plural(chosen.rounds, 'round')})")
    if own is chosen:
        return validated
    reduced = settings_text(recommend.searched(recommend.changes(result)))
    if own is not None:
        return (f"trial {chosen.trial.number} reduced to {reduced}, "
                f"{gain_validated(own, result)} against the current configuration, measured "
                f"as itself ({plural(own.rounds, 'round')})")
    return (f"{validated}, with all its settings; what is recommended is reduced to "
            f"{reduced}, whose own gain was not measured")


def tune_document(result: TuneResult, charts: list[Path], spec: str,
                  machine: dict[str, str], measured: Results | None = None) -> Document:
    """The search as a shareable report: the same sections as a run's; `measured`, the run
    the recommendation's gain comes from, adds its statement classes (a replayed log's)."""
    goal = result.goal
    aim = "the best result" if goal is None else \
        f"the {'lowest' if goal.metric.direction == 'minimize' else 'highest'} {goal.name}"
    names = ", ".join(d.name for d in result.space.dimensions)
    chosen = result.recommended
    if (nothing := unsettled(result)) is not None:
        conclusion = nothing
    elif chosen is None:
        conclusion = nothing_shown(result)
    elif not recommend.settings(result):
        conclusion = (f"Trial {chosen.trial.number} was validated, "
                      f"{gain_validated(chosen, result)}. {NOTHING_SHOWN}")
    else:
        # Its gain as the recommendation carries it (recommend.claim): its own, or said to
        # be the validated candidate's.
        conclusion = (f"Recommended: {settings_text(recommend.to_change(result))}, "
                      f"{claim_said(result)}" +
                      (", measured again in fresh server starts after the search."
                       if recommend.claim(result) is not None else "."))
    scored = sorted((t for t in result.trials if t.measured), key=lambda t: t.score or 0.0)
    way = direction_of(result)
    trials = replace(table(f"Trials ({TRIALS_TITLE[way]})",
                           ["trial", "changes from the baseline", "gain", "95% CI", "rounds"],
                           [[str(t.number), settings_text(t.changes), percent(t.gain, way),
                             interval_cell(t.interval(), way), rounds_cell(t, result)]
                            for t in scored],
                           [True, False, True, True, True]),
                     notes=[f"{note[0].upper()}{note[1:]}." for note in
                            trials_notes(result, scored)])
    tables = [trials]
    if result.validations:
        tables.append(table("Validation (each candidate against the baseline, until decided; "
                            "its interval at the level its verdict was decided at)",
                            ["trial", "changes", "gain [interval]", "rounds", "verdict"],
                            [[str(v.trial.number), settings_text(v.trial.changes),
                              gain_validated(v, result), str(v.rounds),
                              validation_words(v, result.min_effect)]
                             for v in result.validations],
                            [True, False, True, True, False], "finding"))
    if result.importance:
        title = importance_title(result)
        tables.append(table(title[0].upper() + title[1:], ["setting", "share", "range"],
                            [[i.name, f"{i.share:.0%}", f"{i.low:.0%} to {i.high:.0%}"]
                             for i in result.importance], [False, True, True]))
    importance_missing = None if result.importance else importance_note(result)
    classes = None if measured is None else class_grid(measured)
    if classes is not None and measured is not None:
        tables.append(replace(table(classes.title, classes.headers,
                                    [[cell.plain for cell in row] for row in classes.rows],
                                    classes.numeric, "class"), notes=class_notes(measured)))
    refused = [trial_text(t) for t in result.trials if t.state in NOT_RUN]
    return Document(
        title=f"knoblab tune — study {result.study}",
        question=f"Which values of {names} give {aim}?",
        partial=None,  # a search ends at its trials or its budget: what it found is final
        conclusion=conclusion,
        recommended=tune_cnf(result),
        tables=tables,
        charts=[Chart(path, path.stem.replace("-", " ")) for path in charts],
        evidence=reduction_lines(result) + ([importance_missing] if importance_missing else []),
        safety=refused,
        noise=[f"{plural(len(result.trials), 'trial')} in {format_duration(result.spent)}; "
               "every trial's "
               "gain is a ratio to the baseline measured beside it, so that the machine's "
               "drift cancels; the pruner stops most trials after their first measurement, and "
               "the ones it keeps are measured on several starts."],
        warnings=[],
        reproduce=[("study", result.study), ("knoblab", __version__),
                   *((name, machine.get(name, "not recorded")) for name in
                     ("cpu", "cores", "caches", "memory", "disk", "kernel", "virtualisation",
                      "server"))],
        spec=spec,
        command=f"knoblab tune SPEC   # the spec below, study {result.study}",
    )


def ablation_interval(result: TuneResult) -> str:
    """What the ablation's intervals are: each setting's own measurement's, at the level of
    the run that put them back (its intervals hold for all its settings at once): "98.3%
    interval"."""
    levels = {e.confidence for e in result.reduction.effects} if result.reduction else set()
    return f"{confidence_text(levels.pop())} interval" if len(levels) == 1 else \
        "the interval of its measurement"


def importance_title(result: TuneResult) -> str:
    """What the importance shown is, in words: the ablation's shares when the recommendation
    was reduced, else a description of the search (fANOVA), said to be one."""
    if result.importance and result.importance[0].basis == "ablation":
        return ("what each change contributes (its share of the gain measured with each "
                f"setting of the recommendation put back alone; {ablation_interval(result)})")
    return ("how the search's trials varied (fANOVA: each setting's share of the variation in "
            "gain over the trials, a description of the search, not a measured effect; 10th to "
            "90th percentile over resamples)")


def importance_note(result: TuneResult) -> str | None:
    """When no importance is shown: the one line that says why (knoblab.search.importance
    says what each evaluator needs); None when there is nothing to explain (nothing was
    measured, said elsewhere)."""
    from knoblab.search.importance import missing  # lazily: the report reads records

    if result.importance or unmeasured(result) is not None:
        return None
    return missing(result)
