"""What is proposed and scored: the ask/tell loop. Optuna proposes configurations; knoblab
measures each as a short run of its own: the baseline and the candidate, side by side on the
same server starts (blocked where the settings need no restart), so that the optimizer is told
the candidate's ratio to the baseline measured beside it, not a time that drifts with the
machine. A configuration that is unsafe (durability given up without consent, memory over the
budget) is never run, and one the server refuses is a result: both are told to the sampler as
infeasible, so it stops proposing their region. A promising trial gets more rounds."""

from __future__ import annotations

import dataclasses
import hashlib
import math
import statistics
import time
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, cast

from knoblab import runner, safety
from knoblab.errors import STOP, UserError, stop_here
from knoblab.recommend import name
from knoblab.records import Goal, Metric, Space, TrialOutcome
from knoblab.search.options import TuneOptions
from knoblab.search.study import (
    WAIT,
    Turn,
    abandon,
    beat,
    beating,
    checked_seconds,
    complete_state,
    heartbeat_unwarned,
    new_trial,
    outcome_of,
    requeue_abandoned,
    seconds_spent,
    tell,
    typical_trial,
    worker_name,
)
from knoblab.spec import Spec
from knoblab.stats import Direction
from knoblab.store import Store
from knoblab.units import setting_text
from knoblab.vocabulary import OutcomeState, TrialState
from knoblab.workloads.base import Rounds, Second

if TYPE_CHECKING:
    import optuna

# With a budget, the search stops at this share of it; the rest checks what it found
# (knoblab.search.proof).
SEARCH_SHARE = 0.7


class TuneListener(Protocol):
    def message(self, text: str) -> None: ...
    def searching(self, total: int, done: int, budget_left: float | None) -> None: ...
    # direction: the objective's ("minimize" for a time), for the gains' words
    def scored(self, outcome: TrialOutcome, best: TrialOutcome | None,
               budget_left: float | None, direction: Direction) -> None: ...


def ask_and_tell(study: optuna.Study, turn: Turn, search: Search) -> str:
    """Trials asked of the study and measured until its trials or the search's share of the
    budget are spent (every worker's together); each is stored as it ends. Returns why it
    stopped: "trials", "budget", or "space" (no configuration left that is not measured)."""
    import optuna

    options, space, baseline, listener = (search.options, search.space, search.baseline,
                                          search.listener)
    distributions = space.distributions()
    waiting = False
    while True:
        if STOP.is_set():
            stop_here()
        # The study's trial budget holds with several workers: each counts the trials taken
        # (finished, or being measured by another) and takes its own in one turn; in it too,
        # abandoned trials are failed and queued again (once, not by two workers at once).
        with turn():
            requeue_abandoned(study)
            with heartbeat_unwarned():
                optuna.storages.fail_stale_trials(study)
            # Read once a trial: other workers add trials to the study meanwhile.
            trials = study.trials
            outcomes = [o for o in (outcome_of(t, space, baseline) for t in trials) if o]
            spent = seconds_spent(trials) + checked_seconds(study)
            finished = [t for t in trials if t.state == complete_state()]
            taken = [t for t in trials if t.state == optuna.trial.TrialState.RUNNING]
            left = None if options.budget is None else options.budget * SEARCH_SHARE - spent
            listener.searching(expected_trials(options.trials, len(finished), len(taken), left,
                                               typical_trial(trials)), len(finished), left)
            if len(finished) >= options.trials:
                return "trials"
            if left is not None and left <= typical_trial(trials):
                return "budget"
            trial = None
            if len(finished) + len(taken) < options.trials:
                with heartbeat_unwarned():
                    trial = new_trial(study, distributions, space)
                if trial is None:
                    listener.message("every configuration of the space has been measured: "
                                     "the search ends here")
                    return "space"
                try:
                    # Owned and beating before the turn ends: a trial being measured is never
                    # one that no worker can tell abandoned.
                    trial.set_user_attr("owner", worker_name())
                    beat(study, trial)
                except BaseException:
                    abandon(study, trial)
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
            with beating(study, trial):
                outcome = search.measure(trial, outcomes, left)
            tell(study, trial, outcome, time.monotonic() - began, outcomes)
        except BaseException:
            abandon(study, trial)
            raise
        outcomes.append(outcome)
        best = min((o for o in outcomes if o.feasible), key=lambda o: o.score or 0.0,
                   default=None)
        listener.scored(outcome, best, None if options.budget is None
                        else options.budget - spent - (time.monotonic() - began),
                        search.goal.metric.direction)


def expected_trials(asked: int, finished: int, taken: int, left: float | None,
                    typical: float) -> int:
    """The trials the study will have when its search ends, as progress shows it (and its
    ETA follows): the `asked` ones, or, with a budget, no more than the budget `left` holds
    at a `typical` trial's time (the loop stops once what is left is no more than one)."""
    if left is None or typical <= 0:
        return asked
    more = max(0, math.ceil(left / typical) - 1)
    return max(finished, min(asked, finished + taken + more))


class Search:
    """What every trial and check of one search shares: the spec, the goal, the baseline, and
    where runs are measured and stored."""

    def __init__(self, spec: Spec, options: TuneOptions, goal: Goal, space: Space,
                 baseline: dict[str, str], catalog: Any, store: Store, home: Path,
                 listener: TuneListener, open_servers: runner.OpenTargets) -> None:
        self.spec, self.options, self.goal, self.space = spec, options, goal, space
        self.baseline, self.catalog, self.store, self.home = baseline, catalog, store, home
        self.listener, self.open_servers = listener, open_servers
        self.quiet = Quiet(listener)

    def run(self, spec: Spec) -> str:
        return runner.start_run(spec, self.store, self.home, self.quiet,
                                open_servers=self.open_servers)

    def run_trial(self, spec: Spec) -> str:
        """A trial's run (`_trial_spec`). Its rounds are few by design ([tune] rounds, doubled
        for a promising trial up to max_rounds): the search only ranks trials, and validation
        decides, in rounds until decided. The run's warning that its rounds are too few to
        decide, with advice to set [workload] repetitions (a key tune does not read), is
        not passed on: it is not the user's to follow."""
        self.quiet.unsaid.update(f"warning: {w}" for w in runner._few_rounds(spec))
        return self.run(spec)

    # -- a trial ----------------------------------------------------------------------------

    def measure(self, trial: optuna.Trial, earlier: list[TrialOutcome], left: float | None
                ) -> TrialOutcome:
        spec, options = self.spec, self.options
        config = self.space.config(trial.params)
        changes = {k: v for k, v in config.items() if v != self.baseline[k]}
        if not changes:
            return TrialOutcome(trial.number, config, {}, OutcomeState.BASELINE, 0.0, [], ())
        try:
            safety.check([(changes, changes)], spec.base_settings(self.catalog), self.catalog,
                         connections=spec.workload.connections_for,
                         allow_durability_tradeoff=spec.allow_durability_tradeoff,
                         memory_budget=spec.memory_budget, machine_memory=machine_memory(spec))
        except UserError as exc:
            return TrialOutcome(trial.number, config, changes, OutcomeState.REFUSED, None, [], (),
                                str(exc))
        began = time.monotonic()
        run_id = self.run_trial(_trial_spec(spec, changes, options.rounds, trial.number))
        ratios, error = self.ratios(run_id)
        failed = None if ratios else _baseline_failed(self.store, run_id)
        if failed:
            raise UserError(f"the baseline itself could not be measured (run {run_id}: "
                            f"{failed}); fix [server.config] or the workload, then run "
                            "knoblab tune again")
        if not ratios:
            return TrialOutcome(trial.number, config, changes, OutcomeState.FAILED, None, [],
                                (run_id,),
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
            extra = self.run_trial(_trial_spec(spec, changes, max(2, more), trial.number,
                                               len(runs)))
            runs.append(extra)
            added, _ = self.ratios(extra)
            if not added:
                break
            ratios += added
        observed = self.observed(runs)
        return TrialOutcome(trial.number, config, changes, OutcomeState.SCORED,
                            statistics.fmean(ratios), ratios, tuple(runs), observed=observed,
                            violation=None if observed is None or self.goal.constraint is None
                            else self.goal.constraint.violation(observed))

    def ratios(self, run_id: str) -> tuple[list[float], str | None]:
        """Per round, the candidate's log-ratio to the baseline measured in the same round
        (the same start, in a blocked design), lower when better; and the candidate's first
        error."""
        by_round: dict[int, dict[int, float]] = {}
        errors = []
        for t in self.store.trials(run_id):
            value = metric_value(self.goal.metric, t) if t.status == TrialState.DONE else None
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
                  and (v := metric_value(self.goal.bounded, t)) is not None]
        return statistics.median(values) if values else None


def machine_memory(spec: Spec) -> int | None:
    """The memory of the sandboxes' [machine], which trials are held to (not this
    machine's)."""
    return spec.machine.memory if spec.machine is not None else None


def metric_value(metric: Metric, trial: Any) -> float | None:
    value = trial.value if metric.detail is None else trial.details.get(metric.detail)
    return float(value) if isinstance(value, int | float) and value > 0 else None


def _trial_spec(spec: Spec, changes: dict[str, str], rounds: int, number: int,
                more: int = 0) -> Spec:
    """A run of two points: the baseline, and the baseline with the candidate's changes (a
    one-step run), `rounds` rounds on the design the settings allow. Each run of each trial
    (`more`: the how-manieth extra run) has an order of its own: with one seed for all, every
    trial would measure its candidate in the same places of its starts."""
    workload = dataclasses.replace(cast(Any, spec.workload),
                                   rounds=Rounds(fixed=rounds, design="auto"))
    digest = hashlib.sha256(f"{spec.statistics.seed}/trial {number}/{more}".encode()).digest()
    statistics = dataclasses.replace(spec.statistics,
                                     seed=int.from_bytes(digest[:8], "big") >> 1)
    return dataclasses.replace(spec, name=f"{spec.name}: trial {number}", sweep={},
                               steps=[dict(changes)], one_at_a_time=False, workload=workload,
                               tune=None, tied=ties(spec, spec.base_config, [changes]),
                               statistics=statistics)


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


def check_trials(spec: Spec, options: TuneOptions, space: Space, baseline: dict[str, str],
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
                 memory_budget=spec.memory_budget, machine_memory=machine_memory(spec),
                 check_memory=target.local or spec.memory_budget is not None
                 or machine_memory(spec) is not None)
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


class Quiet:
    """The trial runs' own listener: tune shows its progress per trial instead; only the
    runs' messages (the data being built, a sandbox left behind) are passed on."""

    def __init__(self, listener: TuneListener) -> None:
        self.listener = listener
        self.shown: set[str] = set()
        self.unsaid: set[str] = set()  # not the user's business (Search.run_trial)

    def message(self, text: str) -> None:
        # Each once: every trial's run would repeat the data's line; the runs' own
        # "run ID: N points" lines are the trial lines' business.
        if text not in self.shown and text not in self.unsaid and not text.startswith("run "):
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


def ties(spec: Spec, base: Mapping[str, Any], steps: list[dict[str, str]]) -> dict[str, str]:
    """The spec's [tie] entries whose leader this run sets: a trial that leaves the leader at
    the baseline's value leaves its follower there too."""
    set_here = {name(k) for k in base} | {name(k) for step in steps for k in step}
    return {follower: leader for follower, leader in spec.tied.items()
            if name(leader) in set_here}
