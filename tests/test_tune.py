"""knoblab tune on the fake kind and server: the search loop, its study, refusals, stops."""

from __future__ import annotations

import tomllib
from pathlib import Path

import optuna
import pytest

from knoblab import runner, workloads
from knoblab.errors import UserError
from knoblab.spec import parse_spec
from knoblab.store import Store
from knoblab.tune import TrialOutcome, tune
from tests import fakes
from tests.test_runner import Quiet as RunQuiet

MB = 1 << 20


@pytest.fixture(autouse=True)
def fake_kind(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(workloads.KINDS, fakes.FakeWorkload.kind, fakes.FakeWorkload)
    # Faster with a bigger sort buffer up to 16M, then no better; read_buffer_size does
    # nothing: the search should find the first and leave the second alone.
    monkeypatch.setattr(fakes, "SCRIPT", fakes.Script(
        model=lambda s: 1.0 if int(s.get("sort_buffer_size", 2 * MB)) < 16 * MB else 0.8))


@pytest.fixture
def store(tmp_path: Path) -> Store:
    return Store(f"sqlite:///{tmp_path / 'store.sqlite'}")


class Quiet:
    def __init__(self) -> None:
        self.lines: list[str] = []
        self.scored_trials: list[TrialOutcome] = []

    def message(self, text: str) -> None:
        self.lines.append(text)

    def searching(self, total: int, done: int, budget_left: float | None) -> None:
        pass

    def scored(self, outcome: TrialOutcome, best: TrialOutcome | None,
               budget_left: float | None) -> None:
        self.scored_trials.append(outcome)


def _spec(tune: str = "", server: str = "", knobs: str = "", trials: int = 8,
          validate: int = 2):
    source = (f'name = "search"\n[server]\n{server}\n[workload]\nkind = "fake"\n'
              f'[statistics]\nseed = 3\n[tune]\ntrials = {trials}\nvalidate = {validate}\n'
              f'{tune}\n[tune.knobs]\n'
              + (knobs or 'sort_buffer_size = ["1M", "64M"]\n'
                          'read_buffer_size = ["128K", "8M"]\n'))
    return parse_spec(tomllib.loads(source), source=source)


def _tune(store: Store, tmp_path: Path, spec=None, listener=None):
    return tune(spec or _spec(), store, tmp_path, listener or Quiet(),
                open_servers=fakes.open_fake)


def test_search_scores_against_the_baseline_and_validates_the_best(store, tmp_path):
    listener = Quiet()
    result = _tune(store, tmp_path, listener=listener)
    assert len(result.trials) == 8 and result.stopped == "trials"
    first = result.trials[0]
    # The baseline (the server's defaults lie in the space) is the first trial: not measured.
    assert first.state == "baseline" and first.changes == {} and first.run_id is None
    scored = [t for t in result.trials if t.state == "scored"]
    assert scored, "some candidates differ from the baseline"
    for t in scored:
        faster = int(t.config["sort_buffer_size"]) >= 16 * MB
        # Each score is the candidate's log-ratio to the baseline measured beside it.
        assert (t.gain or 0.0) > 0.15 if faster else abs(t.gain or 0.0) < 0.05
        assert len(t.ratios) == 3 and t.run_id is not None
    # Every trial is a run of its own in the store, two points a round.
    assert all(len(store.trials(t.run_id)) == 6 for t in scored if t.run_id)
    assert result.validations, "a candidate scored better than the baseline"
    chosen = result.recommended
    assert chosen is not None and chosen.verdict == "better"
    assert int(chosen.trial.changes["sort_buffer_size"]) >= 16 * MB
    assert chosen.gain is not None and 0.15 < chosen.gain < 0.35
    assert [o.number for o in listener.scored_trials] == [t.number for t in result.trials]


def test_the_study_goes_on_where_it_stopped_and_refuses_another_spec(store, tmp_path):
    _tune(store, tmp_path, _spec(validate=1))
    study_file = tmp_path / "store-tune.sqlite"
    assert study_file.exists()
    more = _tune(store, tmp_path, _spec(trials=11, validate=1))
    assert len(more.trials) == 11  # the study's 8, then 3 more
    study = optuna.load_study(study_name="search", storage=f"sqlite:///{study_file}")
    assert len(study.trials) == 11
    with pytest.raises(UserError, match="searches another spec"):
        _tune(store, tmp_path, _spec(knobs='sort_buffer_size = ["1M", "32M"]\n'))


def test_unsafe_configurations_are_refused_never_run_and_the_sampler_is_told(store, tmp_path):
    spec = _spec(server='memory_budget = "1500M"',
                 knobs='sort_buffer_size = ["1M", "64G"]\n')
    result = _tune(store, tmp_path, spec)
    refused = [t for t in result.trials if t.state == "refused"]
    assert refused, "sort buffers up to 64G against a 1500M budget: some are refused"
    assert all(t.run_id is None and "over the budget" in (t.error or "") for t in refused)
    study = optuna.load_study(study_name="search",
                              storage=f"sqlite:///{tmp_path / 'store-tune.sqlite'}")
    told = {t.number: t.user_attrs["infeasible"] for t in study.trials}
    assert all(told[t.number] == 1.0 for t in refused)
    assert all(told[t.number] == 0.0 for t in result.trials if t.state == "scored")


def test_an_interrupted_trial_is_measured_first_next_time(store, tmp_path):
    fakes.SCRIPT.interrupt_at = 8  # during the third trial's run (the first is the baseline)
    with pytest.raises(KeyboardInterrupt):
        _tune(store, tmp_path)
    study = optuna.load_study(study_name="search",
                              storage=f"sqlite:///{tmp_path / 'store-tune.sqlite'}")
    cut = [t for t in study.trials if t.state == optuna.trial.TrialState.FAIL]
    assert len(cut) == 1
    fakes.SCRIPT.interrupt_at = None
    result = _tune(store, tmp_path)
    again = [t for t in result.trials if t.config == {k: str(v) for k, v in
                                                      cut[0].params.items()}]
    assert again and again[0].state == "scored"


def test_a_baseline_that_cannot_be_measured_stops_the_search(store, tmp_path):
    fakes.SCRIPT.fails = {"2097152": "the baseline's statement failed"}  # the default
    with pytest.raises(UserError, match="the baseline itself could not be measured"):
        _tune(store, tmp_path)


@pytest.mark.parametrize("tune_text, words", [
    ('budget = "2s"', ["cannot hold one trial", "larger budget"]),
    ('sampler = "annealing"', ["sampler", "tpe"]),
    ("rounds = 1", ["rounds", "from 2"]),
    ('budget = "soon"', ["budget"]),
    ("colour = 1", ["unknown key 'colour'"]),
])
def test_bad_tune_options_are_one_line(store, tmp_path, tune_text, words):
    with pytest.raises(UserError) as caught:
        _tune(store, tmp_path, _spec(tune=tune_text))
    for word in words:
        assert word in str(caught.value)


def test_a_search_spec_is_not_a_run_and_a_run_spec_is_not_a_search(store, tmp_path):
    with pytest.raises(UserError, match="knoblab tune SPEC"):
        runner.start_run(_spec(), store, tmp_path, RunQuiet(), open_servers=fakes.open_fake)
    source = '[workload]\nkind = "fake"\n[sweep]\nsort_buffer_size = ["1M", "2M"]\n'
    with pytest.raises(UserError, match="no \\[tune\\] section"):
        _tune(store, tmp_path, parse_spec(tomllib.loads(source), source=source))
    both = source + '[tune.knobs]\nsort_buffer_size = ["1M", "2M"]\n'
    with pytest.raises(UserError, match="not both"):
        parse_spec(tomllib.loads(both), source=both)
