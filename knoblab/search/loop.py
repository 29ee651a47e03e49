"""What is proposed and scored: the ask/tell loop. Optuna proposes configurations; knoblab
measures each beside the baseline on the same server starts (several candidates to a start
where their settings change in place: warm trials), so that the optimizer is told the
candidate's ratio to the baseline measured beside it, not a time that drifts with the machine.
Each measurement is a step Optuna's pruner sees: it stops the trials that are not among the
best at their rung. A configuration that is unsafe (durability given up without consent,
memory over the budget) is never run, and one the server refuses is a result: both are told to
the sampler as infeasible, so it stops proposing their region."""

from __future__ import annotations

import dataclasses
import hashlib
import math
import statistics
import time
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, cast

from knoblab import runner, safety
from knoblab.errors import STOP, UserError, stop_here
from knoblab.judging import Direction
from knoblab.recommend import name
from knoblab.records import Goal, Metric, Space, TrialOutcome
from knoblab.search.fidelity import Fidelity
from knoblab.search.options import TuneOptions
from knoblab.search.study import (
    WAIT,
    Turn,
    abandon,
    beat,
    beating,
    checked_seconds,
    heartbeat_unwarned,
    new_trial,
    outcome_of,
    requeue_abandoned,
    seconds_spent,
    tell,
    told_states,
    typical_trial,
    worker_name,
)
from knoblab.seconds import Second
from knoblab.spec import Spec
from knoblab.store import Store
from knoblab.units import setting_text
from knoblab.vocabulary import Design, OutcomeState, SearchStop, TrialState
from knoblab.workloads.base import Rounds, Workload

if TYPE_CHECKING:
    import optuna

# With a budget, the search stops at this share of it; the rest checks what it found
# (knoblab.search.proof). Trials are cheap (many to a start, most stopped by the pruner after
# one measurement); validating the best, reducing and confirming the recommendation, each
# until decided in fresh starts, is where the time goes: 95 trials in 70% of a 200 s budget
# left no time to reduce a recommendation that carried two settings doing nothing.
SEARCH_SHARE = 0.4


class TuneListener(Protocol):
    def message(self, text: str) -> None: ...
    def searching(self, total: int, done: int, budget_left: float | None) -> None: ...
    # direction: the objective's ("minimize" for a time), for the gains' words
    def scored(self, outcome: TrialOutcome, best: TrialOutcome | None,
               budget_left: float | None, direction: Direction) -> None: ...


@dataclass
class Measuring:
    """A trial of this worker's being measured, step after step: its configuration, the
    log-ratios to the baseline so far (one per measurement), its runs and its share of their
    wall time."""

    trial: optuna.Trial
    config: dict[str, str]
    changes: dict[str, str]
    warm: bool  # measured on a shared start, beside the baseline and other candidates
    ratios: list[float] = field(default_factory=list)  # on the whole workload
    screen_ratios: list[float] = field(default_factory=list)  # on its part ([tune] screen)
    runs: list[str] = field(default_factory=list)
    points: list[int] = field(default_factory=list)  # the candidate's point in each run
    cuts: list[bool] = field(default_factory=list)  # whether each run measured the screen
    seconds: float = 0.0


def ask_and_tell(study: optuna.Study, turn: Turn, search: Search) -> str:
    """Trials asked of the study and measured, step by step, until its trials or the search's
    share of the budget are spent (every worker's together); each is stored as it ends.
    Returns why it stopped: "trials", "budget", or "space" (no configuration left that is not
    measured).

    A step measures every trial this worker holds once more: those whose settings need no
    restart together on one server start, beside the baseline, in a shuffled order (warm);
    the others each in a run of their own ([tune] rounds starts of the baseline and the
    candidate). After each step, Optuna's pruner is told each trial's running mean and stops
    those that are not among the best at their rung; a trial it keeps is complete after
    [tune] max_rounds measurements. New trials fill the step up to [tune] batch."""
    options, space, listener = search.options, search.space, search.listener
    distributions = space.distributions()
    active: list[Measuring] = []
    waiting = False
    step_seconds = 0.0
    stopped: str | None = None
    try:
        with beating(study, lambda: [m.trial for m in active]):
            while True:
                if STOP.is_set():
                    stop_here()
                new: list[optuna.Trial]
                # The study's trial budget holds with several workers: each counts the trials
                # taken (told, or being measured by another) and takes its own in one turn;
                # in it too, abandoned trials are failed and queued again (once, not by two
                # workers at once).
                with turn():
                    trials, outcomes, finished, taken, left = _read(study, search, active)
                    if stopped is None and len(finished) >= options.trials:
                        stopped = SearchStop.TRIALS
                    if stopped is None and left is not None and \
                            left <= max(step_seconds, typical_trial(trials)):
                        stopped = SearchStop.BUDGET
                    room = search.room(active) if stopped is None else 0
                    typical = typical_trial(trials)
                    if left is not None and typical > 0:
                        # No more new trials in a step than the budget left holds.
                        room = min(room, max(1, int(left // typical)))
                    room = min(room, options.trials - len(finished) - len(taken))
                    new, exhausted = _taken(study, distributions, space, room)
                    if exhausted:
                        listener.message("every configuration of the space has been "
                                         "measured: the search ends here")
                        stopped = SearchStop.SPACE
                if stopped == SearchStop.BUDGET and active:
                    # No step fits in what is left: the trials being measured are told with
                    # the measurements they have.
                    for m in list(active):
                        search.told(study, m, OutcomeState.SCORED, outcomes)
                        active.remove(m)
                if not active and not new:
                    if stopped is not None:
                        told = sum(t.state in told_states() for t in study.trials)
                        listener.searching(told, told, left)
                        return stopped
                    # The last trials are another worker's: its results are this search's
                    # too (and its trial is queued again should that worker die).
                    if not waiting:
                        listener.message(f"the study's last {len(taken)} trial(s) are being "
                                         "measured by another worker: waiting for them")
                        waiting = True
                    STOP.wait(WAIT)
                    continue
                began = time.monotonic()
                try:
                    active += search.admit(study, new, outcomes)
                except BaseException:
                    for trial in new:
                        abandon(study, trial)
                    raise
                if active:
                    active = search.step(study, active, outcomes)
                step_seconds = time.monotonic() - began
    except BaseException:
        for m in active:
            abandon(study, m.trial)
        raise


def _read(study: optuna.Study, search: Search, active: list[Measuring]
          ) -> tuple[list[optuna.trial.FrozenTrial], list[TrialOutcome],
                     list[optuna.trial.FrozenTrial], list[optuna.trial.FrozenTrial],
                     float | None]:
    """The study as a step begins, read once in the worker's turn (other workers add trials
    meanwhile), abandoned trials queued again and stale ones failed: its trials, their
    outcomes, those told and those being measured, and the search's budget left (said)."""
    import optuna

    options = search.options
    requeue_abandoned(study)
    with heartbeat_unwarned():
        optuna.storages.fail_stale_trials(study)
    trials = study.trials
    outcomes = [o for o in (outcome_of(t, search.space, search.baseline) for t in trials) if o]
    spent = seconds_spent(trials) + checked_seconds(study) + sum(m.seconds for m in active)
    finished = [t for t in trials if t.state in told_states()]
    taken = [t for t in trials if t.state == optuna.trial.TrialState.RUNNING]
    left = None if options.budget is None else options.budget * search.share - spent
    search.listener.searching(expected_trials(options.trials, len(finished), len(taken), left,
                                              typical_trial(trials)), len(finished), left)
    return trials, outcomes, finished, taken, left


def _taken(study: optuna.Study, distributions: dict[str, Any], space: Space, room: int
           ) -> tuple[list[optuna.Trial], bool]:
    """Up to `room` new trials asked of the study, each owned by this worker and beating
    before the turn ends (a trial being measured is never one no worker can tell abandoned);
    and whether the space had no configuration left that is not measured."""
    new: list[optuna.Trial] = []
    while len(new) < room:
        with heartbeat_unwarned():
            trial = new_trial(study, distributions, space)
        if trial is None:
            return new, True
        try:
            trial.set_user_attr("owner", worker_name())
            beat(study, trial)
        except BaseException:
            abandon(study, trial)
            raise
        new.append(trial)
    return new, False



def warm_settings(search: Search) -> frozenset[str]:
    """The searched settings whose candidates can be measured warm, many on one server
    start, set in place beside the baseline: those the server changes while it runs, when
    the workload leaves its data as it found it (else every measurement needs a fresh copy),
    and whose value set in place reads back as a server started with it has it (checked
    once: a setting that differs is said, and searched with a start per candidate)."""
    spec, space, catalog = search.spec, search.space, search.catalog
    dynamic = [d for d in space.dimensions if catalog.knobs[d.name].dynamic]
    if spec.workload.writes_data or not dynamic:
        return frozenset()
    probe = _probe(search, dynamic)
    if probe is None:
        search.listener.message("every candidate gets a start of its own: no value of the "
                                "searched settings could be checked in place safely")
        return frozenset()
    check = _trial_spec(spec, [probe], 1, 0)
    search.quiet.unsaid.update(f"warning: {w}" for w in runner.few_rounds(check))
    at_start, in_place = runner.read_back(check, search.home, search.store, search.quiet,
                                          search.open_servers)
    differ = [n for n in probe if at_start.get(n) != in_place.get(n)]
    for n in differ:
        search.listener.message(
            f"{n} = {setting_text(n, probe[n])} set in place reads back "
            f"{in_place.get(n)}, at a server start {at_start.get(n)}: its candidates get a "
            "server start of their own")
    return frozenset(probe) - set(differ)


def _probe(search: Search, dimensions: list[Any]) -> dict[str, str] | None:
    """A value other than the baseline's for each setting: the middle of its range (or
    another choice), else its low end, as long as the configuration is safe to run."""
    spec = search.spec
    for end in ("middle", "low"):
        probe = {}
        for d in dimensions:
            if d.choices:
                value = next((c for c in d.choices if c != search.baseline[d.name]), None)
            else:
                low, high = d.low or 0, d.high or 0
                middle = round(math.sqrt(max(low, 1) * high)) if d.log else (low + high) // 2
                value = d.value(middle if end == "middle" else low)
                if value == search.baseline[d.name]:
                    value = d.value(high)
            if value is not None and value != search.baseline[d.name]:
                probe[d.name] = value
        try:
            safety.check([(probe, probe)], spec.base_settings(search.catalog), search.catalog,
                         connections=spec.workload.connections_for,
                         allow_durability_tradeoff=spec.allow_durability_tradeoff,
                         memory_budget=spec.memory_budget, machine_memory=machine_memory(spec))
        except UserError:
            continue
        return probe or None
    return None


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
        # The searched settings a candidate may change and still be measured warm, on a
        # shared start (`warm_settings`); none until checked.
        self.warm: frozenset[str] = frozenset()
        # The part of the workload that screens each candidate first, and its words.
        self.screen: tuple[Workload, str] | None = None if options.screen is None else \
            spec.workload.cut(options.screen, "[tune] screen")
        # What the checks measure (`checking`: the part the budget sized, Search.measure_in),
        # a cold trial's starts per step, and the search's share of the budget.
        self.checking = spec
        self.cold_rounds = options.rounds
        self.share = SEARCH_SHARE

    def measure_in(self, fidelity: Fidelity) -> None:
        """Trials measure the search's part of the workload, checks the checks' part, each
        of them expected to cost what the baseline's measurement said; a cold trial's step
        is one start of the baseline and one of the candidate (the pruner's first rung a
        trial's cheapest look, more measurements for those it keeps)."""
        whole = self.spec.workload
        if fidelity.search is not None:
            self.spec = dataclasses.replace(
                self.spec, workload=whole.cut(fidelity.search, "[tune] fidelity")[0])
        checked = whole if fidelity.check is None else \
            whole.cut(fidelity.check, "[tune] fidelity")[0]
        self.checking = dataclasses.replace(self.checking, workload=dataclasses.replace(
            cast(Any, checked), rounds=dataclasses.replace(checked.rounds,
                                                           expected=fidelity.check_cost)))
        self.cold_rounds, self.share = 1, fidelity.share

    def cost_of(self, workload: Workload) -> float:
        """The seconds one measurement of the baseline on `workload` takes, start included
        (the data's one-time preparation left out): a run of its own, stored."""
        spec = dataclasses.replace(self.spec, workload=workload)
        run_id = self.run_trial(dataclasses.replace(
            _trial_spec(spec, [], 1, 0), name=f"{spec.name}: what a measurement costs"))
        _refuse_unmeasured_baseline(self.store, run_id)
        return runner.measuring_seconds([t for t in self.store.trials(run_id)
                                         if t.status == TrialState.DONE])

    def run(self, spec: Spec) -> str:
        return runner.start_run(spec, self.store, self.home, self.quiet,
                                open_servers=self.open_servers)

    def run_trial(self, spec: Spec) -> str:
        """A step's run (`_trial_spec`). Its rounds are few by design (one start for a warm
        step, [tune] rounds for a cold one): the search only ranks trials, and validation
        decides, in rounds until decided. The run's warning that its rounds are too few to
        decide, with advice to set [workload] repetitions (a key tune does not read), is
        not passed on: it is not the user's to follow."""
        self.quiet.unsaid.update(f"warning: {w}" for w in runner.few_rounds(spec))
        return self.run(spec)

    # -- trials ---------------------------------------------------------------------------

    def room(self, active: list[Measuring]) -> int:
        """How many new trials the next step takes: a shared start holds [tune] batch
        candidates (the warm ones of `active` among them); a cold trial is measured alone."""
        if not self.warm:
            return 0 if active else 1
        return max(0, self.options.batch - sum(m.warm for m in active))

    def admit(self, study: optuna.Study, trials: list[optuna.Trial],
              earlier: list[TrialOutcome]) -> list[Measuring]:
        """New trials, those that need no measurement told at once (the baseline itself; a
        configuration refused before it runs); the others to be measured."""
        spec = self.spec
        admitted = []
        for trial in trials:
            config = self.space.config(trial.params)
            changes = {k: v for k, v in config.items() if v != self.baseline[k]}
            measuring = Measuring(trial, config, changes, warm=set(changes) <= self.warm)
            if not changes:
                self.told(study, measuring, OutcomeState.BASELINE, earlier)
                continue
            try:
                safety.check([(changes, changes)], spec.base_settings(self.catalog),
                             self.catalog, connections=spec.workload.connections_for,
                             allow_durability_tradeoff=spec.allow_durability_tradeoff,
                             memory_budget=spec.memory_budget,
                             machine_memory=machine_memory(spec))
            except UserError as exc:
                self.told(study, measuring, OutcomeState.REFUSED, earlier, str(exc))
                continue
            admitted.append(measuring)
        return admitted

    def step(self, study: optuna.Study, active: list[Measuring],
             earlier: list[TrialOutcome]) -> list[Measuring]:
        """Each trial measured once more (the warm ones on one start together, each cold one
        in a run of its own), its running mean reported to the pruner, and told when the
        pruner stops it, it has max_rounds measurements, or it failed. The trials that go
        on."""
        def screening(m: Measuring) -> bool:
            return self.screen is not None and not m.ratios and not m.screen_ratios

        warm = [m for m in active if m.warm]
        groups = [g for g in ([m for m in warm if screening(m)],
                              [m for m in warm if not screening(m)]) if g]
        groups += [[m] for m in active if not m.warm]
        going = []
        for group in groups:
            began = time.monotonic()
            number = min(m.trial.number for m in group)
            rounds = 1 if group[0].warm else self.cold_rounds
            cut = screening(group[0])
            spec = self.spec if not cut or self.screen is None else \
                dataclasses.replace(self.spec, workload=self.screen[0])
            run_id = self.run_trial(_trial_spec(spec, [m.changes for m in group], rounds,
                                                number, len(group[0].runs),
                                                blocked=group[0].warm,
                                                baseline=self.baseline))
            share = (time.monotonic() - began) / len(group)
            ratios, errors = self.ratios(run_id, candidate_points(len(group)))
            if not ratios:
                _refuse_unmeasured_baseline(self.store, run_id)
            for point, m in zip(candidate_points(len(group)), group, strict=True):
                m.runs.append(run_id)
                m.points.append(point)
                m.cuts.append(cut)
                m.seconds += share
                added = ratios.get(point, [])
                if not added:
                    if m.ratios or m.screen_ratios:
                        self.told(study, m, OutcomeState.SCORED, earlier)
                    else:
                        self.told(study, m, OutcomeState.FAILED, earlier, errors.get(
                            point, "no measurement of the candidate succeeded"))
                    continue
                (m.screen_ratios if cut else m.ratios).extend(added)
                # The running mean of the best fidelity it has: every trial goes through the
                # rungs alike (its screening first), so the pruner compares like with like.
                done = len(m.ratios) + len(m.screen_ratios)
                m.trial.report(statistics.fmean(m.ratios or m.screen_ratios), done)
                if done >= self.options.max_rounds and m.ratios:
                    self.told(study, m, OutcomeState.SCORED, earlier)
                elif m.trial.should_prune():
                    self.told(study, m, OutcomeState.PRUNED, earlier)
                else:
                    going.append(m)
        return going

    def told(self, study: optuna.Study, m: Measuring, state: OutcomeState,
             earlier: list[TrialOutcome], error: str | None = None) -> TrialOutcome:
        """The trial's outcome, stored in the study, told to the sampler and shown."""
        measured = state in (OutcomeState.SCORED, OutcomeState.PRUNED)
        ratios = m.ratios or m.screen_ratios
        # The constrained metric from the runs its ratios come from (the whole workload's,
        # once it has some).
        observed = self.observed([(run, point) for run, point, cut in
                                  zip(m.runs, m.points, m.cuts, strict=True)
                                  if cut == (not m.ratios)]) if measured else None
        outcome = TrialOutcome(
            m.trial.number, m.config, m.changes, state,
            statistics.fmean(ratios) if measured else 0.0 if state == OutcomeState.BASELINE
            else None, list(ratios), tuple(m.runs), error, observed=observed,
            violation=None if observed is None or self.goal.constraint is None
            else self.goal.constraint.violation(observed),
            fidelity=self.screen[1] if self.screen and not m.ratios and m.screen_ratios
            else None, screened=len(m.screen_ratios))
        tell(study, m.trial, outcome, m.seconds, earlier)
        earlier.append(outcome)
        best = min((o for o in earlier if o.feasible), key=lambda o: o.score or 0.0,
                   default=None)
        self.listener.scored(outcome, best, None, self.goal.metric.direction)
        return outcome

    def ratios(self, run_id: str, candidates: Collection[int] = (1,)
               ) -> tuple[dict[int, list[float]], dict[int, str]]:
        """Per candidate point (`candidates`; the run's other points are the baseline), its
        log-ratio to the baseline measured in the same round (the same start, in a blocked
        design; the geometric mean of the baseline's measurements there), one per round,
        lower when better; and each candidate's first error."""
        by_round: dict[int, dict[int, float]] = {}
        errors: dict[int, str] = {}
        for t in self.store.trials(run_id):
            value = metric_value(self.goal.metric, t) if t.status == TrialState.DONE else None
            if value is not None:
                by_round.setdefault(t.repetition, {})[t.point_idx] = value
            elif t.status == TrialState.FAILED and t.point_idx in candidates and t.error:
                errors.setdefault(t.point_idx, t.error)
        ratios: dict[int, list[float]] = {}
        for values in by_round.values():
            base = [math.log(v) for p, v in values.items() if p not in candidates]
            if not base:
                continue
            level = statistics.fmean(base)
            for point, value in values.items():
                if point in candidates:
                    ratios.setdefault(point, []).append(
                        self.goal.sign * (math.log(value) - level))
        return ratios, errors

    def observed(self, places: list[tuple[str, int]]) -> float | None:
        """The candidate's median of the constrained metric over its measurements (each a
        run and the candidate's point in it)."""
        if self.goal.bounded is None:
            return None
        values = [v for run, point in places for t in self.store.trials(run)
                  if t.point_idx == point and t.status == TrialState.DONE
                  and (v := metric_value(self.goal.bounded, t)) is not None]
        return statistics.median(values) if values else None


def machine_memory(spec: Spec) -> int | None:
    """The memory of the sandboxes' [machine], which trials are held to (not this
    machine's)."""
    return spec.machine.memory if spec.machine is not None else None


def metric_value(metric: Metric, trial: Any) -> float | None:
    value = trial.value if metric.detail is None else trial.details.get(metric.detail)
    return float(value) if isinstance(value, int | float) and value > 0 else None


def candidate_points(candidates: int) -> list[int]:
    """The points of a trial's run (`_trial_spec`) its candidates are at, in order; the
    others are the baseline's."""
    return [1] if candidates == 1 else [2 * i + 1 for i in range(candidates)]


def _trial_spec(spec: Spec, candidates: list[dict[str, str]], rounds: int, number: int,
                more: int = 0, blocked: bool = False,
                baseline: Mapping[str, str] | None = None) -> Spec:
    """A run of the baseline and each candidate (the baseline with its changes; each step
    alone; `baseline`: the searched settings' values in it, needed for two or more),
    `rounds` rounds: all on one start per round, the settings set in place
    (`blocked`), or on the design the settings allow. Two or more candidates each have a
    measurement of the baseline of their own beside them (the points of
    `candidate_points`; the others are the baseline): with one for all, a lucky one shifted
    all alike. Each run (`number`: its first trial's; `more`: the how-manieth step of it)
    has an order of its own: with one seed for all, every trial would measure its candidate
    in the same places of its starts."""
    # A cold trial is one whose settings a change in place does not make as a start does
    # (or that only a start makes, or whose workload changes its data): a start each.
    workload = dataclasses.replace(cast(Any, spec.workload), rounds=Rounds(
        fixed=rounds, design=Design.BLOCKED if blocked else Design.RESTARTS))
    digest = hashlib.sha256(f"{spec.statistics.seed}/trial {number}/{more}".encode()).digest()
    statistics = dataclasses.replace(spec.statistics,
                                     seed=int.from_bytes(digest[:8], "big") >> 1)
    # Steps are cumulative: after each candidate of several, a step puts its changes back,
    # so that each candidate's point is the baseline with its changes alone, and the point
    # after it the baseline again.
    steps: list[dict[str, str]] = []
    baseline = baseline or {}
    for i, changes in enumerate(candidates):
        steps.append(dict(changes))
        if len(candidates) > 1 and i < len(candidates) - 1:
            steps.append({k: baseline[k] for k in changes})
    named = f"trial {number}" if len(candidates) == 1 else \
        f"trials {number} and {len(candidates) - 1} more, on one start"
    return dataclasses.replace(spec, name=f"{spec.name}: {named}", sweep={},
                               steps=steps, one_at_a_time=False, workload=workload,
                               tune=None, tied=ties(spec, spec.base_config, steps),
                               statistics=statistics)


def _refuse_unmeasured_baseline(store: Store, run_id: str) -> None:
    """UserError when none of the baseline's measurements in a trial's run worked: nothing
    can be scored against it."""
    if failed := _baseline_failed(store, run_id):
        raise UserError(f"the baseline itself could not be measured (run {run_id}: {failed}); "
                        "fix [server.config] or the workload, then run knoblab tune again")


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
                runner.check_points(_trial_spec(spec, [{d.name: value}], options.rounds, 0),
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
