"""A new workload kind is one module: this one, registered from here alone, runs end to end on
real sandboxes — spec, plan, data, measurement, store, verdicts — into a report that speaks of
it in its own words, with figures and notes of its own. Nothing else in knoblab knows it, and
it borrows nothing from the kinds knoblab has."""

from __future__ import annotations

import json
import time
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import pytest

from knoblab import cli, workloads
from knoblab.connection import Server
from knoblab.datasets import Dataset
from knoblab.datasets.empty import EmptyServer
from knoblab.errors import UserError
from knoblab.keys import Key, Keys
from knoblab.records import Evidence, Metric, Objective
from knoblab.stats import Summary
from knoblab.vocabulary import TrialState
from knoblab.workloads.base import (
    Headline,
    Measured,
    Note,
    Recorder,
    Rounds,
    StoredSeconds,
    StoredTrial,
    Workload,
    WorkloadError,
)

pytestmark = pytest.mark.server


@dataclass(frozen=True)
class Toy(Workload):
    """Counts how many times a second one statement runs on a connection: the smallest
    workload there is. Higher is better; its figures are its own: how many statements a point
    timed, and the fastest run's microseconds a statement."""

    kind: ClassVar[str] = "toy"
    objective: ClassVar[Objective] = Objective(
        metric="statements_per_second", unit="stmt/s", direction="maximize", centre="median",
        test="welch-log", time_series=False)
    metrics: ClassVar[Mapping[str, Metric]] = {
        "statements_per_second": Metric(None, "stmt/s", "maximize")}
    parameters: ClassVar[tuple[str, ...]] = ()
    keys: ClassVar[Keys] = Keys(
        Key("kind", "A statement run many times by one connection.", choices=("toy",)),
        Key("statement", "The statement run.", "text", '"SELECT 1"'),
        Key("times", "How many times a measurement runs it.", "a whole number", "200"),
    ) | Rounds.KEYS

    statement: str
    times: int
    planned: Rounds

    @property
    def rounds(self) -> Rounds:
        return self.planned

    @classmethod
    def from_spec(cls, section: dict[str, Any], dataset: dict[str, Any],
                  sweep: dict[str, list[Any]], base_dir: Path | None) -> Toy:
        if dataset:
            raise UserError("[dataset]: a toy runs on an empty server; remove [dataset]")
        return cls(str(section.get("statement", "SELECT 1")), int(section.get("times", 200)),
                   Rounds.from_spec(section))

    def parameter_axis(self, name: str, values: list[Any]) -> list[str]:
        raise UserError(f"[sweep] {name}: a toy has no parameters")

    def dataset(self, requested: Mapping[str, str]) -> Dataset:
        return EmptyServer(self.kind)

    @property
    def writes_data(self) -> bool:
        return False

    def connections_for(self, requested: Mapping[str, str]) -> int:
        return 1

    def measure(self, server: Server, requested: Mapping[str, str], session_knobs: list[str],
                recorder: Recorder) -> Measured:
        conn = server.connect()
        try:
            with conn.cursor() as cur:
                began = time.perf_counter()
                for _ in range(self.times):
                    cur.execute(self.statement)
                    cur.fetchall()
                took = time.perf_counter() - began
                return Measured(self.times / took, {"statements": self.times})
        except Exception as exc:  # a toy's every failure is its measurement's
            raise WorkloadError(f"toy: {exc}") from exc
        finally:
            conn.close()

    def describe(self) -> dict[str, object]:
        return {"statement": self.statement, "times": self.times}

    @classmethod
    def samples(cls, trials: list[StoredTrial], stored: StoredSeconds,
                statistics: Mapping[str, Any]) -> list[float]:
        return [t.value for t in trials if t.status == TrialState.DONE and t.value is not None]

    @classmethod
    def evidence(cls, trials: list[StoredTrial], summary: Summary | None,
                 stored: StoredSeconds, statistics: Mapping[str, Any]) -> dict[str, Any]:
        rates = cls.samples(trials, stored, statistics)
        return {"median": summary.median if summary else None,
                "ci95": [summary.ci_low, summary.ci_high] if summary else None,
                "mean": summary.mean if summary else None,
                "stdev": summary.stdev if summary else None,
                "samples": rates,
                # the toy's own figures
                "statements": sum(int(t.details.get("statements", 0)) for t in trials
                                  if t.status == TrialState.DONE),
                "fastest_us": round(1e6 / max(rates), 1) if rates else None}

    @classmethod
    def notes(cls, points: Sequence[tuple[str, Evidence]]) -> list[Note]:
        said = "; ".join(f"{label}: {figures.own['statements']} statements, the fastest run "
                         f"{figures.own['fastest_us']} µs a statement"
                         for label, figures in points)
        return [(f"Toy statements timed: {said}.", False)] if points else []

    @classmethod
    def headline(cls, described: Mapping[str, Any], swept: Collection[str]) -> Headline:
        return Headline(f"toy: {described['statement']} ×{described['times']}", "the toy")


SPEC = """\
name = "toy-run"

[workload]
kind = "toy"
statement = "SELECT @@version"
times = 300
repetitions = 3

[sweep]
query_prealloc_size = ["8K", "1M"]

[statistics]
seed = 3
"""


def test_a_kind_registered_from_its_own_module_runs_into_a_report(
        monkeypatch: pytest.MonkeyPatch, knoblab_home: Path, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setitem(workloads.KINDS, Toy.kind, Toy)
    spec = tmp_path / "toy.toml"
    spec.write_text(SPEC)
    store = f"sqlite:///{tmp_path / 's.sqlite'}"
    assert cli.main(["--store", store, "run", str(spec), "--json",
                     str(tmp_path / "result.json")]) == 0
    said = capsys.readouterr().out
    assert "toy: SELECT @@version ×300" in said  # the table's title, in the kind's words

    result = json.loads((tmp_path / "result.json").read_text())
    assert result["workload"]["kind"] == "toy"
    assert [p["n"] for p in result["points"]] == [3, 3]
    assert all(p["median"] > 0 for p in result["points"])
    # its own figures, beside the common ones
    assert [p["statements"] for p in result["points"]] == [900, 900]
    assert all(0 < p["fastest_us"] <= round(1e6 / p["median"], 1) for p in result["points"])
    assert "Toy statements timed: 8K: 900 statements, the fastest run" in " ".join(said.split())
    out = tmp_path / "report"
    assert cli.main(["--store", store, "report", result["run_id"], "--out", str(out)]) == 0
    page = (out / "report.md").read_text()
    assert "the toy" in page  # the question names it as the kind says
    assert "toy: SELECT @@version ×300" in page
    assert "Toy statements timed: 8K: 900 statements" in " ".join(page.split())


def test_a_toy_spec_is_checked_by_the_toy(monkeypatch: pytest.MonkeyPatch,
                                           tmp_path: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setitem(workloads.KINDS, Toy.kind, Toy)
    spec = tmp_path / "toy.toml"
    spec.write_text(SPEC.replace("times = 300", "times = 300\nspeed = 2"))
    assert cli.main(["--store", f"sqlite:///{tmp_path / 's.sqlite'}", "run", str(spec)]) == 2
    err = capsys.readouterr().err
    assert "speed" in err and len(err.strip().splitlines()) == 1
