"""The samplers and pruners a search may use, by the names `[tune] sampler` and `[tune]
pruner` give: each a factory of an Optuna sampler (its `BaseSampler` is the interface),
seeded, or of an Optuna pruner (`BasePruner`). A new one is one entry in SAMPLERS
(`register`) or PRUNERS, and the spec accepts its name."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from knoblab.errors import UserError

if TYPE_CHECKING:
    import optuna

Factory = Callable[[int | None], "optuna.samplers.BaseSampler"]  # seed -> sampler


def _tpe(seed: int | None) -> optuna.samplers.BaseSampler:
    import optuna

    return optuna.samplers.TPESampler(multivariate=True, seed=seed)


def _gp(seed: int | None) -> optuna.samplers.BaseSampler:
    import importlib.util

    import optuna

    if importlib.util.find_spec("torch") is None:  # Optuna's GP is written with PyTorch
        raise UserError("[tune] sampler = \"gp\" needs PyTorch: install it into "
                        "knoblab's virtualenv (.venv/bin/pip install torch), or use "
                        "sampler = \"tpe\"")
    return optuna.samplers.GPSampler(seed=seed)


def _random(seed: int | None) -> optuna.samplers.BaseSampler:
    import optuna

    return optuna.samplers.RandomSampler(seed=seed)


SAMPLERS: dict[str, Factory] = {"tpe": _tpe, "gp": _gp, "random": _random}


def register(name: str, factory: Factory) -> None:
    """A sampler `[tune] sampler = name` chooses from now on."""
    SAMPLERS[name] = factory


def names() -> tuple[str, ...]:
    return tuple(SAMPLERS)


def make(name: str, seed: int | None) -> optuna.samplers.BaseSampler:
    """The sampler of that name (one of names(): TuneOptions has checked it), seeded."""
    return SAMPLERS[name](seed)


# A trial's steps are its measurements against the baseline (one per server start, warm; a
# step of [tune] rounds starts, cold), reported to the pruner as the running mean of its
# log-ratios; a trial the pruner keeps goes on to [tune] max_rounds measurements.
PruneFactory = Callable[[int], "optuna.pruners.BasePruner"]  # max measurements -> pruner
BOOTSTRAP = 4


def _halving(most: int) -> optuna.pruners.BasePruner:
    import optuna

    # Rungs after 1 and 3 measurements: a third goes on from each, once a rung has more than
    # BOOTSTRAP trials (before, the first trials would go on for want of rivals, not for being
    # good: in a known-truth study, two of the first three were measured in full and
    # validated, at true gains of 0 and +7%).
    return optuna.pruners.SuccessiveHalvingPruner(min_resource=1, reduction_factor=3,
                                                  bootstrap_count=BOOTSTRAP)


def _hyperband(most: int) -> optuna.pruners.BasePruner:
    import optuna

    return optuna.pruners.HyperbandPruner(min_resource=1, max_resource=most,
                                          reduction_factor=3, bootstrap_count=BOOTSTRAP)


def _none(most: int) -> optuna.pruners.BasePruner:
    import optuna

    return optuna.pruners.NopPruner()


PRUNERS: dict[str, PruneFactory] = {"halving": _halving, "hyperband": _hyperband,
                                    "none": _none}


def pruner_names() -> tuple[str, ...]:
    return tuple(PRUNERS)


def make_pruner(name: str, most: int) -> optuna.pruners.BasePruner:
    return PRUNERS[name](most)
