"""One codec for every record: what is written reads back as it was, JSON written by older
versions (keys missing, or spelled as they were) still reads."""

from __future__ import annotations

import json

import optuna

from knoblab.records import (
    Comparison,
    Effect,
    Reduction,
    SeriesRun,
    ServersCompared,
    Step,
    TrialOutcome,
    Validation,
    decode,
)
from knoblab.search.study import save_validations, validated

TRIAL = TrialOutcome(3, {"a": "1", "b": "2"}, {"a": "1", "b": "2"}, "scored", -0.1,
                     [-0.1, -0.12], ("run-3",), observed=None)
VALIDATION = Validation(TRIAL, "run-v", "better", 0.1, (0.05, 0.15), 6, None, 0.983)
REDUCTION = Reduction([Effect("a", 0.08, (0.02, 0.14), True, 0.975),
                       Effect("b", 0.0, (-0.03, 0.03), False, 0.975)],
                      "run-r", {"a": "1"}, "run-c", True, ("b",), "run-t",
                      (("b", "equivalent"),))


def test_a_record_reads_back_as_it_was_written() -> None:
    for record in (TRIAL, VALIDATION, REDUCTION, Comparison(1.2, (1.1, 1.3), 0.01, True)):
        assert type(record).from_json(json.loads(json.dumps(record.to_json()))) == record


def test_a_key_json_has_always_spelled_otherwise_is_kept() -> None:
    step = Step(2, "cumulative", {"x": "1"}, "+ x=1")
    assert step.to_json() == {"step": 2, "role": "cumulative", "change": {"x": "1"},
                              "label": "+ x=1"}
    assert Step.from_json(step.to_json()) == step


def test_keys_older_json_lacks_read_as_defaults_or_empty() -> None:
    assert SeriesRun.from_json({"repetition": 1}) == SeriesRun(1, "done", [], [], None)
    assert ServersCompared.from_json({}).at == "?"
    assert decode(Comparison, {"ratio": 1.0, "ci95": [0.9, 1.1], "p_value": 0.5,
                               "significant": False}).ci95 == (0.9, 1.1)


def test_a_study_keeps_its_validations_as_records_and_reads_them_back() -> None:
    study = optuna.create_study()
    confirmation = Validation(TrialOutcome(3, {"a": "1"}, {"a": "1"}, "scored", None, [],
                                           ("run-c",)), "run-c", "better", 0.09,
                              (0.04, 0.14), 4)
    save_validations(study, [TRIAL], [VALIDATION], REDUCTION, confirmation)
    assert validated(study, [TRIAL]) == ([VALIDATION], REDUCTION, confirmation)
    assert validated(study, [TRIAL, TRIAL]) == (None, None, None)  # other trials: not these


def test_a_study_saved_by_an_older_version_still_reads() -> None:
    study = optuna.create_study()
    study.set_user_attr("validation", {"trials": 1, "items": [
        {"trial": 3, "run": "run-v", "verdict": "better", "gain": 0.1, "interval": [0.05, 0.15],
         "rounds": 6, "observed": None}],  # before "confidence" was kept
        "confirmation": {"trial": 3, "config": {"a": "1"}, "changes": {"a": "1"},
                         "run": "run-c", "verdict": "better", "gain": 0.09,
                         "interval": [0.04, 0.14], "rounds": 4, "observed": None},
        "reduction": {"effects": [{"name": "a", "loss": 0.08, "interval": [0.02, 0.14],
                                   "measurable": True}],
                      "run": "run-r", "kept": {"a": "1"}, "check_run": "run-c",
                      "equivalent": True}})
    validations, reduction, confirmation = validated(study, [TRIAL])
    assert validations == [Validation(TRIAL, "run-v", "better", 0.1, (0.05, 0.15), 6)]
    assert reduction == Reduction([Effect("a", 0.08, (0.02, 0.14), True)], "run-r",
                                  {"a": "1"}, "run-c", True)
    assert confirmation is not None and confirmation.run_id == "run-c" and \
        confirmation.trial.changes == {"a": "1"} and confirmation.ci95 == (0.04, 0.14)
