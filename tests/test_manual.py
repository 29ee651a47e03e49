"""The manual: it builds in MkDocs' strict mode (a broken link or anchor, a page left out of
the navigation, fails it), and its generated reference holds every spec key, every command and
flag, and every key of the JSON documents, each with what it means."""

from __future__ import annotations

import argparse
import dataclasses
import os
import subprocess
import sys
from pathlib import Path

import pytest

from knoblab import manual, server, workloads
from knoblab.capturing import CaptureJSON
from knoblab.cli import build_parser
from knoblab.codec import json_key
from knoblab.keys import Keys
from knoblab.records import ResultsJSON
from knoblab.report.shapes import ComparisonJSON, TuneJSON
from knoblab.search.options import KEYS as TUNE_KEYS
from knoblab.server.shape import KEYS as MACHINE_KEYS
from knoblab.spec import SECTION_KEYS, TOP_KEYS

ROOT = Path(__file__).resolve().parents[1]
PAGES = manual.pages()


def test_the_manual_builds_in_strict_mode(tmp_path: Path):
    built = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path)],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
    assert built.returncode == 0, built.stderr
    for page in ("reference/spec", "reference/commands", "reference/json", "how-sure"):
        assert (tmp_path / page / "index.html").is_file(), page


def _sections() -> list[Keys]:
    return [TOP_KEYS, *SECTION_KEYS.values(), TUNE_KEYS, MACHINE_KEYS,
            *(kind.keys for kind in server.KINDS.values()),
            *(kind.keys for kind in workloads.KINDS.values())]


def test_every_spec_key_has_its_row_with_what_it_means():
    page = PAGES["reference/spec.md"]
    for keys in _sections():
        for key in keys.each():
            rows = [line for line in page.splitlines() if line.startswith(f"| `{key.name}` |")]
            assert any(key.means.split("(")[0].strip().replace("|", "\\|") in row
                       for row in rows), key.name


def test_every_command_and_flag_is_in_the_reference():
    page = PAGES["reference/commands.md"]
    parser = build_parser()
    for name, _, sub in manual._commands(parser):
        assert f"## knoblab {name}\n" in page, name
        for action in sub._actions:
            for flag in action.option_strings:
                if flag not in ("-h", "--help"):
                    assert f"`{flag}`" in page.split(f"## knoblab {name}\n")[1], (name, flag)


def test_a_flag_without_help_stops_the_reference():
    parser = argparse.ArgumentParser()
    parser.add_argument("--quietly")
    with pytest.raises(manual.Undocumented, match="--quietly"):
        manual._flag_rows(parser, "example")


@pytest.mark.parametrize("document", [ResultsJSON, TuneJSON, ComparisonJSON, CaptureJSON])
def test_every_key_of_a_json_document_is_in_the_reference(document: type):
    page = PAGES["reference/json.md"]
    for record in manual._records(document):
        section = page.split(f"### {record.__name__}\n")[1].split("\n### ")[0]
        for f in dataclasses.fields(record):
            assert f"| `{json_key(f)}` |" in section, (record.__name__, json_key(f))


def test_the_generated_pages_are_in_the_navigation():
    nav = (ROOT / "mkdocs.yml").read_text()
    for path in manual.PAGES:
        assert path in nav, path


def test_a_document_key_that_says_nothing_stops_the_reference():
    @dataclasses.dataclass(frozen=True)
    class Document:
        explained: str  # what it holds
        # what this one holds,
        # said above it
        above: int
        silent: int

    @dataclasses.dataclass(frozen=True)
    class Said:
        explained: str  # what it holds
        # what this one holds,
        # said above it
        above: int

    table = "".join(manual._record_section(Said))
    assert "what it holds" in table and "what this one holds, said above it" in table
    with pytest.raises(manual.Undocumented, match="silent"):
        manual._record_section(Document)
