"""The search's seams: the samplers' registry and importance's evaluator."""

from __future__ import annotations

from typing import Any

import pytest

from knoblab.errors import UserError
from knoblab.records import Importance
from knoblab.search import TuneOptions, samplers
from knoblab.search.importance import importances
from knoblab.search.space import Dimension, Space


def test_a_sampler_added_to_the_registry_can_be_chosen(monkeypatch):
    import optuna

    made: list[int | None] = []

    def mine(seed: int | None) -> optuna.samplers.BaseSampler:
        made.append(seed)
        return optuna.samplers.RandomSampler(seed=seed)

    with pytest.raises(UserError, match="use one of tpe, gp, random"):
        TuneOptions.from_spec({"sampler": "mine"}, "s")
    monkeypatch.setitem(samplers.SAMPLERS, "mine", mine)
    assert TuneOptions.from_spec({"sampler": "mine"}, "s").sampler == "mine"
    assert isinstance(samplers.make("mine", 7), optuna.samplers.RandomSampler) and made == [7]


def test_importance_uses_the_evaluator_it_is_given():
    space = Space((Dimension("sort_buffer_size", 32768, 67108864, 1, True),
                   Dimension("innodb_flush_method", choices=("fsync", "O_DIRECT"))))
    seen: list[int] = []

    class Fixed:
        def evaluate(self, space: Space, trials: Any) -> list[Importance]:
            seen.append(len(trials))
            return [Importance(name, 0.5, 0.4, 0.6) for name in space.names]

    trials = [({"sort_buffer_size": 65536, "innodb_flush_method": "fsync"}, 0.1)] * 3
    assert importances(space, trials, evaluator=Fixed()) == [
        Importance("sort_buffer_size", 0.5, 0.4, 0.6),
        Importance("innodb_flush_method", 0.5, 0.4, 0.6)]
    assert seen == [3]
    assert importances(space, trials) == []  # the default: too few trials to say
