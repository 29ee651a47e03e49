"""What is shown to help: the search's findings checked with the full statistics before
anything is recommended. Its best candidates are measured again against the baseline, in fresh
starts, until decided (validation); then each setting of the best one is put back alone, to see
which ones matter, and the configuration without those that do not is checked to do as well
(reduction); when it does not, or when none shows alone, the others are put back one by one,
the least important first, and only those needed stay (trim). A recommendation reduced so is
then measured as itself against the baseline (confirmation; by another candidate's validation
where that measured exactly it): the gain it carries is its own.
The burden of proof lives here, and only here."""

from __future__ import annotations

import dataclasses
import math
import statistics
import time
from collections.abc import Mapping, Sequence
from typing import Any, cast

from knoblab import recommend
from knoblab.errors import BudgetTooShort
from knoblab.machine import BUSY_BESIDE, OthersLoad
from knoblab.records import Effect, Reduction, TrialOutcome, Validation, best_shown
from knoblab.search.loop import Search, ties
from knoblab.spec import Spec
from knoblab.units import format_duration, settings_text
from knoblab.vocabulary import (
    Finding,
    OutcomeState,
    PointVerdict,
    StopReason,
    TrialState,
    ValidationVerdict,
)
from knoblab.words import finding_of
from knoblab.workloads.base import Rounds

# Of the budget left after the search: the share for validating its best candidates (the
# rest reduces the recommendation, then confirms it).
VALIDATION_SHARE = 0.6
# Of the budget left after validating: the share kept for confirming a reduced recommendation
# against the baseline (the reduction has the rest, and what it leaves unspent).
CONFIRMATION_SHARE = 0.25


def check(search: Search, outcomes: list[TrialOutcome], budget: float | None
          ) -> tuple[list[Validation], Reduction | None, Validation | None]:
    """The search's findings checked: its best candidates validated (VALIDATION_SHARE of the
    budget left), then the recommendation reduced, then, when the reduction dropped some of
    the candidate's settings, what is recommended measured as itself (`confirm`)."""
    began = time.monotonic()

    def left() -> float | None:
        return _left(budget, began)

    validations = validate(search, outcomes, None if budget is None
                           else budget * VALIDATION_SHARE)
    chosen = best_shown(validations)
    if chosen is None and budget is not None:
        # What the checks after them would have had (they run only for a candidate shown to
        # help) goes to the validations their share stopped undecided, keeping those
        # checks' part of it should one be shown now.
        validations = extend(search, validations, (left() or 0.0) * VALIDATION_SHARE)
        chosen = best_shown(validations)
    if chosen is None:
        return validations, None, None
    learn_cost(search, [v.run_id for v in validations])
    reduction = None
    if len(chosen.trial.changes) >= 2:
        share = left()
        share = None if share is None else share * (1 - CONFIRMATION_SHARE)
        try:
            reduction = reduce(search, chosen, outcomes, share) \
                if alone_fits(search, chosen, share) else halve(search, chosen, outcomes, share)
        except BudgetTooShort as exc:
            if share is None:
                raise
            search.listener.message(f"the recommendation is not reduced: {short(exc, share)}")
    wanted = recommend.searched(recommend.decided(chosen, reduction))
    # Chosen as the best of several validations, its own validation is the luckiest of them
    # (the winner's curse): the gain claimed is measured again, in a run that played no part
    # in choosing it. So is a reduced recommendation, unless another candidate's validation
    # measured exactly it: that one lost to `chosen`, so its gain, if anything, reads low.
    chosen_among = len(validations) > 1
    confirmation = confirm(search, chosen, wanted, left(), chosen_among, validations)
    if reduction is not None and confirmation is not None and \
            wanted != chosen.trial.changes and \
            confirmation.verdict != ValidationVerdict.BETTER:
        # The reduction's choice, measured as itself, was not shown to help: what was shown
        # is the validated candidate, whole (which of its settings matter stays undecided).
        search.listener.message(
            f"{settings_text(wanted) or 'the baseline'} was not shown better than the baseline "
            f"as itself: trial {chosen.trial.number} is recommended whole, as validated")
        reduction = dataclasses.replace(reduction, kept=dict(chosen.trial.changes),
                                        unconfirmed=dict(reduction.kept))
    return validations, reduction, confirmation


def confirm(search: Search, chosen: Validation, wanted: dict[str, str],
            budget: float | None, chosen_among: bool, validations: Sequence[Validation] = ()
            ) -> Validation | None:
    """What is recommended (`wanted`, the searched settings) measured against the baseline in
    a run of its own, like a validation's, whose figures played no part in choosing it: when
    it is not the validated candidate `chosen` (the reduction dropped some of its settings),
    or when `chosen` was picked as the best of several validations. Where another of the
    `validations` measured exactly `wanted`, that run is its measurement (`measured_before`).
    None when there is nothing to confirm, or the budget left cannot hold that run (said)."""
    if not wanted or (wanted == chosen.trial.changes and not chosen_among):
        return None
    if wanted != chosen.trial.changes:
        before = measured_before(search, chosen, wanted, budget, validations)
        if before is not None:
            return before
    why = "for its own gain" if wanted != chosen.trial.changes else \
        "in fresh starts: its validation was the best of several, and so the luckiest"
    search.listener.message(f"confirming the recommendation: {settings_text(wanted)} against "
                            f"the baseline, {why}")
    what = f"trial {chosen.trial.number} reduced to {settings_text(wanted)}" \
        if wanted != chosen.trial.changes else f"trial {chosen.trial.number} confirmed"
    check_ = check_spec(search.checking, what, {}, [wanted], budget)
    try:
        run_id, load = run_quietly(search, check_)
    except BudgetTooShort as exc:
        if budget is None:
            raise
        search.listener.message(
            "the recommendation's own gain is not measured (the gain said is trial "
            f"{chosen.trial.number}'s, with all its settings): {short(exc, budget)}"
            if wanted != chosen.trial.changes else
            "the recommendation is not measured again (the gain said is its validation's, "
            f"the best of several): {short(exc, budget)}")
        return None
    config = {**chosen.trial.config, **{k: search.baseline[k] for k in chosen.trial.changes
                                        if k not in wanted}}
    reduced = TrialOutcome(chosen.trial.number, config, dict(wanted), OutcomeState.SCORED, None,
                           [], (run_id,))
    return _verdict(search, reduced, run_id, 1, load)


def measured_before(search: Search, chosen: Validation, wanted: dict[str, str],
                    budget: float | None, validations: Sequence[Validation]
                    ) -> Validation | None:
    """The reduction's choice `wanted` measured as itself by a validation of the search's
    own candidate with exactly those settings (a search of few settings often has one): its
    run, which played no part in choosing `wanted`, is the confirmation, as decided, or, where
    its share of the budget stopped it undecided, going on with `budget` (its sequential
    test where it stopped, its rounds so far counted, as `extend` does). None where no
    validation measured `wanted`, or its run stopped for another reason."""
    from knoblab import runner

    same = next((v for v in validations if v is not chosen and v.trial.changes == wanted),
                None)
    if same is None:
        return None
    reduced = dataclasses.replace(same.trial, number=chosen.trial.number)
    if same.verdict != ValidationVerdict.UNDECIDED:
        search.listener.message(
            f"the recommendation, {settings_text(wanted)}, was measured as itself by the "
            f"validation of trial {same.trial.number}: {same.verdict}")
        return dataclasses.replace(same, trial=reduced)
    stopped = search.store.run(same.run_id)["info"].get("stopped") or {}
    spent = float(stopped.get("spent") or 0.0)
    if stopped.get("reason") != StopReason.BUDGET or budget is None or \
            budget < 2 * spent / max(1, same.rounds):
        return None
    search.listener.message(
        f"confirming the recommendation: {settings_text(wanted)} against the baseline, going "
        f"on with the validation of trial {same.trial.number}, which measured exactly it "
        f"(stopped undecided after {same.rounds} rounds), for {format_duration(budget)} more")
    family = len(validations)
    runner.extend_run(same.run_id, _validation_spec(search, same.trial, family, spent + budget),
                      spent + budget, search.store, search.home, search.quiet,
                      search.open_servers)
    return _verdict(search, reduced, same.run_id, family, same.others_load)


def run_quietly(search: Search, spec: Spec) -> tuple[str, float]:
    """A run whose figures a claim comes from, with the load other programs put on the
    machine meanwhile: a run beside other load (a test suite, a backup, another benchmark)
    says so and is measured again, once; the run kept is the last, with its load noted."""
    for attempt in (1, 2):
        load = OthersLoad()
        run_id = search.run(spec)
        cores = load.end()
        search.store.update_info(run_id, others_load=round(cores, 3))
        if cores <= BUSY_BESIDE:
            return run_id, cores
        search.listener.message(
            f"warning: {spec.name.partition(': ')[2]} ran beside other programs keeping "
            f"{cores:.1f} core(s) busy (more than {BUSY_BESIDE}); "
            + ("measuring it again" if attempt == 1 else
               "its figures stand as measured, and say so: measure on a quiet machine"))
        if attempt == 1:
            spec = dataclasses.replace(spec, name=f"{spec.name}, again")
    return run_id, cores


def short(exc: BudgetTooShort, left: float | None) -> str:
    """Why a check was skipped, in the search's terms: its budget is the study's."""
    return (f"the study's budget left for it ({format_duration(left or 0.0)}) cannot hold the "
            f"rounds it needs (at least {format_duration(exc.needed)}); give the study a "
            "larger budget (knoblab tune SPEC --budget ...)")


def validate(search: Search, outcomes: list[TrialOutcome], budget: float | None
             ) -> list[Validation]:
    """The best few distinct candidates that scored better than the baseline (and within
    the constraint), each re-run against it until decided. A search keeps the luckiest of
    many noisy scores; a fresh run of it says how much of that luck was real."""
    # Those measured in full first (the pruner kept them, rung after rung); then those it
    # stopped (a trial stopped early, before its rung had rivals enough, may still be good).
    ranked = sorted((o for o in outcomes if (o.feasible or o.state == OutcomeState.PRUNED and
                                             (o.violation or 0.0) <= 0.0)
                     and (o.score or 0.0) < 0.0),
                    key=lambda o: (o.state == OutcomeState.PRUNED, o.score or 0.0))
    chosen: list[TrialOutcome] = []
    for outcome in ranked:
        if all(outcome.changes != c.changes for c in chosen):
            chosen.append(outcome)
        if len(chosen) == search.options.validate:
            break
    expected = search.checking.workload.rounds.expected
    if budget is not None and expected:
        # No more candidates than the budget holds the first rounds of: one validated is
        # worth more than three refused.
        chosen = chosen[:max(1, int(budget // (Rounds().floor * 2 * expected)))]
    done: list[Validation] = []
    for number, outcome in enumerate(chosen, start=1):
        search.listener.message(f"validating {number} of {len(chosen)}: trial "
                                f"{outcome.number} ({settings_text(outcome.changes)})")
        share = None if budget is None else budget / len(chosen)
        check = _validation_spec(search, outcome, len(chosen), share)
        try:
            run_id, load = run_quietly(search, check)
        except BudgetTooShort as exc:
            if share is None:
                raise
            search.listener.message(f"no validation: {short(exc, share)}")
            break
        done.append(_verdict(search, outcome, run_id, len(chosen), load))
    return done


def extend(search: Search, validations: list[Validation], budget: float
           ) -> list[Validation]:
    """The validations that their budget stopped undecided, each given more rounds (its run
    resumed, its sequential test going on where it stopped), the largest gain first, sharing
    `budget`; those decided by their test, or stopped as futile, are left as they are."""
    from knoblab import runner

    stopped = {v.run_id: search.store.run(v.run_id)["info"].get("stopped") or {}
               for v in validations if v.verdict == ValidationVerdict.UNDECIDED}
    waiting = sorted((v for v in validations if stopped.get(v.run_id, {}).get("reason")
                      == StopReason.BUDGET), key=lambda v: -(v.gain or 0.0))
    began, found = time.monotonic(), list(validations)
    for number, v in enumerate(waiting):
        share = (budget - (time.monotonic() - began)) / (len(waiting) - number)
        # A round is the baseline and the candidate, a start each where they need one.
        spent = float(stopped[v.run_id].get("spent") or 0.0)
        if share < 2 * spent / max(1, v.rounds):
            break
        search.listener.message(
            f"validation of trial {v.trial.number} stopped undecided after {v.rounds} "
            f"rounds, at its share of the budget: going on for {format_duration(share)} "
            "more, the time the checks after it need only for a candidate shown to help")
        runner.extend_run(v.run_id, _validation_spec(search, v.trial, len(validations),
                                                     spent + share),
                          spent + share, search.store, search.home, search.quiet,
                          search.open_servers)
        found[found.index(v)] = _verdict(search, v.trial, v.run_id, len(validations),
                                         v.others_load)
    return found


def _validation_spec(search: Search, outcome: TrialOutcome, family: int,
                     budget: float | None) -> Spec:
    """The run validating `outcome` against the baseline, α shared among `family`."""
    # Its ceiling stays the default's: a larger one spreads the sequential boundaries over
    # more looks and decides a clear gain later (a capture's 1.7x is decided in 3 rounds).
    return check_spec(search.checking, f"validation of trial {outcome.number}", {},
                      [outcome.changes], budget, alpha=search.spec.statistics.alpha / family,
                      sized=False)


def _verdict(search: Search, outcome: TrialOutcome, run_id: str, family: int,
             load: float | None = None) -> Validation:
    """The candidate's verdict against the baseline in run `run_id`, with the gain's interval
    at the level that verdict was decided at. A validation shares alpha among the `family` of
    candidates validated (Bonferroni), and its rounds until decided test at each look at a
    sequential boundary below that: a 95% interval beside it could lie above zero while the
    verdict, rightly at its level, is undecided. So the interval kept (and shown, with its
    level) is the one at the verdict's own level, and a verdict that interval does not bear
    out (a test on another scale than the interval's) is undecided: the words never claim
    more than the interval shown, nor the opposite of it."""
    from knoblab.results import build_results

    ratios = search.ratios(run_id)[0].get(1, [])
    again = TrialOutcome(outcome.number, outcome.config, outcome.changes, OutcomeState.SCORED,
                         statistics.fmean(ratios) if ratios else None, ratios, (run_id,))
    margin = search.spec.statistics.min_effect
    if search.goal.primary:
        results = build_results(search.store, run_id)
        base, candidate = results.points[:2]
        rounds = results.rounds
        level = rounds.level_worse if rounds is not None and rounds.level_worse is not None \
            else results.statistics.alpha
        interval = again.interval(1 - level)
        verdict = (ValidationVerdict.BETTER if base.verdict == PointVerdict.WORSE else
                   ValidationVerdict.WORSE if candidate.verdict == PointVerdict.WORSE else
                   ValidationVerdict.SAME
                   if PointVerdict.EQUIVALENT in (base.verdict, candidate.verdict)
                   else ValidationVerdict.UNDECIDED)
    else:
        # Another metric than the one the run's verdicts judge: its paired interval.
        level = search.spec.statistics.alpha / family
        interval = again.interval(1 - level)
        verdict = (ValidationVerdict.UNDECIDED if interval is None else
                   ValidationVerdict.BETTER if interval[0] > 0 and (again.gain or 0.0) >= margin
                   else ValidationVerdict.WORSE if interval[1] < 0 else
                   ValidationVerdict.SAME if -margin < interval[0] and interval[1] < margin
                   else ValidationVerdict.UNDECIDED)
    shown = finding_of(interval, margin)
    if verdict != ValidationVerdict.UNDECIDED and shown != _FINDING[verdict]:
        verdict = ValidationVerdict.UNDECIDED
    observed = search.observed([(run_id, 1)])
    constraint = search.goal.constraint
    if verdict == ValidationVerdict.BETTER and constraint is not None and observed is not None \
            and constraint.violation(observed) > 0:
        verdict = ValidationVerdict.VIOLATES
    return Validation(outcome, run_id, verdict, again.gain, interval, len(ratios), observed,
                      1 - level, load)


# What each verdict of a validation claims, in knoblab.words' terms.
_FINDING = {ValidationVerdict.BETTER: Finding.HELPS, ValidationVerdict.WORSE: Finding.HURTS,
            ValidationVerdict.SAME: Finding.SAME}


def reduce(search: Search, chosen: Validation, outcomes: list[TrialOutcome],
           budget: float | None) -> Reduction | None:
    """Each setting of the recommendation put back to the baseline's value alone, with the
    settings tied to it; those whose loss is not measurable (and those whose cost the workload
    cannot see: recommend.UNSEEN_COST) are dropped. The burden of proof is on each change: the
    configuration without the dropped ones is the recommendation unless the full one is then
    shown better than it by at least min_effect (effects can need each other: alone, neither
    shows)."""
    from knoblab.results import build_results

    changes, sign = chosen.trial.changes, search.goal.sign
    search.listener.message(f"reducing the recommendation: each of its {len(changes)} "
                            "settings put back alone, to see which ones matter")
    # Half the budget for putting each back; the rest for checking what is dropped (once, or
    # twice when the full configuration does better than the reduced one).
    share = None if budget is None else budget / 2
    full = _in_force(search, changes)
    run_id = search.run(check_spec(
        search.checking, f"the settings of trial {chosen.trial.number} put back one at a time",
        full, [put_back(search, [name]) for name in changes], share, one_at_a_time=True,
        tied={}))
    results = build_results(search.store, run_id)
    if not results.steps or not search.goal.primary:
        return None
    effects = []
    for row in results.steps[0].rows[1:]:
        comparison = row.vs_previous if row.step == 1 else \
            row.alone.vs_base if row.alone else None
        name = next((k for k in row.change if k in changes), None)
        if comparison is None or name is None:
            continue
        low, high = (math.expm1(sign * math.log(r)) for r in comparison.ci95)
        loss = sign * math.log(comparison.ratio)
        effects.append(Effect(name, math.expm1(loss), (min(low, high), max(low, high)),
                              comparison.significant and loss > 0,
                              results.steps[0].confidence or 0.95))
    if not any(e.measurable for e in effects):
        # None shows alone, and the validation showed them better together: which of them
        # help is found by putting them back one by one (a setting that does nothing goes).
        return trim(search, chosen, effects, list(changes), outcomes, share,
                    Reduction(effects, run_id, dict(changes), None, None))
    kept = recommend.shown(changes, effects)
    if kept == changes:
        return Reduction(effects, run_id, dict(changes), None, None)
    dropped = [name for name in changes if name not in kept]
    search.listener.message(f"checking whether the full recommendation does better than "
                            f"{settings_text(kept) or 'the baseline'}")
    share = None if share is None else share / 2
    check_id = search.run(check_spec(search.checking, f"trial {chosen.trial.number} without "
                                     f"{', '.join(dropped)}", full,
                                     [put_back(search, dropped)], share, tied={}))
    whole, reduced = build_results(search.store, check_id).points[:2]
    equivalent = PointVerdict.EQUIVALENT in (whole.verdict, reduced.verdict)
    if reduced.verdict != PointVerdict.WORSE or len(dropped) < 2:
        return Reduction(effects, run_id, decided(changes, kept, reduced.verdict), check_id,
                         equivalent)
    return trim(search, chosen, effects, dropped, outcomes, share, Reduction(
        effects, run_id, dict(changes), check_id, equivalent))


# A recommendation of more settings than this is reduced in groups (`halve`) unless the
# budget is known to hold each put back alone: twelve put back alone, each on a whole capture,
# took longer than a 12-minute tune's whole budget. Up to five, each alone (the known-truth
# benchmark's five settings were reduced so with no do-nothing setting recommended).
ALONE_AT_MOST = 5


def alone_fits(search: Search, chosen: Validation, budget: float | None) -> bool:
    """Whether each setting of `chosen` is put back alone (`reduce`): few of them, or a
    budget that holds the first rounds of every one, at what a measurement was seen to cost."""
    settings = len(chosen.trial.changes)
    if settings <= ALONE_AT_MOST:
        return True
    expected = search.checking.workload.rounds.expected
    return budget is None or (expected is not None and
                              (settings + 1) * Rounds().floor * expected <= budget / 2)


def halve(search: Search, chosen: Validation, outcomes: list[TrialOutcome],
          budget: float | None) -> Reduction | None:
    """Many settings: put back cumulatively in groups, each half of those still changed, the
    least important first by the search's own trials (fANOVA over them; those whose cost the
    workload cannot see before all), in one run measured until decided; the configuration
    with most of them put back that is not shown worse than the best is recommended, once
    what the chain never put back is checked too (`never_put_back`). With one setting that
    matters among twelve, five points answer what thirteen would alone."""
    from knoblab.results import build_results

    began = time.monotonic()
    changes = chosen.trial.changes
    order = _least_important_first(search, list(changes), outcomes)
    groups: list[list[str]] = []
    while len(order) > 1:
        groups.append(order[:len(order) // 2])
        order = order[len(order) // 2:]
    search.listener.message(
        f"reducing the recommendation: its {len(changes)} settings put back in groups, the "
        "least important first (as the search's trials rank them): "
        + "; then ".join(", ".join(g) for g in groups))
    run_id = search.run(check_spec(
        search.checking, f"the settings of trial {chosen.trial.number} put back in groups",
        _in_force(search, changes), [put_back(search, g) for g in groups],
        None if budget is None else budget * CHAIN_SHARE, tied={}))
    if not search.goal.primary:
        return None
    verdicts = [p.verdict for p in build_results(search.store, run_id).points[:len(groups) + 1]]
    last = _most_put_back(verdicts)
    back = [name for group in groups[:last] for name in group]
    reduction = Reduction([], run_id, {k: v for k, v in changes.items() if k not in back}, None,
                          None, trimmed=tuple(back), trim_run_id=run_id,
                          trim_steps=tuple((", ".join(g), v)
                                           for g, v in zip(groups, verdicts[1:], strict=True)),
                          grouped=True)
    never = [name for group in groups[last + 1:] for name in group] + order
    return never_put_back(search, chosen, reduction, never, _left(budget, began))


def _most_put_back(verdicts: list[PointVerdict]) -> int:
    """The index of the chain's configuration with the most settings put back that is not
    shown worse than the best (0: the full one)."""
    return max((i for i, v in enumerate(verdicts)
                if v not in (PointVerdict.WORSE, PointVerdict.FAILED, PointVerdict.NOT_RUN)),
               default=0)


def _left(budget: float | None, began: float) -> float | None:
    return None if budget is None else max(0.0, budget - (time.monotonic() - began))


# Of a cumulative put-back's budget: the share of its chain (the rest checks what the chain
# never put back, and has what the chain leaves unspent).
CHAIN_SHARE = 2 / 3


def never_put_back(search: Search, chosen: Validation, reduction: Reduction, never: list[str],
         budget: float | None) -> Reduction:
    """What a cumulative put-back kept without ever putting it back (`never`: the settings
    after the step first shown worse, and the most important one, which the chain keeps to
    the end) put back together from the configuration it recommends, in one run measured
    until decided: the burden of proof on them too, they go back unless the recommendation
    is shown better with them. Not run when they are all of it (the confirmation measures
    it against the baseline), nor when the budget cannot hold it (said; they stay)."""
    from knoblab.results import build_results

    never = [name for name in never if name in reduction.kept]
    if not never or len(never) == len(reduction.kept):
        return reduction
    changes = chosen.trial.changes
    search.listener.message(f"putting {', '.join(never)} back too, from "
                            f"{settings_text(reduction.kept)}: the chain never put "
                            f"{'it' if len(never) == 1 else 'them'} back")
    try:
        run_id = search.run(check_spec(
            search.checking, f"trial {chosen.trial.number} as recommended, without "
            f"{', '.join(never)}", {**_in_force(search, changes),
                                    **put_back(search, list(reduction.trimmed))},
            [put_back(search, never)], budget, tied={}))
    except BudgetTooShort as exc:
        if budget is None:
            raise
        search.listener.message(f"{', '.join(never)} not put back: {short(exc, budget)}")
        return reduction
    without = build_results(search.store, run_id).points[1].verdict
    kept = reduction.kept if without == PointVerdict.WORSE else \
        {k: v for k, v in reduction.kept.items() if k not in never}
    return dataclasses.replace(
        reduction, kept=kept, rest=tuple(never), rest_run_id=run_id, rest_verdict=without,
        trimmed=reduction.trimmed + (() if without == PointVerdict.WORSE else tuple(never)))


def _least_important_first(search: Search, names: list[str], outcomes: list[TrialOutcome],
                           loss: Mapping[str, float] | None = None) -> list[str]:
    """`names` by their importance over the search's measured trials, least first, those
    whose cost the workload cannot see before all; between equals (no trials to rank them),
    by `loss`, each one's loss when put back alone."""
    from knoblab.search.importance import importances
    from knoblab.search.study import params_for

    trials = [(params, o.score) for o in outcomes
              if o.state in (OutcomeState.SCORED, OutcomeState.PRUNED, OutcomeState.BASELINE)
              and o.score is not None and (params := params_for(search.space, o.config))]
    share = {i.name: i.share for i in importances(search.space, trials)}
    return sorted(names, key=lambda k: (recommend.name(k) not in recommend.UNSEEN_COST,
                                        share.get(k, 0.0), (loss or {}).get(k, 0.0)))


def trim(search: Search, chosen: Validation, effects: list[Effect], dropped: list[str],
         outcomes: list[TrialOutcome], budget: float | None, full_kept: Reduction
         ) -> Reduction:
    """The full configuration did better than the settings shown alone (or none showed alone):
    some of the `dropped` help together, and some may do nothing. All but the most important
    are put back cumulatively, the least important first by the search's trials (each was
    undecided alone: the search measured many more configurations; those of unseen cost
    before all), and the configuration with most of them put back that is not shown worse
    than the best is recommended, once what the chain never put back is checked too
    (`never_put_back`): a setting that does nothing goes back, one that helps with the others
    stays."""
    from knoblab.results import build_results

    began = time.monotonic()
    changes = chosen.trial.changes
    order = _least_important_first(search, dropped, outcomes,
                                   {e.name: e.loss for e in effects})
    most = order.pop()
    if not order:
        return full_kept
    search.listener.message(f"putting {', '.join(order)} back one by one, the least important "
                            "first")
    try:
        run_id = search.run(check_spec(
            search.checking, f"the settings of trial {chosen.trial.number} put back cumulatively",
            _in_force(search, changes), [put_back(search, [name]) for name in order],
            None if budget is None else budget * CHAIN_SHARE, tied={}))
    except BudgetTooShort as exc:
        if budget is None:
            raise
        search.listener.message(f"not put back one by one: {short(exc, budget)}")
        return full_kept
    verdicts = [p.verdict for p in build_results(search.store, run_id).points[:len(order) + 1]]
    last = _most_put_back(verdicts)
    back = order[:last]
    reduction = dataclasses.replace(
        full_kept, kept={k: v for k, v in changes.items() if k not in back},
        trimmed=tuple(back), trim_run_id=run_id,
        trim_steps=tuple(zip(order, verdicts[1:], strict=True)))
    # All the others back: without `most` too, it is what the check before showed worse
    # than the full configuration.
    never = order[last + 1:] + [most] \
        if last < len(order) or full_kept.check_run_id is None else []
    return never_put_back(search, chosen, reduction, never, _left(budget, began))


def decided(changes: Mapping[str, str], kept: Mapping[str, str],
            reduced_verdict: PointVerdict) -> dict[str, str]:
    """The burden of proof on the full configuration: the reduced one is recommended unless
    the full one was shown better than it by at least min_effect (the reduced one worse)."""
    return dict(changes) if reduced_verdict == PointVerdict.WORSE else dict(kept)


def _in_force(search: Search, changes: Mapping[str, str]) -> dict[str, str]:
    """The searched settings `changes` on [server.config], each [tie] follower at its
    leader's value: the configuration as every trial ran it."""
    return recommend.in_force(changes, search.spec.tied, search.spec.base_config)


def put_back(search: Search, names: list[str]) -> dict[str, str]:
    """`names` at the baseline's values, each with the settings tied to it back at theirs
    ([server.config]'s, else the server's default): a leader never goes back alone."""
    base = recommend.in_force({}, search.spec.tied, search.spec.base_settings(search.catalog))
    step = {name: search.baseline[name] for name in names}
    for follower, leader in search.spec.tied.items():
        if recommend.name(leader) in names:
            knob = search.catalog.knob(follower)
            value = base.get(knob.name) or knob.default_value()
            step[knob.name] = value if value is not None else step[recommend.name(leader)]
    return step


# A check's most rounds where its share of the budget holds more than the default's 20. A
# setting whose effect is near the machine's noise needs 30 to 60 rounds to show (on the
# known-truth surface, sort_buffer_size's +9% put back needed 59, the check of what was
# dropped 29), and a check stopped as futile at half of 20 left a third of the budget unspent.
CEILING_MOST = 100


def sized_ceiling(budget: float | None, points: int, expected: float | None) -> int:
    """The most rounds of a check of `points` points: what `budget` holds at `expected`
    seconds a measurement, never fewer than the default's ceiling (the budget stops a run
    sooner when its measurements cost more than expected), at most CEILING_MOST. The
    ceiling is fixed before the run: its sequential boundaries are spread over it."""
    least = Rounds().ceiling
    if budget is None or not expected:
        return least
    return max(least, min(CEILING_MOST, int(budget // (points * expected))))


def learn_cost(search: Search, run_ids: list[str]) -> None:
    """Where the tune did not plan what a check's measurement costs (a workload measured
    whole), what the validations' measurements took, starts included: the checks after them
    are sized by it (`sized_ceiling`) and refused before they start when it cannot hold them."""
    from knoblab.runner import measuring_seconds

    rounds = search.checking.workload.rounds
    runs = [[t for t in search.store.trials(run_id) if t.status == TrialState.DONE]
            for run_id in run_ids]
    measurements = sum(len(trials) for trials in runs)
    if rounds.expected is not None or not measurements:
        return
    each = sum(measuring_seconds(trials) for trials in runs) / measurements
    search.checking = dataclasses.replace(search.checking, workload=dataclasses.replace(
        cast(Any, search.checking.workload), rounds=dataclasses.replace(rounds,
                                                                        expected=each)))


def check_spec(spec: Spec, what: str, base: Mapping[str, str], steps: list[dict[str, str]],
               budget: float | None, alpha: float | None = None,
               one_at_a_time: bool = False, tied: Mapping[str, str] | None = None,
               sized: bool = True) -> Spec:
    """A run that checks the search's findings with the full statistics: the spec's base
    (plus `base`) against `steps`, with rounds until decided, as many at most as `budget`
    holds when `sized` (`sized_ceiling`). `tied`: the [tie] entries the run applies (by
    default those whose leader it sets); {} when `base` and `steps` already carry each
    follower (a reduction moves a leader and its followers together)."""
    # What a measurement is expected to cost (the tune's measurements said: Search.measure_in,
    # `learn_cost`) kept, so that a budget its first rounds cannot hold is refused before the
    # run.
    expected = spec.workload.rounds.expected
    ceiling = sized_ceiling(budget, 1 + len(steps), expected) if sized else Rounds().ceiling
    workload = dataclasses.replace(cast(Any, spec.workload), rounds=Rounds(
        ceiling=ceiling, design="auto", budget=budget, expected=expected))
    statistics_ = spec.statistics if alpha is None else \
        dataclasses.replace(spec.statistics, alpha=alpha)
    base_config = {**spec.base_config, **base}
    return dataclasses.replace(spec, name=f"{spec.name}: {what}", sweep={}, steps=steps,
                               one_at_a_time=one_at_a_time, workload=workload, tune=None,
                               statistics=statistics_, base_config=base_config,
                               tied=ties(spec, base_config, steps) if tied is None
                               else dict(tied))
