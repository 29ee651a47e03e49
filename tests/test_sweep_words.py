"""A sweep says one thing in every output: recommended.cnf, result.json's conclusion and the
conclusion sentence (terminal and report) recommend a change only when it is shown to help,
and say so in the words of knoblab.words.

The runs are real runs of the run loop (plan, measure, store, build_results) with the fake
workload and server of tests/fakes.py: their measurements are set by the test, so each case
(the default shown worse, not shown worse, the same, not measured; sliced; interrupted) is
what it claims to be."""

from __future__ import annotations

import dataclasses
import io
import shutil
import tomllib
from pathlib import Path
from typing import Any, ClassVar

import pytest
from rich.console import Console

from knoblab import runner, workloads
from knoblab.records import Noise, Results
from knoblab.report import conclusion_text, print_report
from knoblab.report.document import recommended_cnf
from knoblab.report.text import noise_text
from knoblab.results import build_results
from knoblab.spec import parse_spec
from knoblab.store import Store
from knoblab.units import plural, threads_text
from knoblab.vocabulary import PointVerdict
from knoblab.words import FINDING_WORDS, agrees
from tests import fakes


class SlicedFake(fakes.FakeWorkload):
    """The fake kind with a data parameter (rows): a sweep of it is judged per slice."""

    kind: ClassVar[str] = "fake-sliced"
    parameters: ClassVar[tuple[str, ...]] = ("rows",)

    def parameter_axis(self, name: str, values: list[Any]) -> list[str]:
        return [str(v) for v in values]

    @classmethod
    def from_spec(cls, section: dict[str, Any], dataset: dict[str, Any],
                  sweep: dict[str, list[Any]], base_dir: Path | None) -> SlicedFake:
        return cls(rounds=fakes.Rounds.from_spec(section))


@pytest.fixture(autouse=True)
def fake_kinds(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(workloads.KINDS, fakes.FakeWorkload.kind, fakes.FakeWorkload)
    monkeypatch.setitem(workloads.KINDS, SlicedFake.kind, SlicedFake)
    monkeypatch.setattr(fakes, "SCRIPT", fakes.Script())


def _run(tmp_path: Path, seconds: dict[str, float], *, spread: float = 0.01,
         repetitions: int = 5, values: tuple[str, ...] = ("1M", "2M", "4M"),
         rows: tuple[int, ...] = (), interrupt_at: int | None = None) -> Results:
    """A sweep of sort_buffer_size (the fake server's default: 2M) whose measurements take
    `seconds` by value, each times up to (1 + spread)."""
    sizes = {"1M": "1048576", "2M": "2097152", "4M": "4194304", "8M": "8388608"}
    fakes.SCRIPT.seconds = {sizes[v]: s for v, s in seconds.items()}
    fakes.SCRIPT.spread = spread
    fakes.SCRIPT.interrupt_at = interrupt_at
    kind = "fake-sliced" if rows else "fake"
    source = (f'[workload]\nkind = "{kind}"\nrepetitions = {repetitions}\n'
              f'design = "restarts"\n[sweep]\nsort_buffer_size = {list(values)!r}\n'
              + (f"rows = {list(rows)!r}\n" if rows else "")
              + "[statistics]\nseed = 7\n")
    store = Store(f"sqlite:///{tmp_path / 'store.sqlite'}")
    spec = parse_spec(tomllib.loads(source), source=source)
    try:
        run_id = runner.start_run(spec, store, tmp_path, fakes.Quiet(),
                                  open_servers=fakes.open_fake)
    except KeyboardInterrupt:
        run_id = store.list_runs()[0]["id"]
    return build_results(store, run_id)


def _settings(cnf: str) -> dict[str, str]:
    """What an option file sets (its comments left out)."""
    found = {}
    for line in cnf.splitlines():
        if line.strip() and not line.startswith(("#", "[")):
            name, value = (part.strip() for part in line.split("=", 1))
            found[name] = value
    return found


def _printed(results: Results) -> str:
    out = io.StringIO()
    print_report(results, Console(file=out, width=200, color_system=None))
    return out.getvalue()


def _as_saved(results: Results) -> Results:
    """The results as result.json holds them and `knoblab report` reads them back."""
    return Results.from_json(results.to_json(conclusion_text(results)), results.objective)


def test_a_default_shown_worse_is_changed_everywhere(tmp_path):
    results = _run(tmp_path, {"1M": 1.0, "2M": 1.5, "4M": 2.0})
    conclusion = results.conclusion
    assert conclusion.recommended == {"sort_buffer_size": "1M"}
    assert conclusion.finding == "helps"
    assert conclusion.versus_current is not None
    gain, interval = conclusion.versus_current.gain("minimize")
    assert agrees("helps", interval, results.statistics.min_effect) and gain > 0.4
    text = conclusion_text(results)
    assert "sort_buffer_size" not in text
    assert (f"1M instead of the default (2M): {FINDING_WORDS['helps']}, 1.5× faster (time "
            "−33.") in text
    assert text.rstrip(".").endswith("set 1M")
    cnf = recommended_cnf(results)
    assert _settings(cnf) == {"sort_buffer_size": "1M"}
    assert f"# sort_buffer_size = 1M instead of the default (2M): {FINDING_WORDS['helps']}" \
        in cnf
    # the table crowns what is recommended; the saved results say the same
    row = next(line for line in _printed(results).splitlines() if line.startswith("1M "))
    assert " best " in row
    saved = _as_saved(results)
    assert recommended_cnf(saved) == cnf and conclusion_text(saved) == text


def test_a_default_not_shown_worse_is_kept_everywhere(tmp_path):
    # The demo's case: the fastest value is well ahead of the default, but the runs do not
    # show it (a large spread), while the slowest is shown worse than it.
    results = _run(tmp_path, {"1M": 0.8, "2M": 1.0, "4M": 6.0}, spread=0.6, repetitions=3)
    by = {p.settings["sort_buffer_size"]: p.verdict for p in results.points}
    # 4M is shown worse than 1M, but 1M is not recommended: the fastest measured, not the best
    assert by == {"1M": "fastest measured", "2M": "inconclusive", "4M": "worse"}, by
    conclusion = results.conclusion
    assert conclusion.best is None
    assert conclusion.recommended == {"sort_buffer_size": "2M"}  # the default is kept
    assert conclusion.finding == "unshown"
    text = conclusion_text(results)
    assert text.startswith("Fastest measured: 1M")
    assert "Best:" not in text
    assert (f"1M instead of the default (2M): {FINDING_WORDS['unshown']}, time −"
            in text)
    assert text.rstrip(".").endswith("keep 2M, or measure more to decide")
    cnf = recommended_cnf(results)
    assert _settings(cnf) == {}
    assert (f"# sort_buffer_size = 1M instead of the default (2M): "
            f"{FINDING_WORDS['unshown']}, time −") in cnf
    assert "keep 2M" in cnf
    # the table does not call what is not recommended "best"
    row = next(line for line in _printed(results).splitlines() if line.startswith("1M "))
    assert "fastest measured" in row and " best " not in row
    saved = _as_saved(results)
    assert saved.conclusion == conclusion
    assert recommended_cnf(saved) == cnf and conclusion_text(saved) == text


def test_a_default_the_same_as_the_fastest_is_kept_saying_so(tmp_path):
    results = _run(tmp_path, {"1M": 0.995, "2M": 1.0, "4M": 2.0}, spread=0.002)
    by = {p.settings["sort_buffer_size"]: p.verdict for p in results.points}
    assert by == {"1M": "fastest measured", "2M": "equivalent", "4M": "worse"}, by
    assert results.conclusion.recommended == {"sort_buffer_size": "2M"}
    assert results.conclusion.finding == "same"
    text = conclusion_text(results)
    assert "1M instead of the default (2M): shown the same (within ±3%): keep 2M." in text
    cnf = recommended_cnf(results)
    assert _settings(cnf) == {}
    assert "shown the same (within ±3%): keep 2M" in cnf


def test_a_default_not_measured_shows_no_change_to_help(tmp_path):
    results = _run(tmp_path, {"1M": 1.0, "4M": 2.0}, values=("1M", "4M"))
    assert [p.verdict for p in results.points] == ["fastest measured", "worse"]
    assert results.conclusion.recommended is None
    text = conclusion_text(results)
    assert "consider" not in text
    assert ("The server default was not measured, so no change from it is shown to help "
            "(1M is the fastest measured): keep the current configuration") in text
    cnf = recommended_cnf(results)
    assert _settings(cnf) == {}
    assert "(sort_buffer_size = 1M is the fastest measured)" in cnf


def test_sliced_runs_set_only_what_every_slice_shows_to_help(tmp_path):
    results = _run(tmp_path, {"1M": 1.0, "2M": 1.5, "4M": 2.0}, rows=(10, 20))
    assert results.slices == ["rows"]
    parts = results.conclusion.by_slice or []
    assert [p.slice for p in parts] == [{"rows": "10"}, {"rows": "20"}]
    assert all(p.finding == "helps" and p.recommended == {"sort_buffer_size": "1M",
                                                          "rows": p.slice["rows"]}
               for p in parts)
    text = conclusion_text(results)
    assert text.count(f"1M instead of the default (2M): {FINDING_WORDS['helps']}") == 2
    cnf = recommended_cnf(results)
    assert _settings(cnf) == {"sort_buffer_size": "1M"}  # rows is not a setting
    assert cnf.count(FINDING_WORDS["helps"]) == 2


def test_sliced_runs_where_no_slice_shows_a_change_set_nothing(tmp_path):
    results = _run(tmp_path, {"1M": 0.8, "2M": 1.0, "4M": 6.0}, spread=0.6, repetitions=3,
                   rows=(10, 20))
    parts = results.conclusion.by_slice or []
    assert parts and all(p.recommended is None or p.recommended["sort_buffer_size"] == "2M"
                         for p in parts)
    cnf = recommended_cnf(results)
    assert _settings(cnf) == {}
    for part in parts:
        said = f"rows={part.slice['rows']}: "
        assert said + "sort_buffer_size = " in cnf
    assert "not shown either way" in cnf or "shown the same" in cnf


def test_an_incomplete_run_crowns_nothing(tmp_path):
    # Interrupted at its second measurement: one value measured once, and not crowned for it.
    results = _run(tmp_path, {"1M": 1.0, "2M": 1.5, "4M": 2.0}, interrupt_at=2)
    assert results.status != "done"
    assert [p.n for p in results.points].count(1) == 1
    assert not any(p.verdict == "best" for p in results.points)
    assert results.conclusion.best is None and results.conclusion.recommended is None
    document = results.to_json()
    assert all(p["verdict"] != "best" for p in document["points"])
    assert document["conclusion"]["best"] is None
    assert "best" not in _printed(results).replace("vs best", "")
    assert "Incomplete run (interrupted): 1 measurement so far, 2 points not yet measured" \
        in conclusion_text(results)
    assert "nothing is recommended yet" in recommended_cnf(results)


def test_counts_are_worded_in_the_singular_and_the_plural(tmp_path):
    assert plural(1, "measurement") == "1 measurement"
    assert plural(3, "measurement") == "3 measurements"
    assert plural(0, "point") == "0 points"
    assert threads_text(1) == "1 thread" and threads_text(8) == "8 threads"
    # a value whose only run failed, and a noise floor from a single measurement
    results = _run(tmp_path, {"1M": 1.0, "2M": 1.5}, values=("1M", "2M"), repetitions=1)
    failed = dataclasses.replace(results.points[0], verdict=PointVerdict.FAILED, n=0, failed=1,
                                 errors=["boom"])
    one = dataclasses.replace(results, points=[failed, results.points[1]],
                              noise=Noise(starts=1, spread_median=0.01, spread_max=0.01))
    assert "Failed: 1M (1 of 1 run) — boom." in conclusion_text(one)
    assert "(median over 1 measurement, at most 1%)" in noise_text(one)


def test_three_runs_are_said_to_be_too_few_not_the_machine_too_noisy(tmp_path):
    # The golden query sweep: a real run of repetitions = 3, in which nothing was decided.
    copy = tmp_path / "golden.sqlite"
    shutil.copy(Path(__file__).parent / "data" / "golden" / "store.sqlite", copy)
    store = Store(f"sqlite:///{copy}")
    run_id = next(run["id"] for run in store.list_runs(limit=100)
                  if run["name"] == "golden-query-sweep")
    results = build_results(store, run_id)
    assert {p.n for p in results.points} == {3}
    text = conclusion_text(results)
    assert "too noisy" not in text
    assert ("No value is shown better than another, and 3 runs per value are too few (with 2 "
            "degrees of freedom a difference must exceed 4.3 standard errors, against 2.8 "
            "with 5 runs; measure at least 5 per value) to tell whether they are the same"
            in text)
    # with enough runs an undecided comparison is the machine's noise
    five = Results.from_json({**results.to_json(), "points": [
        {**p.to_json(), "n": 5} for p in results.points]}, results.objective)
    assert "this machine was too noisy to tell" in conclusion_text(five)


def test_compare_says_its_counts_in_the_vocabulary(tmp_path):
    from knoblab.compare import _compare
    from knoblab.listings import _agreement
    from knoblab.results import point_samples

    copy = tmp_path / "golden.sqlite"
    shutil.copy(Path(__file__).parent / "data" / "golden" / "store.sqlite", copy)
    store = Store(f"sqlite:///{copy}")
    run_id = next(run["id"] for run in store.list_runs(limit=100)
                  if run["name"] == "golden-query-sweep")
    results = build_results(store, run_id)
    found = _compare(results, results, {run_id: point_samples(store, run_id)})
    said = _agreement(found)
    assert "measurably" not in said and " are the same" not in said
    assert said.endswith(f"Of 3 configurations, 0 shown to differ between the runs, "
                         f"{sum(r.verdict == 'same' for r in found.rows)} shown the same "
                         f"(within ±3%), {sum(r.verdict == 'inconclusive' for r in found.rows)}"
                         " not shown either way.")
