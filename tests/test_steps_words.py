"""A steps run's verdicts agree with the intervals shown beside them, in the words of
knoblab.words, and its header counts what ran.

Real step tables: the golden store's steps runs (a script on two servers, sysbench) and runs of
the run loop with the fake workload and server of tests/fakes.py, from a quiet machine to one
so noisy that a halving is not shown."""

from __future__ import annotations

import io
import shutil
import tomllib
from pathlib import Path

import pytest
from rich.console import Console

from knoblab import runner, workloads
from knoblab.records import Results
from knoblab.report import conclusion_text, print_report
from knoblab.report.format import step_finding, step_verdict_text
from knoblab.report.text import rounds_text
from knoblab.results import build_results
from knoblab.spec import parse_spec
from knoblab.store import Store
from knoblab.words import agrees
from tests import fakes

GOLDEN = Path(__file__).parent / "data" / "golden"
SORT_1M, READ_64K = "1048576", "65536"


@pytest.fixture(autouse=True)
def fake_kind(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(workloads.KINDS, fakes.FakeWorkload.kind, fakes.FakeWorkload)
    monkeypatch.setattr(fakes, "SCRIPT", fakes.Script())


def _halving(settings: dict[str, str]) -> float:
    """sort_buffer_size = 1M halves the time; read_buffer_size = 64K takes 2% off."""
    return ((0.5 if settings["sort_buffer_size"] == SORT_1M else 1.0)
            * (0.98 if settings["read_buffer_size"] == READ_64K else 1.0))


STEPS = """[workload]
kind = "fake"
repetitions = 3
design = "{design}"
[[step]]
sort_buffer_size = "1M"
[[step]]
read_buffer_size = "128K"
[[step]]
read_buffer_size = "64K"
[statistics]
seed = 7
"""


def _steps_run(tmp_path: Path, spread: float, design: str = "restarts"
               ) -> tuple[Results, list[str]]:
    fakes.SCRIPT.model = _halving
    fakes.SCRIPT.spread = spread
    source = STEPS.format(design=design)
    store = Store(f"sqlite:///{tmp_path / f'steps-{spread}.sqlite'}")
    listener = fakes.Quiet()
    run_id = runner.start_run(parse_spec(tomllib.loads(source), source=source), store,
                              tmp_path, listener, open_servers=fakes.open_fake)
    return build_results(store, run_id), listener.lines


def _golden_steps(tmp_path: Path) -> list[Results]:
    copy = tmp_path / "golden.sqlite"
    shutil.copy(GOLDEN / "store.sqlite", copy)
    store = Store(f"sqlite:///{copy}")
    return [build_results(store, run["id"]) for run in store.list_runs(limit=100)
            if run["name"] in ("golden-steps-servers", "golden-sysbench-steps")]


def _gain_interval(results: Results, row) -> tuple[float, float]:
    return row.vs_previous.gain(results.objective.direction)[1]


def test_every_step_verdict_agrees_with_the_interval_shown(tmp_path):
    runs = _golden_steps(tmp_path) + [_steps_run(tmp_path, spread)[0]
                                      for spread in (0.01, 0.8, 1.5, 3.0)]
    assert len(runs) == 6
    checked = 0
    for results in runs:
        min_effect = results.statistics.min_effect
        for table in results.steps or []:
            for row in table.rows:
                if not row.step or row.vs_previous is None:
                    continue
                finding = step_finding(results, row)
                interval = _gain_interval(results, row)
                assert finding is not None and agrees(finding, interval, min_effect), \
                    (results.name, row)
                # a verdict the test did not decide never sits beside an interval that
                # shows a change of the minimum effect or more
                if row.verdict == "no measurable effect":
                    low, high = interval
                    assert not (low >= min_effect or high <= -min_effect), (results.name, row)
                if row.verdict == "gain":
                    assert finding == "helps" and interval[0] > 0
                checked += 1
    assert checked >= 10


def test_a_halving_the_test_does_not_decide_is_not_shown_by_its_interval_either(tmp_path):
    # So noisy a machine that three runs do not show the halving: the table says "not shown
    # either way", and the interval beside it crosses zero (it once read "−53.5% [−54, −36]
    # … no measurable effect").
    results, _ = _steps_run(tmp_path, 1.5)
    row = results.steps[0].rows[1] if results.steps else None
    assert row is not None and row.change == {"sort_buffer_size": "1M"}
    assert row.vs_previous is not None and not row.vs_previous.significant
    low, high = _gain_interval(results, row)
    assert low < 0 < high
    assert step_verdict_text(results, row)[0] == "not shown either way: leave it out"
    assert "Not shown either way, leave out: sort_buffer_size=1M" in conclusion_text(results)


def test_a_quiet_machine_shows_the_halving_and_the_small_change_as_small(tmp_path):
    results, _ = _steps_run(tmp_path, 0.01)
    rows = results.steps[0].rows if results.steps else []
    assert [r.verdict for r in rows] == ["base", "gain", "changes nothing",
                                         "no measurable effect"]
    assert step_verdict_text(results, rows[1])[0] == "shown to help"
    out = io.StringIO()
    print_report(results, Console(file=out, width=200))
    text = " ".join(out.getvalue().split())
    assert "Steps shown to help: sort_buffer_size=1M." in text
    assert "2× faster (time −" in text  # the total, as a time
    assert "interval that holds for the whole table at once" in text


def test_the_header_counts_the_measurements_that_run(tmp_path):
    # Three steps after the base, one of which changes nothing: three points run, not four.
    _, lines = _steps_run(tmp_path, 0.01)
    header = next(line for line in lines if line.startswith("run "))
    assert " 3 points × 3 repetitions " in header
    assert header.endswith("; 1 not run (nothing to change, or not on their server)")


def test_one_setting_changed_in_place_needs_no_restart(tmp_path):
    source = ('[workload]\nkind = "fake"\nrepetitions = 3\ndesign = "blocked"\n'
              '[sweep]\nsort_buffer_size = ["1M", "2M"]\n')
    store = Store(f"sqlite:///{tmp_path / 'blocked.sqlite'}")
    run_id = runner.start_run(parse_spec(tomllib.loads(source), source=source), store,
                              tmp_path, fakes.Quiet(), open_servers=fakes.open_fake)
    said = rounds_text(build_results(store, run_id))
    assert "(sort_buffer_size needs no restart)" in said
    results, _ = _steps_run(tmp_path, 0.01, design="blocked")
    assert "(sort_buffer_size, read_buffer_size need no restart)" in rounds_text(results)
