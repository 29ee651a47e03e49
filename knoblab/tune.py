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

import dataclasses
import hashlib
import json
import math
import os
import socket
import statistics
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, cast

from knoblab import runner, safety, section
from knoblab.errors import STOP, UserError, stop_here
from knoblab.server.sandbox import alive
from knoblab.space import Space, parse_space
from knoblab.spec import Spec
from knoblab.store import Store, TrialState, safe_url
from knoblab.units import format_duration, parse_duration
from knoblab.workloads.base import Rounds, Second

if TYPE_CHECKING:
    import optuna

SAMPLERS = ("tpe", "gp", "random")
# With a budget, the search stops at this share of it; the rest validates its best candidates.
SEARCH_SHARE = 0.75
KEYS = frozenset({"knobs", "budget", "trials", "sampler", "rounds", "study", "storage",
                  "validate"})


@dataclass(frozen=True)
class TuneOptions:
    """The [tune] section (its knobs are read against the server's catalog, later)."""

    knobs: dict[str, Any]
    budget: float | None  # seconds of the study (every invocation together)
    trials: int  # at most, in the study
    sampler: str
    rounds: int  # server starts (blocks) per trial: the baseline and the candidate on each
    study: str
    storage: str | None  # an Optuna storage URL; None: a file beside knoblab's SQLite store
    validate: int  # the best candidates re-measured against the baseline, until decided

    @classmethod
    def from_spec(cls, raw: Mapping[str, Any], name: str) -> TuneOptions:
        section.check_keys("[tune]", dict(raw), KEYS)
        sampler = section.text(dict(raw), "sampler", "tune", "tpe")
        if sampler not in SAMPLERS:
            raise UserError(f"[tune] sampler = {sampler!r}: use one of {', '.join(SAMPLERS)}")
        storage = raw.get("storage")
        if storage is not None and not isinstance(storage, str):
            raise UserError(f"[tune] storage = {storage!r}: give a database URL in quotes")
        return cls(
            knobs=dict(raw.get("knobs") or {}),
            budget=parse_duration(raw["budget"], "[tune] budget") if "budget" in raw else None,
            trials=section.number(dict(raw), "trials", "tune", 100, int, 2, 100_000),
            sampler=sampler,
            rounds=section.number(dict(raw), "rounds", "tune", 3, int, 2, 100),
            study=section.text(dict(raw), "study", "tune", name),
            storage=storage,
            validate=section.number(dict(raw), "validate", "tune", 3, int, 1, 20),
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
    run_id: str | None
    error: str | None = None

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
    verdict: str  # "better", "worse", "same" (within min_effect), "undecided"
    gain: float | None
    interval: tuple[float, float] | None
    rounds: int


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

    @property
    def recommended(self) -> Validation | None:
        """The validated candidate with the largest gain shown significant, if any is."""
        better = [v for v in self.validations if v.verdict == "better"]
        return max(better, key=lambda v: v.gain or 0.0, default=None)


def tune(spec: Spec, store: Store, home: Path, listener: TuneListener,
         budget: float | None = None, open_servers: runner.OpenTargets = runner.open_servers
         ) -> TuneResult:
    """Search until the study's trials or budget are spent; every trial is stored as it ends."""
    if spec.tune is None:
        raise UserError("this spec has no [tune] section: name the settings to search in "
                        "[tune.knobs], or measure it with knoblab run")
    options = TuneOptions.from_spec(spec.tune, spec.name)
    if budget is not None:
        options = dataclasses.replace(options, budget=budget)
    least = options.rounds * 2 * (runner.LEAST_TRIAL_SECONDS + spec.workload.least_seconds)
    if options.budget is not None and options.budget * SEARCH_SHARE < least:
        raise UserError(f"a budget of {format_duration(options.budget)} cannot hold one trial "
                        f"(at the least {format_duration(least)}: {options.rounds} rounds of "
                        f"the baseline and a candidate, and {1 - SEARCH_SHARE:.0%} of the "
                        "budget is kept for validation); give a larger budget")
    targets, _ = open_servers(spec, home, listener.message)
    if len(targets) != 1:
        raise UserError("knoblab tune searches one server at a time: name one [server] binary")
    catalog = next(iter(targets.values())).catalog
    space = parse_space(options.knobs, catalog)
    base = spec.base_settings(catalog)
    baseline = {d.name: base.get(d.name) or catalog.knobs[d.name].default_value() or ""
                for d in space.dimensions}
    study = _open_study(options, spec, space, store)
    _requeue_abandoned(study)
    if not study.trials:
        params = _params_for(space, baseline)
        if params is not None:
            study.enqueue_trial(params)
    distributions = _distributions(space)
    sign = 1.0 if spec.workload.objective.direction == "minimize" else -1.0
    quiet = _Quiet(listener)
    outcomes = [o for o in (_outcome(t, space, baseline) for t in study.trials) if o]
    while True:
        if STOP.is_set():
            stop_here()
        spent = _spent(study)
        finished = [t for t in study.trials if t.state == _complete()]
        left = None if options.budget is None else options.budget * SEARCH_SHARE - spent
        listener.searching(options.trials, len(finished), left)
        if len(finished) >= options.trials:
            stopped = "trials"
            break
        if left is not None and left <= _typical_trial(study):
            stopped = "budget"
            break
        trial = study.ask(distributions)
        trial.set_user_attr("owner", _owner())
        began = time.monotonic()
        try:
            outcome = _measure(trial, spec, space, baseline, options, catalog, store, home,
                               quiet, sign, open_servers)
        except BaseException:
            _abandon(study, trial)
            raise
        trial.set_user_attr("seconds", round(time.monotonic() - began, 3))
        trial.set_user_attr("state", outcome.state)
        trial.set_user_attr("changes", outcome.changes)
        trial.set_user_attr("ratios", outcome.ratios)
        if outcome.run_id:
            trial.set_user_attr("run", outcome.run_id)
        if outcome.error:
            trial.set_user_attr("error", outcome.error)
        infeasible = outcome.state in ("refused", "failed")
        trial.set_user_attr("infeasible", 1.0 if infeasible else 0.0)
        trial.set_constraint("refused", 1.0 if infeasible else 0.0)  # > 0: infeasible
        # An infeasible trial is told as complete, with a value no better than the worst seen
        # and a violated constraint, so that the sampler learns its region (a failed trial it
        # would ignore, and propose again).
        worst = max((o.score for o in outcomes if o.score is not None), default=0.0)
        study.tell(trial, outcome.score if outcome.score is not None else worst + 1.0)
        outcomes.append(outcome)
        best = min((o for o in outcomes if o.state == "scored"),
                   key=lambda o: o.score or 0.0, default=None)
        listener.scored(outcome, best, None if options.budget is None
                        else options.budget - _spent(study))
    validation_budget = None if options.budget is None else \
        max(0.0, options.budget - _spent(study))
    validations = _validate(outcomes, spec, options, store, home, quiet, sign, listener,
                            validation_budget, open_servers)
    return TuneResult(options.study, space, baseline, outcomes, _spent(study), stopped,
                      validations, spec.statistics.min_effect)


def _validate(outcomes: list[TrialOutcome], spec: Spec, options: TuneOptions, store: Store,
              home: Path, quiet: runner.Listener, sign: float, listener: TuneListener,
              budget: float | None, open_servers: runner.OpenTargets) -> list[Validation]:
    """The best few distinct candidates that scored better than the baseline, each re-run
    against it until decided. A search keeps the luckiest of many noisy scores; a fresh
    run of it, on its own, says how much of that luck was real."""
    from knoblab.results import build_results

    ranked = sorted((o for o in outcomes if o.state == "scored" and (o.score or 0.0) < 0.0),
                    key=lambda o: o.score or 0.0)
    chosen: list[TrialOutcome] = []
    for outcome in ranked:
        if all(outcome.changes != c.changes for c in chosen):
            chosen.append(outcome)
        if len(chosen) == options.validate:
            break
    if not chosen:
        return []
    alpha = spec.statistics.alpha / len(chosen)
    done = []
    for number, outcome in enumerate(chosen, start=1):
        listener.message(f"validating {number} of {len(chosen)}: trial {outcome.number} "
                         f"({_changes_text(outcome.changes)})")
        statistics_ = dataclasses.replace(spec.statistics, alpha=alpha)
        share = None if budget is None else budget / len(chosen)
        workload = dataclasses.replace(cast(Any, spec.workload),
                                       rounds=Rounds(design="auto", budget=share))
        check = dataclasses.replace(spec, name=f"{spec.name}: validation of trial "
                                    f"{outcome.number}", sweep={}, steps=[outcome.changes],
                                    one_at_a_time=False, workload=workload, tune=None,
                                    statistics=statistics_)
        try:
            run_id = runner.start_run(check, store, home, quiet, open_servers=open_servers)
        except UserError as exc:
            if share is None or "budget" not in str(exc):
                raise
            listener.message(f"no validation: {exc}")
            break
        results = build_results(store, run_id)
        base, candidate = results.points[0], results.points[1]
        verdict = ("better" if base.verdict == "worse" else
                   "worse" if candidate.verdict == "worse" else
                   "same" if "equivalent" in (base.verdict, candidate.verdict) else "undecided")
        ratios, _ = _ratios(store, run_id, sign)
        scored = TrialOutcome(outcome.number, outcome.config, outcome.changes, "scored",
                              statistics.fmean(ratios) if ratios else None, ratios, run_id)
        done.append(Validation(outcome, run_id, verdict, scored.gain, scored.interval(),
                               len(ratios)))
    return done


def _changes_text(changes: Mapping[str, str]) -> str:
    return ", ".join(f"{k}={v}" for k, v in changes.items()) or "the baseline"


def _measure(trial: optuna.Trial, spec: Spec, space: Space, baseline: dict[str, str],
             options: TuneOptions, catalog: Any, store: Store, home: Path,
             quiet: runner.Listener, sign: float, open_servers: runner.OpenTargets
             ) -> TrialOutcome:
    config = space.config(trial.params)
    changes = {k: v for k, v in config.items() if v != baseline[k]}
    if not changes:
        return TrialOutcome(trial.number, config, {}, "baseline", 0.0, [], None)
    try:
        safety.check([(changes, changes)], spec.base_settings(catalog), catalog,
                     connections=spec.workload.connections_for,
                     allow_durability_tradeoff=spec.allow_durability_tradeoff,
                     memory_budget=spec.memory_budget)
    except UserError as exc:
        return TrialOutcome(trial.number, config, changes, "refused", None, [], None, str(exc))
    run_id = runner.start_run(_trial_spec(spec, changes, options, trial.number), store, home,
                              quiet, open_servers=open_servers)
    ratios, error = _ratios(store, run_id, sign)
    failed = None if ratios else _baseline_failed(store, run_id)
    if failed:
        raise UserError(f"the baseline itself could not be measured (run {run_id}: "
                        f"{failed}); fix [server.config] or the "
                        "workload, then run knoblab tune again")
    if not ratios:
        return TrialOutcome(trial.number, config, changes, "failed", None, [], run_id,
                            error or "no measurement of the candidate succeeded")
    return TrialOutcome(trial.number, config, changes, "scored", statistics.fmean(ratios),
                        ratios, run_id)


def _trial_spec(spec: Spec, changes: dict[str, str], options: TuneOptions, number: int) -> Spec:
    """A run of two points: the baseline, and the baseline with the candidate's changes (a
    one-step run), `rounds` rounds on the design the settings allow."""
    workload = dataclasses.replace(cast(Any, spec.workload),
                                   rounds=Rounds(fixed=options.rounds, design="auto"))
    return dataclasses.replace(spec, name=f"{spec.name}: trial {number}", sweep={},
                               steps=[dict(changes)], one_at_a_time=False, workload=workload,
                               tune=None)


def _ratios(store: Store, run_id: str, sign: float) -> tuple[list[float], str | None]:
    """Per round, the candidate's log-ratio to the baseline measured in the same round (the
    same start, in a blocked design); with `sign`, lower is better either way."""
    by_round: dict[int, dict[int, float]] = {}
    errors = []
    for t in store.trials(run_id):
        if t.status == TrialState.DONE and t.value is not None and t.value > 0:
            by_round.setdefault(t.repetition, {})[t.point_idx] = t.value
        elif t.status == TrialState.FAILED and t.point_idx == 1 and t.error:
            errors.append(t.error)
    ratios = [sign * math.log(pair[1] / pair[0]) for pair in by_round.values()
              if 0 in pair and 1 in pair]
    return ratios, errors[0] if errors else None


def _baseline_failed(store: Store, run_id: str) -> str | None:
    """The error of the baseline's measurements in a trial's run, when none of them worked."""
    baseline = [t for t in store.trials(run_id) if t.point_idx == 0]
    if any(t.status == TrialState.DONE for t in baseline):
        return None
    return next((t.error for t in baseline if t.error), None)


# --- the study ---------------------------------------------------------------------------------


def _open_study(options: TuneOptions, spec: Spec, space: Space, store: Store) -> optuna.Study:
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    storage = options.storage or _beside(store)
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
        study = optuna.create_study(study_name=options.study, storage=storage,
                                    sampler=sampler, direction="minimize", load_if_exists=True)
    except Exception as exc:  # noqa: BLE001 - whatever the storage's driver raises
        raise UserError(f"cannot open the tuning study's storage {safe_url(storage)}: "
                        f"{str(exc).splitlines()[0]}; check [tune] storage") from None
    signature = _signature(spec, space)
    found = study.user_attrs.get("signature")
    if found is None:
        study.set_user_attr("signature", signature)
    elif found != signature:
        raise UserError(f"study {options.study!r} searches another spec (its workload or "
                        "settings differ): give this one its own [tune] study = \"...\"")
    return study


def _beside(store: Store) -> str:
    url = store.engine.url
    if url.drivername.startswith("sqlite") and url.database:
        path = Path(url.database)
        return f"sqlite:///{path.with_name(path.stem + '-tune.sqlite')}"
    raise UserError("with a shared results store, give the tuning study's storage too: "
                    "[tune] storage = \"postgresql://...\" (a database of its own)")


def _signature(spec: Spec, space: Space) -> str:
    """What makes two invocations the same study: the workload, the base and the space."""
    described = {"workload": spec.workload.describe(), "kind": spec.workload.kind,
                 "base": spec.base_config, "space": [dataclasses.asdict(d)
                                                     for d in space.dimensions]}
    return hashlib.sha256(json.dumps(described, sort_keys=True, default=str).encode()
                          ).hexdigest()[:16]


def _distributions(space: Space) -> dict[str, Any]:
    from optuna.distributions import CategoricalDistribution, IntDistribution

    found: dict[str, Any] = {}
    for d in space.dimensions:
        if d.choices:
            found[d.name] = CategoricalDistribution(list(d.choices))
        else:
            assert d.low is not None and d.high is not None
            found[d.name] = IntDistribution(d.low, d.high, log=d.log,
                                            step=1 if d.log else d.step)
    return found


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
    """A finished trial of the study as knoblab told it."""
    if not trial.state.is_finished() or "state" not in trial.user_attrs:
        return None
    attrs = trial.user_attrs
    state = attrs["state"]
    return TrialOutcome(trial.number, space.config(trial.params), dict(attrs.get("changes", {})),
                        state, trial.value if state in ("scored", "baseline") else None,
                        list(attrs.get("ratios", [])), attrs.get("run"), attrs.get("error"))


def _complete() -> optuna.trial.TrialState:
    import optuna

    return optuna.trial.TrialState.COMPLETE


def _spent(study: optuna.Study) -> float:
    return sum(float(t.user_attrs.get("seconds", 0.0)) for t in study.trials)


def _typical_trial(study: optuna.Study) -> float:
    seconds = [float(t.user_attrs["seconds"]) for t in study.trials
               if t.user_attrs.get("state") == "scored" and "seconds" in t.user_attrs]
    return statistics.median(seconds) if seconds else 0.0


def _owner() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


def _abandon(study: optuna.Study, trial: optuna.Trial) -> None:
    """A trial cut short (Ctrl-C, an error): failed, and its configuration queued again so
    that the next invocation measures it first."""
    import optuna

    params = dict(trial.params)
    study.tell(trial, state=optuna.trial.TrialState.FAIL)
    study.enqueue_trial(params, skip_if_exists=False)


def _requeue_abandoned(study: optuna.Study) -> None:
    """Trials left running by a process of this machine that is gone (killed): failed and
    queued again."""
    import optuna

    host = socket.gethostname()
    for trial in study.trials:
        if trial.state != optuna.trial.TrialState.RUNNING:
            continue
        owner = str(trial.user_attrs.get("owner", ""))
        where, _, pid = owner.rpartition(":")
        if where != host or not pid.isdigit() or alive(int(pid)):
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
