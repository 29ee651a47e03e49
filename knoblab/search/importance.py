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
"""

from __future__ import annotations

import math
import numbers
import warnings
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any, Protocol

import numpy as np

from knoblab.records import Importance
from knoblab.search.space import Space

__all__ = ["MIN_TRIALS", "Evaluator", "FanovaBootstrap", "Importance", "importances"]

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


class FanovaBootstrap:
    """fANOVA (Optuna's evaluator) over bootstrap resamples of the trials, on log values for
    log ranges (see the module's docstring)."""

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
    found_all = [Importance(name, float(mean[i]), float(low[i]), float(high[i]))
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
