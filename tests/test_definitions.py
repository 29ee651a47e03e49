"""The HTML report links each verdict, finding and regime in its tables to the paragraph of
the manual that defines it; every such word has its paragraph (an anchor of
docs/how-sure.md); with no manual to link to, a report has no links rather than dead ones."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from knoblab import cli
from knoblab.report import definitions
from knoblab.report.definitions import PAGE, TERMS, anchor, href
from knoblab.words import FINDING_WORDS

ROOT = Path(__file__).resolve().parents[1]
GOLDEN = ROOT / "tests" / "data" / "golden"
BASE = "https://manual.example/"


def _anchors() -> set[str]:
    text = (ROOT / "docs" / "how-sure.md").read_text(encoding="utf-8")
    return set(re.findall(r"\{#([a-z0-9-]+)\}", text))


@pytest.mark.parametrize("kind", sorted(TERMS))
def test_every_word_a_report_judges_with_has_its_paragraph(kind: str):
    missing = [anchor(kind, w) for w in TERMS[kind]]
    missing = [a for a in missing if a not in _anchors()]
    assert not missing, f"docs/how-sure.md has no paragraph {{#...}} for {missing}"


def test_a_verdict_cell_links_to_its_word_and_other_cells_do_not():
    assert href("best", "verdict", "point", BASE) == f"{BASE}{PAGE}#point-best"
    assert href("fastest measured (not recommended)", "verdict", "point", BASE) == \
        f"{BASE}{PAGE}#point-fastest-measured"
    assert href("no measurable effect", "verdict", "step", BASE).endswith(
        "#step-no-measurable-effect")
    assert href("I/O-bound", "regime", "point", BASE).endswith("#regime-i-o-bound")
    assert href("best", "median", "point", BASE) == ""  # not a column of words
    assert href("128K", "verdict", "point", BASE) == ""  # not a word of the vocabulary
    assert href("best", "verdict", "point", "") == ""  # no manual: no link


def test_a_finding_is_linked_by_the_words_it_is_shown_in():
    for finding, words in FINDING_WORDS.items():
        assert href(f"{words} (within ±3%)", "verdict", "finding", BASE).endswith(
            f"#finding-{finding}")


def test_the_html_report_links_its_verdicts_to_the_manual(tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv(definitions.MANUAL_ENV, BASE)
    store = tmp_path / "store.sqlite"
    shutil.copy(GOLDEN / "store.sqlite", store)
    out = tmp_path / "out"
    assert cli.main(["--store", f"sqlite:///{store}", "report", "latest", "--out",
                     str(out)]) == 0
    page = (out / "report.html").read_text()
    linked = set(re.findall(rf'href="{re.escape(BASE + PAGE)}#([a-z0-9-]+)"', page))
    assert linked and linked <= {anchor(k, w) for k in TERMS for w in TERMS[k]}, linked
    assert linked <= _anchors()
