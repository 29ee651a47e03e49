"""The results JSON reads back as it was written: Results.from_json(d).to_json() == d for every
stored golden run (tests/data/golden/*.json), and, with the report's sentence put back where it
was, the same text byte for byte: keys, their order and values."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from knoblab import workloads
from knoblab.records import Results

GOLDEN = sorted((Path(__file__).parent / "data" / "golden").glob("*.json"))


@pytest.mark.parametrize("path", GOLDEN, ids=[path.stem for path in GOLDEN])
def test_results_json_reads_back_as_written(path: Path) -> None:
    written = path.read_text()
    document = json.loads(written)
    # The results hold no sentences: conclusion.text is the report's, added when writing.
    text = document["conclusion"].pop("text")
    objective = workloads.kind(document["workload"].get("kind", "query")).objective
    results = Results.from_json(document, objective)
    assert results.to_json() == document
    assert json.dumps(results.to_json(conclusion_text=text), indent=2) == written


def test_the_golden_runs_are_found() -> None:
    assert GOLDEN, "no results JSON in tests/data/golden"
