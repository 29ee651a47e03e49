"""Tests for knoblab.report.tune_charts on a hand-built search (no server, no Optuna)."""

import dataclasses
import math
import statistics

import pytest

from knoblab.records import Dimension, Importance, Space, TrialOutcome, TuneResult, Validation
from knoblab.report.tune_charts import (
    _importance_figure,
    _search_figure,
    _settings_figure,
    write_tune_charts,
)

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
K, M = 1024, 1024 * 1024

SPACE = Space((
    Dimension("sort_buffer_size", 32 * K, 64 * M, log=True),
    Dimension("optimizer_search_depth", 0, 62, log=False),
    Dimension("innodb_flush_method", choices=("fsync", "O_DIRECT")),
    Dimension("tmp_table_size", 1 * M, 256 * M, step=1024, log=False),
    Dimension("join_buffer_size", 128 * K, 16 * M, log=True),
))
BASELINE = {"sort_buffer_size": str(256 * K), "optimizer_search_depth": "62",
            "innodb_flush_method": "fsync", "tmp_table_size": str(16 * M),
            "join_buffer_size": str(256 * K)}


def _trial(number, gain, state="scored", spread=0.02, **settings):
    """A trial scoring `gain` (+0.08: 8% better) over three blocks around it."""
    config = {**BASELINE, **{k: str(v) for k, v in settings.items()}}
    changes = {k: v for k, v in config.items() if v != BASELINE[k]}
    if state != "scored":
        score = 0.0 if state == "baseline" else None
        return TrialOutcome(number, config, changes, state, score, [], None,
                            None if state == "baseline" else "no")
    centre = -math.log1p(gain)
    ratios = [centre - spread, centre, centre + spread]
    return TrialOutcome(number, config, changes, "scored", statistics.fmean(ratios), ratios,
                        f"run-{number}")


def _result(trials=None, importance=None, validations=None):
    if trials is None:
        trials = [_trial(0, 0.0, "baseline")]
        gains = [0.02, -0.05, 0.06, 0.01, 0.09, -0.02, 0.12, 0.04, 0.03, 0.10]
        for i, gain in enumerate(gains, start=1):
            trials.append(_trial(i, gain, sort_buffer_size=32 * K * 2 ** i,
                                 optimizer_search_depth=i * 5,
                                 innodb_flush_method="O_DIRECT" if i % 2 else "fsync",
                                 tmp_table_size=M * (i + 1), join_buffer_size=128 * K * i))
        trials.append(_trial(11, 0.0, "refused", sort_buffer_size=64 * M))
        trials.append(_trial(12, 0.0, "failed", innodb_flush_method="O_DIRECT"))
    if validations is None:
        best = max((t for t in trials if t.state == "scored"), key=lambda t: t.gain,
                   default=None)
        validations = [] if best is None else [
            Validation(best, "run-v1", "better", 0.05, (0.02, 0.08), 9)]
    if importance is None:
        importance = [Importance("sort_buffer_size", 0.55, 0.40, 0.70),
                      Importance("innodb_flush_method", 0.20, 0.10, 0.30),
                      Importance("optimizer_search_depth", 0.15, 0.05, 0.25),
                      Importance("tmp_table_size", 0.06, 0.01, 0.12),
                      Importance("join_buffer_size", 0.04, 0.0, 0.10)]
    return TuneResult("sorts", SPACE, dict(BASELINE), trials, 600.0, "trials", validations,
                      0.02, importance)


def _panels(fig):
    return [ax for ax in fig.axes if ax.get_label() != "<colorbar>"]


def test_all_charts_written_as_png(tmp_path):
    paths = write_tune_charts(_result(), tmp_path / "out")
    assert [p.name for p in paths] == ["search.png", "importance.png", "settings.png"]
    for p in paths:
        assert p.parent == tmp_path / "out"
        data = p.read_bytes()
        assert data[:8] == PNG_MAGIC and len(data) > 10_000


def test_no_importance_no_importance_chart(tmp_path):
    paths = write_tune_charts(_result(importance=[]), tmp_path)
    assert [p.name for p in paths] == ["search.png", "settings.png"]
    assert not (tmp_path / "importance.png").exists()


def test_no_scored_trial_no_settings_chart(tmp_path):
    trials = [_trial(0, 0.0, "baseline"), _trial(1, 0.0, "refused", sort_buffer_size=64 * M),
              _trial(2, 0.0, "failed", innodb_flush_method="O_DIRECT")]
    paths = write_tune_charts(_result(trials, importance=[]), tmp_path)
    assert [p.name for p in paths] == ["search.png"]
    assert not (tmp_path / "settings.png").exists()


def test_only_the_baseline_nothing_to_show(tmp_path):
    paths = write_tune_charts(_result([_trial(0, 0.0, "baseline")], importance=[]), tmp_path)
    assert paths == []


@pytest.mark.parametrize("trials", [
    [_trial(0, 0.04, sort_buffer_size=M)],  # a single scored trial
    [_trial(i, 0.03, sort_buffer_size=M, innodb_flush_method="O_DIRECT",
            optimizer_search_depth=7) for i in range(4)],  # all gains and values equal
    [_trial(0, 0.03, spread=0.0, sort_buffer_size=M)],  # no spread: a zero-width interval
], ids=["single", "all-equal", "no-spread"])
def test_degenerate_searches_draw(tmp_path, trials):
    paths = write_tune_charts(_result(trials), tmp_path)
    assert [p.name for p in paths] == ["search.png", "importance.png", "settings.png"]
    assert all(p.read_bytes()[:8] == PNG_MAGIC for p in paths)


def test_trial_without_interval_and_unrecommended_validations(tmp_path):
    lone = dataclasses.replace(_trial(1, 0.06, sort_buffer_size=M), ratios=[-0.06])
    trials = [lone, _trial(2, 0.09, sort_buffer_size=4 * M)]
    validations = [Validation(trials[1], "v1", "undecided", 0.01, (-0.03, 0.05), 20),
                   Validation(trials[0], "v2", "same", None, None, 3)]
    result = _result(trials, validations=validations)
    assert result.recommended is None
    assert len(write_tune_charts(result, tmp_path)) == 3


def test_settings_panels_follow_importance():
    fig = _settings_figure(_result())
    assert fig is not None
    panels = _panels(fig)
    assert len(panels) == 4  # five settings searched, the four most important drawn
    titles = [ax.get_title() for ax in panels]
    assert [t.split(" · ")[0].replace("\n", "") for t in titles] == [
        "sort_buffer_size", "innodb_flush_method", "optimizer_search_depth", "tmp_table_size"]
    scales = [ax.get_xscale() for ax in panels]
    assert scales == ["log", "linear", "linear", "linear"]
    # sizes read as the server writes them, on powers of two
    labels = [t.get_text() for t in panels[0].get_xticklabels()]
    assert len(labels) >= 3 and all(label[:-1].isdigit() and label[-1] in "KM" for label in labels)
    # the choice panel names its categories
    names = [t.get_text().split("\n")[0] for t in panels[1].get_xticklabels()]
    assert names == ["fsync", "O_DIRECT"]


def test_settings_without_importance_in_space_order():
    fig = _settings_figure(_result(importance=[]))
    assert fig is not None
    panels = _panels(fig)
    assert [ax.get_title().replace("\n", "") for ax in panels] == [
        d.name for d in SPACE.dimensions[:4]]


def test_settings_marks_the_baseline_value():
    fig = _settings_figure(_result())
    assert fig is not None
    sort_panel = _panels(fig)[0]
    verticals = [line for line in sort_panel.get_lines()
                 if len(set(line.get_xdata())) == 1 and len(line.get_xdata()) == 2]
    assert any(line.get_xdata()[0] == 256 * K for line in verticals)


def test_search_shows_validated_recommendation():
    result = _result()
    fig = _search_figure(result)
    assert fig is not None
    (ax,) = fig.axes
    assert [t.get_text() for t in ax.texts] == ["+5.0% validated"]
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    chosen = next(entry for entry in legend if entry.startswith("recommended: trial 7"))
    assert "validated: +5.0%" in chosen and "in the search: +12.0%" in chosen
    assert any("not measured" in entry for entry in legend)
    assert "%" in ax.yaxis.get_major_formatter()(5.0, 0)


def test_a_reduced_recommendations_legend_says_its_own_gain_or_that_it_was_not_measured():
    from knoblab.records import Effect, Reduction

    result = _result()
    [chosen] = result.validations
    kept = {"sort_buffer_size": chosen.trial.changes["sort_buffer_size"]}
    reduced = dataclasses.replace(result, reduction=Reduction(
        [Effect(k, 0.0, (0.0, 0.0), k in kept) for k in chosen.trial.changes], "r", kept, "c",
        True))

    def recommended_entry(result: TuneResult) -> str:
        fig = _search_figure(result)
        assert fig is not None
        return next(t.get_text() for t in fig.axes[0].get_legend().get_texts()
                    if t.get_text().startswith("recommended: trial 7"))

    assert "reduced to sort_buffer_size=" not in recommended_entry(result)
    assert "its own gain not measured" in recommended_entry(reduced)
    own = Validation(dataclasses.replace(chosen.trial, changes=kept), "run-c", "better", 0.03,
                     (0.01, 0.05), 6)
    entry = recommended_entry(dataclasses.replace(reduced, confirmation=own))
    assert "validated: +5.0%" in entry and "+3.0% (95% CI +1.0% to +5.0%) (its own)" in entry


def test_importance_largest_on_top():
    fig = _importance_figure(_result())
    assert fig is not None
    (ax,) = fig.axes
    labels = [t.get_text().replace("\n", "") for t in ax.get_yticklabels()]
    assert labels[-1] == "sort_buffer_size"  # the top bar
    assert labels[0] == "join_buffer_size"
    assert "variation" in ax.get_title()
    assert _importance_figure(_result(importance=[])) is None


def test_importance_says_whether_it_was_measured_or_describes_the_search():
    from knoblab.report.tuning import importance_title

    described = _result()  # fANOVA over the trials: a description of the search, said so
    (ax,) = _importance_figure(described).axes
    assert "not a measured effect" in ax.get_title() and "fANOVA" in ax.get_xlabel()
    assert "not a measured effect" in importance_title(described)
    measured = _result(importance=[Importance("sort_buffer_size", 1.0, 0.7, 1.0, "ablation"),
                                   Importance("tmp_table_size", 0.0, 0.0, 0.2, "ablation")])
    (ax,) = _importance_figure(measured).axes
    assert "what each change contributes" in ax.get_title()
    assert "variation" not in ax.get_title() + ax.get_xlabel()
    assert importance_title(measured).startswith("what each change contributes")


def test_the_search_report_reads_like_a_runs(tmp_path):
    from knoblab.report import exporters
    from knoblab.report.document import Report
    from knoblab.report.tuning import tune_document

    result = _result()
    charts = write_tune_charts(result, tmp_path)
    document = tune_document(result, charts, 'name = "sorts"\n', {"cpu": "a CPU", "cores": "2"})
    report = Report(document, search=result)
    for name in ("html", "markdown", "cnf"):  # the files read here (tune.json needs more)
        exporter = exporters.EXPORTERS[name]
        (tmp_path / exporter.file).write_text(exporter.export(report))
    html = (tmp_path / "report.html").read_text()
    assert document.question.startswith("Which values of sort_buffer_size, ")
    assert "Recommended: " in document.conclusion and "+5.0% (95% CI +2.0% to +8.0%)" in html
    assert html.count("data:image/png;base64,") == len(charts) == 3
    # every scored trial is a row, the best first; importance with its spread
    scored = [t for t in result.trials if t.state == "scored"]
    assert html.count("<tr>") >= len(scored) + 1 + 5
    assert "55%" in html and "40% to 70%" in html
    assert "a CPU" in html and 'name = &#34;sorts&#34;' in html
    cnf = (tmp_path / "recommended.cnf").read_text()
    best = max(scored, key=lambda t: t.gain)
    assert f"trial {best.number}, +5.0%" in cnf
    # Five settings validated together and never put back alone: the cnf says so.
    lines = cnf.splitlines()
    assert lines[1].startswith("# not reduced: these 5 settings were shown better together")
    assert lines[2] == "[mysqld]" and len(lines) == 3 + len(best.changes)
    markdown = (tmp_path / "report.md").read_text()
    assert "](search.png)" in markdown and "| sort_buffer_size | 55% |" in markdown


def test_a_search_that_found_nothing_says_keep_it(tmp_path):
    from knoblab.report.tuning import tune_cnf, tune_document

    trials = _result().trials
    best = max((t for t in trials if t.state == "scored"), key=lambda t: t.gain or 0.0)
    # The best candidate, measured again, was only the same as the baseline.
    result = _result(trials, validations=[Validation(best, "run-v1", "same", 0.004,
                                                     (-0.01, 0.02), 12)])
    document = tune_document(result, [], "", {})
    assert document.conclusion.startswith("No configuration was shown to help by 2% or more")
    assert tune_cnf(result).endswith("keep it.\n[mysqld]\n")
