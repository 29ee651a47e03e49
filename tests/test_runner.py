"""The run loop with a fake workload and a fake server: plan order, storage, resume after a
kill, failed configurations, failed starts and timeouts — in milliseconds, without MariaDB."""

from __future__ import annotations

import dataclasses
import io
import tomllib
from collections import Counter
from pathlib import Path

import pymysql
import pytest
from rich.console import Console

from knoblab import runner, workloads
from knoblab.errors import STOP, UserError
from knoblab.results import build_results
from knoblab.runner import checks as runner_checks
from knoblab.runner import loop as runner_loop
from knoblab.runner.loop import Outcome
from knoblab.spec import parse_spec
from knoblab.store import RunInfo, Store, Trial, TrialState
from tests import fakes

VALUES = ["1M", "2M", "4M"]
CONFIG = {"1M": "1048576", "2M": "2097152", "4M": "4194304"}


class Quiet:
    def __init__(self) -> None:
        self.trials: list[tuple[str, int, str]] = []

    def message(self, text: str) -> None: ...
    def dataset_progress(self, done: int, total: int) -> None: ...
    def decision(self, undecided: list[str], most_left: int, budget_left: float | None
                 ) -> None: ...
    def plan(self, total: int, done: int, unit: str) -> None: ...
    def second(self, label: str, second: object) -> None: ...

    def trial(self, label: str, repetition: int, status: str, value: float | None,
              error: str | None) -> None:
        self.trials.append((label, repetition, status))


@pytest.fixture(autouse=True)
def fake_kind(monkeypatch: pytest.MonkeyPatch) -> None:
    """The fake kind is registered as any kind is: one line in the registry."""
    monkeypatch.setitem(workloads.KINDS, fakes.FakeWorkload.kind, fakes.FakeWorkload)
    monkeypatch.setattr(fakes, "SCRIPT", fakes.Script(
        seconds={CONFIG["1M"]: 1.0, CONFIG["2M"]: 1.0, CONFIG["4M"]: 2.0}))


@pytest.fixture
def store(tmp_path: Path) -> Store:
    return Store(f"sqlite:///{tmp_path / 'store.sqlite'}")


def _spec(repetitions: int = 3, seed: int = 7, design: str = "restarts"):
    source = (f'[workload]\nkind = "fake"\nrepetitions = {repetitions}\ndesign = "{design}"\n'
              f'[sweep]\nsort_buffer_size = {VALUES!r}\n[statistics]\nseed = {seed}\n')
    return parse_spec(tomllib.loads(source), source=source)


def _run(store: Store, tmp_path: Path, spec=None) -> str:
    return runner.start_run(spec or _spec(), store, tmp_path, Quiet(),
                            open_servers=fakes.open_fake)


def _done_per_cell(store: Store, run_id: str) -> Counter[tuple[int, int]]:
    return Counter((t.point_idx, t.repetition) for t in store.trials(run_id)
                   if t.status == TrialState.DONE)


def test_trials_follow_the_interleaved_plan_and_are_all_stored(store, tmp_path):
    run_id = _run(store, tmp_path)
    order = runner.plan_order(3, 3, seed=7)
    expected = [CONFIG[VALUES[point]] for point, _ in order]
    assert [m["sort_buffer_size"] for m in fakes.SCRIPT.measured] == expected
    assert [(t.point_idx, t.repetition) for t in store.trials(run_id)] == order
    assert store.run(run_id)["status"] == "done"
    assert fakes.SCRIPT.sessions == ["open", "closed"]
    assert fakes.SCRIPT.built == ["fake-data"]  # the data, once
    results = build_results(store, run_id)
    verdicts = {p.settings["sort_buffer_size"]: p.verdict for p in results.points}
    assert verdicts["4M"] == "worse"  # twice as slow, measured three times
    assert [p.n for p in results.points] == [3, 3, 3]


def test_another_seed_gives_another_order(store, tmp_path):
    # Three points have only twelve Latin squares: seeds 7 and 8 happen to share one.
    _run(store, tmp_path, _spec(seed=9))
    nine = [m["sort_buffer_size"] for m in fakes.SCRIPT.measured]
    assert nine == [CONFIG[VALUES[p]] for p, _ in runner.plan_order(3, 3, seed=9)]
    assert nine != [CONFIG[VALUES[p]] for p, _ in runner.plan_order(3, 3, seed=7)]


def test_ctrl_c_keeps_what_was_measured_and_resume_repeats_nothing(store, tmp_path):
    fakes.SCRIPT.interrupt_at = 5
    with pytest.raises(KeyboardInterrupt):
        _run(store, tmp_path)
    run_id = store.list_runs()[0]["id"]
    assert store.run(run_id)["status"] == "interrupted"
    statuses = Counter(t.status for t in store.trials(run_id))
    assert statuses == {TrialState.DONE: 4, TrialState.DISCARDED: 1}
    assert fakes.SCRIPT.sessions == ["open", "closed"]  # put back on the way out

    fakes.SCRIPT.interrupt_at = None
    fakes.SCRIPT.measured.clear()
    runner.resume_run(run_id, store, tmp_path, Quiet(), open_servers=fakes.open_fake)
    assert len(fakes.SCRIPT.measured) == 9 - 4  # only what was missing
    assert _done_per_cell(store, run_id) == {cell: 1 for cell in runner.plan_order(3, 3, 7)}
    assert store.run(run_id)["status"] == "done"


def test_an_interrupted_run_is_reported_incomplete_and_recommends_nothing(store, tmp_path):
    from knoblab.report import conclusion_text, print_report, write_charts

    fakes.SCRIPT.interrupt_at = 3
    with pytest.raises(KeyboardInterrupt):
        _run(store, tmp_path)
    results = build_results(store, store.list_runs()[0]["id"])
    measured = {p.settings["sort_buffer_size"] for p in results.points if p.n}
    assert len(measured) == 2
    assert [p.verdict for p in results.points if not p.n] == ["not run"]
    assert results.conclusion.recommended is None and not results.conclusion.significant
    text = conclusion_text(results)
    assert text.startswith("Incomplete run (interrupted): 2 measurements so far, 1 point not "
                           "yet measured; no conclusion is drawn")
    assert "keep" not in text
    # The whole report and its charts, as `knoblab report` makes them for an unfinished run.
    console = Console(file=io.StringIO(), width=160)
    print_report(results, console)
    assert "not run" in console.file.getvalue()
    assert write_charts(results, tmp_path / "charts")


def test_measurements_that_did_different_work_are_flagged(store, tmp_path):
    fakes.SCRIPT.rows[CONFIG["4M"]] = 0  # as when a setting changes what the query returns
    results = build_results(store, _run(store, tmp_path))
    flagged = [w for w in results.warnings if "returned different numbers of rows" in w]
    assert flagged == ["the measurements returned different numbers of rows (1M: 1; 2M: 1; "
                       "4M: 0): they did not all do the same work, so their times are not "
                       "comparable"]


def test_a_stop_whose_exception_was_lost_still_stops_the_run(store, tmp_path):
    fakes.SCRIPT.stop_flag_at = 4
    try:
        with pytest.raises(KeyboardInterrupt):
            _run(store, tmp_path)
    finally:
        STOP.clear()
    assert len(fakes.SCRIPT.measured) == 4  # the measurement under way ends, no other begins
    assert store.run(store.list_runs()[0]["id"])["status"] == "interrupted"
    assert fakes.SCRIPT.sessions == ["open", "closed"]


def test_resume_after_a_kill_discards_the_trial_it_left_running(store, tmp_path):
    fakes.SCRIPT.interrupt_at = 4
    with pytest.raises(KeyboardInterrupt):
        _run(store, tmp_path)
    run_id = store.list_runs()[0]["id"]
    # What a kill -9 leaves: the run still "running", owned by a process that is gone, and a
    # trial begun and never finished.
    store.set_status(run_id, "running")
    store.update_info(run_id, owner={"pid": 2**22 + 12345, "host": "elsewhere"})
    store.begin_trial(run_id, point_idx=0, repetition=2, position=99)
    fakes.SCRIPT.interrupt_at = None
    runner.resume_run(run_id, store, tmp_path, Quiet(), open_servers=fakes.open_fake)
    assert _done_per_cell(store, run_id) == {cell: 1 for cell in runner.plan_order(3, 3, 7)}
    assert TrialState.RUNNING not in {t.status for t in store.trials(run_id)}


def test_a_failing_configuration_fails_its_trials_and_the_run_goes_on(store, tmp_path):
    fakes.SCRIPT.fails[CONFIG["4M"]] = "query failed: Out of sort memory"
    run_id = _run(store, tmp_path)
    failed = [t for t in store.trials(run_id) if t.status == TrialState.FAILED]
    assert {t.point_idx for t in failed} == {2} and len(failed) == 3
    assert {t.error for t in failed} == {"query failed: Out of sort memory"}
    assert store.run(run_id)["status"] == "done"
    points = build_results(store, run_id).points
    assert points[2].verdict == "failed" and points[2].failed == 3
    assert points[2].errors == ["query failed: Out of sort memory"]


def test_a_refused_start_is_tried_once_then_skipped(store, tmp_path):
    fakes.SCRIPT.refuses.add(CONFIG["2M"])
    run_id = _run(store, tmp_path)
    assert [s["sort_buffer_size"] for s in fakes.SCRIPT.started].count(CONFIG["2M"]) == 1
    refused = [t for t in store.trials(run_id) if t.point_idx == 1]
    assert [t.status for t in refused] == [TrialState.FAILED] * 3
    assert [bool(t.details.get("skipped")) for t in sorted(refused, key=lambda t: t.position)] \
        == [False, True, True]
    assert all("did not start" in (t.error or "") for t in refused)
    assert _done_per_cell(store, run_id).keys() == {(p, r) for p in (0, 2) for r in range(3)}


def test_a_timeout_is_a_failed_measurement_with_its_reason(store, tmp_path):
    fakes.SCRIPT.fails[CONFIG["1M"]] = "query exceeded the timeout of 0.5 s"
    run_id = _run(store, tmp_path)
    errors = {t.error for t in store.trials(run_id) if t.status == TrialState.FAILED}
    assert errors == {"query exceeded the timeout of 0.5 s"}
    listener_statuses = Counter(t.status for t in store.trials(run_id))
    assert listener_statuses == {TrialState.DONE: 6, TrialState.FAILED: 3}


def test_a_workload_changed_since_the_run_began_is_not_resumed(store, tmp_path, monkeypatch):
    fakes.SCRIPT.interrupt_at = 2
    with pytest.raises(KeyboardInterrupt):
        _run(store, tmp_path)
    run_id = store.list_runs()[0]["id"]
    fakes.SCRIPT.interrupt_at = None
    # As when a script file was edited between the start and the resume.
    monkeypatch.setattr(fakes.FakeWorkload, "describe", lambda self: {"body": "edited"})
    with pytest.raises(UserError, match="its workload changed since it began"):
        runner.resume_run(run_id, store, tmp_path, Quiet(), open_servers=fakes.open_fake)
    assert len(fakes.SCRIPT.measured) == 2  # nothing was measured under the changed workload


# --- adaptive repetitions -------------------------------------------------------------------


def _auto_spec(extra: str = "", seed: int = 7):
    source = (f'[workload]\nkind = "fake"\nrepetitions = "auto"\n{extra}\n'
              f'[sweep]\nsort_buffer_size = {VALUES!r}\n[statistics]\nseed = {seed}\n')
    return parse_spec(tomllib.loads(source), source=source)


def test_auto_stops_at_the_first_look_where_every_comparison_is_decided(store, tmp_path):
    fakes.SCRIPT.seconds = {CONFIG["1M"]: 1.0, CONFIG["2M"]: 1.5, CONFIG["4M"]: 2.0}
    run_id = _run(store, tmp_path, _auto_spec("min_repetitions = 3\nmax_repetitions = 6"))
    results = build_results(store, run_id)
    assert store.run(run_id)["status"] == "done"
    assert len(fakes.SCRIPT.measured) == 9  # the floor: three rounds of three points
    assert results.rounds is not None and results.rounds.stopped == "decided"
    assert results.rounds.done == 3
    assert [p.verdict for p in results.points] == ["best", "worse", "worse"]
    # Each look of (up to) four spends part of α: the first is stricter than α itself.
    assert results.rounds.level_worse is not None and results.rounds.level_worse < 0.04


def test_auto_stops_when_the_rounds_left_could_not_decide(store, tmp_path):
    # Three values alike, measured far too noisily to show them within 3% of each other: a
    # hundred rounds would be needed, and the twenty of the ceiling would buy only time.
    fakes.SCRIPT.seconds = {CONFIG["1M"]: 1.0, CONFIG["2M"]: 1.0, CONFIG["4M"]: 1.0}
    fakes.SCRIPT.spread = 0.3
    run_id = _run(store, tmp_path, _auto_spec("min_repetitions = 3\nmax_repetitions = 20"))
    results = build_results(store, run_id)
    assert results.rounds is not None and results.rounds.stopped == "futile"
    assert results.rounds.done == 10  # half the ceiling: the first look futility may stop at
    assert len(fakes.SCRIPT.measured) == 30
    assert "inconclusive" in {p.verdict for p in results.points}
    info = RunInfo.from_json(store.run(run_id)["info"])
    assert info.stopped is not None and info.stopped["needed"] > 2 * 10
    from knoblab.report.text import rounds_text
    assert "could not decide what was undecided" in rounds_text(results)


def test_auto_goes_on_while_undecided_and_stops_at_the_ceiling(store, tmp_path):
    fakes.SCRIPT.seconds = {CONFIG["1M"]: 1.0, CONFIG["2M"]: 1.0, CONFIG["4M"]: 1.05}
    fakes.SCRIPT.spread = 0.3  # far too noisy to decide 5% either way
    run_id = _run(store, tmp_path, _auto_spec("min_repetitions = 2\nmax_repetitions = 4"))
    results = build_results(store, run_id)
    assert len(fakes.SCRIPT.measured) == 12
    assert results.rounds is not None and results.rounds.stopped == "ceiling"
    assert results.rounds.done == 4
    # Three looks share α: the last one's level is below α, but not far below.
    assert results.rounds.level_worse is not None and 0.015 < results.rounds.level_worse < 0.05
    assert "inconclusive" in {p.verdict for p in results.points}
    assert results.conclusion.best is None  # nothing shown: nothing crowned


def test_the_budget_counts_overlapping_trials_once():
    """In a blocked start the points' trials are open together (their parts alternate): the
    time measuring is the union of their spans."""
    def trial(began: float, seconds: float) -> Trial:
        return Trial(0, 0, 0, 0, TrialState.DONE, 1.0, {}, {}, None, seconds, began)

    together = [trial(100.0, 9.0), trial(100.5, 9.0), trial(101.0, 8.5)]  # one block, 9.5 s
    apart = [trial(200.0, 2.0), trial(203.0, 2.0)]  # one after the other, with a gap
    assert runner.measuring_seconds(together) == pytest.approx(9.5)
    assert runner.measuring_seconds(apart) == pytest.approx(4.0)
    assert runner.measuring_seconds(together + apart) == pytest.approx(13.5)
    assert runner.measuring_seconds([]) == 0.0


def test_a_budget_stops_a_complete_run_that_resume_can_extend(store, tmp_path, monkeypatch):
    monkeypatch.setattr(runner_checks, "LEAST_TRIAL_SECONDS", 0.0)
    fakes.SCRIPT.spread, fakes.SCRIPT.sleep = 0.3, 0.05
    spec = _auto_spec("min_repetitions = 2\nmax_repetitions = 50\nbudget = \"0.5s\"")
    run_id = _run(store, tmp_path, spec)
    run = store.run(run_id)
    assert run["status"] == "done"  # a budget is a normal end, not a failure
    first = build_results(store, run_id).rounds
    assert first is not None and first.stopped == "budget" and 2 <= first.done < 50
    from knoblab.report.text import rounds_text
    # the way on names this run, not a placeholder
    assert f"knoblab resume {run_id} --budget" in rounds_text(build_results(store, run_id))
    trials = store.trials(run_id)
    assert sum(t.seconds for t in trials) <= 0.5 + 0.15 * 3  # at most one round over

    quiet = Quiet()
    assert runner.resume_run(run_id, store, tmp_path, quiet, open_servers=fakes.open_fake)
    assert len(store.trials(run_id)) == len(trials)  # without a budget, nothing to do
    # The budget is the run's wall time, every invocation together: one not above what the
    # budget-stopped run spent is refused. (Asked here, of the run the budget stopped: the
    # extension below may end otherwise, its noisy values found too alike to decide.)
    with pytest.raises(UserError, match="give a larger budget"):
        runner.resume_run(run_id, store, tmp_path, quiet, open_servers=fakes.open_fake,
                          budget=0.1)
    assert len(store.trials(run_id)) == len(trials)

    # Given a second more, it goes on.
    spent = RunInfo.from_json(store.run(run_id)["info"]).stopped["spent"]
    runner.resume_run(run_id, store, tmp_path, quiet, open_servers=fakes.open_fake,
                      budget=spent + 1.0)
    second = build_results(store, run_id).rounds
    assert second is not None and second.done > first.done and second.budget == spent + 1.0
    assert store.run(run_id)["status"] == "done"


def test_a_budget_is_wall_time_server_starts_included(store, tmp_path, monkeypatch):
    """Each measurement takes 10 ms and its server start 200 ms: a 1 s budget stops the run
    after a few rounds, not after 50 rounds of 10 ms measurements."""
    monkeypatch.setattr(runner_checks, "LEAST_TRIAL_SECONDS", 0.0)
    fakes.SCRIPT.spread, fakes.SCRIPT.sleep, fakes.SCRIPT.start_sleep = 0.3, 0.01, 0.2
    spec = _auto_spec("min_repetitions = 2\nmax_repetitions = 50\nbudget = \"1s\"\n"
                      "design = \"restarts\"")
    run_id = _run(store, tmp_path, spec)
    rounds = build_results(store, run_id).rounds
    assert rounds is not None and rounds.stopped == "budget"
    # Rounds of 3 starts (0.6 s) and 3 measurements (0.03 s): the 1 s budget holds two at the
    # most (the one in progress when it ran out is finished), however slow the machine.
    assert len(fakes.SCRIPT.started) == 3 * rounds.done <= 6


def test_a_budget_too_small_for_the_first_rounds_is_refused_before_anything_runs(store,
                                                                                   tmp_path):
    spec = _auto_spec("budget = \"1s\"")
    with pytest.raises(UserError, match=r"one round takes at least 2 s \(3 points × 0.5 s\)"):
        _run(store, tmp_path, spec)
    assert fakes.SCRIPT.measured == [] and store.list_runs() == []


# --- the blocked design -----------------------------------------------------------------------


def test_blocked_design_measures_each_round_on_one_start_with_settings_set_in_place(
        store, tmp_path):
    run_id = _run(store, tmp_path, _spec(design="blocked"))
    assert len(fakes.SCRIPT.started) == 3  # one start per round, not one per measurement
    assert all("sort_buffer_size" not in s for s in fakes.SCRIPT.started)  # base only
    # Every measurement saw its own point's value, set in place, in the planned order.
    order = runner.plan_order(3, 3, seed=7)
    assert [m["sort_buffer_size"] for m in fakes.SCRIPT.measured] == [
        CONFIG[VALUES[point]] for point, _ in order]
    trials = store.trials(run_id)
    assert {t.details["block"] for t in trials} == {f"round {r} start 0" for r in range(3)}
    assert all(t.effective["sort_buffer_size"] == CONFIG[VALUES[t.point_idx]] for t in trials)
    info = store.run(run_id)["info"]
    assert info["design"]["name"] == "blocked"
    results = build_results(store, run_id)
    assert [p.verdict for p in results.points][2] == "worse"


def test_blocked_measurements_in_parts_alternate_between_the_points(store, tmp_path):
    """Each pass measures one part of every point before any point gets its next, so that a
    slow moment reaches the points alike; a point failing drops out, the others go on."""
    fakes.SCRIPT.parts = 3
    fakes.SCRIPT.fails = {CONFIG["4M"]: "no such luck"}
    run_id = _run(store, tmp_path, _spec(design="blocked"))
    assert len(fakes.SCRIPT.started) == 3
    seen = [m["sort_buffer_size"] for m in fakes.SCRIPT.measured]
    # Per round: the failing point once (its first part), then 1M and 2M alternating.
    assert len(seen) == 3 * (1 + 2 * 3)
    for first in range(0, len(seen), 7):
        passes = seen[first:first + 7]
        assert passes.count(CONFIG["4M"]) == 1
        rest = [v for v in passes if v != CONFIG["4M"]]
        assert all(sorted(rest[i:i + 2]) == [CONFIG["1M"], CONFIG["2M"]] for i in (0, 2, 4))
    trials = store.trials(run_id)
    done = [t for t in trials if t.status == TrialState.DONE]
    assert len(done) == 6 and all(len(t.details["runs"]) == 3 for t in done)
    assert all(t.value == min(t.details["runs"]) for t in done)
    failed = [t for t in trials if t.status == TrialState.FAILED]
    assert len(failed) == 3 and all(t.error == "no such luck" for t in failed)


def test_a_blocked_step_that_leaves_a_setting_alone_is_measured_with_the_base_value(
        store, tmp_path):
    """Steps share a start: the base step must not inherit the next step's value."""
    source = ('[workload]\nkind = "fake"\nrepetitions = 4\ndesign = "blocked"\n'
              '[[step]]\nsort_buffer_size = "4M"\n[[step]]\nread_buffer_size = "1M"\n'
              '[statistics]\nseed = 5\n')
    run_id = _run(store, tmp_path, parse_spec(tomllib.loads(source), source=source))
    assert len(fakes.SCRIPT.started) == 4  # blocked: a start per round
    trials = store.trials(run_id)
    seen = {(t.point_idx, t.repetition): t.effective for t in trials}
    assert all(effective["sort_buffer_size"] == "4194304"
               for (point, _), effective in seen.items() if point > 0)
    # What each measurement really ran with, in order: never a value left by another step.
    assert sorted({m["sort_buffer_size"] for m in fakes.SCRIPT.measured}) == [
        "2097152", "4194304"]
    assert sum(m["sort_buffer_size"] == "2097152" for m in fakes.SCRIPT.measured) == 4


def test_auto_chooses_blocked_for_settings_that_need_no_restart_and_says_why(store, tmp_path):
    run_id = _run(store, tmp_path, _spec(design="auto"))
    design = store.run(run_id)["info"]["design"]
    assert design["name"] == "blocked" and "sort_buffer_size needs no restart" in design["why"]


def test_a_value_the_server_refuses_in_place_fails_that_point_alone(store, tmp_path):
    fakes.SCRIPT.refuses.add(CONFIG["2M"])
    run_id = _run(store, tmp_path, _spec(design="blocked"))
    failed = [t for t in store.trials(run_id) if t.status == TrialState.FAILED]
    assert {t.point_idx for t in failed} == {1} and len(failed) == 3
    assert all("can't be set to the value" in (t.error or "") for t in failed)
    assert _done_per_cell(store, run_id).keys() == {(p, r) for p in (0, 2) for r in range(3)}


def test_a_restart_only_setting_cannot_be_blocked(store, tmp_path, monkeypatch):
    catalog = fakes.fake_catalog()
    knob = catalog.knobs["sort_buffer_size"]
    monkeypatch.setattr(fakes, "fake_catalog", lambda: dataclasses.replace(catalog, knobs={
        **catalog.knobs, "sort_buffer_size": dataclasses.replace(knob, dynamic=False)}))
    with pytest.raises(UserError, match=r'design = "blocked": sort_buffer_size takes effect '
                                        r'only at a server start; use design = "restarts"'):
        _run(store, tmp_path, _spec(design="blocked"))
    assert fakes.SCRIPT.measured == []
    run_id = _run(store, tmp_path, _spec(design="auto"))  # auto falls back, and says why
    design = store.run(run_id)["info"]["design"]
    assert design["name"] == "restarts" and "only at a server start" in design["why"]
    assert len(fakes.SCRIPT.started) == 9


def test_blocked_comparisons_cancel_what_a_start_shares(store, tmp_path, monkeypatch):
    """Starts at very different speeds (×1, ×1.5, ×1.2) and a 6% effect: compared within
    starts, it is shown; compared across them, it drowns."""
    fakes.SCRIPT.seconds = {CONFIG["1M"]: 1.0, CONFIG["2M"]: 1.06, CONFIG["4M"]: 1.0}
    fakes.SCRIPT.spread = 0.005
    levels = iter([1.0] * 3 + [1.5] * 3 + [1.2] * 3 + [1.4] * 3 + [1.1] * 3)
    measure = fakes.FakeWorkload.measure

    def slowed(self, server, requested, session_knobs, recorder):
        measured = measure(self, server, requested, session_knobs, recorder)
        return dataclasses.replace(measured, value=measured.value * next(levels))

    monkeypatch.setattr(fakes.FakeWorkload, "measure", slowed)
    run_id = _run(store, tmp_path, _spec(repetitions=5, design="blocked"))
    verdicts = {p.settings["sort_buffer_size"]: p.verdict
                for p in build_results(store, run_id).points}
    assert verdicts["2M"] == "worse"


# --- one measurement loop ---------------------------------------------------------------------


@pytest.mark.parametrize("design", ["restarts", "blocked"])
def test_both_designs_turn_a_failure_into_an_outcome_in_one_place(store, tmp_path, monkeypatch,
                                                                   design):
    """A restart is a block of one: a failed measurement goes through the same loop and the
    same mapping (`runner_loop._outcome`), and is stored alike; only the block's name is added."""
    seen: list[tuple[type[BaseException], bool]] = []
    outcome = runner_loop._outcome

    def spied(exc: BaseException, **where: bool) -> Outcome | None:
        seen.append((type(exc), where.get("starting", False)))
        return outcome(exc, **where)

    monkeypatch.setattr(runner_loop, "_outcome", spied)
    fakes.SCRIPT.fails[CONFIG["4M"]] = "query failed: Out of sort memory"
    run_id = _run(store, tmp_path, _spec(design=design))
    assert seen == [(workloads.WorkloadError, False)] * 3  # in the measurement, not the start
    failed = [t for t in store.trials(run_id) if t.status == TrialState.FAILED]
    assert [(t.point_idx, t.error) for t in failed] == \
        [(2, "query failed: Out of sort memory")] * 3
    assert [set(t.details) for t in failed] == [{"block"} if design == "blocked" else set()] * 3
    assert len(fakes.SCRIPT.started) == (3 if design == "blocked" else 9)


def test_an_exception_becomes_the_same_outcome_wherever_it_is_raised():
    from knoblab.server import NoSpace, ServerRefused, Tampered
    from knoblab.server.settings import SettingRefused

    outcome = runner_loop._outcome
    failed, discarded = TrialState.FAILED, TrialState.DISCARDED

    def ends(status, error, start_failed=False):
        return Outcome(status, error, details={"start_failed": True} if start_failed else {})

    lost = pymysql.err.OperationalError(2013, "Lost connection")
    refused = SettingRefused("sort_buffer_size", "1", 1231, "too small")
    assert outcome(workloads.WorkloadError("timeout")) == ends(failed, "timeout")
    assert outcome(lost) == ends(failed, "server error: (2013, 'Lost connection')")
    assert outcome(Tampered("changed")) == ends(failed, "changed")
    # A refused start (or a server killed for memory) fails the point as refused; a value
    # refused in place, that measurement only.
    for where in ({"starting": True}, {}):
        assert outcome(ServerRefused("no"), **where) == ends(failed, "no", start_failed=True)
    assert outcome(refused, starting=True).start_failed
    assert outcome(refused) == ends(failed, f"server error: {refused}")
    # A start shared by a round's points: what fails it fails each of them as a failed start;
    # a workload's own failure there is the run's.
    assert outcome(NoSpace("full"), starting=True, shared=True) == \
        ends(failed, "full", start_failed=True)
    assert outcome(NoSpace("full"), starting=True) == ends(failed, "full")
    assert outcome(workloads.WorkloadError("x"), starting=True, shared=True) == \
        ends(discarded, "x")
    # The run stops: the trial is no measurement.
    assert outcome(KeyboardInterrupt()) == ends(discarded, "interrupted")
    assert outcome(UserError("template deleted"), starting=True) == \
        ends(discarded, "template deleted")
    assert outcome(RuntimeError("a bug")) is None


def test_a_server_killed_for_memory_in_a_blocked_start_fails_that_point_alone(
        store, tmp_path, monkeypatch):
    """The others of its start are measured on a new one; nothing is stored twice."""
    from knoblab.server import ServerRefused

    measure, read = fakes.FakeWorkload.measure, fakes.FakeServer.global_values
    killed: list[int] = []

    def starved(self, server, requested, session_knobs, recorder):
        if server.settings.get("sort_buffer_size") == CONFIG["4M"] and not killed:
            killed.append(1)
            server.dead = True
            raise ServerRefused("the kernel killed the server for want of memory")
        return measure(self, server, requested, session_knobs, recorder)

    def answers(self, names):
        if getattr(self, "dead", False):
            raise pymysql.err.OperationalError(2002, "Can't connect")
        return read(self, names)

    monkeypatch.setattr(fakes.FakeWorkload, "measure", starved)
    monkeypatch.setattr(fakes.FakeServer, "global_values", answers)
    run_id = _run(store, tmp_path, _spec(design="blocked"))
    trials = store.trials(run_id)
    failed = [t for t in trials if t.status == TrialState.FAILED]
    assert len(failed) == 1 and failed[0].point_idx == 2
    assert failed[0].details["start_failed"] and "want of memory" in (failed[0].error or "")
    assert _done_per_cell(store, run_id) == {
        cell: 1 for cell in runner.plan_order(3, 3, 7) if cell != (2, failed[0].repetition)}
    assert len(fakes.SCRIPT.started) == 4  # the killed start's round needed a second one
    assert TrialState.RUNNING not in {t.status for t in trials}
