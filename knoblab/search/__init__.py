"""knoblab tune: a search over several settings at once, in one room per question.

- knoblab.search.options: what is asked ([tune]) and the goal (objective, constraint);
- knoblab.search.space: the settings searched and the values each may take;
- knoblab.search.samplers: the samplers by name (Optuna's BaseSampler);
- knoblab.search.loop: what is proposed and scored (the ask/tell loop, a trial's run);
- knoblab.search.study: where the study lives (storage, workers' turns, heartbeats);
- knoblab.search.proof: what is shown to help (validation, reduction);
- knoblab.search.importance: what matters (each setting's share of the variation);
- knoblab.recommend: what is recommended, and why each setting is in it.

The findings are records (knoblab.records: TuneResult and its parts), which knoblab.report
reads without this package.
"""

from __future__ import annotations

import dataclasses
import math
import time
from pathlib import Path
from typing import TYPE_CHECKING

from knoblab import recommend, runner, safety
from knoblab.catalog import Catalog
from knoblab.errors import RunBusy, UserError
from knoblab.machine import fingerprint
from knoblab.records import Goal, Reduction, Space, TrialOutcome, TuneResult, Validation
from knoblab.search import fidelity, proof
from knoblab.search.importance import evaluator_for, importances
from knoblab.search.loop import (
    SEARCH_SHARE,
    Search,
    TuneListener,
    ask_and_tell,
    check_trials,
    machine_memory,
    warm_settings,
)
from knoblab.search.options import TuneOptions, goal_for
from knoblab.search.space import auto_space, parse_space
from knoblab.search.study import (
    Turn,
    add_checked_seconds,
    beside,
    check_not_the_store,
    checked_seconds,
    heartbeat_unwarned,
    open_study,
    outcome_of,
    params_for,
    save_validations,
    seconds_spent,
    validated,
)
from knoblab.spec import Spec
from knoblab.store import Store, driver_url
from knoblab.units import format_duration
from knoblab.vocabulary import OutcomeState

if TYPE_CHECKING:
    import optuna

__all__ = ["TuneListener", "TuneOptions", "tune"]


def tune(spec: Spec, store: Store, home: Path, listener: TuneListener,
         budget: float | None = None, open_servers: runner.OpenTargets = runner.open_servers
         ) -> TuneResult:
    """Search until the study's trials or budget are spent; every trial is stored as it ends.
    Then the best candidates are validated, the recommendation reduced, and a reduced one
    measured as itself."""
    options, goal = _options(spec, store, budget)
    targets, _ = open_servers(spec, home, listener.message)
    if len(targets) != 1:
        raise UserError("knoblab tune searches one server at a time: name one [server] binary")
    target = next(iter(targets.values()))
    catalog = target.catalog
    base = spec.base_settings(catalog)
    space = _space(spec, options, catalog, base, listener)
    baseline = {d.name: base.get(d.name) or catalog.knobs[d.name].default_value() or ""
                for d in space.dimensions}
    check_trials(spec, options, space, baseline, targets, store)
    _warn_never_recommended(space.names, listener)
    url = driver_url(options.storage, "[tune] storage") if options.storage else \
        driver_url(beside(store))
    turn = Turn(url)
    search = Search(spec, options, goal, space, baseline, catalog, store, home, listener,
                    open_servers)
    study = _opened(search, turn, url, home, target.version)
    began = time.monotonic()
    _measure_in(study, turn, search)
    search.warm = warm_settings(search)
    add_checked_seconds(study, time.monotonic() - began)  # the study's wall time too
    if search.warm:
        cold = [n for n in space.names if n not in search.warm]
        listener.message(f"warm trials: up to {options.batch} candidate(s) per server start, "
                         "beside the baseline, in a shuffled order"
                         + (f"; a candidate that changes {', '.join(cold)} gets starts of its "
                            "own" if cold else ""))
    stopped = ask_and_tell(study, turn, search)
    outcomes = [o for o in (outcome_of(t, space, baseline) for t in study.trials) if o]
    validations, reduction, confirmation = _checked(study, search, outcomes)
    # Importance: the ablation's, when the recommendation was reduced (each change measured);
    # else fANOVA over the trials measured within the constraint (an infeasible trial's value
    # is a stand-in), and the baseline's own place at 0.
    # A pruned trial's value is its running mean when it was stopped.
    feasible = {o.number for o in outcomes if o.feasible or o.state == OutcomeState.BASELINE
                or (o.state == OutcomeState.PRUNED and (o.violation or 0.0) <= 0.0)}
    importance = importances(space, [(t.params, t.value) for t in study.trials
                                     if t.number in feasible and t.value is not None],
                             evaluator_for(None if reduction is None or reduction.grouped
                                           else reduction.effects))
    return TuneResult(options.study, space, baseline, outcomes,
                      seconds_spent(study.trials) + checked_seconds(study),
                      stopped, validations, spec.statistics.min_effect, importance=importance,
                      reduction=reduction, goal=goal, server=target.version, base=base,
                      tied=dict(spec.tied), confirmation=confirmation)


def _options(spec: Spec, store: Store, budget: float | None) -> tuple[TuneOptions, Goal]:
    """The spec's [tune], `budget` over its own, and its goal; refused when its budget cannot
    hold one trial or its storage is the results store."""
    if spec.tune is None:
        raise UserError("this spec has no [tune] section: name the settings to search in "
                        "[tune.knobs], or measure it with knoblab run")
    options = TuneOptions.from_spec(spec.tune, spec.name)
    if budget is not None:
        options = dataclasses.replace(options, budget=budget)
    if options.storage is not None:
        check_not_the_store(options.storage, store)
    goal = goal_for(options, spec.workload)
    least = options.rounds * 2 * (runner.checks.LEAST_TRIAL_SECONDS +
                                  spec.workload.least_seconds)
    if options.budget is not None and options.budget * SEARCH_SHARE < least:
        raise UserError(f"a budget of {format_duration(options.budget)} cannot hold one trial "
                        f"(at the least {format_duration(least)}: {options.rounds} rounds of "
                        f"the baseline and a candidate, and {1 - SEARCH_SHARE:.0%} of the "
                        "budget is kept for validation); give a larger budget ([tune] budget, "
                        "or knoblab tune SPEC --budget ...)")
    return options, goal


def _space(spec: Spec, options: TuneOptions, catalog: Catalog, base: dict[str, str],
           listener: TuneListener) -> Space:
    """The settings searched: [tune.knobs]'s, or with knobs = "auto" the server's own that
    fit the machine's memory (said, with those left out)."""
    if options.knobs != "auto":
        return parse_space(options.knobs, catalog, spec.allow_durability_tradeoff)
    space, left_out = auto_space(catalog, safety.memory_budget_of(
                                     spec.memory_budget or machine_memory(spec)),
                                 spec.allow_durability_tradeoff, base)
    listener.message("knobs = \"auto\": searching " +
                     "; ".join(d.describe() for d in space.dimensions))
    if left_out:
        listener.message(f"left out: {', '.join(left_out)}")
    return space


def _opened(search: Search, turn: Turn, url: str, home: Path, version: str) -> optuna.Study:
    """The study, made by the first of the workers starting together (with its tables), the
    baseline its first trial: told at once where the space holds it, for it costs no
    measurement, and a budget that ends before the search's first trial still leaves it its
    place at 0."""
    spec, space = search.spec, search.space
    with turn():
        # The sandboxes' machine: its [machine] shape, and the disk their data is on.
        shape = spec.machine
        machine = {**fingerprint(shape.datadir if shape and shape.datadir else home, version),
                   **({"shape": shape.describe()} if shape else {})}
        study = open_study(search.options, spec, space, url, machine)
        if not study.trials:
            params = params_for(space, search.baseline)
            if params is not None:
                study.enqueue_trial(params)
                if space.config(params) == search.baseline:
                    with heartbeat_unwarned():
                        trial = study.ask(space.distributions())
                    search.admit(study, [trial], [])
    return study


def _checked(study: optuna.Study, search: Search, outcomes: list[TrialOutcome]
             ) -> tuple[list[Validation], Reduction | None, Validation | None]:
    """The search's findings checked (`proof.check`) with what the study's budget left, by
    one worker; or as an earlier invocation or worker checked them."""
    validations, reduction, confirmation = validated(study, outcomes)
    if validations is not None:
        return validations, reduction, confirmation
    options, store = search.options, search.store
    check_budget = None if options.budget is None else \
        max(0.0, options.budget - seconds_spent(study.trials) - checked_seconds(study))
    began = time.monotonic()
    try:
        with runner.owning(store, f"tune:{options.study}"):
            validations, reduction, confirmation = proof.check(search, outcomes, check_budget)
        # The budget is the study's wall time: the checks count as the trials do.
        add_checked_seconds(study, time.monotonic() - began)
    except RunBusy:
        search.listener.message("another worker is validating this study's best candidates: "
                                "run knoblab tune again when it is done to see its verdicts")
        return [], None, None
    save_validations(study, outcomes, validations, reduction, confirmation)
    return validations, reduction, confirmation


def _measure_in(study: optuna.Study, turn: Turn, search: Search) -> None:
    """The parts of the workload trials and checks measure: sized to the budget left (the
    baseline measured once to know what a measurement costs) the first time, the same for
    every later invocation and worker of the study; said in one line."""
    options = search.options
    if options.screen is not None:
        if options.fidelity not in ("auto", "whole"):
            raise UserError(f"[tune] screen = {options.screen!r} and fidelity = "
                            f"{options.fidelity!r}: give one of them (screen measures each "
                            "candidate on a part first, then on the whole workload)")
        return
    kept = study.user_attrs.get("fidelity")
    if kept is None:
        if options.budget is None and options.fidelity == "auto":
            return  # nothing to size it to: the whole workload
        left = math.inf if options.budget is None else \
            options.budget - seconds_spent(study.trials) - checked_seconds(study)
        planned = fidelity.plan(search.spec.workload, options.fidelity, left,
                                len(search.space.names), options.validate, search.cost_of)
        if planned is None:
            return
        with turn():  # a worker that sized it first is followed
            kept = study.user_attrs.get("fidelity")
            if kept is None:
                study.set_user_attr("fidelity", kept := planned.describe())
    chosen = fidelity.Fidelity.from_info(kept)
    wanted = None if options.fidelity == "whole" else options.fidelity
    pinned = options.fidelity != "auto" and wanted != chosen.search
    search.measure_in(chosen)
    search.listener.message(chosen.said if not pinned else
                            f"{chosen.said} (as this study's first invocation chose: [tune] "
                            f"fidelity = {options.fidelity!r} applies to a new study, "
                            "[tune] study = \"...\")")


def _warn_never_recommended(names: list[str], listener: TuneListener) -> None:
    """Before the first trial: a setting searched whose cost the workload cannot see is
    never recommended, whatever its trials find. A warning, not a refusal: its effect may be
    what the user wants to see."""
    for setting, why in recommend.never_recommended(names).items():
        listener.message(f"warning: {setting} will be searched but never recommended ({why}); "
                         "remove it from [tune.knobs] unless you only want to see its effect")
