"""Fuzzing what knoblab prints and writes: any text as a run's or study's name, a description, a
step's label, the SQL and the server's error messages goes through `run`, `runs`, `report`,
`compare` and `tune`, each ending 0 or 2 (never a traceback, never "unexpected error"); nothing
of it reaches the terminal as a control character or console markup, and report.html shows it
literally.

Runs are measured with the fake workload and target (tests/fakes.py) or taken from the golden
store (tests/data/golden) with their texts replaced: no server, so that each example takes a
second or two.
"""

from __future__ import annotations

import json
import shutil
import sqlite3
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from knoblab import cli
from knoblab.literal import literal
from tests.test_hardening_output import STEPS, SWEEP, _copy_run, _edit_info, _page, _words

GOLDEN = Path(__file__).parent / "data" / "golden"

NASTY = ["[", "]", "[/]", "[bold]", "[/bold]", "[link=https://example.org]", "[/link]",
         "[red", ":smile:", "\x1b[31m", "\x1b[2J", "\x1b]8;;http://x\x07", "\x1b]0;t\x07",
         "\r", "\n", "\r\n", "\t", "\x00", "\x08", "\x7f", "\x85", "\x9b", "\u2028", "\u202e",
         "💥", "👍🏽", "性能", "テスト", "<script>alert(1)</script>", "<img src=x onerror=y>",
         "&amp;", "&#60;", "{{ doc }}", "{% if x %}", "$\\frac{", "$x$", "```", "~~~", "# h",
         "1. ", "- ", "> ", "|", "*", "_", "`", "\\", "'", '"', "%s", "{}", " ", "~", "—"]
TEXT = st.one_of(
    st.sampled_from(NASTY),
    st.text(st.characters(exclude_categories=("Cs",)), min_size=1, max_size=24),
    st.lists(st.one_of(st.sampled_from(NASTY), st.text(max_size=4)), min_size=1,
             max_size=5).map("".join),
)


def _fuzz(examples: int) -> settings:
    """Few examples, each a whole command or several: the suite stays quick (and a failure is
    shown as found: shrinking examples this slow would take minutes)."""
    return settings(max_examples=examples, deadline=None,
                    phases=[Phase.explicit, Phase.reuse, Phase.generate],
                    suppress_health_check=[HealthCheck.function_scoped_fixture,
                                           HealthCheck.too_slow])

CONTROLS = [chr(c) for c in (*range(0x00, 0x09), *range(0x0b, 0x20), 0x7f, *range(0x80, 0xa0))]


def _toml(text: str) -> str:
    """`text` as a TOML string (every control character escaped)."""
    return '"' + "".join(f"\\u{ord(c):04x}" if c in '"\\' or ord(c) < 0x20 or ord(c) == 0x7f
                         else c for c in text) + '"'


def _shown_safely(capsys: pytest.CaptureFixture[str], *codes: int) -> str:
    captured = capsys.readouterr()
    printed = captured.out + captured.err
    assert all(code in (0, 2) for code in codes), (codes, captured.err)
    assert "Traceback" not in printed and "unexpected error" not in printed, captured.err
    leaked = {c for c in CONTROLS if c in printed}
    assert not leaked, leaked
    return printed


def _shows_literally(folder: Path, *texts: str) -> None:
    """report.html holds each text as a reader sees it, and no element it did not make."""
    page = _page((folder / "report.html").read_text())
    words = _words(" ".join(page.text))
    for text in texts:
        assert _words(literal(text)) in words, text
    assert "script" not in page.tags
    assert page.tags.count("img") == len(list(folder.glob("*.png")))  # the charts alone


@_fuzz(10)
@given(name=TEXT, description=TEXT)
def test_run_runs_and_report_of_a_run_named_anything(name: str, description: str,
                                                      fake_servers: None, tmp_path: Path,
                                                      capsys) -> None:
    work = Path(tempfile.mkdtemp(dir=tmp_path))
    spec = work / "spec.toml"
    spec.write_text(f"name = {_toml(name)}\ndescription = {_toml(description)}\n"
                    '[workload]\nkind = "fake"\nrepetitions = 2\n'
                    '[sweep]\nsort_buffer_size = ["1M", "32M"]\n')
    store = ["--store", f"sqlite:///{work / 'store.sqlite'}"]
    code = cli.main([*store, "run", str(spec), "--out", str(work / "run")])
    _shown_safely(capsys, code)
    if code == 2:  # a name the spec refuses: said in one line, nothing else to check
        return
    _shows_literally(work / "run", name, description)
    codes = [cli.main([*store, "runs"]), cli.main([*store, "runs", "--name", name]),
             cli.main([*store, "report", "latest", "--out", str(work / "report")])]
    printed = _shown_safely(capsys, *codes)
    assert codes[0] == 0 and _words(literal(name)) in _words(printed)
    _shows_literally(work / "report", name, description)


@_fuzz(12)
@given(name=TEXT, description=TEXT, sql=TEXT, label=TEXT, error=TEXT)
@pytest.mark.long
def test_report_and_compare_of_stored_runs_holding_anything(
        name: str, description: str, sql: str, label: str, error: str, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    monkeypatch.setenv("KNOBLAB_HOME", str(tmp_path / "home"))
    work = Path(tempfile.mkdtemp(dir=tmp_path))
    db = work / "store.sqlite"
    shutil.copy(GOLDEN / "store.sqlite", db)
    _copy_run(db, SWEEP, "c0ffee00")
    with sqlite3.connect(db) as c:
        c.execute("UPDATE runs SET name = ?, spec_source = ? || spec_source WHERE id IN (?, ?)",
                  (name, f"description = {_toml(description)}\n", SWEEP, "c0ffee00"))
        c.execute("UPDATE runs SET name = ? WHERE id = ?", (name, STEPS))
        # a measurement the server refused, in its own words
        c.execute("UPDATE trials SET status = 'failed', value = NULL, error = ? WHERE id = "
                  "(SELECT min(id) FROM trials WHERE run_id = ?)", (error, SWEEP))
    for run_id in (SWEEP, "c0ffee00"):
        _edit_info(db, run_id, lambda info: info["workload"].update(sql=sql))

    def relabel(info: dict) -> None:
        info["steps"][1]["label"] = label

    _edit_info(db, STEPS, relabel)
    store = ["--store", f"sqlite:///{db}"]
    codes = [cli.main([*store, "report", SWEEP, "--out", str(work / "sweep")]),
             cli.main([*store, "report", STEPS, "--out", str(work / "steps")]),
             cli.main([*store, "runs"]),
             cli.main([*store, "compare", SWEEP, "c0ffee00", "--json", str(work / "c.json")])]
    printed = _shown_safely(capsys, *codes)
    assert codes[2:] == [0, 0]
    assert _words(literal(name)) in _words(printed)
    _shows_literally(work / "sweep", name, description, sql)
    _shows_literally(work / "steps", name, label)
    assert json.loads((work / "c.json").read_text())[0]["first"] == SWEEP


@_fuzz(4)
@given(name=TEXT)
def test_tune_of_a_study_named_anything(name: str, fake_servers: None, tmp_path: Path,
                                        capsys) -> None:
    work = Path(tempfile.mkdtemp(dir=tmp_path))
    spec = work / "spec.toml"
    spec.write_text(f"name = {_toml(name)}\n[workload]\nkind = \"fake\"\n"
                    "[statistics]\nseed = 3\n[tune]\ntrials = 3\nvalidate = 1\n"
                    '[tune.knobs]\nsort_buffer_size = ["1M", "64M"]\n')
    code = cli.main(["--store", f"sqlite:///{work / 'store.sqlite'}", "tune", str(spec),
                     "--out", str(work / "study")])
    printed = _shown_safely(capsys, code)
    if code == 2:
        return
    assert _words(literal(name)) in _words(printed)
    _shows_literally(work / "study", name)
    cnf = (work / "study" / "recommended.cnf").read_text().splitlines()
    assert all(line.startswith("#") or line == "[mysqld]" or " = " in line for line in cnf)
