"""What tune recommends: only changes shown to help (the burden of proof is on each change),
and exactly the settings that were in force when it was measured (ties, [server.config]);
never a setting whose cost the workload cannot see."""

from __future__ import annotations

import dataclasses
import json
import random
import re
import tomllib
from pathlib import Path
from typing import Any

import pytest

from knoblab import recommend, runner, workloads
from knoblab.catalog import Catalog, Knob
from knoblab.errors import BudgetTooShort
from knoblab.records import Effect, Reduction, TrialOutcome, TuneResult, Validation
from knoblab.report.document import in_force_lines
from knoblab.report.tuning import (
    direction_of,
    gain_validated,
    percent,
    reduction_lines,
    tune_cnf,
    tune_json,
)
from knoblab.search import proof, tune
from knoblab.search.loop import _trial_spec
from knoblab.search.space import Space
from knoblab.search.study import seconds_spent
from knoblab.spec import parse_spec
from knoblab.store import Store
from knoblab.workloads.base import Rounds
from tests import fakes

MB = 1 << 20


def _result(changes: dict[str, str], reduction: Reduction | None = None,
            base: dict[str, str] | None = None, tied: dict[str, str] | None = None,
            baseline: dict[str, str] | None = None) -> TuneResult:
    trial = TrialOutcome(3, dict(changes), dict(changes), "scored", -1.0, [-1.0] * 4, ("t",))
    validation = Validation(trial, "v", "better", 4.2, (3.0, 5.5), 6)
    return TuneResult("mix", Space(()), baseline or {}, [trial], 60.0, "trials",
                      [validation], 0.05, reduction=reduction, base=base or {},
                      tied=tied or {})


class TuneQuiet:
    """A search's listener that keeps what it is told."""

    def __init__(self) -> None:
        self.said: list[str] = []

    def message(self, text: str) -> None:
        self.said.append(text)

    def searching(self, *args: object) -> None: ...
    def scored(self, *args: object) -> None: ...


def _settings_of(cnf: str) -> dict[str, str]:
    """The settings an option file sets (its comments and section line left out)."""
    lines = [line.strip() for line in cnf.splitlines()]
    return dict((k.strip(), v.strip()) for k, v in
                (line.split("=", 1) for line in lines if "=" in line and line[0] != "#"))


# ------------------------------------------------------------------ 1. the burden of proof


def test_a_change_not_shown_to_help_goes_back_to_its_default():
    """tune-query-mix: only join_cache_level matters; the reduced configuration was not shown
    to do as well as the full one, nor the full one better: the reduced one is recommended,
    the others are left as they are, in words."""
    full = {"join_cache_level": "6", "sort_buffer_size": str(24 * MB),
            "tmp_table_size": str(80 * MB)}
    effects = [Effect("join_cache_level", 4.46, (3.9, 5.0), True),
               Effect("sort_buffer_size", 0.02, (-0.04, 0.08), False),
               Effect("tmp_table_size", -0.01, (-0.049, 0.03), False)]
    reduction = Reduction(effects, "r", {"join_cache_level": "6"}, "c", False)
    result = _result(full, reduction, baseline={"join_cache_level": "2",
                                                "sort_buffer_size": str(2 * MB),
                                                "tmp_table_size": str(16 * MB)})
    assert recommend.settings(result) == {"join_cache_level": "6"}
    cnf = tune_cnf(result)
    assert _settings_of(cnf) == {"join_cache_level": "6"}
    lines = "\n".join(reduction_lines(result))
    assert "sort_buffer_size put back alone" in lines
    # The words follow each interval: -4% to +8% reaches past ±5%, -4.9% to +3% does not.
    assert ("(95% CI −4.0% to +8.0%): not shown either way (a change must be shown to help): "
            "leave it as it is (2M)") in lines
    assert "(95% CI −4.9% to +3.0%): shown the same (within ±5%): leave it as it is (16M)" \
        in lines
    assert "no measurable effect" not in lines
    assert "only join_cache_level=6 is recommended" in lines
    assert "all of it is recommended" not in lines
    recommended = tune_json(result)["recommended"]
    assert recommended["settings"] == {"join_cache_level": "6"}
    assert recommended["left_as_they_are"] == ["sort_buffer_size", "tmp_table_size"]
    assert _settings_of(recommended["mycnf"]) == {"join_cache_level": "6"}


def test_the_full_configuration_is_recommended_only_when_shown_better_than_the_reduced():
    full = {"a": "1", "b": "2"}
    kept = {"a": "1"}
    assert proof.decided(full, kept, "worse") == full  # the reduced one shown worse
    assert proof.decided(full, kept, "equivalent") == kept
    assert proof.decided(full, kept, "inconclusive") == kept  # not shown: the reduced one
    shown = Reduction([Effect("a", 0.5, (0.3, 0.7), True), Effect("b", 0.02, (-0.1, 0.1), False)],
                      "r", full, "c", False)
    lines = reduction_lines(_result(full, shown))
    assert any("the full recommendation was shown better than a=1 alone" in line
               for line in lines)
    assert recommend.settings(_result(full, shown)) == full


def test_what_is_kept_is_what_was_shown_and_never_a_cost_the_workload_cannot_see():
    changes = {"tmp_table_size": "29360128", "max_connect_errors": "63010",
               "thread_cache_size": "14"}
    effects = [Effect("tmp_table_size", 4.22, (3.5, 5.0), True),
               Effect("max_connect_errors", 0.01, (-0.02, 0.04), False),
               Effect("thread_cache_size", 0.08, (0.06, 0.10), True)]
    assert recommend.shown(changes, effects) == {"tmp_table_size": "29360128"}
    # None measurable alone: the validation showed them better together.
    quiet = [Effect(e.name, 0.01, (-0.02, 0.04), False) for e in effects]
    assert recommend.shown(changes, quiet) == {"tmp_table_size": "29360128"}


def test_a_connection_limit_is_never_recommended_on_a_benchmarks_word():
    result = _result({"tmp_table_size": str(32 * MB), "max_connections": "23"},
                     baseline={"max_connections": "151"})
    assert recommend.settings(result) == {"tmp_table_size": str(32 * MB)}
    cnf = tune_cnf(result)
    assert "max_connections" not in _settings_of(cnf)
    assert "max_connections = 23 is not recommended" in cnf and "refuses the next" in cnf
    assert tune_json(result)["recommended"]["not_recommended"] == {
        "max_connections": recommend.UNSEEN_COST["max_connections"]}
    # Alone, it leaves nothing to recommend, and says so.
    alone = tune_cnf(_result({"max_connections": "23"}))
    assert _settings_of(alone) == {} and "None of its settings is recommended" in alone
    # The sweep's my.cnf keeps the same rule.
    [line] = in_force_lines(_sweep_like({}, {}), {"max_allowed_packet": str(64 * MB)})
    assert line.startswith("# max_allowed_packet = ") and "is not recommended" in line


# ------------------------------------------------------------------ 2. the settings in force


def test_tunes_mycnf_and_json_carry_the_tie_and_server_config_as_measured():
    result = _result({"tmp_table_size": str(28 * MB)},
                     base={"innodb_buffer_pool_size": str(128 * MB)},
                     tied={"max_heap_table_size": "tmp_table_size"})
    expected = {"tmp_table_size": str(28 * MB), "max_heap_table_size": str(28 * MB),
                "innodb_buffer_pool_size": str(128 * MB)}
    assert recommend.settings(result) == expected
    cnf = tune_cnf(result)
    assert _settings_of(cnf) == {"tmp_table_size": "28M", "max_heap_table_size": "28M",
                                 "innodb_buffer_pool_size": "128M"}
    assert "# max_heap_table_size follows tmp_table_size ([tie])" in cnf
    recommended = tune_json(result)["recommended"]
    assert recommended["settings"] == expected
    assert _settings_of(recommended["mycnf"]) == _settings_of(cnf)
    assert recommended["changes"] == {"tmp_table_size": str(28 * MB),
                                      "max_heap_table_size": str(28 * MB)}


class _SweepLike:
    def __init__(self, base: dict[str, str], tied: dict[str, str]) -> None:
        self.base, self.tied = base, tied


def _sweep_like(base: dict[str, str], tied: dict[str, str]) -> object:
    return _SweepLike(base, tied)


def test_the_sweeps_mycnf_is_the_same_settings_in_force():
    lines = in_force_lines(_sweep_like({"innodb_buffer_pool_size": str(64 * MB)},
                                       {"max_heap_table_size": "tmp_table_size"}),
                           {"tmp_table_size": str(64 * MB)})
    assert _settings_of("\n".join(lines)) == {"tmp_table_size": "64M",
                                              "max_heap_table_size": "64M",
                                              "innodb_buffer_pool_size": "64M"}


def test_a_step_that_changes_a_leader_set_in_the_base_moves_its_follower(monkeypatch):
    """A reduction's base holds the whole recommendation; a step that puts the leader back
    must take the follower back with it (it stayed raised: the one setting that carried the
    gain measured "no effect")."""
    monkeypatch.setitem(workloads.KINDS, fakes.FakeWorkload.kind, fakes.FakeWorkload)
    source = ('[workload]\nkind = "fake"\n[tie]\nread_buffer_size = "sort_buffer_size"\n'
              '[tune.knobs]\nsort_buffer_size = ["1M", "64M"]\n')
    spec = parse_spec(tomllib.loads(source), source=source)
    check = proof.check_spec(spec, "put back", {"sort_buffer_size": str(8 * MB)},
                             [{"sort_buffer_size": str(2 * MB)}], None)
    points = runner.plan_points(check, {"": fakes.fake_catalog()})[""].points
    assert points[1].config == {"sort_buffer_size": str(2 * MB),
                                "read_buffer_size": str(2 * MB)}
    # The same in a trial when the leader is also in [server.config].
    source = ('[server.config]\nsort_buffer_size = "4M"\n' + source)
    spec = parse_spec(tomllib.loads(source), source=source)
    trial = runner.plan_points(_trial_spec(spec, [{"sort_buffer_size": str(8 * MB)}], 2, 1),
                               {"": fakes.fake_catalog()})[""].points
    assert trial[1].config["read_buffer_size"] == str(8 * MB)


def test_a_checks_ceiling_is_what_its_share_of_the_budget_holds(monkeypatch):
    """A check whose budget holds more rounds than the default ceiling may use them (a
    setting near the noise needs 30-60), up to CEILING_MOST; a validation keeps the default
    (its boundaries spread over more looks would decide a clear gain later); an unknown cost
    or no budget keeps the default, and a budget never lowers it."""
    monkeypatch.setitem(workloads.KINDS, fakes.FakeWorkload.kind, fakes.FakeWorkload)
    source = '[workload]\nkind = "fake"\n[tune.knobs]\nsort_buffer_size = ["1M", "64M"]\n'
    spec = parse_spec(tomllib.loads(source), source=source)
    costly = dataclasses.replace(spec, workload=dataclasses.replace(
        spec.workload, rounds=Rounds(expected=0.5)))
    steps = [{"sort_buffer_size": str(2 * MB)}]

    def ceiling(of: Any, budget: float | None, **options: Any) -> int:
        return proof.check_spec(of, "put back", {}, steps, budget,
                                **options).workload.rounds.ceiling

    assert ceiling(costly, 60.0) == 60  # 2 points × 0.5 s a round: 60 rounds in 60 s
    assert ceiling(costly, 1000.0) == proof.CEILING_MOST
    assert ceiling(costly, 5.0) == Rounds().ceiling
    assert ceiling(costly, 60.0, sized=False) == Rounds().ceiling
    assert ceiling(costly, None) == Rounds().ceiling
    assert ceiling(spec, 60.0) == Rounds().ceiling  # what a measurement costs is not known


@pytest.fixture
def three_knobs(monkeypatch: pytest.MonkeyPatch) -> None:
    """The fake server with a third setting, which does nothing; the workload is faster only
    with a large read_buffer_size, the follower of the setting searched."""
    def catalog() -> Catalog:
        def size(name: str, default: str) -> Knob:
            return Knob(name, "BIGINT UNSIGNED", "SESSION", default, 1024, 2**40, 1, (), True,
                        True)

        return Catalog("fake-server 1.0", {
            "sort_buffer_size": size("sort_buffer_size", "2097152"),
            "read_buffer_size": size("read_buffer_size", "131072"),
            "join_buffer_size": size("join_buffer_size", "262144")})

    monkeypatch.setattr(fakes, "fake_catalog", catalog)
    monkeypatch.setitem(workloads.KINDS, fakes.FakeWorkload.kind, fakes.FakeWorkload)
    monkeypatch.setattr(fakes, "SCRIPT", fakes.Script(
        model=lambda s: 0.5 if int(s.get("read_buffer_size", 131072)) >= 16 * MB else 1.0))


def test_a_reduction_moves_each_setting_with_its_ties_and_recommends_them(three_knobs,
                                                                         tmp_path: Path):
    store = Store(f"sqlite:///{tmp_path / 'store.sqlite'}")
    source = ('name = "tied"\n[workload]\nkind = "fake"\n[statistics]\nseed = 3\n'
              '[tie]\nread_buffer_size = "sort_buffer_size"\n'
              '[tune]\ntrials = 6\nvalidate = 1\n[tune.knobs]\n'
              'sort_buffer_size = ["1M", "64M"]\njoin_buffer_size = ["128K", "8M"]\n')
    spec = parse_spec(tomllib.loads(source), source=source)


    fakes.SCRIPT.sleep = 0.02
    result = tune(spec, store, tmp_path, TuneQuiet(), open_servers=fakes.open_fake)
    chosen = result.recommended
    assert chosen is not None and result.reduction is not None
    assert set(chosen.trial.changes) == {"sort_buffer_size", "join_buffer_size"}
    # The study's time is its wall time: it holds every run's measuring, the validation's and
    # the reduction's too.
    import optuna

    from knoblab.search.study import beside

    trials = optuna.load_study(study_name="tied", storage=beside(store)).trials
    checks = [r["id"] for r in store.list_runs(limit=None)
              if not re.search(r": trials? \d+", r["name"])]
    assert checks  # the validation's and the reduction's runs
    measured = seconds_spent(trials) + \
        sum(runner.measuring_seconds(store.trials(r)) for r in checks)
    assert result.spent >= measured, (result.spent, measured)
    effects = {e.name: e for e in result.reduction.effects}
    # Put back with its follower, the leader's loss shows; the other setting does nothing.
    assert effects["sort_buffer_size"].measurable
    assert not effects["join_buffer_size"].measurable
    leader = chosen.trial.changes["sort_buffer_size"]
    assert recommend.settings(result) == {"sort_buffer_size": leader, "read_buffer_size": leader}
    # Each point of the reduction's runs: the follower always at the leader's value, or
    # both back at their defaults.
    for run_id in (result.reduction.run_id, result.reduction.check_run_id):
        assert run_id is not None
        for t in store.trials(run_id):
            applied = t.effective
            assert (applied["read_buffer_size"] == applied["sort_buffer_size"]) or \
                (applied["read_buffer_size"], applied["sort_buffer_size"]) == (
                    "131072", "2097152"), applied


# ------------------------------------------------------------------ the cnf on a real server


EXAMPLES = Path(__file__).parent.parent / "examples"


@pytest.mark.parametrize(("example", "changes"), [
    ("tune-query-mix.toml", {"tmp_table_size": str(28 * MB), "sort_buffer_size": str(24 * MB),
                             "join_buffer_size": str(1 * MB), "join_cache_level": "6"}),
    ("tune-oltp.toml", {"innodb_buffer_pool_size": str(64 * MB),
                        "innodb_log_buffer_size": str(32 * MB), "innodb_io_capacity": "2000",
                        "innodb_flush_neighbors": "0"}),
])
def test_a_recommended_cnf_applied_to_a_fresh_sandbox_is_the_measured_configuration(
        binary, knoblab_home, catalog, example, changes):
    """Each example's recommended.cnf, applied to a fresh server, gives every setting the value
    the trial's run set: the searched ones (session settings among them), the tied follower,
    [server.config]."""
    from knoblab.server.sandbox import Sandbox, base_template
    from knoblab.spec import load_spec

    spec = load_spec(EXAMPLES / example)
    plan = runner.plan_points(_trial_spec(spec, [changes], 2, 1), {"": catalog})[""]
    measured = {**plan.base, **plan.points[1].config}
    assert set(measured) >= set(changes)
    result = _result(changes, base=spec.base_settings(catalog), tied=spec.tied)
    applied = _settings_of(tune_cnf(result))
    assert set(applied) == set(measured)
    with Sandbox(binary, base_template(binary, knoblab_home) / "data", applied,
                 home=knoblab_home) as server:
        assert server.global_values(list(measured)) == measured
    if example == "tune-query-mix.toml":
        assert measured["max_heap_table_size"] == changes["tmp_table_size"]


# ------------------------------------------------------------------ help together, or nothing


@pytest.fixture
def four_knobs(monkeypatch: pytest.MonkeyPatch) -> None:
    """The fake server with four settings: a large sort_buffer_size halves the time; a large
    join_buffer_size and a large read_rnd_buffer_size each save 2.5% (under min_effect alone,
    above it together); read_buffer_size does nothing."""
    def catalog() -> Catalog:
        def size(name: str, default: str) -> Knob:
            return Knob(name, "BIGINT UNSIGNED", "SESSION", default, 1024, 2**40, 1, (), True,
                        True)

        return Catalog("fake-server 1.0", {
            "sort_buffer_size": size("sort_buffer_size", str(2 * MB)),
            "join_buffer_size": size("join_buffer_size", str(256 * 1024)),
            "read_rnd_buffer_size": size("read_rnd_buffer_size", str(256 * 1024)),
            "read_buffer_size": size("read_buffer_size", str(128 * 1024))})

    def model(s: dict[str, str]) -> float:
        big = {k: int(s.get(k, 0)) >= 4 * MB for k in
               ("sort_buffer_size", "join_buffer_size", "read_rnd_buffer_size")}
        return 1.0 * (0.5 if big["sort_buffer_size"] else 1.0) * \
            (0.975 if big["join_buffer_size"] else 1.0) * \
            (0.975 if big["read_rnd_buffer_size"] else 1.0)

    monkeypatch.setattr(fakes, "fake_catalog", catalog)
    monkeypatch.setitem(workloads.KINDS, fakes.FakeWorkload.kind, fakes.FakeWorkload)
    monkeypatch.setattr(fakes, "SCRIPT", fakes.Script(model=model, spread=0.002))


def _four_knob_search(tmp_path: Path) -> tuple[Any, TuneQuiet, Store, dict[str, str]]:
    """A tune's Search over four_knobs' four settings, its listener, store and baseline."""
    from knoblab.search.loop import Search
    from knoblab.search.options import TuneOptions, goal_for
    from knoblab.search.space import parse_space

    store = Store(f"sqlite:///{tmp_path / 'store.sqlite'}")
    source = ('name = "together"\n[workload]\nkind = "fake"\n[statistics]\nseed = 3\n'
              'min_effect = 0.03\n[tune]\ntrials = 2\n[tune.knobs]\n'
              'sort_buffer_size = ["1M", "64M"]\njoin_buffer_size = ["128K", "64M"]\n'
              'read_rnd_buffer_size = ["128K", "64M"]\nread_buffer_size = ["64K", "64M"]\n')
    spec = parse_spec(tomllib.loads(source), source=source)
    catalog = fakes.fake_catalog()
    options = TuneOptions.from_spec(spec.tune or {}, spec.name)
    space = parse_space(options.knobs, catalog, False)
    baseline = {k: catalog.knobs[k].default_value() or "" for k in catalog.knobs}
    listener = TuneQuiet()
    search = Search(spec, options, goal_for(options, spec.workload), space, baseline, catalog,
                    store, tmp_path, listener, fakes.open_fake)
    return search, listener, store, baseline


def _reduce_all_four(tmp_path: Path) -> tuple[Reduction, TuneQuiet, Store, dict[str, str],
                                              dict[str, str]]:
    """The reduction of a validated candidate that raises all four settings of four_knobs."""
    search, listener, store, baseline = _four_knob_search(tmp_path)
    full = {"sort_buffer_size": str(16 * MB), "join_buffer_size": str(16 * MB),
            "read_rnd_buffer_size": str(16 * MB), "read_buffer_size": str(16 * MB)}
    trial = TrialOutcome(1, {**baseline, **full}, full, "scored", -0.7, [-0.7] * 4, ("t",))
    reduction = proof.reduce(search, Validation(trial, "v", "better", 1.1, (1.0, 1.2), 4), [],
                             None)
    assert reduction is not None
    return reduction, listener, store, full, baseline


def test_what_a_checks_measurement_costs_is_learned_from_the_validations(four_knobs,
                                                                         tmp_path: Path):
    """A workload measured whole has no planned cost: the validations' measurements give it
    (their wall time over their count, starts included), once, and the checks after them are
    sized by it."""
    from knoblab.runner import measuring_seconds

    search, _, store, _ = _four_knob_search(tmp_path)
    assert search.checking.workload.rounds.expected is None
    run_id = search.run(proof.check_spec(search.checking, "validation", {},
                                         [{"sort_buffer_size": str(16 * MB)}], None))
    trials = store.trials(run_id)
    proof.learn_cost(search, [run_id])
    learned = search.checking.workload.rounds.expected
    assert learned == pytest.approx(measuring_seconds(trials) / len(trials))
    assert learned > 0
    again = search.run(proof.check_spec(search.checking, "another", {},
                                        [{"join_buffer_size": str(16 * MB)}], None))
    proof.learn_cost(search, [again])
    assert search.checking.workload.rounds.expected == learned  # known: kept
    sized = proof.check_spec(search.checking, "put back", {}, [{}, {}], 1000.0)
    assert sized.workload.rounds.ceiling == min(proof.CEILING_MOST,
                                                max(20, int(1000.0 // (3 * learned))))


def test_settings_that_help_only_together_stay_and_one_that_does_nothing_goes_back(
        four_knobs, tmp_path: Path):
    """Put back alone, only sort_buffer_size shows; the full configuration is then shown better
    than sort_buffer_size alone (the two small ones help together). Before, all of it was
    recommended, read_buffer_size (which does nothing) among it. Now the others are put back
    one by one, the least important first, and read_buffer_size goes back."""
    reduction, listener, store, full, baseline = _reduce_all_four(tmp_path)
    assert {e.name for e in reduction.effects if e.measurable} == {"sort_buffer_size"}
    assert reduction is not None
    assert {e.name for e in reduction.effects if e.measurable} == {"sort_buffer_size"}
    assert reduction.trim_run_id is not None, listener.said
    # read_buffer_size (no effect) was put back first, and it is not recommended.
    assert reduction.trim_steps[0][0] == "read_buffer_size"
    assert "read_buffer_size" in reduction.trimmed
    assert "read_buffer_size" not in reduction.kept
    assert "sort_buffer_size" in reduction.kept
    result = _result(full, reduction, baseline=baseline)
    assert "read_buffer_size" not in recommend.settings(result)
    lines = "\n".join(reduction_lines(result))
    assert "put back one by one, the least important first" in lines
    assert "without read_buffer_size too:" in lines
    # What is recommended was measured as such: a point of the trimming run is that config.
    applied = [t.effective for t in store.trials(reduction.trim_run_id)]
    assert any(all(a.get(k) == v for k, v in recommend.settings(result).items()) and
               a.get("read_buffer_size") == baseline["read_buffer_size"] for a in applied)


def test_when_no_setting_shows_alone_one_that_does_nothing_still_goes_back(four_knobs,
                                                                          tmp_path: Path):
    """Three settings that save 2.5% each (none measurable alone, under min_effect) and one
    that does nothing: before, all four were recommended together. Now they are put back one by
    one, the least important first, and the one that does nothing goes."""
    def model(s: dict[str, str]) -> float:
        helps = sum(int(s.get(k, 0)) >= 4 * MB for k in
                    ("sort_buffer_size", "join_buffer_size", "read_rnd_buffer_size"))
        return 0.975 ** helps

    fakes.SCRIPT.model = model
    reduction, listener, _, full, baseline = _reduce_all_four(tmp_path)
    assert not any(e.measurable for e in reduction.effects)
    assert reduction.check_run_id is None and reduction.trim_run_id is not None, listener.said
    assert reduction.trim_steps[0][0] == "read_buffer_size"
    assert "read_buffer_size" not in reduction.kept and reduction.kept
    lines = "\n".join(reduction_lines(_result(full, reduction, baseline=baseline)))
    assert "no setting's effect is measurable alone" in lines
    assert "put back one by one" in lines and "they are recommended together" not in lines


def test_settings_undecided_alone_are_put_back_in_the_order_the_search_ranks_them(
        four_knobs, tmp_path: Path):
    """Put back alone, every setting undecided: their losses measured so are noise (a setting
    that does nothing can show more than one that helps). The search's trials measured many
    more configurations: the order of the put-back is theirs, and the noisy losses only break
    ties (no trials)."""
    search, _, _, baseline = _four_knob_search(tmp_path)
    big, names = str(64 * MB), ["read_buffer_size", "join_buffer_size", "sort_buffer_size"]
    rng = random.Random(5)
    outcomes = []
    for number in range(40):
        config = {**baseline, **{k: rng.choice([baseline[k], big]) for k in names}}
        # sort_buffer_size matters most, join_buffer_size a little, read_buffer_size nothing.
        score = -0.5 * (config["sort_buffer_size"] == big) - \
            0.1 * (config["join_buffer_size"] == big) + rng.gauss(0, 0.01)
        outcomes.append(TrialOutcome(number, config, {}, "scored", score, [score], ("t",)))
    noisy = {"read_buffer_size": 0.3, "join_buffer_size": 0.1, "sort_buffer_size": 0.2}
    assert proof._least_important_first(search, names, outcomes, noisy) == names
    assert proof._least_important_first(search, names, [], noisy) == \
        ["join_buffer_size", "sort_buffer_size", "read_buffer_size"]


def test_what_the_chain_never_put_back_is_put_back_from_what_it_chose(
        four_knobs, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """Put back in groups, the chain keeps the settings after its first step shown worse, and
    the most important one, without ever putting them back: ranked wrongly (read_buffer_size,
    which does nothing, last), read_buffer_size would be recommended untested. It is put back
    from what the chain chose, not shown worse so, and left as it is."""
    fakes.SCRIPT.model = lambda s: 0.5 if int(s.get("sort_buffer_size", 0)) >= 4 * MB else 1.0
    order = ["join_buffer_size", "read_rnd_buffer_size", "sort_buffer_size", "read_buffer_size"]
    monkeypatch.setattr(proof, "_least_important_first", lambda *args, **kw: list(order))
    search, listener, store, baseline = _four_knob_search(tmp_path)
    full = {name: str(16 * MB) for name in order}
    trial = TrialOutcome(1, {**baseline, **full}, full, "scored", -0.7, [-0.7] * 4, ("t",))
    reduction = proof.halve(search, Validation(trial, "v", "better", 1.1, (1.0, 1.2), 4), [],
                            None)
    assert reduction is not None, listener.said
    # Groups: join and read_rnd (not worse without them); sort_buffer_size (worse).
    assert [verdict == "worse" for _, verdict in reduction.trim_steps] == [False, True]
    assert reduction.rest == ("read_buffer_size",) and reduction.rest_run_id is not None
    assert reduction.rest_verdict != "worse"
    assert reduction.kept == {"sort_buffer_size": str(16 * MB)}
    assert set(reduction.trimmed) == {"join_buffer_size", "read_rnd_buffer_size",
                                      "read_buffer_size"}
    # The check ran from what the chain chose: sort_buffer_size and read_buffer_size changed.
    applied = [t.effective for t in store.trials(reduction.rest_run_id)]
    assert {(a["sort_buffer_size"], a["read_buffer_size"]) for a in applied} == \
        {(str(16 * MB), str(16 * MB)), (str(16 * MB), baseline["read_buffer_size"])}
    lines = "\n".join(reduction_lines(_result(full, reduction, baseline=baseline)))
    assert "then read_buffer_size, which no step put back" in lines
    assert tune_json(_result(full, reduction, baseline=baseline))["reduction"]["rest"] == \
        ["read_buffer_size"]


def test_a_reduced_recommendation_not_shown_better_as_itself_falls_back_to_the_validated_one(
        four_knobs, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """The reduction chose read_buffer_size alone (noise can: every setting undecided alone,
    a chain's step worse by the others' losses added up), which does nothing. Measured as
    itself against the baseline it is not shown better: what was shown to help is the
    validated candidate, and that is what is recommended, saying why."""
    search, listener, _, baseline = _four_knob_search(tmp_path)
    full = {"sort_buffer_size": str(16 * MB), "read_buffer_size": str(16 * MB)}
    trial = TrialOutcome(1, {**baseline, **full}, full, "scored", -0.7, [-0.7] * 4, ("t",))
    validated = Validation(trial, "v", "better", 1.0, (0.8, 1.2), 4)
    chose = {"read_buffer_size": str(16 * MB)}
    monkeypatch.setattr(proof, "validate", lambda *args: [validated])
    monkeypatch.setattr(proof, "reduce", lambda *args: Reduction([], "r", dict(chose), None,
                                                                 None))
    validations, reduction, confirmation = proof.check(search, [trial], None)
    assert confirmation is not None and confirmation.trial.changes == chose
    assert confirmation.verdict != "better"
    assert reduction is not None and reduction.kept == full and reduction.unconfirmed == chose
    result = dataclasses.replace(_result(full, reduction, baseline=baseline),
                                 validations=validations, confirmation=confirmation)
    assert recommend.searched(recommend.changes(result)) == full
    assert recommend.claim(result) is validated
    lines = " ".join(" ".join(reduction_lines(result)).split())
    assert "not shown better, so trial 1 is recommended whole" in lines
    assert tune_json(result)["reduction"]["unconfirmed"] == chose
    assert any("is recommended whole, as validated" in line for line in listener.said)


def test_a_recommendation_that_could_not_be_reduced_says_so_and_the_json_too():
    """A short budget skips the reduction: the settings validated together are recommended,
    but the user is told that which of them matter was not measured."""
    full = {"join_cache_level": "6", "tmp_table_size": str(32 * MB)}
    result = _result(full)  # validated, no reduction
    lines = "\n".join(reduction_lines(result))
    assert "not reduced: these 2 settings were shown better together" in lines
    assert "not reduced" in tune_cnf(result)
    assert tune_json(result)["recommended"]["reduced"] is False
    one = _result({"join_cache_level": "6"})
    assert not reduction_lines(one) and tune_json(one)["recommended"]["reduced"] is True


def test_a_check_skipped_for_the_budget_names_the_studys_budget():
    exc = BudgetTooShort('[workload] budget = "2s" cannot hold ...', 12.0)
    text = proof.short(exc, 2.0)
    assert "[workload]" not in text and "12 s" in text
    assert "--budget" in text


# ----------------------------------------------------------- the gain a recommendation carries


@pytest.fixture
def one_dropped(monkeypatch: pytest.MonkeyPatch) -> None:
    """The fake server with two settings that help: a large sort_buffer_size halves the time,
    a large join_buffer_size takes a fifth off it. With min_effect 30%, join_buffer_size put back
    alone loses 25%, under it: the reduction drops it, though the full configuration gains +150%
    and sort_buffer_size alone +100%."""
    def catalog() -> Catalog:
        def size(name: str, default: str) -> Knob:
            return Knob(name, "BIGINT UNSIGNED", "SESSION", default, 1024, 2**40, 1, (), True,
                        True)

        return Catalog("fake-server 1.0", {
            "sort_buffer_size": size("sort_buffer_size", str(2 * MB)),
            "join_buffer_size": size("join_buffer_size", str(256 * 1024))})

    def model(s: dict[str, str]) -> float:
        return (0.5 if int(s.get("sort_buffer_size", 0)) >= 4 * MB else 1.0) * \
            (0.8 if int(s.get("join_buffer_size", 0)) >= 4 * MB else 1.0)

    monkeypatch.setattr(fakes, "fake_catalog", catalog)
    monkeypatch.setitem(workloads.KINDS, fakes.FakeWorkload.kind, fakes.FakeWorkload)
    monkeypatch.setattr(fakes, "SCRIPT", fakes.Script(model=model, spread=0.002))


ONE_DROPPED = ('name = "dropped"\n[workload]\nkind = "fake"\n[statistics]\nseed = 3\n'
               'min_effect = 0.3\n[tune]\ntrials = 4\nvalidate = VALIDATE\n[tune.knobs]\n'
               'sort_buffer_size = { values = ["2M", "16M"] }\n'
               'join_buffer_size = { values = ["256K", "16M"] }\n')


def test_a_reduced_recommendation_carries_its_own_gain_not_the_full_candidates(
        one_dropped, tmp_path: Path):
    """The validated candidate raises both settings (+150%); the reduction drops
    join_buffer_size and recommends sort_buffer_size alone, which gains +100%. Before, the
    +150% was what the terminal, recommended.cnf, the report and tune.json said of it. Now
    the reduced configuration is measured against the baseline in a run of its own, and its
    gain is the one said."""
    from knoblab.report.tuning import tune_document
    from knoblab.studies import result_from_json, result_to_json, summary

    store = Store(f"sqlite:///{tmp_path / 'store.sqlite'}")
    source = ONE_DROPPED.replace("VALIDATE", "1")
    spec = parse_spec(tomllib.loads(source), source=source)
    listener = TuneQuiet()
    result = tune(spec, store, tmp_path, listener, open_servers=fakes.open_fake)
    chosen = result.recommended
    assert chosen is not None and result.reduction is not None, listener.said
    assert set(chosen.trial.changes) == {"sort_buffer_size", "join_buffer_size"}
    assert chosen.gain is not None and chosen.gain > 1.4
    assert recommend.settings(result) == {"sort_buffer_size": str(16 * MB)}, listener.said
    # The gain claimed is the recommendation's own (+100%), not the full candidate's (+150%).
    claimed = tune_json(result)["recommended"]
    assert 0.9 < claimed["gain"] < 1.1, (claimed["gain"], chosen.gain)
    own = result.confirmation
    assert own is not None, listener.said
    assert own.trial.changes == {"sort_buffer_size": str(16 * MB)}
    assert own.run_id not in {v.run_id for v in result.validations}
    assert own.gain is not None and 0.9 < own.gain < 1.1 and own.verdict == "better"
    # Its run: the baseline against the reduced configuration (join_buffer_size at its
    # default: not set, or set to it), nothing else.
    points = {(t.point_idx, t.effective.get("sort_buffer_size", str(2 * MB)),
               t.effective.get("join_buffer_size", str(256 * 1024)))
              for t in store.trials(own.run_id)}
    assert points == {(0, str(2 * MB), str(256 * 1024)), (1, str(16 * MB), str(256 * 1024))}

    assert (claimed["gain"], tuple(claimed["ci95"])) == (own.gain, own.ci95)
    assert claimed["verdict"] == "better" and claimed["run_id"] == own.run_id
    assert claimed["own_gain"] is True
    own_gain = gain_validated(own, result)
    full_gain = gain_validated(chosen, result)
    head = tune_cnf(result).splitlines()[0]
    assert own_gain in head and full_gain not in head and "measured as itself" in head
    assert f"Recommended: sort_buffer_size=16M, {own_gain}" in \
        tune_document(result, [], source, {}).conclusion
    assert own_gain in summary(result) and full_gain not in summary(result)
    lines = "\n".join(reduction_lines(result))
    assert f"that is its gain, not trial {chosen.trial.number}'s " \
        f"{percent(chosen.gain, direction_of(result))}" in lines

    # The study's stored result (knoblab report study:NAME) carries it too.
    stored = result_from_json(json.loads(json.dumps(result_to_json(result))))
    assert stored.confirmation == own and tune_json(stored)["recommended"] == claimed
    # Asked again, the finished study shows the same confirmation without measuring it again.
    runs = len(store.list_runs(limit=None))
    again = tune(spec, store, tmp_path, TuneQuiet(), open_servers=fakes.open_fake)
    assert again.confirmation == own and len(store.list_runs(limit=None)) == runs


def test_a_reduced_recommendation_another_validation_measured_is_confirmed_by_it(
        one_dropped, tmp_path: Path):
    """Two candidates validated: both settings raised, and sort_buffer_size alone. The best
    (both) is kept and reduced to sort_buffer_size alone, which the other validation measured
    exactly, in fresh starts, in a run that played no part in choosing it: that run is its
    confirmation, and no run of its own is made."""
    store = Store(f"sqlite:///{tmp_path / 'store.sqlite'}")
    source = ONE_DROPPED.replace("VALIDATE", "2")
    spec = parse_spec(tomllib.loads(source), source=source)
    listener = TuneQuiet()
    result = tune(spec, store, tmp_path, listener, open_servers=fakes.open_fake)
    wanted = {"sort_buffer_size": str(16 * MB)}
    assert recommend.settings(result) == wanted, listener.said
    assert len(result.validations) == 2, [(t.changes, t.state, t.error) for t in result.trials]
    alone = next(v for v in result.validations if v.trial.changes == wanted)
    own = result.confirmation
    assert own is not None and own.trial.changes == wanted
    assert own.run_id == alone.run_id and own.verdict == alone.verdict == "better"
    assert own.trial.number == result.recommended.trial.number  # the reduction's trial
    assert recommend.claim(result) == own
    assert tune_json(result)["recommended"]["gain"] == own.gain
    assert any(f"measured as itself by the validation of trial {alone.trial.number}" in line
               for line in listener.said), listener.said
    confirmations = [r for r in store.list_runs(limit=None) if "reduced to" in r["name"]
                     or "confirmed" in r["name"]]
    assert not confirmations, [r["name"] for r in store.list_runs(limit=None)]


def test_a_reduced_recommendation_the_budget_could_not_confirm_says_its_gain_is_not_its_own(
        one_dropped, tmp_path: Path):
    """No budget left for the confirmation: the recommendation is still the reduced one, and
    everywhere its gain is said it is said to be the full candidate's."""
    from knoblab.report.tuning import tune_document
    from knoblab.search.loop import Search
    from knoblab.search.options import TuneOptions, goal_for
    from knoblab.search.space import parse_space
    from knoblab.studies import summary

    store = Store(f"sqlite:///{tmp_path / 'store.sqlite'}")
    source = ONE_DROPPED.replace("VALIDATE", "1")
    spec = parse_spec(tomllib.loads(source), source=source)
    catalog = fakes.fake_catalog()
    options = TuneOptions.from_spec(spec.tune or {}, spec.name)
    baseline = {k: catalog.knobs[k].default_value() or "" for k in catalog.knobs}
    listener = TuneQuiet()
    search = Search(spec, options, goal_for(options, spec.workload),
                    parse_space(options.knobs, catalog, False), baseline, catalog, store,
                    tmp_path, listener, fakes.open_fake)
    full = {"sort_buffer_size": str(16 * MB), "join_buffer_size": str(16 * MB)}
    trial = TrialOutcome(1, dict(full), dict(full), "scored", -0.9, [-0.9] * 4, ("t",))
    chosen = Validation(trial, "v", "better", 1.5, (1.4, 1.6), 4)
    wanted = {"sort_buffer_size": str(16 * MB)}
    assert proof.confirm(search, chosen, wanted, 0.0, False) is None
    assert not store.list_runs(limit=None)  # refused before anything ran
    said = listener.said[-1]
    assert said.startswith("the recommendation's own gain is not measured (the gain said is "
                           "trial 1's, with all its settings): the study's budget left")
    # Nothing to confirm when all of the candidate is recommended, the one validated.
    said_before = len(listener.said)
    assert proof.confirm(search, chosen, dict(full), 0.0, False) is None
    assert len(listener.said) == said_before
    # Chosen among several validations: measured again, here refused by the budget.
    assert proof.confirm(search, chosen, dict(full), 0.0, True) is None
    assert listener.said[-1].startswith("the recommendation is not measured again (the gain "
                                        "said is its validation's, the best of several)")

    reduction = Reduction([Effect("sort_buffer_size", 1.0, (0.9, 1.1), True),
                           Effect("join_buffer_size", 0.25, (0.2, 0.3), False)], "r",
                          wanted, "c", True)
    result = _result(full, reduction, baseline=baseline)
    assert recommend.settings(result) == wanted and recommend.claim(result) is None
    claimed = tune_json(result)["recommended"]
    assert claimed["own_gain"] is False and claimed["gain"] == 4.2  # trial 3's, said so
    cnf = tune_cnf(result)
    assert "with all its settings; what is recommended is reduced to sort_buffer_size=16M, " \
        "whose own gain was not measured" in cnf.splitlines()[0]
    assert "was not measured as itself against the current configuration" in cnf
    assert "its own gain not measured" in tune_document(result, [], source, {}).conclusion
    assert "its own gain not measured (trial 3's: +420.0%" in summary(result)
    # The full candidate recommended: its validation is its own gain, as before.
    whole = _result(full, Reduction(reduction.effects, "r", dict(full), "c", False),
                    baseline=baseline)
    assert recommend.claim(whole) is whole.recommended
    assert tune_json(whole)["recommended"]["own_gain"] is True
    assert "with all its settings" not in tune_cnf(whole)
