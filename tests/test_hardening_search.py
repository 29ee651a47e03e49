"""The search's seams: failures decided by type (not by their wording), the samplers' registry,
and importance's evaluator."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from knoblab import safety
from knoblab.errors import BudgetTooShort, UserError
from knoblab.records import Importance, TrialOutcome, Validation
from knoblab.search import TuneOptions, proof, samplers
from knoblab.search.importance import importances
from knoblab.search.space import Dimension, Space
from tests import fakes

BIG = str(1 << 30)


def _memory_refusal() -> UserError:
    """What safety.check says of a configuration over the memory budget, in its own words."""
    try:
        safety.check([({"sort_buffer_size": BIG}, {"sort_buffer_size": BIG})], {},
                     fakes.fake_catalog(), connections=lambda _: 4,
                     allow_durability_tradeoff=False, memory_budget=64 << 20)
    except UserError as exc:
        return exc
    raise AssertionError("4 connections × 1G passed a memory budget of 64M")


def _checked(monkeypatch: pytest.MonkeyPatch, refusal: BaseException
             ) -> tuple[Any, list[str]]:
    """proof.check of a validated candidate of two settings whose reduction raises `refusal`."""
    outcome = TrialOutcome(3, {"sort_buffer_size": BIG, "read_buffer_size": "262144"},
                           {"sort_buffer_size": BIG, "read_buffer_size": "262144"}, "scored",
                           -0.3, [-0.3, -0.3], ("1",))
    validation = Validation(outcome, "2", "better", 0.35, (0.2, 0.5), 4)

    def reduce(search: Any, chosen: Validation, outcomes: list[TrialOutcome],
               budget: float | None) -> None:
        raise refusal

    monkeypatch.setattr(proof, "validate", lambda search, outcomes, budget: [validation])
    monkeypatch.setattr(proof, "reduce", reduce)
    monkeypatch.setattr(proof, "learn_cost", lambda search, run_ids: None)
    said: list[str] = []
    search = SimpleNamespace(listener=SimpleNamespace(message=said.append))
    return proof.check(search, [outcome], 600.0), said  # type: ignore[arg-type]


def test_a_memory_refusal_while_reducing_is_not_taken_for_a_short_budget(monkeypatch):
    refusal = _memory_refusal()
    assert "budget" in str(refusal)  # the word a check by wording went by
    with pytest.raises(UserError, match="estimated memory"):
        _checked(monkeypatch, refusal)


def test_a_budget_too_short_to_reduce_leaves_the_recommendation_unreduced(monkeypatch):
    short = BudgetTooShort("[workload] budget = 5s cannot hold the 2 rounds a decision needs",
                           8.0)
    (validations, reduction, confirmation), said = _checked(monkeypatch, short)
    assert len(validations) == 1 and reduction is None and confirmation is None
    # Said in the search's terms: the study's budget, not the run's [workload] budget.
    assert len(said) == 1 and said[0].startswith("the recommendation is not reduced: the "
                                                 "study's budget left for it")
    assert "at least 8 s" in said[0] and "--budget" in said[0] and "[workload]" not in said[0]


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
