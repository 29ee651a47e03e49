"""Where the manual defines each word a report's tables judge with: a verdict, a finding, a
regime. The HTML report links each such cell to its paragraph of the manual's "How sure, and
why" page (docs/how-sure.md, whose headings carry these anchors).

The manual is the one built from docs/ (`mkdocs build`, which scripts/setup runs into
site/), or the one $KNOBLAB_MANUAL names (a URL, e.g. where a team serves it); with neither,
a report has no such links rather than broken ones."""

from __future__ import annotations

import os
import re
from enum import StrEnum
from pathlib import Path

from knoblab.report.format import STEP_VERDICT
from knoblab.vocabulary import (
    ClassVerdict,
    ComparisonVerdict,
    Design,
    Finding,
    PointVerdict,
    StepVerdict,
    StopReason,
    ValidationVerdict,
)
from knoblab.words import FINDING_WORDS

MANUAL_ENV = "KNOBLAB_MANUAL"
PAGE = "how-sure/index.html"
REGIMES = ("I/O-bound", "CPU-bound", "waiting", "mixed")  # knoblab.workloads.timed.regime's
# Each kind of word, by the prefix of its anchors: its words.
TERMS: dict[str, tuple[str, ...]] = {
    "point": tuple(PointVerdict), "step": tuple(StepVerdict),
    "validation": tuple(ValidationVerdict), "class": tuple(ClassVerdict),
    "comparison": tuple(ComparisonVerdict), "finding": tuple(Finding), "regime": REGIMES,
    "stop": tuple(StopReason), "design": tuple(Design),
}
_JUDGING = ("verdict", "finding")  # the headers of the columns that hold a table's words


def anchor(kind: str, word: str | StrEnum) -> str:
    """The id of a word's paragraph: "point-fastest-measured", "regime-i-o-bound"."""
    return f"{kind}-{re.sub(r'[^a-z0-9]+', '-', str(word).lower()).strip('-')}"


def manual_base() -> str:
    """The manual's address, ending in "/", or "" when there is none to link to."""
    given = os.environ.get(MANUAL_ENV, "").strip()
    if given:
        return given if given.endswith("/") else given + "/"
    built = Path(__file__).resolve().parents[2] / "site"
    return built.as_uri() + "/" if (built / PAGE).is_file() else ""


def href(text: str, header: str, vocabulary: str, base: str) -> str:
    """The link of a table's cell to the word it begins with ("best (by 2%)"), when its column
    holds words of `vocabulary` (a "verdict" or "finding" column) or regimes; else ""."""
    kind = "regime" if header == "regime" else vocabulary if header in _JUDGING else ""
    if not base or not kind:
        return ""
    said = text.strip().lower()
    shown = _shown(kind)
    # the longest first: "no measurable effect" before a shorter word it may begin with
    found = next((shown[w] for w in sorted(shown, key=len, reverse=True)
                  if said.startswith(w)), None)
    return f"{base}{PAGE}#{found}" if found is not None else ""


def _shown(kind: str) -> dict[str, str]:
    """The words a column of `kind` shows, each with its paragraph's anchor: a finding's
    words (a step's and a validation's verdicts are said in them), then the kind's own."""
    shown = {} if kind == "regime" else \
        {words.lower(): anchor("finding", f) for f, words in FINDING_WORDS.items()}
    if kind == "step":
        shown.update({text.lower(): anchor("step", verdict)
                      for verdict, (text, _) in STEP_VERDICT.items() if text != "—"})
    shown.update({str(w).lower(): anchor(kind, w) for w in TERMS[kind]})
    return shown
