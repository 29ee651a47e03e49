"""knoblab tune within its budget: the part of the workload trials and checks measure, sized
from what a measurement costs, kept with the study; and a recommendation of many settings
reduced in groups rather than each setting alone."""

from __future__ import annotations

import dataclasses
import time
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, cast

import pytest

from knoblab import workloads
from knoblab.connection import Server
from knoblab.errors import UserError
from knoblab.search import fidelity, proof
from knoblab.spec import parse_spec
from knoblab.workloads.base import Measured, Recorder
from tests import fakes, test_tune
from tests.test_tune import Quiet, _spec, _tune

fake_kind = test_tune.fake_kind
store = test_tune.store


@dataclass(frozen=True)
class Capture:
    """Just what the plan reads of a workload: a span in seconds, and its first seconds cut."""

    span: float | None = 60.0
    cuts: tuple[str, ...] = ()

    def cut(self, raw: object, key: str) -> tuple[Capture, str]:
        seconds = float(str(raw).removesuffix("s"))
        return Capture(seconds, (*self.cuts, str(raw))), f"the first {raw}"


def plan(budget: float, cost: float = 6.0, settings: int = 13, validate: int = 3,
         workload: Any = None, pinned: str = "auto") -> tuple[fidelity.Fidelity | None, list]:
    measured: list[Any] = []

    def measure(part: Any) -> float:
        measured.append(part)
        return cost * part.span / fidelity.SMALLEST

    return fidelity.plan(cast(Any, workload or Capture()), pinned, budget, settings, validate,
                         measure), measured


def test_a_capture_is_cut_to_what_a_twelve_minute_budget_holds_and_says_so():
    # A 5-s part costing 6 s a measurement, as a real 60-s capture of sysbench did here.
    chosen, measured = plan(12 * 60)
    assert [m.span for m in measured] == [fidelity.SMALLEST]  # the baseline, once
    assert chosen is not None and chosen.search == "5s" and chosen.check == "5s"
    assert fidelity.LEAST_SHARE <= chosen.share <= fidelity.MOST_SHARE
    assert "trials replay its first 5 s" in chosen.said
    assert "would take up to 72 s" in chosen.said  # 12 times the 5-s part, at most
    assert "fewer than the 33 a search of 13 settings wants" in chosen.said


def test_a_larger_budget_buys_a_larger_part_and_the_checks_one_no_smaller():
    chosen, _ = plan(3600)
    assert chosen is not None and chosen.search is not None and chosen.check is not None
    search, check = (float(part.removesuffix("s")) for part in (chosen.search, chosen.check))
    assert fidelity.SMALLEST < search <= check < 60
    trials = 3600 * chosen.share / (fidelity.PER_TRIAL * chosen.search_cost)
    assert trials >= fidelity.wanted_trials(13)
    assert "fewer than" not in chosen.said
    assert f"the checks its first {check:g} s" in chosen.said
    # Three hours hold the whole capture's trials and checks: it is not cut at all.
    whole, _ = plan(3 * 3600)
    assert whole is not None and whole.search is None and whole.check is None
    assert "trials replay all of it" in whole.said


def test_a_budget_that_cannot_hold_one_checked_recommendation_is_refused_with_what_would():
    with pytest.raises(UserError) as refused:
        plan(3 * 60)
    said = str(refused.value)
    assert "cannot hold one checked recommendation" in said and "6 s here" in said
    # What it asks for holds it.
    minutes = int(said.rsplit("--budget ", 1)[1].split("m", 1)[0])
    assert plan(minutes * 60)[0] is not None


def test_a_workload_that_cannot_be_cut_or_asked_whole_is_measured_whole():
    assert plan(3600, workload=Capture(span=None)) == (None, [])
    assert plan(3600, pinned="whole") == (None, [])
    chosen, measured = plan(3600, pinned="10s")
    assert chosen is not None and chosen.search == chosen.check == "10s"
    assert [m.span for m in measured] == [10.0]


# -- the wiring, on the fake kind: a capture whose first seconds cost in proportion ----------

@dataclass(frozen=True)
class FakeCapture(fakes.FakeWorkload):
    """The fake kind with a span: `part` seconds of it cost part × 10 ms a measurement."""

    kind: ClassVar[str] = "fake-capture"
    part: float = 60.0

    @property
    def span(self) -> float | None:
        return self.part

    def cut(self, raw: object, key: str) -> tuple[FakeCapture, str]:
        seconds = float(str(raw).removesuffix("s"))
        if seconds >= self.part:
            raise UserError(f"{key} = {raw!r} holds the whole capture")
        return dataclasses.replace(self, part=seconds), f"the first {raw}"

    def measure(self, server: Server, requested: Mapping[str, str], session_knobs: list[str],
                recorder: Recorder) -> Measured:
        time.sleep(self.part * 0.01)
        return super().measure(server, requested, session_knobs, recorder)

    def describe(self) -> dict[str, object]:
        return {"part": self.part}


@pytest.fixture
def capture_kind(fake_kind, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(workloads.KINDS, FakeCapture.kind, FakeCapture)


def _parsed(budget: str, trials: int):
    source = (f'name = "parts"\n[workload]\nkind = "fake-capture"\n[statistics]\nseed = 3\n'
              f'[tune]\nbudget = "{budget}"\ntrials = {trials}\nvalidate = 1\n'
              '[tune.knobs]\nsort_buffer_size = ["1M", "64M"]\n'
              'read_buffer_size = ["128K", "8M"]\n')
    return parse_spec(tomllib.loads(source), source=source)


@pytest.mark.long
def test_trials_measure_the_search_part_checks_theirs_and_the_study_keeps_them(
        capture_kind, store, tmp_path):
    listener = Quiet()
    result = _tune(store, tmp_path, _parsed("12s", 100), listener)
    said = [line for line in listener.lines if line.startswith("a measurement of the whole")]
    assert len(said) == 1, listener.lines
    runs = {r["id"]: store.run(r["id"]) for r in store.list_runs(limit=None)}
    part = {run_id: run["info"]["workload"]["part"] for run_id, run in runs.items()}
    costs = [run_id for run_id, run in runs.items() if "what a measurement costs" in run["name"]]
    assert len(costs) == 1 and part[costs[0]] == fidelity.SMALLEST
    trial_runs = {r for t in result.trials for r in t.runs}
    assert trial_runs and len({part[r] for r in trial_runs}) == 1
    searched = part[next(iter(trial_runs))]
    checks = [r for r in runs if r not in trial_runs and r not in costs]
    assert checks and len({part[r] for r in checks}) == 1
    checked = part[checks[0]]
    assert f"trials replay its first {searched:g} s" in said[0]
    assert f"the checks its first {checked:g} s" in said[0] and checked > searched
    assert result.spent <= 12 * 1.1
    # Asked again (more trials in the same study), it measures the same parts, sized once.
    again = Quiet()
    more = _tune(store, tmp_path, _parsed("20s", 100), again)
    assert not any("what a measurement costs" in r["name"]
                   for r in store.list_runs(limit=None) if r["id"] not in runs)
    later = {r for t in more.trials for r in t.runs} - trial_runs
    assert later and all(store.run(r)["info"]["workload"]["part"] == searched for r in later)
    assert said[0] in again.lines


def test_many_settings_are_put_back_in_groups_the_least_important_first(
        fake_kind, store, tmp_path, monkeypatch):
    # Only sort_buffer_size matters (at 16M or more); read_buffer_size does nothing.
    monkeypatch.setattr(proof, "ALONE_AT_MOST", 1)
    # With a budget whose checks are not known to hold each put back alone: what a check's
    # measurement costs is not learned from the validations here (learned, it holds them).
    monkeypatch.setattr(proof, "learn_cost", lambda search, run_ids: None)
    listener = Quiet()
    result = _tune(store, tmp_path, _spec(tune='budget = "60s"', trials=14, validate=1),
                   listener)
    chosen = result.recommended
    assert chosen is not None and int(chosen.trial.config["sort_buffer_size"]) >= 16 * 2**20
    # The sampler draws read_buffer_size from a range whose low end is the baseline's.
    assert set(chosen.trial.changes) == {"sort_buffer_size", "read_buffer_size"}
    reduction = result.reduction
    assert reduction is not None and reduction.grouped and not reduction.effects
    assert [name for name, _ in reduction.trim_steps] == ["read_buffer_size"]
    assert reduction.kept == {"sort_buffer_size": chosen.trial.changes["sort_buffer_size"]}
    assert any("put back in groups, the least important first" in line
               for line in listener.lines)


def test_a_study_measures_the_part_it_began_with_and_says_so_when_asked_another(
        capture_kind, store, tmp_path):
    _tune(store, tmp_path, _parsed("12s", 4), Quiet())
    again = Quiet()
    source = _parsed("20s", 8).source.replace('budget = "20s"',
                                               'budget = "20s"\nfidelity = "30s"')
    _tune(store, tmp_path, parse_spec(tomllib.loads(source), source=source), again)
    said = [line for line in again.lines if line.startswith("a measurement of the whole")]
    assert len(said) == 1 and "fidelity = '30s' applies to a new study" in said[0]


def test_a_pinned_part_that_cannot_be_is_refused_in_one_line(capture_kind, store, tmp_path):
    pinned, words = "90s", "holds the whole capture"
    source = _parsed("12s", 4).source.replace('budget = "12s"',
                                               f'budget = "12s"\nfidelity = "{pinned}"')
    with pytest.raises(UserError) as refused:
        _tune(store, tmp_path, parse_spec(tomllib.loads(source), source=source), Quiet())
    assert words in str(refused.value) and "\n" not in str(refused.value)
    assert not store.list_runs(limit=None)  # refused before anything ran
