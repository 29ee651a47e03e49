"""Verdict and status words are named by their enum's members (knoblab.vocabulary), never
spelt out where code decides on them: a misspelt member fails at once, a misspelt literal
silently never matches."""

from __future__ import annotations

import ast
import json
from enum import StrEnum
from pathlib import Path

from knoblab import vocabulary
from knoblab.records import TrialOutcome, Validation, decode
from knoblab.vocabulary import (
    OutcomeState,
    PointVerdict,
    RunStatus,
    TrialState,
    ValidationVerdict,
)

PACKAGE = Path(__file__).resolve().parent.parent / "knoblab"
# Verdicts and states; not what a run is (Experiment), whose words also name sections and
# commands ([steps], knoblab capture).
VOCABULARIES = [v for v in vars(vocabulary).values() if isinstance(v, type)
                and issubclass(v, StrEnum) and v not in (StrEnum, vocabulary.Experiment)]
WORDS = {member.value for enum in VOCABULARIES for member in enum}
DECIDING = (ast.Eq, ast.NotEq, ast.In, ast.NotIn)


def _words_in(node: ast.expr) -> list[ast.Constant]:
    """The vocabulary words `node` spells out: itself, or the items of a tuple, set or list."""
    items = node.elts if isinstance(node, ast.Tuple | ast.Set | ast.List) else [node]
    return [i for i in items if isinstance(i, ast.Constant) and isinstance(i.value, str)
            and i.value in WORDS]


def spelt_out(source: str) -> list[tuple[int, str]]:
    """(line, word) for each vocabulary word written as a literal where code decides on it:
    an operand of ==, !=, in or not in, or a `case` pattern. A word inside a sentence, a key
    read from JSON, an argument are not decisions: not flagged."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Compare) and any(isinstance(op, DECIDING) for op in node.ops):
            for operand in [node.left, *node.comparators]:
                found += [(c.lineno, c.value) for c in _words_in(operand)]
        elif isinstance(node, ast.MatchValue):
            found += [(c.lineno, c.value) for c in _words_in(node.value)]
    return sorted(found)


def test_no_module_spells_out_a_vocabulary_word_where_it_decides() -> None:
    found = [f"{path.relative_to(PACKAGE.parent)}:{line}: {word!r}"
             for path in sorted(PACKAGE.rglob("*.py")) if path.name != "vocabulary.py"
             for line, word in spelt_out(path.read_text())]
    assert found == []


def test_the_check_catches_a_word_spelt_out() -> None:
    planted = '''
def f(p, run, x):
    if p.verdict == "best" or "worse" != p.verdict:
        pass
    if run["status"] in ("done", "failed"):
        pass
    if "inconclusive" in (p.verdict, x) or x not in {"not run"}:
        pass
    match p.state:
        case "scored":
            pass
    return f"{p.verdict} is best", {"best": 1}["best"], x == "dump"
'''
    assert spelt_out(planted) == [(3, "best"), (3, "worse"), (5, "done"), (5, "failed"),
                                  (7, "inconclusive"), (7, "not run"), (10, "scored")]


def test_a_member_is_its_word_in_json_and_text() -> None:
    assert json.dumps({PointVerdict.NOT_RUN: [RunStatus.DONE]}) == '{"not run": ["done"]}'
    assert f"{TrialState.DISCARDED}" == "discarded" and PointVerdict.BEST == "best"
    assert len(WORDS) > 20  # every vocabulary is seen


def test_the_codec_reads_a_stored_word_back_as_its_member() -> None:
    written = Validation(TrialOutcome(3, {"a": "1"}, {"a": "1"}, "scored", -0.1, [-0.1],
                                      ("run-3",)), "run-v", "violates", 0.1, (0.05, 0.15), 6)
    read = Validation.from_json(json.loads(json.dumps(written.to_json())))
    assert read == written
    assert read.verdict is ValidationVerdict.VIOLATES and read.trial.state is OutcomeState.SCORED
    # what runs of the first versions said is still read
    assert decode(PointVerdict | None, "indistinguishable") is PointVerdict.INDISTINGUISHABLE
