"""The samplers a search may use, by the name `[tune] sampler` gives: each a factory of an
Optuna sampler (its `BaseSampler` is the interface), seeded. A new one is one entry in
SAMPLERS (`register`), and `[tune] sampler` accepts its name."""

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
