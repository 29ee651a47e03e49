"""The README's promises, checked against the program: its spec snippets are read by knoblab's
own spec loader, its commands by the real argument parser, the paths it names exist, and the
files it says knoblab writes are the ones the code writes. A promise that drifts from the
program turns this red."""

from __future__ import annotations

import argparse
import copy
import gzip
import re
import shlex
import tomllib
from pathlib import Path
from typing import Any

import pytest

from knoblab import capturing
from knoblab.cli import build_parser
from knoblab.report import exporters
from knoblab.search.options import TuneOptions
from knoblab.search.space import parse_space
from knoblab.search.study import beside
from knoblab.spec import parse_spec
from knoblab.store import Store, default_url

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")


def _fenced(text: str) -> tuple[list[tuple[str, str]], str]:
    """The fenced blocks (language, body) and the prose around them."""
    blocks: list[tuple[str, str]] = []
    prose: list[str] = []
    fence: str | None = None
    body: list[str] = []
    for line in text.splitlines():
        if fence is None and line.startswith("```"):
            fence, body = line[3:].strip(), []
        elif fence is not None and line.strip() == "```":
            blocks.append((fence, "\n".join(body) + "\n"))
            fence = None
        elif fence is not None:
            body.append(line)
        else:
            prose.append(line)
    assert fence is None, "a fenced block of the README is never closed"
    return blocks, "\n".join(prose)


BLOCKS, PROSE = _fenced(README)
TOML_BLOCKS = [body for lang, body in BLOCKS if lang == "toml"]
COMMAND_BLOCKS = [body for lang, body in BLOCKS if lang == ""]
# Inline code outside the fenced blocks; a span may go on over a line break (a space).
INLINE = [" ".join(span.split()) for span in re.findall(r"`([^`]+)`", PROSE)]

# A fragment is completed with what a spec needs to be whole: a workload, its data, something
# to measure. What the fragment gives is never overridden.
QUERY = {"kind": "query", "sql": "SELECT COUNT(*) FROM dt2"}
SWEEP = {"read_buffer_size": ["64K", "128K"]}


def completed(fragment: dict[str, Any]) -> dict[str, Any]:
    spec = copy.deepcopy(fragment)
    spec.setdefault("workload", dict(QUERY))
    if spec["workload"].get("kind", "query") == "query" and "dataset" not in spec:
        spec["dataset"] = {} if "rows" in spec.get("sweep", {}) else {"rows": 1000}
    if not any(key in spec for key in ("sweep", "step", "tune")):
        spec["sweep"] = copy.deepcopy(SWEEP)
    return spec


def _files_named(spec: dict[str, Any], folder: Path) -> None:
    """The dump and the captured log a snippet names, made small beside the spec."""
    dump = (spec.get("dataset") or {}).get("dump")
    if dump:
        with gzip.open(folder / dump, "wt") as out:
            out.write("-- MariaDB dump\nCREATE DATABASE shop;\nUSE shop;\n"
                      "CREATE TABLE t (id INT PRIMARY KEY);\n")
    log = (spec.get("workload") or {}).get("log")
    if log:
        (folder / log).write_text(
            "# Time: 240101 10:00:00\n# User@Host: app[app] @ localhost []\n"
            "# Thread_id: 5  Schema: shop  QC_hit: No\n"
            "# Query_time: 0.001  Lock_time: 0.0  Rows_sent: 1  Rows_examined: 1\n"
            "SET timestamp=1704103200;\nSELECT id FROM t WHERE id = 1;\n")


def _load(block: str, folder: Path):
    """The spec as knoblab run (and knoblab tune, its [tune] section) reads it."""
    spec = completed(tomllib.loads(block))
    _files_named(spec, folder)
    loaded = parse_spec(spec, block, default_name="readme", base_dir=folder)
    if loaded.tune is not None:
        TuneOptions.from_spec(loaded.tune, loaded.name)
    return loaded


def test_the_readme_has_spec_snippets():
    assert len(TOML_BLOCKS) >= 10


@pytest.mark.parametrize("block", TOML_BLOCKS, ids=lambda b: b.strip().splitlines()[0][:40])
def test_every_spec_snippet_is_accepted_by_the_spec_loader(block, tmp_path):
    """Each section and key is one the loader takes (the function knoblab run uses)."""
    _load(block, tmp_path)


@pytest.mark.server
@pytest.mark.parametrize("block", TOML_BLOCKS, ids=lambda b: b.strip().splitlines()[0][:40])
def test_every_setting_a_spec_snippet_names_is_the_servers(block, tmp_path, catalog):
    """The server settings in [server.config], [sweep], [[step]] and [tie], and their values,
    as a run checks them against the server's own catalog."""
    spec = _load(block, tmp_path)
    if not spec.searches:
        spec.points(catalog)
        return
    knobs = TuneOptions.from_spec(spec.tune or {}, spec.name).knobs
    if knobs != "auto":
        parse_space(knobs, catalog, spec.allow_durability_tradeoff)


# --------------------------------------------------------------- commands


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(action.choices)


PARSER = build_parser()
SUBCOMMANDS = _subparsers(PARSER)


def _commands(text: str) -> list[str]:
    """Each `knoblab SUBCOMMAND …` in `text`, up to a comment."""
    found = []
    for line in text.splitlines():
        line = line.split("  #")[0].strip()
        if line.startswith("#"):
            continue
        match = re.match(r"(?:\.venv/bin/)?knoblab\s+((?:--store\s+\S+\s+)?[a-z]+(?:\s.*)?)$",
                         line)
        if match:
            found.append(match.group(1).strip())
    return found


BLOCK_COMMANDS = [c for block in COMMAND_BLOCKS for c in _commands(block)]
INLINE_COMMANDS = [c for span in INLINE for c in _commands(span)]


def _options(parser: argparse.ArgumentParser) -> dict[str, argparse.Action]:
    return {flag: action for action in parser._actions for flag in action.option_strings}


def _check_words(command: str) -> None:
    """The subcommand exists, each --flag is one of its own (or the global --store), and each
    listed choice (a|b|c) is one it takes."""
    words = command.replace("[", " ").replace("]", " ").split()
    if words[0] == "--store":
        words = words[2:]
    sub = SUBCOMMANDS.get(words[0])
    assert sub is not None, f"knoblab {words[0]}: no such command ({command!r})"
    options = {**_options(PARSER), **_options(sub)}
    for word, following in zip(words, [*words[1:], ""], strict=True):
        if not word.startswith("--"):
            continue
        flag = word.split("=")[0]
        assert flag in options, f"knoblab {words[0]} has no {flag} ({command!r})"
        action = options[flag]
        if action.choices is not None and following and not following.startswith("-"):
            for choice in following.split("|"):
                assert choice in action.choices, f"{flag} takes no {choice} ({command!r})"


def test_the_readme_has_commands():
    assert {c.split()[0] for c in BLOCK_COMMANDS} >= {"run", "tune", "capture", "report",
                                                      "compare", "runs", "resume", "restore",
                                                      "knobs"}


@pytest.mark.parametrize("command", BLOCK_COMMANDS + INLINE_COMMANDS)
def test_every_readme_command_has_its_subcommand_and_flags(command):
    _check_words(command)


def _as_typed(command: str) -> list[str]:
    """A command block's line as a user would type it: optional parts in, the first of a|b."""
    words = [word.split("|")[0] for word in
             shlex.split(re.sub(r"[\[\]]", " ", command).replace("…", ""))]
    sub = SUBCOMMANDS.get(words[0], PARSER)
    options = {**_options(PARSER), **_options(sub)}
    for i, word in enumerate(words[:-1]):  # a placeholder of a number: a number
        action = options.get(word)
        if action is not None and action.type is int and words[i + 1].isupper():
            words[i + 1] = "1"
    return words


@pytest.mark.parametrize("command", BLOCK_COMMANDS)
def test_every_command_line_parses(command):
    """Whole lines of the command blocks, positional arguments included, parse as written."""
    PARSER.parse_args(_as_typed(command))


# --------------------------------------------------------------- paths in the repository

PATH = re.compile(r"(?:(?<=\./)|(?<![\w./~$-]))((?:examples|scripts|docs|knoblab|tests|benchmarks)/"
                  r"[\w/-]*(?:\.[\w-]+)*)")


def _made_by_the_readmes_scripts() -> set[str]:
    """Files a command block makes with the project's own scripts (a dump, a captured log)."""
    made = set()
    for block in COMMAND_BLOCKS:
        for line in block.splitlines():
            words = line.split()
            for i, word in enumerate(words):
                if word.startswith("scripts/") and (ROOT / word).is_file():
                    made |= {w for w in words[i + 1:] if not w.startswith("-")}
    return made


def test_every_path_the_readme_names_exists():
    made = _made_by_the_readmes_scripts()
    named = set(PATH.findall(README))
    assert "examples/read-buffer-scan.toml" in named
    missing = sorted(p for p in named if p not in made and not (ROOT / p).exists())
    assert not missing, f"the README names paths the repository lacks: {missing}"


# --------------------------------------------------------------- files knoblab writes


def _study_file(tmp_path: Path) -> str:
    store = Store(default_url(tmp_path))
    return Path(beside(store).removeprefix("sqlite:///")).name


def _study_file_beside(tmp_path: Path, stem: str) -> str:
    folder = tmp_path / stem
    folder.mkdir()
    store = Store(f"sqlite:///{folder / stem}.sqlite")
    return Path(beside(store).removeprefix("sqlite:///")).name


def _png_written(name: str) -> bool:
    stem = re.escape(name.removesuffix(".png"))
    source = "\n".join(p.read_text() for p in (ROOT / "knoblab" / "report").glob("*.py"))
    return re.search(rf"[\"']{stem}(\{{[^}}]*\}})?\.png[\"']", source) is not None


# Names the README gives to files the user makes or names, not knoblab's outputs.
USERS_FILES = {"prod.toml", "my.cnf"}


def test_every_file_the_readme_says_knoblab_writes_is_one_it_writes(tmp_path):
    store_file = Path(default_url(tmp_path).removeprefix("sqlite:///")).name
    study_file = _study_file(tmp_path)
    written = {*exporters.file_names(), capturing.LOG, capturing.DUMP, capturing.SPEC,
               capturing.SUMMARY, store_file, study_file}
    named = {n for span in INLINE
             for n in re.findall(r"^(\w[\w.-]*\.(?:html|md|csv|cnf|json|png|sqlite|log|zst))$",
                                 span)}
    # a study's file beside a store the README names
    written |= {_study_file_beside(tmp_path, n.removesuffix("-tune.sqlite"))
                for n in named if n.endswith("-tune.sqlite")}
    assert {"report.html", "recommended.cnf", "result.json", "measurements.csv"} <= named
    unknown = sorted(n for n in named - written - USERS_FILES
                     if not (n.endswith(".png") and _png_written(n)))
    assert not unknown, f"the README names files knoblab does not write: {unknown}"


def test_the_readme_names_the_study_file_the_code_writes(tmp_path):
    study_file = _study_file(tmp_path)
    assert study_file == "knoblab-tune.sqlite"
    assert f"`{study_file}`" in README
    assert f"`{_study_file_beside(tmp_path, 'runs')}`" in README


def test_the_readme_names_the_default_report_folders():
    from knoblab.studies import report_folder

    assert f"`{report_folder('NAME')}/`" in README


# --------------------------------------------------------------- what the scripts install


def _installed_by_setup() -> set[str]:
    return set(re.findall(r"missing\+=\(([\w.-]+)\)", (ROOT / "scripts" / "setup").read_text()))


def test_the_readme_says_what_setup_installs():
    packages = _installed_by_setup()
    assert {"mariadb-server", "chromium", "chromium-driver"} <= packages
    unsaid = sorted(p for p in packages if f"`{p}`" not in README)
    assert not unsaid, f"scripts/setup installs {unsaid}, which the README does not say"


def _setup_packages() -> tuple[set[str], set[str]]:
    """What scripts/setup installs: always, and with --browser (its `if` block); the packages
    it adds to `missing` by name or through a `for` loop over names."""
    always: set[str] = set()
    browser: set[str] = set()
    into = always
    for line in (ROOT / "scripts" / "setup").read_text().splitlines():
        if line.startswith('if [ "${1:-}" = "--browser" ]'):
            into = browser
        elif line == "fi":
            into = always
        into.update(re.findall(r"missing\+=\(([\w.-]+)\)", line))
        if loop := re.match(r"\s*for library in ([\w. -]+);", line):
            into.update(loop.group(1).split())
    return always, browser


def _named_between(text: str, start: str, end: str) -> set[str]:
    """The names in backquotes between `start` and `end`, asides in parentheses left out."""
    span = text[text.index(start):]
    span = span[:span.index(end)]
    return set(re.findall(r"`([^`]+)`", re.sub(r"\([^()]*\)", "", span)))


def test_the_readme_names_exactly_what_setup_installs():
    """No package the script does not install (a build chain for a client that is gone), none
    it installs left out; for the plain set-up and for --browser alike."""
    always, browser = _setup_packages()
    section = " ".join(README[README.index("## Set-up"):README.index("## Use")].split())
    assert _named_between(section, "which installs from Debian", "a virtualenv") == always
    assert _named_between(section, "which also installs", "and unpacks") == browser


def test_the_readme_says_scripts_test_installs_the_browser_and_why():
    assert "setup --browser" in (ROOT / "scripts" / "test").read_text()
    section = README[README.index("## Set-up"):README.index("## Use")]
    assert "`./scripts/test` runs it with `--browser`" in section
    assert "Chromium to check how they render" in section


# --------------------------------------------------------------- sections the prose names


def _a_section_knoblab_reads(name: str) -> bool:
    """`[a]`, `[[a]]` or `[a.b]`: a table a spec may hold, by the keys its readers take."""
    from knoblab.search.options import KEYS as TUNE_KEYS
    from knoblab.spec import SECTION_KEYS, TOP_KEYS
    from knoblab.workloads.sysbench import SysbenchWorkload

    head, _, sub = name.strip("[]").partition(".")
    tables = {"server": SECTION_KEYS["server"], "tune": TUNE_KEYS,
              "workload": SysbenchWorkload.keys}
    return head in TOP_KEYS and (not sub or sub in tables.get(head, set()))


def test_every_section_the_readme_names_is_one_a_spec_has():
    named = {m for span in INLINE for m in re.findall(r"^\[\[?[a-z_.]+\]\]?", span)}
    named.discard("[mysqld]")  # recommended.cnf's section, of the server's option file
    assert "[server.config]" in named
    unknown = sorted(n for n in named if not _a_section_knoblab_reads(n))
    assert not unknown, f"the README names sections no spec has: {unknown}"
