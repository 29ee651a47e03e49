"""knoblab tune: a search over several settings at once.

Optuna proposes configurations (ask/tell); knoblab measures each as a short run of its own:
the baseline and the candidate, side by side on the same server starts (blocked where the
settings need no restart), so that the optimizer is told the candidate's ratio to the baseline
measured beside it, not a time that drifts with the machine. A configuration that is unsafe
(durability given up without consent, memory over the budget) is never run, and one the server
refuses is a result: both are told to the sampler as infeasible, so it stops proposing their
region. The study lives in an Optuna storage beside knoblab's store, and the budget is the
study's: a second `knoblab tune` of the same spec goes on where the first stopped.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import functools
import hashlib
import json
import math
import os
import socket
import statistics
import time
import warnings
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, cast

from knoblab import runner, safety, section
from knoblab.errors import STOP, UserError, stop_here
from knoblab.importance import Importance, importances
from knoblab.machine import differences, fingerprint
from knoblab.server.sandbox import alive
from knoblab.space import Space, auto_space, parse_space
from knoblab.spec import Spec
from knoblab.store import Store, TrialState, driver_url, safe_url
from knoblab.units import format_duration, parse_duration, setting_text, settings_text
from knoblab.workloads.base import Metric, Rounds, Second

if TYPE_CHECKING:
    import optuna

SAMPLERS = ("tpe", "gp", "random")
# Seconds between a worker's heartbeats, and of silence after which its trial is another's.
HEARTBEAT = 10
GRACE = 60
# Seconds between looks at a study whose last trials other workers are measuring.
WAIT = 2.0
# With a budget, the search stops at this share of it; the rest validates its best candidates
# (VALIDATION_SHARE of the rest) and reduces the recommendation.
SEARCH_SHARE = 0.7
VALIDATION_SHARE = 0.6
KEYS = frozenset({"knobs", "budget", "trials", "sampler", "rounds", "max_rounds", "study",
                  "storage", "validate", "objective", "constraint"})


@dataclass(frozen=True)
class Constraint:
    """A bound on a second metric: `constraint = { metric = "p99", max = 20 }` (its unit)."""

    metric: str
    limit: float
    upper: bool  # max (the metric must stay at or below the limit); else min

    @classmethod
    def from_spec(cls, raw: Any) -> Constraint:
        shape = ("[tune] constraint: write { metric = \"p99\", max = 20 } (or min = ... for a "
                 "floor, e.g. on tps)")
        if not isinstance(raw, dict) or not isinstance(raw.get("metric"), str) or \
                set(raw) - {"metric", "max", "min"} or len(raw.keys() & {"max", "min"}) != 1:
            raise UserError(shape)
        bound = "max" if "max" in raw else "min"
        limit = raw[bound]
        if isinstance(limit, bool) or not isinstance(limit, int | float) or limit <= 0:
            raise UserError(f"[tune] constraint {bound} = {limit!r}: give a number above 0, in "
                            "the metric's unit")
        return cls(raw["metric"], float(limit), bound == "max")

    def violation(self, observed: float) -> float:
        """Above 0 when violated (by how much, as a log-ratio), as Optuna's constraints are."""
        ratio = math.log(observed / self.limit)
        return ratio if self.upper else -ratio

    def describe(self, unit: str) -> str:
        return f"{self.metric} {'≤' if self.upper else '≥'} {self.limit:g} {unit}"


@dataclass(frozen=True)
class TuneOptions:
    """The [tune] section (its knobs are read against the server's catalog, later)."""

    knobs: Any  # [tune.knobs] (checked by parse_space), or "auto"
    budget: float | None  # seconds of the study (every invocation together)
    trials: int  # at most, in the study
    sampler: str
    rounds: int  # server starts (blocks) per trial: the baseline and the candidate on each
    max_rounds: int  # a promising trial's rounds are doubled up to this many
    study: str
    storage: str | None  # an Optuna storage URL; None: a file beside knoblab's SQLite store
    validate: int  # the best candidates re-measured against the baseline, until decided
    objective: str | None  # a metric of the workload's; None: its own objective's
    constraint: Constraint | None

    @classmethod
    def from_spec(cls, raw: Mapping[str, Any], name: str) -> TuneOptions:
        section.check_keys("[tune]", dict(raw), KEYS)
        sampler = section.text(dict(raw), "sampler", "tune", "tpe")
        if sampler not in SAMPLERS:
            raise UserError(f"[tune] sampler = {sampler!r}: use one of {', '.join(SAMPLERS)}")
        storage = raw.get("storage")
        if storage is not None and not isinstance(storage, str):
            raise UserError(f"[tune] storage = {storage!r}: give a database URL in quotes")
        if storage is not None:
            _no_password(storage)
        return cls(
            knobs=raw.get("knobs") or {},
            budget=parse_duration(raw["budget"], "[tune] budget") if "budget" in raw else None,
            trials=section.number(dict(raw), "trials", "tune", 100, int, 2, 100_000),
            sampler=sampler,
            rounds=(rounds := section.number(dict(raw), "rounds", "tune", 2, int, 2, 100)),
            max_rounds=section.number(dict(raw), "max_rounds", "tune", max(8, rounds), int,
                                      rounds, 400),
            study=section.text(dict(raw), "study", "tune", name),
            storage=storage,
            validate=section.number(dict(raw), "validate", "tune", 3, int, 1, 20),
            objective=section.text(dict(raw), "objective", "tune", "") or None,
            constraint=None if "constraint" not in raw else
            Constraint.from_spec(raw["constraint"]),
        )


class TuneListener(Protocol):
    def message(self, text: str) -> None: ...
    def searching(self, total: int, done: int, budget_left: float | None) -> None: ...
    def scored(self, outcome: TrialOutcome, best: TrialOutcome | None,
               budget_left: float | None) -> None: ...


@dataclass(frozen=True)
class TrialOutcome:
    """One configuration of the search and what it scored against the baseline."""

    number: int
    config: dict[str, str]  # the searched settings, as the server takes them
    changes: dict[str, str]  # those that differ from the baseline
    state: str  # "scored", "baseline", "refused" (never run), "failed" (the server said no)
    score: float | None  # mean log-ratio to the baseline over blocks; lower is better
    ratios: list[float]  # per block
    runs: tuple[str, ...]  # its runs in the store: the first, then those of its extra rounds
    error: str | None = None
    observed: float | None = None  # the constrained metric, the candidate's median
    violation: float | None = None  # above 0: the constraint is violated (a log-ratio)

    @property
    def feasible(self) -> bool:
        """Scored, and within the constraint."""
        return self.state == "scored" and (self.violation or 0.0) <= 0.0

    @property
    def run_id(self) -> str | None:
        return self.runs[0] if self.runs else None

    @property
    def gain(self) -> float | None:
        """How much better than the baseline: +0.08 is 8% better (faster, or more tps)."""
        return None if self.score is None else math.expm1(-self.score)

    def interval(self, confidence: float = 0.95) -> tuple[float, float] | None:
        """The gain's interval from the spread of the per-block ratios (t-based)."""
        if len(self.ratios) < 2:
            return None
        from scipy import stats as sps

        spread = statistics.stdev(self.ratios) / math.sqrt(len(self.ratios))
        t = float(sps.t.ppf(0.5 + confidence / 2, len(self.ratios) - 1))
        mean = statistics.fmean(self.ratios)
        return math.expm1(-(mean + t * spread)), math.expm1(-(mean - t * spread))


@dataclass(frozen=True)
class Validation:
    """A candidate measured again against the baseline, in fresh starts, with adaptive rounds
    and the full statistics, at alpha shared among the candidates validated (Bonferroni)."""

    trial: TrialOutcome
    run_id: str
    verdict: str  # "better", "worse", "same" (within min_effect), "undecided", "violates"
    gain: float | None
    interval: tuple[float, float] | None
    rounds: int
    observed: float | None = None  # the constrained metric, the candidate's median


@dataclass(frozen=True)
class Effect:
    """A setting of the recommendation put back to the baseline's value alone, the others
    kept: how much that loses (+0.05: the recommendation is 5% better with the setting)."""

    name: str
    loss: float
    interval: tuple[float, float]
    measurable: bool  # significant, and at least min_effect


@dataclass(frozen=True)
class Reduction:
    """The recommendation without its settings of no measurable effect, checked to be
    equivalent to the full one."""

    effects: list[Effect]
    run_id: str  # the run that measured each setting put back alone
    kept: dict[str, str]  # the settings recommended in the end
    check_run_id: str | None  # the run that compared the reduced with the full configuration
    equivalent: bool | None  # None: nothing to check (nothing dropped, or nothing kept)


@dataclass(frozen=True)
class TuneResult:
    study: str
    space: Space
    baseline: dict[str, str]
    trials: list[TrialOutcome]
    spent: float
    stopped: str  # "trials", "budget"
    validations: list[Validation]
    min_effect: float
    importance: list[Importance] = dataclasses.field(default_factory=list)
    reduction: Reduction | None = None
    goal: Goal | None = None
    server: str = ""  # the version of the server tuned

    @property
    def settings(self) -> dict[str, str]:
        """The settings recommended: the validated candidate's, reduced where that was shown
        to lose nothing."""
        chosen = self.recommended
        if chosen is None:
            return {}
        if self.reduction is not None and self.reduction.equivalent:
            return dict(self.reduction.kept)
        return dict(chosen.trial.changes)

    @property
    def recommended(self) -> Validation | None:
        """The validated candidate with the largest gain shown significant, if any is."""
        return _recommended(self.validations)


def tune(spec: Spec, store: Store, home: Path, listener: TuneListener,
         budget: float | None = None, open_servers: runner.OpenTargets = runner.open_servers
         ) -> TuneResult:
    """Search until the study's trials or budget are spent; every trial is stored as it ends.
    Then the best candidates are validated and the recommendation reduced."""
    import optuna

    if spec.tune is None:
        raise UserError("this spec has no [tune] section: name the settings to search in "
                        "[tune.knobs], or measure it with knoblab run")
    options = TuneOptions.from_spec(spec.tune, spec.name)
    if budget is not None:
        options = dataclasses.replace(options, budget=budget)
    if options.storage is not None:
        _check_not_the_store(options.storage, store)
    goal = Goal.of(options, spec.workload)
    least = options.rounds * 2 * (runner.LEAST_TRIAL_SECONDS + spec.workload.least_seconds)
    if options.budget is not None and options.budget * SEARCH_SHARE < least:
        raise UserError(f"a budget of {format_duration(options.budget)} cannot hold one trial "
                        f"(at the least {format_duration(least)}: {options.rounds} rounds of "
                        f"the baseline and a candidate, and {1 - SEARCH_SHARE:.0%} of the "
                        "budget is kept for validation); give a larger budget")
    targets, _ = open_servers(spec, home, listener.message)
    if len(targets) != 1:
        raise UserError("knoblab tune searches one server at a time: name one [server] binary")
    target = next(iter(targets.values()))
    catalog = target.catalog
    if options.knobs == "auto":
        space, left_out = auto_space(catalog, safety.memory_budget_of(spec.memory_budget),
                                     spec.allow_durability_tradeoff)
        listener.message("knobs = \"auto\": searching " +
                         "; ".join(d.describe() for d in space.dimensions))
        if left_out:
            listener.message(f"left out: {', '.join(left_out)}")
    else:
        space = parse_space(options.knobs, catalog, spec.allow_durability_tradeoff)
    base = spec.base_settings(catalog)
    baseline = {d.name: base.get(d.name) or catalog.knobs[d.name].default_value() or ""
                for d in space.dimensions}
    _check_trials(spec, options, space, baseline, targets, store)
    url = driver_url(options.storage, "[tune] storage") if options.storage else \
        driver_url(_beside(store))
    turn = _Turn(url)
    with turn():  # workers starting together: one makes the study (and its tables)
        study = _open_study(options, spec, space, url, fingerprint(home, target.version))
        if not study.trials:
            params = _params_for(space, baseline)
            if params is not None:
                study.enqueue_trial(params)
    distributions = space.distributions()
    search = _Search(spec, options, goal, space, baseline, catalog, store, home, listener,
                     open_servers)
    waiting = False
    while True:
        if STOP.is_set():
            stop_here()
        # The study's trial budget holds with several workers: each counts the trials taken
        # (finished, or being measured by another) and takes its own in one turn; in it too,
        # abandoned trials are failed and queued again (once, not by two workers at once).
        with turn():
            _requeue_abandoned(study)
            with _heartbeat_unwarned():
                optuna.storages.fail_stale_trials(study)
            # Read once a trial: other workers add trials to the study meanwhile.
            trials = study.trials
            outcomes = [o for o in (_outcome(t, space, baseline) for t in trials) if o]
            spent = _spent(trials)
            finished = [t for t in trials if t.state == _complete()]
            taken = [t for t in trials if t.state == optuna.trial.TrialState.RUNNING]
            left = None if options.budget is None else options.budget * SEARCH_SHARE - spent
            listener.searching(options.trials, len(finished), left)
            if len(finished) >= options.trials:
                stopped = "trials"
                break
            if left is not None and left <= _typical_trial(trials):
                stopped = "budget"
                break
            trial = None
            if len(finished) + len(taken) < options.trials:
                with _heartbeat_unwarned():
                    trial = study.ask(distributions)
                try:
                    # Owned and beating before the turn ends: a trial being measured is never
                    # one that no worker can tell abandoned.
                    trial.set_user_attr("owner", _owner())
                    _beat(study, trial)
                except BaseException:
                    _abandon(study, trial)
                    raise
        if trial is None:
            # The last trials are another worker's: its results are this search's too (and
            # its trial is queued again should that worker die).
            if not waiting:
                listener.message(f"the study's last {len(taken)} trial(s) are being measured "
                                 "by another worker: waiting for them")
                waiting = True
            STOP.wait(WAIT)
            continue
        began = time.monotonic()
        try:
            with _beating(study, trial):
                outcome = search.measure(trial, outcomes, left)
            _tell(study, trial, outcome, time.monotonic() - began, outcomes)
        except BaseException:
            _abandon(study, trial)
            raise
        outcomes.append(outcome)
        best = min((o for o in outcomes if o.feasible), key=lambda o: o.score or 0.0,
                   default=None)
        listener.scored(outcome, best, None if options.budget is None
                        else options.budget - spent - (time.monotonic() - began))
    outcomes = [o for o in (_outcome(t, space, baseline) for t in study.trials) if o]
    validations, reduction = _validated(study, outcomes)
    if validations is None:
        check_budget = None if options.budget is None else \
            max(0.0, options.budget - _spent(study.trials))
        try:
            with runner.owning(store, f"tune:{options.study}"):
                validations, reduction = _check(search, outcomes, check_budget)
        except UserError as exc:
            if "still being measured" not in str(exc):
                raise
            listener.message("another worker is validating this study's best candidates: "
                             "run knoblab tune again when it is done to see its verdicts")
            validations = []
        else:
            _save_validations(study, outcomes, validations, reduction)
    # Importance from the trials measured within the constraint (an infeasible trial's value
    # is a stand-in), and the baseline's own place at 0.
    feasible = {o.number for o in outcomes if o.feasible or o.state == "baseline"}
    importance = importances(space, [(t.params, t.value) for t in study.trials
                                     if t.number in feasible and t.value is not None])
    return TuneResult(options.study, space, baseline, outcomes, _spent(study.trials), stopped,
                      validations, spec.statistics.min_effect, importance=importance,
                      reduction=reduction, goal=goal, server=target.version)


def _check_trials(spec: Spec, options: TuneOptions, space: Space, baseline: dict[str, str],
                  targets: dict[str, Any], store: Store) -> None:
    """Everything a trial's run would refuse, refused before the first: the ties, and each
    value of each searched setting (its end points, for a range) checked as its trial's run
    checks it (types, ties, whether it can be set, the server's own rules). Only memory, which
    depends on the combination, is left to each trial (an over-budget trial is a result)."""
    target = next(iter(targets.values()))
    catalog = target.catalog
    searched = set(space.names)
    for follower, leader in spec.tied.items():
        follower_name, leader_name = catalog.knob(follower).name, catalog.knob(leader).name
        if follower_name in searched:
            raise UserError(f"[tie] {follower_name} follows {leader_name}: remove it from "
                            "[tune.knobs] (it takes the leader's value in every trial)")
        if leader_name not in searched and leader_name not in spec.base_settings(catalog):
            raise UserError(f"[tie] {follower_name} = {leader!r}: the leader must be searched "
                            "in [tune.knobs] or set in [server.config]")
    base = spec.base_settings(catalog)
    # The baseline alone: over the memory budget, every trial would be refused.
    safety.check([({}, {})], base, catalog, connections=spec.workload.connections_for,
                 allow_durability_tradeoff=spec.allow_durability_tradeoff,
                 memory_budget=spec.memory_budget,
                 check_memory=target.local or spec.memory_budget is not None)
    for d in space.dimensions:
        assert d.choices or (d.low is not None and d.high is not None)
        values = d.choices or (d.value(d.low or 0), d.value(d.high or 0))
        for value in values:
            if value == baseline[d.name]:
                continue
            try:
                runner.check_points(_trial_spec(spec, {d.name: value}, options.rounds, 0),
                                    targets, store, check_memory=False)
            except UserError as exc:
                raise UserError(f"[tune.knobs] {d.name} = {setting_text(d.name, value)}: "
                                f"{exc}") from None


def _check(search: _Search, outcomes: list[TrialOutcome], budget: float | None
           ) -> tuple[list[Validation], Reduction | None]:
    """The search's findings checked: its best candidates validated (VALIDATION_SHARE of the
    budget left), then the recommendation reduced (the rest)."""
    began = time.monotonic()
    validations = search.validate(outcomes, None if budget is None
                                  else budget * VALIDATION_SHARE)
    chosen = _recommended(validations)
    if chosen is None or len(chosen.trial.changes) < 2:
        return validations, None
    left = None if budget is None else max(0.0, budget - (time.monotonic() - began))
    try:
        return validations, search.reduce(chosen, left)
    except UserError as exc:
        if left is None or "budget" not in str(exc):
            raise
        search.listener.message(f"the recommendation is not reduced: {exc}")
        return validations, None


def _tell(study: optuna.Study, trial: optuna.Trial, outcome: TrialOutcome, seconds: float,
          earlier: list[TrialOutcome]) -> None:
    """The trial's outcome, kept with it in the study, and told to the sampler."""
    trial.set_user_attr("seconds", round(seconds, 3))
    trial.set_user_attr("state", outcome.state)
    trial.set_user_attr("changes", outcome.changes)
    trial.set_user_attr("ratios", outcome.ratios)
    if outcome.runs:
        trial.set_user_attr("runs", list(outcome.runs))
    if outcome.error:
        trial.set_user_attr("error", outcome.error)
    if outcome.observed is not None:
        trial.set_user_attr("observed", outcome.observed)
        trial.set_user_attr("violation", outcome.violation)
    infeasible = outcome.state in ("refused", "failed")
    trial.set_user_attr("infeasible", 1.0 if infeasible else 0.0)
    # Constraints above 0 are violated: the sampler learns where not to look.
    trial.set_constraint("refused", 1.0 if infeasible else 0.0)
    trial.set_constraint("bound", outcome.violation or 0.0)
    # An infeasible trial is told as complete, with a value no better than the worst seen and
    # a violated constraint, so that the sampler learns its region (a failed trial it would
    # ignore, and propose again).
    worst = max((o.score for o in earlier if o.score is not None), default=0.0)
    study.tell(trial, outcome.score if outcome.score is not None else worst + 1.0)


@dataclass(frozen=True)
class Goal:
    """What the search lowers (the objective, as a log-ratio to the baseline) and the bound it
    must respect (a constraint on a second metric)."""

    name: str
    metric: Metric
    primary: bool  # the workload's own objective: the verdicts of its runs judge it
    constraint: Constraint | None = None
    bounded: Metric | None = None  # the constraint's metric

    @classmethod
    def of(cls, options: TuneOptions, workload: Any) -> Goal:
        metrics: Mapping[str, Metric] = workload.metrics
        known = ", ".join(metrics)
        name = options.objective or workload.objective.metric
        if name not in metrics:
            raise UserError(f"[tune] objective = {name!r}: the {workload.kind} workload "
                            f"measures {known}; use one of them")
        bounded = None
        if options.constraint is not None:
            if options.constraint.metric not in metrics:
                raise UserError(f"[tune] constraint on {options.constraint.metric!r}: the "
                                f"{workload.kind} workload measures {known}; bound one of them")
            if options.constraint.metric == name:
                raise UserError(f"[tune] constraint on {name!r}, the objective itself: bound a "
                                "second metric (the objective is already made as good as "
                                "it gets)")
            bounded = metrics[options.constraint.metric]
        return cls(name, metrics[name], name == workload.objective.metric, options.constraint,
                   bounded)

    @property
    def sign(self) -> float:
        """Log-ratios times this are lower when better, whichever way the metric goes."""
        return 1.0 if self.metric.direction == "minimize" else -1.0


def _value(metric: Metric, trial: Any) -> float | None:
    value = trial.value if metric.detail is None else trial.details.get(metric.detail)
    return float(value) if isinstance(value, int | float) and value > 0 else None


class _Search:
    """What every trial and check of one search shares: the spec, the goal, the baseline, and
    where runs are measured and stored."""

    def __init__(self, spec: Spec, options: TuneOptions, goal: Goal, space: Space,
                 baseline: dict[str, str], catalog: Any, store: Store, home: Path,
                 listener: TuneListener, open_servers: runner.OpenTargets) -> None:
        self.spec, self.options, self.goal, self.space = spec, options, goal, space
        self.baseline, self.catalog, self.store, self.home = baseline, catalog, store, home
        self.listener, self.open_servers = listener, open_servers
        self.quiet = _Quiet(listener)

    def run(self, spec: Spec) -> str:
        return runner.start_run(spec, self.store, self.home, self.quiet,
                                open_servers=self.open_servers)

    # -- a trial ----------------------------------------------------------------------------

    def measure(self, trial: optuna.Trial, earlier: list[TrialOutcome], left: float | None
                ) -> TrialOutcome:
        spec, options = self.spec, self.options
        config = self.space.config(trial.params)
        changes = {k: v for k, v in config.items() if v != self.baseline[k]}
        if not changes:
            return TrialOutcome(trial.number, config, {}, "baseline", 0.0, [], ())
        try:
            safety.check([(changes, changes)], spec.base_settings(self.catalog), self.catalog,
                         connections=spec.workload.connections_for,
                         allow_durability_tradeoff=spec.allow_durability_tradeoff,
                         memory_budget=spec.memory_budget)
        except UserError as exc:
            return TrialOutcome(trial.number, config, changes, "refused", None, [], (),
                                str(exc))
        began = time.monotonic()
        run_id = self.run(_trial_spec(spec, changes, options.rounds, trial.number))
        ratios, error = self.ratios(run_id)
        failed = None if ratios else _baseline_failed(self.store, run_id)
        if failed:
            raise UserError(f"the baseline itself could not be measured (run {run_id}: "
                            f"{failed}); fix [server.config] or the workload, then run "
                            "knoblab tune again")
        if not ratios:
            return TrialOutcome(trial.number, config, changes, "failed", None, [], (run_id,),
                                error or "no measurement of the candidate succeeded")
        runs = [run_id]
        # Short measurements for every trial, more only where they decide: a trial that may
        # be better than the best so far has its rounds doubled until it is clearly not, or
        # has max_rounds (Optuna's pruners stop bad trials early; here every trial is
        # already short, and the time goes to the ones the search will keep).
        while len(ratios) < options.max_rounds and \
                _promising(ratios, earlier, spec.statistics.min_effect):
            more = min(len(ratios), options.max_rounds - len(ratios))
            per_round = (time.monotonic() - began) / len(ratios)
            if left is not None and per_round * (len(ratios) + more) > left:
                break
            extra = self.run(_trial_spec(spec, changes, max(2, more), trial.number))
            runs.append(extra)
            added, _ = self.ratios(extra)
            if not added:
                break
            ratios += added
        observed = self.observed(runs)
        return TrialOutcome(trial.number, config, changes, "scored", statistics.fmean(ratios),
                            ratios, tuple(runs), observed=observed,
                            violation=None if observed is None or self.goal.constraint is None
                            else self.goal.constraint.violation(observed))

    def ratios(self, run_id: str) -> tuple[list[float], str | None]:
        """Per round, the candidate's log-ratio to the baseline measured in the same round
        (the same start, in a blocked design), lower when better; and the candidate's first
        error."""
        by_round: dict[int, dict[int, float]] = {}
        errors = []
        for t in self.store.trials(run_id):
            value = _value(self.goal.metric, t) if t.status == TrialState.DONE else None
            if value is not None:
                by_round.setdefault(t.repetition, {})[t.point_idx] = value
            elif t.status == TrialState.FAILED and t.point_idx == 1 and t.error:
                errors.append(t.error)
        ratios = [self.goal.sign * math.log(pair[1] / pair[0]) for pair in by_round.values()
                  if 0 in pair and 1 in pair]
        return ratios, errors[0] if errors else None

    def observed(self, runs: list[str]) -> float | None:
        """The candidate's median of the constrained metric over its measurements."""
        if self.goal.bounded is None:
            return None
        values = [v for run in runs for t in self.store.trials(run)
                  if t.point_idx == 1 and t.status == TrialState.DONE
                  and (v := _value(self.goal.bounded, t)) is not None]
        return statistics.median(values) if values else None

    # -- the checks of what the search found ---------------------------------------------------

    def validate(self, outcomes: list[TrialOutcome], budget: float | None
                 ) -> list[Validation]:
        """The best few distinct candidates that scored better than the baseline (and within
        the constraint), each re-run against it until decided. A search keeps the luckiest of
        many noisy scores; a fresh run of it says how much of that luck was real."""
        ranked = sorted((o for o in outcomes if o.feasible and (o.score or 0.0) < 0.0),
                        key=lambda o: o.score or 0.0)
        chosen: list[TrialOutcome] = []
        for outcome in ranked:
            if all(outcome.changes != c.changes for c in chosen):
                chosen.append(outcome)
            if len(chosen) == self.options.validate:
                break
        done: list[Validation] = []
        for number, outcome in enumerate(chosen, start=1):
            self.listener.message(f"validating {number} of {len(chosen)}: trial "
                                  f"{outcome.number} ({settings_text(outcome.changes)})")
            share = None if budget is None else budget / len(chosen)
            check = _check_spec(self.spec, f"validation of trial {outcome.number}", {},
                                [outcome.changes], share,
                                alpha=self.spec.statistics.alpha / len(chosen))
            try:
                run_id = self.run(check)
            except UserError as exc:
                if share is None or "budget" not in str(exc):
                    raise
                self.listener.message(f"no validation: {exc}")
                break
            done.append(self._verdict(outcome, run_id, len(chosen)))
        return done

    def _verdict(self, outcome: TrialOutcome, run_id: str, family: int) -> Validation:
        from knoblab.results import build_results

        ratios, _ = self.ratios(run_id)
        again = TrialOutcome(outcome.number, outcome.config, outcome.changes, "scored",
                             statistics.fmean(ratios) if ratios else None, ratios, (run_id,))
        interval = again.interval(1 - self.spec.statistics.alpha / family)
        if self.goal.primary:
            base, candidate = build_results(self.store, run_id).points[:2]
            verdict = ("better" if base.verdict == "worse" else
                       "worse" if candidate.verdict == "worse" else
                       "same" if "equivalent" in (base.verdict, candidate.verdict)
                       else "undecided")
        else:
            # Another metric than the one the run's verdicts judge: its paired interval.
            margin = self.spec.statistics.min_effect
            verdict = ("undecided" if interval is None else
                       "better" if interval[0] > 0 and (again.gain or 0.0) >= margin else
                       "worse" if interval[1] < 0 else
                       "same" if -margin < interval[0] and interval[1] < margin
                       else "undecided")
        observed = self.observed([run_id])
        if verdict == "better" and self.goal.constraint is not None and observed is not None \
                and self.goal.constraint.violation(observed) > 0:
            verdict = "violates"
        return Validation(outcome, run_id, verdict, again.gain, again.interval(), len(ratios),
                          observed)

    def reduce(self, chosen: Validation, budget: float | None) -> Reduction | None:
        """Each setting of the recommendation put back to the baseline's value alone; those
        whose loss is not measurable are dropped, and the configuration without them is
        checked to be equivalent to the full one (effects can need each other: alone,
        neither shows)."""
        from knoblab.results import build_results

        changes, sign = chosen.trial.changes, self.goal.sign
        self.listener.message(f"reducing the recommendation: each of its {len(changes)} "
                              "settings put back alone, to see which ones matter")
        share = None if budget is None else budget / 2
        run_id = self.run(_check_spec(
            self.spec, f"the settings of trial {chosen.trial.number} put back one at a time",
            changes, [{name: self.baseline[name]} for name in changes], share,
            one_at_a_time=True))
        results = build_results(self.store, run_id)
        if not results.steps or not self.goal.primary:
            return None
        effects = []
        for row in results.steps[0].rows[1:]:
            comparison = row.vs_previous if row.step == 1 else \
                row.alone.vs_base if row.alone else None
            if comparison is None or not row.change:
                continue
            low, high = (math.expm1(sign * math.log(r)) for r in comparison.ci95)
            loss = sign * math.log(comparison.ratio)
            effects.append(Effect(next(iter(row.change)), math.expm1(loss),
                                  (min(low, high), max(low, high)),
                                  comparison.significant and loss > 0))
        measured = {e.name for e in effects}
        kept = {name: value for name, value in changes.items()
                if name not in measured or any(e.measurable for e in effects if e.name == name)}
        if not kept or kept == changes:
            # Nothing dropped, or nothing measurable alone: the settings stay together.
            return Reduction(effects, run_id, dict(changes), None, None)
        dropped = {name: self.baseline[name] for name in changes if name not in kept}
        self.listener.message(f"checking that {settings_text(kept)} alone does as well as "
                              "the full recommendation")
        check_id = self.run(_check_spec(self.spec, f"trial {chosen.trial.number} without "
                                        f"{', '.join(dropped)}", changes, [dropped], share))
        full, reduced = build_results(self.store, check_id).points[:2]
        return Reduction(effects, run_id, kept, check_id,
                         "equivalent" in (full.verdict, reduced.verdict))


def _recommended(validations: list[Validation]) -> Validation | None:
    """The validated candidate with the largest gain shown significant, if any is."""
    better = [v for v in validations if v.verdict == "better"]
    return max(better, key=lambda v: v.gain or 0.0, default=None)


def _check_spec(spec: Spec, what: str, base: Mapping[str, str], steps: list[dict[str, str]],
                budget: float | None, alpha: float | None = None,
                one_at_a_time: bool = False) -> Spec:
    """A run that checks the search's findings with the full statistics: the spec's base
    (plus `base`) against `steps`, with rounds until decided."""
    workload = dataclasses.replace(cast(Any, spec.workload),
                                   rounds=Rounds(design="auto", budget=budget))
    statistics_ = spec.statistics if alpha is None else \
        dataclasses.replace(spec.statistics, alpha=alpha)
    base_config = {**spec.base_config, **base}
    return dataclasses.replace(spec, name=f"{spec.name}: {what}", sweep={}, steps=steps,
                               one_at_a_time=one_at_a_time, workload=workload, tune=None,
                               statistics=statistics_, base_config=base_config,
                               tied=_ties(spec, base_config, steps))


def _trial_spec(spec: Spec, changes: dict[str, str], rounds: int, number: int) -> Spec:
    """A run of two points: the baseline, and the baseline with the candidate's changes (a
    one-step run), `rounds` rounds on the design the settings allow."""
    workload = dataclasses.replace(cast(Any, spec.workload),
                                   rounds=Rounds(fixed=rounds, design="auto"))
    return dataclasses.replace(spec, name=f"{spec.name}: trial {number}", sweep={},
                               steps=[dict(changes)], one_at_a_time=False, workload=workload,
                               tune=None, tied=_ties(spec, spec.base_config, [changes]))


def _ties(spec: Spec, base: Mapping[str, Any], steps: list[dict[str, str]]) -> dict[str, str]:
    """The spec's [tie] entries whose leader this run sets: a trial that leaves the leader at
    the baseline's value leaves its follower there too."""
    def name(written: str) -> str:
        return written.strip().lower().replace("-", "_")

    set_here = {name(k) for k in base} | {name(k) for step in steps for k in step}
    return {follower: leader for follower, leader in spec.tied.items()
            if name(leader) in set_here}


def _promising(ratios: list[float], earlier: list[TrialOutcome], min_effect: float) -> bool:
    """Within one standard error of beating both the best trial so far and the baseline by
    min_effect: worth more rounds. The standard error uses the noise pooled over every trial
    (a trial's own two or three rounds say little about it)."""
    scored = [o for o in earlier if o.feasible]
    target = min([-math.log1p(min_effect), *(o.score or 0.0 for o in scored)])
    spread = _pooled_sd([*(o.ratios for o in scored), ratios])
    return statistics.fmean(ratios) - spread / math.sqrt(len(ratios)) < target


def _pooled_sd(groups: list[list[float]]) -> float:
    """The per-round standard deviation within trials, pooled over them."""
    squares = sum(sum((r - statistics.fmean(g)) ** 2 for r in g) for g in groups if len(g) > 1)
    freedom = sum(len(g) - 1 for g in groups if len(g) > 1)
    return math.sqrt(squares / freedom) if freedom else math.inf


def _baseline_failed(store: Store, run_id: str) -> str | None:
    """The error of the baseline's measurements in a trial's run, when none of them worked."""
    baseline = [t for t in store.trials(run_id) if t.point_idx == 0]
    if any(t.status == TrialState.DONE for t in baseline):
        return None
    return next((t.error for t in baseline if t.error), None)


# --- the study ---------------------------------------------------------------------------------


def _open_study(options: TuneOptions, spec: Spec, space: Space, url: str,
                machine: dict[str, str]) -> optuna.Study:
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    seed = spec.statistics.seed

    sampler: optuna.samplers.BaseSampler
    if options.sampler == "tpe":
        sampler = optuna.samplers.TPESampler(multivariate=True, seed=seed)
    elif options.sampler == "gp":
        import importlib.util

        if importlib.util.find_spec("torch") is None:  # Optuna's GP is written with PyTorch
            raise UserError("[tune] sampler = \"gp\" needs PyTorch: install it into "
                            "knoblab's virtualenv (.venv/bin/pip install torch), or use "
                            "sampler = \"tpe\"")
        sampler = optuna.samplers.GPSampler(seed=seed)
    else:
        sampler = optuna.samplers.RandomSampler(seed=seed)
    try:
        # Each worker beats while it measures; a trial whose worker fell silent (killed, its
        # machine gone) is failed by the next worker that asks, and queued again.
        with _heartbeat_unwarned():
            storage = optuna.storages.RDBStorage(
                url, engine_kwargs={"pool_pre_ping": True}, heartbeat_interval=HEARTBEAT,
                grace_period=GRACE, heartbeat_stale_trial_callback=_requeue)
        study = optuna.create_study(study_name=options.study, storage=storage,
                                    sampler=sampler, direction="minimize", load_if_exists=True)
    except Exception as exc:  # noqa: BLE001 - whatever the storage's driver raises
        raise UserError(f"cannot open the tuning study's storage {safe_url(url)}: "
                        f"{str(exc).splitlines()[0]}; check [tune] storage") from None
    signature = _signature(spec, space)
    found = study.user_attrs.get("signature")
    if found is None:
        study.set_user_attr("signature", signature)
    elif found != signature:
        raise UserError(f"study {options.study!r} searches another spec (its workload or "
                        "settings differ): give this one its own [tune] study = \"...\"")
    first = study.user_attrs.get("machine")
    if first is None:
        study.set_user_attr("machine", machine)
    elif differ := differences(machine, first):
        raise UserError(f"this machine is not like the one study {options.study!r} was "
                        f"measured on ({'; '.join(differ)}): its trials would not compare; "
                        "tune it in a study of its own ([tune] study = \"...\")")
    return study


class _Turn:
    """One worker at a time counts a study's trials and takes a new one, whatever machine it
    runs on: a lock of the study's own storage (an advisory lock on PostgreSQL, a named lock
    on MySQL and MariaDB, a file lock beside a SQLite study). One lock for the storage, not
    one per study: workers of two new studies would otherwise both create its tables."""

    def __init__(self, url: str) -> None:
        from sqlalchemy.engine import make_url

        try:
            parsed = make_url(url)
        except Exception:  # noqa: BLE001 - _open_study has said what is wrong with it
            parsed = None
        self.backend = "" if parsed is None else parsed.get_backend_name()
        self.url, self.parsed = url, parsed
        database = "" if parsed is None else str(parsed.database)
        digest = hashlib.sha256(f"knoblab tune {database}".encode()).digest()
        self.key = int.from_bytes(digest[:8], "big", signed=True)
        self.name = f"knoblab-tune-{digest.hex()[:32]}"
        if parsed is not None and self.backend not in ("sqlite", "postgresql", "mysql",
                                                       "mariadb"):
            raise UserError(f"[tune] storage {safe_url(url)}: knoblab keeps a study's trials "
                            "on SQLite, PostgreSQL or MySQL/MariaDB; use one of them")
        self._engine: Any = None

    def engine(self) -> Any:
        if self._engine is None:
            import sqlalchemy as sa

            self._engine = sa.create_engine(self.url, poolclass=sa.pool.NullPool)
        return self._engine

    @contextlib.contextmanager
    def __call__(self) -> Iterator[None]:
        import sqlalchemy as sa

        with contextlib.ExitStack() as held:
            try:
                self._take(held)
            except (OSError, sa.exc.SQLAlchemyError) as exc:
                raise UserError(f"cannot open the tuning study's storage {safe_url(self.url)}: "
                                f"{(str(exc).splitlines() or [type(exc).__name__])[0]}; check "
                                "[tune] storage") from None
            yield

    def _take(self, held: contextlib.ExitStack) -> None:
        """The lock, its release left to `held`."""
        import sqlalchemy as sa

        if not self.backend:
            return  # an unreadable URL: opening the study refuses it
        if self.backend == "sqlite":
            database = self.parsed.database if self.parsed is not None else None
            if not database or database == ":memory:":
                return  # one process: nobody to take turns with
            import fcntl

            path = Path(database).expanduser()
            fd = os.open(path.with_name(path.name + ".lock"), os.O_RDWR | os.O_CREAT, 0o600)
            held.callback(os.close, fd)  # closing it releases the lock
            fcntl.flock(fd, fcntl.LOCK_EX)
        elif self.backend == "postgresql":
            # Released with the transaction, also when the connection is lost.
            conn = held.enter_context(self.engine().begin())
            conn.execute(sa.text("SELECT pg_advisory_xact_lock(:key)"), {"key": self.key})
        else:
            conn = held.enter_context(self.engine().connect())
            conn.execute(sa.text("SELECT GET_LOCK(:name, -1)"), {"name": self.name})
            held.callback(conn.execute, sa.text("SELECT RELEASE_LOCK(:name)"),
                          {"name": self.name})


def _validated(study: optuna.Study, outcomes: list[TrialOutcome]
               ) -> tuple[list[Validation] | None, Reduction | None]:
    """The validations (and reduction) already made of these very trials: a finished study
    asked again shows them instead of measuring them again."""
    saved = study.user_attrs.get("validation")
    if not saved or saved.get("trials") != len(outcomes):
        return None, None
    by_number = {o.number: o for o in outcomes}
    validations = [Validation(by_number[v["trial"]], v["run"], v["verdict"], v["gain"],
                              None if v["interval"] is None else tuple(v["interval"]),
                              v["rounds"], v.get("observed"))
                   for v in saved["items"] if v["trial"] in by_number]
    reduction = saved.get("reduction")
    return validations, None if reduction is None else Reduction(
        [Effect(e["name"], e["loss"], tuple(e["interval"]), e["measurable"])
         for e in reduction["effects"]], reduction["run"], reduction["kept"],
        reduction["check_run"], reduction["equivalent"])


def _save_validations(study: optuna.Study, outcomes: list[TrialOutcome],
                      validations: list[Validation], reduction: Reduction | None) -> None:
    study.set_user_attr("validation", {"trials": len(outcomes), "items": [
        {"trial": v.trial.number, "run": v.run_id, "verdict": v.verdict, "gain": v.gain,
         "interval": v.interval, "rounds": v.rounds, "observed": v.observed}
        for v in validations],
        "reduction": None if reduction is None else {
            "effects": [dataclasses.asdict(e) for e in reduction.effects],
            "run": reduction.run_id, "kept": reduction.kept,
            "check_run": reduction.check_run_id, "equivalent": reduction.equivalent}})


LOCAL_HOSTS = frozenset({"", "localhost", "127.0.0.1", "::1"})
DEFAULT_PORTS = {"postgresql": 5432, "mysql": 3306, "mariadb": 3306}


def _check_not_the_store(storage: str, store: Store) -> None:
    """[tune] storage naming knoblab's own results store would write Optuna's tables among
    knoblab's (and clash with them): refused before either is touched."""
    from sqlalchemy.engine import make_url

    try:
        study_url = make_url(driver_url(storage))
    except Exception:  # noqa: BLE001 - a malformed URL: opening the study says what is wrong
        return
    if _same_database(study_url, store.engine.url):
        raise UserError(f"[tune] storage = {safe_url(driver_url(storage))} is knoblab's own "
                        "results store: give the study a database of its own (e.g. "
                        "\"sqlite:///study.sqlite\", or another PostgreSQL database), or leave "
                        "storage out to keep it beside the results store")


def _same_database(a: Any, b: Any) -> bool:
    """Whether two SQLAlchemy URLs name one database: one SQLite file, or one database on one
    server (local host names taken as one host, the default port as written or not)."""
    backend = a.get_backend_name()
    if backend != b.get_backend_name():
        return False
    if backend == "sqlite":
        files = [x.database for x in (a, b)]
        if not all(files) or ":memory:" in files:
            return False
        paths = [Path(f).expanduser() for f in files]
        with contextlib.suppress(OSError):
            if all(p.exists() for p in paths):
                return os.path.samefile(*paths)
        return paths[0].resolve() == paths[1].resolve()

    def where(url: Any) -> tuple[str, int | None, str | None]:
        host = url.host or str(url.query.get("host") or "")
        host = "localhost" if host in LOCAL_HOSTS or host.startswith("/") else host.lower()
        return host, url.port or DEFAULT_PORTS.get(backend), url.database

    return where(a) == where(b)


def _no_password(storage: str) -> None:
    """The spec is stored with the study and shown in its report: no password in it."""
    from knoblab.store import parse_url

    url = parse_url(storage, "[tune] storage")
    if url.password is not None or "password" in url.query:
        raise UserError("[tune] storage: a password is never written in a spec; leave it out "
                        "of the URL and give it through PGPASSWORD or ~/.pgpass (PostgreSQL) "
                        "or an option file (MySQL, MariaDB)")


def _beside(store: Store) -> str:
    from knoblab.store import sqlite_url

    url = store.engine.url
    if url.drivername.startswith("sqlite") and url.database:
        path = Path(url.database)
        return sqlite_url(path.with_name(path.stem + '-tune.sqlite'))
    raise UserError("with a shared results store, give the tuning study's storage too: "
                    "[tune] storage = \"postgresql://...\" (a database of its own)")


def _signature(spec: Spec, space: Space) -> str:
    """What makes two invocations the same study: the workload, the base and the space."""
    described = {"workload": spec.workload.describe(), "kind": spec.workload.kind,
                 "base": spec.base_config, "space": [dataclasses.asdict(d)
                                                     for d in space.dimensions]}
    return hashlib.sha256(json.dumps(described, sort_keys=True, default=str).encode()
                          ).hexdigest()[:16]


def _params_for(space: Space, config: dict[str, str]) -> dict[str, Any] | None:
    """The sampler's parameters of a configuration, when it lies in the space."""
    params: dict[str, Any] = {}
    for d in space.dimensions:
        value = config[d.name]
        if d.choices:
            if value not in d.choices:
                return None
            params[d.name] = value
            continue
        assert d.low is not None and d.high is not None
        try:
            number = int(value)
        except ValueError:
            return None
        if not d.low <= number <= d.high:
            return None
        params[d.name] = number
    return params


def _outcome(trial: optuna.trial.FrozenTrial, space: Space,
             baseline: dict[str, str]) -> TrialOutcome | None:
    """A trial of the study as knoblab told it: only a complete one, whose value and state
    were stored together by one `tell`. A trial cut short while it was told (its attributes
    written, its value not) is failed later and queued again: not an outcome."""
    if trial.state != _complete() or "state" not in trial.user_attrs:
        return None
    attrs = trial.user_attrs
    state = attrs["state"]
    return TrialOutcome(trial.number, space.config(trial.params), dict(attrs.get("changes", {})),
                        state, trial.value if state in ("scored", "baseline") else None,
                        list(attrs.get("ratios", [])), tuple(attrs.get("runs", ())),
                        attrs.get("error"), attrs.get("observed"), attrs.get("violation"))


def _complete() -> optuna.trial.TrialState:
    import optuna

    return optuna.trial.TrialState.COMPLETE


def _spent(trials: list[optuna.trial.FrozenTrial]) -> float:
    return sum(float(t.user_attrs.get("seconds", 0.0)) for t in trials)


def _typical_trial(trials: list[optuna.trial.FrozenTrial]) -> float:
    seconds = [float(t.user_attrs["seconds"]) for t in trials
               if t.user_attrs.get("state") == "scored" and "seconds" in t.user_attrs]
    return statistics.median(seconds) if seconds else 0.0


def _owner() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


@contextlib.contextmanager
def _heartbeat_unwarned() -> Iterator[None]:
    """Optuna calls its heartbeat experimental, and expects it only within study.optimize;
    knoblab asks and tells, and beats with _beating."""
    import optuna

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        warnings.filterwarnings("ignore", message="Heartbeat of storage")
        yield


def _requeue(study: optuna.Study, trial: optuna.trial.FrozenTrial) -> None:
    """A trial failed for want of its worker's heartbeat: its configuration queued again."""
    study.enqueue_trial(dict(trial.params), skip_if_exists=False)


@contextlib.contextmanager
def _beating(study: optuna.Study, trial: optuna.Trial) -> Iterator[None]:
    """The trial's heartbeat, recorded at once and every HEARTBEAT seconds while it is
    measured."""
    beat = functools.partial(_beat, study, trial)
    beat()
    with runner.beating(beat, HEARTBEAT):
        yield


def _beat(study: optuna.Study, trial: optuna.Trial) -> None:
    storage = study._storage  # noqa: SLF001 - the heartbeat is the storage's, by trial id
    storage.record_heartbeat(trial._trial_id)  # type: ignore[attr-defined]  # noqa: SLF001


def _abandon(study: optuna.Study, trial: optuna.Trial) -> None:
    """A trial cut short (Ctrl-C, an error): failed, and its configuration queued again so
    that the next invocation measures it first."""
    import optuna

    params = dict(trial.params)
    # A stop while it was being told may come after the tell itself: then it stands.
    told = study.tell(trial, state=optuna.trial.TrialState.FAIL, skip_if_finished=True)
    if told.state == optuna.trial.TrialState.FAIL:
        study.enqueue_trial(params, skip_if_exists=False)


def _requeue_abandoned(study: optuna.Study) -> None:
    """Trials left running by a process of this machine that is gone (killed), or by a worker
    killed the moment it took one (no owner yet, long ago): failed and queued again."""
    import optuna

    host = socket.gethostname()
    for trial in study.trials:
        if trial.state != optuna.trial.TrialState.RUNNING:
            continue
        owner = str(trial.user_attrs.get("owner", ""))
        where, _, pid = owner.rpartition(":")
        if not owner:
            started = trial.datetime_start
            if started is None or (datetime.datetime.now() - started).total_seconds() < GRACE:
                continue
        elif where != host or not pid.isdigit() or alive(int(pid)):
            continue
        study.tell(trial.number, state=optuna.trial.TrialState.FAIL)
        study.enqueue_trial(dict(trial.params), skip_if_exists=False)


class _Quiet:
    """The trial runs' own listener: tune shows its progress per trial instead; only the
    runs' messages (the data being built, a sandbox left behind) are passed on."""

    def __init__(self, listener: TuneListener) -> None:
        self.listener = listener
        self.shown: set[str] = set()

    def message(self, text: str) -> None:
        # Each once: every trial's run would repeat the data's line; the runs' own
        # "run ID: N points" lines are the trial lines' business.
        if text not in self.shown and not text.startswith("run "):
            self.shown.add(text)
            self.listener.message(text)

    def dataset_progress(self, done: int, total: int) -> None:
        pass

    def plan(self, total: int, done: int, unit: str) -> None:
        pass

    def trial(self, label: str, repetition: int, status: str, value: float | None,
              error: str | None) -> None:
        pass

    def second(self, label: str, second: Second) -> None:
        pass

    def decision(self, undecided: list[str], most_left: int, budget_left: float | None
                 ) -> None:
        pass
