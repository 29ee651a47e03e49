"""How much each searched setting matters to the objective, and how sure that is.

Optuna's fANOVA evaluator does the work: a random forest fitted to the trials, and each
setting's share of the forest's variance. Two things are added around it:

* Log ranges are handed to it as the logarithm of the value. fANOVA weighs a range by its
  length on the scale it is given (Optuna does not apply `log=True` for it), and on the raw
  scale 32K..64M is almost all "above 1M": an effect at small sizes, where a log search spends
  most of its trials, would count for nearly nothing.
* A tune study has 10 to 60 noisy trials, so one answer would be one draw. The trials are
  resampled (bootstrap) and each resample gets its own small forest; the share reported is the
  mean over resamples, with the 10th and 90th percentiles as its spread. The seeds come from a
  fixed constant, so the same trials always give the same answer.

PED-ANOVA (Optuna's default, no scikit-learn) was tried and left: it asks how the best tenth
of the trials differs from all of them, which a sampler that has settled on the good value of
a setting makes near zero (a two-choice setting that mattered came out at 0-5%), and at 10-20
trials "the best tenth" is one or two trials.

What is shown as a study's importance is not fANOVA, though, once the study has an ablation:
a search's trials cannot say what matters when an effect is near the noise between trials. A
sampler that has settled in the good region proposes trials that differ by little but noise,
and fANOVA shares that noise out among the settings. Simulated (four settings, one of which
gains 10% at a per-trial noise of 8%, 40 TPE trials, 8 seeds): fANOVA put the setting that
matters first in 3 of 8 studies and apart from the others in 1 (one study gave a setting of no
effect 58%, the one that matters 20%); fANOVA over the random start-up trials alone, 1 of 8 and
0; PED-ANOVA (top 10% or 25% against all), 0 and 4 of 8, and apart in none, as it also was for
an effect of +450%, where fANOVA over all trials ranked it first in 16 of 16 studies. The
ablation (search.proof.reduce: each setting of the validated configuration put back alone, in
rounds until decided) measures each change with the rounds it needs, so `Ablation` turns its
effects into shares, and the report names which of the two it shows.
"""

from __future__ import annotations

import math
import numbers
import warnings
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any, Protocol

import numpy as np

from knoblab.records import Effect, Importance, Space, TuneResult
from knoblab.vocabulary import OutcomeState

__all__ = ["MIN_TRIALS", "Ablation", "Evaluator", "FanovaBootstrap", "Importance", "evaluator_for",
           "importances", "missing"]

MIN_TRIALS = 8  # fewer and a forest of any kind fits the noise
RESAMPLES = 20
TREES = 3  # per resample: 60 trees in all, about 1 s for 60 trials of 5 settings
SEED = 0x6B6E6F62  # fixed: the same trials give the same answer


Trials = Sequence[tuple[Mapping[str, int | str], float]]  # (parameters, score), lower better


class Evaluator(Protocol):
    """How importance is judged from a search's trials, as Optuna's evaluators are given to
    `get_param_importances(study, evaluator=...)`."""

    def evaluate(self, space: Space, trials: Trials) -> list[Importance]:
        """Each setting's importance, largest first; [] when the trials cannot say."""
        ...


def importances(space: Space, trials: Trials, evaluator: Evaluator | None = None
                ) -> list[Importance]:
    """Each setting's importance, largest first, by `evaluator` (fANOVA over bootstrap
    resamples unless another is given); [] when the trials are too few to say."""
    return (evaluator or FanovaBootstrap()).evaluate(space, trials)


def evaluator_for(effects: Sequence[Effect] | None) -> Evaluator:
    """The evaluator of what a study shows as importance: its ablation when it has one (each
    change measured put back alone), else fANOVA over its trials, a description of where the
    search found better and worse (see the module's docstring)."""
    return FanovaBootstrap() if effects is None else Ablation(effects)


def missing(result: TuneResult) -> str:
    """Why a study shows no importance, in one line: what its evaluator (`evaluator_for`, as
    the search chose it) needed and did not have."""
    names = result.space.names
    if len(names) < 2:
        searched = names[0] if names else "no setting"
        return (f"Importance: not shown, as only {searched} was searched: whatever was gained "
                "is its own.")
    if result.reduction is not None and not result.reduction.grouped:
        return ("Importance: not shown, as no setting of the recommendation was shown to help "
                "by itself when put back alone (above): there is no measured gain to share "
                "out among them.")
    measured = sum(t.feasible or t.state == OutcomeState.BASELINE for t in result.trials)
    if measured < MIN_TRIALS:
        return (f"Importance: not shown, as {measured} trial(s) were measured (within the "
                f"constraint, the baseline counted) and telling the settings apart over the "
                f"trials (fANOVA) needs at least {MIN_TRIALS}; give more trials ([tune] "
                "trials) or a larger budget (knoblab tune SPEC --budget ...).")
    return ("Importance: not shown, as the trials' gains (or their configurations) hardly "
            "differ: they cannot say which setting matters.")


class Ablation:
    """What each setting of the validated configuration contributes, as the reduction measured
    it (put back to the baseline's value alone, with the settings tied to it): each setting's
    share of the summed measurable gains, on the log scale (gains multiply), with the interval
    of its own measurement on the same scale. A setting the configuration does not change, or
    whose effect was not measurable, has no share (as the reduction leaves it out)."""

    basis = "ablation"

    def __init__(self, effects: Sequence[Effect]) -> None:
        self.effects = list(effects)

    def evaluate(self, space: Space, trials: Trials) -> list[Importance]:
        by_name = {e.name: e for e in self.effects if e.name in space.names}
        # Only a change shown to help has a share, as only it is recommended; the others are
        # drawn with their interval, which says how much they might have brought.
        gains = {name: _log_gain(e.loss) if e.measurable else 0.0
                 for name, e in by_name.items()}
        total = sum(gains.values())
        if len(space.names) < 2 or not total > 0:
            return []  # nothing measurably gained: the reduction says so in words
        found = []
        for name in space.names:
            effect = by_name.get(name)
            if effect is None:
                found.append(Importance(name, 0.0, 0.0, 0.0, self.basis))
                continue
            low, high = (min(1.0, _log_gain(x) / total) for x in effect.ci95)
            share = gains[name] / total
            found.append(Importance(name, share, min(low, share), max(high, share), self.basis))
        return sorted(found, key=lambda imp: -imp.share)


def _log_gain(relative: float) -> float:
    """A relative gain (+0.05: 5% better) on the log scale, none when it is a loss."""
    return math.log1p(relative) if math.isfinite(relative) and relative > 0 else 0.0


class FanovaBootstrap:
    """fANOVA (Optuna's evaluator) over bootstrap resamples of the trials, on log values for
    log ranges (see the module's docstring)."""

    basis = "trials"

    def evaluate(self, space: Space, trials: Trials) -> list[Importance]:
        return _fanova_bootstrap(space, trials)


def _fanova_bootstrap(space: Space, trials: Trials) -> list[Importance]:
    """Each setting's importance, largest first; [] when the trials are too few to say."""
    names = space.names
    if len(names) < 2:  # one setting is trivially all of it
        return []
    distributions, logged = _distributions(space)
    usable: list[tuple[dict[str, Any], float]] = []
    for raw, score in trials:
        params = _params(raw, distributions, logged)
        if params is not None and math.isfinite(score):
            usable.append((params, float(score)))
    if len(usable) < MIN_TRIALS or len({score for _, score in usable}) < 2:
        return []
    points = [tuple(params.values()) for params, _ in usable]
    if len(set(points)) < 2:  # one configuration throughout: no setting can explain anything
        return []

    import optuna
    from optuna.importance import FanovaImportanceEvaluator, get_param_importances

    with _quiet():
        frozen = [optuna.trial.create_trial(params=params, distributions=distributions,
                                            value=score) for params, score in usable]
        rng = np.random.default_rng(SEED)
        shares: list[list[float]] = []
        for _ in range(RESAMPLES):
            picked = rng.integers(0, len(frozen), len(frozen))
            seed = int(rng.integers(0, 2**31 - 1))  # drawn first: a skip shifts no other seed
            # Scores or configurations all equal: nothing to explain, or nothing to explain
            # it with. (fANOVA would not always refuse the second: a forest that cannot split
            # is left with a rounding error's variance, 1e-38, and divides by it.)
            if (len({usable[i][1] for i in picked}) < 2
                    or len({points[i] for i in picked}) < 2):
                continue
            study = optuna.create_study(direction="minimize")
            study.add_trials([frozen[i] for i in picked])
            try:
                found = get_param_importances(
                    study, evaluator=FanovaImportanceEvaluator(n_trees=TREES, seed=seed))
            except RuntimeError:  # no tree could split: the settings never varied here
                continue
            row = [found.get(name, 0.0) for name in names]
            if all(math.isfinite(share) for share in row):
                shares.append(row)
    if not shares:
        return []

    table = np.asarray(shares)
    mean = table.mean(axis=0)
    low, high = np.percentile(table, [10, 90], axis=0)
    found_all = [Importance(name, float(mean[i]), float(low[i]), float(high[i]), "trials")
                 for i, name in enumerate(names)]
    return sorted(found_all, key=lambda imp: -imp.share)  # stable: ties keep the space's order


def _distributions(space: Space) -> tuple[dict[str, Any], set[str]]:
    """The space as fANOVA should weigh it: log ranges on the log scale (see the docstring).
    Ranges become plain float ranges: fANOVA ignores steps anyway, and a value off the block
    size (a hand-written one) need not be refused."""
    from optuna.distributions import FloatDistribution, IntDistribution

    distributions = space.distributions()
    logged = set()
    for name, dist in distributions.items():
        if isinstance(dist, IntDistribution):
            if dist.log:
                distributions[name] = FloatDistribution(math.log(dist.low), math.log(dist.high))
                logged.add(name)
            else:
                distributions[name] = FloatDistribution(dist.low, dist.high)
    return distributions, logged


def _params(params: Mapping[str, int | str], distributions: Mapping[str, Any],
            logged: set[str]) -> dict[str, Any] | None:
    """A trial's parameters on the evaluator's scale; None for one outside the space (a trial
    of an earlier space, a value written by hand): it says nothing about this one."""
    from optuna.distributions import CategoricalDistribution

    found: dict[str, Any] = {}
    for name, dist in distributions.items():
        value = params.get(name)
        if isinstance(dist, CategoricalDistribution):
            if value not in dist.choices:
                return None
            found[name] = value
            continue
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            return None
        number = float(value)
        if name in logged:
            if not number > 0:
                return None
            number = math.log(number)
        if not dist.low <= number <= dist.high:
            return None
        found[name] = number
    return found


@contextmanager
def _quiet() -> Iterator[None]:
    """Optuna's notes ("A new study created in memory", warnings about few trials) are about
    these throwaway studies, not the user's: hidden here, and only here."""
    import optuna

    verbosity = optuna.logging.get_verbosity()
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        optuna.logging.set_verbosity(verbosity)
