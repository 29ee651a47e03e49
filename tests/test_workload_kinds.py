"""The Workload contract, over every kind knoblab has (`knoblab.workloads.KINDS`), the fake of
the test suite and the toy kind of test_toy_kind: what the runner, the store, the results and
the reports read of a kind, without a server. A kind's figures go through the results JSON and
come back as they were, its own among them; the notes under a table are its own sentences."""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field, fields
from typing import Any

import pytest

from knoblab import stats, workloads
from knoblab.judging import Statistics
from knoblab.records import Point, Step, evidence_from_json
from knoblab.store import SECOND_FIELDS
from knoblab.vocabulary import TrialState
from knoblab.workloads.base import Workload
from tests.fakes import FakeWorkload
from tests.test_toy_kind import Toy

ALL: dict[str, type[Workload]] = {**workloads.KINDS, FakeWorkload.kind: FakeWorkload,
                                  Toy.kind: Toy}
# The keys of a point's JSON that are the point's own: a figure of a kind named so would be lost.
POINT_KEYS = {f.metadata.get("json", f.name) for record in (Point, Step) for f in fields(record)}


@dataclass(frozen=True)
class _Trial:
    id: int
    repetition: int
    status: TrialState
    value: float | None
    details: dict[str, Any] = field(default_factory=dict)


class _Stored:
    """Per-second rows of a time series: a steady minute of each trial's."""

    def __init__(self, trials: list[_Trial]) -> None:
        self.rows = {t.id: [{"t": float(s), **dict.fromkeys(SECOND_FIELDS, 0.0),
                             "threads": 4.0, "tps": (t.value or 0) * (1 + 0.01 * (s % 3)),
                             "latency_ms": 2.0} for s in range(1, 61)] for t in trials}

    def seconds(self) -> dict[int, list[dict[str, float]]]:
        return self.rows

    def os_seconds(self) -> dict[int, list[dict[str, float]]]:
        return {}


def _trials() -> list[_Trial]:
    values = [100.0, 104.0, 98.0, 101.0, 103.0]
    return [_Trial(i, i, TrialState.DONE, v) for i, v in enumerate(values, start=1)] + \
        [_Trial(9, 6, TrialState.FAILED, None)]


@pytest.mark.parametrize("name", sorted(ALL))
def test_a_kind_says_what_it_measures_and_reads(name: str) -> None:
    kind = ALL[name]
    assert kind.kind == name
    assert kind.objective.metric in kind.metrics
    measured = kind.metrics[kind.objective.metric]
    assert measured.detail is None and measured.direction == kind.objective.direction
    assert "kind" in kind.keys and kind.keys >= {"repetitions", "design"}
    assert all(isinstance(p, str) and p for p in kind.parameters)


def _figures(kind: type[Workload]) -> tuple[list[float], dict[str, Any]]:
    """The kind's samples and figures of five measurements and a failed one."""
    statistics, trials = asdict(Statistics()), _trials()
    stored = _Stored(trials)
    samples = kind.samples(trials, stored, statistics)  # type: ignore[arg-type]
    return samples, kind.evidence(trials, stats.summarize(samples) if samples else None,
                                  stored, statistics)  # type: ignore[arg-type]


@pytest.mark.parametrize("name", sorted(ALL))
def test_a_kinds_figures_come_back_from_the_results_json(name: str) -> None:
    kind = ALL[name]
    samples, found = _figures(kind)
    assert samples and all(math.isfinite(v) and v > 0 for v in samples)
    assert not found.keys() & POINT_KEYS, "a figure named as a point's key is lost"
    evidence = evidence_from_json(found, kind.objective.time_series)
    assert evidence.median is not None and evidence.samples
    written = evidence.to_json()
    assert written.keys() == found.keys() | written.keys() - {"own"}, \
        "every figure the kind gives is written under its own name"
    again = evidence_from_json(json.loads(json.dumps(evidence.to_json())),
                               kind.objective.time_series)
    assert again == evidence

    nothing = evidence_from_json(kind.evidence([], None, _Stored([]), asdict(Statistics())),
                                 kind.objective.time_series)
    assert nothing.median is None and nothing.samples == []


@pytest.mark.parametrize("name", sorted(ALL))
def test_a_kinds_notes_are_sentences_of_its_points(name: str) -> None:
    kind = ALL[name]
    evidence = evidence_from_json(_figures(kind)[1], kind.objective.time_series)
    assert kind.notes([]) == []
    for line, warning in kind.notes([("64K", evidence), ("1M", evidence)]):
        assert line[0].isupper() and line.endswith(".") and "\n" not in line
        assert isinstance(warning, bool)
