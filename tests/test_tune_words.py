"""tune's words and figures mean what they say: a time's gain said as how much faster, verdicts
in the one vocabulary (knoblab.words) that agree with the interval beside them, advice that
names keys the user can set, a budgeted search's progress bounded by its budget, and an
importance that is shown or said to be missing, and why."""

from __future__ import annotations

import io
import math
import time
import tomllib
from pathlib import Path
from types import SimpleNamespace

import pytest
from rich.console import Console
from rich.progress import ProgressSample

from knoblab import workloads
from knoblab.records import (
    Dimension,
    Effect,
    Goal,
    Importance,
    Metric,
    Reduction,
    Space,
    TrialOutcome,
    TuneResult,
    Validation,
)
from knoblab.report.tune_charts import write_tune_charts
from knoblab.report.tuning import (
    print_tune,
    reduction_lines,
    tune_cnf,
    tune_document,
    tune_json,
    validation_text,
)
from knoblab.search import proof
from knoblab.spec import parse_spec
from knoblab.store import Store
from knoblab.words import agrees, finding_of
from tests import fakes
from tests.test_tune import Quiet, _tune

MB = 1 << 20
GUIDE = Path(__file__).resolve().parent.parent / "docs" / "guides" / "tune.md"
TIME = Goal("seconds", Metric(None, "s", "minimize"), True)
SPACE = Space((Dimension("sort_buffer_size", 32 * 1024, 64 * MB),
               Dimension("read_buffer_size", 8192, 8 * MB)))
BASELINE = {"sort_buffer_size": str(2 * MB), "read_buffer_size": "131072"}
FULL = {"sort_buffer_size": str(32 * MB), "read_buffer_size": str(4 * MB)}


def _trial(number: int, changes: dict[str, str], log_ratios: list[float]) -> TrialOutcome:
    return TrialOutcome(number, {**BASELINE, **changes}, dict(changes), "scored",
                        sum(log_ratios) / len(log_ratios), log_ratios, (f"run-{number}",))


def _result(validations: list[Validation], reduction: Reduction | None = None,
            trials: list[TrialOutcome] | None = None, goal: Goal | None = TIME,
            importance: list[Importance] | None = None) -> TuneResult:
    chosen = [v.trial for v in validations]
    trials = trials if trials is not None else \
        [TrialOutcome(0, dict(BASELINE), {}, "baseline", 0.0, [], ()), *chosen]
    return TuneResult("words", SPACE, dict(BASELINE), trials, 60.0, "trials", validations,
                      0.03, importance=importance or [], reduction=reduction, goal=goal)


def _printed(result: TuneResult) -> str:
    out = io.StringIO()
    print_tune(result, Console(file=out, width=400))
    return out.getvalue()


# ------------------------------------------------------------ 1. a time's gain, in words


def test_a_time_objectives_gain_says_how_much_faster_everywhere_and_json_keeps_the_number(
        capsys: pytest.CaptureFixture[str]) -> None:
    """A candidate whose time is 4.782 times shorter: "+378.2%" is what the gain is as a
    number, but people are told "4.8× faster (time −79.1%)": terminal, report, cnf, the
    progress line; tune.json keeps +3.782."""
    from knoblab.consoles import TuneConsole

    best = _trial(1, {"sort_buffer_size": str(32 * MB)},
                  [-math.log(4.6), -math.log(4.8), -math.log(4.95)])
    chosen = Validation(best, "v", "better", 3.782, (3.5, 4.1), 6)
    result = _result([chosen])
    printed = _printed(result)
    assert "4.8× faster (time −79.1%; 95% CI −80.4% to −77.8%)" in printed
    assert "+378" not in printed and "+350" not in printed
    cnf = tune_cnf(result)
    assert "4.8× faster (time −79.1%" in cnf.splitlines()[0] and "+378" not in cnf
    document = tune_document(result, [], "", {})
    assert "4.8× faster (time −79.1%" in document.conclusion
    assert all("+378" not in cell for t in document.tables for row in t.rows for cell in row)
    assert tune_json(result)["recommended"]["gain"] == 3.782
    # The trial's line as the search goes, and the best so far.
    TuneConsole().scored(best, best, None, "minimize")
    line = capsys.readouterr().err
    assert "× faster (time −" in line and "+3" not in line


def test_a_rate_objectives_gain_stays_a_percent_of_the_rate() -> None:
    rate = Goal("tps", Metric(None, "tps", "maximize"), True)
    best = _trial(1, {"sort_buffer_size": str(32 * MB)}, [-0.05, -0.04, -0.06])
    result = _result([Validation(best, "v", "better", 0.05, (0.02, 0.08), 6)], goal=rate)
    assert "+5.0% tps (95% CI +2.0% to +8.0%)" in _printed(result)


# ------------------------------------------------------------ 2. the reduction's words


def test_each_settings_words_agree_with_its_interval_and_never_claim_what_is_not_shown() -> None:
    """Put back alone, read_buffer_size made the recommendation better (its gain to it
    −4.1%, 95% CI −9.6% to −0.3%): it is shown to hurt, not "no measurable effect (under
    3%)"; an interval reaching past ±3% never reads as under 3%; one within it reads "shown
    the same (within ±3%)"."""
    best = _trial(1, FULL, [-0.2, -0.21, -0.19])
    chosen = Validation(best, "v", "better", 0.22, (0.18, 0.26), 6)
    for effect, said in [
        (Effect("read_buffer_size", -0.041, (-0.096, -0.003), False),
         "read_buffer_size put back alone: its gain to the recommendation, time +4.3% (95% CI "
         "+0.3% to +10.6%): shown to hurt: leave it as it is (128K)"),
        (Effect("read_buffer_size", -0.01, (-0.05, 0.02), False),
         "not shown either way (a change must be shown to help): leave it as it is (128K)"),
        (Effect("read_buffer_size", 0.004, (-0.01, 0.02), False),
         "shown the same (within ±3%): leave it as it is (128K)"),
    ]:
        effects = [Effect("sort_buffer_size", 0.2, (0.15, 0.25), True), effect]
        reduction = Reduction(effects, "r", {"sort_buffer_size": FULL["sort_buffer_size"]},
                              "c", False)
        result = _result([chosen], reduction)
        lines = "\n".join(reduction_lines(result))
        assert said in lines, lines
        assert "no measurable effect" not in lines and "under 3%" not in lines
        assert "read_buffer_size" in tune_cnf(result) and said in tune_cnf(result)
        for shown in tune_json(result)["reduction"]["effects"]:
            assert agrees(shown["finding"], tuple(shown["ci95"]), 0.03), shown
    assert "sort_buffer_size put back alone: its gain to the recommendation, time −16.7% " \
        "(95% CI −20.0% to −13.0%): shown to help" in lines


# ------------------------------------------------------------ 3. a validation's verdict


def _verdict(monkeypatch: pytest.MonkeyPatch, base: str, candidate: str,
             level: float) -> Validation:
    """proof._verdict of a candidate 14.3% better over three rounds (95% CI +4.7% to
    +24.7%), whose run reached `level` at its last look (alpha shared among two candidates
    and a sequential boundary) and said `base` of the baseline, `candidate` of it."""
    import knoblab.results

    ratios = [-0.10, -0.13, -0.17]
    results = SimpleNamespace(points=[SimpleNamespace(verdict=base),
                                      SimpleNamespace(verdict=candidate)],
                              rounds=SimpleNamespace(level_worse=level),
                              statistics=SimpleNamespace(alpha=0.025))
    monkeypatch.setattr(knoblab.results, "build_results", lambda store, run_id: results)
    search = SimpleNamespace(
        ratios=lambda run_id: ({1: ratios}, {}), goal=TIME, store=None,
        spec=SimpleNamespace(statistics=SimpleNamespace(min_effect=0.03, alpha=0.05)),
        observed=lambda runs: None)
    return proof._verdict(search, _trial(4, FULL, ratios), "v", 2)  # type: ignore[arg-type]


def test_an_undecided_validation_shows_the_interval_at_the_level_it_was_decided_at(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """At 95% the interval lies above zero (+4.7% to +24.7%), but the run decided at p below
    0.004: the interval shown is the 99.6% one, which reaches zero, and the words say what
    it shows ("not shown either way"), never "the machine was too noisy" beside an interval
    that shows a gain."""
    undecided = _verdict(monkeypatch, "inconclusive", "inconclusive", 0.004)
    assert undecided.verdict == "undecided"
    assert undecided.confidence == pytest.approx(0.996)
    assert undecided.ci95 is not None and undecided.ci95[0] < 0 < undecided.ci95[1]
    text = validation_text(undecided, _result([undecided]))
    assert "99.6% CI" in text and "95% CI" not in text
    assert "not shown either way" in text and "too noisy" not in text
    assert finding_of(undecided.ci95, 0.03) == "unshown"


def test_a_verdict_its_interval_does_not_bear_out_is_not_claimed(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The run's test (on another scale) called the baseline worse, but the interval at the
    level it decided at reaches zero: the validation is not said to help."""
    said = _verdict(monkeypatch, "worse", "best", 0.004)
    assert said.verdict == "undecided"
    shown = _verdict(monkeypatch, "worse", "best", 0.05)
    assert shown.verdict == "better" and shown.confidence == pytest.approx(0.95)
    assert shown.ci95 is not None and shown.ci95[0] > 0
    result = _result([shown])
    assert "shown to help" in validation_text(shown, result)
    stored = tune_json(result)["validations"][0]
    assert stored["confidence"] == pytest.approx(0.95) and stored["finding"] == "helps"


# ------------------------------------------------------------ 4 and 5: a real (fake) search


@pytest.fixture
def fake_kind(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(workloads.KINDS, fakes.FakeWorkload.kind, fakes.FakeWorkload)
    monkeypatch.setattr(fakes, "SCRIPT", fakes.Script(
        model=lambda s: 1.0 if int(s.get("sort_buffer_size", 2 * MB)) < 16 * MB else 0.8))


class Progress(Quiet):
    def __init__(self) -> None:
        super().__init__()
        self.calls: list[tuple[int, int, float | None]] = []

    def searching(self, total: int, done: int, budget_left: float | None) -> None:
        self.calls.append((total, done, budget_left))


def test_a_searchs_warnings_name_keys_the_user_can_set(fake_kind: None, tmp_path: Path
                                                        ) -> None:
    """Trials are two rounds by design ([tune] rounds): the runs' advice to set
    `repetitions = 5` (a [workload] key, which tune does not read) is not passed on."""
    listener = Quiet()
    store = Store(f"sqlite:///{tmp_path / 'store.sqlite'}")
    result = _tune(store, tmp_path, listener=listener)
    assert result.validations
    said = "\n".join(listener.lines)
    assert "repetitions" not in said, said
    # And what it found is said as its intervals show it, at their level.
    from knoblab.words import confidence_text

    for validation in tune_json(result)["validations"]:
        assert agrees(validation["finding"], tuple(validation["ci95"]), 0.03), validation
        assert f"({confidence_text(validation['confidence'])} CI " in validation["said"]


def test_a_budgeted_search_expects_no_more_trials_than_its_budget_holds(
        fake_kind: None, tmp_path: Path) -> None:
    """trials = 100 with a budget that holds a handful: the progress total follows the
    budget left at a typical trial's time, and is what was done once the budget is out."""
    source = ('name = "search"\n[server]\n[workload]\nkind = "fake"\n[statistics]\nseed = 3\n'
              '[tune]\ntrials = 100\nvalidate = 1\nbudget = "12s"\n[tune.knobs]\n'
              'sort_buffer_size = ["1M", "64M"]\nread_buffer_size = ["128K", "8M"]\n')
    # Each measurement takes 0.2 s: a trial (two rounds of two) about a second.
    fakes.SCRIPT.sleep = 0.2
    listener = Progress()
    store = Store(f"sqlite:///{tmp_path / 'store.sqlite'}")
    result = _tune(store, tmp_path, parse_spec(tomllib.loads(source), source=source), listener)
    assert result.stopped == "budget"
    total, done, left = listener.calls[-1]
    assert total == done < 100 and left is not None
    # From the first trial timed on (the baseline's trial is not measured): bounded.
    assert all(total < 100 for total, _, _ in listener.calls[2:]), listener.calls


def test_expected_trials_follow_the_budget_left() -> None:
    from knoblab.search.loop import expected_trials

    assert expected_trials(100, 6, 0, None, 20.0) == 100  # no budget: the trials asked
    assert expected_trials(100, 6, 0, 13.0, 20.0) == 6  # 13 s hold no trial of 20 s
    assert expected_trials(100, 6, 0, 65.0, 30.0) == 8
    assert expected_trials(100, 6, 1, 65.0, 30.0) == 9  # another worker's, being measured
    assert expected_trials(7, 6, 0, 1000.0, 30.0) == 7
    assert expected_trials(100, 6, 0, 50.0, 0.0) == 100  # no trial timed yet


def test_the_eta_of_a_budgeted_search_never_passes_its_budget() -> None:
    """6 of 100 trials done at 20 s each is half an hour at that pace, but 13 s of budget are
    left: the ETA says at most 13 s."""
    from knoblab.consoles import TuneConsole
    from knoblab.terminal import BudgetedTimeRemaining

    console = TuneConsole()
    console.searching(100, 6, 13.0)
    try:
        task = console.progress.tasks[0]
        now = time.monotonic()
        task._progress.extend([ProgressSample(now - 40, 1), ProgressSample(now - 20, 1)])
        assert task.time_remaining is not None and task.time_remaining > 1000
        column = next(c for c in console.progress.columns
                      if isinstance(c, BudgetedTimeRemaining))
        shown = column.render(task).plain
        hours, minutes, seconds = (int(x) for x in shown.split(":"))
        assert hours == minutes == 0 and seconds <= 13, shown
    finally:
        console.close()


# ------------------------------------------------------------ 6. importance


def test_no_importance_is_said_with_why() -> None:
    """No setting of the recommendation showed alone: the ablation has no gain to share, and
    one line says so, in the terminal, the report and tune.json."""
    best = _trial(1, FULL, [-0.2, -0.21, -0.19])
    chosen = Validation(best, "v", "better", 0.22, (0.18, 0.26), 6)
    effects = [Effect("sort_buffer_size", 0.1, (-0.02, 0.22), False),
               Effect("read_buffer_size", 0.1, (-0.02, 0.22), False)]
    result = _result([chosen], Reduction(effects, "r", dict(FULL), None, None))
    said = "Importance: not shown, as no setting of the recommendation was shown to help"
    assert said in _printed(result)
    assert tune_json(result)["importance_note"].startswith(said)
    assert any(line.startswith(said) for line in tune_document(result, [], "", {}).evidence)
    # Without a reduction: fANOVA over the trials, which needs 8.
    few = _result([], trials=[TrialOutcome(0, dict(BASELINE), {}, "baseline", 0.0, [], ()),
                              _trial(1, FULL, [0.01, 0.02])])
    assert "2 trial(s) were measured" in _printed(few) and "at least 8" in _printed(few)


def test_importance_shown_is_drawn_and_the_guide_says_what_is_printed(tmp_path: Path) -> None:
    best = _trial(1, FULL, [-0.2, -0.21, -0.19])
    chosen = Validation(best, "v", "better", 0.22, (0.18, 0.26), 6)
    shares = [Importance("sort_buffer_size", 1.0, 0.9, 1.0, "ablation"),
              Importance("read_buffer_size", 0.0, 0.0, 0.05, "ablation")]
    # the intervals are those of the run that put each setting back, at its level
    reduction = Reduction([Effect("sort_buffer_size", 0.2, (0.1, 0.3), True, 0.983),
                           Effect("read_buffer_size", 0.0, (-0.01, 0.02), False, 0.983)],
                          "r", {"sort_buffer_size": "64M"}, None, None)
    result = _result([chosen], reduction=reduction, importance=shares)
    printed = _printed(result)
    assert "put back alone; 98.3% interval):" in printed and \
        "Importance: not shown" not in printed
    assert tmp_path / "importance.png" in write_tune_charts(result, tmp_path)
    described = _result([chosen], importance=[
        Importance(i.name, i.share, i.low, i.high, "trials") for i in shares])
    assert "10th to 90th percentile over resamples" in _printed(described)
    guide = " ".join(GUIDE.read_text().split())
    for promise in ("put back alone, with that measurement's interval",
                    "with the 10th–90th percentile over resamples", "`importance.png`",
                    "one line says which"):
        assert promise in guide, promise


def test_the_settings_put_back_one_by_one_are_said_in_the_same_words() -> None:
    best = _trial(1, FULL, [-0.2, -0.21, -0.19])
    chosen = Validation(best, "v", "better", 0.22, (0.18, 0.26), 6)
    effects = [Effect("sort_buffer_size", 0.1, (-0.02, 0.22), False),
               Effect("read_buffer_size", 0.1, (-0.02, 0.22), False)]
    reduction = Reduction(effects, "r", {"read_buffer_size": FULL["read_buffer_size"]}, None,
                          None, ("sort_buffer_size",), "t",
                          (("sort_buffer_size", "equivalent"),))
    lines = reduction_lines(_result([chosen], reduction))
    assert "  without sort_buffer_size too: shown the same as the best (within ±3%)" in lines
    hurt = Reduction(effects, "r", dict(FULL), None, None, (), "t",
                     (("sort_buffer_size", "worse"),))
    assert "  without sort_buffer_size too: shown to hurt (worse than the best)" in \
        reduction_lines(_result([chosen], hurt))


def test_tunes_advice_names_the_keys_it_means(fake_kind: None, tmp_path: Path) -> None:
    """"give a larger budget", "give more trials": which key, in which section, or which
    flag."""
    from knoblab.errors import UserError
    from knoblab.report.tuning import unmeasured
    from knoblab.search import tune

    source = ('name = "search"\n[server]\n[workload]\nkind = "fake"\n[tune]\nbudget = "2s"\n'
              '[tune.knobs]\nsort_buffer_size = ["1M", "64M"]\n')
    store = Store(f"sqlite:///{tmp_path / 'store.sqlite'}")
    with pytest.raises(UserError, match=r"give a larger budget \(\[tune\] budget, or knoblab "
                                        r"tune SPEC --budget \.\.\.\)"):
        tune(parse_spec(tomllib.loads(source), source=source), store, tmp_path, Quiet(),
             open_servers=fakes.open_fake)
    nothing = _result([], trials=[TrialOutcome(0, dict(BASELINE), {}, "baseline", 0.0, [], ())])
    assert "give more trials ([tune] trials)" in (unmeasured(nothing) or "")
