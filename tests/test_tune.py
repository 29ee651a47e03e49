"""knoblab tune on the fake kind and server: the search loop, its study, refusals, stops."""

from __future__ import annotations

import time
import tomllib
from pathlib import Path

import optuna
import pytest

from knoblab import recommend, runner, workloads
from knoblab.errors import UserError
from knoblab.records import Metric, TrialOutcome
from knoblab.search import tune
from knoblab.search.loop import _trial_spec
from knoblab.spec import parse_spec
from knoblab.store import Store, TrialState
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
               budget_left: float | None, direction: str) -> None:
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
    result = _tune(store, tmp_path, _spec(tune="batch = 6"), listener=listener)
    assert len(result.trials) == 8 and result.stopped == "trials"
    first = result.trials[0]
    # The baseline (the server's defaults lie in the space) is the first trial: not measured.
    assert first.state == "baseline" and first.changes == {} and first.run_id is None
    scored = [t for t in result.trials if t.state == "scored"]
    pruned = [t for t in result.trials if t.state == "pruned"]
    assert scored + pruned, "some candidates differ from the baseline"
    for t in scored + pruned:
        faster = int(t.config["sort_buffer_size"]) >= 16 * MB
        # Each score is the candidate's log-ratio to the baseline measured beside it.
        assert (t.gain or 0.0) > 0.15 if faster else abs(t.gain or 0.0) < 0.05
        # Warm trials (both settings change in place): one measurement per server start,
        # shared with the other candidates of the step; the pruner stops a trial at its
        # rung (after 1 or 3), or it goes on to max_rounds (8).
        assert len(t.ratios) == len(t.runs) and t.run_id is not None
        assert len(t.ratios) in ((1, 3) if t.state == "pruned" else (8,))
        for run in t.runs:
            points = {m.point_idx for m in store.trials(run)}
            assert 0 in points and len(points) >= 2, "the baseline beside the candidates"
    shared = {run for t in scored + pruned for run in t.runs
              if len({m.point_idx for m in store.trials(run)}) > 2}
    assert shared, "several candidates share a start"
    for run in shared:
        # Each candidate (odd points) with a measurement of the baseline of its own (even
        # points: the server read back at the baseline's values).
        points = {m.point_idx for m in store.trials(run)}
        assert len(points) % 2 == 0, points
        again = [m for m in store.trials(run)
                 if m.point_idx and m.point_idx % 2 == 0 and m.status == TrialState.DONE]
        assert again, "the baseline measured again after the first candidate"
        for m in again:  # the settings the step put back, read back at the baseline's
            assert m.effective and all(v == first.config[k] for k, v in m.effective.items()
                                       if k in first.config), (m.effective, first.config)
    assert result.validations, "a candidate scored better than the baseline"
    chosen = result.recommended
    assert chosen is not None and chosen.verdict == "better"
    assert int(chosen.trial.changes["sort_buffer_size"]) >= 16 * MB
    assert chosen.gain is not None and 0.15 < chosen.gain < 0.35
    # Reduced: read_buffer_size does nothing here, so it is dropped, and the configuration
    # without it is shown equivalent to the full one.
    reduction = result.reduction
    assert reduction is not None and "read_buffer_size" in chosen.trial.changes
    effects = {e.name: e for e in reduction.effects}
    assert effects["sort_buffer_size"].measurable and effects["sort_buffer_size"].loss > 0.15
    assert not effects["read_buffer_size"].measurable
    assert reduction.equivalent and recommend.settings(result) == {
        "sort_buffer_size": chosen.trial.changes["sort_buffer_size"]}
    # Each trial shown as it is told (pruned ones before the ones kept longer).
    assert sorted(o.number for o in listener.scored_trials) == \
        [t.number for t in result.trials]
    # The trials alone could not tell the two apart (the fast ones had both settings high);
    # the importance shown is the ablation's, which did: the sort buffer brings all of the
    # gain, read_buffer_size none, and the intervals say so apart.
    sort, read = result.importance
    assert (sort.name, read.name) == ("sort_buffer_size", "read_buffer_size")
    assert sort.basis == read.basis == "ablation"
    assert sort.share == 1.0 and read.share == 0.0 and sort.low > read.high


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
    told = {t.number: t.user_attrs["infeasible"] for t in study.trials
            if t.state == optuna.trial.TrialState.COMPLETE}  # not a repeat, failed unmeasured
    assert all(told[t.number] == 1.0 for t in refused)
    assert all(told[t.number] == 0.0 for t in result.trials if t.state == "scored")


def test_an_interrupted_trial_is_measured_first_next_time(store, tmp_path):
    fakes.SCRIPT.interrupt_at = 8  # during the third trial's run (the first is the baseline)
    with pytest.raises(KeyboardInterrupt):
        _tune(store, tmp_path)
    study = optuna.load_study(study_name="search",
                              storage=f"sqlite:///{tmp_path / 'store-tune.sqlite'}")
    cut = [t for t in study.trials if t.state == optuna.trial.TrialState.FAIL
           and "repeats" not in t.user_attrs]
    # Every trial of the step that was cut short, none told.
    assert cut and not [t for t in study.trials if t.state == optuna.trial.TrialState.RUNNING]
    fakes.SCRIPT.interrupt_at = None
    result = _tune(store, tmp_path)
    for trial in cut:
        again = [t for t in result.trials if t.config == result.space.config(trial.params)]
        assert again and again[0].state in ("scored", "pruned") and \
            again[0].number > trial.number


def test_a_baseline_that_cannot_be_measured_stops_the_search(store, tmp_path):
    fakes.SCRIPT.fails = {"2097152": "the baseline's statement failed"}  # the default
    with pytest.raises(UserError, match="the baseline itself could not be measured"):
        _tune(store, tmp_path)


@pytest.mark.parametrize("tune_text, words", [
    ('budget = "2s"', ["cannot hold one trial", "larger budget"]),
    ('sampler = "annealing"', ["sampler", "tpe"]),
    ("rounds = 1", ["rounds", "from 2"]),
    ("rounds = 4\nmax_rounds = 3", ["max_rounds", "from 4"]),
    ('budget = "soon"', ["budget"]),
    ("colour = 1", ["unknown key 'colour'"]),
    ('objective = "tps"', ["objective = 'tps'", "measures seconds"]),
    ('constraint = { metric = "p99", max = 20 }', ["constraint on 'p99'", "measures seconds"]),
    ('constraint = { metric = "seconds", max = 2 }', ["the objective itself"]),
    ('constraint = { metric = "seconds" }', ["{ metric = \"p99\", max = 20 }"]),
    ('constraint = { metric = "memory", max = -1 }', ["above 0"]),
    ('screen = "60s"', ["fake workload cannot be cut", "remove [tune] screen"]),
    ('pruner = "median"', ["pruner = 'median'", "halving"]),
    ("batch = 0", ["batch"]),
])
def test_bad_tune_options_are_one_line(store, tmp_path, tune_text, words):
    with pytest.raises(UserError) as caught:
        _tune(store, tmp_path, _spec(tune=tune_text))
    for word in words:
        assert word in str(caught.value)


def test_a_search_spec_is_not_a_run_and_a_run_spec_is_not_a_search(store, tmp_path):
    with pytest.raises(UserError, match=r"run it with knoblab tune \(the same spec\)"):
        runner.start_run(_spec(), store, tmp_path, RunQuiet(), open_servers=fakes.open_fake)
    source = '[workload]\nkind = "fake"\n[sweep]\nsort_buffer_size = ["1M", "2M"]\n'
    with pytest.raises(UserError, match="no \\[tune\\] section"):
        _tune(store, tmp_path, parse_spec(tomllib.loads(source), source=source))
    both = source + '[tune.knobs]\nsort_buffer_size = ["1M", "2M"]\n'
    with pytest.raises(UserError, match="not both"):
        parse_spec(tomllib.loads(both), source=both)


def test_a_machine_unlike_the_studys_is_refused_and_a_finished_study_is_not_validated_again(
        store, tmp_path):
    first = _tune(store, tmp_path, _spec(validate=1))
    assert first.validations
    runs_before = len(store.list_runs(limit=1000))
    again = _tune(store, tmp_path, _spec(validate=1))
    # The same trials: their validation is read back, not measured again.
    assert [(v.trial.number, v.run_id, v.verdict) for v in again.validations] == \
        [(v.trial.number, v.run_id, v.verdict) for v in first.validations]
    assert len(store.list_runs(limit=1000)) == runs_before
    study = optuna.load_study(study_name="search",
                              storage=f"sqlite:///{tmp_path / 'store-tune.sqlite'}")
    machine = dict(study.user_attrs["machine"])
    assert set(machine) == {"cpu", "cores", "memory", "disk", "kernel", "server"}
    study.set_user_attr("machine", {**machine, "cores": "64"})
    with pytest.raises(UserError, match=r"not like the one .*cores: \d+ here, 64 there"):
        _tune(store, tmp_path, _spec(trials=9, validate=1))


def test_a_trial_whose_worker_fell_silent_on_another_machine_is_measured_again(
        store, tmp_path, monkeypatch):
    monkeypatch.setattr("knoblab.search.study.GRACE", 1)
    _tune(store, tmp_path, _spec(trials=3, validate=1))
    storage = optuna.storages.RDBStorage(f"sqlite:///{tmp_path / 'store-tune.sqlite'}",
                                         heartbeat_interval=1, grace_period=1)
    study = optuna.load_study(study_name="search", storage=storage)
    silent = study.ask({"sort_buffer_size": optuna.distributions.IntDistribution(
        1 * MB, 64 * MB, log=True), "read_buffer_size": optuna.distributions.IntDistribution(
        128 * 1024, 8 * MB, log=True)})
    silent.set_user_attr("owner", "a-machine-gone-quiet:1")
    storage.record_heartbeat(silent._trial_id)
    time.sleep(2.5)  # the storage keeps heartbeats to the second
    result = _tune(store, tmp_path, _spec(trials=4, validate=1))
    trials = optuna.load_study(study_name="search", storage=storage).trials
    assert trials[silent.number].state == optuna.trial.TrialState.FAIL
    again = [t for t in result.trials if t.number > silent.number and
             t.config == result.space.config(silent.params)]
    assert again and again[0].state in ("scored", "pruned")


@pytest.fixture
def memory_metric(monkeypatch: pytest.MonkeyPatch) -> None:
    """The fake kind gains a second figure: memory, the sort buffer's size in MB."""
    monkeypatch.setattr(fakes.FakeWorkload, "metrics", {
        "seconds": Metric(None, "s", "minimize"), "memory": Metric("memory", "MB", "minimize")})
    fakes.SCRIPT.memory = lambda s: int(s["sort_buffer_size"]) / MB


def test_a_constraint_on_a_second_metric_keeps_the_recommendation_within_it(
        store, tmp_path, memory_metric):
    spec = _spec(tune='constraint = { metric = "memory", max = 32 }', trials=12)
    result = _tune(store, tmp_path, spec)
    over = [t for t in result.trials if t.state in ("scored", "pruned") and
            int(t.config["sort_buffer_size"]) > 32 * MB]
    assert over, "the search proposes sort buffers above 32M"
    assert all((t.violation or 0) > 0 and not t.feasible for t in over)
    study = optuna.load_study(study_name="search",
                              storage=f"sqlite:///{tmp_path / 'store-tune.sqlite'}")
    told = {t.number: t.constraints for t in study.trials if t.constraints}
    assert all(told[t.number]["bound"] > 0 for t in over), "the sampler is told of the violation"
    chosen = recommend.settings(result)
    assert chosen and 16 * MB <= int(chosen["sort_buffer_size"]) <= 32 * MB
    assert all((v.trial.violation or 0.0) <= 0.0 and v.trial.state in ("scored", "pruned")
               for v in result.validations)


def test_the_objective_can_be_a_second_metric(store, tmp_path, memory_metric):
    result = _tune(store, tmp_path, _spec(tune='objective = "memory"', trials=10))
    chosen = result.recommended
    # Less memory is better here: a smaller sort buffer than the 2M default, whatever the time.
    assert chosen is not None and int(chosen.trial.changes["sort_buffer_size"]) < 2 * MB
    assert chosen.gain is not None and chosen.gain > 0.1
    # Memory follows the sort buffer alone: importance puts it first by far.
    first, second = result.importance
    assert first.name == "sort_buffer_size" and first.share > 0.6 > 0.4 > second.share


def test_knobs_is_a_table_or_auto(store, tmp_path):
    source = '[workload]\nkind = "fake"\n[tune]\nknobs = "all"\n'
    with pytest.raises(UserError, match=r"knobs = 'all'.*knobs = \"auto\""):
        _tune(store, tmp_path, parse_spec(tomllib.loads(source), source=source))


def test_a_tie_follows_its_leader_only_in_trials_that_change_the_leader():
    source = ('[workload]\nkind = "fake"\n[tie]\nread_buffer_size = "sort_buffer_size"\n'
              '[tune.knobs]\nsort_buffer_size = ["1M", "64M"]\n')
    spec = parse_spec(tomllib.loads(source), source=source)
    catalogs = {"": fakes.fake_catalog()}
    changed = runner.plan_points(_trial_spec(spec, [{"sort_buffer_size": "8388608"}], 2, 1),
                                 catalogs)[""].points
    assert changed[1].config == {"sort_buffer_size": "8388608", "read_buffer_size": "8388608"}
    # A trial that leaves the leader at the baseline's value: no tie to apply, and no error.
    other = runner.plan_points(_trial_spec(spec, [{"read_buffer_size": "1048576"}], 2, 1),
                               catalogs)[""].points
    assert other[1].config == {"read_buffer_size": "1048576"}


def test_a_trial_failed_after_its_outcome_was_written_is_not_scored(store, tmp_path):
    """A stop between a trial's attributes and its value left it FAIL with state 'scored' and
    no value: such a stored study is read (and reported) as if the trial was not scored."""
    import io

    from rich.console import Console

    from knoblab.report.tuning import print_tune, tune_document, tune_json

    _tune(store, tmp_path, _spec(trials=3, validate=1))
    study = optuna.load_study(study_name="search",
                              storage=f"sqlite:///{tmp_path / 'store-tune.sqlite'}")
    cut = study.ask({"sort_buffer_size": optuna.distributions.IntDistribution(
        1 * MB, 64 * MB, log=True), "read_buffer_size": optuna.distributions.IntDistribution(
        128 * 1024, 8 * MB, log=True)})
    for key, value in {"state": "scored", "changes": {"sort_buffer_size": "33554432"},
                       "ratios": [-0.2, -0.3], "seconds": 1.0}.items():
        cut.set_user_attr(key, value)
    study.tell(cut, state=optuna.trial.TrialState.FAIL)
    listener = Quiet()
    result = _tune(store, tmp_path, _spec(trials=4, validate=1), listener)
    assert cut.number not in {t.number for t in result.trials}
    assert all(t.score is not None for t in result.trials if t.state == "scored")
    out = io.StringIO()
    print_tune(result, Console(file=out, width=120))
    assert "trial" in out.getvalue()
    tune_document(result, [], "", {})
    tune_json(result)


def test_a_stop_while_a_trial_is_told_leaves_it_unscored_and_queued_again(
        store, tmp_path, monkeypatch):
    """Its outcome is written in steps; a stop between them fails the trial as a whole."""
    real = optuna.Trial.set_constraint
    calls = []

    def stopped(self, *args, **kwargs):
        calls.append(self.number)
        if len(calls) == 3:  # the first candidate (after the baseline), half told
            raise KeyboardInterrupt
        return real(self, *args, **kwargs)

    monkeypatch.setattr(optuna.Trial, "set_constraint", stopped, raising=False)
    with pytest.raises(KeyboardInterrupt):
        _tune(store, tmp_path, _spec(trials=4, validate=1))
    monkeypatch.setattr(optuna.Trial, "set_constraint", real)
    study = optuna.load_study(study_name="search",
                              storage=f"sqlite:///{tmp_path / 'store-tune.sqlite'}")
    cut = [t for t in study.trials if t.state == optuna.trial.TrialState.FAIL
           and "repeats" not in t.user_attrs]
    # The half-told one (its state written, no value), and the others of its step, untold.
    half = [t for t in cut if t.user_attrs.get("state")]
    assert len(half) == 1 and half[0].value is None
    waiting = [t for t in study.trials if t.state == optuna.trial.TrialState.WAITING]
    assert sorted(str(t.system_attrs["fixed_params"]) for t in waiting) == \
        sorted(str(t.params) for t in cut), "their configurations are queued again"
    result = _tune(store, tmp_path, _spec(trials=4, validate=1))
    assert not {t.number for t in cut} & {t.number for t in result.trials}
    assert all(t.score is not None for t in result.trials if t.state == "scored")


def test_a_search_that_measured_no_candidate_says_so(store, tmp_path):
    """A space of two values, the other one over the memory budget: the baseline and a
    refusal, and the search ends there (a repeat is never measured). No verdict on candidates
    there are no measurements of."""
    import io

    from rich.console import Console

    from knoblab.report.tuning import print_tune, tune_cnf, tune_document

    source = ('name = "search"\n[server]\nmemory_budget = "1500M"\n[workload]\nkind = "fake"\n'
              '[statistics]\nseed = 2\n[tune]\ntrials = 3\n[tune.knobs]\n'
              'sort_buffer_size = { values = ["2M", "64G"] }\n')
    result = _tune(store, tmp_path, parse_spec(tomllib.loads(source), source=source))
    assert [t.state for t in result.trials] == ["baseline", "refused"]
    assert result.stopped == "space"
    out = io.StringIO()
    print_tune(result, Console(file=out, width=200))
    assert "stopped: every configuration of the space measured" in out.getvalue()
    said = "No candidate was measured (of 2 trials, 1 the baseline itself, 1 refused"
    assert said in out.getvalue() and "scored better" not in out.getvalue()
    assert tune_document(result, [], source, {}).conclusion.startswith(said)
    cnf = tune_cnf(result)
    assert said in cnf and "shown to beat" not in cnf and cnf.endswith("[mysqld]\n")


def test_better_trials_not_validated_here_are_not_called_no_better():
    """Another worker validates the study (or the budget left no time): the trials that scored
    better are not reported as if none had."""
    import io

    from rich.console import Console

    from knoblab.records import Space, TuneResult
    from knoblab.report.tuning import print_tune, tune_cnf, tune_document

    trials = [TrialOutcome(0, {}, {}, "baseline", 0.0, [], ()),
              TrialOutcome(1, {"sort_buffer_size": "33554432"},
                           {"sort_buffer_size": "33554432"}, "scored", -0.2, [-0.2, -0.21],
                           ("run-1",))]
    result = TuneResult("search", Space(()), {}, trials, 10.0, "trials", [], 0.03)
    out = io.StringIO()
    print_tune(result, Console(file=out, width=200))
    said = "1 trial(s) scored better than the baseline, but none is validated yet"
    assert said in out.getvalue() and "No trial scored better" not in out.getvalue()
    assert tune_document(result, [], "", {}).conclusion.startswith(said)
    assert said in tune_cnf(result)


def test_a_trial_taken_by_a_worker_killed_at_once_does_not_hold_the_study(
        store, tmp_path, monkeypatch):
    """A worker killed right after it took a trial (no owner, no heartbeat yet): the trial
    counts against the budget while it runs, so it is failed and queued again once it is
    older than the grace period, and the study ends."""
    class NoWaiting(Quiet):
        def message(self, text: str) -> None:
            assert "being measured by another worker" not in text, text
            super().message(text)

    _tune(store, tmp_path, _spec(trials=3, validate=1))
    study = optuna.load_study(study_name="search",
                              storage=f"sqlite:///{tmp_path / 'store-tune.sqlite'}")
    orphan = study.ask({"sort_buffer_size": optuna.distributions.IntDistribution(
        1 * MB, 64 * MB, log=True), "read_buffer_size": optuna.distributions.IntDistribution(
        128 * 1024, 8 * MB, log=True)})
    monkeypatch.setattr("knoblab.search.study.GRACE", 1)
    time.sleep(1.5)  # older than the grace period
    result = _tune(store, tmp_path, _spec(trials=4, validate=1), NoWaiting())
    trials = optuna.load_study(study_name="search",
                               storage=f"sqlite:///{tmp_path / 'store-tune.sqlite'}").trials
    assert trials[orphan.number].state == optuna.trial.TrialState.FAIL
    assert any(t.number > orphan.number and t.config == result.space.config(orphan.params)
               for t in result.trials)


def test_a_placebo_under_a_load_slow_after_each_start_scores_zero_and_is_not_recommended(
        store, tmp_path, monkeypatch):
    # Neither setting does anything, but the first load after each server start takes three
    # times as long (a cold buffer pool). Each trial's two points share a start (blocked):
    # were the first of them timed cold, every trial would score ±log 3 as its order fell.
    monkeypatch.setattr(fakes, "SCRIPT", fakes.Script(model=lambda s: 1.0, cold_first=3.0))
    result = _tune(store, tmp_path, _spec(trials=6))
    scored = [t for t in result.trials if t.state in ("scored", "pruned")]
    assert len(scored) >= 4
    for t in scored:
        # Each round's ratio, not only their mean (an order turned round by round would
        # cancel ±log 3 in the mean and leave the spread).
        assert all(abs(r) < 0.03 for r in t.ratios), (t.changes, t.ratios)
    # One untimed pass at most on each start, before its first part: the points differ only
    # in per-session settings, which hold no cache, so the loads after it are as warm (the
    # ratios above: none timed cold).
    assert 0 < len(fakes.SCRIPT.warmed) <= len(fakes.SCRIPT.started)
    assert result.recommended is None and recommend.settings(result) == {}


def test_a_server_wide_setting_changed_in_place_is_followed_by_an_untimed_pass(
        store, tmp_path, monkeypatch):
    # A server-wide cache resized in place may have been emptied by it: each part after
    # such a change is timed after a pass of its own under it, never cold against warm.
    monkeypatch.setattr(fakes, "SCRIPT", fakes.Script(model=lambda s: 1.0, cold_first=3.0))
    result = _tune(store, tmp_path, _spec(trials=6, knobs='key_buffer_size = ["8M", "1G"]\n'))
    scored = [t for t in result.trials if t.state in ("scored", "pruned")]
    assert scored and all(abs(r) < 0.03 for t in scored for r in t.ratios)
    # Every timed load but a start's first ran under the key cache of the load before it.
    loads = fakes.SCRIPT.loads
    assert len({size for _, size, _ in loads}) > 1
    assert all(first or not timed or size == before
               for (_, before, _), (timed, size, first) in zip(loads, loads[1:], strict=False))


def test_the_trials_of_a_search_do_not_all_measure_in_one_order():
    # The order of each trial's points comes from the trial: not the spec's seed for all.
    spec = _spec()
    orders = {tuple(runner.plan_order(2, 2, _trial_spec(spec, [{"sort_buffer_size": "8M"}], 2,
                                                        number).statistics.seed))
              for number in range(1, 9)}
    assert len(orders) > 1


def test_trials_are_held_to_the_memory_of_the_sandboxes_machine(store, tmp_path):
    # [machine] memory, not 80% of this machine's: a trial whose buffers cannot fit in the
    # sandboxes' machine is refused, never run.
    spec = _spec(knobs='sort_buffer_size = ["1M", "64G"]\n')
    source = spec.source.replace("[workload]", '[machine]\nmemory = "1500M"\n[workload]')
    spec = parse_spec(tomllib.loads(source), source=source)
    assert spec.machine is not None and spec.machine.memory == 1500 * MB
    result = _tune(store, tmp_path, spec)
    refused = [t for t in result.trials if t.state == "refused"]
    assert refused and all("[machine] memory" in (t.error or "") for t in refused)
    assert all(int(t.config["sort_buffer_size"]) < 1500 * MB
               for t in result.trials if t.state == "scored")
